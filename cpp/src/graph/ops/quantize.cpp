// Op unit: the quantize and dequantize layers (one family: they share the scale's rules). How
// backends run them: backends/cpu/ops/quantize.cpp and backends/cuda/ops/quantize.cu. Every
// layer's unit is listed in graph/ops/registry.cpp.
#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

namespace {

// Quantize/dequantize scale: a constant of one element, or 1-D of dims[axis] elements.
void check_scale(const TensorDesc& x, const TensorDesc& scale, const InputFacts& fact, std::int32_t axis,
                 DataType value_type, bool full) {
  if (!fact.is_constant) invalid("input 1 (scale) must be a constant (add_constant), as TensorRT requires");
  if (!is_float(scale.type))
    invalid("input 1 (scale) has type " + tname(scale.type) + "; scales are float32, float16 or bfloat16");
  if (scale.type != DataType::kFLOAT && scale.type != value_type)
    invalid("input 1 (scale) has type " + tname(scale.type) + "; it must be float32 or " + tname(value_type));
  std::int64_t n = scale.dims.volume();
  if (n == 1) return;
  if (scale.dims.rank() != 1)
    invalid("input 1 (scale) has dims " + scale.dims.str() + "; scales are one element or 1-D (per channel)");
  int a = normalize_axis(axis, x.dims.rank(), "axis");
  if (!full) return;  // the axis may still be set: its size is checked when the network is built
  if (scale.dims.rank() != 1 || x.dims[a] < 0 || n != x.dims[a])
    invalid("input 1 (scale) has dims " + scale.dims.str() + "; per-channel scales need 1-D dims (" +
            std::to_string(x.dims[a]) + ") matching input 0's axis " + std::to_string(a) + " of " + x.dims.str());
}

std::vector<TensorDesc> infer_quantize(const QuantizeParams& p, std::span<const TensorDesc> in, std::span<const InputFacts> facts, bool full) {
  require_float(in[0], 0, "quantize");
  if (p.to != DataType::kINT8 && p.to != DataType::kFP8)
    invalid("to_type " + tname(p.to) + " is not a quantized type; use int8 or fp8");
  check_scale(in[0], in[1], facts[1], p.axis, in[0].type, full);
  return {{p.to, in[0].dims}};
}

std::vector<TensorDesc> infer_dequantize(const DequantizeParams& p, std::span<const TensorDesc> in, std::span<const InputFacts> facts, bool full) {
  if (in[0].type != DataType::kINT8 && in[0].type != DataType::kFP8)
    invalid("input 0 has type " + tname(in[0].type) + "; dequantize takes int8 or fp8");
  if (!is_float(p.to))
    invalid("to_type " + tname(p.to) + " is not float32, float16 or bfloat16");
  check_scale(in[0], in[1], facts[1], p.axis, p.to, full);
  return {{p.to, in[0].dims}};
}

template <typename P>
json params_to_json(const P& p) {
  return {{"to", type_name(p.to)}, {"axis", p.axis}};
}

QuantizeParams quantize_from_json(const json& j) { return QuantizeParams{type_of(j.at("to")), j.at("axis").get<std::int32_t>()}; }
DequantizeParams dequantize_from_json(const json& j) {
  return DequantizeParams{type_of(j.at("to")), j.at("axis").get<std::int32_t>()};
}

}  // namespace

extern const OpTraits kQuantizeOp = make_op<QuantizeParams, infer_quantize, params_to_json<QuantizeParams>, quantize_from_json>("quantize", {2, 2});
extern const OpTraits kDequantizeOp = make_op<DequantizeParams, infer_dequantize, params_to_json<DequantizeParams>,
                                              dequantize_from_json>("dequantize", {2, 2});

}  // namespace ops

}  // namespace tensoracle::graph
