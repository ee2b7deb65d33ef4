// Tests of the CPU backend's unary kernel (backends/cpu/kernels.h) against scalar reference
// loops written here. References are computed in double and rounded once to the output type
// with a rounding written from the IEEE definition (cpu_reduce_test_helpers.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels.h"
#include "cpu_reduce_test_helpers.h"
#include "tensoracle/errors.h"

namespace {

using namespace tensoracle;
using namespace tensoracle::testing::cpu_reduce;
using UO = UnaryOperation;

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

}  // namespace
