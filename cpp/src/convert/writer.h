// Internal: the tensor data and metadata convert_pth writes, as safetensors TensorSources
// that stream each tensor from the checkpoint's storages.
//
//   pth::InputFile input{mapping.data(), fd};   // or nullptr for bytes in memory
//   pth::Output out = pth::plan_output(checkpoint, options, &input);
//   safetensors::save_file_streaming(path, out.sources, out.metadata, options.overwrite);
//
// A contiguous tensor that needs no change is copied straight from its storage record: by the
// kernel (ByteSink::write_from_file, copy_file_range) when the input file is open, else from
// the mapping, in chunks of kChunkBytes. Anything else (a strided view, a big-endian storage,
// torch's conj or neg bit, a --dtype cast) goes through two buffers of at most kChunkBytes:
// gather the next elements in row-major order, byte-swap, apply the bits, cast, write. When
// the storages are a read-only file mapping, the pages read are returned to the kernel as the
// conversion moves on (madvise MADV_DONTNEED), so the mapped input never accumulates.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "convert/checkpoint.h"
#include "tensoracle/convert.h"
#include "tensoracle/safetensors.h"

namespace tensoracle::pth {

inline constexpr std::uint64_t kChunkBytes = 16ull << 20;

struct Output {
  std::vector<safetensors::TensorSource> sources;  // refer to the Checkpoint: it must outlive them
  safetensors::Metadata metadata;
  ConvertReport report;  // filled except for what the write itself decides
  std::shared_ptr<ConvertProgress> progress;  // updated by the sources as they write
};

// The checkpoint's file, when the storages are a read-only mapping of it.
struct InputFile {
  const std::byte* mapping;  // where the file is mapped (the storages point inside)
  int fd = -1;               // the same file open for reading, or -1 (copy from the mapping)
};

// Throws UnsupportedError (check_writable) for a tensor that cannot be written. `input`
// (may be null: storages in memory) must outlive the sources.
Output plan_output(const Checkpoint& c, const ConvertOptions& options, const InputFile* input);

}  // namespace tensoracle::pth
