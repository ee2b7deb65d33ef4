// compare_outputs and error_distribution (see tensoracle/compare.h).
//
// One pass over both arrays: each element pair is decoded to float64 by a loader for its
// dtype (a plain load, a shift for bfloat16, a table for float16 and the fp8 types), and
// folded into 8 lanes of running sums, maxima and counts. The lane loop has no branches and
// no cross-lane dependency, so the compiler vectorizes it without reassociating anything
// (no -ffast-math): results are reproducible bit for bit. Chunks of kChunk elements are
// independent and spread over OpenMP threads; their results are combined pairwise, in
// chunk order, after the parallel loop.
#include "tensoracle/compare.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <queue>
#include <string>

#include "core/numeric.h"
#include "tensoracle/engine.h"
#include "tensoracle/errors.h"

namespace tensoracle {

namespace {

using i64 = std::int64_t;
using safetensors::Dtype;

constexpr i64 kChunk = i64{1} << 16;
constexpr int kLanes = 8;
constexpr double kMaxFinite = DBL_MAX;

// ---- loaders: element i of an array as float64 ----------------------------------------

template <typename T>
T load_raw(const std::byte* p, i64 i) noexcept {
  T v;
  std::memcpy(&v, p + i * static_cast<i64>(sizeof(T)), sizeof(T));
  return v;
}

template <typename T>
struct LoadPlain {  // float, double and the integer types
  double operator()(const std::byte* p, i64 i) const noexcept { return static_cast<double>(load_raw<T>(p, i)); }
};

struct LoadBool {
  double operator()(const std::byte* p, i64 i) const noexcept {
    return std::to_integer<std::uint8_t>(p[i]) != 0 ? 1.0 : 0.0;
  }
};

struct LoadBF16 {
  double operator()(const std::byte* p, i64 i) const noexcept {
    return std::bit_cast<float>(static_cast<std::uint32_t>(load_raw<std::uint16_t>(p, i)) << 16);
  }
};

struct LoadTable16 {  // float16: 65,536 values
  const float* table;
  double operator()(const std::byte* p, i64 i) const noexcept { return table[load_raw<std::uint16_t>(p, i)]; }
};

struct LoadTable8 {  // the fp8 types: 256 values
  const float* table;
  double operator()(const std::byte* p, i64 i) const noexcept {
    return table[std::to_integer<std::uint8_t>(p[i])];
  }
};

// fp8 without negative zero or infinity (AMD's FNUZ types): 0x80 is NaN, the exponent bias
// is one more than the IEEE-like type's.
template <int ExpBits, int ManBits, int Bias>
float fnuz_to_float(std::uint8_t v) noexcept {
  if (v == 0x80) return std::numeric_limits<float>::quiet_NaN();
  const bool neg = v & 0x80;
  const int exp = (v >> ManBits) & ((1 << ExpBits) - 1);
  const int man = v & ((1 << ManBits) - 1);
  float r = exp == 0 ? std::ldexp(static_cast<float>(man), 1 - Bias - ManBits)
                     : std::ldexp(1.0f + static_cast<float>(man) / (1 << ManBits), exp - Bias);
  return neg ? -r : r;
}

const float* half_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (std::uint32_t h = 0; h < 65536; ++h) t[h] = core::half_to_float(static_cast<std::uint16_t>(h));
    return t;
  }();
  return table.data();
}

const float* fp8_table(Dtype dtype) {
  static const std::array<std::array<float, 256>, 4> tables = [] {
    std::array<std::array<float, 256>, 4> t{};
    for (int v = 0; v < 256; ++v) {
      auto b = static_cast<std::uint8_t>(v);
      t[0][v] = core::fp8_e4m3_to_float(b);
      t[1][v] = core::fp8_e5m2_to_float(b);
      t[2][v] = fnuz_to_float<4, 3, 8>(b);
      t[3][v] = fnuz_to_float<5, 2, 16>(b);
    }
    return t;
  }();
  switch (dtype) {
    case Dtype::F8_E4M3: return tables[0].data();
    case Dtype::F8_E5M2: return tables[1].data();
    case Dtype::F8_E4M3FNUZ: return tables[2].data();
    default: return tables[3].data();
  }
}

