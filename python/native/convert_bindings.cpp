// Bindings of tensoracle/convert.h: convert_pth and inspect_pth, returning plain dicts.
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "tensoracle/convert.h"

namespace nb = nanobind;

namespace tensoracle::python {

namespace {

ConvertOptions options(const std::optional<std::string>& key, const std::optional<std::string>& strip_prefix,
                       const std::string& dtype, std::uint64_t max_pickle_memory) {
  ConvertOptions o;
  o.key = key.value_or("");
  o.strip_prefix = strip_prefix.value_or("");
  auto d = parse_convert_dtype(dtype);
  if (!d) throw InvalidArgument("[convert] dtype must be 'keep', 'float32', 'float16' or 'bfloat16', not '" + dtype + "'");
  o.dtype = *d;
  o.max_pickle_memory = max_pickle_memory;
  return o;
}

nb::dict report_dict(const ConvertReport& r) {
  nb::dict d;
  d["tensors"] = r.tensors;
  d["tensor_bytes"] = r.tensor_bytes;
  d["metadata_entries"] = r.metadata_entries;
  d["shared_storages"] = r.shared_storages;
  d["views_made_contiguous"] = r.views_made_contiguous;
  d["byte_swapped"] = r.byte_swapped;
  return d;
}

nb::dict info_dict(const CheckpointInfo& c) {
  nb::dict d;
  d["file"] = c.file;
  d["file_size"] = c.file_size;
  d["archive"] = c.archive;
  d["byteorder"] = c.byteorder;
  d["format_version"] = c.format_version;
  d["pickle_protocol"] = c.pickle_protocol;
  d["storages"] = c.storages;
  d["storage_bytes"] = c.storage_bytes;
  nb::list tensors;
  for (const auto& t : c.tensors) {
    nb::dict x;
    x["name"] = t.name;
    x["torch_dtype"] = t.torch_dtype;
    x["dtype"] = t.dtype ? nb::object(nb::str(std::string(safetensors::dtype_name(*t.dtype)).c_str())) : nb::none();
    x["shape"] = nb::tuple(nb::cast(t.shape));
    x["stride"] = nb::tuple(nb::cast(t.stride));
    x["storage_offset"] = t.storage_offset;
    x["storage"] = t.storage;
    x["nbytes"] = t.nbytes;
    x["contiguous"] = t.contiguous;
    x["parameter"] = t.parameter;
    x["requires_grad"] = t.requires_grad;
    x["shares_storage_with"] = nb::cast(t.shares_storage_with);
    tensors.append(x);
  }
  d["tensors"] = tensors;
  nb::dict values;
  for (const auto& [k, v] : c.values) values[k.c_str()] = v;
  d["values"] = values;
  return d;
}

}  // namespace

void bind_convert(nb::module_& m) {
  m.def(
      "convert_pth",
      [](const std::filesystem::path& src, const std::filesystem::path& dst, const std::optional<std::string>& key,
         const std::optional<std::string>& strip_prefix, const std::string& dtype, bool overwrite,
         std::uint64_t max_pickle_memory, std::optional<nb::callable> progress) {
        ConvertOptions o = options(key, strip_prefix, dtype, max_pickle_memory);
        o.overwrite = overwrite;
        if (progress) {
          // A plain pointer: the options are copied while the GIL is released, and copying the
          // callable itself would touch its reference count. `progress` outlives the call.
          const nb::callable* cb = &*progress;
          o.progress = [cb](const ConvertProgress& p) {
            nb::gil_scoped_acquire gil;
            (*cb)(p.bytes_done, p.bytes_total, p.tensors_done, p.tensors_total);
          };
        }
        ConvertReport r;
        {
          nb::gil_scoped_release release;  // gigabytes of I/O: let other Python threads run
          r = convert_pth(src, dst, o);
        }
        return report_dict(r);
      },
      nb::arg("src"), nb::arg("dst"), nb::kw_only(), nb::arg("key") = nb::none(),
      nb::arg("strip_prefix") = nb::none(), nb::arg("dtype") = "keep", nb::arg("overwrite") = false,
      nb::arg("max_pickle_memory") = ConvertOptions{}.max_pickle_memory, nb::arg("progress") = nb::none(),
      "Convert a torch.save checkpoint to a safetensors file without torch and without running "
      "its pickle code (see tensoracle/convert.h). Returns a report dict; progress, if given, is "
      "called as progress(bytes_done, bytes_total, tensors_done, tensors_total).");
  m.def(
      "inspect_pth",
      [](const std::filesystem::path& src, const std::optional<std::string>& key,
         const std::optional<std::string>& strip_prefix, const std::string& dtype, std::uint64_t max_pickle_memory) {
        ConvertOptions o = options(key, strip_prefix, dtype, max_pickle_memory);
        CheckpointInfo info;
        {
          nb::gil_scoped_release release;
          info = inspect_pth(src, o);
        }
        return info_dict(info);
      },
      nb::arg("src"), nb::kw_only(), nb::arg("key") = nb::none(), nb::arg("strip_prefix") = nb::none(),
      nb::arg("dtype") = "keep", nb::arg("max_pickle_memory") = ConvertOptions{}.max_pickle_memory,
      "List what convert_pth would write (tensors with dtypes, shapes, storages and sharing; "
      "non-tensor values as JSON), reading no tensor data.");
}

}  // namespace tensoracle::python
