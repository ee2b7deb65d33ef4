// The CUDA backend's one-hot (kernels.h) with the CPU's semantics (backends/cpu/ops/one_hot.cpp):
// one thread per output element.
#include <cstdint>

#include "backends/common/index_checks.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/op_kernel.h"
#include "backends/cuda/pointwise_util.cuh"

namespace tensoracle::cuda {

namespace {

using namespace pointwise;  // pointwise_util.cuh

template <class T, class I>
__global__ void one_hot_kernel(const I* idx, const T* values, T* y, i64 n, i64 depth, i64 inner) {
  const T off = values[0], on = values[1];
  for (i64 e = first_index(); e < n; e += grid_step()) {
    i64 q, i, o, d;
    divmod(e, inner, q, i);
    divmod(q, depth, o, d);
    i64 k = static_cast<i64>(idx[o * inner + i]);
    if (k < 0) k += depth;
    y[e] = k == d ? on : off;
  }
}

template <class T>
void launch(const backends::common::OneHotShape& s, const TensorRef& indices, const TensorRef& values, const TensorRef& out,
            cudaStream_t stream) {
  const auto* v = static_cast<const T*>(values.data);
  auto* y = static_cast<T*>(out.data);
  if (indices.type == DataType::kINT32)
    one_hot_kernel<T, std::int32_t><<<blocks_for(s.n), kThreads, 0, stream>>>(static_cast<const std::int32_t*>(indices.data), v, y,
                                                                             s.n, s.depth, s.inner);
  else
    one_hot_kernel<T, std::int64_t><<<blocks_for(s.n), kThreads, 0, stream>>>(static_cast<const std::int64_t*>(indices.data), v, y,
                                                                             s.n, s.depth, s.inner);
  check_launch("one_hot");
}

}  // namespace

void one_hot(const OneHotParams& p, const TensorRef& indices, const TensorRef& values, const TensorRef& out,
             cudaStream_t stream) {
  const auto s = backends::common::check_one_hot(dev::kFail, p, indices, values, out);
  if (s.n == 0) return;
  switch (element_size(out.type)) {
    case 1: launch<std::uint8_t>(s, indices, values, out, stream); break;
    case 2: launch<std::uint16_t>(s, indices, values, out, stream); break;
    case 4: launch<std::uint32_t>(s, indices, values, out, stream); break;
    case 8: launch<std::uint64_t>(s, indices, values, out, stream); break;
    default: fail("one_hot: unsupported element size " + dev::num(static_cast<i64>(element_size(out.type))));
  }
}

namespace ops {

extern const OpKernel kOneHotKernel = {LayerType::kONE_HOT, nullptr, nullptr, [](const OpCall& c) {
      one_hot(std::get<OneHotParams>(c.node.params), ref(c.in[0]), ref(c.in[1]), ref(c.out), c.stream);
    }};

}  // namespace ops

}  // namespace tensoracle::cuda
