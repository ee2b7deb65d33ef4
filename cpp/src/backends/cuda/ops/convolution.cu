// The CUDA backend's convolution (conv.h: ConvolutionKernel) with the CPU's semantics
// (backends/cpu/ops/convolution.cpp): depthwise and im2col + GEMM kernels, the cuDNN path with
// its channels-last copies, and the direct kernel of few input channels (tensor cores).
//
// Convolution (NCHW-style, 1 to 3 spatial dims normalized to 3 as the CPU's Geo, groups,
// dilation, strides, every PaddingMode through graph::window_pre_padding):
//   - one input channel per group (depthwise, as the CPU's conv_depthwise): a direct kernel, one
//     thread per output element, bias first then the taps in (kd, kh, kw) order, in float32;
//   - otherwise im2col + GEMM: per chunk of images, `im2col_kernel` writes the columns
//     [image][group][C/g * kvol][positions] in the input's own type (a copy: exact), and per
//     group one strided-batched cuBLASLt GEMM over the chunk's images multiplies the group's
//     kernel [K/g, C/g * kvol] (batch stride 0) by them. An unpadded 1x1 stride-1 convolution
//     multiplies the input in place (no im2col). float32 GEMMs write the output directly (its
//     leading dimension is the image's positions, batch stride K * positions) and a pass adds
//     the bias; float16 / bfloat16 GEMMs write float32 results (cuBLASLt's mixed A/B 16-bit,
//     C/D float32 GEMM) into the workspace and one pass adds the bias and rounds once. When one
//     image's columns exceed kChunkBytes, that image is processed in tiles of output positions.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cuda/conv.h"
#include "backends/cuda/cudnn_conv.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/layouts.h"
#include "backends/cuda/op_kernel.h"
#include "backends/cuda/window_util.cuh"
#include "graph/ops.h"
#include "tensoracle/errors.h"

