// The CPU backend's local response normalization (kernels.h): across the channels (dim 1),
//   y = x / (k + alpha / window · Σ x²)^beta over channels c - (window - 1) / 2 .. c + window / 2,
// the sum in double.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backends/common/reduce_layout.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_util.h"
#include "backends/cpu/op_kernel.h"

namespace tensoracle::cpu {

void lrn(const LrnParams& p, const TensorRef& x, const TensorRef& out) {
  const auto a = backends::common::check_lrn(detail::kFail, p, x, out);
  if (a.n == 0) return;
  const std::int64_t C = a.dim, inner = a.inner, before = (p.window - 1) / 2, after = p.window / 2;
  const double coef = static_cast<double>(p.alpha) / p.window;
  detail::with_float(x.type, "lrn", [&](auto tag) {
    using S = decltype(tag);
    const auto* in = static_cast<const typename S::T*>(x.data);
    auto* y = static_cast<typename S::T*>(out.data);
    detail::parallel_ranges(a.outer * inner, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t oi = begin; oi < end; ++oi) {
        const std::int64_t o = oi / inner, i = oi % inner;
        const std::int64_t base = o * C * inner + i;
        for (std::int64_t c = 0; c < C; ++c) {
          double sum = 0;
          for (std::int64_t j = std::max<std::int64_t>(0, c - before); j <= std::min(C - 1, c + after); ++j) {
            const double v = S::load(in[base + j * inner]);
            sum += v * v;
          }
          const double v = S::load(in[base + c * inner]);
          y[base + c * inner] = S::store_d(v / std::pow(static_cast<double>(p.k) + coef * sum, static_cast<double>(p.beta)));
        }
      }
    }, std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(1, C)));
  });
}

namespace ops {

extern const OpKernel kLrnKernel = {LayerType::kLRN, nullptr, nullptr,
                                    [](const OpCall& c) { lrn(std::get<LrnParams>(c.node.params), ref(c.in[0]), ref(c.out)); }};

}  // namespace ops

}  // namespace tensoracle::cpu
