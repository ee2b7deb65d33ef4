// The CPU backend's one-hot (kernels.h): out[o, d, i] = values[indices[o, i] == d] (off, on), a
// negative index counting from depth's end; an index outside [-depth, depth) gives all off.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backends/common/index_checks.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_util.h"
#include "backends/cpu/op_kernel.h"

namespace tensoracle::cpu {

void one_hot(const OneHotParams& p, const TensorRef& indices, const TensorRef& values, const TensorRef& out) {
  const auto s = backends::common::check_one_hot(detail::kFail, p, indices, values, out);
  if (s.n == 0) return;
  const std::size_t es = element_size(out.type);
  const auto* v = static_cast<const std::byte*>(values.data);
  auto* y = static_cast<std::byte*>(out.data);
  const bool wide = indices.type == DataType::kINT64;
  detail::parallel_ranges(s.outer * s.depth, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t od = begin; od < end; ++od) {
      const std::int64_t o = od / s.depth, d = od % s.depth;
      for (std::int64_t i = 0; i < s.inner; ++i) {
        std::int64_t k = wide ? static_cast<const std::int64_t*>(indices.data)[o * s.inner + i]
                              : static_cast<const std::int32_t*>(indices.data)[o * s.inner + i];
        if (k < 0) k += s.depth;
        std::memcpy(y + (od * s.inner + i) * static_cast<std::int64_t>(es), v + (k == d ? es : 0), es);
      }
    }
  }, std::max<std::int64_t>(1, 32768 / std::max<std::int64_t>(1, s.inner)));
}

namespace ops {

extern const OpKernel kOneHotKernel = {LayerType::kONE_HOT, nullptr, nullptr, [](const OpCall& c) {
      one_hot(std::get<OneHotParams>(c.node.params), ref(c.in[0]), ref(c.in[1]), ref(c.out));
    }};

}  // namespace ops

}  // namespace tensoracle::cpu