namespace tensoracle::cuda {

namespace {

using namespace window;  // window_util.cuh

// ---- chunking ----------------------------------------------------------------------------------

// How a buffer of `bpp` bytes per position (of `P` per image, `N` images) is covered by chunks of
// at most kChunkBytes: `images` whole images at a time, or (one image exceeds it) `tile`
// positions of one image. The bytes any chunk uses are at most chunk_bound(N, P, bpp), which
// grows with N and P: the builder sizes the workspace at the profile's largest shapes.
struct Chunk {
  i64 images = 1;
  i64 tile = 0;  // positions per chunk (P unless one image is split)
};

Chunk chunk_for(i64 N, i64 P, i64 bpp) {
  const i64 cap = static_cast<i64>(kChunkBytes);
  if (bpp == 0) return {std::clamp<i64>(N, 1, kMaxBatch), P};
  if (P * bpp <= cap) return {std::clamp<i64>(cap / (P * bpp), 1, std::min(N, kMaxBatch)), P};
  return {1, std::max<i64>(1, cap / bpp)};
}

i64 chunk_bound(i64 N, i64 P, i64 bpp) {
  if (bpp == 0) return 0;
  return bpp * std::min(N * P, std::max<i64>(1, static_cast<i64>(kChunkBytes) / bpp));
}

// The im2col columns of a chunk: col[i][g][r][q] for images i < nb of the chunk (x points at its
// first image), groups g, rows r = (c, kd, kh, kw) of the group's C/g channels, and positions
// q < pt starting at output position p0; zero where the window reads padding. Copies elements
// of the input's type (exact).
template <class Tag, class I>
__global__ void __launch_bounds__(kThreads)
    im2col_kernel(const typename Tag::T* __restrict__ x, typename Tag::T* __restrict__ col, I total, Geo g, I pt, I p0) {
  using S = Coord<I>;
  const I R = static_cast<I>(g.Cg * g.kvol), kvol = static_cast<I>(g.kvol), G = static_cast<I>(g.groups);
  const I k12 = static_cast<I>(g.k[1] * g.k[2]), k1 = static_cast<I>(g.k[1]), k2 = static_cast<I>(g.k[2]);
  const I OW = static_cast<I>(g.out[2]), OH = static_cast<I>(g.out[1]);
  const S ID = static_cast<S>(g.in[0]), IH = static_cast<S>(g.in[1]), IW = static_cast<S>(g.in[2]);
  const typename Tag::T zero = Tag::store(0.f);
  CONV_GRID_LOOP(I, l, total) {
    const I q = l % pt;
    I t = l / pt;
    const I r = t % R;
    t /= R;
    const I grp = t % G, i = t / G;
    const I c = r / kvol, kr = r % kvol;
    const S kd = static_cast<S>(kr / k12), kh = static_cast<S>((kr / k2) % k1), kw = static_cast<S>(kr % k2);
    const I p = p0 + q;
    const S ow = static_cast<S>(p % OW), oh = static_cast<S>((p / OW) % OH), od = static_cast<S>(p / (OW * OH));
    const S id = od * static_cast<S>(g.s[0]) - static_cast<S>(g.pre[0]) + kd * static_cast<S>(g.d[0]);
    const S ih = oh * static_cast<S>(g.s[1]) - static_cast<S>(g.pre[1]) + kh * static_cast<S>(g.d[1]);
    const S iw = ow * static_cast<S>(g.s[2]) - static_cast<S>(g.pre[2]) + kw * static_cast<S>(g.d[2]);
    typename Tag::T v = zero;
    if (id >= 0 && id < ID && ih >= 0 && ih < IH && iw >= 0 && iw < IW) {
      const I channel = i * static_cast<I>(g.C) + grp * static_cast<I>(g.Cg) + c;
      v = x[channel * static_cast<I>(g.in_sp) + static_cast<I>((id * IH + ih) * IW + iw)];
    }
    col[l] = v;
  }
}

// Depthwise convolution (one input channel per group, K/groups maps per channel), one thread
// per output element: the bias, then every tap in (kd, kh, kw) order, in float32.
template <class Tag, class I>
__global__ void __launch_bounds__(kThreads)
    depthwise_kernel(const typename Tag::T* __restrict__ x, const typename Tag::T* __restrict__ w,
                     const typename Tag::T* __restrict__ bias, typename Tag::T* __restrict__ out, I total, Geo g) {
  using S = Coord<I>;
  const I OW = static_cast<I>(g.out[2]), OH = static_cast<I>(g.out[1]), OD = static_cast<I>(g.out[0]);
  const I K = static_cast<I>(g.K), Kg = static_cast<I>(g.Kg);
  const S ID = static_cast<S>(g.in[0]), IH = static_cast<S>(g.in[1]), IW = static_cast<S>(g.in[2]);
  const S k0 = static_cast<S>(g.k[0]), k1 = static_cast<S>(g.k[1]), k2 = static_cast<S>(g.k[2]);
  CONV_GRID_LOOP(I, l, total) {
    I t = l;
    const S ow = static_cast<S>(t % OW);
    t /= OW;
    const S oh = static_cast<S>(t % OH);
    t /= OH;
    const S od = static_cast<S>(t % OD);
    t /= OD;
    const I k = t % K, n = t / K;
    const typename Tag::T* xc = x + (n * static_cast<I>(g.C) + k / Kg) * static_cast<I>(g.in_sp);
    const typename Tag::T* wk = w + k * static_cast<I>(g.kvol);
    float acc = bias ? Tag::load(bias[k]) : 0.f;
    for (S kd = 0; kd < k0; ++kd) {
      const S id = od * static_cast<S>(g.s[0]) - static_cast<S>(g.pre[0]) + kd * static_cast<S>(g.d[0]);
      if (id < 0 || id >= ID) continue;
      for (S kh = 0; kh < k1; ++kh) {
        const S ih = oh * static_cast<S>(g.s[1]) - static_cast<S>(g.pre[1]) + kh * static_cast<S>(g.d[1]);
        if (ih < 0 || ih >= IH) continue;
        const typename Tag::T* xrow = xc + (id * IH + ih) * IW;
        const typename Tag::T* wrow = wk + (kd * k1 + kh) * k2;
        for (S kw = 0; kw < k2; ++kw) {
          const S iw = ow * static_cast<S>(g.s[2]) - static_cast<S>(g.pre[2]) + kw * static_cast<S>(g.d[2]);
          if (iw < 0 || iw >= IW) continue;
          acc += Tag::load(wrow[kw]) * Tag::load(xrow[iw]);
        }
      }
    }
    out[l] = Tag::store(acc);
  }
}

// A float16/bfloat16 convolution chunk's float32 GEMM result tmp[i][k][q] (q < pt) plus the bias,
// rounded once into the output (`out` points at the chunk's first image and position; images
// are K * P elements apart).
template <class Tag, class I>
__global__ void __launch_bounds__(kThreads)
    conv_store_kernel(const float* __restrict__ tmp, const typename Tag::T* __restrict__ bias,
                      typename Tag::T* __restrict__ out, I total, I pt, I K, I P) {
  CONV_GRID_LOOP(I, l, total) {
    const I q = l % pt, t = l / pt, k = t % K, i = t / K;
    const float b = bias ? Tag::load(bias[k]) : 0.f;
    out[(i * K + k) * P + q] = Tag::store(tmp[l] + b);
  }
}

}  // namespace

// ---- convolution -------------------------------------------------------------------------------

namespace {

enum class ConvPath { kDepthwise, kPointwise, kIm2col };

ConvPath conv_path(const Geo& g) {
  if (g.Cg == 1 && g.groups > 1) return ConvPath::kDepthwise;
  bool pointwise = g.kvol == 1;
  for (int i = 0; i < kS; ++i) pointwise = pointwise && g.s[i] == 1 && g.pre[i] == 0 && g.in[i] == g.out[i];
  return pointwise ? ConvPath::kPointwise : ConvPath::kIm2col;
}

// A convolution's workspace: cuBLASLt's scratch, then per chunk the im2col columns (col_pp bytes
// per output position) and, float16/bfloat16, the float32 GEMM result (tmp_pp bytes per
// position, 256-aligned after the columns).
struct ConvSizing {
  ConvPath path = ConvPath::kIm2col;
  i64 col_pp = 0, tmp_pp = 0;
  std::size_t total = 0;
};

ConvSizing conv_sizing(const Geo& g, DataType t) {
  ConvSizing z;
  z.path = conv_path(g);
  if (g.N == 0 || g.K == 0 || g.out_sp == 0 || z.path == ConvPath::kDepthwise) return z;
  if (z.path == ConvPath::kIm2col) z.col_pp = g.C * g.kvol * static_cast<i64>(element_size(t));
  if (t != DataType::kFLOAT) z.tmp_pp = 4 * g.K;
  const i64 bpp = z.col_pp + z.tmp_pp;
  z.total = kGemmWorkspaceBytes + (bpp > 0 ? kAlign + static_cast<std::size_t>(chunk_bound(g.N, g.out_sp, bpp)) : 0);
  return z;
}

// The cuDNN path's workspace: cuDNN's own, then for a channels-last plan the copies of x, of
// the kernel (channels padded to the plan's count) and of y at the plan's problem (the only
// one it runs), each 256-byte aligned.
struct CudnnLayout {
  std::size_t x = 0, w = 0, y = 0, total = 0;  // offsets of the copies; the bytes in all
};
CudnnLayout cudnn_layout(const CudnnConvShape& s, std::size_t dnn_workspace) {
  auto up = [](std::size_t b) { return (b + kAlign - 1) / kAlign * kAlign; };
  CudnnLayout l;
  l.total = dnn_workspace;
  if (s.channels_last == 0) return l;
  auto bytes = [&](const std::vector<i64>& dims, i64 channels) {  // [N, channels, spatial...]
    i64 v = dims[0] * channels;
    for (std::size_t i = 2; i < dims.size(); ++i) v *= dims[i];
    return up(element_size(s.type) * static_cast<std::size_t>(v));
  };
  l.x = up(dnn_workspace);
  l.w = l.x + bytes(s.x, s.channels_last);
  l.y = l.w + bytes(s.w, s.channels_last);
  l.total = l.y + bytes(s.y, s.y[1]);
  return l;
}

// ---- direct convolution of few input channels (cudnn_tactic.h: configuration "direct") -------
//
// An image's first layer (3 channels, padded to 4) as an implicit GEMM on the tensor cores
// (mma.sync m16n8k16, float16/bfloat16 products summed in float32): x channels-last [N, H, W, 4],
// the kernel channels-last [K, R, S, 4] (both the copies a channels-last plan makes), y
// channels-last [N, OH, OW, K]. A block owns 64 output channels (blockIdx.y) and walks work
// items of 128 output positions of one output row (4 warps x 32 positions): the block's
// kernels sit in shared memory in fragment order ([k16 block][n-tile][lane] pairs of words,
// k = tap * 4 + channel, zeros past the last tap), and each item's input rows (R rows of the
// 127 * stride + S columns its windows read, zeros outside the image) are copied with cp.async
// into one of two tiles while the block computes the other. The bias is added in float32 and
// the result rounded once (then a ReLU, which commutes with the rounding); the CPU rounds once
// too, so only the summation order differs.
struct DirectArgs {
  int N, H, W, K, R, S, OH, OW, sh, sw, ph, pw, taps, kb, tile_w, segs;
  bool relu;
};
constexpr int kDirectSegment = 128, kDirectThreads = 128;

template <class T>
struct Mma16816 {
  __device__ static void run(float* d, const u32* a, const u32* b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if constexpr (std::is_same_v<T, __half>)
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    __trap();  // the backend's architectures are sm80 and newer
#endif
  }
};

__device__ __forceinline__ void cp_async8(void* dst, const void* src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 8 : 0));
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

template <class Tag>
__global__ void __launch_bounds__(kDirectThreads)
    direct_conv_kernel(const typename Tag::T* __restrict__ x, const typename Tag::T* __restrict__ w,
                       const typename Tag::T* __restrict__ bias, typename Tag::T* __restrict__ y, DirectArgs a) {
  using T = typename Tag::T;
  extern __shared__ __align__(16) unsigned char direct_smem[];
  uint2* frag = reinterpret_cast<uint2*>(direct_smem);  // [kb][8][32]
  float* bsm = reinterpret_cast<float*>(direct_smem + static_cast<std::size_t>(a.kb) * 2048);
  int* offs = reinterpret_cast<int*>(bsm + 64);
  uint2* tiles = reinterpret_cast<uint2*>(direct_smem + static_cast<std::size_t>(a.kb) * 2048 + 256 + a.kb * 16);
  const int tile_px = a.R * a.tile_w;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int n0 = blockIdx.y * 64, real = a.taps * 4;
  const u32* w32 = reinterpret_cast<const u32*>(w);
  for (int i = tid; i < a.kb * 256; i += kDirectThreads) {
    const int l = i & 31, j = (i >> 5) & 7, kb = i >> 8;
    const int k = kb * 16 + 2 * (l & 3);
    const std::size_t row = static_cast<std::size_t>(n0 + j * 8 + (l >> 2)) * real;
    frag[i] = make_uint2(k < real ? w32[(row + k) >> 1] : 0u, k + 8 < real ? w32[(row + k + 8) >> 1] : 0u);
  }
  if (tid < 64) bsm[tid] = bias ? Tag::load(bias[n0 + tid]) : 0.f;
  for (int i = tid; i < a.kb * 4; i += kDirectThreads) {
    const int kh = i / a.S, kw = i - kh * a.S;
    offs[i] = i < a.taps ? (kh * a.tile_w + kw) * 2 : -1;  // 32-bit words into a tile; -1: a padded tap
  }
  const int items = a.N * a.OH * a.segs;
  const uint2* x8 = reinterpret_cast<const uint2*>(x);
  auto load = [&](int item, int buf) {
    const int seg = item % a.segs, row = item / a.segs;
    const int oh = row % a.OH, b = row / a.OH;
    const int ih0 = oh * a.sh - a.ph, iw0 = seg * kDirectSegment * a.sw - a.pw;
    uint2* dst = tiles + buf * tile_px;
    for (int r = 0; r < a.R; ++r) {
      const int ih = ih0 + r;
      const bool row_in = ih >= 0 && ih < a.H;
      const uint2* src = x8 + (static_cast<std::size_t>(b) * a.H + (row_in ? ih : 0)) * a.W;
      for (int j = tid; j < a.tile_w; j += kDirectThreads) {
        const int iw = iw0 + j;
        const bool in = row_in && iw >= 0 && iw < a.W;
        cp_async8(dst + r * a.tile_w + j, in ? src + iw : x8, in);  // zeros outside the image
      }
    }
    cp_async_commit();
  };
  if (static_cast<int>(blockIdx.x) < items) load(blockIdx.x, 0);
  const int kfull = a.taps / 4;  // k16 blocks without padded taps
  int buf = 0;
  for (int item = blockIdx.x; item < items; item += gridDim.x, buf ^= 1) {
    const int next = item + gridDim.x;
    if (next < items) {
      load(next, buf ^ 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // this item's tile (the first time: the kernels too) seen by every thread
    const int seg = item % a.segs, row = item / a.segs;
    const int ow0 = seg * kDirectSegment;
    const u32* x32 = reinterpret_cast<const u32*>(tiles + buf * tile_px);
    // Rows g and g + 8 of the warp's two m16 tiles: the word of its window's first tap (the
    // channel pair this lane's fragment holds); positions past the row repeat the last one.
    int base[2][2];
    const int last = min(a.OW - ow0, kDirectSegment) - 1;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) base[mt][h] = min(warp * 32 + mt * 16 + h * 8 + g, last) * a.sw * 2 + (t & 1);
    float acc[2][8][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[mt][j][q] = 0.f;
    // k16 block kb: this lane's A columns 2t, 2t + 1 (tap kb * 4 + t / 2) and 2t + 8, 2t + 9 (two taps on).
    auto step = [&](int kb, bool masked) {
      const int oa = offs[kb * 4 + (t >> 1)], ob = offs[kb * 4 + (t >> 1) + 2];
      u32 af[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        if (masked) {
          af[mt][0] = oa >= 0 ? x32[base[mt][0] + oa] : 0u;
          af[mt][1] = oa >= 0 ? x32[base[mt][1] + oa] : 0u;
          af[mt][2] = ob >= 0 ? x32[base[mt][0] + ob] : 0u;
          af[mt][3] = ob >= 0 ? x32[base[mt][1] + ob] : 0u;
        } else {
          af[mt][0] = x32[base[mt][0] + oa];
          af[mt][1] = x32[base[mt][1] + oa];
          af[mt][2] = x32[base[mt][0] + ob];
          af[mt][3] = x32[base[mt][1] + ob];
        }
      }
      const uint2* wk = frag + kb * 256 + lane;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const uint2 v = wk[j * 32];
        const u32 bf[2] = {v.x, v.y};
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) Mma16816<T>::run(acc[mt][j], af[mt], bf);
      }
    };
#pragma unroll 2
    for (int kb = 0; kb < kfull; ++kb) step(kb, false);
    if (kfull < a.kb) step(kfull, true);
    const int oh = row % a.OH, b = row / a.OH;
    T* yrow = y + (static_cast<std::size_t>(b) * a.OH + oh) * a.OW * a.K;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int p = warp * 32 + mt * 16 + h * 8 + g;
        if (ow0 + p >= a.OW) continue;
        T* yo = yrow + static_cast<std::size_t>(ow0 + p) * a.K + n0 + 2 * t;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          float v0 = __fadd_rn(acc[mt][j][h * 2], bsm[j * 8 + 2 * t]);
          float v1 = __fadd_rn(acc[mt][j][h * 2 + 1], bsm[j * 8 + 2 * t + 1]);
          if (a.relu) {
            v0 = v0 > 0.f ? v0 : 0.f;
            v1 = v1 > 0.f ? v1 : 0.f;
          }
          T pair[2] = {Tag::store(v0), Tag::store(v1)};
          *reinterpret_cast<u32*>(yo + j * 8) = *reinterpret_cast<const u32*>(pair);
        }
      }
    __syncthreads();  // every read of this tile done before the next item's copy overwrites it
  }
}

