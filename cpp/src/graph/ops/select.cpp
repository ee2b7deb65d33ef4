// Op unit: the select layer. How backends run it: backends/cpu/ops/select.cpp and
// backends/cuda/ops/select.cu where they exist. Every layer's unit is listed in
// graph/ops/registry.cpp.
#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

namespace {

std::vector<TensorDesc> infer_op(const SelectParams&, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  if (in[0].type != DataType::kBOOL) invalid("input 0 (condition) has type " + tname(in[0].type) + "; it must be bool");
  if (in[1].type != in[2].type)
    invalid("input 1 has type " + tname(in[1].type) + " but input 2 has type " + tname(in[2].type) + "; they must match");
  Dims d = broadcast_dims(broadcast_dims(in[0].dims, in[1].dims), in[2].dims);
  return {{in[1].type, d}};
}

json params_to_json(const SelectParams&) { return json::object(); }

SelectParams params_from_json(const json&) { return {}; }

}  // namespace

extern const OpTraits kSelectOp =
    make_op<SelectParams, infer_op, params_to_json, params_from_json>("select", {3, 3});

}  // namespace ops

}  // namespace tensoracle::graph
