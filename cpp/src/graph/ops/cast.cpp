// Op unit: the cast layer. How backends run it: backends/cpu/ops/cast.cpp and
// backends/cuda/ops/cast.cu where they exist. Every layer's unit is listed in
// graph/ops/registry.cpp.
#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

namespace {

TensorDesc infer_cast(const CastParams& p, const TensorDesc& x) {
  auto ok = [](DataType t) { return is_valid(t) && t != DataType::kFP8; };
  if (!is_valid(p.to)) invalid("to_type " + std::to_string(static_cast<int>(p.to)) + " is not a data type");
  if (!ok(x.type) || !ok(p.to))
    invalid("cannot cast " + tname(x.type) + " to " + tname(p.to) +
            "; fp8 values come from add_quantize and leave through add_dequantize");
  return {p.to, x.dims};
}

std::vector<TensorDesc> infer_op(const CastParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  return {infer_cast(p, in[0])};
}

json params_to_json(const CastParams& p) {
  return {{"to", type_name(p.to)}};
}

CastParams params_from_json(const json& j) {
  return CastParams{type_of(j.at("to"))};
}

}  // namespace

extern const OpTraits kCastOp =
    make_op<CastParams, infer_op, params_to_json, params_from_json>("cast", {1, 1});

}  // namespace ops

}  // namespace tensoracle::graph
