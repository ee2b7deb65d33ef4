// The CUDA backend's parametric ReLU (kernels.h) with the CPU's semantics
// (backends/cpu/ops/parametric_relu.cpp): y = x >= 0 ? x : slope · x over a broadcast plan.
#include <cstdint>

#include "backends/common/pointwise_checks.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/op_kernel.h"
#include "backends/cuda/pointwise_util.cuh"

namespace tensoracle::cuda {

namespace {

using namespace pointwise;  // pointwise_util.cuh

template <class Tag>
__global__ void prelu_kernel(const typename Tag::T* x, const typename Tag::T* slope, typename Tag::T* y, i64 n, Plan<2> p) {
  for (i64 i = first_index(); i < n; i += grid_step()) {
    i64 off[2];
    if (p.rank == 1) {
      off[0] = i * p.s[0][0];
      off[1] = i * p.s[1][0];
    } else {
      plan_offsets(i, p, off);
    }
    const float v = Tag::load(x[off[0]]);
    y[i] = v >= 0.f ? x[off[0]] : Tag::store(__fmul_rn(v, Tag::load(slope[off[1]])));
  }
}

}  // namespace

void parametric_relu(const TensorRef& x, const TensorRef& slope, const TensorRef& out, cudaStream_t stream) {
  i64 n = 0;
  const Plan<2> p = backends::common::check_parametric_relu(dev::kFail, x, slope, out, n);
  if (n == 0) return;
  dev::with_float(x.type, [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::T;
    prelu_kernel<Tag><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x.data), static_cast<const T*>(slope.data),
                                                             static_cast<T*>(out.data), n, p);
    check_launch("parametric_relu");
  });
}

namespace ops {

extern const OpKernel kParametricReluKernel = {LayerType::kPARAMETRIC_RELU, nullptr, nullptr, [](const OpCall& c) {
      parametric_relu(ref(c.in[0]), ref(c.in[1]), ref(c.out), c.stream);
    }};

}  // namespace ops

}  // namespace tensoracle::cuda
