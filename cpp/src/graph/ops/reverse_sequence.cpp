// Op unit: the reverse-sequence layer. How backends run it: backends/cpu/ops/reverse_sequence.cpp
// and backends/cuda/ops/reverse_sequence.cu. Every layer's unit is listed in graph/ops/registry.cpp.
#include <string>

#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

namespace {

std::vector<TensorDesc> infer_op(const ReverseSequenceParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>,
                                 bool) {
  const Dims& x = in[0].dims;
  if (x.rank() < 2) invalid("input 0 " + x.str() + " must have rank 2 or more");
  const int b = normalize_axis(p.batch_axis, x.rank(), "batch_axis");
  const int s = normalize_axis(p.sequence_axis, x.rank(), "sequence_axis");
  if (b == s) invalid("batch_axis and sequence_axis are both dim " + std::to_string(b));
  if (!is_int(in[1].type))
    invalid("sequence_lens (input 1) have type " + tname(in[1].type) + "; they must be int32 or int64");
  const Dims& lens = in[1].dims;
  if (lens.rank() != 1 || (lens[0] >= 0 && x[b] >= 0 && lens[0] != x[b]))
    invalid("sequence_lens (input 1) " + lens.str() + " must be [batch] = [" + std::to_string(x[b]) + "] (dim " +
            std::to_string(b) + " of input 0 " + x.str() + ")");
  return {in[0]};
}

json params_to_json(const ReverseSequenceParams& p) {
  return {{"batch_axis", p.batch_axis}, {"sequence_axis", p.sequence_axis}};
}

ReverseSequenceParams params_from_json(const json& j) {
  return ReverseSequenceParams{j.at("batch_axis").get<std::int32_t>(), j.at("sequence_axis").get<std::int32_t>()};
}

}  // namespace

extern const OpTraits kReverseSequenceOp =
    make_op<ReverseSequenceParams, infer_op, params_to_json, params_from_json>("reverse_sequence", {2, 2});

}  // namespace ops

}  // namespace tensoracle::graph
