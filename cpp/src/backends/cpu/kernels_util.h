// Internal to the CPU backend: helpers shared by the kernel files (ops/*.cpp; functions defined
// in kernels.cpp; the storage tags inline here). The helpers of one group of layers are in
// window_util.h (convolution, deconvolution, pooling), index_util.h (the indexing layers) and
// reduce_util.h (reduce, softmax, normalization).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>

#include "backends/cpu/kernels.h"
#include "core/numeric.h"

// Vectorizes a contiguous loop even where the build's optimization level would not (GCC's
// -O2 cost model) and without alias checks. Safe here: an output may alias an input only
// exactly (same element index), which a vector loop handles like a scalar one.
#ifdef _OPENMP
#define TENSORACLE_SIMD _Pragma("omp simd")
#else
#define TENSORACLE_SIMD
#endif

namespace tensoracle::cpu::detail {

// Applies the process-wide thread count to OpenBLAS before the first GEMM.
void ensure_blas_threads();

// The CPU backend's refusals: InvalidArgument("[cpu] " + what) (the checks of
// backends/common/ take kFail).
inline constexpr backends::common::Fail kFail{"[cpu] "};
[[noreturn]] void fail(const std::string& what);

// A type's name, a tensor's type and dims ("float16[2,3]"), a number: for messages.
using backends::common::desc;
using backends::common::is_float_type;
using backends::common::num;
using backends::common::tn;

// The tensor's element count; throws (naming `kernel` and `name`) for unknown dims, an invalid
// type, or missing data (backends::common::checked_volume).
std::int64_t checked_volume(const TensorRef& t, const char* kernel, const char* name);

// Whether the CPU (and the OS) run AVX-512 F, DQ, BW and VL and the environment variable
// `baseline_variable` (a kernel's switch back to its baseline code: for the tests that compare
// the two, and for debugging) is unset. The kernels compiled for AVX-512 (gnu::target) take that
// path only where this holds. False on other architectures.
bool avx512_kernels(const char* baseline_variable);

// Calls fn(begin, end) over [0, n) in one contiguous range per thread (OpenMP), using several
// threads only when n >= parallel_min.
void parallel_ranges(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& fn,
                     std::int64_t parallel_min = 32 * 1024);

// ---- storage tags: T is the stored type, load() gives the compute value, store() rounds a
// float to it, store_d() a double (rounded once: through round-to-odd float32) ------------------

// d rounded to float32 toward zero with the lowest bit set when inexact (round to odd): a
// later rounding to float16 or bfloat16 (13 and 16 fewer bits) then equals rounding d once.
inline float to_float_odd(double d) noexcept {
  const float f = static_cast<float>(d);
  if (static_cast<double>(f) == d || d != d) return f;
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) --u;  // one step toward zero (inf to max)
  return std::bit_cast<float>(u | 1u);
}

// ---- storage tags: load() gives the float, store() rounds a float, store_d() a double ----

struct F32 {
  using T = float;
  static float load(T v) noexcept { return v; }
  static T store(float x) noexcept { return x; }
  static T store_d(double x) noexcept { return static_cast<float>(x); }
};
// Bitwise select: mask is all ones (take a) or zero (take b). Written with masks rather than
// ?: because GCC vectorizes these loops only without control flow.
inline std::int32_t select_bits(std::int32_t mask, std::int32_t a, std::int32_t b) noexcept {
  return (a & mask) | (b & ~mask);
}
inline std::int32_t mask_of(bool c) noexcept { return -static_cast<std::int32_t>(c); }

// float16 to float32 without branches (so loops over it vectorize), bit-exact with
// core::half_to_float: normals rebiased, subnormals as an exact integer multiple of 2^-24,
// infinities and NaN (payload kept) with the float exponent all ones.
inline float half_bits_to_float(std::uint16_t h) noexcept {
  const std::int32_t em = h & 0x7FFF;
  const std::int32_t sign = static_cast<std::int32_t>(static_cast<std::uint32_t>(h & 0x8000u) << 16);
  const std::int32_t normal = (em << 13) + (112 << 23);
  const std::int32_t sub = std::bit_cast<std::int32_t>(static_cast<float>(em) * 0x1p-24f);
  const std::int32_t special = (em << 13) | 0x7F800000;
  const std::int32_t mag = select_bits(mask_of(em >= 0x7C00), special, select_bits(mask_of(em >= 0x0400), normal, sub));
  return std::bit_cast<float>(sign | mag);
}

struct F16 {
  using T = std::uint16_t;
  static float load(T v) noexcept { return half_bits_to_float(v); }
  static T store(float x) noexcept { return core::float_to_half(x); }
  static T store_d(double x) noexcept { return core::float_to_half(to_float_odd(x)); }
};
struct BF16 {
  using T = std::uint16_t;
  static float load(T v) noexcept { return core::bf16_to_float(v); }
  static T store(float x) noexcept { return core::float_to_bf16(x); }
  static T store_d(double x) noexcept { return core::float_to_bf16(to_float_odd(x)); }
};
template <class I>
struct Int {
  using T = I;
  static I load(T v) noexcept { return v; }
  static T store(I v) noexcept { return v; }
};
struct Bool {
  using T = std::uint8_t;
  static bool load(T v) noexcept { return v != 0; }
  static T store(bool b) noexcept { return b ? 1 : 0; }
};

