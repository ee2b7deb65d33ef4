// Tests of the CPU backend's kernels (backends/cpu/kernels.h) against scalar reference loops
// written here: double-precision references rounded to the output type as kernels.h states
// (computed in float32, rounded once when stored).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numbers>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_util.h"
#include "core/numeric.h"
#include "tensoracle/errors.h"

namespace {

using namespace tensoracle;
using cpu::TensorRef;
using i64 = std::int64_t;
using E = ElementWiseOperation;
using A = ActivationType;
using MO = MatrixOperation;
__extension__ typedef __int128 i128;
__extension__ typedef unsigned __int128 u128;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

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

void fill_random(Buf& b, std::mt19937& rng, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  for (i64 i = 0; i < b.size(); ++i) b.set(i, d(rng));
}

// v computed in float32, then stored in t (kernels.h: rounded once, when stored).
double round_to(DataType t, double v) {
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
double ulp_of(DataType t, double v) {
  const double a = std::fabs(v);
  int mant = 23, emin = -126;
  if (t == DataType::kHALF) mant = 10, emin = -14;
  if (t == DataType::kBF16) mant = 7, emin = -126;
  int e = a > 0 ? std::ilogb(a) : emin;
  return std::ldexp(1.0, std::max(e, emin) - mant);
}

bool same(double got, double want) { return std::isnan(want) ? std::isnan(got) : got == want; }

// Records at most a few failures per check, so one bug does not flood the log.
struct Checker {
  int failures = 0;
  void operator()(bool ok, const std::string& what) {
    if (!ok && ++failures <= 8) ADD_FAILURE() << what;
  }
};

std::string at(i64 i, double got, double want) {
  return "at " + std::to_string(i) + ": got " + std::to_string(got) + ", want " + std::to_string(want);
}

// Flat index of the element of `in` that broadcasts to output element `flat` of `out`.
i64 broadcast_source(const Dims& out, const Dims& in, i64 flat) {
  i64 idx[Dims::kMaxRank];
  for (int k = out.rank() - 1; k >= 0; --k) {
    idx[k] = flat % out[k];
    flat /= out[k];
  }
  i64 src = 0;
  for (int k = 0; k < in.rank(); ++k) src = src * in[k] + (in[k] == 1 ? 0 : idx[k]);
  return src;
}

Dims broadcast(const Dims& a, const Dims& b) {
  Dims o = a;
  for (int i = 0; i < a.rank(); ++i) o[i] = a[i] == 1 ? b[i] : a[i];
  return o;
}

const std::vector<DataType> kFloatTypes = {DataType::kFLOAT, DataType::kHALF, DataType::kBF16};

// ---- elementwise ------------------------------------------------------------------------

bool is_compare(E op) { return op == E::kEQUAL || op == E::kGREATER || op == E::kLESS; }

// Float semantics: computed in float32 (a float division, then floor, for FLOOR_DIV).
double ref_float_op(E op, double x, double y) {
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
void check_float_elementwise(E op, DataType t, const Dims& da, const Dims& db, std::uint32_t seed,
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

// ---- cast -------------------------------------------------------------------------------

const std::vector<DataType> kCastTypes = {DataType::kFLOAT, DataType::kHALF,  DataType::kBF16,  DataType::kINT8,
                                          DataType::kINT32, DataType::kINT64, DataType::kUINT8, DataType::kBOOL};

bool is_float_type(DataType t) { return t == DataType::kFLOAT || t == DataType::kHALF || t == DataType::kBF16; }

// Rounds an integer (exact in long double) to a float format with `mant` stored mantissa
// bits, to nearest even, once; beyond `max_finite` gives infinity.
double round_int_to_float(i64 v, int mant, double max_finite) {
  if (v == 0) return 0;
  const long double x = static_cast<long double>(v);  // exact: 64-bit (x86) or 113-bit (aarch64) significand
  int e;
  std::frexp(x, &e);  // |x| in [2^(e-1), 2^e)
  const long double ulp = std::ldexp(1.0L, e - 1 - mant);
  const long double r = std::nearbyint(x / ulp) * ulp;
  const double d = static_cast<double>(r);
  return std::fabs(d) > max_finite ? std::copysign(kInf, d) : d;
}

struct IntRange {
  i64 lo, hi;
  int bits;
  bool is_signed;
};
IntRange int_range(DataType t) {
  switch (t) {
    case DataType::kINT8: return {-128, 127, 8, true};
    case DataType::kUINT8: return {0, 255, 8, false};
    case DataType::kINT32: return {INT32_MIN, INT32_MAX, 32, true};
    default: return {INT64_MIN, INT64_MAX, 64, true};
  }
}

// The expected stored value of cast(x) into `to`, as a double (integers fit exactly: the
// int64 cases are checked with get_int separately).
struct Expected {
  double value;
  i64 int_value;
};

Expected ref_cast(const Buf& x, i64 i, DataType to) {
  if (is_float_type(x.type)) {
    const double v = x.get(i);
    if (is_float_type(to)) return {round_to(to, v), 0};
    if (to == DataType::kBOOL) return {v != 0 ? 1.0 : 0.0, v != 0};
    const IntRange r = int_range(to);
    if (std::isnan(v)) return {0, 0};
    const long double t = std::trunc(static_cast<long double>(v));
    i64 q;
    if (t >= std::ldexp(1.0L, r.bits - (r.is_signed ? 1 : 0))) q = r.hi;
    else if (t < static_cast<long double>(r.lo)) q = r.lo;
    else q = static_cast<i64>(t);
    return {static_cast<double>(q), q};
  }
  const i64 v = x.get_int(i);
  switch (to) {
    case DataType::kFLOAT: return {round_int_to_float(v, 23, 3.4028234663852886e38), 0};
    case DataType::kHALF: return {round_int_to_float(v, 10, 65504), 0};
    case DataType::kBF16: return {round_int_to_float(v, 7, 3.3895313892515355e38), 0};
    case DataType::kBOOL: return {v != 0 ? 1.0 : 0.0, v != 0};
    default: {
      const IntRange r = int_range(to);
      const std::uint64_t mask = r.bits == 64 ? ~0ull : (1ull << r.bits) - 1;
      std::uint64_t u = static_cast<std::uint64_t>(v) & mask;
      i64 q = static_cast<i64>(u);
      if (r.is_signed && r.bits < 64 && u >= (1ull << (r.bits - 1))) q -= static_cast<i64>(1ull << r.bits);
      return {static_cast<double>(q), q};
    }
  }
}

Buf cast_source(DataType t) {
  std::vector<double> fv = {0.0, -0.0, 0.3, 1.5, -1.5, 2.7, -2.7, 0.999, -0.999, 127.9, 128.5, -128.9, -129.5,
                            255.5, 256, 300.7, -5.5, 2048.5, 4097, 65504, 65519, 65520, 70000, 1e10, -1e10, 3e9,
                            -3e9, 2147483520, -2147483648.0, 1e19, -1e19, 9.2233720e18, 1e30, 3e38, kInf, -kInf, kNaN, 1e-8};
  switch (t) {
    case DataType::kFLOAT: case DataType::kHALF: case DataType::kBF16: {
      Buf b(t, {static_cast<i64>(fv.size())});
      for (std::size_t i = 0; i < fv.size(); ++i) b.set(static_cast<i64>(i), fv[i]);
      return b;
    }
    default: {
      std::vector<i64> iv;
      if (t == DataType::kBOOL) iv = {0, 1};
      else if (t == DataType::kUINT8) iv = {0, 1, 127, 128, 200, 255};
      else if (t == DataType::kINT8) iv = {-128, -127, -1, 0, 1, 100, 127};
      else if (t == DataType::kINT32)
        iv = {INT32_MIN, -16777217, -65520, -129, -1, 0, 1, 127, 128, 255, 256, 300, 2049, 65504, 65519, 65520,
              16777217, 16842753 /* 2^24 + 2^16 + 1 */, INT32_MAX};
      else
        iv = {INT64_MIN, -(i64{1} << 40) - 5, -4294967301, -1, 0, 1, 300, 4294967301, 16842753,
              (i64{1} << 53) + 1, (i64{1} << 60) + (i64{1} << 36) + 1, INT64_MAX};
      Buf b(t, {static_cast<i64>(iv.size())});
      for (std::size_t i = 0; i < iv.size(); ++i) b.set_int(static_cast<i64>(i), iv[i]);
      return b;
    }
  }
}

TEST(CpuKernelsCast, EveryPairOfTypes) {
  for (DataType from : kCastTypes)
    for (DataType to : kCastTypes) {
      Buf x = cast_source(from);
      Buf out(to, x.dims);
      cpu::cast(x.ref(), out.ref());
      Checker check;
      for (i64 i = 0; i < x.size(); ++i) {
        const Expected e = ref_cast(x, i, to);
        const std::string what = std::string(type_name(from)) + " -> " + std::string(type_name(to)) + " of " +
                                 (is_float_type(from) ? std::to_string(x.get(i)) : std::to_string(x.get_int(i)));
        if (to == DataType::kBOOL) check(out.raw(i) == static_cast<std::uint64_t>(e.int_value), what);
        else if (is_float_type(to)) check(same(out.get(i), e.value), what + ": got " + std::to_string(out.get(i)) + ", want " + std::to_string(e.value));
        else check(out.get_int(i) == e.int_value, what + ": got " + std::to_string(out.get_int(i)) + ", want " + std::to_string(e.int_value));
      }
    }
}

TEST(CpuKernelsCast, SpotValues) {
  Buf f(DataType::kFLOAT, {8});
  const double fv[] = {-2.7, 1e10, -1e10, kNaN, 300.7, -5, kInf, 0.5};
  for (int i = 0; i < 8; ++i) f.set(i, fv[i]);
  Buf i8(DataType::kINT8, {8}), u8(DataType::kUINT8, {8}), i32(DataType::kINT32, {8}), b(DataType::kBOOL, {8});
  cpu::cast(f.ref(), i8.ref());
  cpu::cast(f.ref(), u8.ref());
  cpu::cast(f.ref(), i32.ref());
  cpu::cast(f.ref(), b.ref());
  EXPECT_EQ(i8.get_int(0), -2);  // truncates toward zero
  EXPECT_EQ(i8.get_int(1), 127);
  EXPECT_EQ(i8.get_int(2), -128);
  EXPECT_EQ(i8.get_int(3), 0);  // NaN gives 0
  EXPECT_EQ(u8.get_int(4), 255);
  EXPECT_EQ(u8.get_int(5), 0);
  EXPECT_EQ(i32.get_int(1), INT32_MAX);
  EXPECT_EQ(i32.get_int(2), INT32_MIN);
  EXPECT_EQ(i32.get_int(6), INT32_MAX);
  EXPECT_EQ(b.raw(3), 1u);  // NaN != 0
  EXPECT_EQ(b.raw(7), 1u);
  // Integers wrap; bool is 0 or 1.
  Buf w(DataType::kINT32, {3}), wo(DataType::kINT8, {3}), wu(DataType::kUINT8, {3});
  w.set_int(0, 300), w.set_int(1, -1), w.set_int(2, 128);
  cpu::cast(w.ref(), wo.ref());
  cpu::cast(w.ref(), wu.ref());
  EXPECT_EQ(wo.get_int(0), 44);
  EXPECT_EQ(wo.get_int(2), -128);
  EXPECT_EQ(wu.get_int(1), 255);
  // float32 -> float16/bfloat16 round half to even; overflow to infinity.
  Buf g(DataType::kFLOAT, {4}), h(DataType::kHALF, {4}), bf(DataType::kBF16, {4});
  g.set(0, 1 + std::ldexp(1.0, -11)), g.set(1, 1 + 3 * std::ldexp(1.0, -11)), g.set(2, 65520), g.set(3, 65519);
  cpu::cast(g.ref(), h.ref());
  EXPECT_EQ(h.get(0), 1.0);
  EXPECT_EQ(h.get(1), 1 + std::ldexp(1.0, -9));
  EXPECT_EQ(h.get(2), kInf);
  EXPECT_EQ(h.get(3), 65504.0);
  g.set(0, 1 + std::ldexp(1.0, -8)), g.set(1, 1 + 3 * std::ldexp(1.0, -8));
  cpu::cast(g.ref(), bf.ref());
  EXPECT_EQ(bf.get(0), 1.0);
  EXPECT_EQ(bf.get(1), 1 + std::ldexp(1.0, -6));
  // An int32 rounds to bfloat16 once (through float it would round twice, to 2^24).
  Buf big(DataType::kINT32, {1}), bigbf(DataType::kBF16, {1});
  big.set_int(0, (1 << 24) + (1 << 16) + 1);
  cpu::cast(big.ref(), bigbf.ref());
  EXPECT_EQ(bigbf.get(0), static_cast<double>((1 << 24) + (1 << 17)));
}

TEST(CpuKernelsCast, InPlaceAndLarge) {
  std::mt19937 rng(41);
  Buf x(DataType::kFLOAT, {100000});
  fill_random(x, rng, -3e9, 3e9);
  Buf orig = x;
  TensorRef as_int{x.data(), DataType::kINT32, x.dims};
  cpu::cast(x.ref(), as_int);  // float32 -> int32 in place
  Checker check;
  for (i64 i = 0; i < x.size(); ++i) {
    const Expected e = ref_cast(orig, i, DataType::kINT32);
    check(static_cast<std::int32_t>(x.raw(i)) == e.int_value, "in place at " + std::to_string(i));
  }
  Buf ints(DataType::kINT32, x.dims);
  std::memcpy(ints.data(), x.data(), static_cast<std::size_t>(x.size()) * 4);
  cpu::cast(as_int, x.ref());  // int32 -> float32 in place
  for (i64 i = 0; i < x.size(); ++i)
    check(x.get(i) == static_cast<double>(static_cast<float>(ints.get_int(i))), "back at " + std::to_string(i));
  Buf h(DataType::kHALF, {50000});
  fill_random(h, rng, -70000, 70000);
  Buf horig = h;
  cpu::cast(h.ref(), TensorRef{h.data(), DataType::kBF16, h.dims});
  for (i64 i = 0; i < h.size(); ++i)
    check(core::bf16_to_float(static_cast<std::uint16_t>(h.raw(i))) == round_to(DataType::kBF16, horig.get(i)),
          "half -> bf16 at " + std::to_string(i));
  Buf f(DataType::kFLOAT, {4});
  EXPECT_THROW(cpu::cast(f.ref(), TensorRef{f.data(), DataType::kHALF, f.dims}), InvalidArgument);
  Buf q(DataType::kFP8, {4});
  EXPECT_THROW(cpu::cast(q.ref(), f.ref()), InvalidArgument);
  EXPECT_THROW(cpu::cast(f.ref(), q.ref()), InvalidArgument);
}

// ---- quantize / dequantize --------------------------------------------------------------

// Per-element reference: float32 x / scale, rounded half to even, saturated.
double ref_quant_int8(double x, double s) {
  const double v = static_cast<float>(x / s);
  if (std::isnan(v)) return 0;
  const double r = std::nearbyint(v);
  return std::clamp(r, -128.0, 127.0);
}

TEST(CpuKernelsQuantize, Int8RoundsHalfToEvenAndSaturates) {
  const double xs[] = {2.5, 3.5, -2.5, -3.5, 0.5, 1.5, -0.5, 2.4999, 2.5001, 1000, -1000, 127.5, -128.5, -129, kInf, -kInf, kNaN};
  const i64 want[] = {2, 4, -2, -4, 0, 2, 0, 2, 3, 127, -128, 127, -128, -128, 127, -128, 0};
  const i64 n = std::size(xs);
  Buf x(DataType::kFLOAT, {n}), s(DataType::kFLOAT, {1}), q(DataType::kINT8, {n});
  for (i64 i = 0; i < n; ++i) x.set(i, xs[i]);
  s.set(0, 1.0);
  cpu::quantize(x.ref(), s.ref(), 0, q.ref());
  for (i64 i = 0; i < n; ++i) EXPECT_EQ(q.get_int(i), want[i]) << "x=" << xs[i];
  // x / scale = 2.5, 3.5, -2.5 with scale 0.5.
  Buf x2(DataType::kFLOAT, {3}), q2(DataType::kINT8, {3});
  x2.set(0, 1.25), x2.set(1, 1.75), x2.set(2, -1.25);
  s.set(0, 0.5);
  cpu::quantize(x2.ref(), s.ref(), 0, q2.ref());
  EXPECT_EQ(q2.get_int(0), 2);
  EXPECT_EQ(q2.get_int(1), 4);
  EXPECT_EQ(q2.get_int(2), -2);
}

TEST(CpuKernelsQuantize, Fp8SaturatesRoundsAndKeepsNaN) {
  struct Case {
    double x;
    std::uint8_t code;
  };
  const Case cases[] = {
      {1.0, 0x38},   {-1.0, 0xB8},  {0.0, 0x00},    {-0.0, 0x80},    {448, 0x7E},  {-448, 0xFE},
      {1000, 0x7E},  {-1000, 0xFE}, {464, 0x7E},    {kInf, 0x7E},    {-kInf, 0xFE},
      {std::ldexp(1.0, -9), 0x01},     // smallest subnormal
      {std::ldexp(1.0, -10), 0x00},    // tie between 0 and the smallest subnormal: even
      {3 * std::ldexp(1.0, -10), 0x02},  // tie between 1 and 2 units: even
      {1.0625, 0x38},                  // tie between 1 and 1.125: even
      {1.1875, 0x3A},                  // tie between 1.125 and 1.25: even
  };
  const i64 n = std::size(cases);
  for (DataType t : kFloatTypes) {
    Buf x(t, {n + 1}), s(DataType::kFLOAT, {1}), q(DataType::kFP8, {n + 1});
    for (i64 i = 0; i < n; ++i) x.set(i, cases[i].x);
    x.set(n, kNaN);
    s.set(0, 1.0);
    cpu::quantize(x.ref(), s.ref(), 0, q.ref());
    for (i64 i = 0; i < n; ++i) {
      if (t != DataType::kFLOAT && x.get(i) != cases[i].x) continue;  // not representable in t
      EXPECT_EQ(q.raw(i), cases[i].code) << type_name(t) << " x=" << cases[i].x;
    }
    EXPECT_TRUE(std::isnan(q.get(n))) << type_name(t);
  }
}

// Checks quantize against the reference for dims/axis with per-channel scales (or one).
void check_quantize(DataType xt, DataType st, DataType qt, const Dims& d, int axis, bool per_channel, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Buf x(xt, d);
  fill_random(x, rng, -300, 300);
  const i64 nc = per_channel ? d[axis] : 1;
  Buf s(st, {nc});
  for (i64 c = 0; c < nc; ++c) s.set(c, 0.5 + 0.37 * static_cast<double>(c));
  Buf q(qt, d);
  cpu::quantize(x.ref(), s.ref(), axis, q.ref());
  i64 inner = 1;
  for (int k = axis + 1; k < d.rank(); ++k) inner *= d[k];
  Checker check;
  for (i64 i = 0; i < x.size(); ++i) {
    const double sc = s.get(per_channel ? (i / inner) % nc : 0);
    if (qt == DataType::kINT8) {
      const double want = ref_quant_int8(x.get(i), sc);
      check(q.get_int(i) == want, "int8 " + at(i, static_cast<double>(q.get_int(i)), want));
    } else {
      const std::uint8_t want = core::float_to_fp8_e4m3(static_cast<float>(x.get(i) / sc), true);
      check(q.raw(i) == want, "fp8 at " + std::to_string(i));
    }
  }
}

TEST(CpuKernelsQuantize, PerTensorAndPerChannelEveryType) {
  for (DataType xt : kFloatTypes)
    for (DataType st : {DataType::kFLOAT, xt})
      for (DataType qt : {DataType::kINT8, DataType::kFP8}) {
        check_quantize(xt, st, qt, {2, 3, 4}, 1, false, 1);
        check_quantize(xt, st, qt, {2, 3, 4}, 0, true, 2);
        check_quantize(xt, st, qt, {2, 3, 4}, 1, true, 3);
        check_quantize(xt, st, qt, {2, 3, 4}, 2, true, 4);
      }
  check_quantize(DataType::kFLOAT, DataType::kFLOAT, DataType::kINT8, {4, 64, 1031}, 1, true, 5);  // threads
  check_quantize(DataType::kBF16, DataType::kBF16, DataType::kFP8, {3, 50000}, 0, true, 6);
}

TEST(CpuKernelsQuantize, DequantizeEveryType) {
  for (DataType ot : kFloatTypes)
    for (DataType st : {DataType::kFLOAT, ot}) {
      // All int8 values, per tensor.
      Buf q(DataType::kINT8, {256}), s(st, {1}), out(ot, {256});
      for (i64 i = 0; i < 256; ++i) q.set_int(i, i - 128);
      s.set(0, 0.1);
      cpu::dequantize(q.ref(), s.ref(), 0, out.ref());
      for (i64 i = 0; i < 256; ++i)
        ASSERT_EQ(out.get(i), round_to(ot, static_cast<double>(i - 128) * s.get(0))) << type_name(ot) << " " << i;
      // All fp8 codes, per channel along axis 1 of (2, 2, 64).
      Buf f8(DataType::kFP8, {2, 2, 64}), s2(st, {2}), out2(ot, {2, 2, 64});
      for (i64 i = 0; i < 256; ++i) f8.set_raw(i, static_cast<std::uint64_t>(i));
      s2.set(0, 2.0), s2.set(1, 0.3);
      cpu::dequantize(f8.ref(), s2.ref(), 1, out2.ref());
      for (i64 i = 0; i < 256; ++i) {
        const double want = round_to(ot, f8.get(i) * s2.get((i / 64) % 2));
        ASSERT_TRUE(same(out2.get(i), want)) << type_name(ot) << " code " << i << ": " << out2.get(i) << " vs " << want;
      }
    }
}

TEST(CpuKernelsQuantize, RoundTripAndErrors) {
  std::mt19937 rng(51);
  Buf x(DataType::kFLOAT, {8, 16}), s(DataType::kFLOAT, {16}), q(DataType::kINT8, {8, 16}), y(DataType::kFLOAT, {8, 16});
  fill_random(x, rng, -1, 1);
  for (i64 c = 0; c < 16; ++c) s.set(c, 1.0 / 127);
  cpu::quantize(x.ref(), s.ref(), 1, q.ref());
  cpu::dequantize(q.ref(), s.ref(), 1, y.ref());
  for (i64 i = 0; i < x.size(); ++i) EXPECT_NEAR(y.get(i), x.get(i), 0.5 / 127 + 1e-6);

  Buf s3(DataType::kFLOAT, {3}), sh(DataType::kHALF, {1}), qi(DataType::kINT32, {8, 16});
  EXPECT_THROW(cpu::quantize(x.ref(), s3.ref(), 1, q.ref()), InvalidArgument);  // 3 scales for 16 channels
  EXPECT_THROW(cpu::quantize(x.ref(), s.ref(), 2, q.ref()), InvalidArgument);   // axis out of range
  EXPECT_THROW(cpu::quantize(x.ref(), sh.ref(), 1, q.ref()), InvalidArgument);  // float16 scale for float32
  EXPECT_THROW(cpu::quantize(x.ref(), s.ref(), 1, qi.ref()), InvalidArgument);  // not a quantized type
  EXPECT_THROW(cpu::dequantize(x.ref(), s.ref(), 1, y.ref()), InvalidArgument); // float input
}

// ---- matmul -----------------------------------------------------------------------------

Dims mm_out_dims(const MatrixMultiplyParams& p, const Dims& a, const Dims& b) {
  const int br = a.rank() - (p.op0 == MO::kVECTOR ? 1 : 2);
  std::vector<i64> d;
  for (int i = 0; i < br; ++i) d.push_back(a[i] == 1 ? b[i] : a[i]);
  if (p.op0 != MO::kVECTOR) d.push_back(p.op0 == MO::kTRANSPOSE ? a[a.rank() - 1] : a[a.rank() - 2]);
  if (p.op1 != MO::kVECTOR) d.push_back(p.op1 == MO::kTRANSPOSE ? b[b.rank() - 2] : b[b.rank() - 1]);
  return Dims(std::span<const i64>(d));
}

// Element (r, c) of op(X) for batch index `batch` (already broadcast-resolved).
double mm_elem(const Buf& x, MO op, i64 batch, i64 r, i64 c, bool is_a) {
  const Dims& d = x.dims;
  if (op == MO::kVECTOR) {
    const i64 k = is_a ? c : r;  // A: 1 x K row; B: K x 1 column
    return x.get(batch * d[d.rank() - 1] + k);
  }
  const i64 rows = d[d.rank() - 2], cols = d[d.rank() - 1];
  if (op == MO::kTRANSPOSE) std::swap(r, c);
  return x.get((batch * rows + r) * cols + c);
}

// Double-precision reference; `mag` gets sum |a * b| per output element.
std::vector<double> ref_matmul(const MatrixMultiplyParams& p, const Buf& a, const Buf& b, std::vector<double>* mag) {
  const Dims out = mm_out_dims(p, a.dims, b.dims);
  const int br = a.dims.rank() - (p.op0 == MO::kVECTOR ? 1 : 2);
  const i64 K = p.op0 == MO::kVECTOR ? a.dims[a.dims.rank() - 1]
                                     : (p.op0 == MO::kTRANSPOSE ? a.dims[a.dims.rank() - 2] : a.dims[a.dims.rank() - 1]);
  std::vector<double> r(static_cast<std::size_t>(out.volume()));
  mag->assign(r.size(), 0);
  for (i64 f = 0; f < out.volume(); ++f) {
    i64 idx[Dims::kMaxRank], rem = f;
    for (int k = out.rank() - 1; k >= 0; --k) idx[k] = rem % out[k], rem /= out[k];
    i64 ab = 0, bb = 0;
    for (int k = 0; k < br; ++k) {
      ab = ab * a.dims[k] + (a.dims[k] == 1 ? 0 : idx[k]);
      bb = bb * b.dims[k] + (b.dims[k] == 1 ? 0 : idx[k]);
    }
    const i64 m = p.op0 != MO::kVECTOR ? idx[br] : 0;
    const i64 n = p.op1 != MO::kVECTOR ? idx[out.rank() - 1] : 0;
    double s = 0, g = 0;
    for (i64 k = 0; k < K; ++k) {
      const double t = mm_elem(a, p.op0, ab, m, k, true) * mm_elem(b, p.op1, bb, k, n, false);
      s += t;
      g += std::fabs(t);
    }
    r[static_cast<std::size_t>(f)] = s;
    (*mag)[static_cast<std::size_t>(f)] = g;
  }
  return r;
}

// Runs the multiply with operands in [lo, hi] on `grid` (0: any value) and checks it.
// exact: operands are multiples of 1/4 in [-2, 2], so the float32 GEMM is exact and the
// result must be the exact sum rounded once.
void check_matmul(DataType t, MO op0, MO op1, const Dims& da, const Dims& db, std::uint32_t seed, bool exact = false) {
  const MatrixMultiplyParams p{op0, op1};
  std::mt19937 rng(seed);
  Buf a(t, da), b(t, db);
  fill_random(a, rng, -1, 1);
  fill_random(b, rng, -1, 1);
  if (exact) {
    for (i64 i = 0; i < a.size(); ++i) a.set(i, std::round(a.get(i) * 8) / 4);
    for (i64 i = 0; i < b.size(); ++i) b.set(i, std::round(b.get(i) * 8) / 4);
  }
  const Dims od = mm_out_dims(p, da, db);
  Buf out(t, od);
  for (i64 i = 0; i < out.size(); ++i) out.set(i, 12345);  // garbage
  const std::size_t ws = cpu::matmul_workspace_bytes(p, a.ref(), b.ref());
  if (t == DataType::kFLOAT) {
    EXPECT_EQ(ws, 0u);
  }
  std::vector<float> workspace(ws / sizeof(float) + 1);
  cpu::matmul(p, a.ref(), b.ref(), out.ref(), ws ? workspace.data() : nullptr);
  std::vector<double> mag;
  const std::vector<double> want = ref_matmul(p, a, b, &mag);
  const i64 K = mag.empty() ? 0 : (op0 == MO::kVECTOR ? da[da.rank() - 1] : (op0 == MO::kTRANSPOSE ? da[da.rank() - 2] : da[da.rank() - 1]));
  Checker check;
  for (i64 i = 0; i < out.size(); ++i) {
    const double w = round_to(t, want[static_cast<std::size_t>(i)]);
    const double got = out.get(i);
    // float32 accumulation error bound, plus one ulp of the output type for the rounding.
    const double tol = exact ? 0 : ulp_of(t, w) + 2.0 * static_cast<double>(K) * std::ldexp(1.0, -24) * mag[static_cast<std::size_t>(i)];
    check(std::fabs(got - w) <= tol, std::string(type_name(t)) + " " + da.str() + " op" + std::to_string(static_cast<int>(op0)) + " x " +
                                         db.str() + " op" + std::to_string(static_cast<int>(op1)) + " " + at(i, got, w));
  }
}

TEST(CpuKernelsMatmul, TransposeCombinations) {
  for (DataType t : kFloatTypes) {
    check_matmul(t, MO::kNONE, MO::kNONE, {5, 7}, {7, 3}, 1);
    check_matmul(t, MO::kTRANSPOSE, MO::kNONE, {7, 5}, {7, 3}, 2);
    check_matmul(t, MO::kNONE, MO::kTRANSPOSE, {5, 7}, {3, 7}, 3);
    check_matmul(t, MO::kTRANSPOSE, MO::kTRANSPOSE, {7, 5}, {3, 7}, 4);
    check_matmul(t, MO::kTRANSPOSE, MO::kTRANSPOSE, {2, 7, 5}, {2, 3, 7}, 5);
  }
}

TEST(CpuKernelsMatmul, VectorOperations) {
  for (DataType t : kFloatTypes) {
    check_matmul(t, MO::kVECTOR, MO::kNONE, {7}, {7, 3}, 11);                // (3)
    check_matmul(t, MO::kNONE, MO::kVECTOR, {5, 7}, {7}, 12);                // (5)
    check_matmul(t, MO::kVECTOR, MO::kVECTOR, {7}, {7}, 13);                 // ()
    check_matmul(t, MO::kVECTOR, MO::kNONE, {4, 7}, {4, 7, 3}, 14);          // (4, 3)
    check_matmul(t, MO::kNONE, MO::kVECTOR, {4, 5, 7}, {4, 7}, 15);          // (4, 5)
    check_matmul(t, MO::kVECTOR, MO::kTRANSPOSE, {2, 7}, {2, 3, 7}, 16);     // (2, 3)
    check_matmul(t, MO::kTRANSPOSE, MO::kVECTOR, {3, 7, 5}, {1, 7}, 17);     // (3, 5)
    check_matmul(t, MO::kVECTOR, MO::kNONE, {6, 7}, {1, 7, 3}, 18);          // collapsed: (6, 3)
    check_matmul(t, MO::kVECTOR, MO::kVECTOR, {2, 3, 7}, {2, 1, 7}, 19);     // (2, 3) dot products
  }
}

TEST(CpuKernelsMatmul, BatchBroadcast) {
  for (DataType t : kFloatTypes) {
    check_matmul(t, MO::kNONE, MO::kNONE, {2, 1, 5, 7}, {1, 3, 7, 4}, 21);  // both sides broadcast
    check_matmul(t, MO::kNONE, MO::kNONE, {3, 5, 7}, {1, 7, 4}, 22);        // collapsed to one GEMM
    check_matmul(t, MO::kNONE, MO::kNONE, {2, 3, 5, 7}, {1, 1, 7, 4}, 23);  // collapsed, rank 4
    check_matmul(t, MO::kNONE, MO::kNONE, {1, 5, 7}, {3, 7, 4}, 24);        // A broadcast
    check_matmul(t, MO::kTRANSPOSE, MO::kNONE, {3, 7, 5}, {1, 7, 4}, 25);   // transposed A: per batch
    check_matmul(t, MO::kNONE, MO::kTRANSPOSE, {2, 3, 5, 7}, {2, 1, 4, 7}, 26);
    check_matmul(t, MO::kNONE, MO::kNONE, {3, 5, 7}, {3, 7, 4}, 27);        // no broadcast
  }
}

TEST(CpuKernelsMatmul, NarrowTypesRoundOnceExactly) {
  for (DataType t : {DataType::kHALF, DataType::kBF16}) {
    check_matmul(t, MO::kNONE, MO::kNONE, {9, 33}, {33, 10}, 31, /*exact=*/true);
    check_matmul(t, MO::kTRANSPOSE, MO::kVECTOR, {2, 33, 9}, {2, 33}, 32, true);
    check_matmul(t, MO::kNONE, MO::kNONE, {3, 9, 33}, {1, 33, 10}, 33, true);
  }
}

TEST(CpuKernelsMatmul, LargeAndThreaded) {
  check_matmul(DataType::kFLOAT, MO::kNONE, MO::kNONE, {2, 128, 256}, {1, 256, 192}, 41);
  check_matmul(DataType::kFLOAT, MO::kNONE, MO::kTRANSPOSE, {130, 300}, {200, 300}, 42);
  check_matmul(DataType::kHALF, MO::kNONE, MO::kNONE, {4, 64, 96}, {4, 96, 80}, 43);
  check_matmul(DataType::kBF16, MO::kTRANSPOSE, MO::kNONE, {96, 200}, {96, 170}, 44);
}

TEST(CpuKernelsMatmul, EmptyDims) {
  check_matmul(DataType::kFLOAT, MO::kNONE, MO::kNONE, {3, 0}, {0, 4}, 51);  // K = 0: zeros
  check_matmul(DataType::kHALF, MO::kNONE, MO::kNONE, {2, 3, 0}, {2, 0, 4}, 52);
  check_matmul(DataType::kFLOAT, MO::kNONE, MO::kNONE, {0, 3, 4}, {0, 4, 2}, 53);  // no batches
  check_matmul(DataType::kFLOAT, MO::kNONE, MO::kNONE, {0, 4}, {4, 2}, 54);        // M = 0
}

TEST(CpuKernelsMatmul, WorkspaceAndErrors) {
  Buf a(DataType::kHALF, {2, 3, 4}), b(DataType::kHALF, {1, 4, 5}), out(DataType::kHALF, {2, 3, 5});
  const MatrixMultiplyParams p{};
  EXPECT_EQ(cpu::matmul_workspace_bytes(p, a.ref(), b.ref()), (24u + 20u + 30u) * 4u);
  EXPECT_THROW(cpu::matmul(p, a.ref(), b.ref(), out.ref(), nullptr), InvalidArgument);
  Buf f(DataType::kFLOAT, {3, 4}), g(DataType::kFLOAT, {5, 6}), fo(DataType::kFLOAT, {3, 6});
  EXPECT_THROW(cpu::matmul(p, f.ref(), g.ref(), fo.ref(), nullptr), InvalidArgument);  // K differs
  Buf g2(DataType::kFLOAT, {4, 6}), bad(DataType::kFLOAT, {6, 3});
  EXPECT_THROW(cpu::matmul(p, f.ref(), g2.ref(), bad.ref(), nullptr), InvalidArgument);  // wrong output dims
  EXPECT_THROW(cpu::matmul(p, f.ref(), a.ref(), fo.ref(), nullptr), InvalidArgument);    // mixed types
  Buf i(DataType::kINT32, {3, 4}), j(DataType::kINT32, {4, 6}), io(DataType::kINT32, {3, 6});
  EXPECT_THROW(cpu::matmul(p, i.ref(), j.ref(), io.ref(), nullptr), InvalidArgument);
  Buf c3(DataType::kFLOAT, {2, 3, 4});
  EXPECT_THROW(cpu::matmul(p, c3.ref(), g2.ref(), fo.ref(), nullptr), InvalidArgument);  // batch ranks differ
}

// ---- shuffle ----------------------------------------------------------------------------

Dims permute(const Dims& d, const Permutation& p) {
  Dims o = d;
  for (int i = 0; i < d.rank(); ++i) o[i] = d[p.order[static_cast<std::size_t>(i)]];
  return o;
}

Permutation perm(std::initializer_list<int> v) {
  Permutation p;
  int i = 0;
  for (int x : v) p.order[static_cast<std::size_t>(i++)] = x;
  return p;
}

// Index in x of the element that lands at flat position `f` of the transposed tensor.
i64 transpose_source(const Dims& in, const Permutation& p, i64 f) {
  const Dims od = permute(in, p);
  i64 oidx[Dims::kMaxRank], iidx[Dims::kMaxRank];
  for (int k = od.rank() - 1; k >= 0; --k) oidx[k] = f % od[k], f /= od[k];
  for (int k = 0; k < od.rank(); ++k) iidx[p.order[static_cast<std::size_t>(k)]] = oidx[k];
  i64 s = 0;
  for (int k = 0; k < in.rank(); ++k) s = s * in[k] + iidx[k];
  return s;
}

// Checks shuffle(x) against the definition; `reshaped` is the resolved reshape (or none).
void check_shuffle(DataType t, const Dims& xd, const Permutation& p1, std::optional<Dims> reshape_spec,
                   const Dims& reshaped, const Permutation& p2) {
  ShuffleParams p;
  p.first_transpose = p1;
  p.reshape_dims = reshape_spec;
  p.second_transpose = p2;
  const Dims od = permute(reshaped, p2);
  Buf x(t, xd), out(t, od);
  const std::uint64_t mask = element_size(t) == 8 ? ~0ull : (1ull << (8 * element_size(t))) - 1;
  for (i64 i = 0; i < x.size(); ++i) x.set_raw(i, (static_cast<std::uint64_t>(i) * 2654435761ull + 7) & mask);
  cpu::shuffle(p, x.ref(), out.ref());
  Checker check;
  for (i64 f = 0; f < out.size(); ++f) {
    const i64 r = transpose_source(reshaped, p2, f);       // flat index in the reshaped tensor
    const i64 s = transpose_source(xd, p1, r);             // ... = flat index in first_transpose(x)
    check(out.raw(f) == x.raw(s), std::string(type_name(t)) + " " + xd.str() + " -> " + od.str() + " at " + std::to_string(f));
  }
}

TEST(CpuKernelsShuffle, Transpose3DEveryElementSize) {
  for (DataType t : {DataType::kUINT8, DataType::kHALF, DataType::kFLOAT, DataType::kINT64}) {
    check_shuffle(t, {2, 3, 4}, perm({2, 0, 1}), std::nullopt, {4, 2, 3}, perm({0, 1, 2}));
    check_shuffle(t, {2, 3, 4}, perm({1, 0, 2}), std::nullopt, {3, 2, 4}, perm({0, 1, 2}));  // rows stay contiguous
    check_shuffle(t, {2, 3, 4}, perm({0, 2, 1}), std::nullopt, {2, 4, 3}, perm({0, 1, 2}));
  }
}

TEST(CpuKernelsShuffle, Transpose5D) {
  for (DataType t : {DataType::kBOOL, DataType::kBF16, DataType::kINT32, DataType::kINT64}) {
    check_shuffle(t, {2, 3, 4, 5, 6}, perm({4, 1, 3, 0, 2}), std::nullopt, {6, 3, 5, 2, 4}, perm({0, 1, 2, 3, 4}));
    check_shuffle(t, {2, 3, 4, 5, 6}, perm({0, 1, 2, 3, 4}), std::nullopt, {2, 3, 4, 5, 6}, perm({3, 4, 0, 2, 1}));
  }
}

TEST(CpuKernelsShuffle, LargeTiledAndRowCopies) {
  check_shuffle(DataType::kFLOAT, {301, 257}, perm({1, 0}), std::nullopt, {257, 301}, perm({0, 1}));
  check_shuffle(DataType::kHALF, {1000, 70}, perm({1, 0}), std::nullopt, {70, 1000}, perm({0, 1}));
  check_shuffle(DataType::kUINT8, {3, 200, 190}, perm({0, 2, 1}), std::nullopt, {3, 190, 200}, perm({0, 1, 2}));
  check_shuffle(DataType::kFLOAT, {8, 16, 32, 64}, perm({1, 0, 2, 3}), std::nullopt, {16, 8, 32, 64}, perm({0, 1, 2, 3}));
  check_shuffle(DataType::kINT64, {64, 3, 2, 100}, perm({3, 2, 1, 0}), std::nullopt, {100, 2, 3, 64}, perm({0, 1, 2, 3}));
}

TEST(CpuKernelsShuffle, SizeOneDimsAndIdentity) {
  check_shuffle(DataType::kFLOAT, {1, 5, 1, 7}, perm({3, 2, 1, 0}), std::nullopt, {7, 1, 5, 1}, perm({0, 1, 2, 3}));
  check_shuffle(DataType::kFLOAT, {5, 1, 7}, perm({1, 0, 2}), std::nullopt, {1, 5, 7}, perm({0, 1, 2}));  // a copy
  check_shuffle(DataType::kFLOAT, {2, 3, 4}, perm({0, 1, 2}), std::nullopt, {2, 3, 4}, perm({0, 1, 2}));
  check_shuffle(DataType::kFLOAT, {}, perm({}), std::nullopt, {}, perm({}));
}

TEST(CpuKernelsShuffle, ReshapeBetweenTransposes) {
  // Reshape only: a copy.
  check_shuffle(DataType::kFLOAT, {2, 3, 4}, perm({0, 1, 2}), Dims{6, 4}, {6, 4}, perm({0, 1}));
  // First transpose, then reshape.
  check_shuffle(DataType::kFLOAT, {2, 3, 4}, perm({1, 0, 2}), Dims{3, 8}, {3, 8}, perm({0, 1}));
  // Reshape, then second transpose.
  check_shuffle(DataType::kHALF, {2, 3, 4}, perm({0, 1, 2}), Dims{4, 6}, {4, 6}, perm({1, 0}));
  // Both transposes move data.
  check_shuffle(DataType::kFLOAT, {2, 3, 4}, perm({2, 1, 0}), Dims{8, 3}, {8, 3}, perm({1, 0}));
  check_shuffle(DataType::kINT8, {2, 3, 4}, perm({0, 2, 1}), Dims{0, -1}, {2, 12}, perm({1, 0}));
  check_shuffle(DataType::kFLOAT, {4, 6, 10, 8}, perm({0, 2, 1, 3}), Dims{4, 10, 2, 3, 8}, {4, 10, 2, 3, 8},
                perm({0, 2, 1, 3, 4}));
  check_shuffle(DataType::kFLOAT, {60, 50, 40}, perm({2, 1, 0}), Dims{40, 3000}, {40, 3000}, perm({1, 0}));
}

TEST(CpuKernelsShuffle, Errors) {
  Buf x(DataType::kFLOAT, {2, 3}), out(DataType::kFLOAT, {3, 2}), bad(DataType::kFLOAT, {2, 3});
  ShuffleParams p;
  p.first_transpose = perm({0, 0});
  EXPECT_THROW(cpu::shuffle(p, x.ref(), out.ref()), InvalidArgument);
  p.first_transpose = perm({1, 0});
  EXPECT_THROW(cpu::shuffle(p, x.ref(), bad.ref()), InvalidArgument);  // dims do not follow
  cpu::shuffle(p, x.ref(), out.ref());
  Buf h(DataType::kHALF, {3, 2});
  EXPECT_THROW(cpu::shuffle(p, x.ref(), h.ref()), InvalidArgument);
}

// ---- copy and threads -------------------------------------------------------------------

TEST(CpuKernelsCopy, CopiesBytes) {
  for (i64 n : {i64{0}, i64{7}, i64{3} << 20}) {
    Buf x(DataType::kINT32, {n}), out(DataType::kINT32, {n});
    for (i64 i = 0; i < n; ++i) x.set_int(i, i * 7 - 3);
    cpu::copy(x.ref(), out.ref());
    EXPECT_EQ(std::memcmp(x.data(), out.data(), static_cast<std::size_t>(n) * 4), 0);
  }
  Buf a(DataType::kFLOAT, {2, 3}), b(DataType::kFLOAT, {6}), c(DataType::kINT32, {6}), d(DataType::kFLOAT, {5});
  a.set(4, 2.5);
  cpu::copy(a.ref(), b.ref());  // same volume, other dims
  EXPECT_EQ(b.get(4), 2.5);
  EXPECT_THROW(cpu::copy(a.ref(), c.ref()), InvalidArgument);
  EXPECT_THROW(cpu::copy(a.ref(), d.ref()), InvalidArgument);
}

TEST(CpuKernelsThreads, SettingAndResults) {
  const unsigned hw = std::thread::hardware_concurrency();
  cpu::set_num_threads(0);
  EXPECT_EQ(cpu::num_threads(), hw > 0 ? static_cast<int>(hw) : 1);
  EXPECT_THROW(cpu::set_num_threads(-1), InvalidArgument);
  for (int n : {1, 3, 7}) {  // 7: more threads than this machine may have: many range splits
    cpu::set_num_threads(n);
    EXPECT_EQ(cpu::num_threads(), n);
    check_float_elementwise(E::kSUB, DataType::kFLOAT, {64, 301, 8}, {64, 1, 8}, 61);
    check_matmul(DataType::kFLOAT, MO::kNONE, MO::kNONE, {3, 64, 128}, {3, 128, 96}, 62);
    check_shuffle(DataType::kFLOAT, {301, 257}, perm({1, 0}), std::nullopt, {257, 301}, perm({0, 1}));
  }
  cpu::set_num_threads(0);
  EXPECT_EQ(cpu::num_threads(), hw > 0 ? static_cast<int>(hw) : 1);
}

}  // namespace