// Launches direct_conv_kernel for problem `s` (direct_conv_supported) on the copies x4 and w4.
void direct_conv(const CudnnConvShape& s, const void* x4, const void* w4, const void* bias, void* y, bool relu,
                 cudaStream_t stream) {
  DirectArgs a{};
  a.N = static_cast<int>(s.x[0]), a.H = static_cast<int>(s.x[2]), a.W = static_cast<int>(s.x[3]);
  a.K = static_cast<int>(s.y[1]), a.R = static_cast<int>(s.w[2]), a.S = static_cast<int>(s.w[3]);
  a.OH = static_cast<int>(s.y[2]), a.OW = static_cast<int>(s.y[3]);
  a.sh = static_cast<int>(s.stride[0]), a.sw = static_cast<int>(s.stride[1]);
  a.ph = static_cast<int>(s.pre[0]), a.pw = static_cast<int>(s.pre[1]);
  a.taps = a.R * a.S, a.kb = (a.taps + 3) / 4, a.tile_w = (kDirectSegment - 1) * a.sw + a.S;
  a.segs = (a.OW + kDirectSegment - 1) / kDirectSegment;
  a.relu = relu;
  const std::size_t smem = direct_conv_shared_bytes(s);
  const int items = a.N * a.OH * a.segs;
  int device = 0, sms = 1;
  dev::check(cudaGetDevice(&device), "convolution: cudaGetDevice");
  dev::check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "convolution: reading the SM count");
  auto launch = [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::T;
    auto* kernel = direct_conv_kernel<Tag>;
    dev::check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
               "convolution: the direct kernel's shared memory");
    int per_sm = 0;
    dev::check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kDirectThreads, smem),
               "convolution: the direct kernel's occupancy");
    const dim3 grid(static_cast<unsigned>(std::min(items, sms * std::max(per_sm, 1))), static_cast<unsigned>(a.K / 64));
    kernel<<<grid, kDirectThreads, smem, stream>>>(static_cast<const T*>(x4), static_cast<const T*>(w4),
                                                   static_cast<const T*>(bias), static_cast<T*>(y), a);
  };
  if (s.type == DataType::kHALF) launch(dev::F16{});
  else launch(dev::BF16{});
  check_launch("convolution (direct)");
}

}  // namespace

