// Op unit: the parametric ReLU layer. How backends run it: backends/cpu/ops/parametric_relu.cpp and
// backends/cuda/ops/parametric_relu.cu. Every layer's unit is listed in graph/ops/registry.cpp.
#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

namespace {

std::vector<TensorDesc> infer_op(const ParametricReluParams&, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  require_float(in[0], 0, "parametric ReLU");
  require_same_type(in, "parametric ReLU (slope, input 1)");
  if (in[1].dims.rank() != in[0].dims.rank())
    invalid("slope (input 1) has rank " + std::to_string(in[1].dims.rank()) + " but the input has rank " +
            std::to_string(in[0].dims.rank()) + "; they must match");
  const Dims d = broadcast_dims(in[0].dims, in[1].dims);
  if (!(d == in[0].dims) && in[0].dims.all_known())
    invalid("slope (input 1) " + in[1].dims.str() + " must broadcast to the input " + in[0].dims.str());
  return {in[0]};
}

json params_to_json(const ParametricReluParams&) { return json::object(); }

ParametricReluParams params_from_json(const json&) { return {}; }

}  // namespace

extern const OpTraits kParametricReluOp =
    make_op<ParametricReluParams, infer_op, params_to_json, params_from_json>("parametric_relu", {2, 2});

}  // namespace ops

}  // namespace tensoracle::graph
