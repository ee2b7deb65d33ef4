// The CPU backend's table of layer kinds: one OpKernel per LayerType, each defined by its layer
// file (ops/<layer>.cpp; quantize.cpp holds quantize and dequantize). Adding a layer kind adds
// its file and one line here. An explicit table rather than self-registration: a static
// library drops registration objects nothing references.
#include <iterator>
#include <string>
#include <variant>

#include "backends/cpu/op_kernel.h"
#include "tensoracle/errors.h"

namespace tensoracle::cpu {

namespace ops {
extern const OpKernel kMatrixMultiplyKernel, kElementwiseKernel, kActivationKernel, kCastKernel, kQuantizeKernel, kDequantizeKernel, kShuffleKernel, kIdentityKernel, kUnaryKernel, kReduceKernel, kSoftmaxKernel, kConcatenationKernel, kSliceKernel, kGatherKernel, kSelectKernel, kPaddingKernel, kConvolutionKernel, kDeconvolutionKernel, kPoolingKernel, kNormalizationKernel, kResizeKernel, kEinsumKernel, kTopkKernel, kShapeKernel, kPluginKernel, kAttentionKernel, kScaleKernel, kParametricReluKernel, kLrnKernel, kCumulativeKernel, kScatterKernel, kOneHotKernel, kSqueezeKernel, kUnsqueezeKernel, kReverseSequenceKernel, kFillKernel;
}  // namespace ops

namespace {

// In LayerType order (LayerParams' alternatives): op_kernel indexes it. Input and constant
// values are never run.
const OpKernel* const kKernels[] = {
    nullptr,  // input
    nullptr,  // constant
    &ops::kMatrixMultiplyKernel,
    &ops::kElementwiseKernel,
    &ops::kActivationKernel,
    &ops::kCastKernel,
    &ops::kQuantizeKernel,
    &ops::kDequantizeKernel,
    &ops::kShuffleKernel,
    &ops::kIdentityKernel,
    &ops::kUnaryKernel,
    &ops::kReduceKernel,
    &ops::kSoftmaxKernel,
    &ops::kConcatenationKernel,
    &ops::kSliceKernel,
    &ops::kGatherKernel,
    &ops::kSelectKernel,
    &ops::kPaddingKernel,
    &ops::kConvolutionKernel,
    &ops::kDeconvolutionKernel,
    &ops::kPoolingKernel,
    &ops::kNormalizationKernel,
    &ops::kResizeKernel,
    &ops::kEinsumKernel,
    &ops::kTopkKernel,
    &ops::kShapeKernel,
    &ops::kPluginKernel,
    &ops::kAttentionKernel,
    &ops::kScaleKernel,
    &ops::kParametricReluKernel,
    &ops::kLrnKernel,
    &ops::kCumulativeKernel,
    &ops::kScatterKernel,
    &ops::kOneHotKernel,
    &ops::kSqueezeKernel,
    &ops::kUnsqueezeKernel,
    &ops::kReverseSequenceKernel,
    &ops::kFillKernel,
    nullptr,  // trip limit, recurrence, iterator, loop output: unrolled by the builder
    nullptr,
    nullptr,
    nullptr,
    nullptr,  // condition, conditional input, conditional output: selects (graph/from_network.cpp)
    nullptr,
    nullptr,
};
static_assert(std::size(kKernels) == std::variant_size_v<LayerParams>, "one entry per LayerParams alternative");

}  // namespace

const OpKernel* op_kernel(LayerType type) {
  const auto i = static_cast<std::size_t>(type);
  if (i >= std::size(kKernels)) throw InvalidArgument("[cpu] layer type " + std::to_string(i) + " does not exist");
  return kKernels[i];
}

}  // namespace tensoracle::cpu
