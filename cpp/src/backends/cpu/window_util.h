// Internal to the CPU backend: what its window layers share (ops/convolution.cpp,
// deconvolution.cpp, pooling.cpp): every layer normalized to 3 spatial dims (Geo: missing
// leading dims have size 1, window 1, stride 1, dilation 1, padding 0), so one code path serves
// 1-D, 2-D and 3-D; the effective pre padding of every PaddingMode comes from
// graph::window_pre_padding, and each kernel checks its output dims against the layer's shape
// rules (check_inference). Also the float storage tags, the single-threaded GEMM (sgemm) and
// the task runner (run_tasks) that convolution and deconvolution use. Defined in
// window_util.cpp where not inline.
//
// Threads: the GEMM tasks (tiles, images, groups) run on an OpenMP team with one
// single-threaded GEMM per thread (see run_tasks); depthwise and pooling split output rows.
// float16/bfloat16 are widened to float32 in the workspace (or on the fly) and the float32
// result is rounded once when stored.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backends/common/window_geometry.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_util.h"
#include "core/numeric.h"
#include "graph/ops.h"
#include "tensoracle/errors.h"

namespace tensoracle::cpu::window {

using i64 = std::int64_t;
using detail::fail;
using detail::is_float_type;
using detail::tn;

constexpr int kS = backends::common::kWindowSpatial;  // normalized spatial rank

// Column buffers are tiled to at most this many floats (1 MiB): a tile written by im2col is
// still in cache when the GEMM reads it. But a tile has at least kMinTile columns (when the
// output has them): a GEMM of a few dozen columns runs far below the machine's peak.
constexpr i64 kColCap = i64{1} << 18;
constexpr i64 kMinTile = 256;
// Column buffers (one per thread) of a convolution's tasks: at most this many.
constexpr i64 kMaxSlots = 16;

// Work (in inner-loop elements) below which a loop stays on one thread.
constexpr i64 kParallelWork = 32 * 1024;

inline i64 ceil_div(i64 a, i64 b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

// ---- element access -----------------------------------------------------------------------

struct F32 {
  using T = float;
  static float load(float v) { return v; }
  static float store(float v) { return v; }
};
struct F16 {
  using T = std::uint16_t;
  static float load(std::uint16_t v) { return core::half_to_float(v); }
  static std::uint16_t store(float v) { return core::float_to_half(v); }
};
struct BF16 {
  using T = std::uint16_t;
  static float load(std::uint16_t v) { return core::bf16_to_float(v); }
  static std::uint16_t store(float v) { return core::float_to_bf16(v); }
};

// Calls fn(Traits{}) for the float type `t`.
template <class Fn>
void dispatch(DataType t, Fn&& fn) {
  switch (t) {
    case DataType::kFLOAT: fn(F32{}); break;
    case DataType::kHALF: fn(F16{}); break;
    case DataType::kBF16: fn(BF16{}); break;
    default: fail("window kernel: type " + tn(t) + " is not float32, float16 or bfloat16");
  }
}

// Runs fn(begin, end) over [0, n) rows of `row_work` elements each, on several threads when
// the rows hold at least kParallelWork elements.
void parallel_rows(i64 n, i64 row_work, const std::function<void(i64, i64)>& fn);

// std::fill_n for floats, vectorized (GCC's -O2 leaves a non-zero fill scalar).
inline void fill(float* p, i64 n, float v) {
#pragma omp simd
  for (i64 i = 0; i < n; ++i) p[i] = v;
}

template <class Tr>
void widen(const void* src, float* dst, i64 n) {
  const auto* s = static_cast<const typename Tr::T*>(src);
  for (i64 i = 0; i < n; ++i) dst[i] = Tr::load(s[i]);
}

void check_blas(i64 v, const char* kernel, const char* what);

// C (m x n, ldc) = op(A) (m x k) x B (k x n, ldb) + beta * C; all row-major float32.
void sgemm(bool trans_a, i64 m, i64 n, i64 k, const float* a, i64 lda, const float* b, i64 ldb, float beta, float* c,
           i64 ldc);

// Whether GEMMs may run side by side on the kernels' OpenMP team, each on its caller's thread:
// OpenBLAS's OpenMP build runs a call made inside a parallel region on the calling thread (and
// shares the team's pool), the sequential build always does. Its pthread build would start its
// own threads for each call (and serializes concurrent threaded calls): there the tasks run
// one after the other and every GEMM uses OpenBLAS's threads.
bool gemms_on_team();

// ---- geometry ---------------------------------------------------------------------------------

// A window layer's sizes, normalized to 3 spatial dims (backends/common/window_geometry.h).
using Geo = backends::common::WindowGeo;
using backends::common::dim_or;

// Calls graph inference (the shape rules of graph/ops/) and checks `out` against its result;
// prefixes its messages with the kernel's name.
template <class P>
void check_inference(const P& p, const char* kernel, const std::vector<graph::TensorDesc>& in, const TensorRef& out) {
  backends::common::check_inference(detail::kFail, p, kernel, in, out);
}

// Geometry of a (de)convolution or pooling on input dims `x` and output dims `out` (already
// checked against the shape rules).
inline Geo make_geo(const Dims& x, const Dims& out, const Dims& window, const Dims& stride, const Dims& pre,
                    const Dims& post, const Dims& dilation, PaddingMode mode, bool transposed, i64 groups) {
  return backends::common::window_geo(x, out, window, stride, pre, post, dilation, mode, transposed, groups);
}

// Runs task(t, slot) for t in [0, tasks): on an OpenMP team (slot = thread), each task's GEMM
// on its own thread, or (one task, one thread, or OpenBLAS's pthread build) on the calling
// thread (slot 0) with OpenBLAS's threads inside each GEMM. Many single-threaded GEMMs side by
// side scale better than OpenBLAS's split of one GEMM of these shapes (a few hundred columns).
void run_tasks(i64 tasks, i64 slots, const std::function<void(i64, i64)>& task);

inline void check_float(const TensorRef& t, const char* kernel, const char* name) {
  backends::common::check_float(detail::kFail, t, kernel, name);
}

}  // namespace tensoracle::cpu::window
