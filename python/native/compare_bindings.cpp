// tensoracle.compare_outputs and OutputComparison. Arrays arrive as NumPy arrays (any dtype
// NumPy and ml_dtypes name, including bfloat16 and the fp8 types), as objects NumPy can
// read (buffer protocol, __array__), or as DLPack producers on the CPU (torch tensors,
// including bfloat16 ones NumPy cannot hold). The comparison runs without the GIL.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "tensoracle/compare.h"
#include "tensoracle/errors.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace tensoracle::python {

namespace {

using safetensors::Dtype;

struct Input {
  nb::object keep;                                // a NumPy array owning or viewing the data
  std::optional<nb::ndarray<nb::ro>> dlpack;      // or the imported DLPack tensor
  ArrayView view;
};

nb::module_ numpy() {
  nb::module_::import_("ml_dtypes");  // registers bfloat16 and the fp8 dtypes by name
  return nb::module_::import_("numpy");
}

std::optional<Dtype> dtype_named(const std::string& name) {
  for (int i = 0; i < safetensors::kDtypeCount; ++i) {
    auto d = static_cast<Dtype>(i);
    if (numpy_name(d) == name) return d;
  }
  return std::nullopt;
}

std::string py_type_name(nb::handle obj) { return nb::cast<std::string>(nb::str(nb::handle(obj.type()).attr("__name__"))); }

Input from_numpy(nb::object arr, const char* what) {
  nb::module_ np = numpy();
  nb::object dtype = arr.attr("dtype");
  std::string name = nb::cast<std::string>(nb::str(dtype.attr("name")));
  std::optional<Dtype> d = dtype_named(name);
  if (!d)
    throw InvalidArgument(std::string("[compare] ") + what + ": NumPy dtype " + name +
                          " is not supported (float64/32/16, bfloat16, the ml_dtypes fp8 types, integers and "
                          "bool are)");
  if (nb::cast<std::string>(nb::str(dtype.attr("byteorder"))) == ">")
    arr = arr.attr("astype")(dtype.attr("newbyteorder")("<"));
  if (!nb::cast<bool>(arr.attr("flags").attr("c_contiguous"))) arr = np.attr("ascontiguousarray")(arr);
  Input in;
  in.view.dtype = *d;
  in.view.shape = nb::cast<std::vector<std::int64_t>>(arr.attr("shape"));
  nb::object data = arr.attr("__array_interface__")["data"];
  in.view.data = reinterpret_cast<const void*>(nb::cast<std::uintptr_t>(data[0]));
  in.keep = std::move(arr);
  return in;
}

std::optional<Dtype> dlpack_dtype(nb::dlpack::dtype t) {
  using C = nb::dlpack::dtype_code;
  if (t.lanes != 1) return std::nullopt;
  auto code = static_cast<C>(t.code);
  switch (code) {
    case C::Int: return t.bits == 8 ? Dtype::I8 : t.bits == 16 ? Dtype::I16 : t.bits == 32 ? Dtype::I32 : t.bits == 64 ? std::optional(Dtype::I64) : std::nullopt;
    case C::UInt: return t.bits == 8 ? Dtype::U8 : t.bits == 16 ? Dtype::U16 : t.bits == 32 ? Dtype::U32 : t.bits == 64 ? std::optional(Dtype::U64) : std::nullopt;
    case C::Float: return t.bits == 16 ? Dtype::F16 : t.bits == 32 ? Dtype::F32 : t.bits == 64 ? std::optional(Dtype::F64) : std::nullopt;
    case C::Bfloat: return t.bits == 16 ? std::optional(Dtype::BF16) : std::nullopt;
    case C::Bool: return t.bits == 8 ? std::optional(Dtype::BOOL) : std::nullopt;
    case C::Float8_E4M3FN: return Dtype::F8_E4M3;
    case C::Float8_E5M2: return Dtype::F8_E5M2;
    case C::Float8_E4M3FNUZ: return Dtype::F8_E4M3FNUZ;
    case C::Float8_E5M2FNUZ: return Dtype::F8_E5M2FNUZ;
    default: return std::nullopt;
  }
}

// A DLPack tensor, zero copy when it is on the CPU, C-contiguous and of a dtype we read;
// nullopt when NumPy should try instead.
std::optional<Input> from_dlpack(nb::handle obj, const char* what) {
  nb::ndarray<nb::ro> a;
  if (!nb::try_cast(obj, a)) return std::nullopt;
  if (a.device_type() != nb::device::cpu::value)
    throw InvalidArgument(std::string("[compare] ") + what + " (" + py_type_name(obj) + ") is on DLPack device type " +
                          std::to_string(a.device_type()) + " (2 is CUDA), not the CPU: copy it to host memory "
                          "first (e.g. tensor.cpu())");
  std::optional<Dtype> d = dlpack_dtype(a.dtype());
  if (!d) return std::nullopt;
  std::int64_t expected = 1;
  for (std::size_t k = a.ndim(); k-- > 0;) {
    if (a.shape(k) != 1 && a.stride(k) != expected) return std::nullopt;  // not row-major
    expected *= static_cast<std::int64_t>(a.shape(k));
  }
  Input in;
  in.view.dtype = *d;
  for (std::size_t k = 0; k < a.ndim(); ++k) in.view.shape.push_back(static_cast<std::int64_t>(a.shape(k)));
  in.view.data = a.data();
  in.dlpack = std::move(a);
  return in;
}

// "TypeError: message", without the traceback nb::python_error::what() carries.
std::string short_error(const nb::python_error& e) {
  return nb::cast<std::string>(nb::str(nb::handle(e.type()).attr("__name__"))) + ": " +
         nb::cast<std::string>(nb::str(e.value()));
}

Input to_input(nb::handle obj, const char* what) {
  nb::module_ np = numpy();
  if (nb::isinstance(obj, np.attr("ndarray"))) return from_numpy(nb::borrow(obj), what);
  const bool dlpack = nb::hasattr(obj, "__dlpack__");
  if (dlpack)
    if (std::optional<Input> in = from_dlpack(obj, what)) return std::move(*in);
  nb::object arr;
  try {
    // Strided DLPack tensors of NumPy's dtypes, then anything NumPy reads (buffers, __array__).
    arr = dlpack && !nb::hasattr(obj, "__array__") ? np.attr("from_dlpack")(obj) : np.attr("asarray")(obj);
  } catch (nb::python_error& e) {
    throw InvalidArgument(std::string("[compare] ") + what + " (" + py_type_name(obj) +
                          ") cannot be read as an array: " + short_error(e) +
                          (dlpack ? " (a DLPack tensor must be on the CPU; one NumPy cannot hold, such as "
                                    "bfloat16, must also be contiguous)"
                                  : ""));
  }
  if (nb::cast<std::string>(nb::str(arr.attr("dtype").attr("kind"))) == "O")
    throw InvalidArgument(std::string("[compare] ") + what + " (" + py_type_name(obj) +
                          ") is not a numeric array (NumPy reads it as Python objects)");
  return from_numpy(std::move(arr), what);
}

nb::object dtype_object(Dtype d) { return numpy().attr("dtype")(std::string(numpy_name(d))); }

nb::tuple shape_tuple(const OutputComparison& c) { return nb::tuple(nb::cast(c.shape)); }

nb::object or_none(const std::optional<double>& v) { return v ? nb::object(nb::float_(*v)) : nb::none(); }
nb::object or_none(const std::optional<std::int64_t>& v) { return v ? nb::object(nb::int_(*v)) : nb::none(); }

nb::dict as_dict(const OutputComparison& c) {
  nb::dict d;
  d["shape"] = shape_tuple(c);
  d["dtype"] = std::string(numpy_name(c.dtype));
  d["element_count"] = c.element_count;
  d["candidate_nonfinite_count"] = c.candidate_nonfinite_count;
  d["reference_nonfinite_count"] = c.reference_nonfinite_count;
  d["max_absolute_error"] = or_none(c.max_absolute_error);
  d["relative_l2_error"] = or_none(c.relative_l2_error);
  d["cosine_similarity"] = or_none(c.cosine_similarity);
  d["outside_tolerance_count"] = or_none(c.outside_tolerance_count);
  d["outside_tolerance_fraction"] = or_none(c.outside_tolerance_fraction);
  return d;
}

}  // namespace

