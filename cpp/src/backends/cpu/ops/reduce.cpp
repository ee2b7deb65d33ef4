// The CPU backend's reduce (kernels.h) over the view of reduce_util.h: rows (reduced last) or
// columns (kept last), accumulated in double for the float types (int32/int64 wrap) in fixed
// chunks whose partial results combine in a fixed order.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/op_kernel.h"
#include "backends/cpu/kernels_util.h"
#include "backends/cpu/reduce_util.h"

namespace tensoracle::cpu {

namespace {

using namespace reduction;  // reduce_util.h
using R = ReduceOperation;

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

using backends::common::reduce_name;

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

}  // namespace

void reduce(const ReduceParams& p, const TensorRef& x, const TensorRef& out) {
  const backends::common::ReduceShape s = backends::common::check_reduce(detail::kFail, p, x, out);
  const i64 nx = s.nx, no = s.no;
  const Layout& L = s.layout;
  switch (x.type) {
    case DataType::kFLOAT: reduce_float<F32>(p.op, L, x, out, nx, no); break;
    case DataType::kHALF: reduce_float<F16>(p.op, L, x, out, nx, no); break;
    case DataType::kBF16: reduce_float<BF16>(p.op, L, x, out, nx, no); break;
    case DataType::kINT32: reduce_int<std::int32_t>(p.op, L, x, out, nx, no); break;
    case DataType::kINT64: reduce_int<std::int64_t>(p.op, L, x, out, nx, no); break;
    default: fail(std::string("reduce: ") + reduce_name(p.op) + " does not take " + tn(x.type));
  }
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kReduceKernel = {
    LayerType::kREDUCE, nullptr, nullptr,
    [](const OpCall& c) { reduce(std::get<ReduceParams>(c.node.params), ref(c.in[0]), ref(c.out)); }};

}  // namespace ops

}  // namespace tensoracle::cpu