std::size_t channels_last_copy_bytes(const CudnnConvShape& s) { return kAlign + cudnn_layout(s, 0).total; }

ConvolutionKernel::ConvolutionKernel(cublasLtHandle_t handle, std::string node_name, ConvolutionParams p)
    : name_(std::move(node_name)), params_(std::move(p)), gemm_(std::make_unique<StridedGemm>(handle, name_)) {}

ConvolutionKernel::~ConvolutionKernel() = default;

namespace {
// A tensor's bytes rounded up to 256.
std::size_t aligned_bytes(const TensorRef& t) {
  const std::size_t b = element_size(t.type) * static_cast<std::size_t>(std::max<i64>(t.dims.volume(), 0));
  return (b + kAlign - 1) / kAlign * kAlign;
}
}  // namespace

std::size_t ConvolutionKernel::layout_bytes(const TensorRef& x, const TensorRef& out) const {
  return (x_cl_ ? aligned_bytes(x) : 0) + (out_cl_ ? aligned_bytes(out) : 0);
}

std::size_t ConvolutionKernel::workspace_bytes(const TensorRef& x, const TensorRef& /*kernel: implied by params*/,
                                               const TensorRef& out) const {
  // Sizing only: the buffers need not exist yet (the builder asks before allocating).
  check_float(x, "convolution", "input 0");
  const Geo g = window_geo(params_, x, out, nullptr, nullptr, "convolution", false);
  const std::size_t planned = dnn_      ? cudnn_layout(dnn_->shape(), dnn_->workspace_bytes()).total
                              : direct_ ? cudnn_layout(*direct_, 0).total
                                        : 0;
  return layout_bytes(x, out) + std::max(conv_sizing(g, x.type).total, planned);
}

