// Internal: conversions between float and the narrow floating types, bit-exact with how GPUs
// store them: round to nearest, ties to even. fp16 and bf16 overflow to infinity; fp8 e4m3fn
// (no infinity) saturates to ±448 when `saturate` is set (TensorRT's quantize), else gives NaN.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace tensoracle::core {

inline std::uint16_t float_to_half(float x) noexcept {
  std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  u &= 0x7FFFFFFFu;
  if (u > 0x7F800000u) return sign | 0x7E00u;                 // NaN (quiet)
  if (u >= 0x477FF000u) return sign | 0x7C00u;                // >= 65520 rounds to infinity
  if (u >= 0x38800000u) {                                     // normal half: >= 2^-14
    u += 0xC8000FFFu + ((u >> 13) & 1u);                      // rebias (-112 << 23), round half even
    return static_cast<std::uint16_t>(sign | (u >> 13));
  }
  // Subnormal or zero: units of 2^-24; scaling by a power of two is exact, rint rounds half even.
  float units = std::nearbyint(std::bit_cast<float>(u) * 16777216.0f);
  return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(units));
}

inline float half_to_float(std::uint16_t h) noexcept {
  std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1Fu;
  std::uint32_t man = h & 0x3FFu;
  if (exp == 0) {  // zero or subnormal: man * 2^-24
    float v = static_cast<float>(man) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7F800000u | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
}

inline std::uint16_t float_to_bf16(float x) noexcept {
  std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

inline float bf16_to_float(std::uint16_t b) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

namespace detail {
// Encodes |x| (finite, >= 0) in a small float format with `E` exponent bits, `M` mantissa
// bits and exponent bias `B`; returns the code without sign, possibly past the largest
// finite code (the caller decides what overflow means).
template <int E, int M, int B>
inline std::uint32_t encode_small_float(float ax) noexcept {
  const float min_normal = std::ldexp(1.0f, 1 - B);
  if (ax < min_normal) {  // subnormal: units of 2^(1-B-M); the top value rounds into min normal
    return static_cast<std::uint32_t>(std::nearbyint(std::ldexp(ax, B - 1 + M)));
  }
  int e;
  float m = std::frexp(ax, &e);  // ax = m * 2^e, m in [0.5, 1)
  e -= 1;                        // ax = (2m) * 2^e, 2m in [1, 2)
  auto q = static_cast<std::uint32_t>(std::nearbyint((2.0f * m - 1.0f) * (1 << M)));
  if (q == (1u << M)) {
    q = 0;
    ++e;
  }
  return (static_cast<std::uint32_t>(e + B) << M) | q;
}
}  // namespace detail

// fp8 e4m3fn: bias 7, no infinity, NaN = S.1111.111, largest finite 448 (0x7E).
inline std::uint8_t float_to_fp8_e4m3(float x, bool saturate) noexcept {
  std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | 0x7F;
  float ax = std::fabs(x);
  if (std::isinf(ax)) return saturate ? (sign | 0x7E) : (sign | 0x7F);
  std::uint32_t code = ax >= 512.0f ? 0x80u : detail::encode_small_float<4, 3, 7>(ax);
  if (code > 0x7Eu) return saturate ? (sign | 0x7E) : (sign | 0x7F);
  return static_cast<std::uint8_t>(sign | code);
}

inline float fp8_e4m3_to_float(std::uint8_t v) noexcept {
  bool neg = v & 0x80;
  std::uint32_t exp = (v >> 3) & 0xF, man = v & 0x7;
  float r;
  if (exp == 0xF && man == 0x7) return neg ? -NAN : NAN;
  if (exp == 0) r = std::ldexp(static_cast<float>(man), -9);
  else r = std::ldexp(1.0f + static_cast<float>(man) / 8.0f, static_cast<int>(exp) - 7);
  return neg ? -r : r;
}

// fp8 e5m2: bias 15, IEEE-like (infinity 0x7C, NaN above), largest finite 57344 (0x7B).
inline std::uint8_t float_to_fp8_e5m2(float x, bool saturate) noexcept {
  std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | 0x7F;
  float ax = std::fabs(x);
  std::uint32_t code = (std::isinf(ax) || ax >= 65536.0f) ? 0x7Cu : detail::encode_small_float<5, 2, 15>(ax);
  if (code > 0x7Bu) return saturate ? (sign | 0x7B) : (sign | 0x7C);
  return static_cast<std::uint8_t>(sign | code);
}

inline float fp8_e5m2_to_float(std::uint8_t v) noexcept {
  return half_to_float(static_cast<std::uint16_t>(v) << 8);
}

}  // namespace tensoracle::core
