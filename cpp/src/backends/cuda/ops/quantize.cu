// The CUDA backend's quantize and dequantize (kernels.h), bit-exact with the CPU's
// (backends/cpu/ops/quantize.cpp), and activation_quantize: quantize(activation(x)) in one pass.
#include <cstdint>
#include <string>

#include "backends/common/pointwise_checks.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/op_kernel.h"
#include "backends/cuda/pointwise_util.cuh"

namespace tensoracle::cuda {

namespace {

using namespace pointwise;  // pointwise_util.cuh

// int8 as a quantized type: stores round half to even and saturate to [-128, 127]; NaN gives 0
// (the CPU's QI8). rintf rounds to nearest even (the GPU has no other rounding mode).
struct QI8 {
  using T = std::int8_t;
  __device__ static float load(T v) { return static_cast<float>(v); }
  __device__ static T store(float x) {
    const float r = rintf(x);
    if (!(r == r)) return 0;
    return r >= 127.f ? T{127} : r <= -128.f ? T{-128} : static_cast<T>(r);
  }
};

// ---- quantize / dequantize --------------------------------------------------------------

// Per-tensor (one scale) or per-channel along `axis`: element i uses scale[(i / inner) % channels].
using Channels = backends::common::QuantizeChannels;

// A scale's element i as float; the scale is float32, float16 or bfloat16 (checked on the host).
__device__ inline float load_scale(const void* s, i64 i, DataType t) {
  switch (t) {
    case DataType::kHALF: return F16::load(static_cast<const F16::T*>(s)[i]);
    case DataType::kBF16: return BF16::load(static_cast<const BF16::T*>(s)[i]);
    default: return F32::load(static_cast<const F32::T*>(s)[i]);
  }
}

// Per channel: o[i] = Out::store(In::load(x[i]) / scale) (quantize) or * scale (dequantize),
// the scale of element i's channel. The division is the correctly rounded one, as on the CPU.
template <class In, class Out, bool kQuantize>
__global__ void scaled_kernel(const typename In::T* x, typename Out::T* o, i64 n, const void* scale,
                              DataType scale_type, Channels c) {
  auto apply = [](float v, float sc) { return kQuantize ? __fdiv_rn(v, sc) : v * sc; };
  for (i64 i = first_index(); i < n; i += grid_step()) {
    i64 row, col, q, ch;
    divmod(i, c.inner, row, col);
    divmod(row, c.channels, q, ch);
    o[i] = Out::store(apply(In::load(x[i]), load_scale(scale, ch, scale_type)));
  }
}

// y / s rounded correctly (as __fdiv_rn) for a divisor fixed per thread: the reciprocal is
// computed once, and each quotient y * (1/s) gets two residual corrections (the FMA sequence of
// the hardware's own division; with 1/s correctly rounded, Markstein's theorem makes the result
// the correctly rounded quotient). Operands of magnitude outside [2^-40, 2^40], zeros, infinities
// and NaNs (where a residual could underflow, or a sign of zero be lost) take __fdiv_rn.
struct Divider {
  float s = 1.f, r = 1.f;
  bool fast = false;
  __device__ static bool moderate(float v) {
    const float a = fabsf(v);
    return a >= 0x1p-40f && a <= 0x1p40f;
  }
  __device__ explicit Divider(float divisor) {
    s = divisor;
    r = __fdiv_rn(1.f, divisor);
    fast = moderate(divisor);
  }
  __device__ float operator()(float y) const {
    if (!fast || !moderate(y)) return __fdiv_rn(y, s);
    float q = __fmul_rn(y, r);
    q = __fmaf_rn(__fmaf_rn(-s, q, y), r, q);
    return __fmaf_rn(__fmaf_rn(-s, q, y), r, q);
  }
};

// One scale for every element (read from the device, so no host synchronization): read once
// per thread (bind), as a Divider when quantizing.
template <class In, class Out, bool kQuantize>
struct PerTensorScaled {
  const void* scale;
  DataType scale_type;
  struct Bound {
    float sc;
    Divider div;
    __device__ typename Out::T operator()(typename In::T v) const {
      return Out::store(kQuantize ? div(In::load(v)) : In::load(v) * sc);
    }
  };
  __device__ Bound bind() const {
    const float sc = load_scale(scale, 0, scale_type);
    return Bound{sc, Divider(sc)};
  }
};

template <class In, class Out, bool kQuantize>
void launch_scaled(const TensorRef& x, const TensorRef& scale, const TensorRef& out, i64 n, const Channels& c,
                   cudaStream_t stream, const char* kernel) {
  if (c.channels == 1) {
    map(static_cast<const typename In::T*>(x.data), static_cast<typename Out::T*>(out.data), n,
        PerTensorScaled<In, Out, kQuantize>{scale.data, scale.type}, stream);
    check_launch(kernel);
    return;
  }
  scaled_kernel<In, Out, kQuantize><<<blocks_for(n), kThreads, 0, stream>>>(
      static_cast<const typename In::T*>(x.data), static_cast<typename Out::T*>(out.data), n, scale.data,
      scale.type, c);
  check_launch(kernel);
}

// The scale must be float32 or the values' float type.
void check_scale_type(const TensorRef& scale, DataType value_type, const char* kernel) {
  if (scale.type != DataType::kFLOAT && scale.type != value_type)
    fail(std::string(kernel) + ": the scale has type " + tn(scale.type) + "; it must be float32 or " + tn(value_type));
}

}  // namespace

void quantize(const TensorRef& x, const TensorRef& scale, int axis, const TensorRef& out, cudaStream_t stream) {
  const backends::common::QuantizeShape shape = backends::common::check_quantize(dev::kFail, true, x, scale, axis, out);
  const i64 n = shape.n;
  const Channels c = shape.channels;
  const bool ok = dev::with_float(x.type, [&](auto tag) {
    using In = decltype(tag);
    check_scale_type(scale, x.type, "quantize");
    if (n == 0) return;
    if (out.type == DataType::kINT8) launch_scaled<In, QI8, true>(x, scale, out, n, c, stream, "quantize");
    else launch_scaled<In, FP8, true>(x, scale, out, n, c, stream, "quantize");
  });
  if (!ok) fail("quantize takes float32, float16 or bfloat16, not " + tn(x.type));
}

// quantize(activation(x)) with the activation's result rounded to x's type in between, as the
// two layers give when the intermediate is stored.
template <class FT, class Out, A type>
struct ActivationQuantized {
  Activation<type> act;
  const void* scale;
  DataType scale_type;
  struct Bound {
    Activation<type> act;
    Divider div;
    __device__ typename Out::T operator()(typename FT::T v) const {
      return Out::store(div(FT::load(FT::store(act(FT::load(v))))));
    }
  };
  __device__ Bound bind() const { return Bound{act, Divider(load_scale(scale, 0, scale_type))}; }
};

void activation_quantize(const ActivationParams& p, const TensorRef& x, const TensorRef& scale, const TensorRef& out,
                         cudaStream_t stream) {
  const i64 n = checked_volume(x, "activation_quantize", "the input");
  if (checked_volume(scale, "activation_quantize", "the scale") != 1)
    fail("activation_quantize: the scale " + desc(scale) + " must have one element");
  if (checked_volume(out, "activation_quantize", "the output") != n)
    fail("activation_quantize: the output dims " + out.dims.str() + " differ from the input's " + x.dims.str());
  if (out.type != DataType::kINT8 && out.type != DataType::kFP8)
    fail("activation_quantize: the output type " + tn(out.type) + " is not int8 or fp8");
  const bool ok = dev::with_float(x.type, [&](auto tag) {
    using FT = decltype(tag);
    check_scale_type(scale, x.type, "activation_quantize");
    if (n == 0) return;
    with_activation(p.type, [&](auto type) {
      constexpr A kType = decltype(type)::value;
      const Activation<kType> act{p.alpha, p.beta};
      const auto* in = static_cast<const typename FT::T*>(x.data);
      if (out.type == DataType::kINT8)
        map(in, static_cast<QI8::T*>(out.data), n, ActivationQuantized<FT, QI8, kType>{act, scale.data, scale.type}, stream);
      else
        map(in, static_cast<FP8::T*>(out.data), n, ActivationQuantized<FT, FP8, kType>{act, scale.data, scale.type}, stream);
      check_launch("activation_quantize");
    });
  });
  if (!ok) fail("activation_quantize takes float32, float16 or bfloat16, not " + tn(x.type));
}

void dequantize(const TensorRef& x, const TensorRef& scale, int axis, const TensorRef& out, cudaStream_t stream) {
  const backends::common::QuantizeShape shape = backends::common::check_quantize(dev::kFail, false, x, scale, axis, out);
  const i64 n = shape.n;
  const Channels c = shape.channels;
  const bool ok = dev::with_float(out.type, [&](auto tag) {
    using Out = decltype(tag);
    check_scale_type(scale, out.type, "dequantize");
    if (n == 0) return;
    if (x.type == DataType::kINT8) launch_scaled<QI8, Out, false>(x, scale, out, n, c, stream, "dequantize");
    else launch_scaled<FP8, Out, false>(x, scale, out, n, c, stream, "dequantize");
  });
  if (!ok) fail("dequantize (output) takes float32, float16 or bfloat16, not " + tn(out.type));
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

namespace {

int norm_axis(int axis, int rank) { return axis < 0 ? axis + rank : axis; }

}  // namespace

extern const OpKernel kQuantizeKernel = {
    LayerType::kQUANTIZE, nullptr, nullptr, [](const OpCall& c) {
      const auto& p = std::get<QuantizeParams>(c.node.params);
      quantize(ref(c.in[0]), ref(c.in[1]), norm_axis(p.axis, c.in[0].dims.rank()), ref(c.out), c.stream);
    }};

extern const OpKernel kDequantizeKernel = {
    LayerType::kDEQUANTIZE, nullptr, nullptr, [](const OpCall& c) {
      const auto& p = std::get<DequantizeParams>(c.node.params);
      dequantize(ref(c.in[0]), ref(c.in[1]), norm_axis(p.axis, c.in[0].dims.rank()), ref(c.out), c.stream);
    }};

}  // namespace ops

}  // namespace tensoracle::cuda
