// Tests of the CPU backend's cast, quantize and dequantize kernels (backends/cpu/kernels.h)
// against scalar reference loops written here and in cpu_kernels_test_helpers.h:
// double-precision references rounded to the output type as kernels.h states (computed in
// float32, rounded once when stored).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels.h"
#include "core/numeric.h"
#include "cpu_kernels_test_helpers.h"
#include "tensoracle/errors.h"

namespace {

using namespace tensoracle;
using namespace tensoracle::testing::cpu_kernels;

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

}  // namespace
