// Op unit: the activation layer. How backends run it: backends/cpu/ops/activation.cpp and
// backends/cuda/ops/activation.cu where they exist. Every layer's unit is listed in
// graph/ops/registry.cpp.
#include <array>
#include <string_view>

#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

namespace {

constexpr std::array<std::string_view, 14> kActs = {"RELU", "SIGMOID", "TANH", "LEAKY_RELU", "ELU", "SELU", "SOFTSIGN",
                                                    "SOFTPLUS", "CLIP", "HARD_SIGMOID", "SCALED_TANH",
                                                    "THRESHOLDED_RELU", "GELU_ERF", "GELU_TANH"};

std::vector<TensorDesc> infer_op(const ActivationParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  require_float(in[0], 0, "activation");
  if (static_cast<int>(p.type) < 0 || static_cast<int>(p.type) > static_cast<int>(ActivationType::kGELU_TANH))
    invalid("unknown activation type " + std::to_string(static_cast<int>(p.type)));
  return {in[0]};
}

json params_to_json(const ActivationParams& p) {
  return {{"type", enum_name(kActs, p.type)}, {"alpha", p.alpha}, {"beta", p.beta}};
}

ActivationParams params_from_json(const json& j) {
  return ActivationParams{enum_value<ActivationType>(kActs, j.at("type")), j.at("alpha").get<float>(), j.at("beta").get<float>()};
}

constexpr std::array<std::string_view, 2> kFloatKeys = {"alpha", "beta"};

}  // namespace

extern const OpTraits kActivationOp =
    make_op<ActivationParams, infer_op, params_to_json, params_from_json>("activation", {1, 1}, kFloatKeys);

}  // namespace ops

}  // namespace tensoracle::graph
