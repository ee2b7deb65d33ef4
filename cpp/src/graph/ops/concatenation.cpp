// Op unit: the concatenation layer. How backends run it: backends/cpu/ops/concatenation.cpp and
// backends/cuda/ops/concatenation.cu where they exist. Every layer's unit is listed in
// graph/ops/registry.cpp.
#include "graph/ops/common.h"

namespace tensoracle::graph {

using namespace ops;

int concat_axis(const ConcatenationParams& p, int rank) {
  if (p.axis == -1000) return default_axis(rank);
  return p.axis < 0 ? p.axis + rank : p.axis;
}

namespace ops {

namespace {

std::vector<TensorDesc> infer_op(const ConcatenationParams& p, std::span<const TensorDesc> in,
                                   std::span<const InputFacts>, bool full) {
  if (in.empty()) invalid("concatenation needs at least one input");
  int rank = in[0].dims.rank();
  if (rank == 0) invalid("input 0 is a scalar; concatenation needs rank >= 1");
  int axis = concat_axis(p, rank);
  if (axis < 0 || axis >= rank) invalid("axis " + std::to_string(p.axis) + " is out of range for rank " + std::to_string(rank));
  Dims out = in[0].dims;
  for (std::size_t i = 1; i < in.size(); ++i) {
    if (in[i].type != in[0].type)
      invalid("input " + std::to_string(i) + " has type " + tname(in[i].type) + " but input 0 has type " + tname(in[0].type));
    if (in[i].dims.rank() != rank)
      invalid("input " + std::to_string(i) + " has dims " + in[i].dims.str() + ", of another rank than input 0 " + in[0].dims.str());
    for (int d = 0; d < rank; ++d) {
      if (d == axis) {
        out[d] = (out[d] < 0 || in[i].dims[d] < 0) ? -1 : narrow_dim(Wide{out[d]} + in[i].dims[d], "the concatenated axis");
      } else if (out[d] >= 0 && in[i].dims[d] >= 0 && out[d] != in[i].dims[d]) {
        if (!full) {  // the axis may still be set: checked when the network is built
          out[d] = -1;
          continue;
        }
        invalid("input " + std::to_string(i) + " has dims " + in[i].dims.str() + "; dimension " + std::to_string(d) +
                " differs from input 0 " + in[0].dims.str() + " (only axis " + std::to_string(axis) + " may differ)");
      } else if (out[d] < 0) {
        out[d] = in[i].dims[d];
      }
    }
  }
  return {{in[0].type, out}};
}

json params_to_json(const ConcatenationParams& p) {
  return {{"axis", p.axis}};
}

ConcatenationParams params_from_json(const json& j) {
  return ConcatenationParams{j.at("axis").get<std::int32_t>()};
}

}  // namespace

extern const OpTraits kConcatenationOp =
    make_op<ConcatenationParams, infer_op, params_to_json, params_from_json>("concatenation", {1, -1});

}  // namespace ops

}  // namespace tensoracle::graph
