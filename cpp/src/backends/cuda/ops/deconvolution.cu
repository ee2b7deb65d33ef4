// The CUDA backend's deconvolution (transposed convolution; conv.h: DeconvolutionKernel) with the
// CPU's semantics (backends/cpu/ops/deconvolution.cpp): per-group strided GEMMs into float32
// columns, then a col2im gather that adds the bias and rounds once.
//
// Deconvolution: per chunk of images and per group, one strided-batched GEMM computes the
//   float32 columns col [K/g * kvol, input positions] = kernel_g^T [K/g * kvol, C/g] x x_g
//   [C/g, input positions] (as the CPU's deconv_gemm), then `col2im_kernel` gathers, for every
//   output element, the bias and each column entry that reaches it (in the CPU's order: kernel
//   taps ascending) in float32 and rounds once: a gather rather than the CPU's scatter, so no
//   atomics and a fixed order. When one image's columns exceed kChunkBytes, the GEMMs and the
//   gather run per block of output channels of one group (rows of the GEMM); when even one
//   channel's columns exceed it, per channel in tiles of input positions that accumulate into
//   a float32 plane (the output's own for float32), rounded once after the last tile.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cuda/conv.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/op_kernel.h"
#include "backends/cuda/window_util.cuh"
#include "graph/ops.h"
#include "tensoracle/errors.h"

