// Internal: a torch.save checkpoint read and checked — everything but its tensor data.
//
//   pth::Checkpoint c = pth::read_checkpoint(mapped_bytes, "model.pth", options);
//   for (const pth::Entry& e : c.tensors) ...   // selected, flattened, bounds-checked
//
// Steps: recognise the file (legacy pre-1.6 format, TorchScript, plain pickle: refused with
// UnsupportedError), parse the zip (zip_reader.h), check the archive's layout and small
// records, run data.pkl through the restricted pickle machine (pickle.h), check every
// storage against its record and every tensor against its storage, select options.key,
// flatten to dotted names, apply options.strip_prefix, render non-tensor values as JSON.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "convert/pickle.h"
#include "tensoracle/convert.h"
#include "tensoracle/safetensors.h"

namespace tensoracle::pth {

// A tensor selected for output.
struct Entry {
  std::string name;   // output name
  std::string path;   // its dotted path in the checkpoint (before strip_prefix)
  const Tensor* tensor = nullptr;
  std::uint64_t numel = 0;
  std::uint64_t nbytes = 0;  // numel × itemsize of the tensor's dtype
  bool contiguous = true;    // its elements are consecutive in the storage, in order
};

struct Checkpoint {
  std::string file;
  std::string archive;  // top-level folder
  std::string byteorder = "little";
  int version = 0;      // the "version" record, 0 if absent
  Unpickled pickle;
  std::vector<Entry> tensors;                               // in checkpoint order
  std::vector<std::pair<std::string, std::string>> values;  // output key -> JSON
  std::map<std::string, std::vector<std::string>> shared;   // record -> names (two or more)
};

// `file` must outlive the result (storages point into it). Throws FormatError,
// UnsafeCheckpointError, UnsupportedError or InvalidArgument as convert.h says.
Checkpoint read_checkpoint(std::span<const std::byte> file, const std::string& display_name,
                           const ConvertOptions& options);

// The output dtype of a tensor (after options.dtype); nullopt when safetensors cannot hold it.
std::optional<safetensors::Dtype> output_dtype(const Tensor& t, ConvertDtype cast) noexcept;
// The output shape (float4_e2m1fn_x2: last dimension doubled).
std::vector<std::int64_t> output_shape(const Tensor& t);
// Throws UnsupportedError naming the tensor when convert_pth cannot write it.
void check_writable(const Checkpoint& c, const Entry& e, ConvertDtype cast);
// The metadata convert_pth writes: "format", the values, "tensoracle.shared_storage".
safetensors::Metadata output_metadata(const Checkpoint& c);

}  // namespace tensoracle::pth
