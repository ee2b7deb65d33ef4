// The CPU backend's convolution (kernels.h), on NCHW-style layouts with 1, 2 or 3 spatial dims
// normalized to 3 (window_util.h: geometry, GEMM and task helpers shared with deconvolution and
// pooling).
// - Convolution: per (batch, group), the group's kernel [K/g, C/g * kvol] times an im2col
//   matrix [C/g * kvol, T] of T output positions (OpenBLAS sgemm); T tiles the output so that
//   the column buffer stays in cache, and small outputs put several images side by side in one
//   GEMM. A 1x1, stride-1, unpadded float32 convolution multiplies the input directly (no
//   im2col); a convolution with one input channel per group (depthwise) runs direct loops over
//   output rows. Bias is written into C first and sgemm accumulates onto it (beta = 1).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/op_kernel.h"
#include "backends/cpu/kernels_util.h"
#include "backends/cpu/window_util.h"
#include "graph/ops.h"

namespace tensoracle::cpu {

namespace {

using namespace window;  // window_util.h

// Outputs of fewer positions than this put several images side by side in one GEMM (up to
// twice this many positions): deep layers' small outputs would make narrow GEMMs.
constexpr i64 kMergeBelow = 1024;

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

}  // namespace

std::size_t convolution_workspace_bytes(const ConvolutionParams& p, const TensorRef& x, const TensorRef& out) {
  // Sizing only: the buffers need not exist yet (the builder asks before allocating).
  check_float(x, "convolution", "input 0");
  const Geo g = backends::common::conv_geo(detail::kFail, p, x, out, nullptr, nullptr, "convolution", false);
  return static_cast<std::size_t>(conv_workspace(g, x.type).total()) * sizeof(float);
}

void convolution(const ConvolutionParams& p, const TensorRef& x, const TensorRef& kernel, const TensorRef* bias,
                 const TensorRef& out, void* workspace) {
  i64 n = 0;
  const Geo g = backends::common::check_conv(detail::kFail, p, x, kernel, bias, out, "convolution", false, n);
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

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kConvolutionKernel = {
    LayerType::kCONVOLUTION, nullptr,
    [](const OpCall& c) {
      return convolution_workspace_bytes(std::get<ConvolutionParams>(c.node.params), ref(c.in[0]), ref(c.out));
    },
    [](const OpCall& c) {
      TensorRef bias = c.node.inputs.size() > 2 ? ref(c.in[2]) : TensorRef{};
      convolution(std::get<ConvolutionParams>(c.node.params), ref(c.in[0]), ref(c.in[1]),
                  c.node.inputs.size() > 2 ? &bias : nullptr, ref(c.out), c.workspace);
    }};

}  // namespace ops

}  // namespace tensoracle::cpu
