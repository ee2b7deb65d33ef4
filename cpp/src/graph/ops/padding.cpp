// Op unit: the padding layer. How backends run it: backends/cpu/ops/padding.cpp and
// backends/cuda/ops/padding.cu where they exist. Every layer's unit is listed in
// graph/ops/registry.cpp.
#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

namespace {

std::vector<TensorDesc> infer_op(const PaddingParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  const Dims& x = in[0].dims;
  int n = p.pre_padding.rank();
  if (p.post_padding.rank() != n)
    invalid("pre_padding " + p.pre_padding.str() + " and post_padding " + p.post_padding.str() + " differ in rank");
  if (n > x.rank()) invalid("padding of rank " + std::to_string(n) + " exceeds the input's rank " + std::to_string(x.rank()));
  Dims out = x;
  for (int i = 0; i < n; ++i) {
    int d = x.rank() - n + i;
    if (x[d] < 0) continue;
    std::int64_t v = narrow_dim(Wide{x[d]} + p.pre_padding[i] + p.post_padding[i], [d] { return "padded dimension " + std::to_string(d); });
    if (v < 0) invalid("padding " + p.pre_padding.str() + "/" + p.post_padding.str() + " crops dimension " +
                       std::to_string(d) + " of " + x.str() + " below zero");
    out[d] = v;
  }
  return {{in[0].type, out}};
}

json params_to_json(const PaddingParams& p) {
  return {{"pre_padding", dims_json(p.pre_padding)}, {"post_padding", dims_json(p.post_padding)}};
}

PaddingParams params_from_json(const json& j) {
  return PaddingParams{dims_of(j.at("pre_padding")), dims_of(j.at("post_padding"))};
}

}  // namespace

extern const OpTraits kPaddingOp =
    make_op<PaddingParams, infer_op, params_to_json, params_from_json>("padding", {1, 1});

}  // namespace ops

}  // namespace tensoracle::graph
