// compare_outputs and error_distribution: each metric against a direct float64 computation
// (long double where the sums need it), the rules for empty metrics, every dtype's decoding,
// argument errors, and results that do not depend on the thread count.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/numeric.h"
#include "tensoracle/compare.h"
#include "tensoracle/engine.h"
#include "tensoracle/errors.h"

namespace tensoracle {
namespace {

using safetensors::Dtype;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Expected {
  double max_abs, rel_l2, cosine;
  long outside;
};

// The metrics the plain way, in long double.
Expected direct(const std::vector<double>& c, const std::vector<double>& r, double atol, double rtol) {
  long double dd = 0, rr = 0, cc = 0, cr = 0, mx = 0;
  long outside = 0;
  for (std::size_t i = 0; i < c.size(); ++i) {
    long double d = static_cast<long double>(c[i]) - r[i];
    mx = std::max(mx, std::fabs(d));
    dd += d * d;
    rr += static_cast<long double>(r[i]) * r[i];
    cc += static_cast<long double>(c[i]) * c[i];
    cr += static_cast<long double>(c[i]) * r[i];
    // numpy.isclose's rule in float64.
    if (!(std::fabs(c[i] - r[i]) <= atol + rtol * std::fabs(r[i]))) ++outside;
  }
  return {static_cast<double>(mx), static_cast<double>(std::sqrt(dd) / std::sqrt(rr)),
          static_cast<double>(cr / (std::sqrt(cc) * std::sqrt(rr))), outside};
}

CompareOptions tol(double atol, double rtol) {
  CompareOptions o;
  o.atol = atol;
  o.rtol = rtol;
  return o;
}
CompareOptions atol_only(double atol) {
  CompareOptions o;
  o.atol = atol;
  return o;
}
CompareOptions rtol_only(double rtol) {
  CompareOptions o;
  o.rtol = rtol;
  return o;
}
CompareOptions labelled(double atol, std::string label) {
  CompareOptions o = atol_only(atol);
  o.label = std::move(label);
  return o;
}

OutputComparison compare64(const std::vector<double>& c, const std::vector<double>& r,
                           CompareOptions o = {}) {
  const auto n = static_cast<std::int64_t>(c.size());
  return compare_outputs(ArrayView::of(c.data(), {n}), ArrayView::of(r.data(), {n}), o);
}

TEST(Compare, MetricsMatchADirectComputation) {
  std::mt19937 g(7);
  std::normal_distribution<double> nd;
  for (std::size_t n : {1u, 7u, 8u, 9u, 1000u, 65536u, 65537u, 300001u}) {
    std::vector<double> r(n), c(n);
    for (std::size_t i = 0; i < n; ++i) {
      r[i] = nd(g);
      c[i] = r[i] + 0.01 * nd(g);
    }
    OutputComparison got = compare64(c, r, tol(0.005, 0.01));
    Expected want = direct(c, r, 0.005, 0.01);
    EXPECT_EQ(got.element_count, static_cast<std::int64_t>(n));
    EXPECT_EQ(got.shape, std::vector<std::int64_t>{static_cast<std::int64_t>(n)});
    EXPECT_EQ(got.dtype, Dtype::F64);
    EXPECT_EQ(got.candidate_nonfinite_count, 0);
    EXPECT_EQ(got.reference_nonfinite_count, 0);
    EXPECT_EQ(*got.max_absolute_error, want.max_abs) << n;
    EXPECT_NEAR(*got.relative_l2_error, want.rel_l2, 1e-12 * want.rel_l2) << n;
    EXPECT_NEAR(*got.cosine_similarity, want.cosine, 1e-13) << n;
    EXPECT_EQ(*got.outside_tolerance_count, want.outside) << n;
    EXPECT_DOUBLE_EQ(*got.outside_tolerance_fraction, static_cast<double>(want.outside) / n);
    if (n >= 1000) {
      EXPECT_GT(want.outside, 0);  // the tolerance cuts through the errors
    }
  }
}

TEST(Compare, EqualArrays) {
  std::vector<double> a{1.5, -2, 3, 0.25};
  OutputComparison got = compare64(a, a, tol(0, 0));
  EXPECT_EQ(*got.max_absolute_error, 0.0);
  EXPECT_EQ(*got.relative_l2_error, 0.0);
  EXPECT_EQ(*got.cosine_similarity, 1.0);
  EXPECT_EQ(*got.outside_tolerance_count, 0);
  EXPECT_EQ(*got.outside_tolerance_fraction, 0.0);
}

TEST(Compare, HandComputedValues) {
  // c − r = (3, 4): max 4, ‖c − r‖ = 5, ‖r‖ = 5 → relative L2 1; c·r = 0 → cosine 0.
  std::vector<double> r{3, 4}, c{6, 8};
  OutputComparison got = compare64(c, r);
  EXPECT_EQ(*got.max_absolute_error, 4.0);
  EXPECT_DOUBLE_EQ(*got.relative_l2_error, 1.0);
  EXPECT_DOUBLE_EQ(*got.cosine_similarity, 1.0);
  std::vector<double> c2{-4, 3};  // orthogonal to r
  got = compare64(c2, r);
  EXPECT_EQ(*got.cosine_similarity, 0.0);
  std::vector<double> c3{-3, -4};  // opposite
  EXPECT_EQ(*compare64(c3, r).cosine_similarity, -1.0);
}

TEST(Compare, ToleranceIsNumpyIscloseRule) {
  // |c − r| <= atol + rtol·|r|, boundary included.
  std::vector<double> r{1, 10, -10, 0}, c{1.5, 11, -12, 0.5};
  OutputComparison got = compare64(c, r, tol(0.5, 0.05));
  // 0.5 <= 0.55 in; 1 <= 1.0 in; 2 > 1.0 out; 0.5 <= 0.5 in
  EXPECT_EQ(*got.outside_tolerance_count, 1);
  EXPECT_DOUBLE_EQ(*got.outside_tolerance_fraction, 0.25);
}

TEST(Compare, ToleranceMetricsNeedBothTolerances) {
  std::vector<double> r{1, 2}, c{1, 3};
  EXPECT_FALSE(compare64(c, r, atol_only(0.1)).outside_tolerance_count);
  EXPECT_FALSE(compare64(c, r, rtol_only(0.1)).outside_tolerance_fraction);
  EXPECT_FALSE(compare64(c, r).outside_tolerance_count);
  EXPECT_EQ(*compare64(c, r, tol(0.1, 0)).outside_tolerance_count, 1);
}

TEST(Compare, NonFiniteValuesEmptyTheFiniteMetrics) {
  for (double bad : {kNaN, kInf, -kInf}) {
    std::vector<double> r{1, 2, 3}, c{1, bad, 3};
    OutputComparison got = compare64(c, r, tol(1, 1));
    EXPECT_EQ(got.candidate_nonfinite_count, 1);
    EXPECT_EQ(got.reference_nonfinite_count, 0);
    EXPECT_FALSE(got.max_absolute_error);
    EXPECT_FALSE(got.relative_l2_error);
    EXPECT_FALSE(got.cosine_similarity);
    EXPECT_FALSE(got.outside_tolerance_count);
    EXPECT_FALSE(got.outside_tolerance_fraction);
    got = compare64(r, c);  // now in the reference
    EXPECT_EQ(got.candidate_nonfinite_count, 0);
    EXPECT_EQ(got.reference_nonfinite_count, 1);
    EXPECT_FALSE(got.max_absolute_error);
  }
  std::vector<double> both{kNaN, kInf, 1};
  OutputComparison got = compare64(both, both);
  EXPECT_EQ(got.candidate_nonfinite_count, 2);
  EXPECT_EQ(got.reference_nonfinite_count, 2);
}

TEST(Compare, ZeroNormsEmptyTheRatios) {
  std::vector<double> zeros(5, 0.0), ones(5, 1.0);
  OutputComparison got = compare64(ones, zeros);  // ‖r‖ = 0
  EXPECT_EQ(*got.max_absolute_error, 1.0);
  EXPECT_FALSE(got.relative_l2_error);
  EXPECT_FALSE(got.cosine_similarity);
  got = compare64(zeros, ones);  // ‖c‖ = 0: relative L2 is 1, cosine undefined
  EXPECT_EQ(*got.relative_l2_error, 1.0);
  EXPECT_FALSE(got.cosine_similarity);
  got = compare64(zeros, zeros);
  EXPECT_EQ(*got.max_absolute_error, 0.0);
  EXPECT_FALSE(got.relative_l2_error);
}

TEST(Compare, EmptyArrays) {
  std::vector<float> none;
  OutputComparison got = compare_outputs(ArrayView::of(none.data(), {0, 3}), ArrayView::of(none.data(), {0, 3}),
                                         tol(0.1, 0.1));
  EXPECT_EQ(got.element_count, 0);
  EXPECT_EQ(got.shape, (std::vector<std::int64_t>{0, 3}));
  EXPECT_FALSE(got.max_absolute_error);
  EXPECT_FALSE(got.relative_l2_error);
  EXPECT_FALSE(got.cosine_similarity);
  EXPECT_EQ(*got.outside_tolerance_count, 0);
  EXPECT_FALSE(got.outside_tolerance_fraction);
  // Null data is fine when there is nothing to read.
  got = compare_outputs({nullptr, Dtype::F32, {0}}, {nullptr, Dtype::F32, {0}});
  EXPECT_EQ(got.element_count, 0);
}

TEST(Compare, RankZeroArraysHoldOneElement) {
  float c = 2.0f, r = 1.5f;
  OutputComparison got = compare_outputs(ArrayView::of(&c, {}), ArrayView::of(&r, {}));
  EXPECT_EQ(got.element_count, 1);
  EXPECT_TRUE(got.shape.empty());
  EXPECT_EQ(*got.max_absolute_error, 0.5);
}

TEST(Compare, Float32SumsThatOverflowFloat32) {
  // Squares of 1e30 overflow float32; the float64 sums do not.
  std::vector<float> r(1000, 1e30f), c(1000, 1.1e30f);
  OutputComparison got = compare_outputs(ArrayView::of(c.data(), {1000}), ArrayView::of(r.data(), {1000}));
  double d = static_cast<double>(1.1e30f) - static_cast<double>(1e30f);
  EXPECT_DOUBLE_EQ(*got.max_absolute_error, d);
  EXPECT_NEAR(*got.relative_l2_error, d / static_cast<double>(1e30f), 1e-12);
  EXPECT_NEAR(*got.cosine_similarity, 1.0, 1e-15);
}

TEST(Compare, Float64SumsThatWouldOverflowOrUnderflow) {
  for (double scale : {1e200, 1e-200, 1e300}) {
    std::vector<double> r{3 * scale, 4 * scale, 0}, c{3 * scale, 5 * scale, 1 * scale};
    OutputComparison got = compare64(c, r);
    // Scale-free values: ‖c − r‖ = √2·s, ‖r‖ = 5s; c·r = 29s², ‖c‖ = √35·s.
    EXPECT_NEAR(*got.relative_l2_error, std::sqrt(2.0) / 5, 1e-15) << scale;
    EXPECT_NEAR(*got.cosine_similarity, 29 / (std::sqrt(35.0) * 5), 1e-15) << scale;
    EXPECT_DOUBLE_EQ(*got.max_absolute_error, 1 * scale) << scale;
  }
  // c − r itself overflows: max |c − r| is inf, the ratios stay exact.
  std::vector<double> r{1e308, 1e308}, c{-1e308, -1e308};
  OutputComparison got = compare64(c, r);
  EXPECT_EQ(*got.max_absolute_error, kInf);
  EXPECT_DOUBLE_EQ(*got.relative_l2_error, 2.0);
  EXPECT_DOUBLE_EQ(*got.cosine_similarity, -1.0);
}

TEST(Compare, SameResultOnAnyThreadCount) {
  const std::int64_t n = 1'000'003;
  std::vector<float> r(n), c(n);
  std::mt19937 g(3);
  std::uniform_real_distribution<float> u(-1, 1);
  for (std::int64_t i = 0; i < n; ++i) {
    r[i] = u(g);
    c[i] = r[i] + 1e-3f * u(g);
  }
  auto run = [&](int threads) {
    set_cpu_threads(threads);
    return compare_outputs(ArrayView::of(c.data(), {n}), ArrayView::of(r.data(), {n}), tol(1e-4, 1e-3));
  };
  OutputComparison one = run(1), three = run(3), four = run(4);
  set_cpu_threads(0);
  for (const OutputComparison* o : {&three, &four}) {
    EXPECT_EQ(std::bit_cast<std::uint64_t>(*one.relative_l2_error), std::bit_cast<std::uint64_t>(*o->relative_l2_error));
    EXPECT_EQ(std::bit_cast<std::uint64_t>(*one.cosine_similarity), std::bit_cast<std::uint64_t>(*o->cosine_similarity));
    EXPECT_EQ(*one.max_absolute_error, *o->max_absolute_error);
    EXPECT_EQ(*one.outside_tolerance_count, *o->outside_tolerance_count);
  }
}

// Every dtype decodes to its value: compare x against x + 1 (one step everywhere), and the
// max error and counts follow.
template <typename T>
OutputComparison compare_bits(Dtype dtype, const std::vector<T>& c, const std::vector<T>& r, CompareOptions o = {}) {
  const auto n = static_cast<std::int64_t>(c.size());
  return compare_outputs({c.data(), dtype, {n}}, {r.data(), dtype, {n}}, o);
}

TEST(Compare, NarrowFloatsAreDecoded) {
  // bfloat16: 1.0 = 0x3F80, 1.5 = 0x3FC0, -2 = 0xC000, NaN = 0x7FC0.
  std::vector<std::uint16_t> r{0x3F80, 0xC000}, c{0x3FC0, 0xC000};
  OutputComparison got = compare_bits(Dtype::BF16, c, r, tol(0.25, 0));
  EXPECT_EQ(*got.max_absolute_error, 0.5);
  EXPECT_EQ(*got.outside_tolerance_count, 1);
  EXPECT_EQ(compare_bits(Dtype::BF16, std::vector<std::uint16_t>{0x7FC0, 0x7F80}, r).candidate_nonfinite_count, 2);
  // float16: 1.0 = 0x3C00, 2.0 = 0x4000, subnormal 2^-24 = 0x0001, inf = 0x7C00.
  std::vector<std::uint16_t> hr{0x3C00, 0x0001}, hc{0x4000, 0x0000};
  got = compare_bits(Dtype::F16, hc, hr);
  EXPECT_EQ(*got.max_absolute_error, 1.0);
  EXPECT_NEAR(*got.relative_l2_error, std::sqrt(1.0 + std::ldexp(1.0, -48)) / std::sqrt(1.0 + std::ldexp(1.0, -48)), 1e-15);
  EXPECT_EQ(compare_bits(Dtype::F16, std::vector<std::uint16_t>{0x7C00, 0x7E00}, hr).candidate_nonfinite_count, 2);
  // fp8 e4m3fn: 1.0 = 0x38, 448 = 0x7E, NaN = 0x7F (no infinity).
  std::vector<std::uint8_t> er{0x38, 0x7E}, ec{0x38, 0x7F};
  got = compare_bits(Dtype::F8_E4M3, ec, er);
  EXPECT_EQ(got.candidate_nonfinite_count, 1);
  got = compare_bits(Dtype::F8_E4M3, er, std::vector<std::uint8_t>{0x38, 0x7D});  // 448 vs 416
  EXPECT_EQ(*got.max_absolute_error, 32.0);
  // fp8 e5m2: 1.0 = 0x3C, 57344 = 0x7B, inf = 0x7C.
  got = compare_bits(Dtype::F8_E5M2, std::vector<std::uint8_t>{0x7B, 0x3C}, std::vector<std::uint8_t>{0x3C, 0x3C});
  EXPECT_EQ(*got.max_absolute_error, 57343.0);
  EXPECT_EQ(compare_bits(Dtype::F8_E5M2, std::vector<std::uint8_t>{0x7C}, std::vector<std::uint8_t>{0x3C}).candidate_nonfinite_count, 1);
  // FNUZ: 0x80 is NaN; e4m3fnuz 1.0 = 0x40 (bias 8), e5m2fnuz 1.0 = 0x40 (bias 16).
  got = compare_bits(Dtype::F8_E4M3FNUZ, std::vector<std::uint8_t>{0x48, 0x80}, std::vector<std::uint8_t>{0x40, 0x40});
  EXPECT_EQ(got.candidate_nonfinite_count, 1);
  got = compare_bits(Dtype::F8_E4M3FNUZ, std::vector<std::uint8_t>{0x48}, std::vector<std::uint8_t>{0x40});
  EXPECT_EQ(*got.max_absolute_error, 1.0);  // 2.0 − 1.0
  got = compare_bits(Dtype::F8_E5M2FNUZ, std::vector<std::uint8_t>{0x44}, std::vector<std::uint8_t>{0x40});
  EXPECT_EQ(*got.max_absolute_error, 1.0);
}

TEST(Compare, IntegerArraysCountToleranceButNoFiniteMetrics) {
  std::vector<std::int32_t> r{1, 2, 3, -2'000'000'000}, c{1, 5, 3, 2'000'000'000};
  OutputComparison got = compare_bits(Dtype::I32, c, r, tol(0, 0));
  EXPECT_EQ(got.candidate_nonfinite_count, 0);
  EXPECT_FALSE(got.max_absolute_error);
  EXPECT_FALSE(got.relative_l2_error);
  EXPECT_FALSE(got.cosine_similarity);
  EXPECT_EQ(*got.outside_tolerance_count, 2);
  got = compare_bits(Dtype::I32, c, r, tol(3, 0));  // 3 <= 3 in; 4e9 out
  EXPECT_EQ(*got.outside_tolerance_count, 1);
  std::vector<std::uint64_t> ur{0, 1}, uc{std::numeric_limits<std::uint64_t>::max(), 1};
  EXPECT_EQ(*compare_bits(Dtype::U64, uc, ur, tol(1e19, 0)).outside_tolerance_count, 1);
  std::vector<std::int8_t> br{0, 1, 1}, bc{1, 1, 7};  // bool: any non-zero byte is true
  EXPECT_EQ(*compare_bits(Dtype::BOOL, bc, br, tol(0, 0)).outside_tolerance_count, 1);
  for (Dtype d : {Dtype::I8, Dtype::U8, Dtype::I16, Dtype::U16, Dtype::U32, Dtype::I64}) {
    std::vector<std::uint64_t> z(2, 0);  // wide enough for every element size
    EXPECT_EQ(*compare_outputs({z.data(), d, {2}}, {z.data(), d, {2}}, tol(0, 0)).outside_tolerance_count, 0);
  }
}

TEST(Compare, ArgumentErrorsNameTheProblem) {
  std::vector<double> a{1, 2, 3};
  auto expect_invalid = [](auto&& call, const std::string& words) {
    try {
      call();
      ADD_FAILURE() << "no exception; wanted " << words;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  expect_invalid([&] { compare_outputs(ArrayView::of(a.data(), {3}), ArrayView::of(a.data(), {1, 3})); },
                 "shape mismatch: candidate (3,), reference (1, 3)");
  std::vector<float> f{1, 2, 3};
  expect_invalid([&] { compare_outputs(ArrayView::of(f.data(), {3}), ArrayView::of(a.data(), {3})); },
                 "dtype mismatch: candidate float32, reference float64");
  expect_invalid([&] { compare64(a, a, tol(-1, 0)); }, "atol must be >= 0");
  expect_invalid([&] { compare64(a, a, tol(0, kNaN)); }, "rtol must be >= 0");
  expect_invalid([&] { compare64(a, a, labelled(kNaN, "tensor 'y'")); }, "[compare] tensor 'y': atol");
  expect_invalid([&] { compare_outputs({a.data(), Dtype::F64, {-3}}, {a.data(), Dtype::F64, {-3}}); }, "negative dim");
  expect_invalid([&] { compare_outputs({nullptr, Dtype::F64, {3}}, ArrayView::of(a.data(), {3})); }, "candidate has no data");
  expect_invalid([&] {
    compare_outputs({a.data(), Dtype::F64, {1LL << 40, 1LL << 40}}, {a.data(), Dtype::F64, {1LL << 40, 1LL << 40}});
  }, "overflows");
  EXPECT_THROW(compare_outputs({a.data(), Dtype::F4, {2}}, {a.data(), Dtype::F4, {2}}), UnsupportedError);
  EXPECT_THROW(compare_outputs({a.data(), Dtype::C64, {1}}, {a.data(), Dtype::C64, {1}}), UnsupportedError);
}

TEST(Compare, EngineTypesMapToDtypes) {
  EXPECT_EQ(to_dtype(DataType::kFLOAT), Dtype::F32);
  EXPECT_EQ(to_dtype(DataType::kFP8), Dtype::F8_E4M3);
  EXPECT_EQ(to_dtype(DataType::kBF16), Dtype::BF16);
  EXPECT_EQ(numpy_name(Dtype::F8_E4M3), "float8_e4m3fn");
  std::vector<std::uint16_t> h{0x3C00};
  ArrayView v = ArrayView::of(h.data(), DataType::kHALF, Dims{1, 1});
  EXPECT_EQ(v.dtype, Dtype::F16);
  EXPECT_EQ(v.shape, (std::vector<std::int64_t>{1, 1}));
}

TEST(ErrorDistribution, HistogramSampleAndLargestErrors) {
  const std::int64_t n = 100'000;
  std::vector<double> r(n), c(n);
  for (std::int64_t i = 0; i < n; ++i) {
    r[i] = static_cast<double>(i % 100);
    c[i] = r[i] + (i % 10) * 0.125;  // errors 0, 0.125, ..., 1.125 (exact)
  }
  c[12345] = r[12345] + 5.0;  // one outlier
  c[7] = kNaN;
  ErrorDistribution d = error_distribution(ArrayView::of(c.data(), {n}), ArrayView::of(r.data(), {n}), 10, 500);
  EXPECT_EQ(d.nonfinite_pairs, 1);
  EXPECT_DOUBLE_EQ(d.max_error, 5.0);
  EXPECT_EQ(d.max_reference, 99.0);
  std::int64_t total = 0;
  for (auto h : d.histogram) total += h;
  EXPECT_EQ(total, n - 1);
  // Bins of 0.5: [0, 0.5) holds errors 0 to 0.375 (4 of every 10), [0.5, 1) 0.5 to 0.875
  // but for the outlier (index 12345) and the NaN (index 7), [1, 1.5) 1 and 1.125; the
  // outlier alone is in the last bin.
  EXPECT_EQ(d.histogram, (std::vector<std::int64_t>{40000, 39998, 20000, 0, 0, 0, 0, 0, 0, 1}));
  EXPECT_LE(d.points.size(), 500u);
  EXPECT_GE(d.points.size(), 400u);
  bool outlier = false;
  for (auto [m, e] : d.points) outlier |= e == 5.0;
  EXPECT_TRUE(outlier);
  EXPECT_THROW(error_distribution(ArrayView::of(c.data(), {n}), ArrayView::of(r.data(), {n}), 0), InvalidArgument);
  // A small array: every pair once (the largest errors are not drawn twice).
  ErrorDistribution small = error_distribution(ArrayView::of(c.data(), {50}), ArrayView::of(r.data(), {50}), 10, 500);
  EXPECT_EQ(small.points.size(), 49u);  // 50 pairs, one NaN
}

}  // namespace
}  // namespace tensoracle
