// Tests of the CPU backend's unary, reduce, softmax and normalization kernels
// (backends/cpu/kernels.h) against scalar reference loops written here. References are
// computed in double (long double for sums and statistics) and rounded once to the output
// type with a rounding written from the IEEE definition (not the kernels' conversions).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backends/cpu/kernels.h"
#include "core/numeric.h"
#include "tensoracle/errors.h"

namespace {

using namespace tensoracle;
using cpu::TensorRef;
using i64 = std::int64_t;
using UO = UnaryOperation;
using RO = ReduceOperation;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
const std::vector<DataType> kFloats = {DataType::kFLOAT, DataType::kHALF, DataType::kBF16};
const std::vector<DataType> kInts = {DataType::kINT32, DataType::kINT64};

std::string tn(DataType t) { return std::string(type_name(t)); }

// ---- rounding reference -----------------------------------------------------------------

struct Format {
  int precision;  // significant bits
  int emin;       // exponent of the smallest normal
  double max_finite;
};

Format format_of(DataType t) {
  switch (t) {
    case DataType::kHALF: return {11, -14, 65504.0};
    case DataType::kBF16: return {8, -126, 3.3895313892515355e38};
    default: return {24, -126, static_cast<double>(std::numeric_limits<float>::max())};
  }
}

// v rounded once to the float type t (nearest, ties to even; overflow to infinity).
double round_to(DataType t, double v) {
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
double ulp_of(DataType t, double v) {
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

void fill_uniform(Buf& b, std::mt19937& rng, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  for (i64 i = 0; i < b.size(); ++i) b.set(i, d(rng));
}

void fill_ints(Buf& b, std::mt19937& rng, i64 lo, i64 hi) {
  std::uniform_int_distribution<i64> d(lo, hi);
  for (i64 i = 0; i < b.size(); ++i) b.set_int(i, d(rng));
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
bool close(DataType t, double got, double want, double ulps, double atol = 0) {
  const double r = round_to(t, want);
  if (std::isnan(r)) return std::isnan(got);
  if (std::isinf(r)) return got == r;
  return std::fabs(got - r) <= ulps * ulp_of(t, r) + atol;
}

bool same(double got, double want) { return std::isnan(want) ? std::isnan(got) : got == want; }

// Multi-index of `flat` in dims.
std::vector<i64> unflatten(const Dims& d, i64 flat) {
  std::vector<i64> idx(static_cast<std::size_t>(d.rank()));
  for (int k = d.rank() - 1; k >= 0; --k) {
    idx[static_cast<std::size_t>(k)] = flat % d[k];
    flat /= d[k];
  }
  return idx;
}

// ==== unary ================================================================================

struct UnaryCase {
  UO op;
  const char* name;
  double lo, hi;  // input domain
  bool exact;     // the result is exact in any float type
};

const UnaryCase kFloatUnary[] = {
    {UO::kEXP, "EXP", -10, 10, false},    {UO::kLOG, "LOG", 0.01, 100, false},
    {UO::kSQRT, "SQRT", 0, 100, false},   {UO::kRECIP, "RECIP", 0.1, 10, false},
    {UO::kABS, "ABS", -8, 8, true},       {UO::kNEG, "NEG", -8, 8, true},
    {UO::kSIN, "SIN", -6, 6, false},      {UO::kCOS, "COS", -6, 6, false},
    {UO::kTAN, "TAN", -1.4, 1.4, false},  {UO::kSINH, "SINH", -5, 5, false},
    {UO::kCOSH, "COSH", -5, 5, false},    {UO::kASIN, "ASIN", -0.99, 0.99, false},
    {UO::kACOS, "ACOS", -0.99, 0.99, false}, {UO::kATAN, "ATAN", -10, 10, false},
    {UO::kASINH, "ASINH", -10, 10, false}, {UO::kACOSH, "ACOSH", 1, 10, false},
    {UO::kATANH, "ATANH", -0.99, 0.99, false}, {UO::kCEIL, "CEIL", -8, 8, true},
    {UO::kFLOOR, "FLOOR", -8, 8, true},   {UO::kERF, "ERF", -3, 3, false},
    {UO::kSIGN, "SIGN", -2, 2, true},     {UO::kROUND, "ROUND", -8, 8, true},
};

double unary_ref(UO op, double x) {
  switch (op) {
    case UO::kEXP: return std::exp(x);
    case UO::kLOG: return std::log(x);
    case UO::kSQRT: return std::sqrt(x);
    case UO::kRECIP: return 1.0 / x;
    case UO::kABS: return std::fabs(x);
    case UO::kNEG: return -x;
    case UO::kSIN: return std::sin(x);
    case UO::kCOS: return std::cos(x);
    case UO::kTAN: return std::tan(x);
    case UO::kSINH: return std::sinh(x);
    case UO::kCOSH: return std::cosh(x);
    case UO::kASIN: return std::asin(x);
    case UO::kACOS: return std::acos(x);
    case UO::kATAN: return std::atan(x);
    case UO::kASINH: return std::asinh(x);
    case UO::kACOSH: return std::acosh(x);
    case UO::kATANH: return std::atanh(x);
    case UO::kCEIL: return std::ceil(x);
    case UO::kFLOOR: return std::floor(x);
    case UO::kERF: return std::erf(x);
    case UO::kSIGN: return std::isnan(x) ? x : x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0;
    case UO::kROUND: return std::nearbyint(x);  // default mode: ties to even
    default: ADD_FAILURE() << "no reference"; return 0;
  }
}

// op over x (float type t) into a fresh output; returns it.
Buf run_unary(UO op, Buf& x, DataType out_type) {
  Buf out(out_type, x.dims);
  cpu::unary(op, x.ref(), out.ref());
  return out;
}

TEST(CpuUnary, EveryFloatOperationInEveryFloatType) {
  for (const auto& c : kFloatUnary) {
    for (DataType t : kFloats) {
      std::mt19937 rng(static_cast<unsigned>(c.op) * 7 + static_cast<unsigned>(t));
      Buf x(t, Dims{7, 151});
      fill_uniform(x, rng, c.lo, c.hi);
      if (c.exact)  // some halves and integers
        for (i64 i = 0; i < x.size(); i += 5) x.set(i, std::round(x.get(i) * 2) / 2);
      Buf y = run_unary(c.op, x, t);
      Checker check{std::string(c.name) + " " + tn(t)};
      // float32: libm float functions are within a few ulp; narrow types: one rounding of a
      // float32 value close to the exact one, so the neighbour of the rounded reference at most.
      const double ulps = c.exact ? 0 : (t == DataType::kFLOAT ? 4 : 1);
      for (i64 i = 0; i < x.size(); ++i) {
        const double want = unary_ref(c.op, x.get(i));
        check(close(t, y.get(i), want, ulps), i, y.get(i), want);
      }
    }
  }
}

TEST(CpuUnary, NaNPropagatesAndSpecialValues) {
  for (DataType t : kFloats) {
    for (const auto& c : kFloatUnary) {
      Buf x(t, Dims{1});
      x.set(0, kNaN);
      Buf y = run_unary(c.op, x, t);
      EXPECT_TRUE(std::isnan(y.get(0))) << c.name << " of NaN in " << tn(t);
    }
    struct Spot {
      UO op;
      double x, want;
    };
    const Spot spots[] = {
        {UO::kEXP, kInf, kInf},      {UO::kEXP, -kInf, 0},       {UO::kLOG, 0, -kInf},     {UO::kLOG, -1, kNaN},
        {UO::kSQRT, -1, kNaN},       {UO::kSQRT, kInf, kInf},    {UO::kRECIP, 0, kInf},    {UO::kRECIP, -0.0, -kInf},
        {UO::kRECIP, kInf, 0},       {UO::kABS, -kInf, kInf},    {UO::kNEG, kInf, -kInf},  {UO::kSIGN, 0, 0},
        {UO::kSIGN, -0.0, 0},        {UO::kSIGN, kInf, 1},       {UO::kSIGN, -kInf, -1},   {UO::kSIGN, -1e-3, -1},
        {UO::kCEIL, -0.5, 0},        {UO::kFLOOR, -0.5, -1},     {UO::kCEIL, kInf, kInf},  {UO::kASIN, 2, kNaN},
        {UO::kACOSH, 0.5, kNaN},     {UO::kATANH, 1, kInf},      {UO::kATANH, -1, -kInf},  {UO::kERF, kInf, 1},
        {UO::kERF, -kInf, -1},       {UO::kTAN, 0, 0},           {UO::kCOSH, 0, 1},        {UO::kATAN, kInf, 0},
    };
    for (const auto& s : spots) {
      Buf x(t, Dims{1});
      x.set(0, s.x);
      Buf y = run_unary(s.op, x, t);
      const double want = s.op == UO::kATAN ? round_to(t, std::atan(s.x)) : s.want;
      EXPECT_TRUE(close(t, y.get(0), want, s.op == UO::kATAN ? 1 : 0))
          << "op " << static_cast<int>(s.op) << " of " << s.x << " in " << tn(t) << ": got " << y.get(0);
    }
  }
  // EXP overflows the narrow types to infinity (computed in float32, rounded when stored).
  Buf x(DataType::kHALF, Dims{2});
  x.set(0, 12.0);  // e^12 = 162755 > 65504
  x.set(1, -12.0);
  Buf y = run_unary(UO::kEXP, x, DataType::kHALF);
  EXPECT_EQ(y.get(0), kInf);
  EXPECT_TRUE(close(DataType::kHALF, y.get(1), std::exp(-12.0), 0));  // a half subnormal
}

TEST(CpuUnary, RoundTiesToEven) {
  const double xs[] = {-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 1023.5, -1023.5, 0.25, 0.75, -0.75, 2.4, 2.6};
  const double ws[] = {-4, -2, -2, -0.0, 0, 2, 2, 4, 4, 6, 1024, -1024, 0, 1, -1, 2, 3};
  for (DataType t : kFloats) {
    const i64 n = static_cast<i64>(std::size(xs));
    Buf x(t, Dims{n});
    for (i64 i = 0; i < n; ++i) x.set(i, xs[i]);
    Buf y = run_unary(UO::kROUND, x, t);
    for (i64 i = 0; i < n; ++i) {
      const double want = round_to(t, xs[i]) == xs[i] ? ws[i] : std::nearbyint(round_to(t, xs[i]));
      EXPECT_EQ(y.get(i), want) << "ROUND(" << x.get(i) << ") in " << tn(t);
    }
  }
  // float32 specifics: the float just below 0.5, integers beyond 2^23, infinities, -0.
  const double fx[] = {0.49999997019767761, 8388609.0, 8388610.5 - 0.5, 1e10, kInf, -kInf, -0.0, -0.49999997019767761};
  Buf x(DataType::kFLOAT, Dims{static_cast<i64>(std::size(fx))});
  for (i64 i = 0; i < x.size(); ++i) x.set(i, fx[i]);
  Buf y = run_unary(UO::kROUND, x, DataType::kFLOAT);
  for (i64 i = 0; i < x.size(); ++i) EXPECT_EQ(y.get(i), std::nearbyint(fx[i])) << fx[i];
  EXPECT_TRUE(std::signbit(y.get(7))) << "ROUND(-0.49999997) is -0";
}

TEST(CpuUnary, IsInfIsNanGiveBool) {
  const double xs[] = {0, -1, 1e30, kInf, -kInf, kNaN, 65504, 70000};
  for (DataType t : kFloats) {
    const i64 n = static_cast<i64>(std::size(xs));
    Buf x(t, Dims{2, n / 2});
    for (i64 i = 0; i < n; ++i) x.set(i, xs[i]);
    Buf inf = run_unary(UO::kISINF, x, DataType::kBOOL);
    Buf nan = run_unary(UO::kISNAN, x, DataType::kBOOL);
    for (i64 i = 0; i < n; ++i) {
      EXPECT_EQ(inf.raw(i), std::isinf(x.get(i)) ? 1u : 0u) << "ISINF(" << x.get(i) << ") " << tn(t);
      EXPECT_EQ(nan.raw(i), std::isnan(x.get(i)) ? 1u : 0u) << "ISNAN(" << x.get(i) << ") " << tn(t);
    }
  }
}

TEST(CpuUnary, IntegerAbsNegSignWrap) {
  for (DataType t : kInts) {
    const bool i32 = t == DataType::kINT32;
    const i64 lo = i32 ? std::numeric_limits<std::int32_t>::min() : std::numeric_limits<i64>::min();
    const i64 hi = i32 ? std::numeric_limits<std::int32_t>::max() : std::numeric_limits<i64>::max();
    const std::vector<i64> xs = {0, 1, -1, 7, -7, hi, lo, lo + 1, 123456789, -123456789};
    Buf x(t, Dims{static_cast<i64>(xs.size())});
    for (std::size_t i = 0; i < xs.size(); ++i) x.set_int(static_cast<i64>(i), xs[i]);
    Buf a = run_unary(UO::kABS, x, t), n = run_unary(UO::kNEG, x, t), s = run_unary(UO::kSIGN, x, t);
    for (std::size_t k = 0; k < xs.size(); ++k) {
      const i64 i = static_cast<i64>(k), v = xs[k];
      const i64 neg = v == lo ? lo : -v;  // wraps
      EXPECT_EQ(a.get_int(i), v < 0 ? neg : v) << "ABS(" << v << ") " << tn(t);
      EXPECT_EQ(n.get_int(i), neg) << "NEG(" << v << ") " << tn(t);
      EXPECT_EQ(s.get_int(i), (v > 0) - (v < 0)) << "SIGN(" << v << ") " << tn(t);
    }
  }
}

TEST(CpuUnary, NotOnBool) {
  Buf x(DataType::kBOOL, Dims{2, 3});
  const std::uint64_t raw[] = {0, 1, 1, 0, 2, 255};  // any non-zero byte reads as true
  for (i64 i = 0; i < 6; ++i) x.set_raw(i, raw[i]);
  Buf y = run_unary(UO::kNOT, x, DataType::kBOOL);
  for (i64 i = 0; i < 6; ++i) EXPECT_EQ(y.raw(i), raw[i] ? 0u : 1u) << i;
}

TEST(CpuUnary, InPlaceAndLarge) {
  std::mt19937 rng(5);
  for (DataType t : {DataType::kFLOAT, DataType::kHALF}) {
    Buf x(t, Dims{300, 1000});  // several threads
    fill_uniform(x, rng, -4, 4);
    Buf copy = x;
    cpu::unary(UO::kEXP, x.ref(), x.ref());
    Checker check{"EXP in place " + tn(t)};
    for (i64 i = 0; i < x.size(); ++i) {
      const double want = std::exp(copy.get(i));
      check(close(t, x.get(i), want, t == DataType::kFLOAT ? 4 : 1), i, x.get(i), want);
    }
  }
  Buf xi(DataType::kINT32, Dims{5});
  for (i64 i = 0; i < 5; ++i) xi.set_int(i, i - 2);
  cpu::unary(UO::kABS, xi.ref(), xi.ref());
  for (i64 i = 0; i < 5; ++i) EXPECT_EQ(xi.get_int(i), std::abs(i - 2));
  Buf empty(DataType::kFLOAT, Dims{0, 3});
  EXPECT_NO_THROW(cpu::unary(UO::kLOG, empty.ref(), empty.ref()));
}

TEST(CpuUnary, EveryFloat16AndBfloat16BitPatternLoadsAndStoresExactly) {
  // NEG and ABS are exact: every value must come back with only its sign changed (NaN: NaN).
  for (DataType t : {DataType::kHALF, DataType::kBF16}) {
    Buf x(t, Dims{65536});
    for (i64 i = 0; i < 65536; ++i) x.set_raw(i, static_cast<std::uint64_t>(i));
    Buf neg = run_unary(UO::kNEG, x, t), abs = run_unary(UO::kABS, x, t), nan = run_unary(UO::kISNAN, x, DataType::kBOOL);
    Checker check{"float16/bfloat16 bit patterns " + tn(t)};
    for (i64 i = 0; i < 65536; ++i) {
      const double v = x.get(i);
      if (std::isnan(v)) {
        check(std::isnan(neg.get(i)) && std::isnan(abs.get(i)) && nan.raw(i) == 1, i, neg.get(i), v);
      } else {
        check(neg.raw(i) == (static_cast<std::uint64_t>(i) ^ 0x8000u), i, neg.get(i), -v);
        check(abs.raw(i) == (static_cast<std::uint64_t>(i) & 0x7FFFu), i, abs.get(i), std::fabs(v));
        check(nan.raw(i) == 0, i, static_cast<double>(nan.raw(i)), 0);
      }
    }
  }
}

TEST(CpuUnary, RejectsWrongTypes) {
  Buf f(DataType::kFLOAT, Dims{4}), i(DataType::kINT32, Dims{4}), b(DataType::kBOOL, Dims{4});
  Buf f5(DataType::kFLOAT, Dims{5});
  EXPECT_THROW(cpu::unary(UO::kNOT, f.ref(), f.ref()), InvalidArgument);
  EXPECT_THROW(cpu::unary(UO::kEXP, i.ref(), i.ref()), InvalidArgument);
  EXPECT_THROW(cpu::unary(UO::kABS, b.ref(), b.ref()), InvalidArgument);
  EXPECT_THROW(cpu::unary(UO::kISNAN, f.ref(), f.ref()), InvalidArgument);  // gives bool
  EXPECT_THROW(cpu::unary(UO::kISNAN, i.ref(), b.ref()), InvalidArgument);
  EXPECT_THROW(cpu::unary(UO::kEXP, f.ref(), f5.ref()), InvalidArgument);
  EXPECT_THROW(cpu::unary(static_cast<UO>(99), f.ref(), f.ref()), InvalidArgument);
}

// ==== reduce ===============================================================================

Dims reduced_dims(const Dims& x, std::uint32_t axes, bool keep) {
  std::vector<i64> d;
  for (int i = 0; i < x.rank(); ++i) {
    if (!((axes >> i) & 1u)) d.push_back(x[i]);
    else if (keep) d.push_back(1);
  }
  return Dims(std::span<const i64>(d));
}

// For every input element (row-major), the index of its output (kept dims, row-major).
std::vector<i64> output_map(const Dims& x, std::uint32_t axes) {
  const i64 n = std::max<i64>(x.volume(), 0);
  std::vector<i64> map(static_cast<std::size_t>(n));
  std::vector<i64> idx(static_cast<std::size_t>(x.rank()), 0), ostride(static_cast<std::size_t>(x.rank()), 0);
  i64 st = 1;
  for (int k = x.rank() - 1; k >= 0; --k)
    if (!((axes >> k) & 1u)) {
      ostride[static_cast<std::size_t>(k)] = st;
      st *= x[k];
    }
  i64 o = 0;
  for (i64 i = 0; i < n; ++i) {
    map[static_cast<std::size_t>(i)] = o;
    for (int k = x.rank() - 1; k >= 0; --k) {  // odometer step
      const auto ku = static_cast<std::size_t>(k);
      ++idx[ku];
      o += ostride[ku];
      if (idx[ku] < x[k]) break;
      o -= idx[ku] * ostride[ku];
      idx[ku] = 0;
    }
  }
  return map;
}

struct FloatAcc {
  long double sum = 0, prod = 1, abs_sum = 0;
  double mx = -kInf, mn = kInf;
  bool nan = false;
  i64 count = 0;
};

const char* op_name(RO op) {
  static const char* const n[] = {"SUM", "PROD", "MAX", "MIN", "AVG"};
  return n[static_cast<int>(op)];
}

// Runs reduce and checks every output against the scalar reference.
void check_reduce(RO op, DataType t, const Dims& xd, std::uint32_t axes, bool keep, Buf& x, const std::string& what) {
  const Dims od = reduced_dims(xd, axes, keep);
  Buf out(t, od);
  cpu::reduce(ReduceParams{op, axes, keep}, x.ref(), out.ref());
  const i64 no = od.volume();
  const std::vector<i64> omap = output_map(xd, axes);
  Checker check{what + " " + op_name(op) + " " + tn(t) + " " + xd.str() + " axes " + std::to_string(axes) +
                (keep ? " keep" : "")};
  if (t == DataType::kINT32 || t == DataType::kINT64) {
    std::vector<std::uint64_t> acc(static_cast<std::size_t>(no), op == RO::kPROD ? 1 : 0);
    std::vector<i64> ext(static_cast<std::size_t>(no), op == RO::kMAX ? std::numeric_limits<i64>::min()
                                                                       : std::numeric_limits<i64>::max());
    if (t == DataType::kINT32)
      for (auto& e : ext)
        e = op == RO::kMAX ? std::numeric_limits<std::int32_t>::min() : std::numeric_limits<std::int32_t>::max();
    for (i64 i = 0; i < x.size(); ++i) {
      const auto o = static_cast<std::size_t>(omap[static_cast<std::size_t>(i)]);
      const i64 v = x.get_int(i);
      if (op == RO::kSUM) acc[o] += static_cast<std::uint64_t>(v);
      if (op == RO::kPROD) acc[o] *= static_cast<std::uint64_t>(v);
      if (op == RO::kMAX) ext[o] = std::max(ext[o], v);
      if (op == RO::kMIN) ext[o] = std::min(ext[o], v);
    }
    for (i64 o = 0; o < no; ++o) {
      i64 want = (op == RO::kSUM || op == RO::kPROD) ? static_cast<i64>(acc[static_cast<std::size_t>(o)])
                                                     : ext[static_cast<std::size_t>(o)];
      if (t == DataType::kINT32) want = static_cast<std::int32_t>(static_cast<std::uint32_t>(want));
      check(out.get_int(o) == want, o, static_cast<double>(out.get_int(o)), static_cast<double>(want));
    }
    return;
  }
  std::vector<FloatAcc> acc(static_cast<std::size_t>(no));
  for (i64 i = 0; i < x.size(); ++i) {
    auto& a = acc[static_cast<std::size_t>(omap[static_cast<std::size_t>(i)])];
    const double v = x.get(i);
    a.sum += v;
    a.prod *= v;
    a.abs_sum += std::fabs(v);
    a.nan |= std::isnan(v);
    a.mx = std::max(a.mx, v);
    a.mn = std::min(a.mn, v);
    ++a.count;
  }
  for (i64 o = 0; o < no; ++o) {
    const auto& a = acc[static_cast<std::size_t>(o)];
    const double got = out.get(o);
    switch (op) {
      case RO::kSUM: {
        const double want = static_cast<double>(a.sum);
        // Accumulated in double, rounded once: the rounded reference or its neighbour.
        check(close(t, got, want, 1, 1e-13 * static_cast<double>(a.abs_sum)), o, got, want);
        break;
      }
      case RO::kAVG: {
        const double want = static_cast<double>(a.sum / static_cast<long double>(a.count));
        check(close(t, got, want, 1, 1e-13 * static_cast<double>(a.abs_sum) / static_cast<double>(a.count)), o, got,
              want);
        break;
      }
      case RO::kPROD: {
        const double want = static_cast<double>(a.prod);
        check(close(t, got, want, 1), o, got, want);
        break;
      }
      case RO::kMAX: check(same(got, a.nan ? kNaN : a.mx), o, got, a.mx); break;
      case RO::kMIN: check(same(got, a.nan ? kNaN : a.mn), o, got, a.mn); break;
    }
  }
}

// Random test input for op: moderate values (products of ~1), ints small enough to wrap only
// in PROD.
Buf reduce_input(RO op, DataType t, const Dims& d, std::mt19937& rng) {
  Buf x(t, d);
  if (t == DataType::kINT32 || t == DataType::kINT64) {
    if (op == RO::kPROD) fill_ints(x, rng, -3, 3);
    else fill_ints(x, rng, t == DataType::kINT32 ? -2000000000 : -(i64{1} << 62), t == DataType::kINT32 ? 2000000000 : i64{1} << 62);
  } else if (op == RO::kPROD) {
    fill_uniform(x, rng, 0.5, 1.75);
    for (i64 i = 0; i < x.size(); i += 3) x.set(i, -x.get(i));
  } else {
    fill_uniform(x, rng, -10, 10);
  }
  return x;
}

const RO kOps[] = {RO::kSUM, RO::kPROD, RO::kMAX, RO::kMIN, RO::kAVG};

TEST(CpuReduce, EveryOperationTypeAndAxesMaskOfA3DTensor) {
  const Dims d{3, 4, 5};
  for (RO op : kOps) {
    for (DataType t : {DataType::kFLOAT, DataType::kHALF, DataType::kBF16, DataType::kINT32, DataType::kINT64}) {
      if (op == RO::kAVG && (t == DataType::kINT32 || t == DataType::kINT64)) continue;
      std::mt19937 rng(static_cast<unsigned>(op) * 31 + static_cast<unsigned>(t));
      Buf x = reduce_input(op, t, d, rng);
      for (std::uint32_t axes = 0; axes < 8; ++axes)
        for (bool keep : {false, true}) check_reduce(op, t, d, axes, keep, x, "3-D");
    }
  }
}

TEST(CpuReduce, SeveralNonAdjacentAxesAndSizeOneDims) {
  struct Case {
    Dims d;
    std::uint32_t axes;
  };
  const Case cases[] = {
      {Dims{2, 3, 4, 5, 6}, 0b10101}, {Dims{2, 3, 4, 5, 6}, 0b01010}, {Dims{2, 3, 4, 5, 6}, 0b10001},
      {Dims{2, 3, 4, 5, 6}, 0b01101}, {Dims{2, 3, 4, 5, 6}, 0b11011}, {Dims{2, 3, 4, 5, 6}, 0b11111},
      {Dims{1, 5, 1, 7}, 0b0101},     {Dims{1, 5, 1, 7}, 0b1010},     {Dims{3, 1, 4, 1}, 0b1010},
      {Dims{3, 1, 4, 1}, 0b0110},     {Dims{1, 1, 1}, 0b111},         {Dims{}, 0},
      {Dims{2, 2, 2, 2, 2, 2, 2, 3}, 0b10110101},
  };
  for (const auto& c : cases) {
    for (RO op : kOps) {
      for (DataType t : {DataType::kFLOAT, DataType::kBF16, DataType::kINT64}) {
        if (op == RO::kAVG && t == DataType::kINT64) continue;
        std::mt19937 rng(c.axes * 17 + static_cast<unsigned>(op));
        Buf x = reduce_input(op, t, c.d, rng);
        for (bool keep : {false, true}) check_reduce(op, t, c.d, c.axes, keep, x, "non-adjacent");
      }
    }
  }
}

TEST(CpuReduce, LargeInnerOuterAndMixedReductions) {
  // Long rows (chunked), one scalar over everything, an outer (strided) dim with few columns,
  // many rows, several column chunks, and a strided reduction with kept dims on both sides.
  struct Case {
    Dims d;
    std::uint32_t axes;
  };
  const Case cases[] = {
      {Dims{3, 50001}, 0b10}, {Dims{100003}, 0b1},      {Dims{20000, 7}, 0b01}, {Dims{4000, 70}, 0b01},
      {Dims{64, 3001}, 0b10}, {Dims{7, 300, 600}, 0b010}, {Dims{600, 5, 300}, 0b101}, {Dims{3, 9000, 2}, 0b010},
  };
  const std::pair<RO, DataType> runs[] = {{RO::kSUM, DataType::kFLOAT}, {RO::kMAX, DataType::kHALF},
                                          {RO::kMIN, DataType::kFLOAT}, {RO::kAVG, DataType::kBF16},
                                          {RO::kSUM, DataType::kINT32}, {RO::kMAX, DataType::kINT64}};
  for (const auto& c : cases) {
    for (const auto& [op, t] : runs) {
      std::mt19937 rng(c.axes * 13 + static_cast<unsigned>(op));
      Buf x = reduce_input(op, t, c.d, rng);
      check_reduce(op, t, c.d, c.axes, false, x, "large");
    }
  }
}

TEST(CpuReduce, ResultsDoNotDependOnTheThreadCount) {
  const std::pair<Dims, std::uint32_t> cases[] = {
      {Dims{2, 200000}, 0b10}, {Dims{100000, 3}, 0b01}, {Dims{300, 40, 50}, 0b101}, {Dims{500000}, 0b1}};
  for (const auto& [d, axes] : cases) {
    for (RO op : {RO::kSUM, RO::kPROD, RO::kAVG}) {
      std::mt19937 rng(11);
      Buf x(DataType::kFLOAT, d);
      fill_uniform(x, rng, op == RO::kPROD ? 0.999 : -1e4, op == RO::kPROD ? 1.001 : 1e4);
      const Dims od = reduced_dims(d, axes, false);
      Buf one(DataType::kFLOAT, od), many(DataType::kFLOAT, od);
      cpu::set_num_threads(1);
      cpu::reduce(ReduceParams{op, axes, false}, x.ref(), one.ref());
      cpu::set_num_threads(7);
      cpu::reduce(ReduceParams{op, axes, false}, x.ref(), many.ref());
      cpu::set_num_threads(0);
      for (i64 i = 0; i < od.volume(); ++i)
        ASSERT_EQ(one.raw(i), many.raw(i)) << op_name(op) << " " << d.str() << " at " << i;
    }
  }
}

TEST(CpuReduce, NaNAndInfinityPropagate) {
  for (DataType t : kFloats) {
    for (std::uint32_t axes : {0b01u, 0b10u, 0b11u}) {  // columns, rows, everything
      Buf x(t, Dims{4, 5});
      for (i64 i = 0; i < 20; ++i) x.set(i, static_cast<double>(i % 7) - 3);
      x.set(0, kNaN);   // row 0, column 0
      x.set(13, kNaN);  // row 2, column 3
      x.set(19, -kInf);  // row 3, column 4
      x.set(6, kInf);   // row 1, column 1
      x.set(16, kInf);  // row 3, column 1
      for (RO op : kOps) check_reduce(op, t, x.dims, axes, false, x, "NaN/inf");
    }
    // inf - inf in a sum gives NaN; MAX of -inf only is -inf; MIN with +inf values.
    Buf x(t, Dims{3, 2});
    const double v[] = {kInf, -kInf, -kInf, -kInf, kInf, 1};
    for (i64 i = 0; i < 6; ++i) x.set(i, v[i]);
    Buf sum(t, Dims{3}), mx(t, Dims{3}), mn(t, Dims{3});
    cpu::reduce(ReduceParams{RO::kSUM, 2, false}, x.ref(), sum.ref());
    cpu::reduce(ReduceParams{RO::kMAX, 2, false}, x.ref(), mx.ref());
    cpu::reduce(ReduceParams{RO::kMIN, 2, false}, x.ref(), mn.ref());
    EXPECT_TRUE(std::isnan(sum.get(0)));
    EXPECT_EQ(sum.get(1), -kInf);
    EXPECT_EQ(sum.get(2), kInf);
    EXPECT_EQ(mx.get(1), -kInf);
    EXPECT_EQ(mn.get(2), 1);
  }
  // A NaN in a long row (vectorized, chunked) and in a long column.
  for (const auto& [d, axes, at] : {std::tuple{Dims{2, 20000}, 0b10u, i64{30000}}, std::tuple{Dims{20000, 2}, 0b01u, i64{30001}}}) {
    Buf x(DataType::kFLOAT, d);
    const bool columns = axes == 0b01u;
    for (i64 i = 0; i < x.size(); ++i) x.set(i, static_cast<double>((columns ? i / 2 : i) % 100));
    x.set(at, kNaN);
    Buf mx(DataType::kFLOAT, Dims{2}), mn(DataType::kFLOAT, Dims{2});
    cpu::reduce(ReduceParams{RO::kMAX, axes, false}, x.ref(), mx.ref());
    cpu::reduce(ReduceParams{RO::kMIN, axes, false}, x.ref(), mn.ref());
    EXPECT_EQ(mx.get(0), 99);
    EXPECT_TRUE(std::isnan(mx.get(1))) << d.str();
    EXPECT_EQ(mn.get(0), 0);
    EXPECT_TRUE(std::isnan(mn.get(1))) << d.str();
  }
}

TEST(CpuReduce, EmptyReducedDimGivesTheIdentity) {
  for (DataType t : {DataType::kFLOAT, DataType::kHALF, DataType::kBF16, DataType::kINT32, DataType::kINT64}) {
    const bool is_int = t == DataType::kINT32 || t == DataType::kINT64;
    for (bool keep : {false, true}) {
      Buf x(t, Dims{2, 0, 3});
      for (RO op : kOps) {
        if (is_int && op == RO::kAVG) continue;
        const Dims od = reduced_dims(x.dims, 0b010, keep);
        Buf out(t, od);
        cpu::reduce(ReduceParams{op, 0b010, keep}, x.ref(), out.ref());
        ASSERT_EQ(od.volume(), 6);
        for (i64 i = 0; i < 6; ++i) {
          if (!is_int) {
            const double want = op == RO::kSUM ? 0 : op == RO::kPROD ? 1 : op == RO::kMAX ? -kInf : op == RO::kMIN ? kInf : kNaN;
            EXPECT_TRUE(same(out.get(i), want)) << op_name(op) << " " << tn(t) << ": " << out.get(i);
          } else {
            const bool i32 = t == DataType::kINT32;
            const i64 lo = i32 ? std::numeric_limits<std::int32_t>::min() : std::numeric_limits<i64>::min();
            const i64 hi = i32 ? std::numeric_limits<std::int32_t>::max() : std::numeric_limits<i64>::max();
            const i64 want = op == RO::kSUM ? 0 : op == RO::kPROD ? 1 : op == RO::kMAX ? lo : hi;
            EXPECT_EQ(out.get_int(i), want) << op_name(op) << " " << tn(t);
          }
        }
        // Everything reduced; and an empty output (the empty dim kept).
        Buf all(t, reduced_dims(x.dims, 0b111, keep));
        cpu::reduce(ReduceParams{op, 0b111, keep}, x.ref(), all.ref());
        if (!is_int && op == RO::kAVG) {
          EXPECT_TRUE(std::isnan(all.get(0)));
        }
        Buf none(t, reduced_dims(x.dims, 0b001, keep));
        EXPECT_NO_THROW(cpu::reduce(ReduceParams{op, 0b001, keep}, x.ref(), none.ref()));
      }
    }
  }
}

TEST(CpuReduce, IntegerSumAndProductWrap) {
  {
    Buf x(DataType::kINT32, Dims{3, 2});
    const i64 v[] = {2147483647, 1, 65536, 65536, -2147483647 - 1, -1};
    for (i64 i = 0; i < 6; ++i) x.set_int(i, v[i]);
    Buf s(DataType::kINT32, Dims{3}), p(DataType::kINT32, Dims{3});
    cpu::reduce(ReduceParams{RO::kSUM, 2, false}, x.ref(), s.ref());
    cpu::reduce(ReduceParams{RO::kPROD, 2, false}, x.ref(), p.ref());
    EXPECT_EQ(s.get_int(0), -2147483647 - 1);
    EXPECT_EQ(s.get_int(2), 2147483647);
    EXPECT_EQ(p.get_int(1), 0);                // 2^32 wraps to 0
    EXPECT_EQ(p.get_int(2), -2147483647 - 1);  // MIN * -1 wraps to MIN
  }
  {
    Buf x(DataType::kINT64, Dims{2, 2});
    const i64 mx = std::numeric_limits<i64>::max();
    const i64 v[] = {mx, mx, i64{1} << 40, i64{1} << 30};
    for (i64 i = 0; i < 4; ++i) x.set_int(i, v[i]);
    Buf s(DataType::kINT64, Dims{2}), p(DataType::kINT64, Dims{2});
    cpu::reduce(ReduceParams{RO::kSUM, 2, false}, x.ref(), s.ref());
    cpu::reduce(ReduceParams{RO::kPROD, 2, false}, x.ref(), p.ref());
    EXPECT_EQ(s.get_int(0), -2);
    EXPECT_EQ(p.get_int(1), 0);  // 2^70 wraps to 0
  }
  // Long rows and columns of large values wrap like the scalar reference.
  for (DataType t : kInts) {
    std::mt19937 rng(3);
    for (const auto& [d, axes] : {std::pair{Dims{3, 40000}, 0b10u}, std::pair{Dims{40000, 3}, 0b01u}}) {
      Buf x = reduce_input(RO::kSUM, t, d, rng);
      check_reduce(RO::kSUM, t, d, axes, true, x, "wrap");
      Buf y = reduce_input(RO::kPROD, t, d, rng);
      check_reduce(RO::kPROD, t, d, axes, false, y, "wrap");
    }
  }
}

TEST(CpuReduce, FloatsAccumulateInDoubleAndRoundOnce) {
  // float32: 1 + 1024 * 2^-30 = 1 + 2^-20; float accumulation would stay at 1.
  {
    Buf x(DataType::kFLOAT, Dims{1025});
    x.set(0, 1.0);
    for (i64 i = 1; i < 1025; ++i) x.set(i, std::ldexp(1.0, -30));
    Buf s(DataType::kFLOAT, Dims{});
    cpu::reduce(ReduceParams{RO::kSUM, 1, false}, x.ref(), s.ref());
    EXPECT_EQ(s.get(0), 1 + std::ldexp(1.0, -20));
  }
  // float16: 1 + 2^-11 + 2^-24 lies above the midpoint of 1 and 1 + 2^-10: rounded once it is
  // 1 + 2^-10; through float32 first it would be the tie 1 + 2^-11, rounded to even: 1.
  // bfloat16 likewise with 1 + 2^-8 + 2^-30. Rows and columns, SUM and AVG.
  struct Case {
    DataType t;
    double small, tiny, want;
  };
  for (const Case c : {Case{DataType::kHALF, std::ldexp(1.0, -11), std::ldexp(1.0, -24), 1 + std::ldexp(1.0, -10)},
                       Case{DataType::kBF16, std::ldexp(1.0, -8), std::ldexp(1.0, -30), 1 + std::ldexp(1.0, -7)}}) {
    for (bool columns : {false, true}) {
      Buf x(c.t, columns ? Dims{3, 2} : Dims{2, 3});
      const double v[] = {1, c.small, c.tiny};
      for (i64 i = 0; i < 3; ++i) {
        x.set(columns ? i * 2 : i, v[i]);
        x.set(columns ? i * 2 + 1 : i + 3, 4 * v[i]);
      }
      Buf s(c.t, Dims{2}), a(c.t, Dims{2});
      const std::uint32_t axes = columns ? 0b01 : 0b10;
      cpu::reduce(ReduceParams{RO::kSUM, axes, false}, x.ref(), s.ref());
      EXPECT_EQ(s.get(0), c.want) << tn(c.t) << (columns ? " columns" : " rows");
      EXPECT_EQ(s.get(1), 4 * c.want) << tn(c.t) << (columns ? " columns" : " rows");
      // AVG of 3 * (1 + ...) values: x3 each so the mean is the same sum.
      Buf y(c.t, Dims{3});
      for (i64 i = 0; i < 3; ++i) y.set(i, 3 * v[i]);
      Buf m(c.t, Dims{});
      cpu::reduce(ReduceParams{RO::kAVG, 1, false}, y.ref(), m.ref());
      EXPECT_EQ(m.get(0), c.want) << tn(c.t) << " AVG";
    }
  }
}

TEST(CpuReduce, RejectsInvalidArguments) {
  Buf xi(DataType::kINT32, Dims{2, 3}), oi(DataType::kINT32, Dims{2});
  EXPECT_THROW(cpu::reduce(ReduceParams{RO::kAVG, 2, false}, xi.ref(), oi.ref()), InvalidArgument);
  Buf x(DataType::kFLOAT, Dims{2, 3}), o(DataType::kFLOAT, Dims{2}), o3(DataType::kFLOAT, Dims{3});
  Buf ok(DataType::kFLOAT, Dims{2, 1}), oh(DataType::kHALF, Dims{2});
  EXPECT_THROW(cpu::reduce(ReduceParams{RO::kSUM, 2, false}, x.ref(), o3.ref()), InvalidArgument);
  EXPECT_THROW(cpu::reduce(ReduceParams{RO::kSUM, 2, true}, x.ref(), o.ref()), InvalidArgument);
  EXPECT_NO_THROW(cpu::reduce(ReduceParams{RO::kSUM, 2, true}, x.ref(), ok.ref()));
  EXPECT_THROW(cpu::reduce(ReduceParams{RO::kSUM, 2, false}, x.ref(), oh.ref()), InvalidArgument);
  EXPECT_THROW(cpu::reduce(ReduceParams{RO::kSUM, 4, false}, x.ref(), x.ref()), InvalidArgument);
  Buf b(DataType::kBOOL, Dims{2, 3}), ob(DataType::kBOOL, Dims{2});
  EXPECT_THROW(cpu::reduce(ReduceParams{RO::kMAX, 2, false}, b.ref(), ob.ref()), InvalidArgument);
  EXPECT_THROW(cpu::reduce(ReduceParams{static_cast<RO>(9), 2, false}, x.ref(), o.ref()), InvalidArgument);
}

// ==== softmax ==============================================================================

void check_softmax(DataType t, Buf& x, int axis, const std::string& what, bool in_place = false) {
  const Dims d = x.dims;
  Buf copy = x;
  Buf fresh(t, d);
  Buf& out = in_place ? x : fresh;
  cpu::softmax(axis, x.ref(), out.ref());
  i64 outer = 1, inner = 1;
  const i64 n = d[axis];
  for (int k = 0; k < axis; ++k) outer *= d[k];
  for (int k = axis + 1; k < d.rank(); ++k) inner *= d[k];
  Checker check{what + " softmax " + tn(t) + " " + d.str() + " axis " + std::to_string(axis)};
  for (i64 o = 0; o < outer; ++o) {
    for (i64 j = 0; j < inner; ++j) {
      auto at = [&](i64 i) { return (o * n + i) * inner + j; };
      double m = -kInf;
      bool nan = false;
      for (i64 i = 0; i < n; ++i) {
        nan |= std::isnan(copy.get(at(i)));
        m = std::max(m, copy.get(at(i)));
      }
      long double s = 0;
      for (i64 i = 0; i < n; ++i) s += std::exp(static_cast<long double>(copy.get(at(i)) - m));
      for (i64 i = 0; i < n; ++i) {
        const double z = copy.get(at(i)) - m;
        const double want = nan ? kNaN : static_cast<double>(std::exp(static_cast<long double>(z)) / s);
        // exp of the float32 difference: its error grows with |z| (2^-24 relative of z).
        const double tol = t == DataType::kFLOAT ? 2 : 1;
        check(close(t, out.get(at(i)), want, tol, std::fabs(want) * (std::fabs(z) + 4) * 0x1p-23), at(i),
              out.get(at(i)), want);
      }
    }
  }
}

TEST(CpuSoftmax, EachAxisOfA3DTensorInEveryType) {
  for (DataType t : kFloats) {
    for (int axis = 0; axis < 3; ++axis) {
      std::mt19937 rng(static_cast<unsigned>(axis) + 10 * static_cast<unsigned>(t));
      Buf x(t, Dims{3, 4, 5});
      fill_uniform(x, rng, -6, 6);
      check_softmax(t, x, axis, "3-D");
    }
  }
}

TEST(CpuSoftmax, LongRowsManyRowsWideColumnsAndSizeOneAxis) {
  std::mt19937 rng(8);
  const std::pair<Dims, int> cases[] = {
      {Dims{3, 70000}, 1}, {Dims{1000, 33}, 1}, {Dims{40, 300}, 0}, {Dims{2, 50, 700}, 1},
      {Dims{6, 1, 4}, 1},  {Dims{9}, 0},        {Dims{1, 1}, 0},     {Dims{2, 3, 1, 4, 5}, 3},
  };
  for (const auto& [d, axis] : cases)
    for (DataType t : {DataType::kFLOAT, DataType::kBF16}) {
      Buf x(t, d);
      fill_uniform(x, rng, -20, 20);
      check_softmax(t, x, axis, "shapes");
    }
}

TEST(CpuSoftmax, NaNInfinityAndLargeValues) {
  for (DataType t : kFloats) {
    for (int axis : {0, 1}) {
      // Lines (along the axis) of 4: a NaN line, an all -inf line (NaN), a line with some -inf
      // (exactly 0 there), a +inf line (inf - inf: NaN), and large values that would overflow
      // exp without subtracting the maximum.
      const std::vector<std::vector<double>> lines = {
          {1, kNaN, 2, 3}, {-kInf, -kInf, -kInf, -kInf}, {-kInf, 0, -kInf, 1}, {kInf, 1, 2, 3}, {96, 97, 95, 96}};
      const i64 L = static_cast<i64>(lines.size());
      Buf x(t, axis == 1 ? Dims{L, 4} : Dims{4, L});
      for (i64 l = 0; l < L; ++l)
        for (i64 i = 0; i < 4; ++i) x.set(axis == 1 ? l * 4 + i : i * L + l, lines[static_cast<std::size_t>(l)][static_cast<std::size_t>(i)]);
      Buf out(t, x.dims);
      cpu::softmax(axis, x.ref(), out.ref());
      auto y = [&](i64 l, i64 i) { return out.get(axis == 1 ? l * 4 + i : i * L + l); };
      for (i64 i = 0; i < 4; ++i) {
        EXPECT_TRUE(std::isnan(y(0, i))) << tn(t) << " NaN line";
        EXPECT_TRUE(std::isnan(y(1, i))) << tn(t) << " -inf line";
        EXPECT_TRUE(std::isnan(y(3, i))) << tn(t) << " +inf line";
      }
      EXPECT_EQ(y(2, 0), 0);
      EXPECT_EQ(y(2, 2), 0);
      EXPECT_TRUE(close(t, y(2, 1), 1 / (1 + std::exp(1.0)), 1, 1e-7));
      EXPECT_TRUE(close(t, y(2, 3), 1 / (1 + std::exp(-1.0)), 1, 1e-7));
      const double s = 2 + std::exp(1.0) + std::exp(-1.0);
      EXPECT_TRUE(close(t, y(4, 1), std::exp(1.0) / s, 1, 1e-7)) << y(4, 1);
      EXPECT_TRUE(close(t, y(4, 2), std::exp(-1.0) / s, 1, 1e-7)) << y(4, 2);
    }
  }
}

TEST(CpuSoftmax, ExponentialAccurateOverItsWholeRange) {
  // Rows (0, z): the second output is e^z / (1 + e^z), down to float32 subnormals and 0.
  for (DataType t : kFloats) {
    const i64 rows = 4000;
    Buf x(t, Dims{rows, 2});
    for (i64 r = 0; r < rows; ++r) {
      x.set(2 * r, 0);
      x.set(2 * r + 1, -110.0 * static_cast<double>(r) / (rows - 1) - (r % 3) * 1e-3);
    }
    Buf out(t, x.dims);
    cpu::softmax(1, x.ref(), out.ref());
    Checker check{"softmax of (0, z) " + tn(t)};
    for (i64 r = 0; r < rows; ++r) {
      const long double e = std::exp(static_cast<long double>(x.get(2 * r + 1)));
      const double want1 = static_cast<double>(e / (1 + e)), want0 = static_cast<double>(1 / (1 + e));
      check(close(t, out.get(2 * r + 1), want1, 2), 2 * r + 1, out.get(2 * r + 1), want1);
      check(close(t, out.get(2 * r), want0, 1), 2 * r, out.get(2 * r), want0);
    }
  }
}

// Far below the row's maximum (an attention mask's padded keys add float32's minimum): exactly
// +0, without disturbing the row; e^-103.5 still rounds to the smallest float32 subnormal.
TEST(CpuSoftmax, MaskedValuesGiveExactZeros) {
  for (DataType t : kFloats) {
    const std::vector<double> z = {-104.5, -3.4028234663852886e38, -1e30, -103.5};
    Buf x(t, Dims{static_cast<i64>(z.size()), 2});
    for (std::size_t r = 0; r < z.size(); ++r) {
      x.set(static_cast<i64>(2 * r), 0);
      x.set(static_cast<i64>(2 * r + 1), z[r]);
    }
    Buf out(t, x.dims);
    cpu::softmax(1, x.ref(), out.ref());
    for (std::size_t r = 0; r < z.size(); ++r) {
      EXPECT_EQ(out.get(static_cast<i64>(2 * r)), 1.0) << tn(t) << " row " << r;
      const double v = out.get(static_cast<i64>(2 * r + 1));
      if (r == 3 && t == DataType::kFLOAT) {
        EXPECT_EQ(v, std::ldexp(1.0, -149)) << "e^-103.5 rounds to the smallest subnormal";
      } else if (x.get(static_cast<i64>(2 * r + 1)) < -104) {
        EXPECT_EQ(v, 0.0) << tn(t) << " row " << r;
        EXPECT_FALSE(std::signbit(v)) << tn(t) << " row " << r;
      }
    }
  }
}

// float32 rows run 16 lanes wide where the CPU has AVX-512 (softmax_rows_wide); their results
// are the baseline rows' bit for bit (TENSORACLE_SOFTMAX_NO_AVX512=1 takes the baseline): row
// lengths around the 16-lane sum's remainder, random values, masked keys near float32's
// minimum, -inf and NaN, and in place. (Fused multiply-adds in the wide code, for one, would
// change many of them.)
// Whether this CPU runs the kernels' AVX-512 paths (the CPU half of detail::avx512_kernels).
bool cpu_has_avx512() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

// A kernel's switch back to its baseline code (TENSORACLE_*_NO_AVX512), set while it lives.
struct BaselineSwitch {
  const char* name;
  explicit BaselineSwitch(const char* n) : name(n) { setenv(n, "1", 1); }
  ~BaselineSwitch() { unsetenv(name); }
};

TEST(CpuSoftmax, WideRowsMatchTheBaselineBitForBit) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU: only the baseline rows run here";
  std::mt19937 rng(12);
  const double specials[] = {-3.4028234663852886e38, -1e30, -std::numeric_limits<double>::infinity(),
                             std::numeric_limits<double>::quiet_NaN(), 88.0, -104.5};
  std::size_t compared = 0;
  for (i64 n : {1, 7, 15, 16, 17, 33, 128, 1000}) {
    Buf x(DataType::kFLOAT, Dims{48, n});
    fill_uniform(x, rng, -30, 30);
    for (i64 r = 0; r < 48; r += 3)  // every third row: a few special values
      for (int k = 0; k < 3; ++k) x.set(r * n + static_cast<i64>(rng() % static_cast<unsigned>(n)), specials[rng() % 6]);
    Buf wide(DataType::kFLOAT, x.dims), base(DataType::kFLOAT, x.dims), in_place = x;
    cpu::softmax(1, x.ref(), wide.ref());
    cpu::softmax(1, in_place.ref(), in_place.ref());
    {
      BaselineSwitch env("TENSORACLE_SOFTMAX_NO_AVX512");
      cpu::softmax(1, x.ref(), base.ref());
    }
    for (i64 i = 0; i < x.size(); ++i) {
      ASSERT_EQ(wide.raw(i), base.raw(i)) << n << " columns, element " << i << ": " << wide.get(i) << " vs " << base.get(i);
      ASSERT_EQ(in_place.raw(i), base.raw(i)) << n << " columns, element " << i << " in place";
    }
    compared += static_cast<std::size_t>(x.size());
  }
  EXPECT_GT(compared, 50000u);
}

TEST(CpuSoftmax, InPlaceAndRejects) {
  std::mt19937 rng(4);
  for (const auto& [d, axis] : {std::pair{Dims{4, 6}, 1}, std::pair{Dims{4, 6}, 0}}) {
    Buf x(DataType::kHALF, d);
    fill_uniform(x, rng, -3, 3);
    check_softmax(DataType::kHALF, x, axis, "in place", true);
  }
  Buf x(DataType::kFLOAT, Dims{2, 3}), o(DataType::kFLOAT, Dims{3, 2}), oh(DataType::kHALF, Dims{2, 3});
  Buf xi(DataType::kINT32, Dims{2, 3});
  EXPECT_THROW(cpu::softmax(2, x.ref(), x.ref()), InvalidArgument);
  EXPECT_THROW(cpu::softmax(-1, x.ref(), x.ref()), InvalidArgument);
  EXPECT_THROW(cpu::softmax(1, x.ref(), o.ref()), InvalidArgument);
  EXPECT_THROW(cpu::softmax(1, x.ref(), oh.ref()), InvalidArgument);
  EXPECT_THROW(cpu::softmax(1, xi.ref(), xi.ref()), InvalidArgument);
  Buf e(DataType::kFLOAT, Dims{0, 3});
  EXPECT_NO_THROW(cpu::softmax(1, e.ref(), e.ref()));
}

// ==== normalization ========================================================================

// Statistics set of input element `flat`, numbered row-major over its indices on the kept
// dims (and its channel's group when grouped).
i64 stat_id(const Dims& d, std::uint32_t axes, int groups, i64 flat) {
  const auto idx = unflatten(d, flat);
  i64 id = 0;
  for (int k = 0; k < d.rank(); ++k) {
    const i64 v = idx[static_cast<std::size_t>(k)];
    if (groups > 1 && k == 1) id = id * groups + v / (d[1] / groups);
    else if (!((axes >> k) & 1u)) id = id * d[k] + v;
  }
  return id;
}

i64 broadcast_index(const Dims& x, const Dims& s, i64 flat) {
  const auto idx = unflatten(x, flat);
  i64 o = 0;
  for (int k = 0; k < x.rank(); ++k) o = o * s[k] + (s[k] == 1 ? 0 : idx[static_cast<std::size_t>(k)]);
  return o;
}

// Runs normalization on random x, scale, bias and compares with the reference.
void check_norm(DataType t, const Dims& xd, std::uint32_t axes, int groups, const Dims& sd, const Dims& bd,
                const std::string& what, float eps = 1e-5f, Buf* given = nullptr) {
  std::mt19937 rng(static_cast<unsigned>(xd.volume()) * 3 + axes + static_cast<unsigned>(groups) * 101);
  Buf x = given ? *given : Buf(t, xd);
  if (!given) {
    fill_uniform(x, rng, -3, 5);
    for (i64 i = 0; i < x.size(); i += 7) x.set(i, x.get(i) * 4);
  }
  Buf scale(t, sd), bias(t, bd), out(t, xd);
  fill_uniform(scale, rng, 0.5, 2);
  fill_uniform(bias, rng, -1, 1);
  NormalizationParams p;
  p.axes = axes;
  p.epsilon = eps;
  p.num_groups = groups;
  cpu::normalization(p, x.ref(), scale.ref(), bias.ref(), out.ref());
  // Reference statistics: long double, two passes.
  std::vector<i64> ids(static_cast<std::size_t>(x.size()));
  std::vector<std::array<long double, 3>> stats(static_cast<std::size_t>(x.size()), {0, 0, 0});  // sum, count, sq
  auto find = [&](i64 i) -> std::array<long double, 3>& { return stats[static_cast<std::size_t>(ids[static_cast<std::size_t>(i)])]; };
  for (i64 i = 0; i < x.size(); ++i) {
    ids[static_cast<std::size_t>(i)] = stat_id(xd, axes, groups, i);
    auto& s = find(i);
    s[0] += x.get(i);
    s[1] += 1;
  }
  for (i64 i = 0; i < x.size(); ++i) {
    auto& s = find(i);
    const long double dv = x.get(i) - s[0] / s[1];
    s[2] += dv * dv;
  }
  Checker check{what + " " + tn(t) + " " + xd.str() + " axes " + std::to_string(axes) + " groups " +
                std::to_string(groups)};
  for (i64 i = 0; i < x.size(); ++i) {
    const auto& s = find(i);
    const long double mean = s[0] / s[1], var = s[2] / s[1];
    const long double rstd = 1 / std::sqrt(var + static_cast<long double>(eps));
    const double sc = scale.get(broadcast_index(xd, sd, i)), bi = bias.get(broadcast_index(xd, bd, i));
    const long double norm = (x.get(i) - mean) * rstd;
    const double want = static_cast<double>(norm * sc + bi);
    // Computed in float32 from float32 mean and 1/std: a few float32 roundings of the terms.
    const double terms = static_cast<double>((std::fabs(x.get(i)) + std::fabs(mean)) * rstd) * std::fabs(sc) + std::fabs(bi);
    check(close(t, out.get(i), want, t == DataType::kFLOAT ? 1 : 1, 8 * 0x1p-24 * terms), i, out.get(i), want);
  }
}

TEST(CpuNorm, LayerNormOverTheLastDimAndTheLastTwoDims) {
  for (DataType t : kFloats) {
    check_norm(t, Dims{4, 6, 32}, 0b100, 1, Dims{1, 1, 32}, Dims{1, 1, 32}, "layer norm last dim");
    check_norm(t, Dims{3, 5, 7}, 0b110, 1, Dims{1, 5, 7}, Dims{1, 5, 7}, "layer norm last two dims");
    check_norm(t, Dims{2, 3, 5, 7}, 0b1100, 1, Dims{1, 1, 5, 7}, Dims{1, 1, 1, 7}, "layer norm, bias per column");
  }
}

TEST(CpuNorm, InstanceNorm) {
  for (DataType t : kFloats) {
    check_norm(t, Dims{2, 3, 4, 5}, 0b1100, 1, Dims{1, 3, 1, 1}, Dims{1, 3, 1, 1}, "instance norm 2-D");
    check_norm(t, Dims{3, 4, 17}, 0b100, 1, Dims{1, 4, 1}, Dims{1, 4, 1}, "instance norm 1-D");
    check_norm(t, Dims{2, 3, 2, 3, 4}, 0b11100, 1, Dims{1, 3, 1, 1, 1}, Dims{1, 1, 1, 1, 1}, "instance norm 3-D");
  }
}

TEST(CpuNorm, GroupNormWithTwoAndFourGroups) {
  for (DataType t : kFloats) {
    for (int g : {2, 4}) {
      check_norm(t, Dims{2, 8, 3, 5}, 0b1100, g, Dims{1, 8, 1, 1}, Dims{1, 8, 1, 1}, "group norm");
      check_norm(t, Dims{3, 8, 10}, 0b100, g, Dims{1, 8, 1}, Dims{1, 1, 1}, "group norm 1-D");
      check_norm(t, Dims{2, 4 * g, 1, 6}, 0b1100, g, Dims{1, 4 * g, 1, 6}, Dims{1, 4 * g, 1, 1}, "group norm, size-1 dim");
    }
    check_norm(t, Dims{2, 8, 6}, 0b100, 8, Dims{1, 8, 1}, Dims{1, 8, 1}, "one channel per group (instance)");
    check_norm(t, Dims{2, 6, 5}, 0b100, 6, Dims{1, 6, 1}, Dims{1, 6, 1}, "groups == channels");
  }
}

TEST(CpuNorm, StridedStatisticsAndBroadcastShapes) {
  for (DataType t : {DataType::kFLOAT, DataType::kHALF}) {
    check_norm(t, Dims{4, 3, 5, 6}, 0b1101, 1, Dims{1, 3, 1, 1}, Dims{1, 3, 1, 1}, "batch-norm style axes");
    check_norm(t, Dims{50, 40}, 0b01, 1, Dims{1, 40}, Dims{50, 40}, "outer axis");
    check_norm(t, Dims{3, 7, 9}, 0b010, 1, Dims{3, 7, 9}, Dims{1, 1, 1}, "middle axis, full scale");
    check_norm(t, Dims{3, 300, 5}, 0b101, 1, Dims{1, 300, 1}, Dims{1, 1, 5}, "outer and inner axes");
    check_norm(t, Dims{2, 4, 3, 5}, 0b1000, 2, Dims{1, 4, 1, 1}, Dims{1, 4, 3, 1}, "group norm over the last dim only");
    check_norm(t, Dims{5, 1, 6}, 0b011, 1, Dims{1, 1, 6}, Dims{1, 1, 1}, "size-1 normalized dim");
  }
}

TEST(CpuNorm, LargeTensors) {
  check_norm(DataType::kFLOAT, Dims{2, 70000}, 0b10, 1, Dims{1, 70000}, Dims{1, 1}, "long rows");
  check_norm(DataType::kFLOAT, Dims{512, 256}, 0b10, 1, Dims{1, 256}, Dims{1, 256}, "many rows");
  check_norm(DataType::kBF16, Dims{2, 32, 16, 16}, 0b1100, 8, Dims{1, 32, 1, 1}, Dims{1, 32, 1, 1}, "group norm");
  check_norm(DataType::kFLOAT, Dims{20000, 6}, 0b01, 1, Dims{1, 6}, Dims{1, 6}, "long columns");
}

// float32 normalizations run compiled for AVX-512 where the CPU has it (the *_wide functions);
// their results are the baseline's bit for bit (TENSORACLE_NORM_NO_AVX512=1 takes the baseline):
// row lengths around the 16-lane sums' remainder, several rows per statistics set, groups,
// columns, the scale and bias per element, per column and scalar, NaN, infinity and large
// values, and in place. (The statistics' double sums have a fixed order by construction,
// sum16; a different order would almost never reach a float32 output, so this test guards the
// wide path's indexing, strides and float32 arithmetic, not the order of the sums.)
TEST(CpuNorm, WideMatchesTheBaselineBitForBit) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU: only the baseline normalizations run here";
  struct Case {
    Dims x;
    std::uint32_t axes;
    int groups;
    Dims scale, bias;
  };
  std::vector<Case> cases;
  for (i64 n : {1, 7, 15, 16, 17, 33, 384, 1000})
    cases.push_back({Dims{40, n}, 0b10, 1, Dims{1, n}, Dims{1, n}});
  cases.push_back({Dims{4, 6, 35}, 0b110, 1, Dims{1, 6, 35}, Dims{1, 1, 1}});
  cases.push_back({Dims{3, 30, 21}, 0b101, 1, Dims{1, 30, 1}, Dims{1, 1, 21}});  // 3 rows of 21 per set
  cases.push_back({Dims{2, 16, 9, 11}, 0b1100, 4, Dims{1, 16, 1, 1}, Dims{1, 16, 1, 1}});
  cases.push_back({Dims{50, 40}, 0b01, 1, Dims{1, 40}, Dims{50, 40}});  // columns
  std::mt19937 rng(31);
  const double specials[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(), 3e30,
                             -2e-30};
  std::size_t compared = 0;
  for (const Case& c : cases) {
    Buf x(DataType::kFLOAT, c.x), scale(DataType::kFLOAT, c.scale), bias(DataType::kFLOAT, c.bias);
    fill_uniform(x, rng, -40, 90);
    fill_uniform(scale, rng, -2, 2);
    fill_uniform(bias, rng, -1, 1);
    for (int k = 0; k < 3; ++k) x.set(static_cast<i64>(rng() % static_cast<unsigned>(x.size())), specials[rng() % 4]);
    NormalizationParams p;
    p.axes = c.axes;
    p.epsilon = 1e-5f;
    p.num_groups = c.groups;
    Buf wide(DataType::kFLOAT, c.x), base(DataType::kFLOAT, c.x), in_place = x;
    cpu::normalization(p, x.ref(), scale.ref(), bias.ref(), wide.ref());
    cpu::normalization(p, in_place.ref(), scale.ref(), bias.ref(), in_place.ref());
    {
      BaselineSwitch env("TENSORACLE_NORM_NO_AVX512");
      cpu::normalization(p, x.ref(), scale.ref(), bias.ref(), base.ref());
    }
    for (i64 i = 0; i < x.size(); ++i) {
      ASSERT_EQ(wide.raw(i), base.raw(i)) << c.x.str() << " axes " << c.axes << ", element " << i << ": "
                                          << wide.get(i) << " vs " << base.get(i);
      ASSERT_EQ(in_place.raw(i), base.raw(i)) << c.x.str() << " axes " << c.axes << ", element " << i << " in place";
    }
    compared += static_cast<std::size_t>(x.size());
  }
  EXPECT_GT(compared, 50000u);
}

TEST(CpuNorm, ConstantInputNaNAndEmpty) {
  for (DataType t : kFloats) {
    // A constant group has variance 0: the output is the bias (epsilon > 0), NaN with epsilon 0.
    Buf x(t, Dims{2, 3, 4});
    for (i64 i = 0; i < 24; ++i) x.set(i, i < 12 ? 2.5 : static_cast<double>(i));
    x.set(20, kNaN);  // instance 1, channel 2
    Buf scale(t, Dims{1, 3, 1}), bias(t, Dims{1, 3, 1}), out(t, x.dims);
    for (i64 c = 0; c < 3; ++c) {
      scale.set(c, 2);
      bias.set(c, 0.25 * static_cast<double>(c));
    }
    NormalizationParams p;
    p.axes = 0b100;
    cpu::normalization(p, x.ref(), scale.ref(), bias.ref(), out.ref());
    for (i64 i = 0; i < 12; ++i) EXPECT_EQ(out.get(i), 0.25 * static_cast<double>(i / 4)) << tn(t) << " at " << i;
    for (i64 i = 16; i < 20; ++i) EXPECT_TRUE(std::isfinite(out.get(i))) << tn(t) << " at " << i;
    for (i64 i = 20; i < 24; ++i) EXPECT_TRUE(std::isnan(out.get(i))) << tn(t) << " NaN stays in its instance, at " << i;
    p.epsilon = 0;
    cpu::normalization(p, x.ref(), scale.ref(), bias.ref(), out.ref());
    EXPECT_TRUE(std::isnan(out.get(0))) << "0 / sqrt(0)";
    // In place.
    Buf y(t, Dims{2, 3, 4});
    std::mt19937 rng(2);
    fill_uniform(y, rng, -1, 1);
    check_norm(t, y.dims, 0b110, 1, Dims{1, 3, 4}, Dims{1, 1, 4}, "reference for in place", 1e-5f, &y);
    Buf expect(t, y.dims);
    p.epsilon = 1e-5f;
    p.axes = 0b110;
    Buf s1(t, Dims{1, 1, 1}), b1(t, Dims{1, 1, 1});
    s1.set(0, 1.5);
    b1.set(0, -0.5);
    cpu::normalization(p, y.ref(), s1.ref(), b1.ref(), expect.ref());
    cpu::normalization(p, y.ref(), s1.ref(), b1.ref(), y.ref());
    for (i64 i = 0; i < y.size(); ++i) EXPECT_EQ(y.raw(i), expect.raw(i)) << "in place " << tn(t);
  }
  Buf e(DataType::kFLOAT, Dims{0, 4}), s(DataType::kFLOAT, Dims{1, 4});
  NormalizationParams p;
  p.axes = 0b10;
  EXPECT_NO_THROW(cpu::normalization(p, e.ref(), s.ref(), s.ref(), e.ref()));
}

TEST(CpuNorm, RejectsInvalidArguments) {
  Buf x(DataType::kFLOAT, Dims{2, 6, 4}), out(DataType::kFLOAT, Dims{2, 6, 4});
  Buf s(DataType::kFLOAT, Dims{1, 6, 1}), s2(DataType::kFLOAT, Dims{6, 1}), s3(DataType::kFLOAT, Dims{1, 3, 1});
  NormalizationParams p;
  p.axes = 0b100;
  EXPECT_NO_THROW(cpu::normalization(p, x.ref(), s.ref(), s.ref(), out.ref()));
  EXPECT_THROW(cpu::normalization(p, x.ref(), s2.ref(), s.ref(), out.ref()), InvalidArgument);  // rank
  EXPECT_THROW(cpu::normalization(p, x.ref(), s.ref(), s3.ref(), out.ref()), InvalidArgument);  // dims
  p.num_groups = 4;  // 6 channels
  EXPECT_THROW(cpu::normalization(p, x.ref(), s.ref(), s.ref(), out.ref()), InvalidArgument);
  p.num_groups = 3;
  EXPECT_NO_THROW(cpu::normalization(p, x.ref(), s.ref(), s.ref(), out.ref()));
  p.axes = 0b110;  // channels both grouped and normalized
  EXPECT_THROW(cpu::normalization(p, x.ref(), s.ref(), s.ref(), out.ref()), InvalidArgument);
  p.axes = 0b1000;  // beyond the rank
  p.num_groups = 1;
  EXPECT_THROW(cpu::normalization(p, x.ref(), s.ref(), s.ref(), out.ref()), InvalidArgument);
  p.axes = 0b100;
  p.epsilon = -1;
  EXPECT_THROW(cpu::normalization(p, x.ref(), s.ref(), s.ref(), out.ref()), InvalidArgument);
  p.epsilon = 1e-5f;
  Buf xi(DataType::kINT32, Dims{2, 6, 4});
  EXPECT_THROW(cpu::normalization(p, xi.ref(), s.ref(), s.ref(), xi.ref()), InvalidArgument);
  Buf oh(DataType::kHALF, Dims{2, 6, 4});
  EXPECT_THROW(cpu::normalization(p, x.ref(), s.ref(), s.ref(), oh.ref()), InvalidArgument);
}

}  // namespace
