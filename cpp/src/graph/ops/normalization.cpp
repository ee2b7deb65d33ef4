// Op unit: the normalization layer. How backends run it: backends/cpu/ops/normalization.cpp and
// backends/cuda/ops/normalization.cu where they exist. Every layer's unit is listed in
// graph/ops/registry.cpp.
#include <array>
#include <string_view>

#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

namespace {

std::vector<TensorDesc> infer_op(const NormalizationParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  require_float(in[0], 0, "normalization");
  int rank = in[0].dims.rank();
  check_axes(p.axes, rank, "axes");
  if (p.axes == 0) invalid("axes is 0: name the dimensions to normalize over");
  if (!(p.epsilon >= 0.f)) invalid("epsilon " + std::to_string(p.epsilon) + " must be >= 0");
  if (p.num_groups < 1) invalid("num_groups " + std::to_string(p.num_groups) + " must be >= 1");
  if (p.num_groups > 1) {
    if (rank < 2) invalid("num_groups > 1 needs a channel dimension (rank >= 2)");
    if (in[0].dims[1] >= 0 && in[0].dims[1] % p.num_groups != 0)
      invalid("channels " + std::to_string(in[0].dims[1]) + " are not divisible by num_groups " + std::to_string(p.num_groups));
    if (p.axes & 2u) invalid("with num_groups > 1 the channel dimension (1) is grouped, not in axes");
  }
  for (int i : {1, 2}) {
    if (in[static_cast<std::size_t>(i)].type != in[0].type)
      invalid("input " + std::to_string(i) + (i == 1 ? " (scale)" : " (bias)") + " has type " +
              tname(in[static_cast<std::size_t>(i)].type) + "; it must be " + tname(in[0].type));
    // Each dim of scale/bias is 1 or x's (a dynamic dim of x matches any size, checked at run time).
    const Dims& x = in[0].dims;
    const Dims& sb = in[static_cast<std::size_t>(i)].dims;
    bool ok = sb.rank() == x.rank();
    for (int d = 0; ok && d < x.rank(); ++d) ok = sb[d] == 1 || x[d] < 0 || sb[d] < 0 || sb[d] == x[d];
    if (!ok)
      invalid("input " + std::to_string(i) + (i == 1 ? " (scale)" : " (bias)") + " has dims " + sb.str() +
              ", which do not broadcast into input 0 " + x.str());
  }
  return {in[0]};
}

json params_to_json(const NormalizationParams& p) {
  return {{"axes", p.axes}, {"epsilon", p.epsilon}, {"num_groups", p.num_groups}};
}

NormalizationParams params_from_json(const json& j) {
  return NormalizationParams{j.at("axes").get<std::uint32_t>(), j.at("epsilon").get<float>(), j.at("num_groups").get<std::int32_t>()};
}

constexpr std::array<std::string_view, 1> kFloatKeys = {"epsilon"};

}  // namespace

extern const OpTraits kNormalizationOp =
    make_op<NormalizationParams, infer_op, params_to_json, params_from_json>("normalization", {3, 3}, kFloatKeys);

}  // namespace ops

}  // namespace tensoracle::graph
