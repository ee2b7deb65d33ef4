// The CPU backend's slice (kernels.h): a table copy (index_util.h) of raw elements, every type;
// out-of-range reads follow the SampleMode.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/common/index_checks.h"
#include "backends/cpu/index_util.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/op_kernel.h"
#include "backends/cpu/kernels_util.h"

namespace tensoracle::cpu {

using namespace indexing;  // index_util.h

// ---- slice ------------------------------------------------------------------------------

void slice(const SliceParams& p, const TensorRef& x, const TensorRef* fill, const TensorRef& out) {
  const i64 n = backends::common::check_slice(detail::kFail, p, x, fill, out);
  const int r = x.dims.rank();
  const void* fill_value = fill != nullptr ? fill->data : nullptr;
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

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kSliceKernel = {
    LayerType::kSLICE, nullptr, nullptr, [](const OpCall& c) {
      const auto& p = std::get<SliceParams>(c.node.params);
      // Start, size and stride given as shape tensors are read from their (host) buffers.
      const SliceParams q = backends::common::slice_bounds(p, c.in, [](const backends::Buffer& b) {
        std::vector<std::int64_t> v(static_cast<std::size_t>(std::max<std::int64_t>(0, b.dims.volume())));
        for (std::size_t i = 0; i < v.size(); ++i)
          v[i] = b.type == DataType::kINT32 ? static_cast<const std::int32_t*>(b.data)[i]
                                            : static_cast<const std::int64_t*>(b.data)[i];
        return Dims(std::span<const std::int64_t>(v));
      });
      int fill_pos = slice_input_position(p, kSliceFill);
      TensorRef fill = fill_pos >= 0 ? ref(c.in[static_cast<std::size_t>(fill_pos)]) : TensorRef{};
      slice(q, ref(c.in[0]), fill_pos >= 0 ? &fill : nullptr, ref(c.out));
    }};

}  // namespace ops

}  // namespace tensoracle::cpu
