// tensoracle/convert.h — convert PyTorch .pth checkpoints to safetensors, without torch and
// without running any of the checkpoint's pickle code.
//
//   tensoracle::ConvertOptions options;
//   options.key = "state_dict";                       // convert this sub-dict only
//   options.strip_prefix = "module.";                 // DataParallel's prefix
//   options.dtype = tensoracle::ConvertDtype::kBFloat16;
//   tensoracle::ConvertReport r =
//       tensoracle::convert_pth("model.pth", "model.safetensors", options);
//
//   // What is inside, without converting (nothing is written):
//   tensoracle::CheckpointInfo info = tensoracle::inspect_pth("model.pth");
//   for (const auto& t : info.tensors) std::cout << t.name << " " << t.torch_dtype << "\n";
//
// The input is the zip archive torch.save writes (torch 1.6 and later): a folder of any name
// holding data.pkl (the pickled object), data/<key> (one record per storage), byteorder,
// version and a few small records. data.pkl is interpreted by a restricted pickle machine
// that knows torch's tensor rebuilders, storages, dtypes, devices and plain containers and
// nothing else: a checkpoint that asks for any other global, or for an opcode that could
// call code, is refused with UnsafeCheckpointError before anything is run or written.
//
// Output (a safetensors file, written atomically: a temporary file, fsync, rename):
//   - every tensor under its dotted key ("model.layers.0.weight"); nested dicts, and lists
//     or tuples that hold tensors, are flattened (list items by index);
//   - non-contiguous views written contiguous; big-endian storages byte-swapped; torch's
//     conjugate and negative bits applied;
//   - tensors that share a storage are each written in full (safetensors forbids
//     aliasing); metadata "tensoracle.shared_storage" records the sharing as a JSON object
//     {"<record>": ["name", ...]};
//   - every other value (epoch, a config dict, optimizer hyper-parameters) as a metadata
//     entry: its dotted key -> JSON text (tuples and sets as arrays, torch dtypes and devices
//     as strings, NaN/Infinity as Python's json writes them, bytes as {"__bytes__": hex});
//   - metadata "format" = "pt" (what transformers and the official loader expect). A value
//     whose key is "format" or starts with "tensoracle." is stored as "pth.<key>".
//   - torch's float4_e2m1fn_x2 (two values per byte) becomes F4 with the last dimension
//     doubled, as the official safetensors package writes it.
//
// Memory: tensor data is streamed from the memory-mapped input to the output a chunk at a
// time; peak memory is the pickle's objects plus at most 64 MiB of buffers and mapped input
// pages, or, for a non-contiguous view, the span of its storage that the view reads.
//
// Errors: IoError (open, map, write; Python OSError — FileExistsError when `out` exists and
// overwrite is false), FormatError (malformed archive or pickle, a tensor outside its
// storage: the message names the file, record, key or opcode), UnsafeCheckpointError (a
// global or opcode outside the allow list), UnsupportedError (the legacy pre-1.6 format,
// TorchScript archives, compressed entries, dtypes safetensors cannot hold such as
// complex128 or quantized tensors), InvalidArgument (bad options, a --key that is absent,
// names that collide after strip_prefix). No input leaves a partial output file behind.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tensoracle/errors.h"
#include "tensoracle/safetensors.h"

