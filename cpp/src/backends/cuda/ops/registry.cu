// The CUDA backend's table of layer kinds: one OpKernel per LayerType, each defined by its
// layer file (ops/<layer>.cu; quantize.cu holds quantize and dequantize). Adding a layer kind
// adds its file and one line here. An explicit table rather than self-registration, as on the
// CPU (backends/cpu/ops/registry.cpp).
#include <iterator>
#include <string>
#include <variant>

#include "backends/cuda/op_kernel.h"
#include "tensoracle/errors.h"

namespace tensoracle::cuda {

namespace ops {
extern const OpKernel kMatrixMultiplyKernel, kElementwiseKernel, kActivationKernel, kCastKernel, kQuantizeKernel, kDequantizeKernel, kShuffleKernel, kIdentityKernel, kUnaryKernel, kReduceKernel, kSoftmaxKernel, kConcatenationKernel, kSliceKernel, kGatherKernel, kSelectKernel, kPaddingKernel, kConvolutionKernel, kDeconvolutionKernel, kPoolingKernel, kNormalizationKernel, kResizeKernel, kEinsumKernel, kTopkKernel, kPluginKernel, kAttentionKernel, kScaleKernel, kParametricReluKernel, kLrnKernel, kCumulativeKernel, kScatterKernel, kOneHotKernel, kSqueezeKernel, kUnsqueezeKernel, kReverseSequenceKernel, kFillKernel;
}  // namespace ops

namespace {

// In LayerType order (LayerParams' alternatives): op_kernel indexes it. Input and constant
// values are never run; shape layers run on the host (cpu::evaluate_shape_node).
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
    nullptr,  // shape
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
  if (i >= std::size(kKernels)) throw InvalidArgument("[cuda] layer type " + std::to_string(i) + " does not exist");
  // The table's order is checked here, where the tests (without a GPU) cannot link it.
  if (kKernels[i] && kKernels[i]->type != type)
    throw Error("[cuda] the kernel table (ops/registry.cu) is out of LayerType order at " +
                std::string(layer_type_name(type)));
  return kKernels[i];
}

}  // namespace tensoracle::cuda
