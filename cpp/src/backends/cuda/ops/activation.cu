// The CUDA backend's activation (kernels.h) with the CPU's semantics (backends/cpu/ops/
// activation.cpp), and the bias + activation passes of convolutions (bias_activation, packed or
// channels-last): y = activation(y + bias[c]), the sum rounded to y's type first.
#include <algorithm>
#include <cstdint>

#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/op_kernel.h"
#include "backends/cuda/pointwise_util.cuh"

namespace tensoracle::cuda {

namespace {

using namespace pointwise;  // pointwise_util.cuh

template <class FT>
void activation_typed(const ActivationParams& p, const TensorRef& x, const TensorRef& out, i64 n,
                      cudaStream_t stream) {
  with_activation(p.type, [&](auto type) {
    launch_map<FT, FT>(x.data, out.data, n, Activation<decltype(type)::value>{p.alpha, p.beta}, stream, "activation");
  });
}

}  // namespace

void activation(const ActivationParams& p, const TensorRef& x, const TensorRef& out, cudaStream_t stream) {
  const i64 n = checked_volume(x, "activation", "the input");
  if (checked_volume(out, "activation", "the output") != n || out.type != x.type)
    fail("activation: the output " + desc(out) + " differs from the input " + desc(x));
  const bool ok = dev::with_float(x.type, [&](auto tag) {
    if (n > 0) activation_typed<decltype(tag)>(p, x, out, n, stream);
  });
  if (!ok) fail("activation takes float32, float16 or bfloat16, not " + tn(x.type));
}

template <class Tag, class Op, int kVec>
__global__ void __launch_bounds__(kThreads)
    plane_bias_kernel(typename Tag::T* __restrict__ y, const typename Tag::T* __restrict__ bias, i64 planes, i64 P, i64 C,
                      Op op) {
  using T = typename Tag::T;
  for (i64 plane = blockIdx.x; plane < planes; plane += gridDim.x) {
    const float b = bias ? Tag::load(bias[plane % C]) : 0.f;
    T* row = y + plane * P;
    if constexpr (kVec > 1) {
      auto* rv = reinterpret_cast<uint4*>(row);
      for (i64 i = threadIdx.x; i < P / kVec; i += blockDim.x) {
        uint4 v = rv[i];
        T* e = reinterpret_cast<T*>(&v);
#pragma unroll
        for (int k = 0; k < kVec; ++k) e[k] = op(e[k], b);
        rv[i] = v;
      }
    } else {
      for (i64 i = threadIdx.x; i < P; i += blockDim.x) row[i] = op(row[i], b);
    }
  }
}

void bias_activation(const TensorRef& y, const void* bias, const ActivationParams* act, cudaStream_t stream) {
  const i64 n = checked_volume(y, "bias_activation", "the tensor");
  if (y.dims.rank() < 2) fail("bias_activation: the tensor " + desc(y) + " has no channel dim");
  const i64 C = y.dims[1], planes = y.dims[0] * C;
  if (n == 0 || (bias == nullptr && act == nullptr)) return;
  const i64 P = n / planes;
  const bool ok = dev::with_float(y.type, [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::T;
    constexpr int kVec = 16 / sizeof(T);
    const bool vec = P % kVec == 0 && reinterpret_cast<std::uintptr_t>(y.data) % 16 == 0;
    const unsigned grid = static_cast<unsigned>(std::min<i64>(planes, 65535 * 8));
    auto* data = static_cast<T*>(y.data);
    const auto* b = static_cast<const T*>(bias);
    with_activation(act ? act->type : A::kRELU, [&](auto type) {
      const BiasActivation<Tag, decltype(type)::value> op{{act ? act->alpha : 0.f, act ? act->beta : 0.f}, bias != nullptr,
                                                          act != nullptr};
      if (vec) plane_bias_kernel<Tag, decltype(op), kVec><<<grid, kThreads, 0, stream>>>(data, b, planes, P, C, op);
      else plane_bias_kernel<Tag, decltype(op), 1><<<grid, kThreads, 0, stream>>>(data, b, planes, P, C, op);
    });
    check_launch("bias_activation");
  });
  if (!ok) fail("bias_activation takes float32, float16 or bfloat16, not " + tn(y.type));
}

// bias_activation over a channels-last y (element i has channel i % C): V-element vectors (V
// divides C, so a vector stays within one position's channels).
template <class Tag, class Op, int V>
__global__ void __launch_bounds__(kThreads)
    channel_last_bias_kernel(typename Tag::T* __restrict__ y, const typename Tag::T* __restrict__ bias, i64 packs,
                             i64 C, Op op) {
  using P = Pack<typename Tag::T, V>;
  for (i64 i = first_index(); i < packs; i += grid_step()) {
    P p = reinterpret_cast<P*>(y)[i];
    const i64 c0 = (i * V) % C;
#pragma unroll
    for (int k = 0; k < V; ++k) p.v[k] = op(p.v[k], bias ? Tag::load(bias[c0 + k]) : 0.f);
    reinterpret_cast<P*>(y)[i] = p;
  }
}

void bias_activation_channels_last(const TensorRef& y, const void* bias, const ActivationParams* act,
                                   cudaStream_t stream) {
  const i64 n = checked_volume(y, "bias_activation_channels_last", "the tensor");
  if (y.dims.rank() < 2) fail("bias_activation_channels_last: the tensor " + desc(y) + " has no channel dim");
  const i64 C = y.dims[1];
  if (n == 0 || (bias == nullptr && act == nullptr)) return;
  const bool ok = dev::with_float(y.type, [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::T;
    const bool aligned = reinterpret_cast<std::uintptr_t>(y.data) % 16 == 0;
    auto* data = static_cast<T*>(y.data);
    const auto* b = static_cast<const T*>(bias);
    with_activation(act ? act->type : A::kRELU, [&](auto type) {
      const BiasActivation<Tag, decltype(type)::value> op{{act ? act->alpha : 0.f, act ? act->beta : 0.f}, bias != nullptr,
                                                          act != nullptr};
      by_width<T>(aligned ? vector_width<T>({C}) : 1, [&](auto v) {
        constexpr int V = decltype(v)::value;
        channel_last_bias_kernel<Tag, decltype(op), V><<<blocks_for(n / V), kThreads, 0, stream>>>(data, b, n / V, C, op);
      });
    });
    check_launch("bias_activation_channels_last");
  });
  if (!ok) fail("bias_activation_channels_last takes float32, float16 or bfloat16, not " + tn(y.type));
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kActivationKernel = {LayerType::kACTIVATION, nullptr, nullptr, [](const OpCall& c) {
      activation(std::get<ActivationParams>(c.node.params), ref(c.in[0]), ref(c.out), c.stream);
    }};

}  // namespace ops

}  // namespace tensoracle::cuda
