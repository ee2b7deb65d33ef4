// Test helpers shared by the CPU backend's kernel tests (test_cpu_pointwise.cpp,
// test_cpu_cast.cpp, test_cpu_matmul_shuffle.cpp): typed buffers, and double-precision
// references rounded to the output type as kernels.h states (computed in float32, rounded once
// when stored); the elementwise check, which the thread test runs too.
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

namespace tensoracle::testing::cpu_kernels {

using cpu::TensorRef;
using i64 = std::int64_t;
using E = ElementWiseOperation;

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- typed buffers ----------------------------------------------------------------------

class Buf {
 public:
  Buf(DataType t, Dims d)
      : type(t), dims(d), words_(static_cast<std::size_t>(std::max<i64>(d.volume(), 0)) * element_size(t) / 8 + 2, 0) {}

  DataType type;
  Dims dims;

  void* data() { return words_.data(); }
  const void* data() const { return words_.data(); }
  i64 size() const { return dims.volume(); }
  TensorRef ref() { return TensorRef{data(), type, dims}; }

  std::uint64_t raw(i64 i) const {
    std::uint64_t v = 0;
    std::memcpy(&v, bytes() + i * esize(), esize());
    return v;
  }
  void set_raw(i64 i, std::uint64_t v) { std::memcpy(bytes() + i * esize(), &v, esize()); }

  // The value as a double (int64 beyond 2^53 loses precision: use get_int).
  double get(i64 i) const {
    const std::uint64_t r = raw(i);
    switch (type) {
      case DataType::kFLOAT: return std::bit_cast<float>(static_cast<std::uint32_t>(r));
      case DataType::kHALF: return core::half_to_float(static_cast<std::uint16_t>(r));
      case DataType::kBF16: return core::bf16_to_float(static_cast<std::uint16_t>(r));
      case DataType::kFP8: return core::fp8_e4m3_to_float(static_cast<std::uint8_t>(r));
      case DataType::kBOOL: return r != 0 ? 1.0 : 0.0;
      default: return static_cast<double>(get_int(i));
    }
  }
  i64 get_int(i64 i) const {
    const std::uint64_t r = raw(i);
    switch (type) {
      case DataType::kINT8: return static_cast<std::int8_t>(r);
      case DataType::kUINT8: return static_cast<std::uint8_t>(r);
      case DataType::kINT32: return static_cast<std::int32_t>(r);
      case DataType::kINT64: return static_cast<i64>(r);
      case DataType::kBOOL: return r != 0;
      default: ADD_FAILURE() << "get_int on " << type_name(type); return 0;
    }
  }
  // Stores v, rounded through float for the float types (fp8 saturating).
  void set(i64 i, double v) {
    const float f = static_cast<float>(v);
    switch (type) {
      case DataType::kFLOAT: set_raw(i, std::bit_cast<std::uint32_t>(f)); break;
      case DataType::kHALF: set_raw(i, core::float_to_half(f)); break;
      case DataType::kBF16: set_raw(i, core::float_to_bf16(f)); break;
      case DataType::kFP8: set_raw(i, core::float_to_fp8_e4m3(f, true)); break;
      case DataType::kBOOL: set_raw(i, v != 0 ? 1 : 0); break;
      default: set_int(i, static_cast<i64>(v));
    }
  }
  void set_int(i64 i, i64 v) { set_raw(i, static_cast<std::uint64_t>(v)); }  // low bytes

