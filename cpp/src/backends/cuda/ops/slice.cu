// The CUDA backend's slice (kernels.h): a plan copy, or a sampling copy where reads fall
// outside the input (layout_util.cuh); raw elements of every type.
#include <cstdint>
#include <span>
#include <string>

#include "backends/common/index_checks.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/layout_util.cuh"
#include "backends/cuda/op_kernel.h"
#include "tensoracle/errors.h"

namespace tensoracle::cuda {

using namespace layout;  // layout_util.cuh

// ---- slice ---------------------------------------------------------------------------------

void slice(const SliceParams& p, const TensorRef& x, const TensorRef* fill, const TensorRef& out, cudaStream_t stream) {
  const i64 n = backends::common::check_slice(dev::kFail, p, x, fill, out);
  const int r = x.dims.rank();
  const void* fill_value = fill != nullptr ? fill->data : nullptr;
  if (n == 0) return;
  // What the CPU refuses while building its tables (dims in order, the first bad index of each).
  i64 start[kMaxRank], step[kMaxRank];
  for (int d = 0; d < r; ++d) {
    start[d] = p.start[d];
    step[d] = p.stride[d];
    const i64 dim = x.dims[d];
    const i64 i = first_outside(start[d], step[d], p.size[d], dim);
    if (i < 0) continue;
    if (p.mode == SampleMode::kSTRICT_BOUNDS)
      fail("slice: dimension " + std::to_string(d) + " reads index " + num(start[d] + i * step[d]) +
           " of an input of size " + num(dim) + " in mode STRICT_BOUNDS");
    if (p.mode != SampleMode::kFILL && dim == 0)
      fail("slice: dimension " + std::to_string(d) + " of the input is empty; only FILL can read from it");
  }
  sample_copy(x, out, start, step, p.mode, fill_value, stream, "slice");
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

namespace {

// Host values of a slice's shape-tensor input (start, size or stride).
Dims host_dims(const backends::Buffer& b, const std::string& node) {
  if (!b.host_values)
    throw UnsupportedError("[cuda] node '" + node + "': slice bounds computed on the device are not supported; derive them "
                           "from add_shape outputs and constants");
  return Dims(std::span<const std::int64_t>(*b.host_values));
}

}  // namespace

extern const OpKernel kSliceKernel = {
    LayerType::kSLICE, nullptr, nullptr, [](const OpCall& c) {
      const auto& p = std::get<SliceParams>(c.node.params);
      const SliceParams q =
          backends::common::slice_bounds(p, c.in, [&](const backends::Buffer& b) { return host_dims(b, c.node.name); });
      int fill_pos = slice_input_position(p, kSliceFill);
      TensorRef fill = fill_pos >= 0 ? ref(c.in[static_cast<std::size_t>(fill_pos)]) : TensorRef{};
      slice(q, ref(c.in[0]), fill_pos >= 0 ? &fill : nullptr, ref(c.out), c.stream);
    }};

}  // namespace ops

}  // namespace tensoracle::cuda
