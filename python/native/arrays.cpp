#include "arrays.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "tensoracle/errors.h"

namespace nb = nanobind;

namespace tensoracle::python {

namespace {

nb::object numpy() { return nb::module_::import_("numpy"); }

// NumPy dtype names (ml_dtypes registers bfloat16 and float8_e4m3fn) per DataType value.
constexpr const char* kDtypeNames[kDataTypeCount] = {"float32", "float16", "int8",          "int32", "bool",
                                                     "uint8",   "float8_e4m3fn", "bfloat16", "int64"};

}  // namespace

nb::object numpy_dtype(DataType t) {
  nb::module_::import_("ml_dtypes");
  return numpy().attr("dtype")(kDtypeNames[static_cast<int>(t)]);
}

ArrayView array_view(nb::handle obj, const std::string& what) {
  nb::module_::import_("ml_dtypes");
  nb::object np = numpy();
  nb::object original = np.attr("asarray")(obj);
  // Shape first: ascontiguousarray turns 0-d arrays into 1-d ones.
  auto shape = nb::cast<std::vector<std::int64_t>>(original.attr("shape"));
  nb::object arr = np.attr("ascontiguousarray")(original);
  std::string name = nb::cast<std::string>(nb::str(arr.attr("dtype").attr("name")));
  std::optional<DataType> type;
  for (int i = 0; i < kDataTypeCount; ++i)
    if (name == kDtypeNames[i]) type = static_cast<DataType>(i);
  if (!type)
    throw InvalidArgument("[python] " + what + ": NumPy dtype " + name +
                          " has no tensoracle type (use float32, float16, bfloat16, float8_e4m3fn, int8, int32, "
                          "int64, uint8 or bool)");
  if (nb::cast<std::string>(nb::str(arr.attr("dtype").attr("byteorder"))) == ">")
    arr = arr.attr("astype")(arr.attr("dtype").attr("newbyteorder")("<"));
  nb::object flat = arr.attr("reshape")(-1).attr("view")(np.attr("uint8"));
  auto bytes = nb::cast<nb::ndarray<const std::uint8_t, nb::ndim<1>, nb::device::cpu>>(flat);
  return {flat, *type, Dims(std::span<const std::int64_t>(shape)), bytes.data(), bytes.size()};
}

nb::object to_numpy(const HostTensor& t) {
  auto* owner = new std::shared_ptr<std::byte[]>(t.data);
  nb::capsule cap(owner, [](void* p) noexcept { delete static_cast<std::shared_ptr<std::byte[]>*>(p); });
  std::size_t shape[1] = {t.nbytes};
  nb::object flat = nb::cast(nb::ndarray<nb::numpy, std::uint8_t, nb::ndim<1>>(
      reinterpret_cast<std::uint8_t*>(t.data.get()), 1, shape, cap));
  nb::object shape_tuple = nb::cast(t.dims);
  return flat.attr("view")(numpy_dtype(t.type)).attr("reshape")(shape_tuple);
}

}  // namespace tensoracle::python

namespace nanobind::detail {

bool type_caster<tensoracle::Dims>::from_python(handle src, uint8_t, cleanup_list*) noexcept {
  try {
    if (!PySequence_Check(src.ptr()) || PyUnicode_Check(src.ptr()) || PyBytes_Check(src.ptr())) return false;
    std::vector<std::int64_t> d;
    for (handle h : src) {
      if (!PyLong_Check(h.ptr()) && !PyIndex_Check(h.ptr())) return false;
      d.push_back(nb::cast<std::int64_t>(nb::int_(h)));
    }
    if (d.size() > static_cast<std::size_t>(tensoracle::Dims::kMaxRank)) return false;
    value = tensoracle::Dims(std::span<const std::int64_t>(d));
    return true;
  } catch (...) {
    PyErr_Clear();
    return false;
  }
}

handle type_caster<tensoracle::Dims>::from_cpp(const tensoracle::Dims& d, rv_policy, cleanup_list*) noexcept {
  PyObject* t = PyTuple_New(d.rank());
  if (!t) return handle();
  for (int i = 0; i < d.rank(); ++i) PyTuple_SetItem(t, i, PyLong_FromLongLong(d[i]));
  return t;
}

}  // namespace nanobind::detail
