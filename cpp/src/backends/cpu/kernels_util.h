// Internal to the CPU backend: helpers shared by the kernel files (functions defined in
// kernels.cpp; the storage tags inline here).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>

#include "backends/cpu/kernels.h"
#include "core/numeric.h"

namespace tensoracle::cpu::detail {

// Applies the process-wide thread count to OpenBLAS before the first GEMM.
void ensure_blas_threads();

// Throws InvalidArgument("[cpu] " + what).
[[noreturn]] void fail(const std::string& what);

// The tensor's element count; throws (naming `kernel` and `name`) for unknown dims, an invalid
// type, or missing data.
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


}  // namespace tensoracle::cpu::detail
