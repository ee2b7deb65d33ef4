// Op unit: the constant layer. How backends run it: backends/cpu/ops/constant.cpp and
// backends/cuda/ops/constant.cu where they exist. Every layer's unit is listed in
// graph/ops/registry.cpp.
#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

namespace {

// Its values are the engine file's tensors, not the plan's nodes: never a node of a plan.
std::vector<TensorDesc> infer_op(const ConstantParams& p, std::span<const TensorDesc>, std::span<const InputFacts>, bool) {
  for (auto d : p.shape)
    if (d < 0) invalid("shape " + p.shape.str() + " has a negative dimension");
  if (p.weights.count() != p.shape.volume())
    invalid("weights hold " + std::to_string(p.weights.count()) + " values but shape " + p.shape.str() +
            " needs " + std::to_string(p.shape.volume()));
  if (p.weights.count() > 0 && p.weights.values() == nullptr) invalid("weights have no values");
  return {{p.weights.type(), p.shape}};
}

json params_to_json(const ConstantParams&) { return json::object(); }

}  // namespace

extern const OpTraits kConstantOp =
    make_op<ConstantParams, infer_op, params_to_json, nullptr>("constant", {0, 0});

}  // namespace ops

}  // namespace tensoracle::graph
