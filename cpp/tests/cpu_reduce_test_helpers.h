// Test helpers shared by the CPU backend's unary, reduce, softmax and normalization tests
// (test_cpu_unary.cpp, test_cpu_reduce.cpp, test_cpu_softmax_norm.cpp): typed buffers, and a
// rounding to the output type written from the IEEE definition (not the kernels' conversions)
// for references computed in double.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels.h"
#include "core/numeric.h"

namespace tensoracle::testing::cpu_reduce {

using cpu::TensorRef;
using i64 = std::int64_t;

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline const std::vector<DataType> kFloats = {DataType::kFLOAT, DataType::kHALF, DataType::kBF16};
inline const std::vector<DataType> kInts = {DataType::kINT32, DataType::kINT64};

inline std::string tn(DataType t) { return std::string(type_name(t)); }

// ---- rounding reference -----------------------------------------------------------------

struct Format {
  int precision;  // significant bits
  int emin;       // exponent of the smallest normal
  double max_finite;
};

inline Format format_of(DataType t) {
  switch (t) {
    case DataType::kHALF: return {11, -14, 65504.0};
    case DataType::kBF16: return {8, -126, 3.3895313892515355e38};
    default: return {24, -126, static_cast<double>(std::numeric_limits<float>::max())};
  }
}

// v rounded once to the float type t (nearest, ties to even; overflow to infinity).
inline double round_to(DataType t, double v) {
  if (!std::isfinite(v) || v == 0) return v;
  const Format f = format_of(t);
  int e;
  std::frexp(std::fabs(v), &e);  // |v| = m * 2^e, m in [0.5, 1)
  const double quantum = std::ldexp(1.0, std::max(e - 1, f.emin) - (f.precision - 1));
  double r = std::nearbyint(std::fabs(v) / quantum) * quantum;
  if (r > f.max_finite) r = kInf;
  return std::copysign(r, v);
}

// The spacing of t's values at |v|.
inline double ulp_of(DataType t, double v) {
  const Format f = format_of(t);
  int e = 0;
  if (v != 0 && std::isfinite(v)) std::frexp(std::fabs(v), &e);
  return std::ldexp(1.0, std::max(e - 1, f.emin) - (f.precision - 1));
}

// ---- typed buffers ----------------------------------------------------------------------

class Buf {
 public:
  Buf(DataType t, Dims d)
      : type(t), dims(d), bytes_(static_cast<std::size_t>(std::max<i64>(d.volume(), 0)) * element_size(t) + 8, 0) {}
  DataType type;
  Dims dims;

  i64 size() const { return dims.volume(); }
  void* data() { return bytes_.data(); }
  TensorRef ref() { return TensorRef{data(), type, dims}; }

  std::uint64_t raw(i64 i) const {
    std::uint64_t v = 0;
    std::memcpy(&v, bytes_.data() + i * es(), es());
    return v;
  }
  void set_raw(i64 i, std::uint64_t v) { std::memcpy(bytes_.data() + i * es(), &v, es()); }

  double get(i64 i) const {
    const std::uint64_t r = raw(i);
    switch (type) {
      case DataType::kFLOAT: return std::bit_cast<float>(static_cast<std::uint32_t>(r));
      case DataType::kHALF: return core::half_to_float(static_cast<std::uint16_t>(r));
      case DataType::kBF16: return core::bf16_to_float(static_cast<std::uint16_t>(r));
      case DataType::kBOOL: return r != 0;
      default: return static_cast<double>(get_int(i));
    }
  }
  i64 get_int(i64 i) const {
    const std::uint64_t r = raw(i);
    if (type == DataType::kINT32) return static_cast<std::int32_t>(r);
    return static_cast<i64>(r);
  }
  // Stores v rounded once to the type (exact for values the type holds).
  void set(i64 i, double v) {
    const float f = static_cast<float>(round_to(type, v));
    switch (type) {
      case DataType::kFLOAT: set_raw(i, std::bit_cast<std::uint32_t>(f)); break;
      case DataType::kHALF: set_raw(i, core::float_to_half(f)); break;
      case DataType::kBF16: set_raw(i, core::float_to_bf16(f)); break;
      case DataType::kBOOL: set_raw(i, v != 0 ? 1 : 0); break;
      default: set_int(i, static_cast<i64>(v));
    }
  }
  void set_int(i64 i, i64 v) { set_raw(i, static_cast<std::uint64_t>(v)); }

 private:
  std::size_t es() const { return element_size(type); }
  std::vector<unsigned char> bytes_;
};

inline void fill_uniform(Buf& b, std::mt19937& rng, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  for (i64 i = 0; i < b.size(); ++i) b.set(i, d(rng));
}

// Records at most a few failures per check.
struct Checker {
  std::string what;
  int failures = 0;
  void operator()(bool ok, i64 i, double got, double want) {
    if (!ok && ++failures <= 6)
      ADD_FAILURE() << what << " at " << i << ": got " << got << ", want " << want;
  }
};

// got (stored in t) against the exact value `want`: NaN matches NaN, infinities exactly, and
// finite values within `ulps` of t at the rounded reference plus `atol`.
inline bool close(DataType t, double got, double want, double ulps, double atol = 0) {
  const double r = round_to(t, want);
  if (std::isnan(r)) return std::isnan(got);
  if (std::isinf(r)) return got == r;
  return std::fabs(got - r) <= ulps * ulp_of(t, r) + atol;
}

inline bool same(double got, double want) { return std::isnan(want) ? std::isnan(got) : got == want; }

}  // namespace tensoracle::testing::cpu_reduce