bool is_floating(Dtype d) noexcept {
  switch (d) {
    case Dtype::F64: case Dtype::F32: case Dtype::F16: case Dtype::BF16: case Dtype::F8_E4M3:
    case Dtype::F8_E5M2: case Dtype::F8_E4M3FNUZ: case Dtype::F8_E5M2FNUZ:
      return true;
    default:
      return false;
  }
}

std::string prefix(const std::string& label) {
  return label.empty() ? "[compare] " : "[compare] " + label + ": ";
}

// Calls f(loader) with the loader of `dtype`; UnsupportedError for dtypes without values.
template <typename F>
decltype(auto) with_loader(Dtype dtype, const std::string& label, F&& f) {
  switch (dtype) {
    case Dtype::F64: return f(LoadPlain<double>{});
    case Dtype::F32: return f(LoadPlain<float>{});
    case Dtype::F16: return f(LoadTable16{half_table()});
    case Dtype::BF16: return f(LoadBF16{});
    case Dtype::F8_E4M3: case Dtype::F8_E5M2: case Dtype::F8_E4M3FNUZ: case Dtype::F8_E5M2FNUZ:
      return f(LoadTable8{fp8_table(dtype)});
    case Dtype::I8: return f(LoadPlain<std::int8_t>{});
    case Dtype::I16: return f(LoadPlain<std::int16_t>{});
    case Dtype::I32: return f(LoadPlain<std::int32_t>{});
    case Dtype::I64: return f(LoadPlain<std::int64_t>{});
    case Dtype::U8: return f(LoadPlain<std::uint8_t>{});
    case Dtype::U16: return f(LoadPlain<std::uint16_t>{});
    case Dtype::U32: return f(LoadPlain<std::uint32_t>{});
    case Dtype::U64: return f(LoadPlain<std::uint64_t>{});
    case Dtype::BOOL: return f(LoadBool{});
    default:
      throw UnsupportedError(prefix(label) + "dtype " + std::string(numpy_name(dtype)) +
                             " is not supported (float64/32/16, bfloat16, the fp8 types, integers "
                             "and bool are)");
  }
}

// ---- argument checks ----------------------------------------------------------------------