namespace tensoracle::cuda {

namespace {

using namespace window;  // window_util.cuh

// Deconvolution col2im as a gather, over the output channels [kbase, kbase + kb) of a chunk's
// nb images. col[i][kc][(kd, kh, kw)][q - q0] (float32, q0 <= q < q0 + qt) holds the
// contribution of input position q to output channel kbase + kc at offset (kd, kh, kw) from q's
// window origin. Every output element adds the entries that reach it, in tap order (the CPU's
// col2im row order). kAcc (one image, one channel, a tile of input positions): starts from
// acc[l] (float32) and stores back there; else starts from the bias and rounds once into
// out[i][kbase + kc][o] (out: the chunk's first image).
template <class Tag, class I, bool kAcc>
__global__ void __launch_bounds__(kThreads)
    col2im_kernel(const float* __restrict__ col, const typename Tag::T* __restrict__ bias, typename Tag::T* __restrict__ out,
                  float* __restrict__ acc, I total, Geo g, I kbase, I kb, I q0, I qt) {
  using S = Coord<I>;
  const I OW = static_cast<I>(g.out[2]), OH = static_cast<I>(g.out[1]), OSP = static_cast<I>(g.out_sp);
  const I K = static_cast<I>(g.K), kvol = static_cast<I>(g.kvol);
  const S ID = static_cast<S>(g.in[0]), IH = static_cast<S>(g.in[1]), IW = static_cast<S>(g.in[2]);
  const S k0 = static_cast<S>(g.k[0]), k1 = static_cast<S>(g.k[1]), k2 = static_cast<S>(g.k[2]);
  const S s0 = static_cast<S>(g.s[0]), s1 = static_cast<S>(g.s[1]), s2 = static_cast<S>(g.s[2]);
  const S d0 = static_cast<S>(g.d[0]), d1 = static_cast<S>(g.d[1]), d2 = static_cast<S>(g.d[2]);
  const S lo = static_cast<S>(q0), hi = static_cast<S>(q0 + qt);
  CONV_GRID_LOOP(I, l, total) {
    const I o = l % OSP, t = l / OSP, kc = t % kb, i = t / kb;
    const I k = kbase + kc;
    const S ow = static_cast<S>(o % OW), oh = static_cast<S>((o / OW) % OH), od = static_cast<S>(o / (OW * OH));
    float a;
    if constexpr (kAcc) a = acc[l];
    else a = bias ? Tag::load(bias[k]) : 0.f;
    const float* rows = col + (i * kb + kc) * kvol * qt;
    for (S kd = 0; kd < k0; ++kd) {
      const S td = od + static_cast<S>(g.pre[0]) - kd * d0;  // = id * s0
      if (td < 0 || td % s0 != 0) continue;
      const S id = td / s0;
      if (id >= ID) continue;
      for (S kh = 0; kh < k1; ++kh) {
        const S th = oh + static_cast<S>(g.pre[1]) - kh * d1;
        if (th < 0 || th % s1 != 0) continue;
        const S ih = th / s1;
        if (ih >= IH) continue;
        for (S kw = 0; kw < k2; ++kw) {
          const S tw = ow + static_cast<S>(g.pre[2]) - kw * d2;
          if (tw < 0 || tw % s2 != 0) continue;
          const S iw = tw / s2;
          if (iw >= IW) continue;
          const S q = (id * IH + ih) * IW + iw;
          if (kAcc && (q < lo || q >= hi)) continue;
          a += rows[static_cast<I>((kd * k1 + kh) * k2 + kw) * qt + static_cast<I>(q - lo)];
        }
      }
    }
    if constexpr (kAcc) acc[l] = a;
    else out[(i * K + k) * OSP + o] = Tag::store(a);
  }
}

// acc (rows of P) = bias[row] (zero without one), in float32: the start of a tiled deconvolution
// output channel (bias points at its channel's value).
template <class Tag, class I>
__global__ void __launch_bounds__(kThreads)
    acc_init_kernel(float* __restrict__ acc, const typename Tag::T* __restrict__ bias, I total, I P) {
  CONV_GRID_LOOP(I, l, total) acc[l] = bias ? Tag::load(bias[l / P]) : 0.f;
}

template <class Tag, class I>
__global__ void __launch_bounds__(kThreads)
    round_kernel(const float* __restrict__ acc, typename Tag::T* __restrict__ out, I total) {
  CONV_GRID_LOOP(I, l, total) out[l] = Tag::store(acc[l]);
}

}  // namespace

// ---- deconvolution -----------------------------------------------------------------------------

namespace {

// How a deconvolution's float32 columns (4 * kvol bytes per image, output channel and input
// position) are covered by chunks of at most kChunkBytes:
//   kImages    `images` whole images (all output channels, all input positions) at a time;
//   kChannels  one image and a block of `channels` output channels of one group;
//   kTiles     one image and one output channel, in tiles of `tile` input positions, which
//              accumulate into a float32 plane (the output's own for float32, else one in the
//              workspace) rounded once after the last tile.
// The column bytes of any chunk are at most 4 * kvol * min(N * K * Q, max(1, kChunkBytes /
// (4 * kvol))), which grows with N and Q (the builder sizes at the largest shapes).
struct DeconvPlan {
  enum Mode { kImages, kChannels, kTiles } mode = kImages;
  i64 images = 1, channels = 0, tile = 0;
  std::size_t total = 0;  // workspace bytes
};

DeconvPlan deconv_plan(const Geo& g, DataType t) {
  DeconvPlan z;
  if (g.N == 0 || g.K == 0 || g.out_sp == 0) return z;
  const i64 cap = static_cast<i64>(kChunkBytes), unit = 4 * g.kvol, Q = g.in_sp;
  if (g.K * Q * unit <= cap) {
    z.mode = DeconvPlan::kImages;
    z.images = std::clamp<i64>(cap / std::max<i64>(1, g.K * Q * unit), 1, std::min(g.N, kMaxBatch));
    z.channels = g.K;
    z.tile = Q;
  } else if (Q * unit <= cap) {
    z.mode = DeconvPlan::kChannels;
    z.channels = std::clamp<i64>(cap / (Q * unit), 1, g.Kg);
    z.tile = Q;
  } else {
    z.mode = DeconvPlan::kTiles;
    z.channels = 1;
    z.tile = std::max<i64>(1, cap / unit);
  }
  z.total = kGemmWorkspaceBytes + kAlign +
            static_cast<std::size_t>(unit * std::min(g.N * g.K * Q, std::max<i64>(1, cap / unit)));
  if (Q * unit > cap && t != DataType::kFLOAT) z.total += kAlign + static_cast<std::size_t>(4 * g.out_sp);
  return z;
}

}  // namespace

DeconvolutionKernel::DeconvolutionKernel(cublasLtHandle_t handle, std::string node_name, DeconvolutionParams p)
    : name_(std::move(node_name)), params_(std::move(p)), gemm_(std::make_unique<StridedGemm>(handle, name_)) {}

DeconvolutionKernel::~DeconvolutionKernel() = default;

std::size_t DeconvolutionKernel::workspace_bytes(const TensorRef& x, const TensorRef& /*kernel: implied by params*/,
                                                 const TensorRef& out) const {
  // Sizing only: the buffers need not exist yet (the builder asks before allocating).
  check_float(x, "deconvolution", "input 0");
  const Geo g = window_geo(params_, x, out, nullptr, nullptr, "deconvolution", true);
  return deconv_plan(g, x.type).total;
}

void DeconvolutionKernel::run(const TensorRef& x, const TensorRef& kernel, const TensorRef* bias, const TensorRef& out,
                              void* workspace, cudaStream_t stream) const {
  i64 n = 0;
  const Geo g = backends::common::check_conv(dev::kFail, params_, x, kernel, bias, out, "deconvolution", true, n);
  if (n == 0) return;
  const DeconvPlan z = deconv_plan(g, x.type);
  if (z.total > 0 && workspace == nullptr)
    fail("deconvolution: this deconvolution needs a workspace (DeconvolutionKernel::workspace_bytes)");
  const bool gsmall = geo_small(g);
  const i64 Q = g.in_sp, OSP = g.out_sp, rows = g.Kg * g.kvol;  // a group's GEMM rows: (kk, kd, kh, kw)
  by_float(x.type, [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::T;
    constexpr bool narrow = !std::is_same_v<Tag, dev::F32>;
    const T* xs = static_cast<const T*>(x.data);
    const T* ws = static_cast<const T*>(kernel.data);
    const T* bs = bias ? static_cast<const T*>(bias->data) : nullptr;
    T* os = static_cast<T*>(out.data);

    if (g.Cg == 0) {  // no input channels: the bias alone
      by_index(all_small({n}), [&](auto ix) {
        using I = decltype(ix);
        bias_fill_kernel<Tag, I><<<blocks_for(n), kThreads, 0, stream>>>(os, bs, static_cast<I>(n), static_cast<I>(OSP),
                                                                          static_cast<I>(g.K));
      });
      check_launch("deconvolution (bias)");
      return;
    }

    std::byte* wsp = static_cast<std::byte*>(workspace);
    std::byte* base = wsp + kGemmWorkspaceBytes;
    float* col = reinterpret_cast<float*>(base);
    // The columns of output channels [k0, k0 + kb) of group grp (as CPU's deconv_gemm, a slice
    // of its rows): col[i][(kk - k0, kd, kh, kw)][q - q0] = sum over the group's input channels c
    // of kernel[grp * Cg + c][kk][kd, kh, kw] * x[n0 + i][grp * Cg + c][q], for the chunk's nb
    // images (the images' columns `col_stride` elements apart).
    auto gemm = [&](i64 n0, i64 nb, i64 grp, i64 k0, i64 kb, i64 q0, i64 qt, float* c, i64 col_stride) {
      StridedGemm::Shape s;
      s.trans_a = true;  // the kernel's group block is stored [C/g, rows]
      s.M = kb * g.kvol;
      s.N = qt;
      s.K = g.Cg;
      s.lda = rows;
      s.ldb = Q;
      s.ldc = qt;
      s.batch = nb;
      s.stride_b = g.C * Q;
      s.stride_c = col_stride;
      s.ab = x.type;
      s.c_float = true;
      gemm_->run(s, offset(ws, grp * g.Cg * rows + k0 * g.kvol), offset(xs, (n0 * g.C + grp * g.Cg) * Q + q0), c, wsp,
                 stream);
    };
    // Gathers output channels [kbase, kbase + kb) of nb images from whole-image columns.
    auto gather = [&](i64 n0, i64 nb, i64 kbase, i64 kb) {
      const i64 total = nb * kb * OSP;
      by_index(gsmall && all_small({total, nb * g.K * OSP, nb * kb * g.kvol * Q}), [&](auto ix) {
        using I = decltype(ix);
        col2im_kernel<Tag, I, false><<<blocks_for(total), kThreads, 0, stream>>>(
            col, bs, offset(os, n0 * g.K * OSP), nullptr, static_cast<I>(total), g, static_cast<I>(kbase),
            static_cast<I>(kb), I{0}, static_cast<I>(Q));
      });
      check_launch("deconvolution (col2im)");
    };

    if (z.mode == DeconvPlan::kImages) {
      for (i64 n0 = 0; n0 < g.N; n0 += z.images) {
        const i64 nb = std::min(z.images, g.N - n0);
        for (i64 grp = 0; grp < g.groups; ++grp)
          gemm(n0, nb, grp, 0, g.Kg, 0, Q, offset(col, grp * rows * Q), g.K * g.kvol * Q);
        gather(n0, nb, 0, g.K);
      }
      return;
    }
    if (z.mode == DeconvPlan::kChannels) {
      for (i64 n0 = 0; n0 < g.N; ++n0)
        for (i64 grp = 0; grp < g.groups; ++grp)
          for (i64 k0 = 0; k0 < g.Kg; k0 += z.channels) {
            const i64 kb = std::min(z.channels, g.Kg - k0);
            gemm(n0, 1, grp, k0, kb, 0, Q, col, 0);
            gather(n0, 1, grp * g.Kg + k0, kb);
          }
      return;
    }
    // kTiles: one output channel of one image at a time, in tiles of input positions.
    const bool small = gsmall && all_small({OSP, g.kvol * z.tile});
    float* plane = reinterpret_cast<float*>(align_up(base + 4 * g.kvol * z.tile));
    for (i64 n0 = 0; n0 < g.N; ++n0)
      for (i64 k = 0; k < g.K; ++k) {
        const i64 grp = k / g.Kg;
        T* dst = offset(os, (n0 * g.K + k) * OSP);
        float* acc = narrow ? plane : reinterpret_cast<float*>(dst);
        by_index(small, [&](auto ix) {
          using I = decltype(ix);
          acc_init_kernel<Tag, I><<<blocks_for(OSP), kThreads, 0, stream>>>(acc, bs ? bs + k : nullptr,
                                                                             static_cast<I>(OSP), static_cast<I>(OSP));
        });
        check_launch("deconvolution (bias)");
        for (i64 q0 = 0; q0 < Q; q0 += z.tile) {
          const i64 qt = std::min(z.tile, Q - q0);
          gemm(n0, 1, grp, k % g.Kg, 1, q0, qt, col, 0);
          by_index(small, [&](auto ix) {
            using I = decltype(ix);
            col2im_kernel<Tag, I, true><<<blocks_for(OSP), kThreads, 0, stream>>>(
                col, bs, nullptr, acc, static_cast<I>(OSP), g, static_cast<I>(k), I{1}, static_cast<I>(q0),
                static_cast<I>(qt));
          });
          check_launch("deconvolution (col2im)");
        }
        if constexpr (narrow) {
          by_index(small, [&](auto ix) {
            using I = decltype(ix);
            round_kernel<Tag, I><<<blocks_for(OSP), kThreads, 0, stream>>>(acc, dst, static_cast<I>(OSP));
          });
          check_launch("deconvolution (rounding)");
        }
      }
  });
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

namespace {

struct DeconvolutionState final : OpState {
  std::unique_ptr<DeconvolutionKernel> deconv;
};

OpPrepared prepare_deconvolution(const OpSetup& setup) {
  auto state = std::make_unique<DeconvolutionState>();
  state->deconv = std::make_unique<DeconvolutionKernel>(setup.lt, setup.node.name,
                                                        std::get<DeconvolutionParams>(setup.node.params));
  OpPrepared r;
  r.state = std::move(state);
  return r;
}

const DeconvolutionKernel& deconv_of(const OpCall& c) { return *static_cast<const DeconvolutionState&>(*c.state).deconv; }

}  // namespace

extern const OpKernel kDeconvolutionKernel = {
    LayerType::kDECONVOLUTION, prepare_deconvolution,
    [](const OpCall& c) { return deconv_of(c).workspace_bytes(ref(c.in[0]), ref(c.in[1]), ref(c.out)); },
    [](const OpCall& c) {
      TensorRef bias = c.node.inputs.size() > 2 ? ref(c.in[2]) : TensorRef{};
      deconv_of(c).run(ref(c.in[0]), ref(c.in[1]), c.node.inputs.size() > 2 ? &bias : nullptr, ref(c.out), c.workspace,
                       c.stream);
    }};

}  // namespace ops

}  // namespace tensoracle::cuda