std::optional<CudnnConvShape> ConvolutionKernel::cudnn_shape(const TensorRef& x, const TensorRef& kernel,
                                                             const TensorRef& out, bool accumulate) const {
  if (!is_float_type(x.type) || kernel.type != x.type || out.type != x.type) return std::nullopt;
  const graph::TensorDesc kd{kernel.type, kernel.dims};
  const Geo g = window_geo(params_, x, out, &kd, nullptr, "convolution", false);
  if (g.N * g.C * g.in_sp == 0 || g.N * g.K * g.out_sp == 0 || g.Cg == 0 || g.Kg == 0) return std::nullopt;
  CudnnConvShape s;
  s.type = x.type;
  s.accumulate = accumulate;
  s.x = {g.N, g.C};
  s.w = {g.K, g.Cg};
  s.y = {g.N, g.K};
  // 1 and 2 spatial dims as cuDNN's 2-D convolution (a leading 1), 3 as its 3-D one.
  const int first = params_.kernel_size.rank() == 3 ? 0 : 1;
  for (int i = first; i < kS; ++i) {
    if (g.pre[i] < 0) return std::nullopt;
    s.x.push_back(g.in[i]);
    s.w.push_back(g.k[i]);
    s.y.push_back(g.out[i]);
    s.stride.push_back(g.s[i]);
    s.dilation.push_back(g.d[i]);
    s.pre.push_back(g.pre[i]);
    // Padding after: as much as before where that gives the same output size, else just enough
    // for the last window. Either way the windows read the same positions (past the input:
    // zeros, as the CPU), but cuDNN offers other configurations for symmetric padding (for the
    // float32 7x7 stride-2 ResNet stem, one taking 0.85 ms instead of 1.06 on the H200);
    // same_cudnn_problem() says which posts are interchangeable.
    const i64 span = (g.k[i] - 1) * g.d[i] + 1, least = std::max<i64>(0, (g.out[i] - 1) * g.s[i] + span - g.in[i] - g.pre[i]);
    const bool symmetric = g.pre[i] >= least && (g.in[i] + 2 * g.pre[i] - span) / g.s[i] + 1 == g.out[i];
    s.post.push_back(symmetric ? g.pre[i] : least);
  }
  return s;
}

