// Op unit: the scale layer. How backends run it: backends/cpu/ops/scale.cpp and
// backends/cuda/ops/scale.cu. Every layer's unit is listed in graph/ops/registry.cpp.
#include <array>
#include <string_view>

#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

namespace {

constexpr std::array<std::string_view, 3> kModes = {"UNIFORM", "CHANNEL", "ELEMENTWISE"};

std::vector<TensorDesc> infer_op(const ScaleParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  require_float(in[0], 0, "scale");
  const Dims& d = in[0].dims;
  const int r = d.rank();
  if (static_cast<int>(p.mode) < 0 || static_cast<int>(p.mode) > static_cast<int>(ScaleMode::kELEMENTWISE))
    invalid("unknown scale mode " + std::to_string(static_cast<int>(p.mode)));
  int axis = 0;
  if (p.mode != ScaleMode::kUNIFORM) {
    if (r == 0) invalid("a CHANNEL or ELEMENTWISE scale needs an input of rank 1 or more");
    axis = normalize_axis(p.channel_axis, r, "channel_axis");
  }
  // The mode's coefficient count; -1 while a dim it depends on is unknown.
  std::int64_t want = 1;
  if (p.mode == ScaleMode::kCHANNEL) want = d[axis];
  if (p.mode == ScaleMode::kELEMENTWISE)
    for (int k = axis; k < r && want >= 0; ++k) want = d[k] < 0 ? -1 : narrow_dim(static_cast<Wide>(want) * d[k], "the ELEMENTWISE count");
  const char* names[3] = {"shift (input 1)", "scale (input 2)", "power (input 3)"};
  for (int i = 1; i <= 3; ++i) {
    const TensorDesc& w = in[static_cast<std::size_t>(i)];
    if (w.type != DataType::kFLOAT) invalid(std::string(names[i - 1]) + " has type " + tname(w.type) + "; it must be float32");
    if (w.dims.rank() != 1) invalid(std::string(names[i - 1]) + " must be 1-D, not " + w.dims.str());
    const std::int64_t n = w.dims[0];
    if (n != 1 && want >= 0 && n != want && n >= 0)
      invalid(std::string(names[i - 1]) + " has " + std::to_string(n) + " coefficients; the " +
              enum_name(kModes, p.mode) + " mode needs " + std::to_string(want) + " (or one)");
  }
  return {in[0]};
}

json params_to_json(const ScaleParams& p) { return {{"mode", enum_name(kModes, p.mode)}, {"channel_axis", p.channel_axis}}; }

ScaleParams params_from_json(const json& j) {
  return ScaleParams{enum_value<ScaleMode>(kModes, j.at("mode")), j.at("channel_axis").get<std::int32_t>()};
}

}  // namespace

extern const OpTraits kScaleOp = make_op<ScaleParams, infer_op, params_to_json, params_from_json>("scale", {4, 4});

}  // namespace ops

}  // namespace tensoracle::graph
