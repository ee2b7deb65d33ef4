// Op unit: the conditional boundary layers (condition, conditional input, conditional output;
// TensorRT's IIfConditional). They describe a conditional in a Network and never reach a plan:
// graph/from_network.cpp turns each output into a select between its branches' values (or the
// branch a condition known when building picks). Every layer's unit is listed in
// graph/ops/registry.cpp.
#include <string>

#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

namespace {

std::vector<TensorDesc> infer_condition(const ConditionParams&, std::span<const TensorDesc> in, std::span<const InputFacts>,
                                        bool) {
  if (in[0].type != DataType::kBOOL || in[0].dims.rank() != 0)
    invalid("the condition (input 0) is " + tname(in[0].type) + " " + in[0].dims.str() + "; it must be a 0-D bool tensor");
  return {};
}

std::vector<TensorDesc> infer_input(const ConditionalInputParams&, std::span<const TensorDesc> in, std::span<const InputFacts>,
                                    bool) {
  return {in[0]};
}

std::vector<TensorDesc> infer_output(const ConditionalOutputParams&, std::span<const TensorDesc> in,
                                     std::span<const InputFacts>, bool) {
  if (in.size() < 2) invalid("a conditional output takes the true branch's value and the false branch's (inputs 0 and 1)");
  if (in[0].type != in[1].type)
    invalid("the branches' values have types " + tname(in[0].type) + " (true) and " + tname(in[1].type) + " (false)");
  const Dims &a = in[0].dims, &b = in[1].dims;
  bool same = a.rank() == b.rank();
  Dims out = a;
  for (int i = 0; same && i < a.rank(); ++i) {
    same = a[i] < 0 || b[i] < 0 || a[i] == b[i];
    if (a[i] < 0) out[i] = b[i];
  }
  if (!same)
    invalid("the branches' values have dims " + a.str() + " (true) and " + b.str() +
            " (false); tensoracle needs both branches to give one shape");
  return {{in[0].type, out}};
}

template <typename P>
json index_json(const P& p) {
  return {{"conditional", p.conditional}};
}

}  // namespace

extern const OpTraits kConditionOp =
    make_op<ConditionParams, infer_condition, index_json<ConditionParams>, nullptr>("condition", {1, 1});
extern const OpTraits kConditionalInputOp =
    make_op<ConditionalInputParams, infer_input, index_json<ConditionalInputParams>, nullptr>("conditional_input", {1, 1});
extern const OpTraits kConditionalOutputOp =
    make_op<ConditionalOutputParams, infer_output, index_json<ConditionalOutputParams>, nullptr>("conditional_output", {2, 2});

}  // namespace ops

}  // namespace tensoracle::graph
