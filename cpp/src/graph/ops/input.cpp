// Op unit: the input layer. How backends run it: backends/cpu/ops/input.cpp and
// backends/cuda/ops/input.cu where they exist. Every layer's unit is listed in
// graph/ops/registry.cpp.
#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

namespace {

// Not a TensorRT layer: the producer of a network input. Never in a plan.
std::vector<TensorDesc> infer_op(const InputParams&, std::span<const TensorDesc>, std::span<const InputFacts>, bool) {
  invalid("inputs are declared with add_input");
}

json params_to_json(const InputParams&) { return json::object(); }

}  // namespace

extern const OpTraits kInputOp =
    make_op<InputParams, infer_op, params_to_json, nullptr>("input", {0, 0});

}  // namespace ops

}  // namespace tensoracle::graph
