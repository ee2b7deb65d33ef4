// The table of every layer kind: one OpTraits per LayerType, each defined by its op unit
// (graph/ops/<layer>.cpp; quantize.cpp holds quantize and dequantize). Adding a layer kind
// adds its unit and one line here (and its LayerType and parameters in tensoracle/network.h).
#include <iterator>
#include <string>
#include <variant>

#include "graph/op.h"
#include "tensoracle/errors.h"

namespace tensoracle {

namespace graph {

namespace ops {
extern const OpTraits kInputOp, kConstantOp, kMatrixMultiplyOp, kElementwiseOp, kActivationOp, kCastOp, kQuantizeOp, kDequantizeOp, kShuffleOp, kIdentityOp, kUnaryOp, kReduceOp, kSoftmaxOp, kConcatenationOp, kSliceOp, kGatherOp, kSelectOp, kPaddingOp, kConvolutionOp, kDeconvolutionOp, kPoolingOp, kNormalizationOp, kResizeOp, kEinsumOp, kTopkOp, kShapeOp, kPluginOp, kAttentionOp, kScaleOp, kParametricReluOp, kLrnOp, kCumulativeOp, kScatterOp, kOneHotOp, kSqueezeOp, kUnsqueezeOp, kReverseSequenceOp, kFillOp, kTripLimitOp, kRecurrenceOp, kIteratorOp, kLoopOutputOp, kConditionOp, kConditionalInputOp, kConditionalOutputOp;
}  // namespace ops

namespace {

// In LayerType order (LayerParams' alternatives): op_traits indexes it.
const OpTraits* const kOps[] = {
    &ops::kInputOp,
    &ops::kConstantOp,
    &ops::kMatrixMultiplyOp,
    &ops::kElementwiseOp,
    &ops::kActivationOp,
    &ops::kCastOp,
    &ops::kQuantizeOp,
    &ops::kDequantizeOp,
    &ops::kShuffleOp,
    &ops::kIdentityOp,
    &ops::kUnaryOp,
    &ops::kReduceOp,
    &ops::kSoftmaxOp,
    &ops::kConcatenationOp,
    &ops::kSliceOp,
    &ops::kGatherOp,
    &ops::kSelectOp,
    &ops::kPaddingOp,
    &ops::kConvolutionOp,
    &ops::kDeconvolutionOp,
    &ops::kPoolingOp,
    &ops::kNormalizationOp,
    &ops::kResizeOp,
    &ops::kEinsumOp,
    &ops::kTopkOp,
    &ops::kShapeOp,
    &ops::kPluginOp,
    &ops::kAttentionOp,
    &ops::kScaleOp,
    &ops::kParametricReluOp,
    &ops::kLrnOp,
    &ops::kCumulativeOp,
    &ops::kScatterOp,
    &ops::kOneHotOp,
    &ops::kSqueezeOp,
    &ops::kUnsqueezeOp,
    &ops::kReverseSequenceOp,
    &ops::kFillOp,
    &ops::kTripLimitOp,
    &ops::kRecurrenceOp,
    &ops::kIteratorOp,
    &ops::kLoopOutputOp,
    &ops::kConditionOp,
    &ops::kConditionalInputOp,
    &ops::kConditionalOutputOp,
};
static_assert(std::size(kOps) == std::variant_size_v<LayerParams>, "one op unit per LayerParams alternative");

}  // namespace

const OpTraits& op_traits(LayerType type) {
  const auto i = static_cast<std::size_t>(type);
  if (i >= std::size(kOps)) throw InvalidArgument("[graph] layer type " + std::to_string(i) + " does not exist");
  return *kOps[i];
}

bool is_float_key(std::string_view key) {
  for (const OpTraits* op : kOps)
    for (std::string_view k : op->float_keys)
      if (k == key) return true;
  return false;
}

const OpTraits* find_op(std::string_view name) {
  for (const OpTraits* op : kOps)
    if (op->name == name) return op;
  return nullptr;
}

}  // namespace graph

std::string_view layer_type_name(LayerType t) noexcept {
  const auto i = static_cast<std::size_t>(t);
  return i < std::size(graph::kOps) ? graph::kOps[i]->name : "unknown";
}

}  // namespace tensoracle
