// The CUDA backend's padding (kernels.h): a sampling copy (layout_util.cuh); raw elements of
// every type.
#include <cstdint>
#include <string>

#include "backends/common/index_checks.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/layout_util.cuh"
#include "backends/cuda/op_kernel.h"

namespace tensoracle::cuda {

using namespace layout;  // layout_util.cuh

// ---- padding -------------------------------------------------------------------------------

void padding(const PaddingParams& p, const TensorRef& x, const TensorRef& out, cudaStream_t stream) {
  const i64 n = backends::common::check_padding(dev::kFail, p, x, out);
  const int r = x.dims.rank(), np = p.pre_padding.rank();
  if (n == 0) return;
  // A FILL slice with zero: output index o of dim d reads input index o - pre.
  i64 start[kMaxRank], step[kMaxRank];
  for (int d = 0; d < r; ++d) {
    start[d] = d >= r - np ? -p.pre_padding[d - (r - np)] : 0;
    step[d] = 1;
  }
  sample_copy(x, out, start, step, SampleMode::kFILL, nullptr, stream, "padding");
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kPaddingKernel = {LayerType::kPADDING, nullptr, nullptr, [](const OpCall& c) {
      padding(std::get<PaddingParams>(c.node.params), ref(c.in[0]), ref(c.out), c.stream);
    }};

}  // namespace ops

}  // namespace tensoracle::cuda