namespace tensoracle {

// What convert_pth does with floating-point tensors (float64, float32, float16, bfloat16).
// Integer, bool, complex, float8 and float4 tensors are always kept as they are. Conversions
// round to nearest even as torch's Tensor.to(dtype) does (float64 goes through float32 to the
// 16-bit types, as in torch).
enum class ConvertDtype : std::uint8_t { kKeep = 0, kFloat32 = 1, kFloat16 = 2, kBFloat16 = 3 };

// "keep", "float32", "float16", "bfloat16" (also "fp32", "fp16", "bf16"); nullopt otherwise.
std::optional<ConvertDtype> parse_convert_dtype(std::string_view text) noexcept;
std::string_view convert_dtype_name(ConvertDtype dtype) noexcept;

struct ConvertProgress {
  std::uint64_t bytes_done = 0;   // tensor bytes written so far
  std::uint64_t bytes_total = 0;  // tensor bytes of the whole output
  std::size_t tensors_done = 0;
  std::size_t tensors_total = 0;
};

struct ConvertOptions {
  // Convert only this entry of the checkpoint (a dict, list or tuple), e.g. "state_dict" or
  // "model"; a dotted path walks nested dicts ("model.encoder"). Empty: the whole checkpoint.
  std::string key;
  // Removed from the front of every output name that starts with it (e.g. "module."); a prefix
  // that no tensor name starts with is InvalidArgument (a typo).
  std::string strip_prefix;
  ConvertDtype dtype = ConvertDtype::kKeep;
  // Replace `out` if it exists (otherwise IoError EEXIST, checked before any work and again,
  // atomically, when the file is put in place).
  bool overwrite = false;
  // Bytes the pickle machine may use for its objects, stack and memo (UnsupportedError
  // beyond). Real checkpoints need well under 1 MiB per thousand tensors.
  std::uint64_t max_pickle_memory = 256ull << 20;
  // Called after each chunk of tensor data is written (on the calling thread).
  std::function<void(const ConvertProgress&)> progress;
};

struct ConvertReport {
  std::size_t tensors = 0;           // tensors written
  std::uint64_t tensor_bytes = 0;    // bytes of tensor data written
  std::size_t metadata_entries = 0;  // including "format"
  std::size_t shared_storages = 0;   // storages read by more than one written tensor
  std::size_t views_made_contiguous = 0;
  bool byte_swapped = false;         // the checkpoint was big-endian
};

// Converts `in` (a torch.save zip checkpoint) into the safetensors file `out`. Throws as the
// header comment says; on any error `out` is left as it was.
ConvertReport convert_pth(const std::filesystem::path& in, const std::filesystem::path& out,
                          const ConvertOptions& options = {});

// One tensor as convert_pth would write it.
struct CheckpointTensor {
  std::string name;                 // output name (after key selection and strip_prefix)
  std::string torch_dtype;          // "float32", "bfloat16", "complex128", ...
  std::optional<safetensors::Dtype> dtype;  // in the output (after options.dtype); nullopt:
                                            // safetensors cannot hold it (convert refuses)
  std::vector<std::int64_t> shape;  // torch's shape
  std::vector<std::int64_t> stride; // in elements
  std::int64_t storage_offset = 0;  // in elements
  std::string storage;              // the storage's record, e.g. "archive/data/0"
  std::uint64_t nbytes = 0;         // bytes of the tensor's elements (torch's dtype)
  bool contiguous = true;           // false: a view that convert_pth makes contiguous
  bool parameter = false;           // an nn.Parameter
  bool requires_grad = false;
  std::vector<std::string> shares_storage_with;  // other output names on the same storage
};

struct CheckpointInfo {
  std::string file;
  std::uint64_t file_size = 0;
  std::string archive;     // the archive's top-level folder (torch uses the file's stem)
  std::string byteorder;   // "little" or "big"
  int format_version = 0;  // the "version" record (0: absent)
  int pickle_protocol = 0;
  std::size_t storages = 0;             // storage records the pickle references
  std::uint64_t storage_bytes = 0;      // their total size
  std::vector<CheckpointTensor> tensors;                      // in checkpoint order
  std::vector<std::pair<std::string, std::string>> values;    // non-tensor values as JSON
};

// Reads and checks `in` as convert_pth does (honouring options.key, strip_prefix, dtype and
// max_pickle_memory) and lists what it would write; reads no tensor data and writes nothing.
// Unlike convert_pth it does not refuse dtypes safetensors cannot hold: they are listed with
// dtype == nullopt.
CheckpointInfo inspect_pth(const std::filesystem::path& in, const ConvertOptions& options = {});

}  // namespace tensoracle
