// The CUDA backend's resize (kernels.h) with the CPU's semantics (backends/cpu/ops/resize.cpp):
// the coordinate arithmetic in double rounded as the CPU rounds it, linear and cubic taps in
// float32 and one rounding.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "backends/common/index_checks.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/layout_util.cuh"
#include "backends/cuda/op_kernel.h"

namespace tensoracle::cuda {

namespace {

using namespace layout;  // layout_util.cuh

// ---- resize --------------------------------------------------------------------------------

using RCT = ResizeCoordinateTransformation;

// Per-dim geometry of a resize (the parameters that resize_coordinate needs).
struct ResizeDims {
  int rank = 0;
  i64 in[kMaxRank] = {}, out[kMaxRank] = {}, stride[kMaxRank] = {};
  double scale[kMaxRank] = {};  // given scales (when `given`)
  // 0: the dim maps output index o to input index o (no arithmetic); else nearest: 1,
  // linear/cubic: taps per output index (1 when every sample is integral, else 2 or 4).
  int taps[kMaxRank] = {};
  int rct = 0;       // ResizeCoordinateTransformation (validated)
  int rounding = 0;  // ResizeRoundMode (validated when nearest)
  bool upper = false, given = false, linear = false;
  double cubic = 0.0;  // cubic coefficient
};

// The input coordinate that output index o of dim d samples (the CPU's resize_coordinate).
__host__ __device__ inline double resize_coordinate(const ResizeDims& a, int d, i64 o) {
  const i64 in = a.in[d], out = a.out[d];
  if (out == 1 && a.upper) return 0.0;
  const double x = static_cast<double>(o);
  switch (static_cast<RCT>(a.rct)) {
    case RCT::kALIGN_CORNERS:
      return out == 1 ? 0.0 : ddiv(dmul(x, static_cast<double>(in - 1)), static_cast<double>(out - 1));
    case RCT::kASYMMETRIC:
      return a.given ? ddiv(x, a.scale[d]) : ddiv(dmul(x, static_cast<double>(in)), static_cast<double>(out));
    case RCT::kHALF_PIXEL:
    default:  // validated on the host
      return a.given ? dsub(ddiv(dadd(x, 0.5), a.scale[d]), 0.5)
                     : dsub(ddiv(dmul(dadd(x, 0.5), static_cast<double>(in)), static_cast<double>(out)), 0.5);
  }
}

// The CPU's nearest_index.
__host__ __device__ inline i64 nearest_index(int mode, double x, i64 in) {
  double r;
  switch (static_cast<ResizeRoundMode>(mode)) {
    case ResizeRoundMode::kHALF_UP: r = floor(dadd(x, 0.5)); break;
    case ResizeRoundMode::kHALF_DOWN: r = ceil(dsub(x, 0.5)); break;
    case ResizeRoundMode::kFLOOR: r = floor(x); break;
    default: r = ceil(x); break;  // kCEIL (validated on the host)
  }
  if (!(r >= 0.0)) return 0;  // also NaN
  if (r >= static_cast<double>(in - 1)) return in - 1;
  return static_cast<i64>(r);
}

// A linear sample coordinate is clamped into the input (std::clamp: NaN stays NaN).
__host__ __device__ inline double clamp_coordinate(double v, i64 in) {
  const double hi = static_cast<double>(in - 1);
  return v < 0.0 ? 0.0 : hi < v ? hi : v;
}

// The CPU's cubic_weight, in its order of operations.
__device__ inline double cubic_weight(double d, double a) {
  d = fabs(d);
  if (d <= 1.0) return dadd(dmul(dmul(dsub(dmul(dadd(a, 2.0), d), dadd(a, 3.0)), d), d), 1.0);
  if (d < 2.0) return dsub(dmul(dadd(dmul(dsub(dmul(a, d), dmul(5.0, a)), d), dmul(8.0, a)), d), dmul(4.0, a));
  return 0.0;
}

// Taps (input offset, weight) of output index o of dim d (the CPU's resize_taps).
__device__ inline void resize_taps(const ResizeDims& a, int d, i64 o, i64* off, float* w) {
  const i64 in = a.in[d], stride = a.stride[d];
  if (a.taps[d] == 0) {  // the identity
    off[0] = o * stride;
    w[0] = 1.f;
    return;
  }
  double v = resize_coordinate(a, d, o);
  if (a.linear) v = clamp_coordinate(v, in);
  if (a.taps[d] == 1) {
    off[0] = static_cast<i64>(v) * stride;
    w[0] = 1.f;
    return;
  }
  const double f = floor(v);
  const double frac = dsub(v, f);
  const i64 i0 = static_cast<i64>(f);
  auto clampi = [in](i64 i) { return i < 0 ? i64{0} : i > in - 1 ? in - 1 : i; };
  if (a.taps[d] == 2) {
    off[0] = clampi(i0) * stride;
    off[1] = clampi(i0 + 1) * stride;
    w[0] = __double2float_rn(dsub(1.0, frac));
    w[1] = __double2float_rn(frac);
  } else {
    for (int k = -1; k <= 2; ++k) {
      off[k + 1] = clampi(i0 + k) * stride;
      w[k + 1] = __double2float_rn(cubic_weight(dsub(frac, static_cast<double>(k)), a.cubic));
    }
  }
}

template <class I>
struct OutDims {
  Divider<I> d[kMaxRank];
};

// Splits linear index i into the output index of every dim.
template <class I>
__device__ __forceinline__ void split_index(I i, int rank, const OutDims<I>& od, i64* o) {
#pragma unroll
  for (int k = kMaxRank - 1; k >= 0; --k)
    if (k < rank) o[k] = static_cast<i64>(k > 0 ? take(i, od.d[k]) : i);
}

template <class E, class I>
__global__ void __launch_bounds__(kThreads)
    resize_nearest_kernel(const E* __restrict__ x, E* __restrict__ y, I n, ResizeDims a, OutDims<I> od) {
  GRID_STRIDE_LOOP(I, i, n) {
    i64 o[kMaxRank];
    split_index(i, a.rank, od, o);
    i64 off = 0;
    for (int d = 0; d < a.rank; ++d)
      off += (a.taps[d] == 0 ? o[d] : nearest_index(a.rounding, resize_coordinate(a, d, o[d]), a.in[d])) * a.stride[d];
    y[i] = x[off];
  }
}

// Linear/cubic (the CPU's resize_interp): acc = sum over the combinations c of the outer dims
// with several taps (in order, the last of them fastest) of w_c * part_c, w_c the product of
// their weights (from 1.f, in dim order), part_c = sum over the KL taps of the last dim of
// w_k * x; every step rounded to float as the CPU rounds it.
template <class Tag, class I, int KL>
__global__ void __launch_bounds__(kThreads) resize_interp_kernel(const typename Tag::T* __restrict__ x,
                                                                 typename Tag::T* __restrict__ y, I n, ResizeDims a,
                                                                 OutDims<I> od) {
  GRID_STRIDE_LOOP(I, i, n) {
    i64 o[kMaxRank];
    split_index(i, a.rank, od, o);
    const int last = a.rank - 1;
    i64 base = 0;
    int nm = 0;
    int mk[kMaxRank];           // taps of each multi-tap outer dim
    i64 moff[kMaxRank - 1][4];  // their offsets and weights
    float mw[kMaxRank - 1][4];
    i64 combos = 1;
    for (int d = 0; d < last; ++d) {
      if (a.taps[d] <= 1) {
        i64 off;
        float w;
        resize_taps(a, d, o[d], &off, &w);
        base += off;
      } else {
        resize_taps(a, d, o[d], moff[nm], mw[nm]);
        mk[nm] = a.taps[d];
        combos *= a.taps[d];
        ++nm;
      }
    }
    i64 loff[4];
    float lw[4];
    resize_taps(a, last, o[last], loff, lw);
    int tix[kMaxRank] = {};
    float acc = 0.f;
    for (i64 c = 0; c < combos; ++c) {
      i64 off = base;
      float w = 1.f;
      for (int m = 0; m < nm; ++m) {
        off += moff[m][tix[m]];
        w = __fmul_rn(w, mw[m][tix[m]]);
      }
      float part = 0.f;
#pragma unroll
      for (int k = 0; k < KL; ++k) part = __fadd_rn(part, __fmul_rn(lw[k], Tag::load(x[off + loff[k]])));
      acc = __fadd_rn(acc, __fmul_rn(w, part));
      for (int m = nm - 1; m >= 0; --m) {
        if (++tix[m] < mk[m]) break;
        tix[m] = 0;
      }
    }
    y[i] = Tag::store(acc);
  }
}

}  // namespace

// ---- resize --------------------------------------------------------------------------------

void resize(const ResizeParams& p, const TensorRef& x, const TensorRef& out, cudaStream_t stream) {
  const i64 n = backends::common::check_resize(dev::kFail, p, x, out);
  const int r = x.dims.rank();
  if (n == 0) return;
  const bool nearest = p.mode == InterpolationMode::kNEAREST;
  const bool upper = p.selector_for_single_pixel == ResizeSelector::kUPPER;
  // What the CPU refuses when it computes the first coordinate of each dim.
  const bool rct_ok = p.coordinate_transformation == RCT::kALIGN_CORNERS ||
                      p.coordinate_transformation == RCT::kASYMMETRIC || p.coordinate_transformation == RCT::kHALF_PIXEL;
  const int rounding = static_cast<int>(p.nearest_rounding);
  for (int d = 0; d < r; ++d) {
    if (!rct_ok && !(out.dims[d] == 1 && upper))
      fail("resize: unknown coordinate transformation " + std::to_string(static_cast<int>(p.coordinate_transformation)));
    if (nearest && (rounding < 0 || rounding > static_cast<int>(ResizeRoundMode::kCEIL)))
      fail("resize: unknown nearest rounding " + std::to_string(rounding));
  }
  const std::size_t es = element_size(x.type);
  if (r == 0) {  // one element
    memcpy_async(out.data, x.data, static_cast<i64>(es), stream, "resize");
    return;
  }
  ResizeDims a;
  a.rank = r;
  a.rct = static_cast<int>(p.coordinate_transformation);
  a.rounding = rounding;
  a.upper = upper;
  a.given = !p.scales.empty();
  a.linear = p.mode == InterpolationMode::kLINEAR;
  a.cubic = static_cast<double>(p.cubic_coeff);
  strides_of(x.dims, a.stride);
  for (int d = 0; d < r; ++d) {
    a.in[d] = x.dims[d];
    a.out[d] = out.dims[d];
    a.scale[d] = a.given ? static_cast<double>(p.scales[static_cast<std::size_t>(d)]) : 0.0;
  }
  // Per dim, on the host with the device's arithmetic: dims that map every o to input index o
  // (taps 0: no arithmetic on the device), and linear/cubic dims whose every sample sits on an
  // input element (one tap, as the CPU's resize_taps decides).
  for (int d = 0; d < r; ++d) {
    const i64 in = a.in[d], on = a.out[d];
    bool identity = true, integral = true;
    for (i64 o = 0; o < on && (nearest ? identity : integral); ++o) {
      if (nearest) {
        identity = nearest_index(a.rounding, resize_coordinate(a, d, o), in) == o;
      } else {
        double v = resize_coordinate(a, d, o);
        if (a.linear) v = clamp_coordinate(v, in);
        integral = std::floor(v) == v && v >= 0.0 && v <= static_cast<double>(in - 1);
        identity = identity && v == static_cast<double>(o);
      }
    }
    if (nearest) a.taps[d] = identity ? 0 : 1;
    else a.taps[d] = integral ? (identity ? 0 : 1) : a.linear ? 2 : 4;
  }
  const bool small = n < kSmall;
  if (nearest) {
    by_width(static_cast<int>(es), "resize", [&](auto e) {
      using E = decltype(e);
      by_index(small, [&](auto ix) {
        using I = decltype(ix);
        OutDims<I> od;
        for (int d = 0; d < r; ++d) od.d[d] = Divider<I>(a.out[d]);
        resize_nearest_kernel<E, I><<<blocks_for(n), kThreads, 0, stream>>>(
            static_cast<const E*>(x.data), static_cast<E*>(out.data), static_cast<I>(n), a, od);
      });
    });
    check_launch("resize");
    return;
  }
  by_float(x.type, [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::T;
    by_index(small, [&](auto ix) {
      using I = decltype(ix);
      OutDims<I> od;
      for (int d = 0; d < r; ++d) od.d[d] = Divider<I>(a.out[d]);
      const auto* xs = static_cast<const T*>(x.data);
      auto* ys = static_cast<T*>(out.data);
      const unsigned blocks = blocks_for(n);
      switch (a.taps[r - 1]) {
        case 0:
        case 1: resize_interp_kernel<Tag, I, 1><<<blocks, kThreads, 0, stream>>>(xs, ys, static_cast<I>(n), a, od); break;
        case 2: resize_interp_kernel<Tag, I, 2><<<blocks, kThreads, 0, stream>>>(xs, ys, static_cast<I>(n), a, od); break;
        default: resize_interp_kernel<Tag, I, 4><<<blocks, kThreads, 0, stream>>>(xs, ys, static_cast<I>(n), a, od); break;
      }
    });
  });
  check_launch("resize");
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kResizeKernel = {LayerType::kRESIZE, nullptr, nullptr, [](const OpCall& c) {
      resize(std::get<ResizeParams>(c.node.params), ref(c.in[0]), ref(c.out), c.stream);
    }};

}  // namespace ops

}  // namespace tensoracle::cuda
