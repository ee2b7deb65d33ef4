// Op unit: the pooling layer. How backends run it: backends/cpu/ops/pooling.cpp and
// backends/cuda/ops/pooling.cu where they exist. Every layer's unit is listed in
// graph/ops/registry.cpp.
#include <array>
#include <string_view>

#include "graph/ops/common.h"
#include "graph/ops/window.h"

namespace tensoracle::graph {

namespace ops {

namespace {

constexpr std::array<std::string_view, 3> kPool = {"MAX", "AVERAGE", "MAX_AVERAGE_BLEND"};

std::vector<TensorDesc> infer_op(const PoolingParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool full) {
  require_float(in[0], 0, "pooling");
  Spatial s = spatial(p.window, p.stride, p.pre_padding, p.post_padding, Dims{}, "window");
  if (p.blend_factor < 0.f || p.blend_factor > 1.f) invalid("blend_factor " + std::to_string(p.blend_factor) + " is outside [0, 1]");
  for (int i = 0; i < s.kernel.rank(); ++i)
    if (s.pre[i] >= s.kernel[i] || s.post[i] >= s.kernel[i])
      invalid("padding " + s.pre.str() + "/" + s.post.str() + " must be smaller than the window " + s.kernel.str());
  return {infer_window(in[0], s, p.padding_mode, -1, "pooling", full)};
}

json params_to_json(const PoolingParams& p) {
  return {{"type", enum_name(kPool, p.type)}, {"window", dims_json(p.window)}, {"stride", dims_json(p.stride)},
          {"pre_padding", dims_json(p.pre_padding)}, {"post_padding", dims_json(p.post_padding)},
          {"padding_mode", enum_name(kPadMode, p.padding_mode)},
          {"average_count_excludes_padding", p.average_count_excludes_padding}, {"blend_factor", p.blend_factor}};
}

PoolingParams params_from_json(const json& j) {
  PoolingParams p;
  p.type = enum_value<PoolingType>(kPool, j.at("type"));
  p.window = dims_of(j.at("window"));
  p.stride = dims_of(j.at("stride"));
  p.pre_padding = dims_of(j.at("pre_padding"));
  p.post_padding = dims_of(j.at("post_padding"));
  p.padding_mode = enum_value<PaddingMode>(kPadMode, j.at("padding_mode"));
  p.average_count_excludes_padding = j.at("average_count_excludes_padding").get<bool>();
  p.blend_factor = j.at("blend_factor").get<float>();
  return p;
}

constexpr std::array<std::string_view, 1> kFloatKeys = {"blend_factor"};

}  // namespace

extern const OpTraits kPoolingOp =
    make_op<PoolingParams, infer_op, params_to_json, params_from_json>("pooling", {1, 1}, kFloatKeys);

}  // namespace ops

}  // namespace tensoracle::graph
