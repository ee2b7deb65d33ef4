// The CPU backend's cumulative sum (kernels.h) along one axis, inclusive or exclusive, forward or
// reversed: floats summed in double and rounded once per element, integers wrapping around.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backends/common/reduce_layout.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_util.h"
#include "backends/cpu/op_kernel.h"

namespace tensoracle::cpu {

namespace {

// Walks each [dim] line of x (outer × inner of them) in the layer's order, calling step(offset).
template <class Step>
void lines(const backends::common::AxisShape& a, bool reverse, Step&& step_line) {
  detail::parallel_ranges(a.outer * a.inner, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t oi = begin; oi < end; ++oi) {
      const std::int64_t base = (oi / a.inner) * a.dim * a.inner + oi % a.inner;
      step_line(base, reverse ? (a.dim - 1) * a.inner : 0, reverse ? -a.inner : a.inner);
    }
  }, std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(1, a.dim)));
}

}  // namespace

void cumulative(const CumulativeParams& p, const TensorRef& x, const TensorRef& out) {
  const auto a = backends::common::check_cumulative(detail::kFail, p, x, out);
  if (a.n == 0) return;
  const bool ex = p.exclusive;
  auto integer = [&](auto zero) {
    using I = decltype(zero);
    using U = std::make_unsigned_t<I>;
    const I* in = static_cast<const I*>(x.data);
    I* y = static_cast<I*>(out.data);
    lines(a, p.reverse, [&](std::int64_t base, std::int64_t first, std::int64_t step) {
      U sum = 0;
      for (std::int64_t j = 0, at = base + first; j < a.dim; ++j, at += step) {
        const U v = static_cast<U>(in[at]);
        if (!ex) sum += v;
        y[at] = static_cast<I>(sum);
        if (ex) sum += v;
      }
    });
  };
  if (x.type == DataType::kINT32) return integer(std::int32_t{0});
  if (x.type == DataType::kINT64) return integer(std::int64_t{0});
  detail::with_float(x.type, "cumulative", [&](auto tag) {
    using S = decltype(tag);
    const auto* in = static_cast<const typename S::T*>(x.data);
    auto* y = static_cast<typename S::T*>(out.data);
    lines(a, p.reverse, [&](std::int64_t base, std::int64_t first, std::int64_t step) {
      double sum = 0;
      for (std::int64_t j = 0, at = base + first; j < a.dim; ++j, at += step) {
        const double v = S::load(in[at]);
        if (!ex) sum += v;
        const double keep = sum;
        if (ex) sum += v;
        y[at] = S::store_d(keep);
      }
    });
  });
}

namespace ops {

extern const OpKernel kCumulativeKernel = {LayerType::kCUMULATIVE, nullptr, nullptr, [](const OpCall& c) {
      cumulative(std::get<CumulativeParams>(c.node.params), ref(c.in[0]), ref(c.out));
    }};

}  // namespace ops

}  // namespace tensoracle::cpu
