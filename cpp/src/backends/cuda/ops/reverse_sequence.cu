// The CUDA backend's reverse-sequence (kernels.h) with the CPU's semantics
// (backends/cpu/ops/reverse_sequence.cpp), one thread per element; a length outside
// [0, sequence] is clamped into it (the CPU refuses it).
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
__global__ void reverse_sequence_kernel(const T* x, const I* lens, T* y, backends::common::ReverseSequenceShape s) {
  for (i64 e = first_index(); e < s.n; e += grid_step()) {
    const i64 b = e / s.batch_stride % s.batch, q = e / s.seq_stride % s.seq;
    i64 len = static_cast<i64>(lens[b]);
    len = len < 0 ? 0 : (len > s.seq ? s.seq : len);
    y[e] = x[q < len ? e + (len - 1 - 2 * q) * s.seq_stride : e];
  }
}

template <class T>
void launch(const backends::common::ReverseSequenceShape& s, const TensorRef& x, const TensorRef& lens, const TensorRef& out,
            cudaStream_t stream) {
  const auto* src = static_cast<const T*>(x.data);
  auto* dst = static_cast<T*>(out.data);
  if (lens.type == DataType::kINT32)
    reverse_sequence_kernel<T, std::int32_t><<<blocks_for(s.n), kThreads, 0, stream>>>(
        src, static_cast<const std::int32_t*>(lens.data), dst, s);
  else
    reverse_sequence_kernel<T, std::int64_t><<<blocks_for(s.n), kThreads, 0, stream>>>(
        src, static_cast<const std::int64_t*>(lens.data), dst, s);
  check_launch("reverse_sequence");
}

}  // namespace

void reverse_sequence(const ReverseSequenceParams& p, const TensorRef& x, const TensorRef& lens, const TensorRef& out,
                      cudaStream_t stream) {
  const auto s = backends::common::check_reverse_sequence(dev::kFail, p, x, lens, out);
  if (s.n == 0) return;
  switch (element_size(x.type)) {
    case 1: launch<std::uint8_t>(s, x, lens, out, stream); break;
    case 2: launch<std::uint16_t>(s, x, lens, out, stream); break;
    case 4: launch<std::uint32_t>(s, x, lens, out, stream); break;
    case 8: launch<std::uint64_t>(s, x, lens, out, stream); break;
    default: fail("reverse_sequence: unsupported element size " + dev::num(static_cast<i64>(element_size(x.type))));
  }
}

namespace ops {

extern const OpKernel kReverseSequenceKernel = {LayerType::kREVERSE_SEQUENCE, nullptr, nullptr, [](const OpCall& c) {
      reverse_sequence(std::get<ReverseSequenceParams>(c.node.params), ref(c.in[0]), ref(c.in[1]), ref(c.out), c.stream);
    }};

}  // namespace ops

}  // namespace tensoracle::cuda
