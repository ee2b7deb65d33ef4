// Op unit: the shape layer. How backends run it: backends/cpu/ops/shape.cpp and
// backends/cuda/ops/shape.cu where they exist. Every layer's unit is listed in
// graph/ops/registry.cpp.
#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

namespace {

std::vector<TensorDesc> infer_op(const ShapeParams&, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  return {{DataType::kINT64, Dims{in[0].dims.rank()}}};
}

json params_to_json(const ShapeParams&) { return json::object(); }

ShapeParams params_from_json(const json&) { return {}; }

}  // namespace

extern const OpTraits kShapeOp =
    make_op<ShapeParams, infer_op, params_to_json, params_from_json>("shape", {1, 1});

}  // namespace ops

}  // namespace tensoracle::graph
