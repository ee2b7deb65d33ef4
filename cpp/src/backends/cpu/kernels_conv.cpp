// The CPU backend's window layers: convolution, deconvolution (transposed convolution) and
// pooling, on NCHW-style layouts with 1, 2 or 3 spatial dims.
//
// Every layer is normalized to 3 spatial dims (missing leading dims have size 1, window 1,
// stride 1, dilation 1, padding 0), so one code path serves 1-D, 2-D and 3-D. The effective
// pre padding of every PaddingMode comes from graph::window_pre_padding, and each kernel checks
// its output dims against the layer's shape rules (graph::infer).
//
// - Convolution: per (batch, group), the group's kernel [K/g, C/g * kvol] times an im2col
//   matrix [C/g * kvol, T] of T output positions (OpenBLAS sgemm); T tiles the output so that
//   the column buffer stays in cache, and small outputs put several images side by side in one
//   GEMM. A 1x1, stride-1, unpadded float32 convolution multiplies the input directly (no
//   im2col); a convolution with one input channel per group (depthwise) runs direct loops over
//   output rows. Bias is written into C first and sgemm accumulates onto it (beta = 1).
// - Deconvolution: per (batch, group), col [K/g * kvol, T] = kernel_g^T [K/g * kvol, C/g] x
//   input tile [C/g, T] (sgemm), then col2im adds every column into the output it reaches.
// - Pooling: direct loops over output rows; averages accumulate in double.
// Threads: the GEMM tasks (tiles, images, groups) run on an OpenMP team with one
// single-threaded GEMM per thread (see run_tasks); depthwise and pooling split output rows.
// float16/bfloat16 are widened to float32 in the workspace (or on the fly) and the float32
// result is rounded once when stored.
#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/kernels_more.h"
#include "backends/cpu/kernels_util.h"
#include "core/numeric.h"
#include "graph/ops.h"
#include "tensoracle/errors.h"

