// Bindings of tensoracle/safetensors.h. Tensors cross as 1-D uint8 NumPy arrays over the
// mapped bytes (zero copy); tensoracle/safetensors.py gives them their dtype and shape.
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "tensoracle/safetensors.h"

namespace nb = nanobind;
namespace st = tensoracle::safetensors;

namespace tensoracle::python {

namespace {

using ByteArray = nb::ndarray<nb::numpy, std::uint8_t, nb::ndim<1>>;
using ReadOnlyByteArray = nb::ndarray<nb::numpy, const std::uint8_t, nb::ndim<1>>;
// What save_file accepts: any C-contiguous CPU buffer of bytes (callers pass arr.view(uint8)).
using InBytes = nb::ndarray<const std::uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// An open file plus what must outlive it (the Python bytes object it was parsed from).
struct PyFile {
  st::File file;
  nb::object keepalive;
  bool writable;
};

nb::object byte_array(const PyFile& self, const st::TensorInfo& info) {
  auto bytes = self.file.view(info).bytes();
  // The capsule owns a copy of the File handle (and the keepalive), so the mapping lives as
  // long as any array made from it.
  auto* owner = new PyFile(self);
  nb::capsule cap(owner, [](void* p) noexcept { delete static_cast<PyFile*>(p); });
  std::size_t shape[1] = {bytes.size()};
  auto* data = const_cast<std::uint8_t*>(reinterpret_cast<const std::uint8_t*>(bytes.data()));
  if (self.writable) return nb::cast(ByteArray(data, 1, shape, cap));
  return nb::cast(ReadOnlyByteArray(data, 1, shape, cap));
}

using Entry = std::tuple<std::string, std::string, std::vector<std::int64_t>, InBytes>;

std::vector<st::TensorData> to_tensors(const std::vector<Entry>& entries) {
  std::vector<st::TensorData> out;
  out.reserve(entries.size());
  for (const auto& [name, dtype, shape, data] : entries) {
    auto d = st::parse_dtype(dtype);
    if (!d) throw InvalidArgument("[safetensors] tensor '" + name + "': unknown dtype '" + dtype + "'");
    out.push_back({name, *d, shape,
                   std::span(reinterpret_cast<const std::byte*>(data.data()), data.size())});
  }
  return out;
}

// F4 (two e2m1 values per byte, the first in the low nibble) <-> one value per byte, as the
// ml_dtypes float4_e2m1fn type stores them.
nb::bytes unpack_f4(InBytes packed) {
  std::string out(packed.size() * 2, '\0');
  const std::uint8_t* p = packed.data();
  for (std::size_t i = 0; i < packed.size(); ++i) {
    out[2 * i] = static_cast<char>(p[i] & 0x0F);
    out[2 * i + 1] = static_cast<char>(p[i] >> 4);
  }
  return nb::bytes(out.data(), out.size());
}

nb::bytes pack_f4(InBytes unpacked) {
  if (unpacked.size() % 2 != 0)
    throw InvalidArgument("[safetensors] an F4 tensor needs an even number of elements (two per byte), got " +
                          std::to_string(unpacked.size()));
  std::string out(unpacked.size() / 2, '\0');
  const std::uint8_t* p = unpacked.data();
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<char>((p[2 * i] & 0x0F) | ((p[2 * i + 1] & 0x0F) << 4));
  return nb::bytes(out.data(), out.size());
}

}  // namespace

void bind_safetensors(nb::module_& m) {
  nb::class_<PyFile>(m, "SafetensorsFile",
                     "A validated, memory-mapped safetensors file (see tensoracle.safetensors)")
      .def_static(
          "open",
          [](const std::string& path, bool writable) {
            nb::gil_scoped_release release;
            auto mode = writable ? st::MapMode::kCopyOnWrite : st::MapMode::kReadOnly;
            return PyFile{st::File::open(path, mode), nb::object(), writable};
          },
          nb::arg("path"), nb::arg("copy_on_write") = true)
      .def_static(
          "parse",
          [](nb::bytes data, const std::string& name) {
            auto span = std::span(static_cast<const std::byte*>(data.data()), data.size());
            return PyFile{st::File::parse(span, name), data, false};
          },
          nb::arg("data"), nb::arg("name") = "<bytes>")
      .def_prop_ro("name", [](const PyFile& f) { return f.file.display_name(); })
      .def_prop_ro("file_size", [](const PyFile& f) { return f.file.file_size(); })
      .def_prop_ro("header_size", [](const PyFile& f) { return f.file.header_size(); })
      .def("names", [](const PyFile& f) {
        std::vector<std::string> out;
        for (const auto& t : f.file.tensors()) out.push_back(t.name);
        return out;
      }, "Tensor names in data-offset order")
      .def("metadata", [](const PyFile& f) -> std::optional<st::Metadata> {
        if (!f.file.has_metadata()) return std::nullopt;
        return f.file.metadata();
      })
      .def("contains", [](const PyFile& f, const std::string& name) { return f.file.find(name) != nullptr; })
      .def("info", [](const PyFile& f, const std::string& name) {
        const auto& t = f.file.at(name);
        return std::make_tuple(std::string(st::dtype_name(t.dtype)), t.shape, t.begin, t.end);
      }, "(dtype name, shape, begin, end) of a tensor; offsets relative to the data section")
      .def("tensor_bytes", [](const PyFile& f, const std::string& name) {
        return byte_array(f, f.file.at(name));
      }, "The tensor's bytes as a 1-D uint8 array over the mapping (no copy)");

  m.def(
      "save_file",
      [](const std::string& path, const std::vector<Entry>& entries,
         const std::optional<st::Metadata>& metadata) {
        auto tensors = to_tensors(entries);
        nb::gil_scoped_release release;
        st::save_file(path, tensors, metadata);
      },
      nb::arg("path"), nb::arg("entries"), nb::arg("metadata").none());
  m.def(
      "serialize",
      [](const std::vector<Entry>& entries, const std::optional<st::Metadata>& metadata) {
        auto bytes = st::serialize(to_tensors(entries), metadata);
        return nb::bytes(bytes.data(), bytes.size());
      },
      nb::arg("entries"), nb::arg("metadata").none());
  m.def("unpack_f4", &unpack_f4);
  m.def("pack_f4", &pack_f4);
}

}  // namespace tensoracle::python