void ConvolutionKernel::use_cudnn(const CudnnContext& ctx, const CudnnConvShape& shape, const std::string& config,
                                  std::size_t max_workspace) {
  auto dnn = std::make_unique<CudnnConv>(ctx, shape);
  dnn->select(config);
  if (dnn->workspace_bytes() > max_workspace)
    throw Error("[cuda] convolution '" + name_ + "': cuDNN's plan needs " + std::to_string(dnn->workspace_bytes()) +
                " bytes of workspace, more than the " + std::to_string(max_workspace) + " reserved");
  dnn_ = std::move(dnn);
  direct_.reset();
}

void ConvolutionKernel::use_direct(const CudnnConvShape& shape) {
  if (!direct_conv_supported(shape))
    throw Error("[cuda] convolution '" + name_ + "': the direct kernel does not run this problem");
  dnn_.reset();
  direct_ = shape;
}

bool ConvolutionKernel::run_cudnn(const TensorRef& x, const TensorRef& kernel, const TensorRef* bias,
                                  const TensorRef& out, void* workspace, cudaStream_t stream,
                                  const ActivationParams* act, bool x_cl, bool out_cl) const {
  auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % kCudnnAlign == 0; };
  if (!aligned(x.data) || !aligned(kernel.data) || !aligned(out.data)) return false;
  const CudnnConvShape& planned = dnn_ ? dnn_->shape() : *direct_;
  // Channels-last tensors only go to a channels-last plan, x only where it pads no channels.
  if ((x_cl || out_cl) && planned.channels_last == 0) return false;
  if (x_cl && planned.channels_last != x.dims[1]) return false;
  // An engine's plan accumulates only where it was built with the bias written first (a:1).
  const bool prefill = planned.accumulate && bias != nullptr;
  auto shape = cudnn_shape(x, kernel, out, prefill);
  if (!shape) return false;
  shape->channels_last = planned.channels_last;
  if (!same_cudnn_problem(*shape, planned)) return false;  // another problem than the plan's: our own path
  if (planned.channels_last) {  // transposed copies around cuDNN, bias and activation on the way out
    const CudnnLayout l = cudnn_layout(planned, dnn_ ? dnn_->workspace_bytes() : 0);
    char* ws = static_cast<char*>(workspace);
    try {
      if (!x_cl) to_channels_last(x, planned.channels_last, ws + l.x, stream);
      to_channels_last({kernel.data, kernel.type, Dims(std::span<const std::int64_t>(planned.w))}, planned.channels_last,
                       ws + l.w, stream);
      const void* xc = x_cl ? x.data : ws + l.x;
      void* yc = out_cl ? out.data : ws + l.y;
      if (direct_) {  // bias (and a ReLU) in the kernel, before and after its one rounding
        const bool relu = act && act->type == ActivationType::kRELU;
        direct_conv(planned, xc, ws + l.w, bias ? bias->data : nullptr, yc, relu, stream);
        const ActivationParams* rest = relu ? nullptr : act;
        if (out_cl) {
          if (rest) bias_activation_channels_last(out, nullptr, rest, stream);
        } else {
          from_channels_last(ws + l.y, out, nullptr, rest, stream);
        }
        return true;
      }
      dnn_->run(xc, ws + l.w, yc, ws, stream);
      if (out_cl) bias_activation_channels_last(out, bias ? bias->data : nullptr, act, stream);
      else from_channels_last(ws + l.y, out, bias ? bias->data : nullptr, act, stream);
    } catch (const Error& e) {
      throw Error("[cuda] convolution '" + name_ + "': " + e.what());
    }
    return true;
  }
  if (prefill) {
    const i64 n = out.dims.volume(), P = n / (out.dims[0] * out.dims[1]);
    by_float(x.type, [&](auto tag) {
      using Tag = decltype(tag);
      using T = typename Tag::T;
      by_index(all_small({n}), [&](auto ix) {
        using I = decltype(ix);
        bias_fill_kernel<Tag, I><<<blocks_for(n), kThreads, 0, stream>>>(
            static_cast<T*>(out.data), static_cast<const T*>(bias->data), static_cast<I>(n), static_cast<I>(P),
            static_cast<I>(out.dims[1]));
      });
    });
    check_launch("convolution (bias before cuDNN)");
  }
  try {
    dnn_->run(x.data, kernel.data, out.data, workspace, stream);
  } catch (const Error& e) {
    throw Error("[cuda] convolution '" + name_ + "': " + e.what());
  }
  bias_activation(out, bias && !prefill ? bias->data : nullptr, act, stream);
  return true;
}

