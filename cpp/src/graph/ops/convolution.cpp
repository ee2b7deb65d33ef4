// Op unit: the convolution layer. How backends run it: backends/cpu/ops/convolution.cpp and
// backends/cuda/ops/convolution.cu where they exist. Every layer's unit is listed in
// graph/ops/registry.cpp.
#include "graph/ops/common.h"
#include "graph/ops/window.h"

namespace tensoracle::graph {

namespace ops {

namespace {

std::vector<TensorDesc> infer_op(const ConvolutionParams& p, std::span<const TensorDesc> in, std::span<const InputFacts> facts, bool full) {
  Spatial s = spatial(p.kernel_size, p.stride, p.pre_padding, p.post_padding, p.dilation, "kernel_size");
  if (in[0].dims.rank() != s.kernel.rank() + 2)
    invalid("input 0 has dims " + in[0].dims.str() + "; a " + std::to_string(s.kernel.rank()) + "-D convolution takes rank " +
            std::to_string(s.kernel.rank() + 2) + " (N, C, spatial...)");
  std::int64_t c = in[0].dims[1];
  check_conv_weights(in[0], in, facts, p.num_output_maps, c < 0 ? -1 : c / std::max(1, p.num_groups), s, p.num_groups,
                     p.num_output_maps, "convolution", full);
  return {infer_window(in[0], s, p.padding_mode, p.num_output_maps, "convolution", full)};
}

json params_to_json(const ConvolutionParams& p) {
  return {{"num_output_maps", p.num_output_maps}, {"kernel_size", dims_json(p.kernel_size)},
          {"stride", dims_json(p.stride)}, {"pre_padding", dims_json(p.pre_padding)},
          {"post_padding", dims_json(p.post_padding)}, {"dilation", dims_json(p.dilation)},
          {"num_groups", p.num_groups}, {"padding_mode", enum_name(kPadMode, p.padding_mode)}};
}

ConvolutionParams params_from_json(const json& j) {
  auto fill = [&](auto p) {
    p.num_output_maps = j.at("num_output_maps").get<std::int32_t>();
    p.kernel_size = dims_of(j.at("kernel_size"));
    p.stride = dims_of(j.at("stride"));
    p.pre_padding = dims_of(j.at("pre_padding"));
    p.post_padding = dims_of(j.at("post_padding"));
    p.dilation = dims_of(j.at("dilation"));
    p.num_groups = j.at("num_groups").get<std::int32_t>();
    p.padding_mode = enum_value<PaddingMode>(kPadMode, j.at("padding_mode"));
    return p;
  };
  return fill(ConvolutionParams{});
}

}  // namespace

// Optional bias.
extern const OpTraits kConvolutionOp =
    make_op<ConvolutionParams, infer_op, params_to_json, params_from_json>(LayerType::kCONVOLUTION, "convolution", {2, 3});

}  // namespace ops

}  // namespace tensoracle::graph
