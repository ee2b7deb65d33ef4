// The CUDA backend's pooling (kernels.h) with the CPU's semantics (backends/cpu/ops/pooling.cpp):
// same taps, order and arithmetic; x and out each packed or channels-last.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/layout_util.cuh"
#include "backends/cuda/layouts.h"
#include "backends/cuda/op_kernel.h"
#include "graph/ops.h"
#include "tensoracle/errors.h"

namespace tensoracle::cuda {

namespace {

using namespace layout;  // layout_util.cuh

// ---- pooling -------------------------------------------------------------------------------

// Normalized to 3 spatial dims (d, h, w), as the CPU's Geo.
struct PoolArgs {
  i64 in[3] = {}, k[3] = {}, s[3] = {}, pre[3] = {};
  i64 lim[3] = {};  // where the padded input ends (explicit modes: in + post)
  i64 in_sp = 1;    // input elements per (n, c)
  int type = 0;     // PoolingType
  bool exclude = true;  // average_count_excludes_padding
  double blend = 0.0;
};

// Window of output index o along dim i: [lo, hi) inside the input, `padded` its extent within
// the padded input.
__device__ __forceinline__ void pool_window(const PoolArgs& a, int i, i64 o, i64& lo, i64& hi, i64& padded) {
  const i64 s = o * a.s[i] - a.pre[i];
  lo = s > 0 ? s : 0;
  hi = s + a.k[i] < a.in[i] ? s + a.k[i] : a.in[i];
  padded = (s + a.k[i] < a.lim[i] ? s + a.k[i] : a.lim[i]) - s;
}

// One window's running maximum (a NaN sticks) and double sum, in the taps' order, and the
// pooled value from them, rounded once to float (the CPU's arithmetic); both kernels use it.
struct PoolAcc {
  float mx = -INFINITY;
  double sum = 0.0;
  __device__ __forceinline__ void add(float v, bool want_max, bool want_avg) {
    if (want_max && (v > mx || isnan(v))) mx = isnan(mx) ? mx : v;
    if (want_avg) sum = dadd(sum, static_cast<double>(v));
  }
  // `count`: the window's taps inside the input; `padded`: its extent in the padded input.
  __device__ __forceinline__ float value(int type, bool exclude, double blend, double count, double padded) const {
    if (type == static_cast<int>(PoolingType::kMAX)) return mx;
    const double avg = ddiv(sum, exclude ? count : padded);
    const double r = type == static_cast<int>(PoolingType::kAVERAGE)
                         ? avg
                         : dadd(dmul(blend, static_cast<double>(mx)), dmul(dsub(1.0, blend), avg));
    return __double2float_rn(r);
  }
};

template <class Tag, class I>
__global__ void __launch_bounds__(kThreads)
    pool_kernel(const typename Tag::T* __restrict__ x, typename Tag::T* __restrict__ y, I n, Divider<I> OW,
                Divider<I> OH, Divider<I> OD, PoolArgs a) {
  const bool want_max = a.type != static_cast<int>(PoolingType::kAVERAGE);
  const bool want_avg = a.type != static_cast<int>(PoolingType::kMAX);
  GRID_STRIDE_LOOP(I, i, n) {
    I r = i;
    const i64 ow = static_cast<i64>(take(r, OW));
    const i64 oh = static_cast<i64>(take(r, OH));
    const i64 od = static_cast<i64>(take(r, OD));
    const i64 nc = static_cast<i64>(r);
    i64 d0, d1, pd, h0, h1, ph, w0, w1, pw;
    pool_window(a, 0, od, d0, d1, pd);
    pool_window(a, 1, oh, h0, h1, ph);
    pool_window(a, 2, ow, w0, w1, pw);
    const i64 count = (d1 > d0 ? d1 - d0 : 0) * (h1 > h0 ? h1 - h0 : 0) * (w1 > w0 ? w1 - w0 : 0);
    if (count == 0) {  // a window entirely in (or past) the padding
      y[i] = Tag::store(0.f);
      continue;
    }
    const typename Tag::T* xc = x + nc * a.in_sp;
    PoolAcc acc;
    for (i64 id = d0; id < d1; ++id) {
      for (i64 ih = h0; ih < h1; ++ih) {
        const typename Tag::T* xrow = xc + (id * a.in[1] + ih) * a.in[2];
        for (i64 iw = w0; iw < w1; ++iw) acc.add(Tag::load(xrow[iw]), want_max, want_avg);
      }
    }
    y[i] = Tag::store(acc.value(a.type, a.exclude, a.blend, static_cast<double>(count), static_cast<double>(pd * ph * pw)));
  }
}

// Calls tap(ih, iw) for the taps of a 2-D window whose first tap is (sh, sw) that lie in
// [h0, h1) x [w0, w1), in row-major order; unrolled where the window's size KH x KW is known at
// compile time (KH = KW = 0: the loops run over the clipped ranges).
template <int KH, int KW, class F>
__device__ __forceinline__ void for_each_tap_2d(int sh, int sw, int h0, int h1, int w0, int w1, F&& tap) {
  if constexpr (KH > 0 && KW > 0) {
#pragma unroll
    for (int dh = 0; dh < KH; ++dh) {
      const int ih = sh + dh;
      if (ih < h0 || ih >= h1) continue;
#pragma unroll
      for (int dw = 0; dw < KW; ++dw) {
        const int iw = sw + dw;
        if (iw >= w0 && iw < w1) tap(ih, iw);
      }
    }
  } else {
    for (int ih = h0; ih < h1; ++ih)
      for (int iw = w0; iw < w1; ++iw) tap(ih, iw);
  }
}

// Two spatial dims (no depth) with every input offset below 2^31: the same window, order and
// arithmetic as pool_kernel in int coordinates, the window's size known at compile time for the
// common 2 x 2 and 3 x 3 (KH = KW = 0: from the arguments). Taps outside [h0, h1) x [w0, w1) are
// skipped, so the in-window taps are visited in pool_kernel's order.
struct Pool2dArgs {
  int in_h = 0, in_w = 0, k_h = 0, k_w = 0, s_h = 0, s_w = 0, pre_h = 0, pre_w = 0, lim_h = 0, lim_w = 0;
  int type = 0;
  bool exclude = true;
  double blend = 0.0;
};

template <class Tag, int KH, int KW>
__global__ void __launch_bounds__(kThreads)
    pool2d_kernel(const typename Tag::T* __restrict__ x, typename Tag::T* __restrict__ y, u32 n, Divider<u32> OW,
                  Divider<u32> OH, Pool2dArgs a) {
  const bool want_max = a.type != static_cast<int>(PoolingType::kAVERAGE);
  const bool want_avg = a.type != static_cast<int>(PoolingType::kMAX);
  const int kh = KH > 0 ? KH : a.k_h, kw = KW > 0 ? KW : a.k_w;
  GRID_STRIDE_LOOP(u32, i, n) {
    u32 r = i;
    const int ow = static_cast<int>(take(r, OW));
    const int oh = static_cast<int>(take(r, OH));
    const int sh = oh * a.s_h - a.pre_h, sw = ow * a.s_w - a.pre_w;
    const int h0 = sh > 0 ? sh : 0, h1 = sh + kh < a.in_h ? sh + kh : a.in_h;
    const int w0 = sw > 0 ? sw : 0, w1 = sw + kw < a.in_w ? sw + kw : a.in_w;
    const int count = (h1 > h0 ? h1 - h0 : 0) * (w1 > w0 ? w1 - w0 : 0);
    if (count == 0) {
      y[i] = Tag::store(0.f);
      continue;
    }
    const typename Tag::T* xc = x + r * static_cast<u32>(a.in_h * a.in_w);
    PoolAcc acc;
    for_each_tap_2d<KH, KW>(sh, sw, h0, h1, w0, w1,
                            [&](int ih, int iw) { acc.add(Tag::load(xc[ih * a.in_w + iw]), want_max, want_avg); });
    const int ph = (sh + kh < a.lim_h ? sh + kh : a.lim_h) - sh, pw = (sw + kw < a.lim_w ? sw + kw : a.lim_w) - sw;
    y[i] = Tag::store(acc.value(a.type, a.exclude, a.blend, static_cast<double>(count),
                                static_cast<double>(ph) * static_cast<double>(pw)));
  }
}

// Pooling where x or y (or both) is stored channels-last: [N, spatial..., C] instead of
// [N, C, spatial...] (layouts.h). Each thread pools V consecutive channels of one output
// position: V = 16 bytes of elements where x is channels-last and C and the pointers allow it
// (one 16-byte load per tap), else 1. The windows, the taps' order and PoolAcc's arithmetic are
// pool_kernel's, so every value is bit-identical to the packed kernels'. Threads run through the
// output in its stored order: channel groups fastest for a channels-last y, positions fastest for
// a packed one, so that neighbouring threads store neighbouring elements.
struct PoolLayoutArgs {
  PoolArgs a;
  i64 xs[5] = {}, ys[5] = {};  // strides in elements along n, c, d, h, w
};

template <class Tag, class I, int V, bool kOutChannelsLast>
__global__ void __launch_bounds__(kThreads)
    pool_layout_kernel(const typename Tag::T* __restrict__ x, typename Tag::T* __restrict__ y, I n, Divider<I> G,
                       Divider<I> OW, Divider<I> OH, Divider<I> OD, PoolLayoutArgs c) {
  using T = typename Tag::T;
  static_assert(V == 1 || V * sizeof(T) == 16, "one element or 16 bytes per tap");
  const PoolArgs& a = c.a;
  const bool want_max = a.type != static_cast<int>(PoolingType::kAVERAGE);
  const bool want_avg = a.type != static_cast<int>(PoolingType::kMAX);
  GRID_STRIDE_LOOP(I, i, n) {
    I r = i;
    i64 g, ow, oh, od;
    if constexpr (kOutChannelsLast) {
      g = static_cast<i64>(take(r, G));
      ow = static_cast<i64>(take(r, OW));
      oh = static_cast<i64>(take(r, OH));
      od = static_cast<i64>(take(r, OD));
    } else {
      ow = static_cast<i64>(take(r, OW));
      oh = static_cast<i64>(take(r, OH));
      od = static_cast<i64>(take(r, OD));
      g = static_cast<i64>(take(r, G));
    }
    const i64 b = static_cast<i64>(r), ch = g * V;
    i64 d0, d1, pd, h0, h1, ph, w0, w1, pw;
    pool_window(a, 0, od, d0, d1, pd);
    pool_window(a, 1, oh, h0, h1, ph);
    pool_window(a, 2, ow, w0, w1, pw);
    const i64 count = (d1 > d0 ? d1 - d0 : 0) * (h1 > h0 ? h1 - h0 : 0) * (w1 > w0 ? w1 - w0 : 0);
    float v[V];
    if (count == 0) {  // a window entirely in (or past) the padding
#pragma unroll
      for (int k = 0; k < V; ++k) v[k] = 0.f;
    } else {
      PoolAcc acc[V];
      const T* xc = x + b * c.xs[0] + ch * c.xs[1];
      for (i64 id = d0; id < d1; ++id) {
        for (i64 ih = h0; ih < h1; ++ih) {
          const T* xrow = xc + id * c.xs[2] + ih * c.xs[3];
          for (i64 iw = w0; iw < w1; ++iw) {
            if constexpr (V > 1) {
              const uint4 u = *reinterpret_cast<const uint4*>(xrow + iw * c.xs[4]);
              const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
              for (int k = 0; k < V; ++k) acc[k].add(Tag::load(e[k]), want_max, want_avg);
            } else {
              acc[0].add(Tag::load(xrow[iw * c.xs[4]]), want_max, want_avg);
            }
          }
        }
      }
#pragma unroll
      for (int k = 0; k < V; ++k)
        v[k] = acc[k].value(a.type, a.exclude, a.blend, static_cast<double>(count), static_cast<double>(pd * ph * pw));
    }
    T* yo = y + b * c.ys[0] + ch * c.ys[1] + od * c.ys[2] + oh * c.ys[3] + ow * c.ys[4];
    if constexpr (kOutChannelsLast && V > 1) {
      uint4 u;
      T* e = reinterpret_cast<T*>(&u);
#pragma unroll
      for (int k = 0; k < V; ++k) e[k] = Tag::store(v[k]);
      *reinterpret_cast<uint4*>(yo) = u;
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) yo[k * c.ys[1]] = Tag::store(v[k]);
    }
  }
}

// The common case of pool_layout_kernel: two spatial dims, every offset below 2^31, x
// channels-last with 16-byte taps, float16 or bfloat16 (what convolutions store channels-last).
// pool2d_kernel's int window arithmetic and taps (unrolled for 2 x 2 and 3 x 3; KH = KW = 0:
// from the arguments); for a max pool (kMaxOnly) the average's sums are compiled out.
template <class Tag, int KH, int KW, bool kMaxOnly, bool kOutChannelsLast>
__global__ void __launch_bounds__(kThreads)
    pool2d_channels_last_kernel(const typename Tag::T* __restrict__ x, typename Tag::T* __restrict__ y, u32 n,
                                Divider<u32> G, Divider<u32> OW, Divider<u32> OH, Pool2dArgs a, int channels) {
  using T = typename Tag::T;
  constexpr int V = static_cast<int>(16 / sizeof(T));
  const bool want_max = kMaxOnly || a.type != static_cast<int>(PoolingType::kAVERAGE);
  const bool want_avg = !kMaxOnly && a.type != static_cast<int>(PoolingType::kMAX);
  const int kh = KH > 0 ? KH : a.k_h, kw = KW > 0 ? KW : a.k_w;
  const int oh_n = static_cast<int>(OH.d), ow_n = static_cast<int>(OW.d);
  GRID_STRIDE_LOOP(u32, i, n) {
    u32 r = i;
    int g, ow, oh;
    if constexpr (kOutChannelsLast) {
      g = static_cast<int>(take(r, G));
      ow = static_cast<int>(take(r, OW));
      oh = static_cast<int>(take(r, OH));
    } else {
      ow = static_cast<int>(take(r, OW));
      oh = static_cast<int>(take(r, OH));
      g = static_cast<int>(take(r, G));
    }
    const u32 b = r;
    const int ch = g * V;
    const int sh = oh * a.s_h - a.pre_h, sw = ow * a.s_w - a.pre_w;
    const int h0 = sh > 0 ? sh : 0, h1 = sh + kh < a.in_h ? sh + kh : a.in_h;
    const int w0 = sw > 0 ? sw : 0, w1 = sw + kw < a.in_w ? sw + kw : a.in_w;
    const int count = (h1 > h0 ? h1 - h0 : 0) * (w1 > w0 ? w1 - w0 : 0);
    float v[V];
    if (count == 0) {
#pragma unroll
      for (int k = 0; k < V; ++k) v[k] = 0.f;
    } else {
      PoolAcc acc[V];
      const T* xb = x + (static_cast<u32>(b * a.in_h) * static_cast<u32>(a.in_w)) * static_cast<u32>(channels) + static_cast<u32>(ch);
      auto tap = [&](int ih, int iw) {
        const uint4 u = *reinterpret_cast<const uint4*>(xb + static_cast<u32>(ih * a.in_w + iw) * static_cast<u32>(channels));
        const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
        for (int k = 0; k < V; ++k) acc[k].add(Tag::load(e[k]), want_max, want_avg);
      };
      for_each_tap_2d<KH, KW>(sh, sw, h0, h1, w0, w1, tap);
      const int ph = (sh + kh < a.lim_h ? sh + kh : a.lim_h) - sh, pw = (sw + kw < a.lim_w ? sw + kw : a.lim_w) - sw;
#pragma unroll
      for (int k = 0; k < V; ++k)
        v[k] = acc[k].value(a.type, a.exclude, a.blend, static_cast<double>(count),
                            static_cast<double>(ph) * static_cast<double>(pw));
    }
    if constexpr (kOutChannelsLast) {
      uint4 u;
      T* e = reinterpret_cast<T*>(&u);
#pragma unroll
      for (int k = 0; k < V; ++k) e[k] = Tag::store(v[k]);
      *reinterpret_cast<uint4*>(y + (static_cast<u32>(b * oh_n + oh) * static_cast<u32>(ow_n) + static_cast<u32>(ow)) *
                                        static_cast<u32>(channels) + static_cast<u32>(ch)) = u;
    } else {
      const u32 plane = static_cast<u32>(oh_n) * static_cast<u32>(ow_n);
      T* yo = y + (b * static_cast<u32>(channels) + static_cast<u32>(ch)) * plane + static_cast<u32>(oh * ow_n + ow);
#pragma unroll
      for (int k = 0; k < V; ++k) yo[k * plane] = Tag::store(v[k]);
    }
  }
}

// Strides in elements along n, c, d, h, w of a tensor of n images, c channels and spatial dims
// sp (normalized to 3), packed or channels-last.
void layout_strides(i64 c, const i64* sp, bool channels_last, i64* st) {
  const i64 plane = sp[0] * sp[1] * sp[2];
  st[0] = c * plane;
  st[1] = channels_last ? 1 : plane;
  const i64 unit = channels_last ? c : 1;  // between neighbouring positions
  st[4] = unit;
  st[3] = unit * sp[2];
  st[2] = unit * sp[1] * sp[2];
}

// pooling() where x or out is stored channels-last (pool_layout_kernel).
// `flat`: the same geometry in int (two spatial dims whose offsets fit), or null.
void pool_layouts(const PoolArgs& a, const i64* out_sp, const Pool2dArgs* flat, const TensorRef& x, const TensorRef& out,
                  bool x_cl, bool out_cl, cudaStream_t stream) {
  PoolLayoutArgs c;
  c.a = a;
  const i64 channels = x.dims[1];
  layout_strides(channels, a.in, x_cl, c.xs);
  layout_strides(channels, out_sp, out_cl, c.ys);
  const int es = static_cast<int>(element_size(x.type));
  const int wide = 16 / es;
  auto aligned16 = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  const bool vector = x_cl && channels % wide == 0 && aligned16(x.data) && (!out_cl || aligned16(out.data));
  const i64 groups = vector ? channels / wide : channels;
  const i64 threads = x.dims[0] * groups * out_sp[0] * out_sp[1] * out_sp[2];
  if (flat && vector && x.type != DataType::kFLOAT) {
    const bool max_only = a.type == static_cast<int>(PoolingType::kMAX);
    const auto n = static_cast<u32>(threads);
    const int c32 = static_cast<int>(channels);
    auto pick = [&](auto tag, auto kh, auto kw) {
      using Tag = decltype(tag);
      using T = typename Tag::T;
      constexpr int KH = decltype(kh)::value, KW = decltype(kw)::value;
      auto launch = [&](auto kernel) {
        kernel<<<blocks_for(threads), kThreads, 0, stream>>>(static_cast<const T*>(x.data), static_cast<T*>(out.data), n,
                                                             Divider<u32>(groups), Divider<u32>(out_sp[2]),
                                                             Divider<u32>(out_sp[1]), *flat, c32);
      };
      if (max_only && out_cl) launch(pool2d_channels_last_kernel<Tag, KH, KW, true, true>);
      else if (max_only) launch(pool2d_channels_last_kernel<Tag, KH, KW, true, false>);
      else if (out_cl) launch(pool2d_channels_last_kernel<Tag, KH, KW, false, true>);
      else launch(pool2d_channels_last_kernel<Tag, KH, KW, false, false>);
    };
    auto by_window = [&](auto tag) {
      if (flat->k_h == 3 && flat->k_w == 3) pick(tag, std::integral_constant<int, 3>{}, std::integral_constant<int, 3>{});
      else if (flat->k_h == 2 && flat->k_w == 2) pick(tag, std::integral_constant<int, 2>{}, std::integral_constant<int, 2>{});
      else pick(tag, std::integral_constant<int, 0>{}, std::integral_constant<int, 0>{});
    };
    if (x.type == DataType::kHALF) by_window(dev::F16{});
    else by_window(dev::BF16{});
    check_launch("pooling");
    return;
  }
  const bool small = x.dims.volume() < kSmall && out.dims.volume() < kSmall;
  by_float(x.type, [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::T;
    constexpr int W = static_cast<int>(16 / sizeof(T));
    by_index(small, [&](auto ix) {
      using I = decltype(ix);
      auto launch = [&](auto kernel) {
        kernel<<<blocks_for(threads), kThreads, 0, stream>>>(static_cast<const T*>(x.data), static_cast<T*>(out.data),
                                                             static_cast<I>(threads), Divider<I>(groups),
                                                             Divider<I>(out_sp[2]), Divider<I>(out_sp[1]),
                                                             Divider<I>(out_sp[0]), c);
      };
      if (vector && out_cl) launch(pool_layout_kernel<Tag, I, W, true>);
      else if (vector) launch(pool_layout_kernel<Tag, I, W, false>);
      else if (out_cl) launch(pool_layout_kernel<Tag, I, 1, true>);
      else launch(pool_layout_kernel<Tag, I, 1, false>);
    });
  });
  check_launch("pooling");
}

}  // namespace