std::string shape_text(const std::vector<i64>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

std::string dtype_text(Dtype d) {
  std::string_view n = numpy_name(d);
  return std::string(n.empty() ? safetensors::dtype_name(d) : n);
}

// Checks the pair and returns the element count.
i64 check_pair(const ArrayView& c, const ArrayView& r, const std::string& label) {
  if (c.dtype != r.dtype)
    throw InvalidArgument(prefix(label) + "dtype mismatch: candidate " + dtype_text(c.dtype) +
                          ", reference " + dtype_text(r.dtype) +
                          "; compare arrays of one dtype (convert one of them first)");
  if (c.shape != r.shape)
    throw InvalidArgument(prefix(label) + "shape mismatch: candidate " + shape_text(c.shape) +
                          ", reference " + shape_text(r.shape));
  i64 n = 1;
  for (i64 d : c.shape) {
    if (d < 0) throw InvalidArgument(prefix(label) + "shape " + shape_text(c.shape) + " has a negative dim");
    if (__builtin_mul_overflow(n, d, &n))
      throw InvalidArgument(prefix(label) + "shape " + shape_text(c.shape) + ": element count overflows");
  }
  if (n > 0 && (c.data == nullptr || r.data == nullptr))
    throw InvalidArgument(prefix(label) + (c.data == nullptr ? "candidate" : "reference") +
                          " has no data for its " + std::to_string(n) + " elements");
  return n;
}

void check_tolerance(const std::optional<double>& t, const char* name, const std::string& label) {
  if (t && !(*t >= 0.0))
    throw InvalidArgument(prefix(label) + name + " must be >= 0, got " + std::to_string(*t) +
                          " (a NaN or negative tolerance bounds nothing)");
}

int threads_for(i64 chunks) {
  return static_cast<int>(std::clamp<i64>(chunks, 1, std::max(1, cpu_threads())));
}

// ---- the metric pass ------------------------------------------------------------------------

struct Sums {
  double max_d = 0, max_c = 0, max_r = 0;  // of |c − r|, |c|, |r| (NaN ignored)
  double dd = 0, rr = 0, cc = 0, cr = 0;   // Σ d², Σ r², Σ c², Σ c·r
  double nonfinite_c = 0, nonfinite_r = 0, outside = 0;

  void add(const Sums& o) noexcept {
    max_d = std::max(max_d, o.max_d);
    max_c = std::max(max_c, o.max_c);
    max_r = std::max(max_r, o.max_r);
    dd += o.dd; rr += o.rr; cc += o.cc; cr += o.cr;
    nonfinite_c += o.nonfinite_c; nonfinite_r += o.nonfinite_r; outside += o.outside;
  }
};

// Scales for the second pass of float64 arrays (powers of two: exact). 1 when unused.
struct Scales {
  double c = 1, r = 1, d = 1;
};

struct Lanes {
  alignas(64) double max_d[kLanes] = {}, max_c[kLanes] = {}, max_r[kLanes] = {};
  alignas(64) double dd[kLanes] = {}, rr[kLanes] = {}, cc[kLanes] = {}, cr[kLanes] = {};
  alignas(64) double nc[kLanes] = {}, nr[kLanes] = {}, out[kLanes] = {};

  // The pairwise sum of the lanes (fixed order).
  static double fold_sum(double* a) noexcept {
    for (int w = kLanes / 2; w >= 1; w /= 2)
      for (int l = 0; l < w; ++l) a[l] += a[l + w];
    return a[0];
  }
  static double fold_max(const double* a) noexcept {
    double m = a[0];
    for (int l = 1; l < kLanes; ++l) m = a[l] > m ? a[l] : m;
    return m;
  }
  Sums fold() noexcept {
    Sums s;
    s.max_d = fold_max(max_d); s.max_c = fold_max(max_c); s.max_r = fold_max(max_r);
    s.dd = fold_sum(dd); s.rr = fold_sum(rr); s.cc = fold_sum(cc); s.cr = fold_sum(cr);
    s.nonfinite_c = fold_sum(nc); s.nonfinite_r = fold_sum(nr); s.outside = fold_sum(out);
    return s;
  }
};

// One chunk [begin, end). `Scaled` is the second pass of float64 arrays (only the sums).
template <bool Scaled, typename Load>
[[gnu::always_inline]] inline Sums chunk_sums_body(const Load& load, const std::byte* cp, const std::byte* rp,
                                                   i64 begin, i64 end, double atol, double rtol, Scales s) noexcept {
  Lanes a;
  auto step = [&](int l, double x, double y) {
    if constexpr (Scaled) {
      const double d = x * s.d - y * s.d, xs = x * s.c, ys = y * s.r;
      a.dd[l] += d * d;
      a.rr[l] += ys * ys;
      a.cc[l] += xs * xs;
      a.cr[l] += xs * ys;
    } else {
      const double d = x - y;
      const double ad = std::fabs(d), ax = std::fabs(x), ay = std::fabs(y);
      a.max_d[l] = ad > a.max_d[l] ? ad : a.max_d[l];
      a.max_c[l] = ax > a.max_c[l] ? ax : a.max_c[l];
      a.max_r[l] = ay > a.max_r[l] ? ay : a.max_r[l];
      a.dd[l] += d * d;
      a.rr[l] += y * y;
      a.cc[l] += x * x;
      a.cr[l] += x * y;
      a.nc[l] += ax <= kMaxFinite ? 0.0 : 1.0;
      a.nr[l] += ay <= kMaxFinite ? 0.0 : 1.0;
      a.out[l] += ad <= atol + rtol * ay ? 0.0 : 1.0;
    }
  };
  i64 i = begin;
  for (; i + kLanes <= end; i += kLanes)
    for (int l = 0; l < kLanes; ++l) step(l, load(cp, i + l), load(rp, i + l));
  for (int l = 0; i < end; ++i, ++l) step(l, load(cp, i), load(rp, i));
  return a.fold();
}

// The same loop compiled for the baseline ISA and, on x86, for AVX2 (chosen at run time):
// twice the doubles per instruction; no FMA, so the arithmetic and its rounding are the same.
// `flatten` inlines the loaders and the lane step, so they are compiled for the caller's ISA.
template <bool Scaled, typename Load>
[[gnu::flatten]] Sums chunk_sums_generic(const Load& load, const std::byte* cp, const std::byte* rp, i64 begin,
                                         i64 end, double atol, double rtol, Scales s) noexcept {
  return chunk_sums_body<Scaled>(load, cp, rp, begin, end, atol, rtol, s);
}

#if defined(__x86_64__) || defined(__i386__)
template <bool Scaled, typename Load>
[[gnu::flatten, gnu::target("avx2")]] Sums chunk_sums_avx2(const Load& load, const std::byte* cp,
                                                           const std::byte* rp, i64 begin, i64 end, double atol,
                                                           double rtol, Scales s) noexcept {
  return chunk_sums_body<Scaled>(load, cp, rp, begin, end, atol, rtol, s);
}

bool have_avx2() noexcept {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return yes;
}
#endif

template <bool Scaled, typename Load>
Sums chunk_sums(bool avx2, const Load& load, const std::byte* cp, const std::byte* rp, i64 begin, i64 end,
                double atol, double rtol, Scales s) noexcept {
#if defined(__x86_64__) || defined(__i386__)
  if (avx2) return chunk_sums_avx2<Scaled>(load, cp, rp, begin, end, atol, rtol, s);
#else
  (void)avx2;
#endif
  return chunk_sums_generic<Scaled>(load, cp, rp, begin, end, atol, rtol, s);
}

// Pairwise combination of parts[lo, hi).
Sums combine(const std::vector<Sums>& parts, std::size_t lo, std::size_t hi) {
  if (hi - lo == 1) return parts[lo];
  std::size_t mid = lo + (hi - lo) / 2;
  Sums s = combine(parts, lo, mid);
  s.add(combine(parts, mid, hi));
  return s;
}

template <bool Scaled, typename Load>
Sums all_sums(const Load& load, const std::byte* cp, const std::byte* rp, i64 n, double atol,
              double rtol, Scales scales) {
  const i64 chunks = (n + kChunk - 1) / kChunk;
  if (chunks == 0) return {};
  std::vector<Sums> parts(static_cast<std::size_t>(chunks));
  const int threads = threads_for(chunks);
#if defined(__x86_64__) || defined(__i386__)
  const bool avx2 = have_avx2() && !std::getenv("TENSORACLE_COMPARE_NO_AVX2");
#else
  const bool avx2 = false;
#endif
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (i64 k = 0; k < chunks; ++k) {
    const i64 begin = k * kChunk, end = std::min(n, begin + kChunk);
    parts[static_cast<std::size_t>(k)] = chunk_sums<Scaled>(avx2, load, cp, rp, begin, end, atol, rtol, scales);
  }
  return combine(parts, 0, parts.size());
}

// 2^-e for the binary exponent e of x > 0 (so x·scale lies in [1, 2)).
double power_scale(double x) noexcept { return std::ldexp(1.0, -std::ilogb(x)); }

bool outside_safe_range(double x) noexcept {
  return x > 0 && (x > 0x1p200 || x < 0x1p-200);
}

}  // namespace