void ConvolutionKernel::run(const TensorRef& x, const TensorRef& kernel, const TensorRef* bias, const TensorRef& out,
                            void* workspace, cudaStream_t stream, const ActivationParams* act) const {
  i64 n = 0;
  backends::common::check_conv(dev::kFail, params_, x, kernel, bias, out, "convolution", false, n);
  if (n == 0) return;
  if (!x_cl_ && !out_cl_) {
    run_packed(x, kernel, bias, out, workspace, stream, act);
    return;
  }
  if (workspace == nullptr) fail("convolution: channels-last tensors need a workspace (ConvolutionKernel::workspace_bytes)");
  auto* front = static_cast<std::byte*>(workspace);
  std::byte* rest = front + layout_bytes(x, out);
  if ((dnn_ || direct_) && run_cudnn(x, kernel, bias, out, rest, stream, act, x_cl_, out_cl_)) return;
  // Another path: packed copies in front of the workspace.
  TensorRef xp = x, op = out;
  if (x_cl_) {
    xp.data = front;
    from_channels_last(x.data, xp, nullptr, nullptr, stream);
  }
  if (out_cl_) op.data = front + (x_cl_ ? aligned_bytes(x) : 0);
  run_packed(xp, kernel, bias, op, rest, stream, act);
  if (out_cl_) to_channels_last(op, out.dims[1], out.data, stream);
}

void ConvolutionKernel::run_packed(const TensorRef& x, const TensorRef& kernel, const TensorRef* bias,
                                   const TensorRef& out, void* workspace, cudaStream_t stream,
                                   const ActivationParams* act) const {
  const i64 n = out.dims.volume();
  const graph::TensorDesc kd{kernel.type, kernel.dims};
  graph::TensorDesc bd;
  if (bias) bd = {bias->type, bias->dims};
  const Geo g = window_geo(params_, x, out, &kd, bias ? &bd : nullptr, "convolution", false);
  if ((dnn_ || direct_) && run_cudnn(x, kernel, bias, out, workspace, stream, act, false, false)) return;
  const ConvSizing z = conv_sizing(g, x.type);
  if (z.total > 0 && workspace == nullptr)
    fail("convolution: this convolution needs a workspace (ConvolutionKernel::workspace_bytes)");
  const bool gsmall = geo_small(g);
  const i64 P = g.out_sp, R = g.Cg * g.kvol;
  by_float(x.type, [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::T;
    constexpr bool narrow = !std::is_same_v<Tag, dev::F32>;
    const T* xs = static_cast<const T*>(x.data);
    const T* ws = static_cast<const T*>(kernel.data);
    const T* bs = bias ? static_cast<const T*>(bias->data) : nullptr;
    T* os = static_cast<T*>(out.data);

    if (z.path == ConvPath::kDepthwise) {
      by_index(gsmall && all_small({n, x.dims.volume()}), [&](auto ix) {
        using I = decltype(ix);
        depthwise_kernel<Tag, I><<<blocks_for(n), kThreads, 0, stream>>>(xs, ws, bs, os, static_cast<I>(n), g);
      });
      check_launch("convolution (depthwise)");
      if (act) activation(*act, out, out, stream);
      return;
    }
    if (R == 0) {  // no input channels: the bias alone
      by_index(all_small({n}), [&](auto ix) {
        using I = decltype(ix);
        bias_fill_kernel<Tag, I><<<blocks_for(n), kThreads, 0, stream>>>(os, bs, static_cast<I>(n), static_cast<I>(P),
                                                                          static_cast<I>(g.K));
      });
      check_launch("convolution (bias)");
      if (act) activation(*act, out, out, stream);
      return;
    }

    std::byte* wsp = static_cast<std::byte*>(workspace);
    std::byte* base = wsp + kGemmWorkspaceBytes;
    const Chunk ch = chunk_for(g.N, P, z.col_pp + z.tmp_pp);
    for (i64 n0 = 0; n0 < g.N; n0 += ch.images) {
      const i64 nb = std::min(ch.images, g.N - n0);
      for (i64 p0 = 0; p0 < P; p0 += ch.tile) {
        const i64 pt = std::min(ch.tile, P - p0);
        T* col = reinterpret_cast<T*>(base);
        float* tmp = reinterpret_cast<float*>(align_up(base + nb * pt * z.col_pp));
        if (z.path == ConvPath::kIm2col) {
          const i64 total = nb * g.C * g.kvol * pt;
          by_index(gsmall && all_small({total, nb * g.C * g.in_sp}), [&](auto ix) {
            using I = decltype(ix);
            im2col_kernel<Tag, I><<<blocks_for(total), kThreads, 0, stream>>>(
                offset(xs, n0 * g.C * g.in_sp), col, static_cast<I>(total), g, static_cast<I>(pt), static_cast<I>(p0));
          });
          check_launch("convolution (im2col)");
        }
        for (i64 grp = 0; grp < g.groups; ++grp) {
          StridedGemm::Shape s;
          s.M = g.Kg;
          s.N = pt;
          s.K = R;
          s.lda = R;
          s.batch = nb;
          s.ab = x.type;
          s.c_float = true;
          const void* b;
          if (z.path == ConvPath::kIm2col) {
            b = offset(col, grp * R * pt);
            s.ldb = pt;
            s.stride_b = g.C * g.kvol * pt;
          } else {  // the input itself: [C/g, P] per (image, group)
            b = offset(xs, (n0 * g.C + grp * g.Cg) * g.in_sp + p0);
            s.ldb = g.in_sp;
            s.stride_b = g.C * g.in_sp;
          }
          void* c;
          if constexpr (narrow) {
            c = offset(tmp, grp * g.Kg * pt);
            s.ldc = pt;
            s.stride_c = g.K * pt;
          } else {
            c = offset(os, (n0 * g.K + grp * g.Kg) * P + p0);
            s.ldc = P;
            s.stride_c = g.K * P;
          }
          gemm_->run(s, offset(ws, grp * g.Kg * R), b, c, wsp, stream);
        }
        if constexpr (narrow) {
          const i64 total = nb * g.K * pt;
          by_index(all_small({total, nb * g.K * P}), [&](auto ix) {
            using I = decltype(ix);
            conv_store_kernel<Tag, I><<<blocks_for(total), kThreads, 0, stream>>>(
                tmp, bs, offset(os, n0 * g.K * P + p0), static_cast<I>(total), static_cast<I>(pt), static_cast<I>(g.K),
                static_cast<I>(P));
          });
          check_launch("convolution (bias and rounding)");
        }
      }
    }
    // float32: the bias and the activation in one pass over the GEMM's result; narrower types
    // were rounded with their bias by conv_store_kernel, the activation follows
    if constexpr (!narrow) bias_activation(out, bs, act, stream);
    else if (act) activation(*act, out, out, stream);
  });
}


