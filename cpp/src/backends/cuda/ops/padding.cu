// The CUDA backend's padding (kernels.h): a sampling copy (layout_util.cuh); raw elements of
// every type.
#include <cstdint>
#include <string>

#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/layout_util.cuh"

namespace tensoracle::cuda {

using namespace layout;  // layout_util.cuh

// ---- padding -------------------------------------------------------------------------------

void padding(const PaddingParams& p, const TensorRef& x, const TensorRef& out, cudaStream_t stream) {
  checked_volume(x, "padding", "the input");
  const i64 n = checked_volume(out, "padding", "the output");
  const int r = x.dims.rank(), np = p.pre_padding.rank();
  if (p.post_padding.rank() != np)
    fail("padding: pre_padding " + p.pre_padding.str() + " and post_padding " + p.post_padding.str() + " differ in rank");
  if (np > r) fail("padding: padding of rank " + std::to_string(np) + " exceeds the input's rank " + std::to_string(r));
  Dims expected = x.dims;
  for (int i = 0; i < np; ++i) {
    const int d = r - np + i;
    expected[d] = x.dims[d] + p.pre_padding[i] + p.post_padding[i];
    if (expected[d] < 0)
      fail("padding: " + p.pre_padding.str() + "/" + p.post_padding.str() + " crops dimension " + std::to_string(d) +
           " of " + x.dims.str() + " below zero");
  }
  if (out.type != x.type || !(out.dims == expected))
    fail("padding: the output is " + desc(out) + "; expected " + tn(x.type) + expected.str());
  if (n == 0) return;
  // A FILL slice with zero: output index o of dim d reads input index o - pre.
  i64 start[kMaxRank], step[kMaxRank];
  for (int d = 0; d < r; ++d) {
    start[d] = d >= r - np ? -p.pre_padding[d - (r - np)] : 0;
    step[d] = 1;
  }
  sample_copy(x, out, start, step, SampleMode::kFILL, nullptr, stream, "padding");
}

}  // namespace tensoracle::cuda