 private:
  std::size_t esize() const { return element_size(type); }
  unsigned char* bytes() { return reinterpret_cast<unsigned char*>(words_.data()); }
  const unsigned char* bytes() const { return reinterpret_cast<const unsigned char*>(words_.data()); }
  std::vector<std::uint64_t> words_;
};

inline void fill_random(Buf& b, std::mt19937& rng, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  for (i64 i = 0; i < b.size(); ++i) b.set(i, d(rng));
}

// v computed in float32, then stored in t (kernels.h: rounded once, when stored).
inline double round_to(DataType t, double v) {
  const float f = static_cast<float>(v);
  switch (t) {
    case DataType::kFLOAT: return f;
    case DataType::kHALF: return core::half_to_float(core::float_to_half(f));
    case DataType::kBF16: return core::bf16_to_float(core::float_to_bf16(f));
    case DataType::kFP8: return core::fp8_e4m3_to_float(core::float_to_fp8_e4m3(f, true));
    default: return v;
  }
}

// The spacing of t's values at |v|.
inline double ulp_of(DataType t, double v) {
  const double a = std::fabs(v);
  int mant = 23, emin = -126;
  if (t == DataType::kHALF) mant = 10, emin = -14;
  if (t == DataType::kBF16) mant = 7, emin = -126;
  int e = a > 0 ? std::ilogb(a) : emin;
  return std::ldexp(1.0, std::max(e, emin) - mant);
}

inline bool same(double got, double want) { return std::isnan(want) ? std::isnan(got) : got == want; }

// Records at most a few failures per check, so one bug does not flood the log.
struct Checker {
  int failures = 0;
  void operator()(bool ok, const std::string& what) {
    if (!ok && ++failures <= 8) ADD_FAILURE() << what;
  }
};

inline std::string at(i64 i, double got, double want) {
  return "at " + std::to_string(i) + ": got " + std::to_string(got) + ", want " + std::to_string(want);
}

// Flat index of the element of `in` that broadcasts to output element `flat` of `out`.
inline i64 broadcast_source(const Dims& out, const Dims& in, i64 flat) {
  i64 idx[Dims::kMaxRank];
  for (int k = out.rank() - 1; k >= 0; --k) {
    idx[k] = flat % out[k];
    flat /= out[k];
  }
  i64 src = 0;
  for (int k = 0; k < in.rank(); ++k) src = src * in[k] + (in[k] == 1 ? 0 : idx[k]);
  return src;
}

inline Dims broadcast(const Dims& a, const Dims& b) {
  Dims o = a;
  for (int i = 0; i < a.rank(); ++i) o[i] = a[i] == 1 ? b[i] : a[i];
  return o;
}

inline const std::vector<DataType> kFloatTypes = {DataType::kFLOAT, DataType::kHALF, DataType::kBF16};

// ---- elementwise reference ------------------------------------------------------------

inline bool is_compare(E op) { return op == E::kEQUAL || op == E::kGREATER || op == E::kLESS; }

// Float semantics: computed in float32 (a float division, then floor, for FLOOR_DIV).
inline double ref_float_op(E op, double x, double y) {
  switch (op) {
    case E::kSUM: return x + y;
    case E::kPROD: return x * y;
    case E::kSUB: return x - y;
    case E::kDIV: return static_cast<float>(x / y);
    case E::kFLOOR_DIV: return std::floor(static_cast<float>(x / y));
    case E::kPOW: return std::pow(x, y);
    case E::kMAX: return (std::isnan(x) || std::isnan(y)) ? kNaN : std::max(x, y);
    case E::kMIN: return (std::isnan(x) || std::isnan(y)) ? kNaN : std::min(x, y);
    case E::kEQUAL: return x == y;
    case E::kGREATER: return x > y;
    case E::kLESS: return x < y;
    default: ADD_FAILURE() << "no float reference"; return 0;
  }
}

// Runs a OP b (shapes broadcast) and checks every element against the reference.
inline void check_float_elementwise(E op, DataType t, const Dims& da, const Dims& db, std::uint32_t seed,
                             double lo = -4, double hi = 4) {
  std::mt19937 rng(seed);
  Buf a(t, da), b(t, db);
  fill_random(a, rng, lo, hi);
  fill_random(b, rng, lo, hi);
  if (op == E::kDIV || op == E::kFLOOR_DIV)  // keep divisors away from zero
    for (i64 i = 0; i < b.size(); ++i) b.set(i, b.get(i) + (b.get(i) < 0 ? -0.25 : 0.25));
  if (op == E::kPOW)
    for (i64 i = 0; i < a.size(); ++i) a.set(i, std::fabs(a.get(i)) + 0.125);
  if (is_compare(op))  // some equal pairs
    for (i64 i = 0; i < std::min(a.size(), b.size()); i += 3) b.set(i, a.get(i));
  const Dims dout = broadcast(da, db);
  Buf out(is_compare(op) ? DataType::kBOOL : t, dout);
  cpu::elementwise(op, a.ref(), b.ref(), out.ref());
  Checker check;
  for (i64 i = 0; i < out.size(); ++i) {
    const double x = a.get(broadcast_source(dout, da, i)), y = b.get(broadcast_source(dout, db, i));
    const double want = is_compare(op) ? ref_float_op(op, x, y) : round_to(t, ref_float_op(op, x, y));
    const double got = out.get(i);
    if (op == E::kPOW)  // powf is within 1 ulp of float; the narrow rounding may then differ by 1 ulp
      check(std::fabs(got - want) <= ulp_of(t, want) * (t == DataType::kFLOAT ? 2 : 1),
            std::string(type_name(t)) + " POW " + at(i, got, want));
    else
      check(same(got, want), std::string(type_name(t)) + " op " + std::to_string(static_cast<int>(op)) + " " +
                                 da.str() + " vs " + db.str() + " " + at(i, got, want));
  }
}

}  // namespace tensoracle::testing::cpu_kernels
