// The CUDA backend's slice (kernels.h): a plan copy, or a sampling copy where reads fall
// outside the input (layout_util.cuh); raw elements of every type.
#include <cstdint>
#include <string>

#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/layout_util.cuh"

namespace tensoracle::cuda {

using namespace layout;  // layout_util.cuh

// ---- slice ---------------------------------------------------------------------------------

void slice(const SliceParams& p, const TensorRef& x, const TensorRef* fill, const TensorRef& out, cudaStream_t stream) {
  checked_volume(x, "slice", "the input");
  const i64 n = checked_volume(out, "slice", "the output");
  const int r = x.dims.rank();
  if (p.start.rank() != r || p.size.rank() != r || p.stride.rank() != r)
    fail("slice: start " + p.start.str() + ", size " + p.size.str() + " and stride " + p.stride.str() +
         " must each have the input's rank " + std::to_string(r));
  if (out.type != x.type || !(out.dims == p.size))
    fail("slice: the output is " + desc(out) + "; expected " + tn(x.type) + p.size.str());
  const void* fill_value = nullptr;
  if (fill != nullptr) {
    if (p.mode != SampleMode::kFILL) fail("slice: a fill value is only used by mode FILL");
    if (fill->type != x.type || checked_volume(*fill, "slice", "the fill value") != 1)
      fail("slice: the fill value is " + desc(*fill) + "; it must be one element of " + tn(x.type));
    fill_value = fill->data;
  }
  if (p.mode != SampleMode::kSTRICT_BOUNDS && p.mode != SampleMode::kWRAP && p.mode != SampleMode::kCLAMP &&
      p.mode != SampleMode::kFILL && p.mode != SampleMode::kREFLECT)
    fail("slice: unknown mode " + std::to_string(static_cast<int>(p.mode)));
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

}  // namespace tensoracle::cuda
