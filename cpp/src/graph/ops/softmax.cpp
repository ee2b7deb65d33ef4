// Op unit: the softmax layer. How backends run it: backends/cpu/ops/softmax.cpp and
// backends/cuda/ops/softmax.cu where they exist. Every layer's unit is listed in
// graph/ops/registry.cpp.
#include "graph/ops/common.h"

namespace tensoracle::graph {

using namespace ops;

int softmax_axis(const SoftmaxParams& p, int rank) {
  if (p.axes == 0) return default_axis(rank);
  int a = 0;
  while (!((p.axes >> a) & 1u)) ++a;
  return a;
}

namespace ops {

namespace {

std::vector<TensorDesc> infer_op(const SoftmaxParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  require_float(in[0], 0, "softmax");
  int rank = in[0].dims.rank();
  if (rank == 0) invalid("input 0 is a scalar; softmax needs rank >= 1");
  check_axes(p.axes, rank, "axes");
  if (p.axes != 0 && (p.axes & (p.axes - 1)) != 0)
    invalid("axes mask " + std::to_string(p.axes) + " names more than one dimension; softmax takes one");
  return {in[0]};
}

json params_to_json(const SoftmaxParams& p) {
  return {{"axes", p.axes}};
}

SoftmaxParams params_from_json(const json& j) {
  return SoftmaxParams{j.at("axes").get<std::uint32_t>()};
}

}  // namespace

extern const OpTraits kSoftmaxOp =
    make_op<SoftmaxParams, infer_op, params_to_json, params_from_json>("softmax", {1, 1});

}  // namespace ops

}  // namespace tensoracle::graph
