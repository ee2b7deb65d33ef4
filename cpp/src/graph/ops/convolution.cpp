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

}  // namespace

// Optional bias. The parameters' JSON is convolution's and deconvolution's (window.h).
extern const OpTraits kConvolutionOp =
    make_op<ConvolutionParams, infer_op, conv_params_to_json<ConvolutionParams>, conv_params_from_json<ConvolutionParams>>("convolution", {2, 3});

}  // namespace ops

}  // namespace tensoracle::graph
