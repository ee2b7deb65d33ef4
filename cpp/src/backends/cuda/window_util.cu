// The CUDA backend's convolution and deconvolution helpers that are not templates or inline
// (window_util.cuh).
#include "backends/cuda/window_util.cuh"

#include <cstdint>
#include <string>

namespace tensoracle::cuda::window {

bool all_small(std::initializer_list<i64> v) {
  for (i64 x : v)
    if (x >= kSmall) return false;
  return true;
}

std::byte* align_up(std::byte* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  return p + ((kAlign - a % kAlign) % kAlign);
}

std::uint32_t alignment_of(std::uint64_t x) {
  std::uint32_t a = 256;
  while (a > 1 && x % a != 0) a /= 2;
  return a;
}

cudaDataType_t lt_type(DataType t) {
  switch (t) {
    case DataType::kHALF: return CUDA_R_16F;
    case DataType::kBF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

bool geo_small(const Geo& g) {
  for (int i = 0; i < kS; ++i)
    if (g.in[i] >= kSmallGeo || g.out[i] * g.s[i] >= kSmallGeo || g.k[i] * g.d[i] >= kSmallGeo || g.pre[i] >= kSmallGeo)
      return false;
  // The kernel ([K, C/g, kvol] or [C, K/g, kvol]: K * C/g * kvol elements) is indexed too.
  return g.in_sp < kSmall && g.out_sp < kSmall && g.C < kSmallGeo && g.K < kSmallGeo && g.kvol < kSmallGeo &&
         g.K * g.Cg * g.kvol < kSmall;
}

}  // namespace tensoracle::cuda::window