// ---- pooling -------------------------------------------------------------------------------

void pooling(const PoolingParams& p, const TensorRef& x, const TensorRef& out, cudaStream_t stream, bool x_channels_last,
             bool out_channels_last) {
  checked_volume(x, "pooling", "input 0");
  const i64 n = checked_volume(out, "pooling", "the output");
  if (!is_float_type(x.type))
    fail("pooling: input 0 has type " + tn(x.type) + "; it takes float32, float16 or bfloat16");
  if (x.dims.rank() < 3 || x.dims.rank() != p.window.rank() + 2)
    fail("pooling: input dims " + x.dims.str() + " do not match window " + p.window.str());
  if (p.type != PoolingType::kMAX && p.type != PoolingType::kAVERAGE && p.type != PoolingType::kMAX_AVERAGE_BLEND)
    fail("pooling: unknown pooling type " + std::to_string(static_cast<int>(p.type)));
  // The output against the layer's shape rules (graph inference), as the CPU checks it.
  {
    std::vector<graph::TensorDesc> res;
    try {
      const std::vector<graph::TensorDesc> in{{x.type, x.dims}};
      const std::vector<graph::InputFacts> facts(in.size(), graph::InputFacts{true, std::nullopt});
      res = graph::infer(LayerParams{p}, in, facts);
    } catch (const InvalidArgument& e) {
      fail(std::string("pooling: ") + e.what());
    }
    if (res.size() != 1 || res[0].type != out.type || !(res[0].dims == out.dims))
      fail("pooling: the output is " + tn(out.type) + out.dims.str() + "; expected " +
           (res.empty() ? std::string("?") : tn(res[0].type) + res[0].dims.str()));
  }
  if (n == 0) return;
  // Geometry normalized to 3 spatial dims (missing leading ones: size 1, window 1, stride 1).
  const int ns = p.window.rank(), off = 3 - ns;
  const Dims eff = graph::window_pre_padding(x.dims, p.window, p.stride, p.pre_padding, p.post_padding, Dims{},
                                             p.padding_mode, false);
  const bool same = p.padding_mode == PaddingMode::kSAME_UPPER || p.padding_mode == PaddingMode::kSAME_LOWER;
  PoolArgs a;
  i64 out_sp[3];
  for (int i = 0; i < 3; ++i) {
    if (i < off) {
      a.in[i] = a.k[i] = a.s[i] = 1;
      a.pre[i] = 0;
      a.lim[i] = same ? INT64_MAX / 4 : 1;
      out_sp[i] = 1;
      continue;
    }
    const int j = i - off;
    a.in[i] = x.dims[2 + j];
    a.k[i] = p.window[j];
    a.s[i] = p.stride.rank() == 0 ? 1 : p.stride[j];
    a.pre[i] = eff[j];
    const i64 post = p.post_padding.rank() == 0 ? 0 : p.post_padding[j];
    // The padded input ends at in + post (explicit modes; EXPLICIT_ROUND_UP windows may reach
    // past it and are clipped there). SAME windows never reach past their computed padding.
    a.lim[i] = same ? INT64_MAX / 4 : a.in[i] + post;
    out_sp[i] = out.dims[2 + j];
  }
  a.in_sp = a.in[0] * a.in[1] * a.in[2];
  a.type = static_cast<int>(p.type);
  a.exclude = p.average_count_excludes_padding;
  a.blend = p.type == PoolingType::kMAX_AVERAGE_BLEND ? static_cast<double>(p.blend_factor) : 0.0;
  // 2-D windows over an input whose offsets, coordinates and products of them fit in int.
  const i64 in_volume = x.dims.volume();
  const bool flat = a.in[0] == 1 && a.k[0] == 1 && out_sp[0] == 1;
  bool fits = flat && in_volume < kSmall && n < kSmall;
  for (int i = 1; i < 3 && fits; ++i)
    fits = a.in[i] < (i64{1} << 20) && a.k[i] < (i64{1} << 20) && a.s[i] < (i64{1} << 20) &&
           a.pre[i] < (i64{1} << 20) && a.pre[i] > -(i64{1} << 20) && out_sp[i] * a.s[i] < (i64{1} << 29);
  Pool2dArgs b;
  if (fits) {
    b.in_h = static_cast<int>(a.in[1]), b.in_w = static_cast<int>(a.in[2]);
    b.k_h = static_cast<int>(a.k[1]), b.k_w = static_cast<int>(a.k[2]);
    b.s_h = static_cast<int>(a.s[1]), b.s_w = static_cast<int>(a.s[2]);
    b.pre_h = static_cast<int>(a.pre[1]), b.pre_w = static_cast<int>(a.pre[2]);
    constexpr i64 kFar = i64{1} << 30;  // beyond any window: a SAME mode's unbounded padding
    b.lim_h = static_cast<int>(std::min(a.lim[1], kFar)), b.lim_w = static_cast<int>(std::min(a.lim[2], kFar));
    b.type = a.type;
    b.exclude = a.exclude;
    b.blend = a.blend;
  }
  if (x_channels_last || out_channels_last) {
    pool_layouts(a, out_sp, fits ? &b : nullptr, x, out, x_channels_last, out_channels_last, stream);
    return;
  }
  const bool small = n < kSmall;
  if (fits) {
    by_float(x.type, [&](auto tag) {
      using Tag = decltype(tag);
      using T = typename Tag::T;
      auto launch = [&](auto kernel) {
        kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x.data), static_cast<T*>(out.data),
                                                       static_cast<u32>(n), Divider<u32>(out_sp[2]),
                                                       Divider<u32>(out_sp[1]), b);
      };
      if (b.k_h == 3 && b.k_w == 3) launch(pool2d_kernel<Tag, 3, 3>);
      else if (b.k_h == 2 && b.k_w == 2) launch(pool2d_kernel<Tag, 2, 2>);
      else launch(pool2d_kernel<Tag, 0, 0>);
    });
    check_launch("pooling");
    return;
  }
  by_float(x.type, [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::T;
    by_index(small, [&](auto ix) {
      using I = decltype(ix);
      pool_kernel<Tag, I><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x.data), static_cast<T*>(out.data),
                                                                  static_cast<I>(n), Divider<I>(out_sp[2]),
                                                                  Divider<I>(out_sp[1]), Divider<I>(out_sp[0]), a);
    });
  });
  check_launch("pooling");
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

namespace {

// The layouts the pooling reads and writes (layouts.h).
struct PoolingState final : OpState {
  bool in_channels_last = false, out_channels_last = false;
};

OpPrepared prepare_pooling(const OpSetup& setup) {
  const graph::Node& n = setup.node;
  OpPrepared r;
  if (!n.tactic.empty() && n.tactic != graph::Tactic("cuda.pooling"))
    throw CorruptEngineError("[cuda] node '" + n.name + "': tactic '" + graph::describe(n.tactic) +
                             "' is not a pooling's (malformed engine)");
  auto state = std::make_unique<PoolingState>();
  state->in_channels_last = setup.operand_channels_last[0];
  state->out_channels_last = setup.out_channels_last;
  r.state = std::move(state);
  return r;
}

}  // namespace

extern const OpKernel kPoolingKernel = {
    LayerType::kPOOLING, prepare_pooling, nullptr, [](const OpCall& c) {
      const auto& state = static_cast<const PoolingState&>(*c.state);
      pooling(std::get<PoolingParams>(c.node.params), ref(c.in[0]), ref(c.out), c.stream, state.in_channels_last,
              state.out_channels_last);
    }};

}  // namespace ops

}  // namespace tensoracle::cuda
