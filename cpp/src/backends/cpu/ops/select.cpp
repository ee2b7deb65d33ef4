// The CPU backend's select (kernels.h): out = condition ? then : else, with broadcasting.
#include <algorithm>
#include <cstdint>
#include <string>

#include "backends/common/pointwise_checks.h"
#include "backends/cpu/index_util.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/op_kernel.h"
#include "backends/cpu/kernels_util.h"

namespace tensoracle::cpu {

using namespace indexing;  // index_util.h

// ---- select -----------------------------------------------------------------------------

void select(const TensorRef& condition, const TensorRef& then_input, const TensorRef& else_input, const TensorRef& out) {
  const i64 n = backends::common::check_select(detail::kFail, condition, then_input, else_input, out);
  const int r = out.dims.rank();
  // Each input's strides over the output's dims, 0 where it broadcasts.
  i64 s[3][Dims::kMaxRank];
  const TensorRef* ins[3] = {&condition, &then_input, &else_input};
  for (int i = 0; i < 3; ++i) {
    const Dims& d = ins[i]->dims;
    strides_of(d, s[i]);
    for (int k = 0; k < r; ++k)
      if (d[k] != out.dims[k]) s[i][k] = 0;
  }
  if (n == 0) return;
  const Dims& od = out.dims;
  const i64 inner = r == 0 ? 1 : od[r - 1];
  const i64 rows = r == 0 ? 1 : prod(od, 0, r - 1);
  const i64 ci = r == 0 ? 0 : s[0][r - 1], ti = r == 0 ? 0 : s[1][r - 1], ei = r == 0 ? 0 : s[2][r - 1];
  const auto* cond = static_cast<const std::uint8_t*>(condition.data);
  by_size(element_size(out.type), "select", [&](auto tag) {
    using T = decltype(tag);
    const T* a = static_cast<const T*>(then_input.data);
    const T* b = static_cast<const T*>(else_input.data);
    T* y = static_cast<T*>(out.data);
    detail::parallel_ranges(
        rows,
        [&](i64 begin, i64 end) {
          RowIndex at(od, r, begin);
          const i64* const idx = at.idx;
          for (i64 row = begin; row < end; ++row) {
            i64 oc = 0, ot = 0, oe = 0;
            for (int k = 0; k < r - 1; ++k) {
              oc += idx[k] * s[0][k];
              ot += idx[k] * s[1][k];
              oe += idx[k] * s[2][k];
            }
            T* dst = y + row * inner;
            for (i64 j = 0; j < inner; ++j) dst[j] = cond[oc + j * ci] ? a[ot + j * ti] : b[oe + j * ei];
            at.next();
          }
        },
        std::max<i64>(1, kParallelMin / std::max<i64>(1, inner)));
  });
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kSelectKernel = {
    LayerType::kSELECT, nullptr, nullptr,
    [](const OpCall& c) { select(ref(c.in[0]), ref(c.in[1]), ref(c.in[2]), ref(c.out)); }};

}  // namespace ops

}  // namespace tensoracle::cpu
