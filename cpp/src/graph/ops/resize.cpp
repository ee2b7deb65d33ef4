// Op unit: the resize layer. How backends run it: backends/cpu/ops/resize.cpp and
// backends/cuda/ops/resize.cu where they exist. Every layer's unit is listed in
// graph/ops/registry.cpp.
#include <array>
#include <cmath>
#include <string_view>

#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

namespace {

constexpr std::array<std::string_view, 3> kInterp = {"NEAREST", "LINEAR", "CUBIC"};
constexpr std::array<std::string_view, 3> kCoord = {"ALIGN_CORNERS", "ASYMMETRIC", "HALF_PIXEL"};
constexpr std::array<std::string_view, 2> kSelector = {"FORMULA", "UPPER"};
constexpr std::array<std::string_view, 4> kRound = {"HALF_UP", "HALF_DOWN", "FLOOR", "CEIL"};

std::vector<TensorDesc> infer_op(const ResizeParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  const Dims& x = in[0].dims;
  if (p.mode != InterpolationMode::kNEAREST) require_float(in[0], 0, "linear and cubic resize");
  if (p.output_dims && !p.scales.empty()) invalid("set either output dims or scales, not both");
  if (p.output_dims) {
    if (p.output_dims->rank() != x.rank()) invalid("output dims " + p.output_dims->str() + " must have the input's rank");
    for (auto d : *p.output_dims)
      if (d < 0) invalid("output dims " + p.output_dims->str() + " must be >= 0");
    return {{in[0].type, *p.output_dims}};
  }
  if (p.scales.empty()) invalid("neither output dims nor scales are set");
  if (static_cast<int>(p.scales.size()) != x.rank())
    invalid(std::to_string(p.scales.size()) + " scales for an input of rank " + std::to_string(x.rank()));
  Dims out = x;
  for (int i = 0; i < x.rank(); ++i) {
    if (!(p.scales[static_cast<std::size_t>(i)] > 0.f)) invalid("scales must be > 0");
    if (x[i] < 0) continue;
    // In double, then bounded before the conversion (out of range, it would be undefined).
    const double v = std::floor(static_cast<double>(x[i]) * p.scales[static_cast<std::size_t>(i)]);
    if (!(v < 0x1p62)) invalid("scales make dimension " + std::to_string(i) + " of " + x.str() + " too large");
    out[i] = static_cast<std::int64_t>(v);
  }
  return {{in[0].type, out}};
}

json params_to_json(const ResizeParams& p) {
  return {{"output_dims", p.output_dims ? dims_json(*p.output_dims) : json(nullptr)}, {"scales", p.scales},
          {"mode", enum_name(kInterp, p.mode)},
          {"coordinate_transformation", enum_name(kCoord, p.coordinate_transformation)},
          {"selector_for_single_pixel", enum_name(kSelector, p.selector_for_single_pixel)},
          {"nearest_rounding", enum_name(kRound, p.nearest_rounding)}, {"cubic_coeff", p.cubic_coeff}};
}

ResizeParams params_from_json(const json& j) {
  ResizeParams p;
  if (!j.at("output_dims").is_null()) p.output_dims = dims_of(j.at("output_dims"));
  p.scales = j.at("scales").get<std::vector<float>>();
  p.mode = enum_value<InterpolationMode>(kInterp, j.at("mode"));
  p.coordinate_transformation = enum_value<ResizeCoordinateTransformation>(kCoord, j.at("coordinate_transformation"));
  p.selector_for_single_pixel = enum_value<ResizeSelector>(kSelector, j.at("selector_for_single_pixel"));
  p.nearest_rounding = enum_value<ResizeRoundMode>(kRound, j.at("nearest_rounding"));
  p.cubic_coeff = j.at("cubic_coeff").get<float>();
  return p;
}

constexpr std::array<std::string_view, 2> kFloatKeys = {"scales", "cubic_coeff"};

}  // namespace

extern const OpTraits kResizeOp =
    make_op<ResizeParams, infer_op, params_to_json, params_from_json>("resize", {1, 1}, kFloatKeys);

}  // namespace ops

}  // namespace tensoracle::graph
