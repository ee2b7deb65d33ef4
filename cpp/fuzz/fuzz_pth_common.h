// Shared by the .pth fuzz targets: run the whole conversion in memory and check what comes
// out. Only FormatError (UnsafeCheckpointError included) and UnsupportedError are acceptable
// outcomes for bad input; any other exception escapes and aborts, so libFuzzer records it.
// On success the output must parse as safetensors and hold every tensor with the size the
// checkpoint promised; error messages must name the file and stay short.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "convert/checkpoint.h"
#include "convert/writer.h"
#include "tensoracle/errors.h"
#include "tensoracle/safetensors.h"

namespace tensoracle::fuzz {

inline void check(bool ok) {
  if (!ok) __builtin_trap();
}

inline void convert_in_memory(std::span<const std::byte> file, ConvertDtype dtype) {
  constexpr std::string_view kPrefix = "[pth] fuzz.pth: ";
  namespace st = tensoracle::safetensors;
  ConvertOptions options;
  options.dtype = dtype;
  options.max_pickle_memory = 64ull << 20;
  try {
    pth::Checkpoint c = pth::read_checkpoint(file, "fuzz.pth", options);
    pth::Output o = pth::plan_output(c, options, nullptr);
    std::vector<std::byte> out = st::serialize_streaming(o.sources, o.metadata);
    st::File f = st::File::parse(out, "out.safetensors");  // must not throw
    check(f.tensors().size() == c.tensors.size());
    check(f.metadata().at("format") == "pt");
    for (const pth::Entry& e : c.tensors) {
      const st::TensorInfo* t = f.find(e.name);
      check(t != nullptr);
      check(t->dtype == *pth::output_dtype(*e.tensor, dtype));
      check(t->numel() == e.numel * (e.tensor->dtype == pth::TorchDtype::kFloat4E2M1FNx2 ? 2 : 1));
    }
    check(o.progress->bytes_done == o.progress->bytes_total);
  } catch (const FormatError& e) {
    std::string_view m = e.what();
    check(m.substr(0, kPrefix.size()) == kPrefix);
    check(m.size() <= 8192 + 2 * file.size());
  } catch (const UnsupportedError& e) {
    std::string_view m = e.what();
    check(m.substr(0, kPrefix.size()) == kPrefix);
  }
}

}  // namespace tensoracle::fuzz
