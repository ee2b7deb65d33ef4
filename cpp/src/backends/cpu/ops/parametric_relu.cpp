// The CPU backend's parametric ReLU (kernels.h): y = x >= 0 ? x : slope · x, the slope
// broadcasting to x.
#include <algorithm>
#include <cstdint>

#include "backends/common/pointwise_checks.h"
#include "backends/cpu/index_util.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_util.h"
#include "backends/cpu/op_kernel.h"

namespace tensoracle::cpu {

using namespace indexing;  // index_util.h

void parametric_relu(const TensorRef& x, const TensorRef& slope, const TensorRef& out) {
  i64 n = 0;
  backends::common::check_parametric_relu(detail::kFail, x, slope, out, n);
  if (n == 0) return;
  const Dims& od = out.dims;
  const int r = od.rank();
  i64 ss[Dims::kMaxRank];
  strides_of(slope.dims, ss);
  for (int k = 0; k < r; ++k)
    if (slope.dims[k] != od[k]) ss[k] = 0;
  const i64 inner = r == 0 ? 1 : od[r - 1];
  const i64 rows = r == 0 ? 1 : prod(od, 0, r - 1);
  const i64 si = r == 0 ? 0 : ss[r - 1];
  detail::with_float(x.type, "parametric_relu", [&](auto tag) {
    using S = decltype(tag);
    const auto* a = static_cast<const typename S::T*>(x.data);
    const auto* b = static_cast<const typename S::T*>(slope.data);
    auto* y = static_cast<typename S::T*>(out.data);
    detail::parallel_ranges(
        rows,
        [&](i64 begin, i64 end) {
          RowIndex at(od, r, begin);
          for (i64 row = begin; row < end; ++row) {
            i64 os = 0;
            for (int k = 0; k < r - 1; ++k) os += at.idx[k] * ss[k];
            for (i64 j = 0; j < inner; ++j) {
              const float v = S::load(a[row * inner + j]);
              y[row * inner + j] = v >= 0.f ? a[row * inner + j] : S::store(v * S::load(b[os + j * si]));
            }
            at.next();
          }
        },
        std::max<i64>(1, kParallelMin / std::max<i64>(1, inner)));
  });
}

namespace ops {

extern const OpKernel kParametricReluKernel = {LayerType::kPARAMETRIC_RELU, nullptr, nullptr,
                                               [](const OpCall& c) { parametric_relu(ref(c.in[0]), ref(c.in[1]), ref(c.out)); }};

}  // namespace ops

}  // namespace tensoracle::cpu