void bind_compare(nb::module_& m) {
  nb::class_<OutputComparison>(
      m, "OutputComparison",
      "What compare_outputs measured. Metrics that do not apply are None: max_absolute_error, "
      "relative_l2_error and cosine_similarity need floating arrays without NaN or inf and at least one "
      "element (relative_l2_error also a reference norm > 0, cosine_similarity both norms > 0); "
      "outside_tolerance_count and outside_tolerance_fraction need both atol and rtol and no NaN or inf "
      "(fraction: at least one element).")
      .def_prop_ro("shape", &shape_tuple, "the arrays' shape (a tuple)")
      .def_prop_ro("dtype", [](const OutputComparison& c) { return dtype_object(c.dtype); },
                   "the arrays' NumPy dtype")
      .def_ro("element_count", &OutputComparison::element_count)
      .def_ro("candidate_nonfinite_count", &OutputComparison::candidate_nonfinite_count,
              "NaN and ±inf elements in the candidate")
      .def_ro("reference_nonfinite_count", &OutputComparison::reference_nonfinite_count,
              "NaN and ±inf elements in the reference")
      .def_ro("max_absolute_error", &OutputComparison::max_absolute_error, "max |c - r|, or None")
      .def_ro("relative_l2_error", &OutputComparison::relative_l2_error, "‖c - r‖₂ / ‖r‖₂, or None")
      .def_ro("cosine_similarity", &OutputComparison::cosine_similarity,
              "c·r / (‖c‖₂ ‖r‖₂) clamped to [-1, 1], or None")
      .def_ro("outside_tolerance_count", &OutputComparison::outside_tolerance_count,
              "elements where not |c - r| <= atol + rtol·|r|, or None")
      .def_ro("outside_tolerance_fraction", &OutputComparison::outside_tolerance_fraction,
              "outside_tolerance_count / element_count, or None")
      .def("to_dict", &as_dict, "the fields as a dict (dtype as its name), e.g. for json.dumps")
      .def("__repr__", [](const OutputComparison& c) {
        nb::dict d = as_dict(c);
        std::string s = "OutputComparison(";
        bool first = true;
        for (auto [k, v] : d) {
          s += (first ? "" : ", ") + nb::cast<std::string>(nb::str(k)) + "=" + nb::cast<std::string>(nb::repr(v));
          first = false;
        }
        return s + ")";
      });

  m.def(
      "compare_outputs",
      [](nb::handle candidate, nb::handle reference, std::optional<double> atol, std::optional<double> rtol) {
        Input c = to_input(candidate, "candidate");
        Input r = to_input(reference, "reference");
        CompareOptions o;
        o.atol = atol;
        o.rtol = rtol;
        nb::gil_scoped_release unlocked;
        return compare_outputs(c.view, r.view, o);
      },
      "candidate"_a, "reference"_a, "atol"_a = nb::none(), "rtol"_a = nb::none(),
      "Compare a candidate output array with a reference array of the same shape and dtype.\n\n"
      "Both are NumPy arrays (ml_dtypes' bfloat16 and fp8 included), objects NumPy can read, or DLPack\n"
      "tensors on the CPU. Every metric is computed in float64 in one multi-threaded pass; see\n"
      "OutputComparison for which are None when. outside_tolerance_* count the elements where\n"
      "not |c - r| <= atol + rtol*|r| (numpy.isclose's rule), only when both atol and rtol are given.\n\n"
      "Raises InvalidArgument (a ValueError) for different shapes or dtypes, negative or NaN\n"
      "tolerances, arrays not on the CPU; UnsupportedError for dtypes without comparable values.");
}

}  // namespace tensoracle::python
