// Op unit: the deconvolution layer. How backends run it: backends/cpu/ops/deconvolution.cpp and
// backends/cuda/ops/deconvolution.cu where they exist. Every layer's unit is listed in
// graph/ops/registry.cpp.
#include "graph/ops/common.h"
#include "graph/ops/window.h"

namespace tensoracle::graph {

namespace ops {

namespace {

std::vector<TensorDesc> infer_op(const DeconvolutionParams& p, std::span<const TensorDesc> in,
                                   std::span<const InputFacts> facts, bool full) {
  Spatial s = spatial(p.kernel_size, p.stride, p.pre_padding, p.post_padding, p.dilation, "kernel_size");
  int n = s.kernel.rank();
  const Dims& x = in[0].dims;
  if (x.rank() != n + 2)
    invalid("input 0 has dims " + x.str() + "; a " + std::to_string(n) + "-D deconvolution takes rank " + std::to_string(n + 2));
  check_conv_weights(in[0], in, facts, x[1], p.num_output_maps / std::max(1, p.num_groups), s, p.num_groups,
                     p.num_output_maps, "deconvolution", full);
  Dims out = x;
  out[1] = p.num_output_maps;
  for (int i = 0; i < n; ++i) {
    std::int64_t v = x[2 + i];
    if (v < 0) continue;
    if (p.padding_mode == PaddingMode::kSAME_UPPER || p.padding_mode == PaddingMode::kSAME_LOWER) {
      out[2 + i] = narrow_dim(Wide{v} * s.stride[i], [i] { return "spatial dimension " + std::to_string(i) + " of the output"; });
    } else {
      out[2 + i] = narrow_dim((Wide{v} - 1) * s.stride[i] + Wide{s.dilation[i]} * (s.kernel[i] - 1) + 1 - s.pre[i] - s.post[i],
                              [i] { return "spatial dimension " + std::to_string(i) + " of the output"; });
    }
    if (out[2 + i] < 1) {
      if (!full) out[2 + i] = -1;  // padding may still change: checked when the network is built
      else invalid("padding " + s.pre.str() + "/" + s.post.str() + " leaves no output in spatial dimension " + std::to_string(i));
    }
  }
  return {{in[0].type, out}};
}

}  // namespace

// Optional bias. The parameters' JSON is convolution's and deconvolution's (window.h).
extern const OpTraits kDeconvolutionOp =
    make_op<DeconvolutionParams, infer_op, conv_params_to_json<DeconvolutionParams>, conv_params_from_json<DeconvolutionParams>>("deconvolution", {2, 3});

}  // namespace ops

}  // namespace tensoracle::graph
