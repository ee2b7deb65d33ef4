// Tests of the CPU backend's elementwise and activation kernels (backends/cpu/kernels.h)
// against scalar reference loops written here and in cpu_kernels_test_helpers.h:
// double-precision references rounded to the output type as kernels.h states (computed in
// float32, rounded once when stored).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_util.h"
#include "cpu_kernels_test_helpers.h"
#include "tensoracle/errors.h"

namespace {

using namespace tensoracle;
using namespace tensoracle::testing::cpu_kernels;
using A = ActivationType;
__extension__ typedef __int128 i128;
__extension__ typedef unsigned __int128 u128;

// ---- elementwise ------------------------------------------------------------------------

TEST(CpuKernelsElementwise, FloatOpsEveryTypeSameShape) {
  const E ops[] = {E::kSUM, E::kPROD, E::kSUB, E::kDIV, E::kPOW, E::kFLOOR_DIV,
                   E::kMAX, E::kMIN, E::kEQUAL, E::kGREATER, E::kLESS};
  for (DataType t : kFloatTypes)
    for (E op : ops) check_float_elementwise(op, t, Dims{3, 7, 11}, Dims{3, 7, 11}, 17 + static_cast<int>(op));
}

TEST(CpuKernelsElementwise, BroadcastPatterns) {
  struct Case {
    Dims a, b;
  };
  const Case cases[] = {
      {{4, 5, 6}, {1, 1, 1}},               // scalar right
      {{1, 1, 1}, {4, 5, 6}},               // scalar left
      {{4, 5, 6}, {1, 1, 6}},               // row (bias)
      {{1, 1, 6}, {4, 5, 6}},               // row on the left
      {{4, 5, 6}, {4, 5, 1}},               // column
      {{4, 5, 6}, {1, 5, 1}},               // middle dim
      {{4, 1, 6}, {1, 5, 1}},               // both sides
      {{1, 5, 6}, {4, 1, 1}},               // both sides, other split
      {{2, 1, 3, 1, 4}, {1, 5, 3, 2, 1}},   // rank 5, alternating
      {{}, {}},                             // rank 0
      {{7}, {1}},                           // rank 1 scalar
      {{0, 3}, {1, 3}},                     // empty
  };
  for (const Case& c : cases)
    for (DataType t : kFloatTypes) {
      check_float_elementwise(E::kSUB, t, c.a, c.b, 3);
      check_float_elementwise(E::kLESS, t, c.a, c.b, 4);
    }
}

TEST(CpuKernelsElementwise, BroadcastLargeUsesThreads) {
  // Above the parallel threshold, with rows split across threads mid-row.
  check_float_elementwise(E::kSUB, DataType::kFLOAT, {64, 301, 8}, {1, 301, 1}, 5);
  check_float_elementwise(E::kSUB, DataType::kFLOAT, {100003}, {1}, 6);
  check_float_elementwise(E::kDIV, DataType::kFLOAT, {1}, {100003}, 7);
  check_float_elementwise(E::kSUM, DataType::kHALF, {257, 129}, {257, 1}, 8);
  check_float_elementwise(E::kPROD, DataType::kBF16, {300, 401}, {1, 401}, 9);
  check_float_elementwise(E::kMAX, DataType::kFLOAT, {33, 1, 1001}, {1, 7, 1001}, 10);
  check_float_elementwise(E::kSUM, DataType::kFLOAT, {200, 300}, {200, 300}, 11);
}

TEST(CpuKernelsElementwise, FloatSpecialValues) {
  Buf a(DataType::kFLOAT, {6}), b(DataType::kFLOAT, {6});
  const double av[] = {kNaN, 1, kNaN, -0.0, 2, 3}, bv[] = {1, kNaN, kNaN, 0.0, kInf, -kInf};
  for (int i = 0; i < 6; ++i) a.set(i, av[i]), b.set(i, bv[i]);
  Buf out(DataType::kFLOAT, {6});
  cpu::elementwise(E::kMAX, a.ref(), b.ref(), out.ref());  // NaN propagates
  EXPECT_TRUE(std::isnan(out.get(0)));
  EXPECT_TRUE(std::isnan(out.get(1)));
  EXPECT_TRUE(std::isnan(out.get(2)));
  EXPECT_EQ(out.get(4), kInf);
  EXPECT_EQ(out.get(5), 3);
  cpu::elementwise(E::kMIN, a.ref(), b.ref(), out.ref());
  EXPECT_TRUE(std::isnan(out.get(0)));
  EXPECT_TRUE(std::isnan(out.get(1)));
  EXPECT_EQ(out.get(4), 2);
  EXPECT_EQ(out.get(5), -kInf);
  Buf cmp(DataType::kBOOL, {6});
  cpu::elementwise(E::kEQUAL, a.ref(), b.ref(), cmp.ref());
  EXPECT_EQ(cmp.raw(0), 0u);
  EXPECT_EQ(cmp.raw(2), 0u);  // NaN != NaN
  EXPECT_EQ(cmp.raw(3), 1u);  // -0 == 0
  cpu::elementwise(E::kGREATER, a.ref(), b.ref(), cmp.ref());
  EXPECT_EQ(cmp.raw(0), 0u);
  EXPECT_EQ(cmp.raw(5), 1u);
  cpu::elementwise(E::kDIV, b.ref(), a.ref(), out.ref());
  EXPECT_TRUE(std::isnan(out.get(3)));  // 0 / -0

  // float16 overflows to infinity; division by zero gives infinity.
  Buf h(DataType::kHALF, {2}), z(DataType::kHALF, {2}), ho(DataType::kHALF, {2});
  h.set(0, 60000), h.set(1, 1);
  z.set(0, 60000), z.set(1, 0);
  cpu::elementwise(E::kSUM, h.ref(), z.ref(), ho.ref());
  EXPECT_EQ(ho.get(0), kInf);
  cpu::elementwise(E::kDIV, h.ref(), z.ref(), ho.ref());
  EXPECT_EQ(ho.get(0), 1.0);
  EXPECT_EQ(ho.get(1), kInf);
  // FLOOR_DIV of floats with negative operands.
  Buf fa(DataType::kFLOAT, {4}), fb(DataType::kFLOAT, {4}), fo(DataType::kFLOAT, {4});
  const double xa[] = {-7, 7, -7, 7.5}, xb[] = {2, -2, -2, 2.5};
  for (int i = 0; i < 4; ++i) fa.set(i, xa[i]), fb.set(i, xb[i]);
  cpu::elementwise(E::kFLOOR_DIV, fa.ref(), fb.ref(), fo.ref());
  EXPECT_EQ(fo.get(0), -4);
  EXPECT_EQ(fo.get(1), -4);
  EXPECT_EQ(fo.get(2), 3);
  EXPECT_EQ(fo.get(3), 3);
}

// The low bits of v as an I (two's complement wraparound), computed with 128-bit integers.
template <class I>
I wrap(i128 v) {
  using U = std::make_unsigned_t<I>;
  return std::bit_cast<I>(static_cast<U>(static_cast<u128>(v)));
}

template <class I>
i64 ref_int_op(E op, I x, I y) {
  const i128 a = x, b = y;
  switch (op) {
    case E::kSUM: return wrap<I>(a + b);
    case E::kSUB: return wrap<I>(a - b);
    case E::kPROD: return wrap<I>(a * b);
    case E::kMAX: return std::max(x, y);
    case E::kMIN: return std::min(x, y);
    case E::kDIV: return b == 0 ? 0 : wrap<I>(a / b);  // 128-bit division truncates
    case E::kFLOOR_DIV: {
      if (b == 0) return 0;
      i128 q = a / b;
      if (q * b != a && ((a < 0) != (b < 0))) --q;
      return wrap<I>(q);
    }
    case E::kEQUAL: return x == y;
    case E::kGREATER: return x > y;
    case E::kLESS: return x < y;
    default: ADD_FAILURE(); return 0;
  }
}

template <class I>
void check_int_elementwise(DataType t) {
  constexpr I mx = std::numeric_limits<I>::max(), mn = std::numeric_limits<I>::min();
  const std::vector<I> xs = {0, 1, -1, 7, -7, 6, -6, 2, -2, 5, mx, mn, mx - 1, mn + 1, 65536, -65536, 123456789};
  const std::vector<I> ys = {0, 1, -1, 2, -2, 3, -3, 5, mx, mn, 65536, 7};
  const i64 nx = static_cast<i64>(xs.size()), ny = static_cast<i64>(ys.size());
  // All pairs, through a column x row broadcast.
  Buf a(t, {nx, 1}), b(t, {1, ny});
  for (i64 i = 0; i < nx; ++i) a.set_int(i, xs[static_cast<std::size_t>(i)]);
  for (i64 j = 0; j < ny; ++j) b.set_int(j, ys[static_cast<std::size_t>(j)]);
  const E ops[] = {E::kSUM, E::kSUB, E::kPROD, E::kMAX, E::kMIN, E::kDIV, E::kFLOOR_DIV, E::kEQUAL, E::kGREATER, E::kLESS};
  for (E op : ops) {
    Buf out(is_compare(op) ? DataType::kBOOL : t, {nx, ny});
    cpu::elementwise(op, a.ref(), b.ref(), out.ref());
    Checker check;
    for (i64 i = 0; i < nx; ++i)
      for (i64 j = 0; j < ny; ++j) {
        const I x = xs[static_cast<std::size_t>(i)], y = ys[static_cast<std::size_t>(j)];
        const i64 want = ref_int_op<I>(op, x, y);
        const i64 got = out.get_int(i * ny + j);
        check(got == want, std::string(type_name(t)) + " op " + std::to_string(static_cast<int>(op)) + " " +
                               std::to_string(x) + ", " + std::to_string(y) + ": got " + std::to_string(got) +
                               ", want " + std::to_string(want));
      }
  }
}

TEST(CpuKernelsElementwise, Int32ArithmeticWrapsAndDivides) { check_int_elementwise<std::int32_t>(DataType::kINT32); }
TEST(CpuKernelsElementwise, Int64ArithmeticWrapsAndDivides) { check_int_elementwise<std::int64_t>(DataType::kINT64); }

TEST(CpuKernelsElementwise, IntSpotValues) {
  Buf a(DataType::kINT32, {8}), b(DataType::kINT32, {8}), o(DataType::kINT32, {8});
  const i64 x[] = {2147483647, -2147483647 - 1, -7, 7, -7, 5, 65536, -2147483647 - 1};
  const i64 y[] = {1, 1, 2, -2, -2, 0, 65536, -1};
  for (int i = 0; i < 8; ++i) a.set_int(i, x[i]), b.set_int(i, y[i]);
  cpu::elementwise(E::kSUM, a.ref(), b.ref(), o.ref());
  EXPECT_EQ(o.get_int(0), -2147483647 - 1);  // INT_MAX + 1 wraps
  cpu::elementwise(E::kSUB, a.ref(), b.ref(), o.ref());
  EXPECT_EQ(o.get_int(1), 2147483647);  // INT_MIN - 1 wraps
  cpu::elementwise(E::kPROD, a.ref(), b.ref(), o.ref());
  EXPECT_EQ(o.get_int(6), 0);  // 2^32 wraps to 0
  cpu::elementwise(E::kDIV, a.ref(), b.ref(), o.ref());
  EXPECT_EQ(o.get_int(2), -3);
  EXPECT_EQ(o.get_int(3), -3);
  EXPECT_EQ(o.get_int(4), 3);
  EXPECT_EQ(o.get_int(5), 0);                // division by zero gives 0
  EXPECT_EQ(o.get_int(7), -2147483647 - 1);  // INT_MIN / -1 wraps
  cpu::elementwise(E::kFLOOR_DIV, a.ref(), b.ref(), o.ref());
  EXPECT_EQ(o.get_int(2), -4);
  EXPECT_EQ(o.get_int(3), -4);
  EXPECT_EQ(o.get_int(4), 3);
  EXPECT_EQ(o.get_int(5), 0);
  EXPECT_EQ(o.get_int(7), -2147483647 - 1);
}

TEST(CpuKernelsElementwise, Int64LargeRowBroadcast) {
  std::mt19937_64 rng(12);
  Buf a(DataType::kINT64, {300, 200}), b(DataType::kINT64, {1, 200}), o(DataType::kINT64, {300, 200});
  for (i64 i = 0; i < a.size(); ++i) a.set_int(i, static_cast<i64>(rng()));
  for (i64 i = 0; i < b.size(); ++i) b.set_int(i, static_cast<i64>(rng() >> (i % 60)) - (i % 2 ? 0 : 1000));
  b.set_int(3, 0);
  b.set_int(5, -1);
  a.set_int(5, INT64_MIN);
  for (E op : {E::kSUM, E::kPROD, E::kDIV, E::kFLOOR_DIV, E::kMIN}) {
    cpu::elementwise(op, a.ref(), b.ref(), o.ref());
    Checker check;
    for (i64 i = 0; i < o.size(); ++i) {
      const i64 want = ref_int_op<i64>(op, a.get_int(i), b.get_int(i % 200));
      check(o.get_int(i) == want, "op " + std::to_string(static_cast<int>(op)) + " at " + std::to_string(i));
    }
  }
}

TEST(CpuKernelsElementwise, BoolLogic) {
  Buf a(DataType::kBOOL, {2, 1}), b(DataType::kBOOL, {1, 2}), o(DataType::kBOOL, {2, 2});
  a.set_raw(0, 0), a.set_raw(1, 2);  // any non-zero byte is true
  b.set_raw(0, 0), b.set_raw(1, 1);
  struct Case {
    E op;
    std::uint64_t want[4];  // (a, b) = (F,F) (F,T) (T,F) (T,T)
  };
  const Case cases[] = {{E::kAND, {0, 0, 0, 1}}, {E::kOR, {0, 1, 1, 1}}, {E::kXOR, {0, 1, 1, 0}}, {E::kEQUAL, {1, 0, 0, 1}}};
  for (const Case& c : cases) {
    cpu::elementwise(c.op, a.ref(), b.ref(), o.ref());
    for (int i = 0; i < 4; ++i) EXPECT_EQ(o.raw(i), c.want[i]) << "op " << static_cast<int>(c.op) << " at " << i;
  }
}

TEST(CpuKernelsElementwise, OutputMayAliasAnInput) {
  std::mt19937 rng(21);
  Buf a(DataType::kFLOAT, {400, 100}), b(DataType::kFLOAT, {1, 100});
  fill_random(a, rng, -2, 2);
  fill_random(b, rng, -2, 2);
  Buf orig = a;
  cpu::elementwise(E::kSUB, a.ref(), b.ref(), a.ref());
  Checker check;
  for (i64 i = 0; i < a.size(); ++i) {
    const double want = round_to(DataType::kFLOAT, orig.get(i) - b.get(i % 100));
    check(a.get(i) == want, at(i, a.get(i), want));
  }
  Buf c(DataType::kHALF, {5, 7}), d(DataType::kHALF, {5, 7});
  fill_random(c, rng, -2, 2);
  fill_random(d, rng, -2, 2);
  Buf dorig = d;
  cpu::elementwise(E::kPROD, c.ref(), d.ref(), d.ref());
  for (i64 i = 0; i < d.size(); ++i) EXPECT_EQ(d.get(i), round_to(DataType::kHALF, c.get(i) * dorig.get(i)));
}

TEST(CpuKernelsElementwise, RejectsWhatTheLayerRejects) {
  Buf f(DataType::kFLOAT, {2, 3}), g(DataType::kFLOAT, {3, 2}), i32(DataType::kINT32, {2, 3}), h(DataType::kHALF, {2, 3});
  Buf o(DataType::kFLOAT, {2, 3}), ob(DataType::kBOOL, {2, 3}), oi(DataType::kINT32, {2, 3});
  EXPECT_THROW(cpu::elementwise(E::kSUM, f.ref(), g.ref(), o.ref()), InvalidArgument);   // no broadcast
  EXPECT_THROW(cpu::elementwise(E::kSUM, f.ref(), h.ref(), o.ref()), InvalidArgument);   // mixed types
  EXPECT_THROW(cpu::elementwise(E::kLESS, f.ref(), f.ref(), o.ref()), InvalidArgument);  // not bool out
  EXPECT_THROW(cpu::elementwise(E::kPOW, i32.ref(), i32.ref(), oi.ref()), InvalidArgument);
  EXPECT_THROW(cpu::elementwise(E::kAND, f.ref(), f.ref(), o.ref()), InvalidArgument);
  EXPECT_THROW(cpu::elementwise(E::kSUM, ob.ref(), ob.ref(), ob.ref()), InvalidArgument);
  Buf r3(DataType::kFLOAT, {1, 2, 3});
  EXPECT_THROW(cpu::elementwise(E::kSUM, f.ref(), r3.ref(), o.ref()), InvalidArgument);  // ranks differ
}

// ---- activation -------------------------------------------------------------------------

double ref_activation(A type, double a, double b, double x) {
  switch (type) {
    case A::kRELU: return std::max(0.0, x);
    case A::kSIGMOID: return 1 / (1 + std::exp(-x));
    case A::kTANH: return std::tanh(x);
    case A::kLEAKY_RELU: return x >= 0 ? x : a * x;
    case A::kELU: return x >= 0 ? x : a * (std::exp(x) - 1);
    case A::kSELU: return b * (x > 0 ? x : a * (std::exp(x) - 1));
    case A::kSOFTSIGN: return x / (1 + std::fabs(x));
    case A::kSOFTPLUS: {
      const double t = b * x;
      return a * (t > 30 ? t + std::log1p(std::exp(-t)) : std::log1p(std::exp(t)));
    }
    case A::kCLIP: return std::max(a, std::min(b, x));
    case A::kHARD_SIGMOID: return std::max(0.0, std::min(1.0, a * x + b));
    case A::kSCALED_TANH: return a * std::tanh(b * x);
    case A::kTHRESHOLDED_RELU: return x > a ? x : 0;
    case A::kGELU_ERF: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case A::kGELU_TANH:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
  }
  return kNaN;
}

struct ActCase {
  A type;
  float alpha, beta;
  bool exact;  // no transcendental math: bit-exact
};

const ActCase kActCases[] = {
    {A::kRELU, 0, 0, true},
    {A::kSIGMOID, 0, 0, false},
    {A::kTANH, 0, 0, false},
    {A::kLEAKY_RELU, 0.125f, 0, true},
    {A::kLEAKY_RELU, 0.1f, 0, false},
    {A::kELU, 1.0f, 0, false},
    {A::kSELU, 1.6732632f, 1.0507010f, false},
    {A::kSOFTSIGN, 0, 0, false},
    {A::kSOFTPLUS, 1.0f, 1.0f, false},
    {A::kSOFTPLUS, 2.0f, 0.5f, false},
    {A::kCLIP, -1.0f, 2.0f, true},
    {A::kCLIP, 3.0f, 1.0f, true},  // alpha > beta: always alpha
    {A::kHARD_SIGMOID, 0.2f, 0.5f, false},
    {A::kSCALED_TANH, 1.7159f, 0.6666f, false},
    {A::kTHRESHOLDED_RELU, 0.5f, 0, true},
    {A::kGELU_ERF, 0, 0, false},
    {A::kGELU_TANH, 0, 0, false},
};

std::vector<double> activation_inputs() {
  std::vector<double> v = {0.0, -0.0, 1e-3, -1e-3, 0.5, -0.5, 1, -1, 3, -3, 8, -8, 20, -20, 100, -100, 1000, -1000};
  for (int i = -200; i <= 200; ++i) v.push_back(i * 0.0437);
  return v;
}

TEST(CpuKernelsActivation, EveryTypeAndFormula) {
  const std::vector<double> xs = activation_inputs();
  const i64 n = static_cast<i64>(xs.size());
  for (DataType t : kFloatTypes)
    for (const ActCase& c : kActCases) {
      Buf x(t, {n}), out(t, {n});
      for (i64 i = 0; i < n; ++i) x.set(i, xs[static_cast<std::size_t>(i)]);
      cpu::activation({c.type, c.alpha, c.beta}, x.ref(), out.ref());
      Checker check;
      for (i64 i = 0; i < n; ++i) {
        const double want = round_to(t, ref_activation(c.type, c.alpha, c.beta, x.get(i)));
        const double got = out.get(i);
        const std::string what = std::string(type_name(t)) + " activation " + std::to_string(static_cast<int>(c.type)) +
                                 " x=" + std::to_string(x.get(i)) + " " + at(i, got, want);
        if (c.exact) {
          check(same(got, want), what);
        } else {
          // float32: a few ulp of float math; narrow types: the float result rounds to the
          // reference's value or a neighbour. The absolute term covers float's cancellation in
          // GELU's 1 + erf / 1 + tanh near x = -5 (error about half an ulp of 1, times |x|/2).
          const double tol = (t == DataType::kFLOAT ? 4 : 1) * ulp_of(t, want) + 5e-7;
          check(std::fabs(got - want) <= tol, what);
        }
      }
    }
}

TEST(CpuKernelsActivation, NaNPropagatesAndSoftplusIsStable) {
  for (const ActCase& c : kActCases) {
    Buf x(DataType::kFLOAT, {1}), out(DataType::kFLOAT, {1});
    x.set(0, kNaN);
    cpu::activation({c.type, c.alpha, c.beta}, x.ref(), out.ref());
    EXPECT_TRUE(std::isnan(out.get(0))) << "activation " << static_cast<int>(c.type);
  }
  Buf x(DataType::kFLOAT, {3}), out(DataType::kFLOAT, {3});
  x.set(0, 100), x.set(1, -100), x.set(2, 1e30);
  cpu::activation({A::kSOFTPLUS, 1, 1}, x.ref(), out.ref());
  EXPECT_EQ(out.get(0), 100.0);
  EXPECT_GE(out.get(1), 0.0);
  EXPECT_LT(out.get(1), 1e-40);
  EXPECT_EQ(out.get(2), static_cast<double>(1e30f));
}

TEST(CpuKernelsActivation, InPlaceAndLarge) {
  std::mt19937 rng(31);
  Buf x(DataType::kFLOAT, {300, 257});
  fill_random(x, rng, -6, 6);
  Buf orig = x;
  cpu::activation({A::kGELU_ERF, 0, 0}, x.ref(), x.ref());
  Checker check;
  for (i64 i = 0; i < x.size(); ++i) {
    const double want = ref_activation(A::kGELU_ERF, 0, 0, orig.get(i));
    check(std::fabs(x.get(i) - want) <= 4 * ulp_of(DataType::kFLOAT, want) + 5e-7, at(i, x.get(i), want));
  }
  Buf h(DataType::kBF16, {70000}), ho(DataType::kBF16, {70000});
  fill_random(h, rng, -3, 3);
  cpu::activation({A::kRELU, 0, 0}, h.ref(), ho.ref());
  for (i64 i = 0; i < h.size(); ++i) check(ho.get(i) == std::max(0.0, h.get(i)), "bf16 relu " + std::to_string(i));
}

// The vectorizable erf (GELU_ERF, the ERF unary) against double-precision erf: every 509th
// float32 from 0 to past 4 (where it clamps), plus the region boundaries; within 2.6 ulp of
// the exact value (libm's erff: 1), odd bit for bit, and exact at 0, the infinities and NaN.
TEST(CpuKernelsActivation, ErfFloatIsWithinItsBound) {
  using cpu::detail::erf_float;
  double worst = 0;
  float worst_x = 0;
  auto visit = [&](float x) {
    const float got = erf_float(x);
    const double want = std::erf(static_cast<double>(x));
    const float wf = static_cast<float>(want);
    const double ulp = static_cast<double>(std::nextafter(wf, 2.0f)) - static_cast<double>(wf);
    const double err = std::fabs(static_cast<double>(got) - want) / ulp;
    if (err > worst) worst = err, worst_x = x;
    ASSERT_EQ(std::bit_cast<std::uint32_t>(erf_float(-x)), std::bit_cast<std::uint32_t>(got) ^ 0x80000000u) << x;
  };
  for (std::uint32_t u = 0; u <= std::bit_cast<std::uint32_t>(4.25f); u += 509) visit(std::bit_cast<float>(u));
  for (float b : {1.0f, 4.0f, 3.92f, 0.9758047f})
    for (float x = b, k = 0; k < 64; ++k, x = std::nextafter(x, 0.0f)) visit(x), visit(std::nextafter(2 * b - x, 9.0f));
  EXPECT_LE(worst, 2.6) << "worst at x = " << worst_x;
  EXPECT_GT(worst, 0.5) << "the bound is not vacuous: float32 erf cannot be exact everywhere";
  EXPECT_EQ(erf_float(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(erf_float(-0.0f)));
  EXPECT_EQ(erf_float(std::numeric_limits<float>::infinity()), 1.0f);
  EXPECT_EQ(erf_float(-std::numeric_limits<float>::infinity()), -1.0f);
  EXPECT_EQ(erf_float(1e30f), 1.0f);
  EXPECT_TRUE(std::isnan(erf_float(std::numeric_limits<float>::quiet_NaN())));
}

TEST(CpuKernelsActivation, RejectsNonFloat) {
  Buf x(DataType::kINT32, {4}), o(DataType::kINT32, {4}), f(DataType::kFLOAT, {4}), h(DataType::kHALF, {4});
  EXPECT_THROW(cpu::activation({A::kRELU, 0, 0}, x.ref(), o.ref()), InvalidArgument);
  EXPECT_THROW(cpu::activation({A::kRELU, 0, 0}, f.ref(), h.ref()), InvalidArgument);
  EXPECT_THROW(cpu::activation({static_cast<A>(99), 0, 0}, f.ref(), f.ref()), InvalidArgument);
}

}  // namespace
