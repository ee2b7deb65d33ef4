// Op unit: the squeeze and unsqueeze layers (a reshape that removes or inserts dims of size 1).
// How backends run them: backends/cpu/ops/squeeze.cpp and backends/cuda/ops/squeeze.cu (a
// copy). Every layer's unit is listed in graph/ops/registry.cpp.
#include <string>

#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

namespace {

// The axes as a bit mask over `rank` dims (each normalized; a repeat is refused).
std::uint32_t axis_mask(const Dims& axes, int rank) {
  std::uint32_t mask = 0;
  for (int i = 0; i < axes.rank(); ++i) {
    const std::int64_t a = axes[i];
    if (a < -rank || a >= rank)
      invalid("axes " + axes.str() + ": " + std::to_string(a) + " is outside [-" + std::to_string(rank) + ", " +
              std::to_string(rank) + ")");
    const int k = static_cast<int>(a < 0 ? a + rank : a);
    if (mask >> k & 1u) invalid("axes " + axes.str() + " name dim " + std::to_string(k) + " twice");
    mask |= 1u << k;
  }
  return mask;
}

std::vector<TensorDesc> infer_squeeze(const SqueezeParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  const Dims& x = in[0].dims;
  const std::uint32_t mask = axis_mask(p.axes, x.rank());
  std::vector<std::int64_t> out;
  for (int k = 0; k < x.rank(); ++k) {
    if (!(mask >> k & 1u)) {
      out.push_back(x[k]);
    } else if (x[k] >= 0 && x[k] != 1) {
      invalid("input 0 " + x.str() + " has size " + std::to_string(x[k]) + " in dim " + std::to_string(k) +
              "; squeeze removes dims of size 1 only");
    }
  }
  return {{in[0].type, Dims(std::span<const std::int64_t>(out))}};
}

std::vector<TensorDesc> infer_unsqueeze(const UnsqueezeParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>,
                                        bool) {
  const Dims& x = in[0].dims;
  const int rank = x.rank() + p.axes.rank();
  if (rank > Dims::kMaxRank)
    invalid("input 0 " + x.str() + " with " + std::to_string(p.axes.rank()) + " more dims exceeds rank " +
            std::to_string(Dims::kMaxRank));
  const std::uint32_t mask = axis_mask(p.axes, rank);
  std::vector<std::int64_t> out;
  for (int k = 0, next = 0; k < rank; ++k) out.push_back(mask >> k & 1u ? 1 : x[next++]);
  return {{in[0].type, Dims(std::span<const std::int64_t>(out))}};
}

template <typename P>
json axes_to_json(const P& p) {
  return {{"axes", dims_json(p.axes)}};
}

template <typename P>
P axes_from_json(const json& j) {
  return P{dims_of(j.at("axes"))};
}

}  // namespace

extern const OpTraits kSqueezeOp = make_op<SqueezeParams, infer_squeeze, axes_to_json<SqueezeParams>,
                                           axes_from_json<SqueezeParams>>("squeeze", {1, 1});
extern const OpTraits kUnsqueezeOp = make_op<UnsqueezeParams, infer_unsqueeze, axes_to_json<UnsqueezeParams>,
                                             axes_from_json<UnsqueezeParams>>("unsqueeze", {1, 1});

}  // namespace ops

}  // namespace tensoracle::graph