namespace tensoracle::cpu {

namespace {

using i64 = std::int64_t;
using detail::fail;

constexpr int kS = 3;  // normalized spatial rank

// Column buffers are tiled to at most this many floats (1 MiB): a tile written by im2col is
// still in cache when the GEMM reads it. But a tile has at least kMinTile columns (when the
// output has them): a GEMM of a few dozen columns runs far below the machine's peak.
constexpr i64 kColCap = i64{1} << 18;
constexpr i64 kMinTile = 256;
// Column buffers (one per thread) of a convolution's tasks: at most this many.
constexpr i64 kMaxSlots = 16;
// Outputs of fewer positions than this put several images side by side in one GEMM (up to
// twice this many positions): deep layers' small outputs would make narrow GEMMs.
constexpr i64 kMergeBelow = 1024;
// Work (in inner-loop elements) below which a loop stays on one thread.
constexpr i64 kParallelWork = 32 * 1024;

std::string tn(DataType t) { return std::string(type_name(t)); }
bool is_float_type(DataType t) { return t == DataType::kFLOAT || t == DataType::kHALF || t == DataType::kBF16; }

i64 ceil_div(i64 a, i64 b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

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
void parallel_rows(i64 n, i64 row_work, const std::function<void(i64, i64)>& fn) {
  detail::parallel_ranges(n, fn, std::max<i64>(1, ceil_div(kParallelWork, std::max<i64>(1, row_work))));
}

// std::fill_n for floats, vectorized (GCC's -O2 leaves a non-zero fill scalar).
void fill(float* p, i64 n, float v) {
#pragma omp simd
  for (i64 i = 0; i < n; ++i) p[i] = v;
}

template <class Tr>
void widen(const void* src, float* dst, i64 n) {
  const auto* s = static_cast<const typename Tr::T*>(src);
  for (i64 i = 0; i < n; ++i) dst[i] = Tr::load(s[i]);
}

void check_blas(i64 v, const char* kernel, const char* what) {
  if (v > INT_MAX)
    throw UnsupportedError("[cpu] " + std::string(kernel) + ": " + what + " " + std::to_string(v) +
                           " exceeds the BLAS interface's 32-bit limit");
}

// C (m x n, ldc) = op(A) (m x k) x B (k x n, ldb) + beta * C; all row-major float32.
void sgemm(bool trans_a, i64 m, i64 n, i64 k, const float* a, i64 lda, const float* b, i64 ldb, float beta, float* c,
           i64 ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (beta == 0.f)
      for (i64 i = 0; i < m; ++i) std::fill_n(c + i * ldc, n, 0.f);
    return;
  }
  detail::ensure_blas_threads();
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
}

// Whether GEMMs may run side by side on the kernels' OpenMP team, each on its caller's thread:
// OpenBLAS's OpenMP build runs a call made inside a parallel region on the calling thread (and
// shares the team's pool), the sequential build always does. Its pthread build would start its
// own threads for each call (and serializes concurrent threaded calls): there the tasks run
// one after the other and every GEMM uses OpenBLAS's threads.
bool gemms_on_team() {
  static const bool team = openblas_get_parallel() != OPENBLAS_THREAD;
  return team;
}

// ---- geometry ---------------------------------------------------------------------------------

// A window layer's sizes, normalized to 3 spatial dims (d, h, w).
struct Geo {
  i64 N = 0, C = 0, K = 0;  // batch, input channels, output channels
  i64 groups = 1, Cg = 0, Kg = 0;
  std::array<i64, kS> in{}, out{}, k{}, s{}, d{}, pre{}, post{};
  i64 in_sp = 1, out_sp = 1, kvol = 1;
  bool same = false;  // SAME_UPPER / SAME_LOWER
};

i64 dim_or(const Dims& d, int i, i64 def) { return d.rank() == 0 ? def : d[i]; }

// Calls graph inference (the shape rules of graph/ops_more.cpp) and checks `out` against its result;
// prefixes its messages with the kernel's name.
template <class P>
void check_inference(const P& p, const char* kernel, std::vector<graph::TensorDesc> in, const TensorRef& out) {
  std::vector<graph::TensorDesc> res;
  try {
    std::vector<graph::InputFacts> facts(in.size(), graph::InputFacts{true, std::nullopt});
    res = graph::infer(LayerParams{p}, in, facts);
  } catch (const InvalidArgument& e) {
    fail(std::string(kernel) + ": " + e.what());
  }
  if (res.size() != 1 || res[0].type != out.type || !(res[0].dims == out.dims))
    fail(std::string(kernel) + ": the output is " + tn(out.type) + out.dims.str() + "; expected " +
         (res.empty() ? std::string("?") : tn(res[0].type) + res[0].dims.str()));
}

// Geometry of a (de)convolution or pooling on input dims `x` and output dims `out` (already
// checked against the shape rules).
Geo make_geo(const Dims& x, const Dims& out, const Dims& window, const Dims& stride, const Dims& pre, const Dims& post,
             const Dims& dilation, PaddingMode mode, bool transposed, i64 groups) {
  Geo g;
  const int n = window.rank();
  const Dims eff = graph::window_pre_padding(x, window, stride, pre, post, dilation, mode, transposed);
  g.N = x[0];
  g.C = x[1];
  g.K = out[1];
  g.groups = groups;
  g.Cg = g.C / groups;
  g.Kg = g.K / groups;
  g.same = mode == PaddingMode::kSAME_UPPER || mode == PaddingMode::kSAME_LOWER;
  const int off = kS - n;
  for (int i = 0; i < kS; ++i) {
    if (i < off) {
      g.in[i] = g.out[i] = g.k[i] = g.s[i] = g.d[i] = 1;
      g.pre[i] = g.post[i] = 0;
      continue;
    }
    const int j = i - off;
    g.in[i] = x[2 + j];
    g.out[i] = out[2 + j];
    g.k[i] = window[j];
    g.s[i] = dim_or(stride, j, 1);
    g.d[i] = dim_or(dilation, j, 1);
    g.pre[i] = eff[j];
    g.post[i] = dim_or(post, j, 0);
  }
  for (int i = 0; i < kS; ++i) {
    g.in_sp *= g.in[i];
    g.out_sp *= g.out[i];
    g.kvol *= g.k[i];
  }
  return g;
}

Geo conv_geo(const ConvolutionParams& p, const TensorRef& x, const TensorRef& out, const graph::TensorDesc* kernel,
             const graph::TensorDesc* bias, const char* name) {
  if (x.dims.rank() < 3 || x.dims.rank() != p.kernel_size.rank() + 2)
    fail(std::string(name) + ": input dims " + x.dims.str() + " do not match kernel_size " + p.kernel_size.str());
  if (!x.dims.all_known()) fail(std::string(name) + ": input dims " + x.dims.str() + " are not fully known");
  graph::TensorDesc kd;
  if (kernel == nullptr) {  // sizing only: a kernel of the size the parameters ask for
    i64 vol = p.num_output_maps * (p.num_groups > 0 ? x.dims[1] / p.num_groups : 0);
    for (auto k : p.kernel_size) vol *= k;
    kd = {x.type, Dims{vol}};
    kernel = &kd;
  }
  std::vector<graph::TensorDesc> in{{x.type, x.dims}, *kernel};
  if (bias) in.push_back(*bias);
  check_inference(p, name, in, out);
  return make_geo(x.dims, out.dims, p.kernel_size, p.stride, p.pre_padding, p.post_padding, p.dilation, p.padding_mode,
                  false, p.num_groups);
}

Geo deconv_geo(const DeconvolutionParams& p, const TensorRef& x, const TensorRef& out, const graph::TensorDesc* kernel,
               const graph::TensorDesc* bias, const char* name) {
  if (x.dims.rank() < 3 || x.dims.rank() != p.kernel_size.rank() + 2)
    fail(std::string(name) + ": input dims " + x.dims.str() + " do not match kernel_size " + p.kernel_size.str());
  if (!x.dims.all_known()) fail(std::string(name) + ": input dims " + x.dims.str() + " are not fully known");
  graph::TensorDesc kd;
  if (kernel == nullptr) {
    i64 vol = x.dims[1] * (p.num_groups > 0 ? p.num_output_maps / p.num_groups : 0);
    for (auto k : p.kernel_size) vol *= k;
    kd = {x.type, Dims{vol}};
    kernel = &kd;
  }
  std::vector<graph::TensorDesc> in{{x.type, x.dims}, *kernel};
  if (bias) in.push_back(*bias);
  check_inference(p, name, in, out);
  return make_geo(x.dims, out.dims, p.kernel_size, p.stride, p.pre_padding, p.post_padding, p.dilation, p.padding_mode,
                  true, p.num_groups);
}

// ---- convolution --------------------------------------------------------------------------------

enum class ConvPath { kDirectGemm, kIm2col, kDepthwise };

ConvPath conv_path(const Geo& g, DataType t) {
  if (g.Cg == 1 && g.groups > 1) return ConvPath::kDepthwise;
  bool pointwise = g.kvol == 1;
  for (int i = 0; i < kS; ++i) pointwise = pointwise && g.s[i] == 1 && g.pre[i] == 0 && g.in[i] == g.out[i];
  // float16/bfloat16 need widening anyway: im2col of a 1x1 convolution is that widening.
  return pointwise && t == DataType::kFLOAT ? ConvPath::kDirectGemm : ConvPath::kIm2col;
}

// How the GEMMs of a convolution cover the output. A task is one GEMM: `tile` output positions
// of one image and group, or (small outputs) `images` whole images of one group side by side,
// whose result goes through a float32 buffer. Tasks run on up to `slots` threads, each with its
// own column (and result) buffer of `budget` positions in the workspace.
//
// The builder sizes the workspace once, at the profile's largest shapes, and the kernel then
// runs at any smaller ones: every buffer size here grows with the batch and spatial sizes.
struct ConvPlan {
  i64 budget = 0;  // positions per slot: min(N * out_sp, max(kMinTile, kColCap / rows))
  i64 tile = 0;
  i64 images = 1;
  bool merged = false;
  i64 tiles_per_image = 1;  // unmerged
  i64 batches = 1;          // merged: image batches per group
  i64 tasks = 0;
  i64 slots = 1;
};

ConvPlan conv_plan(const Geo& g, ConvPath path) {
  ConvPlan pl;
  const i64 rows = std::max<i64>(1, g.Cg * g.kvol);
  const i64 cap = std::max<i64>(kMinTile, kColCap / rows);
  pl.budget = std::max<i64>(1, std::min(g.N * g.out_sp, cap));
  if (path == ConvPath::kDirectGemm) {
    pl.tile = g.out_sp;
  } else if (g.out_sp < kMergeBelow && g.N > 1 && 2 * g.out_sp <= pl.budget) {
    const i64 most = std::min(g.N, std::max<i64>(2, std::min(pl.budget, 2 * kMergeBelow) / g.out_sp));
    pl.images = ceil_div(g.N, ceil_div(g.N, most));  // as many GEMMs, evened out
    pl.tile = pl.images * g.out_sp;
    pl.merged = true;
  } else {
    const i64 most = std::max<i64>(1, std::min(g.out_sp, pl.budget));
    pl.tile = ceil_div(g.out_sp, ceil_div(g.out_sp, most));  // as many tiles, evened out
  }
  if (pl.merged) {
    pl.batches = ceil_div(g.N, pl.images);
    pl.tasks = g.groups * pl.batches;
  } else {
    pl.tiles_per_image = ceil_div(g.out_sp, pl.tile);
    pl.tasks = g.N * g.groups * pl.tiles_per_image;
  }
  // Grows with the sizes: unmerged, N * groups * ceil(out_sp / min(out_sp, budget)) does;
  // merged, fewer images per GEMM fit only at a larger size.
  pl.slots = std::clamp<i64>(pl.tasks, 1, kMaxSlots);
  return pl;
}

struct ConvWorkspace {
  i64 kernel = 0;  // widened kernel (float16/bfloat16)
  i64 col = 0;     // per slot: im2col tile
  i64 cbuf = 0;    // per slot: float32 GEMM result of one task (float16/bfloat16, or merged images)
  i64 slots = 0;
  i64 total() const { return kernel + slots * (col + cbuf); }
};

ConvWorkspace conv_workspace(const Geo& g, DataType t) {
  ConvWorkspace w;
  if (g.N == 0 || g.K == 0 || g.out_sp == 0) return w;
  const ConvPath path = conv_path(g, t);
  if (path == ConvPath::kDepthwise) return w;  // widens on the fly
  const ConvPlan pl = conv_plan(g, path);
  w.slots = pl.slots;
  if (path == ConvPath::kIm2col) w.col = g.Cg * g.kvol * pl.budget;
  if (t != DataType::kFLOAT) {
    w.kernel = g.K * g.Cg * g.kvol;
    w.cbuf = g.Kg * pl.budget;
  } else if (path == ConvPath::kIm2col && g.N > 1) {  // merged images (at this or a smaller size)
    w.cbuf = g.Kg * std::min(pl.budget, 2 * kMergeBelow);
  }
  return w;
}

// The im2col matrix of one (batch, group) for output positions [p0, p1), into `col` with rows
// of `ld` floats: row r = (c, kd, kh, kw), column p - p0; zero where the window reads padding.
template <class Tr>
void im2col(const Geo& g, const typename Tr::T* xg, i64 p0, i64 p1, float* col, i64 ld) {
  const i64 OH = g.out[1], OW = g.out[2], ID = g.in[0], IH = g.in[1], IW = g.in[2];
  const i64 rows = g.Cg * g.kvol;
  for (i64 r = 0; r < rows; ++r) {
    const i64 c = r / g.kvol, kr = r % g.kvol;
    const i64 kd = kr / (g.k[1] * g.k[2]), kh = (kr / g.k[2]) % g.k[1], kw = kr % g.k[2];
    const typename Tr::T* xc = xg + c * g.in_sp;
    float* dst = col + r * ld;
    i64 od = p0 / (OH * OW), oh = (p0 / OW) % OH, ow = p0 % OW;
    const i64 off = kw * g.d[2] - g.pre[2];  // iw = ow * sw + off
    const i64 sw = g.s[2];
    const i64 lo_all = std::max<i64>(0, ceil_div(-off, sw)), hi_all = std::max<i64>(0, ceil_div(IW - off, sw));
    for (i64 p = p0; p < p1;) {
      const i64 cnt = std::min(OW - ow, p1 - p);
      const i64 id = od * g.s[0] - g.pre[0] + kd * g.d[0];
      const i64 ih = oh * g.s[1] - g.pre[1] + kh * g.d[1];
      if (id < 0 || id >= ID || ih < 0 || ih >= IH) {
        std::fill_n(dst, cnt, 0.f);
      } else {
        const typename Tr::T* row = xc + (id * IH + ih) * IW;
        const i64 lo = std::clamp(lo_all, ow, ow + cnt), hi = std::clamp(hi_all, lo, ow + cnt);
        std::fill_n(dst, lo - ow, 0.f);
        float* o = dst - ow;
        if (sw == 1) {
          const typename Tr::T* src = row + off;
#pragma omp simd
          for (i64 q = lo; q < hi; ++q) o[q] = Tr::load(src[q]);
        } else {
          for (i64 q = lo; q < hi; ++q) o[q] = Tr::load(row[q * sw + off]);
        }
        std::fill_n(dst + (hi - ow), ow + cnt - hi, 0.f);
      }
      dst += cnt;
      p += cnt;
      ow = 0;
      if (++oh == OH) {
        oh = 0;
        ++od;
      }
    }
  }
}

// Runs task(t, slot) for t in [0, tasks): on an OpenMP team (slot = thread), each task's GEMM
// on its own thread, or (one task, one thread, or OpenBLAS's pthread build) on the calling
// thread (slot 0) with OpenBLAS's threads inside each GEMM. Many single-threaded GEMMs side by
// side scale better than OpenBLAS's split of one GEMM of these shapes (a few hundred columns).
void run_tasks(i64 tasks, i64 slots, const std::function<void(i64, i64)>& task) {
  const i64 nt = std::min<i64>(num_threads(), std::min(slots, tasks));
  detail::ensure_blas_threads();
  if (nt <= 1 || !gemms_on_team()) {
    for (i64 t = 0; t < tasks; ++t) task(t, 0);
    return;
  }
#ifdef _OPENMP
#pragma omp parallel for num_threads(static_cast<int>(nt)) schedule(dynamic, 1)
  for (i64 t = 0; t < tasks; ++t) task(t, omp_get_thread_num());
#else
  for (i64 t = 0; t < tasks; ++t) task(t, 0);
#endif
}

// Convolution by (im2col +) GEMM, every group and batch.
template <class Tr>
void conv_gemm(const Geo& g, ConvPath path, const TensorRef& x, const TensorRef& kernel, const TensorRef* bias,
               const TensorRef& out, float* ws) {
  using T = typename Tr::T;
  constexpr bool narrow = !std::is_same_v<Tr, F32>;
  const ConvWorkspace w = conv_workspace(g, x.type);
  const ConvPlan pl = conv_plan(g, path);
  float* wk = ws;
  float* slot_base = ws + w.kernel;
  const float* W;
  if constexpr (narrow) {
    widen<Tr>(kernel.data, wk, w.kernel);
    W = wk;
  } else {
    W = static_cast<const float*>(kernel.data);
  }
  std::vector<float> b(static_cast<std::size_t>(g.K), 0.f);
  if (bias)
    for (i64 k = 0; k < g.K; ++k) b[k] = Tr::load(static_cast<const T*>(bias->data)[k]);
  const i64 rows = g.Cg * g.kvol;
  check_blas(g.Kg, "convolution", "output channels per group");
  check_blas(rows, "convolution", "input channels per group x kernel volume");
  check_blas(std::max(g.out_sp, pl.tile), "convolution", "output positions");
  const auto* xs = static_cast<const T*>(x.data);
  auto* os = static_cast<T*>(out.data);
  // Copies a float32 result (Kg rows of `ldc`) into the output at image n, position p0.
  auto store = [&](const float* C, i64 ldc, i64 n, i64 gr, i64 p0, i64 cnt) {
    T* og = os + (n * g.K + gr * g.Kg) * g.out_sp + p0;
    for (i64 k = 0; k < g.Kg; ++k)
      for (i64 q = 0; q < cnt; ++q) og[k * g.out_sp + q] = Tr::store(C[k * ldc + q]);
  };
  run_tasks(pl.tasks, pl.slots, [&](i64 t, i64 slot) {
    float* col = slot_base + slot * (w.col + w.cbuf);
    float* cbuf = col + w.col;
    if (pl.merged) {
      const i64 gr = t / pl.batches, n0 = (t % pl.batches) * pl.images;
      const i64 nb = std::min(pl.images, g.N - n0), Tn = nb * g.out_sp;
      for (i64 j = 0; j < nb; ++j)
        im2col<Tr>(g, xs + ((n0 + j) * g.C + gr * g.Cg) * g.in_sp, 0, g.out_sp, col + j * g.out_sp, Tn);
      for (i64 k = 0; k < g.Kg; ++k) fill(cbuf + k * Tn, Tn, b[gr * g.Kg + k]);
      sgemm(false, g.Kg, Tn, rows, W + gr * g.Kg * rows, rows, col, Tn, 1.f, cbuf, Tn);
      for (i64 j = 0; j < nb; ++j) store(cbuf + j * g.out_sp, Tn, n0 + j, gr, 0, g.out_sp);
      return;
    }
    const i64 ti = t % pl.tiles_per_image, gr = (t / pl.tiles_per_image) % g.groups;
    const i64 n = t / (pl.tiles_per_image * g.groups);
    const T* xg = xs + (n * g.C + gr * g.Cg) * g.in_sp;
    const i64 p0 = ti * pl.tile, p1 = std::min(g.out_sp, p0 + pl.tile), Tn = p1 - p0;
    const float* B;
    i64 ldb;
    if (path == ConvPath::kDirectGemm) {
      B = reinterpret_cast<const float*>(xg) + p0;
      ldb = g.in_sp;
    } else {
      im2col<Tr>(g, xg, p0, p1, col, Tn);
      B = col;
      ldb = Tn;
    }
    // C starts as the bias; sgemm accumulates onto it.
    float* C;
    i64 ldc;
    if constexpr (narrow) {
      C = cbuf;
      ldc = Tn;
    } else {
      C = reinterpret_cast<float*>(os) + (n * g.K + gr * g.Kg) * g.out_sp + p0;
      ldc = g.out_sp;
    }
    for (i64 k = 0; k < g.Kg; ++k) fill(C + k * ldc, Tn, b[gr * g.Kg + k]);
    sgemm(false, g.Kg, Tn, rows, W + gr * g.Kg * rows, rows, B, ldb, 1.f, C, ldc);
    if constexpr (narrow) store(C, ldc, n, gr, p0, Tn);
  });
}

// a[q] += sum over kw < KW of w[kw] * src[q + kw * dw], for q in [lo, hi).
template <class Tr, int KW>
void fused_taps(float* a, const typename Tr::T* src, const float* w, i64 dw, i64 lo, i64 hi) {
  const typename Tr::T* p[KW];
  float wk[KW];
  for (int k = 0; k < KW; ++k) {
    p[k] = src + k * dw;
    wk[k] = w[k];
  }
#pragma omp simd
  for (i64 q = lo; q < hi; ++q) {
    float sum = a[q];
#pragma GCC unroll 8
    for (int k = 0; k < KW; ++k) sum += wk[k] * Tr::load(p[k][q]);
    a[q] = sum;
  }
}

// Convolution with one input channel per group (depthwise, with K/groups maps per channel):
// direct loops, float32 accumulation. A work item is a block of output rows (and columns) of
// one plane, accumulated in a local buffer one kernel tap at a time: each tap's weight is
// loaded once and sweeps every row of the block.
template <class Tr>
void conv_depthwise(const Geo& g, const TensorRef& x, const TensorRef& kernel, const TensorRef* bias,
                    const TensorRef& out) {
  using T = typename Tr::T;
  constexpr i64 kBlock = 4096;  // accumulator floats per item
  const auto* xs = static_cast<const T*>(x.data);
  const auto* ws = static_cast<const T*>(kernel.data);
  const T* bs = bias ? static_cast<const T*>(bias->data) : nullptr;
  auto* os = static_cast<T*>(out.data);
  const i64 OD = g.out[0], OH = g.out[1], OW = g.out[2];
  const i64 cw = std::min(OW, kBlock), rb = std::max<i64>(1, std::min(OH, kBlock / cw));
  const i64 col_blocks = ceil_div(OW, cw), row_blocks = ceil_div(OH, rb);
  const i64 items = g.N * g.K * OD * row_blocks * col_blocks;
  // Per kernel column kw: input column iw = ow * sw + off[kw], in bounds for ow in [lo, hi).
  std::vector<i64> off(static_cast<std::size_t>(g.k[2])), lo_w(off.size()), hi_w(off.size());
  for (i64 kw = 0; kw < g.k[2]; ++kw) {
    off[kw] = kw * g.d[2] - g.pre[2];
    lo_w[kw] = std::max<i64>(0, ceil_div(-off[kw], g.s[2]));
    hi_w[kw] = std::max<i64>(0, ceil_div(g.in[2] - off[kw], g.s[2]));
  }
  // Stride 1 and kernel rows of at most kFuse taps: all taps of a kernel row in one pass over
  // the columns where all are in bounds (the fused range [flo, fhi)).
  constexpr i64 kFuse = 16;
  const bool fuse = g.s[2] == 1 && g.k[2] > 1 && g.k[2] <= kFuse;  // 3, 5, 7 unrolled
  const i64 flo = *std::max_element(lo_w.begin(), lo_w.end()), fhi = *std::min_element(hi_w.begin(), hi_w.end());
  parallel_rows(items, rb * cw * g.kvol, [&](i64 i0, i64 i1) {
    float acc[kBlock];
    float wf[kFuse];
    for (i64 it = i0; it < i1; ++it) {
      const i64 cb = it % col_blocks, rbi = (it / col_blocks) % row_blocks, od = (it / (col_blocks * row_blocks)) % OD;
      const i64 nk = it / (col_blocks * row_blocks * OD), k = nk % g.K, n = nk / g.K;
      const i64 ow0 = cb * cw, ow1 = std::min(OW, ow0 + cw), oh0 = rbi * rb, oh1 = std::min(OH, oh0 + rb);
      const i64 ncol = ow1 - ow0;
      const T* xc = xs + (n * g.C + k / g.Kg) * g.in_sp;  // the input channel of k's group
      const T* wk = ws + k * g.kvol;
      fill(acc, (oh1 - oh0) * ncol, bs ? Tr::load(bs[k]) : 0.f);
      for (i64 kd = 0; kd < g.k[0]; ++kd) {
        const i64 id = od * g.s[0] - g.pre[0] + kd * g.d[0];
        if (id < 0 || id >= g.in[0]) continue;
        for (i64 kh = 0; kh < g.k[1]; ++kh) {
          // Rows whose input row ih = oh * sh + th is in bounds.
          const i64 th = kh * g.d[1] - g.pre[1];
          const i64 r0 = std::clamp(ceil_div(-th, g.s[1]), oh0, oh1);
          const i64 r1 = std::clamp(ceil_div(g.in[1] - th, g.s[1]), r0, oh1);
          const T* wr = wk + (kd * g.k[1] + kh) * g.k[2];
          i64 kw0 = 0;
          if (fuse) {  // stride 1, every tap in bounds on [flo, fhi): one pass for the whole kernel row
            for (i64 kw = 0; kw < g.k[2]; ++kw) wf[kw] = Tr::load(wr[kw]);
            const i64 lo = std::clamp(flo, ow0, ow1), hi = std::clamp(fhi, lo, ow1);
            for (i64 oh = r0; oh < r1; ++oh) {
              const T* src = xc + (id * g.in[1] + oh * g.s[1] + th) * g.in[2] + off[0];
              float* a = acc + (oh - oh0) * ncol - ow0;
              const i64 dw = g.d[2], kn = g.k[2];
              switch (kn) {
                case 3: fused_taps<Tr, 3>(a, src, wf, dw, lo, hi); break;
                case 5: fused_taps<Tr, 5>(a, src, wf, dw, lo, hi); break;
                case 7: fused_taps<Tr, 7>(a, src, wf, dw, lo, hi); break;
                default:
                  for (i64 kw = 0; kw < kn; ++kw) {
                    const float wv = wf[kw];
                    const T* sk = src + kw * dw;
#pragma omp simd
                    for (i64 q = lo; q < hi; ++q) a[q] += wv * Tr::load(sk[q]);
                  }
              }
              // The edge columns, tap by tap.
              for (i64 kw = 0; kw < kn; ++kw) {
                const i64 o = off[kw] - off[0];
                for (i64 q = std::clamp(lo_w[kw], ow0, lo); q < lo; ++q) a[q] += wf[kw] * Tr::load(src[q + o]);
                for (i64 q = hi; q < std::clamp(hi_w[kw], hi, ow1); ++q) a[q] += wf[kw] * Tr::load(src[q + o]);
              }
            }
            kw0 = g.k[2];
          }
          for (i64 kw = kw0; kw < g.k[2]; ++kw) {
            const float wv = Tr::load(wr[kw]);
            const i64 lo = std::clamp(lo_w[kw], ow0, ow1), hi = std::clamp(hi_w[kw], lo, ow1), o = off[kw];
            for (i64 oh = r0; oh < r1; ++oh) {
              const T* xrow = xc + (id * g.in[1] + oh * g.s[1] + th) * g.in[2];
              float* a = acc + (oh - oh0) * ncol - ow0;
              if (g.s[2] == 1) {
                const T* src = xrow + o;
#pragma omp simd
                for (i64 q = lo; q < hi; ++q) a[q] += wv * Tr::load(src[q]);
              } else {
                const i64 sw = g.s[2];
                for (i64 q = lo; q < hi; ++q) a[q] += wv * Tr::load(xrow[q * sw + o]);
              }
            }
          }
        }
      }
      T* oplane = os + (nk * OD + od) * OH * OW;
      for (i64 oh = oh0; oh < oh1; ++oh)
        for (i64 q = 0; q < ncol; ++q) oplane[oh * OW + ow0 + q] = Tr::store(acc[(oh - oh0) * ncol + q]);
    }
  });
}

// ---- deconvolution ------------------------------------------------------------------------------

bool deconv_pointwise(const Geo& g) {
  bool pw = g.kvol == 1;
  for (int i = 0; i < kS; ++i) pw = pw && g.s[i] == 1 && g.pre[i] == 0 && g.in[i] == g.out[i];
  return pw;
}

// Input positions per GEMM tile (grows with the input, like every deconvolution buffer).
i64 deconv_tile(const Geo& g) {
  const i64 rows = std::max<i64>(1, g.Kg * g.kvol);
  const i64 cap = std::max<i64>(kMinTile, kColCap / rows);
  return std::max<i64>(1, std::min(g.in_sp, cap));
}

// A deconvolution's tasks are its (batch, group) pairs, on up to `slots` threads, each with its
// own GEMM tile buffer. float16/bfloat16 inputs are widened into one float32 copy of the input,
// and the output accumulates in one float32 copy of the output (each task its own slices).
struct DeconvWorkspace {
  i64 kernel = 0;  // widened kernel (float16/bfloat16)
  i64 x = 0;       // widened input (float16/bfloat16)
  i64 acc = 0;     // float32 output (float16/bfloat16)
  i64 col = 0;     // per slot: GEMM result of one tile
  i64 slots = 0;
  i64 total() const { return kernel + x + acc + slots * col; }
};

DeconvWorkspace deconv_workspace(const Geo& g, DataType t) {
  DeconvWorkspace w;
  if (g.N == 0 || g.K == 0 || g.out_sp == 0) return w;
  w.slots = std::clamp<i64>(g.N * g.groups, 1, kMaxSlots);
  if (!deconv_pointwise(g) && g.in_sp > 0) w.col = g.Kg * g.kvol * deconv_tile(g);
  if (t != DataType::kFLOAT) {
    w.kernel = g.C * g.Kg * g.kvol;
    w.x = g.N * g.C * g.in_sp;
    w.acc = g.N * g.K * g.out_sp;
  }
  return w;
}

// Adds the GEMM tile `col` (rows (k, kd, kh, kw), columns: input positions [q0, q1)) into one
// (batch, group)'s output `og` ([Kg, OD, OH, OW]).
void col2im(const Geo& g, const float* col, i64 q0, i64 q1, float* og) {
  const i64 OD = g.out[0], OH = g.out[1], OW = g.out[2], IH = g.in[1], IW = g.in[2];
  const i64 T = q1 - q0, rows = g.Kg * g.kvol, sw = g.s[2];
  for (i64 r = 0; r < rows; ++r) {
    const i64 k = r / g.kvol, kr = r % g.kvol;
    const i64 kd = kr / (g.k[1] * g.k[2]), kh = (kr / g.k[2]) % g.k[1], kw = kr % g.k[2];
    float* ok = og + k * g.out_sp;
    const float* src = col + r * T;
    const i64 off = kw * g.d[2] - g.pre[2];  // ow = iw * sw + off
    const i64 lo_all = std::max<i64>(0, ceil_div(-off, sw)), hi_all = std::max<i64>(0, ceil_div(OW - off, sw));
    i64 id = q0 / (IH * IW), ih = (q0 / IW) % IH, iw = q0 % IW;
    for (i64 q = q0; q < q1;) {
      const i64 cnt = std::min(IW - iw, q1 - q);
      const i64 od = id * g.s[0] - g.pre[0] + kd * g.d[0];
      const i64 oh = ih * g.s[1] - g.pre[1] + kh * g.d[1];
      if (od >= 0 && od < OD && oh >= 0 && oh < OH) {
        float* orow = ok + (od * OH + oh) * OW;
        const i64 lo = std::clamp(lo_all, iw, iw + cnt), hi = std::clamp(hi_all, lo, iw + cnt);
        const float* s = src - iw;
        if (sw == 1) {
          float* o = orow + off;
#pragma omp simd
          for (i64 i = lo; i < hi; ++i) o[i] += s[i];
        } else {
          for (i64 i = lo; i < hi; ++i) orow[i * sw + off] += s[i];
        }
      }
      src += cnt;
      q += cnt;
      iw = 0;
      if (++ih == IH) {
        ih = 0;
        ++id;
      }
    }
  }
}

template <class Tr>
void deconv_gemm(const Geo& g, const TensorRef& x, const TensorRef& kernel, const TensorRef* bias,
                 const TensorRef& out, float* ws) {
  using T = typename Tr::T;
  constexpr bool narrow = !std::is_same_v<Tr, F32>;
  const DeconvWorkspace w = deconv_workspace(g, x.type);
  float* wk = ws;
  float* wx = wk + w.kernel;
  float* wacc = wx + w.x;
  float* slot_base = wacc + w.acc;
  const float* W;
  if constexpr (narrow) {
    widen<Tr>(kernel.data, wk, w.kernel);
    W = wk;
  } else {
    W = static_cast<const float*>(kernel.data);
  }
  std::vector<float> b(static_cast<std::size_t>(g.K), 0.f);
  if (bias)
    for (i64 k = 0; k < g.K; ++k) b[k] = Tr::load(static_cast<const T*>(bias->data)[k]);
  const bool pw = deconv_pointwise(g);
  const i64 rows = g.Kg * g.kvol;  // GEMM rows: (k, kd, kh, kw)
  const i64 tile = deconv_tile(g);
  check_blas(rows, "deconvolution", "output channels per group x kernel volume");
  check_blas(g.Cg, "deconvolution", "input channels per group");
  check_blas(g.in_sp, "deconvolution", "input positions");
  const auto* xs = static_cast<const T*>(x.data);
  auto* os = static_cast<T*>(out.data);
  run_tasks(g.N * g.groups, w.slots, [&](i64 t, i64 slot) {
    const i64 n = t / g.groups, gr = t % g.groups;
    float* col = slot_base + slot * w.col;
    const float* Wg = W + gr * g.Cg * rows;  // [Cg, Kg * kvol]
    const i64 xoff = (n * g.C + gr * g.Cg) * g.in_sp, ooff = (n * g.K + gr * g.Kg) * g.out_sp;
    const float* X;
    float* og;
    if constexpr (narrow) {
      widen<Tr>(xs + xoff, wx + xoff, g.Cg * g.in_sp);
      X = wx + xoff;
      og = wacc + ooff;
    } else {
      X = reinterpret_cast<const float*>(xs) + xoff;
      og = reinterpret_cast<float*>(os) + ooff;
    }
    for (i64 k = 0; k < g.Kg; ++k) fill(og + k * g.out_sp, g.out_sp, b[gr * g.Kg + k]);
    if (pw) {  // the GEMM's rows are the output's channels: accumulate onto the bias directly
      sgemm(true, g.Kg, g.in_sp, g.Cg, Wg, rows, X, g.in_sp, 1.f, og, g.out_sp);
    } else {
      for (i64 q0 = 0; q0 < g.in_sp; q0 += tile) {
        const i64 q1 = std::min(g.in_sp, q0 + tile);
        sgemm(true, rows, q1 - q0, g.Cg, Wg, rows, X + q0, g.in_sp, 0.f, col, q1 - q0);
        col2im(g, col, q0, q1, og);
      }
    }
    if constexpr (narrow) {
      T* dst = os + ooff;
      for (i64 i = 0; i < g.Kg * g.out_sp; ++i) dst[i] = Tr::store(og[i]);
    }
  });
}

// ---- pooling ------------------------------------------------------------------------------------

// Where the padded input ends, per spatial dim: in + post (explicit modes; EXPLICIT_ROUND_UP
// windows may reach past it and are clipped there). SAME windows never reach past their
// computed padding.
std::array<i64, kS> pool_limits(const Geo& g) {
  std::array<i64, kS> lim{};
  for (int i = 0; i < kS; ++i) lim[i] = g.same ? INT64_MAX / 4 : g.in[i] + g.post[i];
  return lim;
}

// The window of output position o: its taps inside the input ([lo, hi) per spatial dim, walked
// in row-major order), how many there are, and its size within the padded input.
struct PoolWindow {
  std::array<i64, kS> lo{}, hi{};
  i64 count = 1, padded = 1;
};
PoolWindow pool_window(const Geo& g, const std::array<i64, kS>& lim, const std::array<i64, kS>& o) {
  PoolWindow w;
  for (int i = 0; i < kS; ++i) {
    const i64 start = o[i] * g.s[i] - g.pre[i];
    w.lo[i] = std::max<i64>(0, start);
    w.hi[i] = std::min(g.in[i], start + g.k[i]);
    w.count *= std::max<i64>(0, w.hi[i] - w.lo[i]);
    w.padded *= std::min(start + g.k[i], lim[i]) - start;
  }
  return w;
}

// A window's pooled value from its taps' maximum and (double) sum.
double pool_value(const PoolingParams& p, float mx, double sum, const PoolWindow& w) {
  if (p.type == PoolingType::kMAX) return mx;
  const double div = p.average_count_excludes_padding ? static_cast<double>(w.count) : static_cast<double>(w.padded);
  const double avg = sum / div;
  if (p.type == PoolingType::kAVERAGE) return avg;
  const double blend = p.blend_factor;
  return blend * static_cast<double>(mx) + (1.0 - blend) * avg;
}

template <class Tr>
void pool(const PoolingParams& p, const Geo& g, const TensorRef& x, const TensorRef& out) {
  using T = typename Tr::T;
  const auto* xs = static_cast<const T*>(x.data);
  auto* os = static_cast<T*>(out.data);
  const i64 OD = g.out[0], OH = g.out[1], OW = g.out[2];
  const i64 rows = g.N * g.C * OD * OH;
  const bool want_max = p.type != PoolingType::kAVERAGE, want_avg = p.type != PoolingType::kMAX;
  const std::array<i64, kS> lim = pool_limits(g);
  // One output row (n, c, od, oh), window by window: the taps in row-major order, a NaN sticks,
  // the average's sum in double.
  auto exact_row = [&](i64 r) {
    const i64 oh = r % OH, od = (r / OH) % OD, nc = r / (OH * OD);
    const T* xc = xs + nc * g.in_sp;
    T* orow = os + r * OW;
    for (i64 ow = 0; ow < OW; ++ow) {
      const PoolWindow w = pool_window(g, lim, {od, oh, ow});
      if (w.count == 0) {  // a window entirely in (or past) the padding
        orow[ow] = Tr::store(0.f);
        continue;
      }
      float mx = -INFINITY;
      double sum = 0.0;
      for (i64 id = w.lo[0]; id < w.hi[0]; ++id) {
        for (i64 ih = w.lo[1]; ih < w.hi[1]; ++ih) {
          const T* xrow = xc + (id * g.in[1] + ih) * g.in[2];
          if (want_max) {
            for (i64 iw = w.lo[2]; iw < w.hi[2]; ++iw) {
              const float v = Tr::load(xrow[iw]);
              if (v > mx || std::isnan(v)) mx = std::isnan(mx) ? mx : v;
            }
          }
          if (want_avg)
            for (i64 iw = w.lo[2]; iw < w.hi[2]; ++iw) sum += Tr::load(xrow[iw]);
        }
      }
      orow[ow] = Tr::store(static_cast<float>(pool_value(p, mx, sum, w)));
    }
  };
  if (p.type != PoolingType::kMAX || OD != 1 || g.in[0] != 1 || g.k[0] != 1) {
    parallel_rows(rows, OW * g.kvol, [&](i64 r0, i64 r1) {
      for (i64 r = r0; r < r1; ++r) exact_row(r);
    });
    return;
  }
  // A 2-D max pool, tap by tap over a whole output row: for tap (ih, kw) the outputs whose
  // window holds it ([lo[kw], hi[kw]) of the row) take it as exact_row would (the taps in the
  // same order, `v > max` keeping the first of equal values), in a loop the compiler can
  // pipeline. A row that meets a NaN is recomputed by exact_row (which keeps the first NaN).
  const i64 H = g.in[1], W = g.in[2], KW = g.k[2], SW = g.s[2], PW = g.pre[2];
  std::vector<i64> lo(static_cast<std::size_t>(KW)), hi(static_cast<std::size_t>(KW));
  std::vector<unsigned char> empty(static_cast<std::size_t>(OW), 1);  // no tap inside in w
  for (i64 kw = 0; kw < KW; ++kw) {
    // ow * SW - PW + kw in [0, W)
    const i64 a = PW - kw, b = W - 1 + PW - kw;
    i64 first = a <= 0 ? 0 : (a + SW - 1) / SW, last = b < 0 ? -1 : b / SW;
    first = std::max<i64>(first, 0);
    last = std::min(last, OW - 1);
    lo[static_cast<std::size_t>(kw)] = first;
    hi[static_cast<std::size_t>(kw)] = std::max(first, last + 1);
    for (i64 ow = first; ow <= last; ++ow) empty[static_cast<std::size_t>(ow)] = 0;
  }
  parallel_rows(rows, OW * g.kvol, [&](i64 r0, i64 r1) {
    std::vector<float> acc(static_cast<std::size_t>(OW));
    for (i64 r = r0; r < r1; ++r) {
      const i64 oh = r % OH, nc = r / OH;
      const T* xc = xs + nc * g.in_sp;
      T* orow = os + r * OW;
      const i64 sh = oh * g.s[1] - g.pre[1];
      const i64 h0 = std::max<i64>(0, sh), h1 = std::min(H, sh + g.k[1]);
      std::fill(acc.begin(), acc.end(), -INFINITY);
      bool nan = false;
      for (i64 ih = h0; ih < h1; ++ih) {
        const T* xrow = xc + ih * W;
        for (i64 kw = 0; kw < KW; ++kw) {
          const i64 off = kw - PW, e = hi[static_cast<std::size_t>(kw)];
          for (i64 ow = lo[static_cast<std::size_t>(kw)]; ow < e; ++ow) {
            const float v = Tr::load(xrow[ow * SW + off]);
            nan |= v != v;
            acc[static_cast<std::size_t>(ow)] = v > acc[static_cast<std::size_t>(ow)] ? v : acc[static_cast<std::size_t>(ow)];
          }
        }
      }
      if (nan) {
        exact_row(r);
        continue;
      }
      const bool none = h1 <= h0;
      for (i64 ow = 0; ow < OW; ++ow)
        orow[ow] = Tr::store(none || empty[static_cast<std::size_t>(ow)] ? 0.f : acc[static_cast<std::size_t>(ow)]);
    }
  });
}

// Rows [r0, r1) of (n, od, oh) positions, OW outputs of C channels each; mx and sum hold C
// values of scratch.
template <class Tr>
void pool_channels_last_rows(const PoolingParams& p, const Geo& g, const std::array<i64, kS>& lim,
                             const typename Tr::T* xs, typename Tr::T* os, i64 r0, i64 r1, float* mx, double* sum) {
  const i64 C = g.C, OD = g.out[0], OH = g.out[1], OW = g.out[2];
  const bool want_max = p.type != PoolingType::kAVERAGE, want_avg = p.type != PoolingType::kMAX;
  for (i64 r = r0; r < r1; ++r) {
    const i64 oh = r % OH, od = (r / OH) % OD, n = r / (OH * OD);
    const auto* xn = xs + n * g.in_sp * C;
    for (i64 ow = 0; ow < OW; ++ow) {
      auto* o = os + (r * OW + ow) * C;
      const PoolWindow w = pool_window(g, lim, {od, oh, ow});
      if (w.count == 0) {
        for (i64 c = 0; c < C; ++c) o[c] = Tr::store(0.f);
        continue;
      }
      // exact_row's rule without branches (so the loops vectorize): the tap replaces the
      // maximum when greater or NaN, unless the maximum is already NaN.
      auto take = [](float f, float cur) { return (((f > cur) | (f != f)) & (cur == cur)) ? f : cur; };
      auto tap = [&](i64 id, i64 ih, i64 iw) { return xn + ((id * g.in[1] + ih) * g.in[2] + iw) * C; };
      i64 c0 = 0;  // channels below c0 are done
      if (p.type == PoolingType::kMAX) {
        // Blocks of 16 channels whose maxima stay in registers over the window's taps.
        for (; c0 + 16 <= C; c0 += 16) {
          float acc[16];
          for (int j = 0; j < 16; ++j) acc[j] = -INFINITY;
          for (i64 id = w.lo[0]; id < w.hi[0]; ++id)
            for (i64 ih = w.lo[1]; ih < w.hi[1]; ++ih)
              for (i64 iw = w.lo[2]; iw < w.hi[2]; ++iw) {
                const auto* v = tap(id, ih, iw) + c0;
#pragma omp simd
                for (int j = 0; j < 16; ++j) acc[j] = take(Tr::load(v[j]), acc[j]);
              }
#pragma omp simd
          for (int j = 0; j < 16; ++j) o[c0 + j] = Tr::store(acc[j]);
        }
        if (c0 == C) continue;
      }
      const i64 rest = C - c0;  // the other channels: their maxima (and sums) in scratch
      float* __restrict m = mx;
      double* __restrict su = sum;
      if (want_max) std::fill_n(m, rest, -INFINITY);
      if (want_avg) std::fill_n(su, rest, 0.0);
      for (i64 id = w.lo[0]; id < w.hi[0]; ++id)
        for (i64 ih = w.lo[1]; ih < w.hi[1]; ++ih)
          for (i64 iw = w.lo[2]; iw < w.hi[2]; ++iw) {
            const auto* v = tap(id, ih, iw) + c0;
            if (want_max) {
#pragma omp simd
              for (i64 c = 0; c < rest; ++c) m[c] = take(Tr::load(v[c]), m[c]);
            }
            if (want_avg)
              for (i64 c = 0; c < rest; ++c) su[c] += Tr::load(v[c]);
          }
      o += c0;
      if (p.type == PoolingType::kMAX) {  // pool_value is the maximum itself
#pragma omp simd
        for (i64 c = 0; c < rest; ++c) o[c] = Tr::store(m[c]);
      } else {
        for (i64 c = 0; c < rest; ++c) o[c] = Tr::store(static_cast<float>(pool_value(p, m[c], su[c], w)));
      }
    }
  }
}

// A float32 max pool's rows compiled for AVX-512 (16 lanes instead of SSE2's 4; everything it
// calls is inlined into it, flatten, and so compiled for it). Selecting and copying floats is
// exact in any width: the results are the baseline's bit for bit (a test compares them). Only
// for kMAX (no arithmetic on the values) and where avx512_kernels() holds.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TA_POOL_WIDE 1
[[gnu::target("avx512f,avx512dq,avx512bw,avx512vl"), gnu::flatten]] void max_pool_channels_last_rows_wide(
    const PoolingParams& p, const Geo& g, const std::array<i64, kS>& lim, const float* xs, float* os, i64 r0, i64 r1,
    float* mx, double* sum) {
  pool_channels_last_rows<F32>(p, g, lim, xs, os, r0, r1, mx, sum);
}
#endif

// The same pooling over channels-last values: x and out hold [N, spatial..., C] (their dims are
// the logical [N, C, spatial...]). Each output position walks its window's taps in exact_row's
// order for all C channels at once (a NaN sticks, the first of equal values is kept, the
// average's sum in double), so every element is the packed kernel's bit for bit (but for the sign
// of an average over NaNs of both signs, which follows the compiler's operand order in either);
// the channel loop is contiguous and vectorizes. A float32 max pool runs in AVX-512 where the CPU
// has it (TENSORACLE_POOL_NO_AVX512=1 keeps the baseline).
template <class Tr>
void pool_channels_last(const PoolingParams& p, const Geo& g, const TensorRef& x, const TensorRef& out) {
  using T = typename Tr::T;
  const auto* xs = static_cast<const T*>(x.data);
  auto* os = static_cast<T*>(out.data);
  const std::array<i64, kS> lim = pool_limits(g);
  const i64 rows = g.N * g.out[0] * g.out[1];  // (n, od, oh): OW positions of C channels each
  [[maybe_unused]] const bool wide = std::is_same_v<Tr, F32> && p.type == PoolingType::kMAX &&
                                     detail::avx512_kernels("TENSORACLE_POOL_NO_AVX512");
  parallel_rows(rows, g.out[2] * g.kvol * g.C, [&](i64 r0, i64 r1) {
    std::vector<float> mx(static_cast<std::size_t>(g.C));
    std::vector<double> sum(static_cast<std::size_t>(g.C));
#ifdef TA_POOL_WIDE
    if constexpr (std::is_same_v<Tr, F32>)
      if (wide) {
        max_pool_channels_last_rows_wide(p, g, lim, xs, os, r0, r1, mx.data(), sum.data());
        return;
      }
#endif
    pool_channels_last_rows<Tr>(p, g, lim, xs, os, r0, r1, mx.data(), sum.data());
  });
}

void check_float(const TensorRef& t, const char* kernel, const char* name) {
  if (!is_float_type(t.type))
    fail(std::string(kernel) + ": " + name + " has type " + tn(t.type) + "; it takes float32, float16 or bfloat16");
}

}  // namespace

// ---- entry points -------------------------------------------------------------------------------

std::size_t convolution_workspace_bytes(const ConvolutionParams& p, const TensorRef& x, const TensorRef& out) {
  // Sizing only: the buffers need not exist yet (the builder asks before allocating).
  check_float(x, "convolution", "input 0");
  const Geo g = conv_geo(p, x, out, nullptr, nullptr, "convolution");
  return static_cast<std::size_t>(conv_workspace(g, x.type).total()) * sizeof(float);
}

void convolution(const ConvolutionParams& p, const TensorRef& x, const TensorRef& kernel, const TensorRef* bias,
                 const TensorRef& out, void* workspace) {
  detail::checked_volume(x, "convolution", "input 0");
  detail::checked_volume(kernel, "convolution", "input 1 (kernel)");
  if (bias) detail::checked_volume(*bias, "convolution", "input 2 (bias)");
  const i64 n = detail::checked_volume(out, "convolution", "the output");
  check_float(x, "convolution", "input 0");
  const graph::TensorDesc kd{kernel.type, kernel.dims};
  graph::TensorDesc bd;
  if (bias) bd = {bias->type, bias->dims};
  const Geo g = conv_geo(p, x, out, &kd, bias ? &bd : nullptr, "convolution");
  if (n == 0) return;
  const ConvPath path = conv_path(g, x.type);
  const ConvWorkspace w = conv_workspace(g, x.type);
  if (w.total() > 0 && workspace == nullptr)
    fail("convolution: this convolution needs a workspace (convolution_workspace_bytes)");
  dispatch(x.type, [&](auto tr) {
    using Tr = decltype(tr);
    if (path == ConvPath::kDepthwise) conv_depthwise<Tr>(g, x, kernel, bias, out);
    else conv_gemm<Tr>(g, path, x, kernel, bias, out, static_cast<float*>(workspace));
  });
}

std::size_t deconvolution_workspace_bytes(const DeconvolutionParams& p, const TensorRef& x, const TensorRef& out) {
  check_float(x, "deconvolution", "input 0");
  const Geo g = deconv_geo(p, x, out, nullptr, nullptr, "deconvolution");
  return static_cast<std::size_t>(deconv_workspace(g, x.type).total()) * sizeof(float);
}

void deconvolution(const DeconvolutionParams& p, const TensorRef& x, const TensorRef& kernel, const TensorRef* bias,
                   const TensorRef& out, void* workspace) {
  detail::checked_volume(x, "deconvolution", "input 0");
  detail::checked_volume(kernel, "deconvolution", "input 1 (kernel)");
  if (bias) detail::checked_volume(*bias, "deconvolution", "input 2 (bias)");
  const i64 n = detail::checked_volume(out, "deconvolution", "the output");
  check_float(x, "deconvolution", "input 0");
  const graph::TensorDesc kd{kernel.type, kernel.dims};
  graph::TensorDesc bd;
  if (bias) bd = {bias->type, bias->dims};
  const Geo g = deconv_geo(p, x, out, &kd, bias ? &bd : nullptr, "deconvolution");
  if (n == 0) return;
  const DeconvWorkspace w = deconv_workspace(g, x.type);
  if (w.total() > 0 && workspace == nullptr)
    fail("deconvolution: this deconvolution needs a workspace (deconvolution_workspace_bytes)");
  dispatch(x.type, [&](auto tr) {
    using Tr = decltype(tr);
    deconv_gemm<Tr>(g, x, kernel, bias, out, static_cast<float*>(workspace));
  });
}

namespace {

// A pooling's checks and geometry, for the packed and the channels-last kernel.
void run_pooling(const PoolingParams& p, const TensorRef& x, const TensorRef& out, bool channels_last) {
  detail::checked_volume(x, "pooling", "input 0");
  const i64 n = detail::checked_volume(out, "pooling", "the output");
  check_float(x, "pooling", "input 0");
  if (x.dims.rank() < 3 || x.dims.rank() != p.window.rank() + 2)
    fail("pooling: input dims " + x.dims.str() + " do not match window " + p.window.str());
  if (p.type != PoolingType::kMAX && p.type != PoolingType::kAVERAGE && p.type != PoolingType::kMAX_AVERAGE_BLEND)
    fail("pooling: unknown pooling type " + std::to_string(static_cast<int>(p.type)));
  check_inference(p, "pooling", {{x.type, x.dims}}, out);
  if (n == 0) return;
  const Geo g = make_geo(x.dims, out.dims, p.window, p.stride, p.pre_padding, p.post_padding, Dims{}, p.padding_mode,
                         false, 1);
  dispatch(x.type, [&](auto tr) {
    if (channels_last) pool_channels_last<decltype(tr)>(p, g, x, out);
    else pool<decltype(tr)>(p, g, x, out);
  });
}

}  // namespace

void pooling(const PoolingParams& p, const TensorRef& x, const TensorRef& out) { run_pooling(p, x, out, false); }

void pooling_channels_last(const PoolingParams& p, const TensorRef& x, const TensorRef& out) {
  run_pooling(p, x, out, true);
}

}  // namespace tensoracle::cpu
