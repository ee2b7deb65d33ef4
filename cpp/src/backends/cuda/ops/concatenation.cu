// The CUDA backend's concatenation (kernels.h): raw element copies, every type.
#include <cstddef>
#include <cstdint>
#include <string>

#include "backends/common/index_checks.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/layout_util.cuh"
#include "backends/cuda/op_kernel.h"
#include "graph/ops.h"

namespace tensoracle::cuda {

namespace {

using namespace layout;  // layout_util.cuh

// ---- concatenation -------------------------------------------------------------------------

// One input's slab: input element i = (o, j) of [outer, cols] goes to o * row + offset + j.
template <class E, class I>
__global__ void __launch_bounds__(kThreads)
    concat_kernel(const E* __restrict__ x, E* __restrict__ y, I n, Divider<I> cols, I row, I offset) {
  GRID_STRIDE_LOOP(I, i, n) {
    I o = i;
    const I j = take(o, cols);
    y[o * row + offset + j] = x[i];
  }
}

}  // namespace

// ---- concatenation -------------------------------------------------------------------------

void concatenation(int axis, std::span<const TensorRef> inputs, const TensorRef& out, cudaStream_t stream) {
  const i64 n = backends::common::check_concatenation(dev::kFail, axis, inputs, out);
  const int rank = out.dims.rank();
  if (n == 0) return;
  const std::size_t es = element_size(out.type);
  const i64 outer = prod(out.dims, 0, axis);
  const i64 after = prod(out.dims, axis + 1, rank);  // elements per index of the axis
  const i64 row = out.dims[axis] * after;            // output elements per outer index
  auto* dst = static_cast<unsigned char*>(out.data);
  i64 at = 0;  // the input's offset within an output row, in elements
  for (const TensorRef& t : inputs) {
    const i64 cols = t.dims[axis] * after;  // input elements per outer index
    if (cols == 0) continue;
    if (outer == 1) {
      memcpy_async(dst + at * static_cast<i64>(es), t.data, cols * static_cast<i64>(es), stream, "concatenation");
    } else {
      const int w = unit_bytes(es, {t.data, out.data}, [&](i64 k) { return cols % k == 0 && row % k == 0 && at % k == 0; });
      const i64 k = w / static_cast<i64>(es);
      const i64 units = outer * cols / k;
      by_width(w, "concatenation", [&](auto e) {
        using E = decltype(e);
        by_index(n / k < kSmall, [&](auto ix) {
          using I = decltype(ix);
          concat_kernel<E, I><<<blocks_for(units), kThreads, 0, stream>>>(
              static_cast<const E*>(t.data), static_cast<E*>(out.data), static_cast<I>(units), Divider<I>(cols / k),
              static_cast<I>(row / k), static_cast<I>(at / k));
        });
      });
      check_launch("concatenation");
    }
    at += cols;
  }
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kConcatenationKernel = {
    LayerType::kCONCATENATION, nullptr, nullptr, [](const OpCall& c) {
      const auto& p = std::get<ConcatenationParams>(c.node.params);
      concatenation(graph::concat_axis(p, c.in[0].dims.rank()), input_refs(c), ref(c.out), c.stream);
    }};

}  // namespace ops

}  // namespace tensoracle::cuda
