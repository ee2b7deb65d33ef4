// The CUDA backend's local response normalization (kernels.h) with the CPU's semantics
// (backends/cpu/ops/lrn.cpp): one thread per element, the window's squares summed in double.
#include <cstdint>

#include "backends/common/reduce_layout.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/op_kernel.h"
#include "backends/cuda/pointwise_util.cuh"

namespace tensoracle::cuda {

namespace {

using namespace pointwise;  // pointwise_util.cuh

template <class Tag>
__global__ void lrn_kernel(const typename Tag::T* x, typename Tag::T* y, i64 n, i64 C, i64 inner, int before, int after,
                           double coef, double k, double beta) {
  for (i64 e = first_index(); e < n; e += grid_step()) {
    i64 q, i, o, c;
    divmod(e, inner, q, i);
    divmod(q, C, o, c);
    const i64 base = o * C * inner + i;
    const i64 lo = c - before < 0 ? 0 : c - before, hi = c + after > C - 1 ? C - 1 : c + after;
    double sum = 0;
    for (i64 j = lo; j <= hi; ++j) {
      const double v = Tag::load(x[base + j * inner]);
      sum += v * v;
    }
    const double v = Tag::load(x[e]);
    y[e] = Tag::store(static_cast<float>(v / pow(k + coef * sum, beta)));
  }
}

}  // namespace

void lrn(const LrnParams& p, const TensorRef& x, const TensorRef& out, cudaStream_t stream) {
  const auto a = backends::common::check_lrn(dev::kFail, p, x, out);
  if (a.n == 0) return;
  dev::with_float(x.type, [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::T;
    lrn_kernel<Tag><<<blocks_for(a.n), kThreads, 0, stream>>>(static_cast<const T*>(x.data), static_cast<T*>(out.data), a.n,
                                                             a.dim, a.inner, (p.window - 1) / 2, p.window / 2,
                                                             static_cast<double>(p.alpha) / p.window, p.k, p.beta);
    check_launch("lrn");
  });
}

namespace ops {

extern const OpKernel kLrnKernel = {LayerType::kLRN, nullptr, nullptr, [](const OpCall& c) {
      lrn(std::get<LrnParams>(c.node.params), ref(c.in[0]), ref(c.out), c.stream);
    }};

}  // namespace ops

}  // namespace tensoracle::cuda