// ---- public helpers ---------------------------------------------------------------------------

ArrayView ArrayView::of(const void* data, DataType type, const Dims& dims) {
  return {data, to_dtype(type), dims.vec()};
}

safetensors::Dtype to_dtype(DataType type) noexcept {
  switch (type) {
    case DataType::kFLOAT: return Dtype::F32;
    case DataType::kHALF: return Dtype::F16;
    case DataType::kINT8: return Dtype::I8;
    case DataType::kINT32: return Dtype::I32;
    case DataType::kBOOL: return Dtype::BOOL;
    case DataType::kUINT8: return Dtype::U8;
    case DataType::kFP8: return Dtype::F8_E4M3;
    case DataType::kBF16: return Dtype::BF16;
    case DataType::kINT64: return Dtype::I64;
  }
  return Dtype::F32;
}

std::string_view numpy_name(safetensors::Dtype dtype) noexcept {
  switch (dtype) {
    case Dtype::BOOL: return "bool";
    case Dtype::U8: return "uint8";
    case Dtype::I8: return "int8";
    case Dtype::F8_E5M2: return "float8_e5m2";
    case Dtype::F8_E4M3: return "float8_e4m3fn";
    case Dtype::I16: return "int16";
    case Dtype::U16: return "uint16";
    case Dtype::F16: return "float16";
    case Dtype::BF16: return "bfloat16";
    case Dtype::I32: return "int32";
    case Dtype::U32: return "uint32";
    case Dtype::F32: return "float32";
    case Dtype::F64: return "float64";
    case Dtype::I64: return "int64";
    case Dtype::U64: return "uint64";
    case Dtype::F8_E8M0: return "float8_e8m0fnu";
    case Dtype::F4: return "float4_e2m1fn";
    case Dtype::F6_E2M3: return "float6_e2m3fn";
    case Dtype::F6_E3M2: return "float6_e3m2fn";
    case Dtype::C64: return "complex64";
    case Dtype::F8_E4M3FNUZ: return "float8_e4m3fnuz";
    case Dtype::F8_E5M2FNUZ: return "float8_e5m2fnuz";
  }
  return {};
}

