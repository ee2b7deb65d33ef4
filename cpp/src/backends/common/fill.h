// Internal to the backends: the fill layer (FillParams, tensoracle/network.h) for both: its
// host-side checks, and the value of each element, written once for the CPU and CUDA (the
// functions are __host__ __device__ under nvcc). Values are computed in double (int64 for an
// integer linspace) with every product and sum rounded on its own (no contracted multiply-add),
// then rounded to the output type once, so both backends give the same linspace and uniform
// values; normal draws go through log and cos, which may differ in the last bit.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backends/common/checks.h"

#ifdef __CUDACC__
#define TENSORACLE_HD __host__ __device__
#else
#define TENSORACLE_HD
#endif

namespace tensoracle::backends::common {

struct FillShape {
  i64 n = 0;
  int rank = 0;
  i64 dims[Dims::kMaxRank] = {};
  bool dynamic = false;  // alpha and beta are tensors (inputs), not the parameters
};
// alpha and beta: the node's inputs, or both null (the parameters' values).
FillShape check_fill(const Fail& fail, const FillParams& p, const TensorRef* alpha, const TensorRef* beta,
                     const TensorRef& out);

namespace fill {

TENSORACLE_HD inline double add(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
TENSORACLE_HD inline double mul(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

// 64 random bits for element `index` of stream `stream` (SplitMix64's output function over a
// Weyl sequence): a counter-based generator, the same on every backend and every run.
TENSORACLE_HD inline std::uint64_t bits(std::int64_t index, std::uint64_t stream) {
  std::uint64_t z = (static_cast<std::uint64_t>(index) * 2 + stream + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// A uniform draw in [0, 1) with 53 random bits.
TENSORACLE_HD inline double unit(std::int64_t index, std::uint64_t stream) {
  return static_cast<double>(bits(index, stream) >> 11) * 0x1.0p-53;
}
// Uniform in [lo, hi): lo + (hi - lo) · u.
TENSORACLE_HD inline double uniform(std::int64_t index, double lo, double hi) {
  return add(lo, mul(add(hi, -lo), unit(index, 0)));
}
// Normal of mean `mean` and standard deviation `sd` (Box-Muller on two draws).
TENSORACLE_HD inline double normal(std::int64_t index, double mean, double sd) {
  const double u1 = unit(index, 0), u2 = unit(index, 1);
  const double z = mul(sqrt(mul(-2.0, log1p(-u1))), cos(mul(6.283185307179586476925, u2)));
  return add(mean, mul(sd, z));
}
// Linspace: alpha + Σ step[k] · position[k] over element `index`'s position in `dims`.
template <class T>
TENSORACLE_HD inline T linspace(std::int64_t index, int rank, const i64* dims, T alpha, const T* step) {
  T v = alpha;
  for (int k = rank - 1; k >= 0; --k) {
    const i64 at = index % dims[k];
    index /= dims[k];
    if constexpr (std::is_integral_v<T>) {  // int64, wrapping (two's complement) on overflow
      v = static_cast<T>(static_cast<std::uint64_t>(v) + static_cast<std::uint64_t>(step[k]) * static_cast<std::uint64_t>(at));
    } else {
      v = add(v, mul(step[k], static_cast<double>(at)));
    }
  }
  return v;
}

}  // namespace fill

}  // namespace tensoracle::backends::common
