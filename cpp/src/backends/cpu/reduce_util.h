// Internal to the CPU backend: what reduce, softmax and normalization share (ops/reduce.cpp,
// softmax.cpp, normalization.cpp): the view of the input, its odometer, the double sums (FSum,
// sum16), the SIMD and AVX-512 macros. Defined in reduce_util.cpp where not inline.
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
#pragma once

#include <cstdint>

#include "backends/common/reduce_layout.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_util.h"

namespace tensoracle::cpu::reduction {

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
using detail::tn;
using detail::with_float;

// Vectorization hints (see kernels_util.h, TENSORACLE_SIMD). Each loop they mark has no dependence
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
using backends::common::kMaxGroups;

// parallel_min for parallel_ranges over items of `work` elements each: several threads only
// for kParallelWork elements or more, at least kParallelWork / 8 per thread.
i64 min_items(i64 work);

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

// The view (backends/common/reduce_layout.h): dims split into kept and reduced groups, the last
// one `inner` elements long and contiguous.
using Layout = backends::common::ReduceLayout;
inline Layout make_layout(int rank, const i64* dims, const bool* reduced) {
  return backends::common::reduce_layout(rank, dims, reduced);
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

}  // namespace tensoracle::cpu::reduction
