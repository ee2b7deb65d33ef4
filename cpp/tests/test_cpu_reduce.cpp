// Tests of the CPU backend's reduce kernel (backends/cpu/kernels.h) against scalar reference
// loops written here. References are computed in double (long double for sums) and rounded
// once to the output type with a rounding written from the IEEE definition
// (cpu_reduce_test_helpers.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backends/cpu/kernels.h"
#include "cpu_reduce_test_helpers.h"
#include "tensoracle/errors.h"

namespace {

using namespace tensoracle;
using namespace tensoracle::testing::cpu_reduce;
using RO = ReduceOperation;

void fill_ints(Buf& b, std::mt19937& rng, i64 lo, i64 hi) {
  std::uniform_int_distribution<i64> d(lo, hi);
  for (i64 i = 0; i < b.size(); ++i) b.set_int(i, d(rng));
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

}  // namespace