// ---- compare_outputs ---------------------------------------------------------------------------

OutputComparison compare_outputs(const ArrayView& candidate, const ArrayView& reference,
                                 const CompareOptions& options) {
  const std::string& label = options.label;
  const i64 n = check_pair(candidate, reference, label);
  check_tolerance(options.atol, "atol", label);
  check_tolerance(options.rtol, "rtol", label);
  const bool tolerances = options.atol && options.rtol;
  const double atol = tolerances ? *options.atol : std::numeric_limits<double>::infinity();
  const double rtol = tolerances ? *options.rtol : 0.0;

  const auto* cp = static_cast<const std::byte*>(candidate.data);
  const auto* rp = static_cast<const std::byte*>(reference.data);
  const Dtype dtype = candidate.dtype;

  Sums s = with_loader(dtype, label, [&](const auto& load) {
    return all_sums<false>(load, cp, rp, n, atol, rtol, Scales{});
  });

  OutputComparison result;
  result.shape = candidate.shape;
  result.dtype = dtype;
  result.element_count = n;
  result.candidate_nonfinite_count = static_cast<i64>(s.nonfinite_c);
  result.reference_nonfinite_count = static_cast<i64>(s.nonfinite_r);
  const bool finite = s.nonfinite_c == 0 && s.nonfinite_r == 0;

  if (finite && tolerances) {
    result.outside_tolerance_count = static_cast<i64>(s.outside);
    if (n > 0) result.outside_tolerance_fraction = s.outside / static_cast<double>(n);
  }
  if (!finite || n == 0 || !is_floating(dtype)) return result;

  result.max_absolute_error = s.max_d;
  // ‖x‖ = sqrt(Σ (x·scale)²) / scale; with every scale 1 this is the first pass's sums.
  Scales scales;
  if (dtype == Dtype::F64 && (outside_safe_range(s.max_c) || outside_safe_range(s.max_r) ||
                              outside_safe_range(s.max_d) || std::isinf(s.max_d))) {
    if (s.max_c > 0) scales.c = power_scale(s.max_c);
    if (s.max_r > 0) scales.r = power_scale(s.max_r);
    // c − r may overflow where c and r do not: scale both by the larger magnitude first.
    double md = std::isinf(s.max_d) ? std::max(s.max_c, s.max_r) : s.max_d;
    if (md > 0) scales.d = power_scale(md);
    s = with_loader(dtype, label, [&](const auto& load) {
      return all_sums<true>(load, cp, rp, n, atol, rtol, scales);
    });
  }
  const double norm_c = std::sqrt(s.cc), norm_r = std::sqrt(s.rr), norm_d = std::sqrt(s.dd);
  if (norm_r > 0) result.relative_l2_error = (norm_d / norm_r) * (scales.r / scales.d);
  // sqrt(cc·rr), not sqrt(cc)·sqrt(rr): equal arrays give exactly 1 (sqrt(x²) = x in IEEE
  // arithmetic). The product stays in range: magnitudes are within 2^±200 (else scaled).
  if (norm_c > 0 && norm_r > 0)
    result.cosine_similarity = std::clamp(s.cr / std::sqrt(s.cc * s.rr), -1.0, 1.0);
  return result;
}

// ---- error_distribution --------------------------------------------------------------------------

namespace {

struct Point {
  double magnitude, error;
};
struct ByError {
  bool operator()(const Point& a, const Point& b) const noexcept { return a.error > b.error; }
};
using MinHeap = std::priority_queue<Point, std::vector<Point>, ByError>;

struct DistChunk {
  double max_e = 0, max_r = 0;
  i64 nonfinite = 0;
  std::vector<i64> histogram;
  std::vector<Point> sample, largest;
};

}  // namespace