template <class F>
void with_float(DataType t, const std::string& what, F&& f) {
  switch (t) {
    case DataType::kFLOAT: f(F32{}); return;
    case DataType::kHALF: f(F16{}); return;
    case DataType::kBF16: f(BF16{}); return;
    default: fail(what + " takes float32, float16 or bfloat16, not " + std::string(type_name(t)));
  }
}


// e^z for z <= 0 (and NaN), in float32 without branches or library calls, so the loops over it
// vectorize: z = n ln2 + r with |r| <= ln2 / 2 (Cody-Waite: ln2 split in a high part exact in
// products with n and a low part), e^r by its Taylor series to degree 7 (truncation below
// 2^-27 relative), times 2^n in two exact power-of-two steps so that subnormal results round
// once. Within 2 ulp of e^z; e^-inf = 0; NaN stays NaN.
//
// Below -104, e^z is under half the smallest subnormal (2^-150) and rounds to +0: those lanes
// compute e^0 and select +0 instead, because a multiply whose result underflows costs a
// microcode assist of ~100 cycles on x86 (no flush-to-zero here): an attention mask's padded
// keys (scores near float32's minimum) made a MiniLM pass 14% slower. The results are the
// former clamp-to-(-110) version's bit for bit (checked over every non-positive float and NaN).
inline float exp_nonpositive(float z) noexcept {
  const std::int32_t tiny = mask_of(z < -104.0f);  // NaN passes
  z = std::bit_cast<float>(select_bits(tiny, 0, std::bit_cast<std::int32_t>(z)));
  constexpr float kShift = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = z * 1.44269504088896341f + kShift;
  const float n = t - kShift;  // round(z / ln2), in [-150, 0]
  const std::int32_t ni = std::bit_cast<std::int32_t>(t) - std::bit_cast<std::int32_t>(kShift);
  const float r = (z - n * 0.693145751953125f) - n * 1.42860682030941723212e-6f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const std::int32_t n1 = ni / 2, n2 = ni - n1;  // each >= -75: 2^n1, 2^n2 are normal floats
  const float s1 = std::bit_cast<float>(static_cast<std::uint32_t>(n1 + 127) << 23);
  const float s2 = std::bit_cast<float>(static_cast<std::uint32_t>(n2 + 127) << 23);
  return std::bit_cast<float>(select_bits(tiny, 0, std::bit_cast<std::int32_t>(p * s1 * s2)));
}

// erf(x) in float32 without branches or library calls (so the loops over it vectorize; libm's
// erff is a call per element): for |x| < 1, x P(x^2) with P of degree 6; from 1 on,
// 1 - e^(-x^2) Q(1/|x|), Q of degree 9 approximating erfc(x) e^(x^2) on [1, 4] (|x| is clamped
// to 4: erf rounds to 1 from 3.92 on), with the sign of x. The coefficients were fitted here
// (weighted least squares on Chebyshev nodes against a 40-digit erf; relative errors 1.2e-9
// and 1.5e-8). Within 2.6 ulp of erf(x) over every float32 (libm's erff: 1 ulp; checked
// exhaustively against double-precision erf, the worst at x = 0.9758: the float32 roundings of
// x P(x^2)); odd bit for bit; erf(+-0) = +-0, erf(+-inf) = +-1, NaN stays NaN.
inline float erf_float(float x) noexcept {
  const float t = x * x;
  float p = 7.854026350694257e-05f;
  p = p * t - 0.0008010247666805241f;
  p = p * t + 0.005188334503163016f;
  p = p * t - 0.026853816070838667f;
  p = p * t + 0.1128358527083611f;
  p = p * t - 0.3761262583975299f;
  p = p * t + 1.1283791657323479f;
  const float small = x * p;
  const std::int32_t sign = std::bit_cast<std::int32_t>(x) & std::int32_t{-2147483647 - 1};
  const float a = std::bit_cast<float>(std::bit_cast<std::int32_t>(x) & 0x7FFFFFFF);
  // a clamped to [1, 4] by selects (NaN passes: every comparison with it is false)
  float c = std::bit_cast<float>(select_bits(mask_of(a > 4.0f), std::bit_cast<std::int32_t>(4.0f),
                                             std::bit_cast<std::int32_t>(a)));
  c = std::bit_cast<float>(select_bits(mask_of(c < 1.0f), std::bit_cast<std::int32_t>(1.0f), std::bit_cast<std::int32_t>(c)));
  const float s = 1.0f / c;
  float q = 0.030714071348556176f;
  q = q * s - 0.17971323250234147f;
  q = q * s + 0.4382409832520433f;
  q = q * s - 0.536949319737813f;
  q = q * s + 0.23833420134193423f;
  q = q * s + 0.23039508868953607f;
  q = q * s - 0.3758630987423653f;
  q = q * s + 0.02053584705541343f;
  q = q * s + 0.5617679634222625f;
  q = q * s + 0.00012107826130191985f;
  const float big = 1.0f - exp_nonpositive(-(c * c)) * q;
  const std::int32_t signed_big = std::bit_cast<std::int32_t>(big) | sign;
  return std::bit_cast<float>(select_bits(mask_of(a < 1.0f), std::bit_cast<std::int32_t>(small), signed_big));
}

}  // namespace tensoracle::cpu::detail
