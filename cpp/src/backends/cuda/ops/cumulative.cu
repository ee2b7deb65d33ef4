// The CUDA backend's cumulative sum (kernels.h) with the CPU's semantics
// (backends/cpu/ops/cumulative.cpp): one thread per line along the axis, floats summed in
// double and rounded once per element, integers wrapping around.
#include <cstdint>
#include <type_traits>

#include "backends/common/reduce_layout.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/op_kernel.h"
#include "backends/cuda/pointwise_util.cuh"

namespace tensoracle::cuda {

namespace {

using namespace pointwise;  // pointwise_util.cuh

// Acc: double for the float tags, the unsigned integer for Int<I> (wrapping sums).
template <class I>
struct Int {
  using T = I;
};

template <class Tag, class Acc>
__global__ void cumulative_kernel(const typename Tag::T* x, typename Tag::T* y, i64 lines, i64 dim, i64 inner, bool exclusive,
                                  bool reverse) {
  for (i64 l = first_index(); l < lines; l += grid_step()) {
    i64 o, i;
    divmod(l, inner, o, i);
    const i64 step = reverse ? -inner : inner;
    i64 at = o * dim * inner + i + (reverse ? (dim - 1) * inner : 0);
    Acc sum = 0;
    for (i64 j = 0; j < dim; ++j, at += step) {
      Acc v;
      if constexpr (std::is_floating_point_v<Acc>) v = static_cast<double>(Tag::load(x[at]));
      else v = static_cast<Acc>(x[at]);
      if (!exclusive) sum += v;
      if constexpr (std::is_floating_point_v<Acc>) y[at] = Tag::store(static_cast<float>(sum));
      else y[at] = static_cast<typename Tag::T>(sum);
      if (exclusive) sum += v;
    }
  }
}

template <class Tag, class Acc>
void launch(const backends::common::AxisShape& a, const CumulativeParams& p, const TensorRef& x, const TensorRef& out,
            cudaStream_t stream) {
  using T = typename Tag::T;
  const i64 lines = a.outer * a.inner;
  cumulative_kernel<Tag, Acc><<<blocks_for(lines), kThreads, 0, stream>>>(static_cast<const T*>(x.data), static_cast<T*>(out.data),
                                                                         lines, a.dim, a.inner, p.exclusive, p.reverse);
  check_launch("cumulative");
}

}  // namespace

void cumulative(const CumulativeParams& p, const TensorRef& x, const TensorRef& out, cudaStream_t stream) {
  const auto a = backends::common::check_cumulative(dev::kFail, p, x, out);
  if (a.n == 0) return;
  if (x.type == DataType::kINT32) return launch<Int<std::int32_t>, std::uint32_t>(a, p, x, out, stream);
  if (x.type == DataType::kINT64) return launch<Int<std::int64_t>, std::uint64_t>(a, p, x, out, stream);
  dev::with_float(x.type, [&](auto tag) { launch<decltype(tag), double>(a, p, x, out, stream); });
}

namespace ops {

extern const OpKernel kCumulativeKernel = {LayerType::kCUMULATIVE, nullptr, nullptr, [](const OpCall& c) {
      cumulative(std::get<CumulativeParams>(c.node.params), ref(c.in[0]), ref(c.out), c.stream);
    }};

}  // namespace ops

}  // namespace tensoracle::cuda
