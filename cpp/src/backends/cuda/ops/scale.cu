// The CUDA backend's scale (kernels.h) with the CPU's semantics (backends/cpu/ops/scale.cpp):
// y = (x · scale + shift)^power, coefficient (e / inner) % count of each operand that has more
// than one (backends/common/pointwise_checks.h: check_scale).
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
__global__ void scale_kernel(const typename Tag::T* x, const float* shift, const float* scale, const float* power,
                             typename Tag::T* y, i64 n, i64 inner, i64 count, bool s0, bool s1, bool s2) {
  for (i64 e = first_index(); e < n; e += grid_step()) {
    i64 q, r, c;
    divmod(e, inner, q, r);
    divmod(q, count, r, c);
    const float sh = shift[s0 ? 0 : c], sc = scale[s1 ? 0 : c], pw = power[s2 ? 0 : c];
    float v = __fmul_rn(Tag::load(x[e]), sc);
    v = __fadd_rn(v, sh);
    if (pw != 1.f) v = powf(v, pw);
    y[e] = Tag::store(v);
  }
}

}  // namespace

void scale(const ScaleParams& p, const TensorRef& x, const TensorRef& shift, const TensorRef& scale, const TensorRef& power,
           const TensorRef& out, cudaStream_t stream) {
  const auto s = backends::common::check_scale(dev::kFail, p, x, shift, scale, power, out);
  if (s.n == 0) return;
  dev::with_float(x.type, [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::T;
    scale_kernel<Tag><<<blocks_for(s.n), kThreads, 0, stream>>>(
        static_cast<const T*>(x.data), static_cast<const float*>(shift.data), static_cast<const float*>(scale.data),
        static_cast<const float*>(power.data), static_cast<T*>(out.data), s.n, s.inner, s.count, s.single[0], s.single[1],
        s.single[2]);
    check_launch("scale");
  });
}

namespace ops {

extern const OpKernel kScaleKernel = {LayerType::kSCALE, nullptr, nullptr, [](const OpCall& c) {
      scale(std::get<ScaleParams>(c.node.params), ref(c.in[0]), ref(c.in[1]), ref(c.in[2]), ref(c.in[3]), ref(c.out),
            c.stream);
    }};

}  // namespace ops

}  // namespace tensoracle::cuda
