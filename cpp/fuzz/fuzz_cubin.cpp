// libFuzzer target: the cubin reader (tensoracle/cubin.h inspect) on arbitrary bytes.
// FormatError is the acceptable outcome for a bad input; any other exception escapes and
// aborts, so libFuzzer records the input. On success: an architecture "sm_<n>", non-empty
// kernel names, the input's size and a 64-digit SHA-256.
#include <cstddef>
#include <cstdint>
#include <span>

#include "tensoracle/cubin.h"
#include "tensoracle/errors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    auto info = tensoracle::cubin::inspect(std::span(reinterpret_cast<const std::byte*>(data), size));
    if (info.arch.rfind("sm_", 0) != 0 || info.size != size || info.sha256.size() != 64) __builtin_trap();
    for (const auto& k : info.kernels)
      if (k.empty()) __builtin_trap();
  } catch (const tensoracle::FormatError&) {
  }
  return 0;
}
