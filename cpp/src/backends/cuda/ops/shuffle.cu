// The CUDA backend's shuffle (kernels.h): second_transpose(reshape(first_transpose(x))) as
// plan copies and tiled transposes (layout_util.cuh), raw elements of every type.
#include <cstddef>
#include <cstdint>
#include <string>

#include "backends/common/index_checks.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/layout_util.cuh"
#include "backends/cuda/op_kernel.h"

namespace tensoracle::cuda {

namespace {

using namespace layout;  // layout_util.cuh

// Output dim i of a transpose of `d` by `perm` is input dim perm[i].
HostPlan transpose_plan(const Dims& d, const Permutation& perm) {
  i64 st[kMaxRank];
  strides_of(d, st);
  HostPlan p;
  for (int i = 0; i < d.rank(); ++i) {
    const int k = perm.order[static_cast<std::size_t>(i)];
    push_dim(p, d[k], st[k]);
  }
  finish(p);
  return p;
}

// ---- shuffle helpers (the CPU's) -----------------------------------------------------------


}  // namespace

// ---- shuffle -------------------------------------------------------------------------------

void shuffle(const ShuffleParams& p, const TensorRef& x, const TensorRef& out, cudaStream_t stream) {
  const backends::common::ShuffleShape shape = backends::common::check_shuffle(dev::kFail, p, x, out);
  const i64 n = shape.n;
  const Dims& reshaped = shape.reshaped;
  if (n == 0) return;
  const std::size_t es = element_size(x.type);
  // Output index -> (second transpose) linear index into the reshaped tensor, which is the
  // first-transposed tensor's linear index -> (first transpose) offset into x.
  const HostPlan second = transpose_plan(reshaped, p.second_transpose);
  const HostPlan first = transpose_plan(x.dims, p.first_transpose);
  const bool id1 = is_identity(first), id2 = is_identity(second);
  if (id1 && id2) {
    if (x.data != out.data) memcpy_async(out.data, x.data, n * static_cast<i64>(es), stream, "shuffle");
    return;
  }
  if (id1) plan_copy(x.data, out.data, n, es, 0, second, nullptr, n, stream, "shuffle");
  else if (id2) plan_copy(x.data, out.data, n, es, 0, first, nullptr, n, stream, "shuffle");
  else plan_copy(x.data, out.data, n, es, 0, first, &second, n, stream, "shuffle");
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kShuffleKernel = {
    LayerType::kSHUFFLE, nullptr, nullptr, [](const OpCall& c) {
      ShuffleParams q = std::get<ShuffleParams>(c.node.params);
      if (c.node.inputs.size() > 1) q.reshape_dims = c.out.dims;  // dims from a shape tensor: the output's say them
      shuffle(q, ref(c.in[0]), ref(c.out), c.stream);
    }};

}  // namespace ops

}  // namespace tensoracle::cuda
