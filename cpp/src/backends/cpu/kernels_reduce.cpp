// The CPU backend's unary, reduce, softmax and normalization kernels (kernels_more.h).
//
// Conventions (kernels.h): float16/bfloat16 values are computed in float32 and rounded to the
// output type once, when stored; sums, products and statistics accumulate in double, and a
// double result reaches float16/bfloat16 through round-to-odd float32, so it too is rounded
// only once. int32/int64 sums and products wrap (two's complement).
//
// Reductions, softmax and normalization share one view of the input: dims of size 1 dropped,
// adjacent dims of the same kind (reduced or kept) merged. The last merged group decides the
// loop: reduced last (rows: contiguous, vectorized) or kept last (columns: the kept elements
// accumulate side by side, vectorized across them). Work splits over the kept elements; a
// reduction with few outputs also splits its reduced range into fixed chunks whose partial
// results combine in a fixed order, so every result is independent of the thread count.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/kernels_more.h"
#include "backends/cpu/kernels_util.h"
#include "core/numeric.h"
#include "tensoracle/errors.h"

namespace tensoracle::cpu {

namespace {

using i64 = std::int64_t;
using detail::fail;
using detail::BF16;
using detail::Bool;
using detail::F16;
using detail::F32;
using detail::Int;
using detail::exp_nonpositive;
using detail::mask_of;
using detail::select_bits;
using detail::with_float;
using U = UnaryOperation;
using R = ReduceOperation;

// Vectorization hints (see kernels_pointwise.cpp). Each loop they mark has no dependence
// between iterations except the named reductions; an output may alias an input only at the
// same element index.
#ifdef _OPENMP
#define TA_PRAGMA(x) _Pragma(#x)
#define TA_SIMD TA_PRAGMA(omp simd)
#define TA_SIMD_REDUCE(op, var) TA_PRAGMA(omp simd reduction(op : var))
#define TA_SIMD_REDUCE2(op, var, op2, var2) TA_PRAGMA(omp simd reduction(op : var) reduction(op2 : var2))
#else
#define TA_SIMD
#define TA_SIMD_REDUCE(op, var)
#define TA_SIMD_REDUCE2(op, var, op2, var2)
#endif

// The *_wide functions: float32 kernels compiled for AVX-512 (gnu::target), with everything they
// call inlined into them (flatten) and so compiled for it too; the translation unit keeps
// -ffp-contract=off (CMakeLists.txt), so no multiply-add is fused and each lane computes what
// the baseline code computes. Taken only where detail::avx512_kernels(its switch) holds.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TA_WIDE 1
#define TA_WIDE_FUNCTION [[gnu::target("avx512f,avx512dq,avx512bw,avx512vl"), gnu::flatten]]
#endif

// Work (elements) below which a kernel stays on one thread.
constexpr i64 kParallelWork = 32 * 1024;
// Row chunk of a contiguous reduction, column chunk of a strided one, and chunk of reduced
// positions in a strided one: the fixed units whose partial results combine in order.
constexpr i64 kRowChunk = 8192;
constexpr i64 kColChunk = 1024;
constexpr i64 kRedChunk = 256;
// The view of a normalization has one more dim than its input (the split channels).
constexpr int kMaxGroups = Dims::kMaxRank + 1;

std::string tn(DataType t) { return std::string(type_name(t)); }

// parallel_min for parallel_ranges over items of `work` elements each: several threads only
// for kParallelWork elements or more, at least kParallelWork / 8 per thread.
i64 min_items(i64 work) { return std::max<i64>(1, kParallelWork / std::max<i64>(1, work)); }

// Strided offsets of a flat index over `n` dims (row-major), advanced one step at a time.
struct Odometer {
  int n;
  const i64* size;
  const i64* stride;
  i64 idx[kMaxGroups] = {};
  i64 off = 0;
  Odometer(int n_, const i64* size_, const i64* stride_, i64 flat) : n(n_), size(size_), stride(stride_) {
    for (int k = n - 1; k >= 0; --k) {
      idx[k] = flat % size[k];
      flat /= size[k];
      off += idx[k] * stride[k];
    }
  }
  void next() noexcept {
    for (int k = n - 1; k >= 0; --k) {
      ++idx[k];
      off += stride[k];
      if (idx[k] < size[k]) return;
      off -= idx[k] * stride[k];
      idx[k] = 0;
    }
  }
};

// ---- the reduce/normalize view ------------------------------------------------------------

// dims (contiguous) split into kept and reduced groups. The last group is `inner` elements
// long and contiguous; the other kept groups (k*) and reduced groups (r*) carry their strides.
// Outputs (one per kept position) are numbered row-major over the kept groups.
struct Layout {
  bool inner_reduced = true;
  i64 inner = 1;
  int nk = 0, nr = 0;
  i64 ks[kMaxGroups] = {}, kst[kMaxGroups] = {};
  i64 rs[kMaxGroups] = {}, rst[kMaxGroups] = {};
  i64 kcount = 1;   // product of ks (blocks of `inner` outputs when inner is kept)
  i64 rcount = 1;   // product of rs (rows of `inner` when inner is reduced)
  i64 reduced = 1;  // reduced elements per output
};

// `reduced[i]` says whether dim i is reduced; every dim must be >= 1.
Layout make_layout(int rank, const i64* dims, const bool* reduced) {
  int m = 0;
  i64 size[kMaxGroups];
  bool red[kMaxGroups];
  for (int i = 0; i < rank; ++i) {
    if (dims[i] == 1) continue;
    if (m > 0 && red[m - 1] == reduced[i]) {
      size[m - 1] *= dims[i];
    } else {
      size[m] = dims[i];
      red[m] = reduced[i];
      ++m;
    }
  }
  bool any_reduced = false;
  for (int g = 0; g < m; ++g) any_reduced |= red[g];
  if (!any_reduced) {  // only size-1 dims are reduced: rows of one element
    size[m] = 1;
    red[m] = true;
    ++m;
  }
  Layout L;
  i64 stride = 1;
  i64 st[kMaxGroups];
  for (int g = m - 1; g >= 0; --g) {
    st[g] = stride;
    stride *= size[g];
  }
  L.inner_reduced = red[m - 1];
  L.inner = size[m - 1];
  for (int g = 0; g < m - 1; ++g) {
    if (red[g]) {
      L.rs[L.nr] = size[g];
      L.rst[L.nr] = st[g];
      L.rcount *= size[g];
      ++L.nr;
    } else {
      L.ks[L.nk] = size[g];
      L.kst[L.nk] = st[g];
      L.kcount *= size[g];
      ++L.nk;
    }
  }
  L.reduced = L.rcount * (L.inner_reduced ? L.inner : 1);
  return L;
}

// ---- reducers: accumulator type, contiguous row, combine, accumulate a column, finish ------

template <class FT>
struct FSum {
  using T = typename FT::T;
  using A = double;
  static A init() noexcept { return 0.0; }
  static A row(const T* p, i64 len) noexcept {
    double s = 0.0;
    TA_SIMD_REDUCE(+, s)
    for (i64 i = 0; i < len; ++i) s += static_cast<double>(FT::load(p[i]));
    return s;
  }
  static A combine(A a, A b) noexcept { return a + b; }
  static void accum(A* acc, const T* p, i64 len) noexcept {
    TA_SIMD
    for (i64 j = 0; j < len; ++j) acc[j] += static_cast<double>(FT::load(p[j]));
  }
  static T finish(A a, i64) noexcept { return FT::store_d(a); }
};

template <class FT>
struct FAvg : FSum<FT> {
  using T = typename FT::T;
  static T finish(double a, i64 count) noexcept { return FT::store_d(a / static_cast<double>(count)); }
};

template <class FT>
struct FProd {
  using T = typename FT::T;
  using A = double;
  static A init() noexcept { return 1.0; }
  static A row(const T* p, i64 len) noexcept {
    double s = 1.0;
    TA_SIMD_REDUCE(*, s)
    for (i64 i = 0; i < len; ++i) s *= static_cast<double>(FT::load(p[i]));
    return s;
  }
  static A combine(A a, A b) noexcept { return a * b; }
  static void accum(A* acc, const T* p, i64 len) noexcept {
    TA_SIMD
    for (i64 j = 0; j < len; ++j) acc[j] *= static_cast<double>(FT::load(p[j]));
  }
  static T finish(A a, i64) noexcept { return FT::store_d(a); }
};

// MAX (kMax) or MIN of floats: exact in float; any NaN makes the result NaN.
template <class FT, bool kMax>
struct FExt {
  using T = typename FT::T;
  using A = float;
  static constexpr float kInit = kMax ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  static bool better(float v, float a) noexcept { return kMax ? v > a : v < a; }
  static A init() noexcept { return kInit; }
  static A row(const T* p, i64 len) noexcept {
    float m = kInit;
    int nan = 0;
    if constexpr (kMax) {
      TA_SIMD_REDUCE2(max, m, |, nan)
      for (i64 i = 0; i < len; ++i) {
        const float v = FT::load(p[i]);
        nan |= v != v;
        m = v > m ? v : m;
      }
    } else {
      TA_SIMD_REDUCE2(min, m, |, nan)
      for (i64 i = 0; i < len; ++i) {
        const float v = FT::load(p[i]);
        nan |= v != v;
        m = v < m ? v : m;
      }
    }
    return nan ? std::numeric_limits<float>::quiet_NaN() : m;
  }
  // NaN in either sticks: b wins only when better or NaN; a NaN a is never replaced.
  static A combine(A a, A b) noexcept { return (better(b, a) || b != b) ? b : a; }
  static void accum(A* acc, const T* p, i64 len) noexcept {
    TA_SIMD
    for (i64 j = 0; j < len; ++j) {
      const float v = FT::load(p[j]);
      acc[j] = (better(v, acc[j]) || v != v) ? v : acc[j];
    }
  }
  static T finish(A a, i64) noexcept { return FT::store(a); }
};

// int32/int64 SUM and PROD: unsigned arithmetic, so they wrap.
template <class I, bool kProd>
struct IArith {
  using T = I;
  using A = std::make_unsigned_t<I>;
  static A init() noexcept { return kProd ? A{1} : A{0}; }
  static A row(const T* p, i64 len) noexcept {
    A s = init();
    if constexpr (kProd) {
      TA_SIMD_REDUCE(*, s)
      for (i64 i = 0; i < len; ++i) s *= static_cast<A>(p[i]);
    } else {
      TA_SIMD_REDUCE(+, s)
      for (i64 i = 0; i < len; ++i) s += static_cast<A>(p[i]);
    }
    return s;
  }
  static A combine(A a, A b) noexcept { return kProd ? static_cast<A>(a * b) : static_cast<A>(a + b); }
  static void accum(A* acc, const T* p, i64 len) noexcept {
    TA_SIMD
    for (i64 j = 0; j < len; ++j) acc[j] = combine(acc[j], static_cast<A>(p[j]));
  }
  static T finish(A a, i64) noexcept { return static_cast<I>(a); }
};

template <class I, bool kMax>
struct IExt {
  using T = I;
  using A = I;
  static A init() noexcept { return kMax ? std::numeric_limits<I>::lowest() : std::numeric_limits<I>::max(); }
  static A row(const T* p, i64 len) noexcept {
    I m = init();
    if constexpr (kMax) {
      TA_SIMD_REDUCE(max, m)
      for (i64 i = 0; i < len; ++i) m = p[i] > m ? p[i] : m;
    } else {
      TA_SIMD_REDUCE(min, m)
      for (i64 i = 0; i < len; ++i) m = p[i] < m ? p[i] : m;
    }
    return m;
  }
  static A combine(A a, A b) noexcept { return kMax ? (b > a ? b : a) : (b < a ? b : a); }
  static void accum(A* acc, const T* p, i64 len) noexcept {
    TA_SIMD
    for (i64 j = 0; j < len; ++j) acc[j] = combine(acc[j], p[j]);
  }
  static T finish(A a, i64) noexcept { return a; }
};

// A contiguous row reduced in fixed chunks of kRowChunk, combined in order.
template <class Rd>
typename Rd::A row_chunked(const typename Rd::T* p, i64 len) noexcept {
  typename Rd::A a = Rd::row(p, std::min(len, kRowChunk));
  for (i64 c = kRowChunk; c < len; c += kRowChunk) a = Rd::combine(a, Rd::row(p + c, std::min(kRowChunk, len - c)));
  return a;
}

// The reduced dims last: output o = combine over the reduced groups of its contiguous rows.
template <class Rd>
void reduce_rows(const Layout& L, const typename Rd::T* x, typename Rd::T* out) {
  using A = typename Rd::A;
  const i64 nout = L.kcount, inner = L.inner, count = L.reduced;
  const i64 nch = (inner + kRowChunk - 1) / kRowChunk;
  if (L.nr == 0 && nch > 1 && nout < 2 * num_threads() && num_threads() > 1) {
    // Few long rows: the chunks of every row in parallel, then each row's in order (the same
    // combination as row_chunked).
    std::vector<A> part(static_cast<std::size_t>(nout * nch));
    detail::parallel_ranges(
        nout * nch,
        [&](i64 b, i64 e) {
          for (i64 t = b; t < e; ++t) {
            const i64 o = t / nch, c = (t % nch) * kRowChunk;
            part[static_cast<std::size_t>(t)] = Rd::row(x + o * inner + c, std::min(kRowChunk, inner - c));
          }
        },
        min_items(kRowChunk));
    for (i64 o = 0; o < nout; ++o) {
      A a = part[static_cast<std::size_t>(o * nch)];
      for (i64 c = 1; c < nch; ++c) a = Rd::combine(a, part[static_cast<std::size_t>(o * nch + c)]);
      out[o] = Rd::finish(a, count);
    }
    return;
  }
  detail::parallel_ranges(
      nout,
      [&](i64 b, i64 e) {
        Odometer k(L.nk, L.ks, L.kst, b);
        for (i64 o = b; o < e; ++o, k.next()) {
          const auto* base = x + k.off;
          A a = row_chunked<Rd>(base, inner);
          if (L.nr > 0) {
            Odometer r(L.nr, L.rs, L.rst, 0);
            for (i64 t = 1; t < L.rcount; ++t) {
              r.next();
              a = Rd::combine(a, row_chunked<Rd>(base + r.off, inner));
            }
          }
          out[o] = Rd::finish(a, count);
        }
      },
      min_items(count));
}

// acc[0, len) = the reduction over reduced positions [r0, r1) of the column slice at x + base.
template <class Rd>
void accumulate_columns(const Layout& L, const typename Rd::T* x, i64 base, i64 r0, i64 r1, typename Rd::A* acc,
                        i64 len) {
  std::fill_n(acc, len, Rd::init());
  Odometer r(L.nr, L.rs, L.rst, r0);
  for (i64 t = r0; t < r1; ++t, r.next()) Rd::accum(acc, x + base + r.off, len);
}

// The kept dims last: blocks of `inner` outputs accumulate side by side, column chunk by
// column chunk, over chunks of kRedChunk reduced positions combined in order.
template <class Rd>
void reduce_columns(const Layout& L, const typename Rd::T* x, typename Rd::T* out) {
  using A = typename Rd::A;
  const i64 inner = L.inner, count = L.reduced;
  const i64 ncc = (inner + kColChunk - 1) / kColChunk;
  const i64 items = L.kcount * ncc;  // (block, column chunk)
  const i64 nrc = (L.rcount + kRedChunk - 1) / kRedChunk;
  auto item_geometry = [&](i64 item, i64& base, i64& c0, i64& len) {
    const i64 blk = item / ncc;
    c0 = (item % ncc) * kColChunk;
    len = std::min(kColChunk, inner - c0);
    base = Odometer(L.nk, L.ks, L.kst, blk).off + c0;
  };
  auto store = [&](i64 item, const A* acc) {
    const i64 blk = item / ncc, c0 = (item % ncc) * kColChunk, len = std::min(kColChunk, inner - c0);
    auto* o = out + blk * inner + c0;
    for (i64 j = 0; j < len; ++j) o[j] = Rd::finish(acc[j], count);
  };
  const i64 cw = std::min(inner, kColChunk);  // partial results per (item, reduced chunk)
  if (nrc > 1 && items < 2 * num_threads() && num_threads() > 1 && items * L.rcount * cw >= kParallelWork) {
    // Few columns over many reduced positions: every (item, reduced chunk) in parallel, then
    // each item's chunks combined in order (the same combination as below).
    std::vector<A> part(static_cast<std::size_t>(items * nrc * cw));
    detail::parallel_ranges(
        items * nrc,
        [&](i64 b, i64 e) {
          for (i64 t = b; t < e; ++t) {
            i64 base, c0, len;
            item_geometry(t / nrc, base, c0, len);
            const i64 q = t % nrc;
            accumulate_columns<Rd>(L, x, base, q * kRedChunk, std::min(L.rcount, (q + 1) * kRedChunk),
                                   part.data() + t * cw, len);
          }
        },
        min_items(kRedChunk * cw));
    detail::parallel_ranges(
        items,
        [&](i64 b, i64 e) {
          for (i64 it = b; it < e; ++it) {
            A* tot = part.data() + it * nrc * cw;
            for (i64 q = 1; q < nrc; ++q) {
              const A* p = tot + q * cw;
              for (i64 j = 0; j < cw; ++j) tot[j] = Rd::combine(tot[j], p[j]);
            }
            store(it, tot);
          }
        },
        min_items(nrc * cw));
    return;
  }
  detail::parallel_ranges(
      items,
      [&](i64 b, i64 e) {
        A tot[kColChunk], part[kColChunk];
        for (i64 it = b; it < e; ++it) {
          i64 base, c0, len;
          item_geometry(it, base, c0, len);
          for (i64 q = 0; q < nrc; ++q) {
            A* dst = q == 0 ? tot : part;
            accumulate_columns<Rd>(L, x, base, q * kRedChunk, std::min(L.rcount, (q + 1) * kRedChunk), dst, len);
            if (q > 0)
              for (i64 j = 0; j < len; ++j) tot[j] = Rd::combine(tot[j], part[j]);
          }
          store(it, tot);
        }
      },
      min_items(L.rcount * cw));
}

template <class Rd>
void run_reduce(const Layout& L, const void* xv, void* ov, i64 x_volume, i64 out_volume) {
  using T = typename Rd::T;
  const auto* x = static_cast<const T*>(xv);
  auto* out = static_cast<T*>(ov);
  if (out_volume == 0) return;
  if (x_volume == 0) {  // reducing over an empty dim: the identity (AVG: 0 / 0)
    std::fill_n(out, out_volume, Rd::finish(Rd::init(), 0));
    return;
  }
  if (L.inner_reduced) reduce_rows<Rd>(L, x, out);
  else reduce_columns<Rd>(L, x, out);
}

const char* reduce_name(R op) {
  switch (op) {
    case R::kSUM: return "SUM";
    case R::kPROD: return "PROD";
    case R::kMAX: return "MAX";
    case R::kMIN: return "MIN";
    case R::kAVG: return "AVG";
  }
  return "an unknown operation";
}

template <class FT>
void reduce_float(R op, const Layout& L, const TensorRef& x, const TensorRef& out, i64 nx, i64 no) {
  switch (op) {
    case R::kSUM: run_reduce<FSum<FT>>(L, x.data, out.data, nx, no); break;
    case R::kPROD: run_reduce<FProd<FT>>(L, x.data, out.data, nx, no); break;
    case R::kMAX: run_reduce<FExt<FT, true>>(L, x.data, out.data, nx, no); break;
    case R::kMIN: run_reduce<FExt<FT, false>>(L, x.data, out.data, nx, no); break;
    case R::kAVG: run_reduce<FAvg<FT>>(L, x.data, out.data, nx, no); break;
    default: fail("reduce: unknown operation " + std::to_string(static_cast<int>(op)));
  }
}

template <class I>
void reduce_int(R op, const Layout& L, const TensorRef& x, const TensorRef& out, i64 nx, i64 no) {
  switch (op) {
    case R::kSUM: run_reduce<IArith<I, false>>(L, x.data, out.data, nx, no); break;
    case R::kPROD: run_reduce<IArith<I, true>>(L, x.data, out.data, nx, no); break;
    case R::kMAX: run_reduce<IExt<I, true>>(L, x.data, out.data, nx, no); break;
    case R::kMIN: run_reduce<IExt<I, false>>(L, x.data, out.data, nx, no); break;
    default: fail(std::string("reduce: ") + reduce_name(op) + " does not take " + tn(x.type));
  }
}

// ---- unary ------------------------------------------------------------------------------

constexpr i64 kUnaryParallelMin = 16 * 1024;

template <class In, class Out, class F>
void map_each(const TensorRef& x, const TensorRef& out, i64 n, F f) {
  const auto* in = static_cast<const typename In::T*>(x.data);
  auto* o = static_cast<typename Out::T*>(out.data);
  detail::parallel_ranges(
      n,
      [&](i64 b, i64 e) {
        TA_SIMD
        for (i64 i = b; i < e; ++i) o[i] = Out::store(f(In::load(in[i])));
      },
      kUnaryParallelMin);
}

// Round half to even, whatever the floating-point rounding mode.
inline float round_half_even(float v) noexcept {
  const float r = std::round(v);  // half away from zero
  if (std::fabs(v - std::trunc(v)) == 0.5f) return 2.0f * std::round(v * 0.5f);
  return r;
}

const char* unary_name(U op) {
  static const char* const names[] = {"EXP",   "LOG",   "SQRT",  "RECIP", "ABS",   "NEG", "SIN",  "COS",   "TAN",
                                      "SINH",  "COSH",  "ASIN",  "ACOS",  "ATAN",  "ASINH", "ACOSH", "ATANH",
                                      "CEIL",  "FLOOR", "ERF",   "NOT",   "SIGN",  "ROUND", "ISINF", "ISNAN"};
  const int i = static_cast<int>(op);
  return i >= 0 && i < 25 ? names[i] : "an unknown operation";
}

template <class FT>
void unary_float(U op, const TensorRef& x, const TensorRef& out, i64 n) {
  auto run = [&](auto f) { map_each<FT, FT>(x, out, n, f); };
  switch (op) {
    case U::kEXP: run([](float v) { return std::exp(v); }); break;
    case U::kLOG: run([](float v) { return std::log(v); }); break;
    case U::kSQRT: run([](float v) { return std::sqrt(v); }); break;
    case U::kRECIP: run([](float v) { return 1.0f / v; }); break;
    case U::kABS: run([](float v) { return std::fabs(v); }); break;
    case U::kNEG: run([](float v) { return -v; }); break;
    case U::kSIN: run([](float v) { return std::sin(v); }); break;
    case U::kCOS: run([](float v) { return std::cos(v); }); break;
    case U::kTAN: run([](float v) { return std::tan(v); }); break;
    case U::kSINH: run([](float v) { return std::sinh(v); }); break;
    case U::kCOSH: run([](float v) { return std::cosh(v); }); break;
    case U::kASIN: run([](float v) { return std::asin(v); }); break;
    case U::kACOS: run([](float v) { return std::acos(v); }); break;
    case U::kATAN: run([](float v) { return std::atan(v); }); break;
    case U::kASINH: run([](float v) { return std::asinh(v); }); break;
    case U::kACOSH: run([](float v) { return std::acosh(v); }); break;
    case U::kATANH: run([](float v) { return std::atanh(v); }); break;
    case U::kCEIL: run([](float v) { return std::ceil(v); }); break;
    case U::kFLOOR: run([](float v) { return std::floor(v); }); break;
    case U::kERF: run([](float v) { return detail::erf_float(v); }); break;
    case U::kROUND: run([](float v) { return round_half_even(v); }); break;
    // 1, -1, or the input itself for zeros and NaN.
    case U::kSIGN: run([](float v) { return v > 0.0f ? 1.0f : v < 0.0f ? -1.0f : v; }); break;
    case U::kISINF: map_each<FT, Bool>(x, out, n, [](float v) { return std::isinf(v); }); break;
    case U::kISNAN: map_each<FT, Bool>(x, out, n, [](float v) { return v != v; }); break;
    default: fail(std::string("unary: ") + unary_name(op) + " does not take " + tn(x.type));
  }
}

template <class I>
void unary_int(U op, const TensorRef& x, const TensorRef& out, i64 n) {
  using UI = std::make_unsigned_t<I>;
  using T = Int<I>;
  switch (op) {  // two's complement: ABS and NEG of the lowest value wrap to itself
    case U::kABS: map_each<T, T>(x, out, n, [](I v) { return v < 0 ? static_cast<I>(UI{0} - static_cast<UI>(v)) : v; }); break;
    case U::kNEG: map_each<T, T>(x, out, n, [](I v) { return static_cast<I>(UI{0} - static_cast<UI>(v)); }); break;
    case U::kSIGN: map_each<T, T>(x, out, n, [](I v) { return static_cast<I>((v > 0) - (v < 0)); }); break;
    default: fail(std::string("unary: ") + unary_name(op) + " does not take " + tn(x.type));
  }
}

// ---- softmax ----------------------------------------------------------------------------

// NaN-propagating maximum of a contiguous row (NaN if any element is NaN).
template <class FT>
float row_max(const typename FT::T* p, i64 n) noexcept {
  float m = -std::numeric_limits<float>::infinity();
  int nan = 0;
  TA_SIMD_REDUCE2(max, m, |, nan)
  for (i64 i = 0; i < n; ++i) {
    const float v = FT::load(p[i]);
    nan |= v != v;
    m = v > m ? v : m;
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : m;
}

// Rows of up to kSoftmaxBufferMax elements go through a buffer of their exponentials.
constexpr i64 kSoftmaxBufferMax = i64{1} << 16;

// The sum of term(0) .. term(n - 1) (doubles) in 16 lanes, lane j over the terms j, j + 16, ...
// in order, then a fixed tree: the same roundings whatever vector width the compiler gives the
// loop, so a row's sum compiled for AVX-512 (the *_wide functions) is the baseline's bit for bit.
template <class Term>
inline double sum16(i64 n, Term term) noexcept {
  double part[16] = {};
  i64 i = 0;
  for (; i + 16 <= n; i += 16) {
    TA_SIMD
    for (int j = 0; j < 16; ++j) part[j] += term(i + j);
  }
  for (i64 j = 0; i + j < n; ++j) part[j] += term(i + j);
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) part[j] += part[j + w];
  return part[0];
}

// One row of n <= kSoftmaxBufferMax contiguous elements: its maximum, e^(x - max) into `ex`,
// their sum in double (sum16), then each quotient.
template <class FT>
inline void softmax_row(const typename FT::T* p, typename FT::T* o, i64 n, float* ex) {
  const float m = row_max<FT>(p, n);
  TA_SIMD
  for (i64 i = 0; i < n; ++i) ex[i] = exp_nonpositive(FT::load(p[i]) - m);
  const double inv = 1.0 / sum16(n, [ex](i64 i) { return static_cast<double>(ex[i]); });
  TA_SIMD
  for (i64 k = 0; k < n; ++k) o[k] = FT::store_d(static_cast<double>(ex[k]) * inv);
}

// float32 rows [b, e) through softmax_row compiled for AVX-512 (16 float lanes instead of SSE2's
// 4); switched off by TENSORACLE_SOFTMAX_NO_AVX512 (as compare.cpp's TENSORACLE_COMPARE_NO_AVX2).
#ifdef TA_WIDE
TA_WIDE_FUNCTION void softmax_rows_wide(const float* x, float* out, i64 b, i64 e, i64 n, float* ex) {
  for (i64 r = b; r < e; ++r) softmax_row<F32>(x + r * n, out + r * n, n, ex);
}
#endif

// Rows of n contiguous elements (the axis is the innermost non-trivial dim).
template <class FT>
void softmax_rows(const typename FT::T* x, typename FT::T* out, i64 rows, i64 n) {
  [[maybe_unused]] const bool wide = std::is_same_v<FT, F32> && n <= kSoftmaxBufferMax &&
                                    detail::avx512_kernels("TENSORACLE_SOFTMAX_NO_AVX512");
  detail::parallel_ranges(
      rows,
      [&](i64 b, i64 e) {
        std::vector<float> buf(static_cast<std::size_t>(n <= kSoftmaxBufferMax ? n : 0));
#ifdef TA_WIDE
        if constexpr (std::is_same_v<FT, F32>)
          if (wide) {
            softmax_rows_wide(x, out, b, e, n, buf.data());
            return;
          }
#endif
        for (i64 r = b; r < e; ++r) {
          const auto* p = x + r * n;
          auto* o = out + r * n;
          if (n <= kSoftmaxBufferMax) {
            softmax_row<FT>(p, o, n, buf.data());
            continue;
          }
          const float m = row_max<FT>(p, n);
          double s = 0.0;
          TA_SIMD_REDUCE(+, s)
          for (i64 i = 0; i < n; ++i) s += static_cast<double>(exp_nonpositive(FT::load(p[i]) - m));
          const double inv = 1.0 / s;
          TA_SIMD
          for (i64 i = 0; i < n; ++i) o[i] = FT::store_d(static_cast<double>(exp_nonpositive(FT::load(p[i]) - m)) * inv);
        }
      },
      min_items(3 * n));
}

// The axis has stride `inner` > 1: columns of a chunk are processed side by side.
template <class FT>
void softmax_columns(const typename FT::T* x, typename FT::T* out, i64 outer, i64 n, i64 inner) {
  const i64 ncc = (inner + kColChunk - 1) / kColChunk;
  detail::parallel_ranges(
      outer * ncc,
      [&](i64 b, i64 e) {
        float m[kColChunk];
        double s[kColChunk];
        for (i64 it = b; it < e; ++it) {
          const i64 c0 = (it % ncc) * kColChunk, len = std::min(kColChunk, inner - c0);
          const auto* p = x + (it / ncc) * n * inner + c0;
          auto* o = out + (it / ncc) * n * inner + c0;
          std::fill_n(m, len, -std::numeric_limits<float>::infinity());
          std::fill_n(s, len, 0.0);
          for (i64 i = 0; i < n; ++i) {
            const auto* q = p + i * inner;
            TA_SIMD
            for (i64 j = 0; j < len; ++j) {
              const float v = FT::load(q[j]);
              m[j] = (v > m[j] || v != v) ? v : m[j];
            }
          }
          for (i64 i = 0; i < n; ++i) {
            const auto* q = p + i * inner;
            TA_SIMD
            for (i64 j = 0; j < len; ++j) s[j] += static_cast<double>(exp_nonpositive(FT::load(q[j]) - m[j]));
          }
          for (i64 j = 0; j < len; ++j) s[j] = 1.0 / s[j];
          for (i64 i = 0; i < n; ++i) {
            const auto* q = p + i * inner;
            auto* w = o + i * inner;
            TA_SIMD
            for (i64 j = 0; j < len; ++j)
              w[j] = FT::store_d(static_cast<double>(exp_nonpositive(FT::load(q[j]) - m[j])) * s[j]);
          }
        }
      },
      min_items(3 * n * std::min(inner, kColChunk)));
}

// ---- normalization ----------------------------------------------------------------------

// A statistics set's mean and 1 / sqrt(var + eps), stored as float.
inline void norm_finish(double sum, double sq, double inv_count, double eps, float* mean, float* rstd) noexcept {
  *mean = static_cast<float>(sum * inv_count);
  *rstd = static_cast<float>(1.0 / std::sqrt(sq * inv_count + eps));
}

// Statistics sets [b, e) of a layout whose contiguous rows are normalized over: per set, the sum
// of its rows (each row's by sum16, the rows' in order), the mean, then the squared deviations
// the same way. sum16 fixes the order of every double sum, so norm_row_statistics_wide computes
// these bits.
template <class FT>
inline void norm_row_statistics(const Layout& L, const typename FT::T* x, double inv_count, double eps, float* mean,
                                float* rstd, i64 b, i64 e) {
  const i64 inner = L.inner;
  Odometer k(L.nk, L.ks, L.kst, b);
  for (i64 o = b; o < e; ++o, k.next()) {
    const auto* base = x + k.off;
    double sum = 0.0;
    {
      Odometer r(L.nr, L.rs, L.rst, 0);
      for (i64 t = 0; t < L.rcount; ++t, r.next()) {
        const auto* p = base + r.off;
        sum += sum16(inner, [p](i64 i) { return static_cast<double>(FT::load(p[i])); });
      }
    }
    const double mu = sum * inv_count;
    double sq = 0.0;
    Odometer r(L.nr, L.rs, L.rst, 0);
    for (i64 t = 0; t < L.rcount; ++t, r.next()) {
      const auto* p = base + r.off;
      sq += sum16(inner, [p, mu](i64 i) {
        const double d = static_cast<double>(FT::load(p[i])) - mu;
        return d * d;
      });
    }
    norm_finish(sum, sq, inv_count, eps, mean + o, rstd + o);
  }
}

// float32 normalizations compiled for AVX-512 (8 double lanes instead of SSE2's 2): the same
// bits as the baseline (fixed sums); switched off by TENSORACLE_NORM_NO_AVX512.
constexpr const char* kNormSwitch = "TENSORACLE_NORM_NO_AVX512";
#ifdef TA_WIDE
TA_WIDE_FUNCTION void norm_row_statistics_wide(const Layout& L, const float* x, double inv_count, double eps,
                                               float* mean, float* rstd, i64 b, i64 e) {
  norm_row_statistics<F32>(L, x, inv_count, eps, mean, rstd, b, e);
}
#endif

// Per statistics set (numbered like the outputs of a reduce over the same layout): mean and
// 1 / sqrt(var + eps), both computed in double (two passes) and stored as float.
template <class FT>
void norm_statistics(const Layout& L, const typename FT::T* x, double eps, float* mean, float* rstd) {
  const i64 count = L.reduced;
  const double inv_count = 1.0 / static_cast<double>(count);
  if (L.inner_reduced) {
    [[maybe_unused]] const bool wide = std::is_same_v<FT, F32> && detail::avx512_kernels(kNormSwitch);
    detail::parallel_ranges(
        L.kcount,
        [&](i64 b, i64 e) {
#ifdef TA_WIDE
          if constexpr (std::is_same_v<FT, F32>)
            if (wide) return norm_row_statistics_wide(L, x, inv_count, eps, mean, rstd, b, e);
#endif
          norm_row_statistics<FT>(L, x, inv_count, eps, mean, rstd, b, e);
        },
        min_items(2 * count));
    return;
  }
  const i64 inner = L.inner;
  const i64 ncc = (inner + kColChunk - 1) / kColChunk;
  detail::parallel_ranges(
      L.kcount * ncc,
      [&](i64 b, i64 e) {
        double sum[kColChunk], mu[kColChunk], sq[kColChunk];
        for (i64 it = b; it < e; ++it) {
          const i64 blk = it / ncc, c0 = (it % ncc) * kColChunk, len = std::min(kColChunk, inner - c0);
          const auto* base = x + Odometer(L.nk, L.ks, L.kst, blk).off + c0;
          std::fill_n(sum, len, 0.0);
          std::fill_n(sq, len, 0.0);
          {
            Odometer r(L.nr, L.rs, L.rst, 0);
            for (i64 t = 0; t < L.rcount; ++t, r.next()) FSum<FT>::accum(sum, base + r.off, len);
          }
          for (i64 j = 0; j < len; ++j) mu[j] = sum[j] * inv_count;
          Odometer r(L.nr, L.rs, L.rst, 0);
          for (i64 t = 0; t < L.rcount; ++t, r.next()) {
            const auto* p = base + r.off;
            TA_SIMD
            for (i64 j = 0; j < len; ++j) {
              const double d = static_cast<double>(FT::load(p[j])) - mu[j];
              sq[j] += d * d;
            }
          }
          for (i64 j = 0; j < len; ++j) {
            const i64 o = blk * inner + c0 + j;
            norm_finish(sum[j], sq[j], inv_count, eps, mean + o, rstd + o);
          }
        }
      },
      min_items(2 * L.rcount * std::min(inner, kColChunk)));
}

// The output pass: dims after merging, with the strides (in elements) of the statistics,
// the scale and the bias over them (the input and output are contiguous).
struct NormPlan {
  int rank = 0;
  i64 dims[kMaxGroups] = {};
  i64 sm[kMaxGroups] = {}, ss[kMaxGroups] = {}, sb[kMaxGroups] = {};
};

// o[0, len) from x[0, len): (x - mean) * rstd * scale + bias in float; each of mean/rstd,
// scale and bias advances by 0 or 1 per element (template flags) or by a runtime stride.
template <class FT, int MS, int SS, int BS>
void norm_span(const typename FT::T* x, typename FT::T* o, i64 len, const float* mean, const float* rstd,
               const float* sc, const float* bi) noexcept {
  TA_SIMD
  for (i64 i = 0; i < len; ++i)
    o[i] = FT::store((FT::load(x[i]) - mean[MS * i]) * rstd[MS * i] * sc[SS * i] + bi[BS * i]);
}

template <class FT>
void norm_span_strided(const typename FT::T* x, typename FT::T* o, i64 len, const float* mean, const float* rstd,
                       i64 ms, const float* sc, i64 ss, const float* bi, i64 bs) noexcept {
  for (i64 i = 0; i < len; ++i)
    o[i] = FT::store((FT::load(x[i]) - mean[ms * i]) * rstd[ms * i] * sc[ss * i] + bi[bs * i]);
}

// Output elements [begin, end) (flat indices into the contiguous input and output).
template <class FT>
inline void norm_output_range(const NormPlan& p, const typename FT::T* x, typename FT::T* out, const float* mean,
                              const float* rstd, const float* sc, const float* bi, i64 begin, i64 end) {
  const int m = p.rank;
  const i64 inner = p.dims[m - 1], ms = p.sm[m - 1], ss = p.ss[m - 1], bs = p.sb[m - 1];
  const bool unit = (ms == 0 || ms == 1) && (ss == 0 || ss == 1) && (bs == 0 || bs == 1);
  const int which = static_cast<int>(ms * 4 + ss * 2 + bs);
  auto span = [&](i64 pos, i64 len, i64 om, i64 os, i64 ob) {
    const auto* xp = x + pos;
    auto* op = out + pos;
    const float *mp = mean + om, *rp = rstd + om, *sp = sc + os, *bp = bi + ob;
    if (!unit) return norm_span_strided<FT>(xp, op, len, mp, rp, ms, sp, ss, bp, bs);
    switch (which) {
      case 0: return norm_span<FT, 0, 0, 0>(xp, op, len, mp, rp, sp, bp);
      case 1: return norm_span<FT, 0, 0, 1>(xp, op, len, mp, rp, sp, bp);
      case 2: return norm_span<FT, 0, 1, 0>(xp, op, len, mp, rp, sp, bp);
      case 3: return norm_span<FT, 0, 1, 1>(xp, op, len, mp, rp, sp, bp);
      case 4: return norm_span<FT, 1, 0, 0>(xp, op, len, mp, rp, sp, bp);
      case 5: return norm_span<FT, 1, 0, 1>(xp, op, len, mp, rp, sp, bp);
      case 6: return norm_span<FT, 1, 1, 0>(xp, op, len, mp, rp, sp, bp);
      default: return norm_span<FT, 1, 1, 1>(xp, op, len, mp, rp, sp, bp);
    }
  };
  i64 idx[kMaxGroups];
  i64 om = 0, os = 0, ob = 0, rem = begin;
  for (int k = m - 1; k >= 0; --k) {
    idx[k] = rem % p.dims[k];
    rem /= p.dims[k];
    om += idx[k] * p.sm[k];
    os += idx[k] * p.ss[k];
    ob += idx[k] * p.sb[k];
  }
  i64 pos = begin;
  while (true) {
    const i64 len = std::min(inner - idx[m - 1], end - pos);
    span(pos, len, om, os, ob);
    pos += len;
    if (pos >= end) break;
    om -= idx[m - 1] * ms;
    os -= idx[m - 1] * ss;
    ob -= idx[m - 1] * bs;
    idx[m - 1] = 0;
    for (int k = m - 2; k >= 0; --k) {
      ++idx[k];
      om += p.sm[k];
      os += p.ss[k];
      ob += p.sb[k];
      if (idx[k] < p.dims[k]) break;
      om -= idx[k] * p.sm[k];
      os -= idx[k] * p.ss[k];
      ob -= idx[k] * p.sb[k];
      idx[k] = 0;
    }
  }
}

#ifdef TA_WIDE
TA_WIDE_FUNCTION void norm_output_range_wide(
    const NormPlan& p, const float* x, float* out, const float* mean, const float* rstd, const float* sc,
    const float* bi, i64 begin, i64 end) {
  norm_output_range<F32>(p, x, out, mean, rstd, sc, bi, begin, end);
}
#endif

template <class FT>
void norm_output(const NormPlan& p, const typename FT::T* x, typename FT::T* out, i64 n, const float* mean,
                 const float* rstd, const float* sc, const float* bi) {
  [[maybe_unused]] const bool wide = std::is_same_v<FT, F32> && detail::avx512_kernels(kNormSwitch);
  detail::parallel_ranges(
      n,
      [&](i64 begin, i64 end) {
#ifdef TA_WIDE
        if constexpr (std::is_same_v<FT, F32>)
          if (wide) return norm_output_range_wide(p, x, out, mean, rstd, sc, bi, begin, end);
#endif
        norm_output_range<FT>(p, x, out, mean, rstd, sc, bi, begin, end);
      },
      kParallelWork);
}

// scale or bias as float values (any float type), with its strides over x's dims (0 where it
// broadcasts).
std::vector<float> load_broadcast(const TensorRef& t, const Dims& x, const char* name, i64* strides) {
  const i64 n = detail::checked_volume(t, "normalization", name);
  if (t.dims.rank() != x.rank())
    fail(std::string("normalization: ") + name + " " + t.dims.str() + " must have the input's rank (input " +
         x.str() + ")");
  i64 st = 1;
  for (int d = x.rank() - 1; d >= 0; --d) {
    if (t.dims[d] != 1 && t.dims[d] != x[d])
      fail(std::string("normalization: ") + name + " " + t.dims.str() + " does not broadcast into the input " +
           x.str());
    strides[d] = t.dims[d] == 1 ? 0 : st;
    st *= t.dims[d];
  }
  std::vector<float> v(static_cast<std::size_t>(n));
  with_float(t.type, std::string("normalization: ") + name, [&](auto tag) {
    using FT = decltype(tag);
    const auto* p = static_cast<const typename FT::T*>(t.data);
    for (i64 i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = FT::load(p[i]);
  });
  return v;
}

}  // namespace

// ---- entry points -----------------------------------------------------------------------

void unary(UnaryOperation op, const TensorRef& x, const TensorRef& out) {
  const i64 n = detail::checked_volume(x, "unary", "the input");
  const i64 no = detail::checked_volume(out, "unary", "the output");
  const int code = static_cast<int>(op);
  if (code < 0 || code > static_cast<int>(U::kISNAN)) fail("unary: unknown operation " + std::to_string(code));
  const bool to_bool = op == U::kISINF || op == U::kISNAN;
  const DataType want = to_bool ? DataType::kBOOL : x.type;
  if (no != n || out.type != want)
    fail(std::string("unary: ") + unary_name(op) + " of " + tn(x.type) + x.dims.str() + " gives " + tn(want) +
         x.dims.str() + ", not " + tn(out.type) + out.dims.str());
  switch (x.type) {
    case DataType::kFLOAT: unary_float<F32>(op, x, out, n); break;
    case DataType::kHALF: unary_float<F16>(op, x, out, n); break;
    case DataType::kBF16: unary_float<BF16>(op, x, out, n); break;
    case DataType::kINT32: unary_int<std::int32_t>(op, x, out, n); break;
    case DataType::kINT64: unary_int<std::int64_t>(op, x, out, n); break;
    case DataType::kBOOL:
      if (op != U::kNOT) fail(std::string("unary: ") + unary_name(op) + " does not take bool");
      map_each<Bool, Bool>(x, out, n, [](bool v) { return !v; });
      break;
    default: fail(std::string("unary: ") + unary_name(op) + " does not take " + tn(x.type));
  }
}

void reduce(const ReduceParams& p, const TensorRef& x, const TensorRef& out) {
  const i64 nx = detail::checked_volume(x, "reduce", "the input");
  const i64 no = detail::checked_volume(out, "reduce", "the output");
  const int rank = x.dims.rank();
  if (rank < 32 && (p.axes >> rank) != 0)
    fail("reduce: axes mask " + std::to_string(p.axes) + " names a dimension beyond the input's rank " +
         std::to_string(rank));
  if (out.type != x.type) fail("reduce: the output type " + tn(out.type) + " differs from the input's " + tn(x.type));
  i64 want[Dims::kMaxRank];
  i64 dims[Dims::kMaxRank];
  bool red[Dims::kMaxRank];
  int wr = 0;
  for (int i = 0; i < rank; ++i) {
    dims[i] = x.dims[i];
    red[i] = (p.axes >> i) & 1u;
    if (!red[i]) want[wr++] = x.dims[i];
    else if (p.keep_dims) want[wr++] = 1;
  }
  const Dims expected(std::span<const i64>(want, static_cast<std::size_t>(wr)));
  if (!(expected == out.dims))
    fail("reduce: reducing " + x.dims.str() + " over axes mask " + std::to_string(p.axes) +
         (p.keep_dims ? " keeping dims" : "") + " gives " + expected.str() + ", not " + out.dims.str());
  const Layout L = nx == 0 ? Layout{} : make_layout(rank, dims, red);
  switch (x.type) {
    case DataType::kFLOAT: reduce_float<F32>(p.op, L, x, out, nx, no); break;
    case DataType::kHALF: reduce_float<F16>(p.op, L, x, out, nx, no); break;
    case DataType::kBF16: reduce_float<BF16>(p.op, L, x, out, nx, no); break;
    case DataType::kINT32: reduce_int<std::int32_t>(p.op, L, x, out, nx, no); break;
    case DataType::kINT64: reduce_int<std::int64_t>(p.op, L, x, out, nx, no); break;
    default: fail(std::string("reduce: ") + reduce_name(p.op) + " does not take " + tn(x.type));
  }
}

void softmax(int axis, const TensorRef& x, const TensorRef& out) {
  const i64 n = detail::checked_volume(x, "softmax", "the input");
  detail::checked_volume(out, "softmax", "the output");
  const int rank = x.dims.rank();
  if (axis < 0 || axis >= rank)
    fail("softmax: axis " + std::to_string(axis) + " is out of range for the input " + x.dims.str());
  if (out.type != x.type || !(out.dims == x.dims))
    fail("softmax: the output " + tn(out.type) + out.dims.str() + " differs from the input " + tn(x.type) +
         x.dims.str());
  with_float(x.type, "softmax", [&](auto tag) {
    using FT = decltype(tag);
    if (n == 0) return;
    i64 outer = 1, inner = 1;
    for (int d = 0; d < axis; ++d) outer *= x.dims[d];
    for (int d = axis + 1; d < rank; ++d) inner *= x.dims[d];
    const auto* xp = static_cast<const typename FT::T*>(x.data);
    auto* op = static_cast<typename FT::T*>(out.data);
    if (inner == 1) softmax_rows<FT>(xp, op, outer, x.dims[axis]);
    else softmax_columns<FT>(xp, op, outer, x.dims[axis], inner);
  });
}

void normalization(const NormalizationParams& p, const TensorRef& x, const TensorRef& scale, const TensorRef& bias,
                   const TensorRef& out) {
  const i64 n = detail::checked_volume(x, "normalization", "the input");
  detail::checked_volume(out, "normalization", "the output");
  const Dims& xd = x.dims;
  const int rank = xd.rank();
  if (out.type != x.type || !(out.dims == xd))
    fail("normalization: the output " + tn(out.type) + out.dims.str() + " differs from the input " + tn(x.type) +
         xd.str());
  if (rank < 32 && (p.axes >> rank) != 0)
    fail("normalization: axes mask " + std::to_string(p.axes) + " names a dimension beyond the input's rank " +
         std::to_string(rank));
  if (!(p.epsilon >= 0.0f)) fail("normalization: epsilon " + std::to_string(p.epsilon) + " must be >= 0");
  const i64 groups = p.num_groups;
  if (groups < 1) fail("normalization: num_groups " + std::to_string(groups) + " must be >= 1");
  if (groups > 1) {
    if (rank < 2) fail("normalization: num_groups > 1 needs a channel dimension (rank >= 2)");
    if (xd[1] % groups != 0)
      fail("normalization: channels " + std::to_string(xd[1]) + " are not divisible by num_groups " +
           std::to_string(groups));
    if (p.axes & 2u) fail("normalization: with num_groups > 1 the channel dimension (1) is grouped, not in axes");
  }
  i64 sst[Dims::kMaxRank], bst[Dims::kMaxRank];
  const std::vector<float> sc = load_broadcast(scale, xd, "the scale", sst);
  const std::vector<float> bi = load_broadcast(bias, xd, "the bias", bst);
  with_float(x.type, "normalization", [&](auto tag) {
    using FT = decltype(tag);
    if (n == 0) return;
    // The view: x's dims, with the channels split into (groups, channels per group) when
    // grouped; the channels per group are normalized over like the masked axes.
    int vr = 0;
    i64 vd[kMaxGroups], vs[kMaxGroups], vb[kMaxGroups];
    bool vred[kMaxGroups];
    for (int d = 0; d < rank; ++d) {
      if (groups > 1 && d == 1) {
        const i64 per = xd[1] / groups;
        vd[vr] = groups, vred[vr] = false, vs[vr] = sst[1] * per, vb[vr] = bst[1] * per, ++vr;
        vd[vr] = per, vred[vr] = true, vs[vr] = sst[1], vb[vr] = bst[1], ++vr;
      } else {
        vd[vr] = xd[d], vred[vr] = (p.axes >> d) & 1u, vs[vr] = sst[d], vb[vr] = bst[d], ++vr;
      }
    }
    const Layout L = make_layout(vr, vd, vred);
    const i64 nstat = L.kcount * (L.inner_reduced ? 1 : L.inner);
    std::vector<float> mean(static_cast<std::size_t>(nstat)), rstd(static_cast<std::size_t>(nstat));
    const auto* xp = static_cast<const typename FT::T*>(x.data);
    norm_statistics<FT>(L, xp, static_cast<double>(p.epsilon), mean.data(), rstd.data());
    // Statistics strides over the view: row-major over the kept dims, 0 on the normalized ones.
    i64 vm[kMaxGroups];
    i64 st = 1;
    for (int d = vr - 1; d >= 0; --d) {
      vm[d] = vred[d] ? 0 : st;
      if (!vred[d]) st *= vd[d];
    }
    NormPlan plan;
    for (int d = 0; d < vr; ++d) {
      if (vd[d] == 1) continue;
      const int last = plan.rank - 1;
      const i64 s = vd[d];
      if (last >= 0 && plan.sm[last] == vm[d] * s && plan.ss[last] == vs[d] * s && plan.sb[last] == vb[d] * s) {
        plan.dims[last] *= s;
        plan.sm[last] = vm[d];
        plan.ss[last] = vs[d];
        plan.sb[last] = vb[d];
      } else {
        plan.dims[plan.rank] = s;
        plan.sm[plan.rank] = vm[d];
        plan.ss[plan.rank] = vs[d];
        plan.sb[plan.rank] = vb[d];
        ++plan.rank;
      }
    }
    if (plan.rank == 0) {
      plan.rank = 1;
      plan.dims[0] = 1;
    }
    norm_output<FT>(plan, xp, static_cast<typename FT::T*>(out.data), n, mean.data(), rstd.data(), sc.data(),
                    bi.data());
  });
}

}  // namespace tensoracle::cpu
