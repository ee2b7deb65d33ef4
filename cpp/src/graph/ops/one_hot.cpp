// Op unit: the one-hot layer. How backends run it: backends/cpu/ops/one_hot.cpp and
// backends/cuda/ops/one_hot.cu. Every layer's unit is listed in graph/ops/registry.cpp.
#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

namespace {

std::vector<TensorDesc> infer_op(const OneHotParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  if (!is_int(in[0].type)) invalid("indices (input 0) have type " + tname(in[0].type) + "; they must be int32 or int64");
  if (in[1].dims.rank() != 1 || (in[1].dims[0] >= 0 && in[1].dims[0] != 2))
    invalid("values (input 1) must be [2] (off, on), not " + in[1].dims.str());
  if (p.depth < 1 || p.depth > (std::int64_t{1} << 40)) invalid("depth " + std::to_string(p.depth) + " is outside 1..2^40");
  const Dims& I = in[0].dims;
  if (I.rank() + 1 > Dims::kMaxRank) invalid("indices " + I.str() + " leave no room for the depth dim");
  const int axis = normalize_axis(p.axis, I.rank() + 1, "axis");
  std::vector<std::int64_t> out;
  for (int k = 0; k < I.rank(); ++k) {
    if (k == axis) out.push_back(p.depth);
    out.push_back(I[k]);
  }
  if (axis == I.rank()) out.push_back(p.depth);
  return {{in[1].type, Dims(std::span<const std::int64_t>(out))}};
}

json params_to_json(const OneHotParams& p) { return {{"axis", p.axis}, {"depth", p.depth}}; }

OneHotParams params_from_json(const json& j) {
  return OneHotParams{j.at("axis").get<std::int32_t>(), j.at("depth").get<std::int64_t>()};
}

}  // namespace

extern const OpTraits kOneHotOp = make_op<OneHotParams, infer_op, params_to_json, params_from_json>("one_hot", {2, 2});

}  // namespace ops

}  // namespace tensoracle::graph
