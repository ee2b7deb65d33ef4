// The CPU backend's slice (kernels.h): a table copy (index_util.h) of raw elements, every type;
// out-of-range reads follow the SampleMode.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/index_util.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_util.h"

namespace tensoracle::cpu {

using namespace indexing;  // index_util.h

// ---- slice ------------------------------------------------------------------------------

void slice(const SliceParams& p, const TensorRef& x, const TensorRef* fill, const TensorRef& out) {
  detail::checked_volume(x, "slice", "the input");
  const i64 n = detail::checked_volume(out, "slice", "the output");
  const int r = x.dims.rank();
  if (p.start.rank() != r || p.size.rank() != r || p.stride.rank() != r)
    fail("slice: start " + p.start.str() + ", size " + p.size.str() + " and stride " + p.stride.str() +
         " must each have the input's rank " + std::to_string(r));
  if (out.type != x.type || !(out.dims == p.size))
    fail("slice: the output is " + desc(out) + "; expected " + tn(x.type) + p.size.str());
  const void* fill_value = nullptr;
  if (fill != nullptr) {
    if (p.mode != SampleMode::kFILL) fail("slice: a fill value is only used by mode FILL");
    if (fill->type != x.type || detail::checked_volume(*fill, "slice", "the fill value") != 1)
      fail("slice: the fill value is " + desc(*fill) + "; it must be one element of " + tn(x.type));
    fill_value = fill->data;
  }
  if (p.mode != SampleMode::kSTRICT_BOUNDS && p.mode != SampleMode::kWRAP && p.mode != SampleMode::kCLAMP &&
      p.mode != SampleMode::kFILL && p.mode != SampleMode::kREFLECT)
    fail("slice: unknown mode " + std::to_string(static_cast<int>(p.mode)));
  if (n == 0) return;
  i64 st[Dims::kMaxRank];
  strides_of(x.dims, st);
  std::vector<std::vector<i64>> table(static_cast<std::size_t>(r));
  for (int d = 0; d < r; ++d) {
    const i64 dim = x.dims[d];
    auto& tab = table[static_cast<std::size_t>(d)];
    tab.resize(static_cast<std::size_t>(p.size[d]));
    for (i64 i = 0; i < p.size[d]; ++i) {
      const i64 v = p.start[d] + i * p.stride[d];
      i64 m = v;
      if (v < 0 || v >= dim) {
        switch (p.mode) {
          case SampleMode::kSTRICT_BOUNDS:
            fail("slice: dimension " + std::to_string(d) + " reads index " + num(v) + " of an input of size " + num(dim) +
                 " in mode STRICT_BOUNDS");
          case SampleMode::kFILL: m = -1; break;
          case SampleMode::kWRAP:
          case SampleMode::kCLAMP:
          case SampleMode::kREFLECT:
            if (dim == 0) fail("slice: dimension " + std::to_string(d) + " of the input is empty; only FILL can read from it");
            if (p.mode == SampleMode::kWRAP) {
              m = ((v % dim) + dim) % dim;
            } else if (p.mode == SampleMode::kCLAMP) {
              m = std::clamp<i64>(v, 0, dim - 1);
            } else if (dim == 1) {
              m = 0;
            } else {
              const i64 period = 2 * dim - 2;
              const i64 q = ((v % period) + period) % period;
              m = q < dim ? q : period - q;
            }
            break;
        }
      }
      tab[static_cast<std::size_t>(i)] = m < 0 ? -1 : m * st[d];
    }
  }
  table_copy(x, out, table, fill_value, "slice");
}

}  // namespace tensoracle::cpu
