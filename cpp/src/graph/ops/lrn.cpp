// Op unit: the local response normalization (LRN) layer. How backends run it: backends/cpu/ops/lrn.cpp and
// backends/cuda/ops/lrn.cu. Every layer's unit is listed in graph/ops/registry.cpp.
#include <array>
#include <cmath>
#include <string_view>

#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

namespace {

std::vector<TensorDesc> infer_op(const LrnParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  require_float(in[0], 0, "LRN");
  if (in[0].dims.rank() < 3) invalid("LRN takes a tensor of rank 3 or more ([N, C, ...]), not " + in[0].dims.str());
  if (p.window < 1 || p.window > 1024) invalid("window " + std::to_string(p.window) + " is outside 1..1024");
  if (!std::isfinite(p.alpha) || !std::isfinite(p.beta) || !std::isfinite(p.k))
    invalid("alpha, beta and k must be finite");
  return {in[0]};
}

json params_to_json(const LrnParams& p) {
  return {{"window", p.window}, {"alpha", p.alpha}, {"beta", p.beta}, {"k", p.k}};
}

LrnParams params_from_json(const json& j) {
  return LrnParams{j.at("window").get<std::int32_t>(), j.at("alpha").get<float>(), j.at("beta").get<float>(),
                   j.at("k").get<float>()};
}

constexpr std::array<std::string_view, 3> kFloatKeys = {"alpha", "beta", "k"};

}  // namespace

extern const OpTraits kLrnOp = make_op<LrnParams, infer_op, params_to_json, params_from_json>("lrn", {1, 1}, kFloatKeys);

}  // namespace ops

}  // namespace tensoracle::graph
