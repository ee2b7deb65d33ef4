// The CPU backend's scale (kernels.h): y = (x · scale + shift)^power with per-tensor, per-channel
// or per-element coefficients (backends/common/pointwise_checks.h: check_scale).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backends/common/pointwise_checks.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_util.h"
#include "backends/cpu/op_kernel.h"

namespace tensoracle::cpu {

void scale(const ScaleParams& p, const TensorRef& x, const TensorRef& shift, const TensorRef& scale, const TensorRef& power,
           const TensorRef& out) {
  const auto s = backends::common::check_scale(detail::kFail, p, x, shift, scale, power, out);
  if (s.n == 0) return;
  const float* w[3] = {static_cast<const float*>(shift.data), static_cast<const float*>(scale.data),
                       static_cast<const float*>(power.data)};
  const std::int64_t inner = s.inner, count = s.count;
  detail::with_float(x.type, "scale", [&](auto tag) {
    using S = decltype(tag);
    const auto* in = static_cast<const typename S::T*>(x.data);
    auto* y = static_cast<typename S::T*>(out.data);
    detail::parallel_ranges(s.n, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t e = begin; e < end; ++e) {
        const std::int64_t c = (e / inner) % count;
        const float sh = w[0][s.single[0] ? 0 : c], sc = w[1][s.single[1] ? 0 : c], pw = w[2][s.single[2] ? 0 : c];
        float v = S::load(in[e]) * sc + sh;
        if (pw != 1.f) v = std::pow(v, pw);
        y[e] = S::store(v);
      }
    });
  });
}

namespace ops {

extern const OpKernel kScaleKernel = {LayerType::kSCALE, nullptr, nullptr, [](const OpCall& c) {
      scale(std::get<ScaleParams>(c.node.params), ref(c.in[0]), ref(c.in[1]), ref(c.in[2]), ref(c.in[3]), ref(c.out));
    }};

}  // namespace ops

}  // namespace tensoracle::cpu
