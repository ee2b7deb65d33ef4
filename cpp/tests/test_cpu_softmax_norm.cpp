// Tests of the CPU backend's softmax and normalization kernels (backends/cpu/kernels.h) against
// scalar reference loops written here. References are computed in double (long double for
// statistics) and rounded once to the output type with a rounding written from the IEEE
// definition (cpu_reduce_test_helpers.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/kernels.h"
#include "cpu_reduce_test_helpers.h"
#include "tensoracle/errors.h"

namespace {

using namespace tensoracle;
using namespace tensoracle::testing::cpu_reduce;

// Multi-index of `flat` in dims.
std::vector<i64> unflatten(const Dims& d, i64 flat) {
  std::vector<i64> idx(static_cast<std::size_t>(d.rank()));
  for (int k = d.rank() - 1; k >= 0; --k) {
    idx[static_cast<std::size_t>(k)] = flat % d[k];
    flat /= d[k];
  }
  return idx;
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
