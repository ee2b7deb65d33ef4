// Op unit: the identity layer. How backends run it: backends/cpu/ops/identity.cpp and
// backends/cuda/ops/identity.cu where they exist. Every layer's unit is listed in
// graph/ops/registry.cpp.
#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

namespace {

std::vector<TensorDesc> infer_op(const IdentityParams&, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  return {in[0]};
}

json params_to_json(const IdentityParams&) { return json::object(); }

IdentityParams params_from_json(const json&) { return {}; }

}  // namespace

extern const OpTraits kIdentityOp =
    make_op<IdentityParams, infer_op, params_to_json, params_from_json>("identity", {1, 1});

}  // namespace ops

}  // namespace tensoracle::graph
