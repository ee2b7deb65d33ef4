// The CPU backend's deconvolution (transposed convolution; kernels.h), on NCHW-style layouts with
// 1, 2 or 3 spatial dims normalized to 3 (window_util.h).
// - Deconvolution: per (batch, group), col [K/g * kvol, T] = kernel_g^T [K/g * kvol, C/g] x
//   input tile [C/g, T] (sgemm), then col2im adds every column into the output it reaches.
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

}  // namespace

std::size_t deconvolution_workspace_bytes(const DeconvolutionParams& p, const TensorRef& x, const TensorRef& out) {
  check_float(x, "deconvolution", "input 0");
  const Geo g = backends::common::conv_geo(detail::kFail, p, x, out, nullptr, nullptr, "deconvolution", true);
  return static_cast<std::size_t>(deconv_workspace(g, x.type).total()) * sizeof(float);
}

void deconvolution(const DeconvolutionParams& p, const TensorRef& x, const TensorRef& kernel, const TensorRef* bias,
                   const TensorRef& out, void* workspace) {
  i64 n = 0;
  const Geo g = backends::common::check_conv(detail::kFail, p, x, kernel, bias, out, "deconvolution", true, n);
  if (n == 0) return;
  const DeconvWorkspace w = deconv_workspace(g, x.type);
  if (w.total() > 0 && workspace == nullptr)
    fail("deconvolution: this deconvolution needs a workspace (deconvolution_workspace_bytes)");
  dispatch(x.type, [&](auto tr) {
    using Tr = decltype(tr);
    deconv_gemm<Tr>(g, x, kernel, bias, out, static_cast<float*>(workspace));
  });
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kDeconvolutionKernel = {
    LayerType::kDECONVOLUTION, nullptr,
    [](const OpCall& c) {
      return deconvolution_workspace_bytes(std::get<DeconvolutionParams>(c.node.params), ref(c.in[0]), ref(c.out));
    },
    [](const OpCall& c) {
      TensorRef bias = c.node.inputs.size() > 2 ? ref(c.in[2]) : TensorRef{};
      deconvolution(std::get<DeconvolutionParams>(c.node.params), ref(c.in[0]), ref(c.in[1]),
                    c.node.inputs.size() > 2 ? &bias : nullptr, ref(c.out), c.workspace);
    }};

}  // namespace ops

}  // namespace tensoracle::cpu