ErrorDistribution error_distribution(const ArrayView& candidate, const ArrayView& reference, int bins,
                                     std::size_t max_points, const std::string& label) {
  const i64 n = check_pair(candidate, reference, label);
  if (bins < 1) throw InvalidArgument(prefix(label) + "bins must be >= 1, got " + std::to_string(bins));
  const auto* cp = static_cast<const std::byte*>(candidate.data);
  const auto* rp = static_cast<const std::byte*>(reference.data);
  const i64 chunks = (n + kChunk - 1) / kChunk;
  const int threads = threads_for(chunks);
  std::vector<DistChunk> parts(static_cast<std::size_t>(chunks));
  const std::size_t n_largest = max_points / 10;
  const i64 stride = max_points > n_largest
                         ? std::max<i64>(1, (n + static_cast<i64>(max_points - n_largest) - 1) /
                                                static_cast<i64>(max_points - n_largest))
                         : std::numeric_limits<i64>::max();

  ErrorDistribution out;
  with_loader(candidate.dtype, label, [&](const auto& load) {
    // Pass 1: the ranges.
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (i64 k = 0; k < chunks; ++k) {
      DistChunk& p = parts[static_cast<std::size_t>(k)];
      for (i64 i = k * kChunk, end = std::min(n, (k + 1) * kChunk); i < end; ++i) {
        const double x = load(cp, i), y = load(rp, i);
        if (!(std::fabs(x) <= kMaxFinite && std::fabs(y) <= kMaxFinite)) {
          ++p.nonfinite;
          continue;
        }
        p.max_e = std::max(p.max_e, std::fabs(x - y));
        p.max_r = std::max(p.max_r, std::fabs(y));
      }
    }
    for (const auto& p : parts) {
      out.max_error = std::max(out.max_error, p.max_e);
      out.max_reference = std::max(out.max_reference, p.max_r);
      out.nonfinite_pairs += p.nonfinite;
    }
    // Pass 2: the histogram, the even sample and the largest errors.
    const double width = out.max_error / bins;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (i64 k = 0; k < chunks; ++k) {
      DistChunk& p = parts[static_cast<std::size_t>(k)];
      p.histogram.assign(static_cast<std::size_t>(bins), 0);
      MinHeap heap;
      for (i64 i = k * kChunk, end = std::min(n, (k + 1) * kChunk); i < end; ++i) {
        const double x = load(cp, i), y = load(rp, i);
        if (!(std::fabs(x) <= kMaxFinite && std::fabs(y) <= kMaxFinite)) continue;
        const double e = std::fabs(x - y);
        int b = width > 0 && std::isfinite(e / width) ? static_cast<int>(e / width) : 0;
        ++p.histogram[static_cast<std::size_t>(std::clamp(b, 0, bins - 1))];
        const Point pt{std::fabs(y), e};
        if (i % stride == 0) {
          p.sample.push_back(pt);
        } else if (n_largest > 0) {  // the largest errors among the pairs not sampled
          if (heap.size() < n_largest) heap.push(pt);
          else if (e > heap.top().error) {
            heap.pop();
            heap.push(pt);
          }
        }
      }
      for (; !heap.empty(); heap.pop()) p.largest.push_back(heap.top());
    }
  });

  out.histogram.assign(static_cast<std::size_t>(bins), 0);
  MinHeap heap;
  std::vector<Point> sample;
  for (const auto& p : parts) {
    for (int b = 0; b < bins; ++b) out.histogram[static_cast<std::size_t>(b)] += p.histogram[static_cast<std::size_t>(b)];
    sample.insert(sample.end(), p.sample.begin(), p.sample.end());
    for (const Point& pt : p.largest) {
      if (heap.size() < n_largest) heap.push(pt);
      else if (pt.error > heap.top().error) {
        heap.pop();
        heap.push(pt);
      }
    }
  }
  // The stride's rounding can give a few more sample points than their share.
  sample.resize(std::min(sample.size(), max_points - heap.size()));
  for (const Point& pt : sample) out.points.emplace_back(pt.magnitude, pt.error);
  for (; !heap.empty(); heap.pop()) out.points.emplace_back(heap.top().magnitude, heap.top().error);
  return out;
}

}  // namespace tensoracle