std::optional<ActivationParams> conv_activation(const graph::Node& n) {
  if (n.epilogue.empty()) return std::nullopt;
  if (const auto* a = std::get_if<ActivationParams>(&n.epilogue[0].params)) return *a;
  return std::nullopt;
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

namespace {

struct ConvolutionState final : OpState {
  std::unique_ptr<ConvolutionKernel> conv;
  std::optional<ActivationParams> act;  // the activation it applies (conv_activation)
};

OpPrepared prepare_convolution(const OpSetup& setup) {
  const graph::Graph& g = setup.graph;
  const graph::Node& n = setup.node;
  auto state = std::make_unique<ConvolutionState>();
  state->conv = std::make_unique<ConvolutionKernel>(setup.lt, n.name, std::get<ConvolutionParams>(n.params));
  state->act = conv_activation(n);
  OpPrepared r;
  r.fused = state->act ? 1 : 0;
  if (n.tactic.kernel == graph::kCudnnConvKernel) {
    CudnnTactic t;
    if (!from_tactic(n.tactic, t))
      throw CorruptEngineError("[cuda] node '" + n.name + "': the tactic's cuDNN convolution is malformed");
    try {
      if (t.config == kDirectConfig) state->conv->use_direct(t.shape);  // the backend's own kernel
      else state->conv->use_cudnn(setup.dnn, t.shape, t.config, t.workspace);
    } catch (const CorruptEngineError&) {
      throw;
    } catch (const Error&) {
      // cuDNN missing here, or its configuration does not build with this cuDNN: the backend's
      // own convolution (same results within float32 rounding; slower).
    }
  }
  state->conv->set_layouts(channels_last_value(g, n.inputs[0]), setup.out_channels_last);
  r.state = std::move(state);
  return r;
}

const ConvolutionState& conv_state(const OpCall& c) { return static_cast<const ConvolutionState&>(*c.state); }

}  // namespace

extern const OpKernel kConvolutionKernel = {
    LayerType::kCONVOLUTION, prepare_convolution,
    [](const OpCall& c) { return conv_state(c).conv->workspace_bytes(ref(c.in[0]), ref(c.in[1]), ref(c.out)); },
    [](const OpCall& c) {
      const ConvolutionState& state = conv_state(c);
      TensorRef bias = c.node.inputs.size() > 2 ? ref(c.in[2]) : TensorRef{};
      state.conv->run(ref(c.in[0]), ref(c.in[1]), c.node.inputs.size() > 2 ? &bias : nullptr, ref(c.out), c.workspace,
                      c.stream, state.act ? &*state.act : nullptr);
    }};

}  // namespace ops

}  // namespace tensoracle::cuda
