// tensoracle/network.h — define a network with TensorRT's vocabulary.
//
//   tensoracle::Network net;
//   Tensor* x = net.add_input("features", DataType::kFLOAT, {16, 32});
//   Tensor* w = net.add_constant({32, 16}, weights)->get_output(0);
//   Tensor* y = net.add_matrix_multiply(x, MatrixOperation::kNONE, w, MatrixOperation::kNONE)
//                   ->get_output(0);
//   Tensor* z = net.add_activation(y, ActivationType::kGELU_ERF)->get_output(0);
//   z->set_name("result");
//   net.mark_output(z);
//
// The network is strongly typed: each layer's output types follow from its input types and
// parameters. Adding a layer validates it at once and throws InvalidArgument naming the layer
// and the offending input or parameter ("[network] layer 'matmul_3': input 1 has type int32;
// matrix multiply takes float32, float16 or bfloat16"). Setters re-validate the same way and
// leave the layer unchanged when they throw.
//
// The Network owns its layers and tensors: pointers stay valid until the Network is
// destroyed. A Network is not thread-safe; build it on one thread. The builder owns the
// network it lends to a graph function through a std::shared_ptr, so that a language binding
// may share that ownership (weak_from_this().lock()) and keep the network, its layers and its
// tensors valid for as long as its own objects refer to them (Python does).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tensoracle/types.h"

namespace tensoracle {

// ---- enums (TensorRT's names and values) ------------------------------------------------

enum class MatrixOperation : std::int32_t { kNONE = 0, kTRANSPOSE = 1, kVECTOR = 2 };

enum class ElementWiseOperation : std::int32_t {
  kSUM = 0, kPROD = 1, kMAX = 2, kMIN = 3, kSUB = 4, kDIV = 5, kPOW = 6, kFLOOR_DIV = 7,
  kAND = 8, kOR = 9, kXOR = 10, kEQUAL = 11, kGREATER = 12, kLESS = 13,
};

enum class ActivationType : std::int32_t {
  kRELU = 0, kSIGMOID = 1, kTANH = 2, kLEAKY_RELU = 3, kELU = 4, kSELU = 5, kSOFTSIGN = 6,
  kSOFTPLUS = 7, kCLIP = 8, kHARD_SIGMOID = 9, kSCALED_TANH = 10, kTHRESHOLDED_RELU = 11,
  kGELU_ERF = 12, kGELU_TANH = 13,
};

// Values are the index of the layer's parameters in LayerParams (append-only: stored in plans).
enum class LayerType : std::int32_t {
  kINPUT = 0,  // not a TensorRT layer: the producer of a network input
  kCONSTANT = 1, kMATRIX_MULTIPLY = 2, kELEMENTWISE = 3, kACTIVATION = 4, kCAST = 5,
  kQUANTIZE = 6, kDEQUANTIZE = 7, kSHUFFLE = 8, kIDENTITY = 9, kUNARY = 10, kREDUCE = 11,
  kSOFTMAX = 12, kCONCATENATION = 13, kSLICE = 14, kGATHER = 15, kSELECT = 16, kPADDING = 17,
  kCONVOLUTION = 18, kDECONVOLUTION = 19, kPOOLING = 20, kNORMALIZATION = 21, kRESIZE = 22,
  kEINSUM = 23, kTOPK = 24, kSHAPE = 25, kPLUGIN = 26, kATTENTION = 27, kSCALE = 28,
  kPARAMETRIC_RELU = 29, kLRN = 30, kCUMULATIVE = 31, kSCATTER = 32, kONE_HOT = 33,
  kSQUEEZE = 34, kUNSQUEEZE = 35, kREVERSE_SEQUENCE = 36, kFILL = 37,
  // Loop boundary layers (TensorRT's ILoop): never in a plan; the builder unrolls loops.
  kTRIP_LIMIT = 38, kRECURRENCE = 39, kITERATOR = 40, kLOOP_OUTPUT = 41,
  // Conditional boundary layers (TensorRT's IIfConditional): never in a plan either.
  kCONDITION = 42, kCONDITIONAL_INPUT = 43, kCONDITIONAL_OUTPUT = 44,
};

enum class UnaryOperation : std::int32_t {
  kEXP = 0, kLOG = 1, kSQRT = 2, kRECIP = 3, kABS = 4, kNEG = 5, kSIN = 6, kCOS = 7, kTAN = 8,
  kSINH = 9, kCOSH = 10, kASIN = 11, kACOS = 12, kATAN = 13, kASINH = 14, kACOSH = 15,
  kATANH = 16, kCEIL = 17, kFLOOR = 18, kERF = 19, kNOT = 20, kSIGN = 21, kROUND = 22,
  kISINF = 23, kISNAN = 24,
};

enum class ReduceOperation : std::int32_t { kSUM = 0, kPROD = 1, kMAX = 2, kMIN = 3, kAVG = 4 };

enum class TopKOperation : std::int32_t { kMAX = 0, kMIN = 1 };

// Scale: how many coefficients shift, scale and power hold (TensorRT's ScaleMode): one for the
// whole tensor, one per channel, or one per element of the dims from the channel axis on.
enum class ScaleMode : std::int32_t { kUNIFORM = 0, kCHANNEL = 1, kELEMENTWISE = 2 };

enum class ScatterMode : std::int32_t { kELEMENT = 0, kND = 1 };
// How a scatter combines an update with the element it lands on (tensoracle's, for ONNX's
// ScatterElements / ScatterND reductions; TensorRT's scatter only replaces: kNONE).
enum class ScatterReduction : std::int32_t { kNONE = 0, kSUM = 1, kPROD = 2, kMAX = 3, kMIN = 4 };

enum class CumulativeOperation : std::int32_t { kSUM = 0 };

// Fill: evenly spaced values (alpha + Σ beta[k] · index[k]) or random draws (uniform in
// [alpha, beta), normal of mean alpha and standard deviation beta). TensorRT's FillOperation.
enum class FillOperation : std::int32_t { kLINSPACE = 0, kRANDOM_UNIFORM = 1, kRANDOM_NORMAL = 2 };

// Loops (TensorRT's names): a counted loop or a while loop; a loop output's last value, or the
// values of every iteration stacked along a new axis, in order or reversed.
enum class TripLimit : std::int32_t { kCOUNT = 0, kWHILE = 1 };
enum class LoopOutput : std::int32_t { kLAST_VALUE = 0, kCONCATENATE = 1, kREVERSE = 2 };

enum class AttentionNormalizationOp : std::int32_t { kNONE = 0, kSOFTMAX = 1 };

enum class PoolingType : std::int32_t { kMAX = 0, kAVERAGE = 1, kMAX_AVERAGE_BLEND = 2 };

// How convolution, deconvolution and pooling pad: explicit pre/post padding with the output
// size rounded down or up, or TensorRT's SAME modes (output = ceil(input / stride); the odd
// padding element goes after (SAME_UPPER) or before (SAME_LOWER)).
enum class PaddingMode : std::int32_t {
  kEXPLICIT_ROUND_DOWN = 0, kEXPLICIT_ROUND_UP = 1, kSAME_UPPER = 2, kSAME_LOWER = 3,
};

enum class GatherMode : std::int32_t { kDEFAULT = 0, kELEMENT = 1, kND = 2 };

// Slice: what an index outside the input reads. kSTRICT_BOUNDS (TensorRT's DEFAULT) refuses
// such slices when the layer is added.
enum class SampleMode : std::int32_t { kSTRICT_BOUNDS = 0, kWRAP = 1, kCLAMP = 2, kFILL = 3, kREFLECT = 4 };

enum class InterpolationMode : std::int32_t { kNEAREST = 0, kLINEAR = 1, kCUBIC = 2 };
enum class ResizeCoordinateTransformation : std::int32_t { kALIGN_CORNERS = 0, kASYMMETRIC = 1, kHALF_PIXEL = 2 };
enum class ResizeSelector : std::int32_t { kFORMULA = 0, kUPPER = 1 };
enum class ResizeRoundMode : std::int32_t { kHALF_UP = 0, kHALF_DOWN = 1, kFLOOR = 2, kCEIL = 3 };

// ---- layer parameters (value types; also the builder's IR parameters) -------------------

struct Permutation {
  std::array<std::int32_t, Dims::kMaxRank> order{0, 1, 2, 3, 4, 5, 6, 7};
  bool operator==(const Permutation&) const = default;
};

struct InputParams {};
struct ConstantParams {
  Dims shape;
  Weights weights;
};
struct MatrixMultiplyParams {
  MatrixOperation op0 = MatrixOperation::kNONE;
  MatrixOperation op1 = MatrixOperation::kNONE;
};
struct ElementWiseParams {
  ElementWiseOperation op = ElementWiseOperation::kSUM;
};
struct ActivationParams {
  ActivationType type = ActivationType::kRELU;
  float alpha = 0.f;
  float beta = 0.f;
};
struct CastParams {
  DataType to = DataType::kFLOAT;
};
// Quantize: to is kINT8 or kFP8. Dequantize: to is kFLOAT, kHALF or kBF16. `axis` picks the
// channel dimension when the scale has more than one element.
struct QuantizeParams {
  DataType to = DataType::kINT8;
  std::int32_t axis = 1;
};
struct DequantizeParams {
  DataType to = DataType::kFLOAT;
  std::int32_t axis = 1;
};
struct ShuffleParams {
  Permutation first_transpose;
  std::optional<Dims> reshape_dims;  // 0 copies the input dim (when zero_is_placeholder), -1 infers
  Permutation second_transpose;
  bool zero_is_placeholder = true;
};
struct IdentityParams {};

struct UnaryParams {
  UnaryOperation op = UnaryOperation::kEXP;
};
// `axes` is a bit mask: bit i set reduces dimension i.
struct ReduceParams {
  ReduceOperation op = ReduceOperation::kSUM;
  std::uint32_t axes = 1;
  bool keep_dims = false;
};
struct SoftmaxParams {
  std::uint32_t axes = 0;  // exactly one bit; 0 = TensorRT's default (rank - 3, or 0)
};
struct ConcatenationParams {
  std::int32_t axis = -1000;  // -1000 = TensorRT's default (rank - 3, or 0)
};
// Output dims are `size`; element i of dimension d reads input index start[d] + i * stride[d],
// mapped by `mode` when outside the input. TensorRT's optional inputs, set with set_input:
// 1 start, 2 size, 3 stride (1-D int32/int64 shape tensors that replace the fields), 4 the
// FILL mode's value (one element of the input's type; 0 when absent). `tensor_inputs` says
// which are set (bit i-1 for input i); the layer stores them in that order after input 0.
struct SliceParams {
  Dims start, size, stride;
  SampleMode mode = SampleMode::kSTRICT_BOUNDS;
  std::uint8_t tensor_inputs = 0;
};
inline constexpr int kSliceStart = 1, kSliceSize = 2, kSliceStride = 3, kSliceFill = 4;
// The position in a slice's stored inputs of TensorRT input `index` (1..4), or -1 when unset.
inline int slice_input_position(const SliceParams& p, int index) {
  if (index < 1 || index > 4 || !(p.tensor_inputs & (1u << (index - 1)))) return -1;
  int pos = 1;
  for (int i = 1; i < index; ++i) pos += (p.tensor_inputs >> (i - 1)) & 1u;
  return pos;
}
struct GatherParams {
  std::int32_t axis = 0;
  GatherMode mode = GatherMode::kDEFAULT;
  std::int32_t num_elementwise_dims = 0;
};
struct SelectParams {};
// Zero padding of the innermost pre_padding.rank() dimensions; negative values crop.
struct PaddingParams {
  Dims pre_padding, post_padding;
};
// Inputs: x [N, C, spatial...], kernel [K, C / groups, k...], optional bias [K].
struct ConvolutionParams {
  std::int32_t num_output_maps = 0;
  Dims kernel_size, stride, pre_padding, post_padding, dilation;
  std::int32_t num_groups = 1;
  PaddingMode padding_mode = PaddingMode::kEXPLICIT_ROUND_DOWN;
};
// Inputs: x [N, C, spatial...], kernel [C, K / groups, k...], optional bias [K].
struct DeconvolutionParams {
  std::int32_t num_output_maps = 0;
  Dims kernel_size, stride, pre_padding, post_padding, dilation;
  std::int32_t num_groups = 1;
  PaddingMode padding_mode = PaddingMode::kEXPLICIT_ROUND_DOWN;
};
struct PoolingParams {
  PoolingType type = PoolingType::kMAX;
  Dims window, stride, pre_padding, post_padding;
  PaddingMode padding_mode = PaddingMode::kEXPLICIT_ROUND_DOWN;
  bool average_count_excludes_padding = true;
  float blend_factor = 0.f;  // MAX_AVERAGE_BLEND: blend * max + (1 - blend) * average
};
// y = (x - mean) / sqrt(var + epsilon) * scale + bias, statistics over `axes` (bit mask), per
// group of channels (dimension 1) when num_groups > 1. Inputs: x, scale, bias (broadcast to x).
struct NormalizationParams {
  std::uint32_t axes = 0;
  float epsilon = 1e-5f;
  std::int32_t num_groups = 1;
};
// Either output_dims or scales (one per dimension) gives the output size.
struct ResizeParams {
  std::optional<Dims> output_dims;
  std::vector<float> scales;
  InterpolationMode mode = InterpolationMode::kNEAREST;
  ResizeCoordinateTransformation coordinate_transformation = ResizeCoordinateTransformation::kASYMMETRIC;
  ResizeSelector selector_for_single_pixel = ResizeSelector::kFORMULA;
  ResizeRoundMode nearest_rounding = ResizeRoundMode::kFLOOR;
  float cubic_coeff = -0.75f;
  bool operator==(const ResizeParams&) const = default;
};
// An Einstein summation over one or two inputs ("bij,bjk->bik"), lower-case letters only,
// explicit output ("->"), no ellipsis.
struct EinsumParams {
  std::string equation;
};
// The k largest (MAX) or smallest (MIN) elements along the one axis set in `axes`, sorted
// (largest or smallest first; equal values by ascending index; NaN counts as larger than every
// number). Outputs: 0 the values (the input's type), 1 their indices along the axis (int32).
// `output` is -1 in a network (both outputs); the builder runs one node per output it needs
// (0: values, 1: indices).
// The dims of input 0 as a 1-D int64 tensor (a shape tensor: computed on the host during shape
// inference too, so that a shuffle's reshape dims may come from it; see ShuffleLayer).
struct ShapeParams {};
struct TopKParams {
  TopKOperation op = TopKOperation::kMAX;
  std::int32_t k = 1;
  std::uint32_t axes = 0;
  std::int32_t output = -1;
};

// A plugin creator's field: `name`, its type, and its elements' bytes (little-endian; a string's
// UTF-8 bytes without a terminating NUL). Values as plugin.h's TENSORACLE_FIELD_* (stored in
// engines: append-only).
enum class PluginFieldType : std::int32_t { kINT32 = 0, kINT64 = 1, kFLOAT32 = 2, kFLOAT64 = 3, kSTRING = 4, kBYTES = 5 };
std::string_view plugin_field_type_name(PluginFieldType t) noexcept;  // "int32", ..., "string", "bytes"
std::size_t plugin_field_element_size(PluginFieldType t) noexcept;    // 4, 8, 4, 8, 1, 1; 0 if invalid

struct PluginField {
  std::string name;
  PluginFieldType type = PluginFieldType::kINT32;
  std::vector<std::byte> data;

  std::int64_t count() const noexcept;  // elements
  static PluginField int32(std::string name, const std::vector<std::int32_t>& values);
  static PluginField int64(std::string name, const std::vector<std::int64_t>& values);
  static PluginField float32(std::string name, const std::vector<float>& values);
  static PluginField float64(std::string name, const std::vector<double>& values);
  static PluginField string(std::string name, std::string_view text);
  static PluginField bytes(std::string name, std::span<const std::byte> data);
  bool operator==(const PluginField&) const = default;
};

// Internal: the plugin a creator made from a layer's fields (src/plugin/instance.h).
class PluginInstance;

// A plugin layer: creator (plugin_namespace, name, version) of a loaded plugin library (see
// plugin_library.h) and the fields it was created from, which the engine stores. `output` is
// -1 in a network (every output); the builder runs one node per output it needs, as for topk.
// `plugin` is the creator's plugin for these fields, made when the layer is added or the
// engine is opened; it answers shape inference and runs the layer.
struct PluginParams {
  std::string name;
  std::string version;
  std::string plugin_namespace;
  std::vector<PluginField> fields;
  std::int32_t output = -1;
  std::shared_ptr<const PluginInstance> plugin;
};

// Attention (TensorRT's IAttention): for each batch b and query head n,
//   out[b, n] = normalize(scale * Q[b, n] · K[b, g]ᵀ + mask) · V[b, g],   g = n / (Nq / Nkv)
// Inputs: 0 query [B, Nq, Sq, H], 1 key and 2 value [B, Nkv, Skv, H] (Nq a multiple of Nkv:
// grouped- and multi-query attention), 3 the optional mask (set_layer_input(layer, 3, mask)):
// bool (true: the key may be attended) or the query's type (added to the scores), of rank 4,
// each dimension 1 or [B, Nq, Sq, Skv]'s. `causal`: query i attends keys j <= i (the diagonal
// anchored top-left, TensorRT 10's); not together with a mask. normalization kSOFTMAX over
// the keys, or kNONE (the scores as they are; a masked-out score counts 0). A query whose every
// key is masked out gives zeros. `decomposable` is TensorRT's flag (every tensoracle kernel
// handles every shape, so it changes nothing). `scale` is tensoracle's: TensorRT has no factor
// (scale the query); the attention fusion pass folds the graph's own scaling into it.
//
// Sequence-major layout (tensoracle's; the attention fusion pass sets it, add_attention does
// not): with `heads` > 0, query, key and value are rows [B, S, width] — the layouts the
// projections' GEMMs write — and head n of the query is its columns q_offset + n·head_size
// .. + head_size (key head n of key and value likewise, from k_offset / v_offset, kv_heads of
// them); the output is [B, Sq, heads·head_size], what the output projection reads. No
// transposes run around the attention then, and one merged Q/K/V product can feed all three
// through the offsets. The mask keeps its [B, Nq, Sq, Skv] form; such a node may be causal and
// have a mask (a causal mask written as a constant, split from a padding mask).
struct AttentionParams {
  AttentionNormalizationOp normalization = AttentionNormalizationOp::kSOFTMAX;
  bool causal = false;
  bool decomposable = false;
  float scale = 1.f;
  std::int32_t heads = 0;  // 0: the [B, N, S, H] layout above
  std::int32_t kv_heads = 0;
  std::int32_t head_size = 0;
  std::int64_t q_offset = 0, k_offset = 0, v_offset = 0;
};

// y = (x · scale + shift)^power, element by element (TensorRT's IScaleLayer). Inputs 1, 2 and 3
// are float32 constants holding shift, scale and power: each has 1 coefficient (the whole
// tensor), or the mode's count (kCHANNEL: the size of dim channel_axis; kELEMENTWISE: the
// product of the dims from channel_axis on). Network::add_scale makes them from Weights (an
// empty one: 0, 1, 1). A power of 1 computes no power (negative bases stay exact).
struct ScaleParams {
  ScaleMode mode = ScaleMode::kUNIFORM;
  std::int32_t channel_axis = 1;
};
// y = x >= 0 ? x : slope · x; input 1 (slope, x's type) broadcasts to x (TensorRT's rule).
struct ParametricReluParams {};
// Local response normalization across channels (dim 1 of a tensor of rank >= 3):
//   y = x / (k + alpha / window · Σ x²)^beta, the sum over channels
//   c - (window - 1) / 2 .. c + window / 2 (ONNX's LRN and TensorRT's ILRNLayer).
struct LrnParams {
  std::int32_t window = 1;
  float alpha = 1e-4f, beta = 0.75f, k = 1.f;
};
// Running sum along `axis` (TensorRT's ICumulativeLayer: the axis is a constant 0-D tensor when
// the layer is added, kept here). exclusive: element i sums the elements before it; reverse:
// from the axis's end.
struct CumulativeParams {
  CumulativeOperation op = CumulativeOperation::kSUM;
  std::int32_t axis = 0;
  bool exclusive = false, reverse = false;
};
// A copy of data (input 0) with elements replaced by updates (input 2) at indices (input 1,
// int32 or int64, negative counting from the end; TensorRT's IScatterLayer):
//   kELEMENT: out[..., indices[i..], ...] (at `axis`) = updates[i..]; indices and updates have
//     data's rank and the same dims, each within data's except along the axis.
//   kND: indices [..., q]; out[indices[j][0..q)] = updates[j] (a slice of data's dims q..):
//     updates' dims are indices' leading dims then data's dims from q.
// An index outside its dim fails the run on the CPU and skips that element on CUDA. Where two
// indices name one element, which update wins is undefined (as in TensorRT and ONNX) with
// kNONE; the other reductions (tensoracle's; float and int32/int64 data) combine every update
// with the element, in the updates' order, on both backends alike.
struct ScatterParams {
  ScatterMode mode = ScatterMode::kELEMENT;
  std::int32_t axis = 0;
  ScatterReduction reduction = ScatterReduction::kNONE;
};
// One-hot encoding (TensorRT's IOneHotLayer): inputs 0 indices (int32/int64), 1 values [2]
// (off, on: the output's type). The output has indices' dims with `depth` inserted at `axis`
// (-1: last; counted on the output's rank): on where the index equals the position along it
// (a negative index counts from depth's end), off elsewhere; an index outside [-depth, depth)
// gives all off. depth is a constant 0-D tensor when the layer is added, kept here.
struct OneHotParams {
  std::int32_t axis = -1;
  std::int64_t depth = 1;
};

// Squeeze (TensorRT's ISqueezeLayer): removes the dims at `axes` (each of size 1; negative
// counts from the input's end); Unsqueeze (IUnsqueezeLayer): inserts dims of size 1 at `axes`
// (counted on the output's rank). The axes are a constant 1-D int32/int64 tensor when the layer
// is added, kept here. The data is not moved: a copy at most.
struct SqueezeParams {
  Dims axes;
};
struct UnsqueezeParams {
  Dims axes;
};
// Reverses the first sequence_lens[b] elements along `sequence_axis` of every batch entry b
// (along `batch_axis`); the rest are copied (TensorRT's IReverseSequenceLayer, ONNX's
// ReverseSequence). Inputs: 0 data (rank >= 2), 1 sequence_lens [batch] int32/int64. A length
// outside [0, sequence] fails the run on the CPU and is clamped into it on CUDA.
struct ReverseSequenceParams {
  std::int32_t batch_axis = 1, sequence_axis = 0;
};
// A tensor of `dims` and type `to` made from nothing but its parameters (TensorRT's IFillLayer).
// alpha and beta are the layer's own numbers (TensorRT's static parameters; linspace with them
// takes a rank-1 output) or, when the node has inputs, tensors: input 0 alpha (0-D), input 1
// beta ([rank] for linspace, 0-D for the random fills), both of the output's type. Linspace
// makes float32/float16/bfloat16/int32/int64 (integers computed in int64), the random fills
// float32/float16/bfloat16. Random values come from a counter-based generator keyed by the
// element's index: every run of an engine (and both backends' uniform draws) give the same
// values; TensorRT promises no sequence either.
// The loop boundary layers; `loop` is the loop's index in its network (Network::get_loop).
struct TripLimitParams {
  std::int32_t loop = -1;
  TripLimit kind = TripLimit::kCOUNT;
};
struct RecurrenceParams {
  std::int32_t loop = -1;
};
struct IteratorParams {
  std::int32_t loop = -1;
  std::int32_t axis = 0;
  bool reverse = false;
};
struct LoopOutputParams {
  std::int32_t loop = -1;
  LoopOutput kind = LoopOutput::kLAST_VALUE;
  std::int32_t axis = 0;
};

// The conditional boundary layers; `conditional` is its index in its network.
struct ConditionParams {
  std::int32_t conditional = -1;
};
struct ConditionalInputParams {
  std::int32_t conditional = -1;
};
struct ConditionalOutputParams {
  std::int32_t conditional = -1;
};

struct FillParams {
  FillOperation op = FillOperation::kLINSPACE;
  Dims dims;
  double alpha = 0, beta = 1;
  DataType to = DataType::kFLOAT;
};

using LayerParams =
    std::variant<InputParams, ConstantParams, MatrixMultiplyParams, ElementWiseParams,
                 ActivationParams, CastParams, QuantizeParams, DequantizeParams, ShuffleParams,
                 IdentityParams, UnaryParams, ReduceParams, SoftmaxParams, ConcatenationParams,
                 SliceParams, GatherParams, SelectParams, PaddingParams, ConvolutionParams,
                 DeconvolutionParams, PoolingParams, NormalizationParams, ResizeParams, EinsumParams,
                 TopKParams, ShapeParams, PluginParams, AttentionParams, ScaleParams,
                 ParametricReluParams, LrnParams, CumulativeParams, ScatterParams, OneHotParams,
                 SqueezeParams, UnsqueezeParams, ReverseSequenceParams, FillParams, TripLimitParams,
                 RecurrenceParams, IteratorParams, LoopOutputParams, ConditionParams, ConditionalInputParams,
                 ConditionalOutputParams>;

// ---- tensors and layers -----------------------------------------------------------------

class Network;
class Layer;

class Tensor {
 public:
  const std::string& name() const noexcept { return name_; }
  void set_name(std::string name);  // throws InvalidArgument for an empty name
  DataType type() const noexcept { return type_; }
  const Dims& dims() const noexcept { return dims_; }
  // Only network inputs may be reshaped (as TensorRT allows); throws InvalidArgument otherwise.
  void set_dims(const Dims& dims);
  bool is_network_input() const noexcept;
  bool is_network_output() const noexcept { return is_output_; }
  Layer* producer() const noexcept { return producer_; }
  Network& network() const noexcept { return *net_; }

 private:
  friend class Network;
  friend class Layer;
  Tensor(Network* net, Layer* producer, std::string name) : net_(net), producer_(producer), name_(std::move(name)) {}
  Network* net_;
  Layer* producer_;
  std::string name_;
  DataType type_ = DataType::kFLOAT;
  Dims dims_;
  bool is_output_ = false;
};

class Layer {
 public:
  virtual ~Layer() = default;
  LayerType type() const noexcept { return static_cast<LayerType>(params_.index()); }
  const std::string& name() const noexcept { return name_; }
  void set_name(std::string name);
  int num_inputs() const noexcept { return static_cast<int>(inputs_.size()); }
  int num_outputs() const noexcept { return static_cast<int>(outputs_.size()); }
  // TensorRT's numbering: a slice's get_input(1..4) is its start/size/stride/fill tensor or null.
  Tensor* get_input(int i) const;   // throws InvalidArgument when out of range
  const std::vector<Tensor*>& stored_inputs() const noexcept { return inputs_; }  // in storage order
  Tensor* get_output(int i) const;  // throws InvalidArgument when out of range
  const LayerParams& params() const noexcept { return params_; }

 protected:
  Layer() = default;
  // Re-validates with `p`; on success stores it and re-infers every later layer.
  void update(LayerParams p);

 private:
  friend class Network;
  friend class Loop;
  friend class IfConditional;
  Network* net_ = nullptr;
  std::string name_;
  LayerParams params_;
  std::vector<Tensor*> inputs_;
  std::vector<Tensor*> outputs_;
};

class ConstantLayer : public Layer {
 public:
  const Weights& weights() const { return std::get<ConstantParams>(params()).weights; }
  const Dims& shape() const { return std::get<ConstantParams>(params()).shape; }
};

class MatrixMultiplyLayer : public Layer {
 public:
  MatrixOperation get_operation(int index) const;
  void set_operation(int index, MatrixOperation op);
};

class ElementWiseLayer : public Layer {
 public:
  ElementWiseOperation operation() const { return std::get<ElementWiseParams>(params()).op; }
  void set_operation(ElementWiseOperation op);
};

class ActivationLayer : public Layer {
 public:
  ActivationType activation_type() const { return std::get<ActivationParams>(params()).type; }
  float alpha() const { return std::get<ActivationParams>(params()).alpha; }
  float beta() const { return std::get<ActivationParams>(params()).beta; }
  void set_activation_type(ActivationType t);
  void set_alpha(float a);
  void set_beta(float b);
};

class CastLayer : public Layer {
 public:
  DataType to_type() const { return std::get<CastParams>(params()).to; }
  void set_to_type(DataType t);
};

class QuantizeLayer : public Layer {
 public:
  DataType to_type() const { return std::get<QuantizeParams>(params()).to; }
  std::int32_t axis() const { return std::get<QuantizeParams>(params()).axis; }
  void set_to_type(DataType t);
  void set_axis(std::int32_t axis);
};

class DequantizeLayer : public Layer {
 public:
  DataType to_type() const { return std::get<DequantizeParams>(params()).to; }
  std::int32_t axis() const { return std::get<DequantizeParams>(params()).axis; }
  void set_to_type(DataType t);
  void set_axis(std::int32_t axis);
};

class ShuffleLayer : public Layer {
 public:
  const ShuffleParams& shuffle() const { return std::get<ShuffleParams>(params()); }
  void set_first_transpose(const Permutation& p);
  void set_reshape_dims(const Dims& d);
  void set_second_transpose(const Permutation& p);
  void set_zero_is_placeholder(bool z);
};

class IdentityLayer : public Layer {};

// Layers whose parameters are one struct get a typed getter and a re-validating setter.
template <typename P>
class ParamLayer : public Layer {
 public:
  const P& get() const { return std::get<P>(params()); }
  void set(const P& p) { update(p); }
};

class UnaryLayer : public ParamLayer<UnaryParams> {};
class ReduceLayer : public ParamLayer<ReduceParams> {};
class SoftMaxLayer : public ParamLayer<SoftmaxParams> {};
class ConcatenationLayer : public ParamLayer<ConcatenationParams> {};
class SliceLayer : public ParamLayer<SliceParams> {};
class GatherLayer : public ParamLayer<GatherParams> {};
class SelectLayer : public ParamLayer<SelectParams> {};
class TopKLayer : public ParamLayer<TopKParams> {};
class ShapeLayer : public ParamLayer<ShapeParams> {};
class PaddingLayer : public ParamLayer<PaddingParams> {};
class ConvolutionLayer : public ParamLayer<ConvolutionParams> {};
class DeconvolutionLayer : public ParamLayer<DeconvolutionParams> {};
class PoolingLayer : public ParamLayer<PoolingParams> {};
class NormalizationLayer : public ParamLayer<NormalizationParams> {};
class ResizeLayer : public ParamLayer<ResizeParams> {};
class EinsumLayer : public ParamLayer<EinsumParams> {};
class ScaleLayer : public ParamLayer<ScaleParams> {};
class ParametricReluLayer : public ParamLayer<ParametricReluParams> {};
class LrnLayer : public ParamLayer<LrnParams> {};
class CumulativeLayer : public ParamLayer<CumulativeParams> {};
class ScatterLayer : public ParamLayer<ScatterParams> {};
class OneHotLayer : public ParamLayer<OneHotParams> {};
class SqueezeLayer : public ParamLayer<SqueezeParams> {};
class UnsqueezeLayer : public ParamLayer<UnsqueezeParams> {};
class ReverseSequenceLayer : public ParamLayer<ReverseSequenceParams> {};
class FillLayer : public ParamLayer<FillParams> {};

class Loop;
// The boundary layers of a loop (TensorRT's ILoopBoundaryLayer and its kinds). A trip limit has
// no output; a recurrence's input 1 (the next iteration's value) is set with set_layer_input
// and may be computed from the recurrence's own output (the loop's back edge).
class LoopBoundaryLayer : public Layer {
 public:
  Loop* loop() const;
};
class TripLimitLayer : public LoopBoundaryLayer {
 public:
  TripLimit kind() const { return std::get<TripLimitParams>(params()).kind; }
};
class RecurrenceLayer : public LoopBoundaryLayer {};
class IteratorLayer : public LoopBoundaryLayer {
 public:
  const IteratorParams& get() const { return std::get<IteratorParams>(params()); }
  void set(const IteratorParams& p) { update(p); }
};
class LoopOutputLayer : public LoopBoundaryLayer {
 public:
  const LoopOutputParams& get() const { return std::get<LoopOutputParams>(params()); }
  void set(const LoopOutputParams& p) { update(p); }
};

// A loop (TensorRT's ILoop), made by Network::add_loop and owned by the network. Layers are in
// the loop's body when they read, directly or through other body layers, a recurrence or an
// iterator of it; everything they read from outside is loop-invariant. Values leave the loop
// only through its loop outputs. The builder unrolls a loop: its trip count must be a COUNT
// limit whose value the builder computes (a constant, or shapes fixed in the profile).
class IfConditional;
// The boundary layers of a conditional (TensorRT's IIfConditionalBoundaryLayer and its kinds):
// the condition (no output), an input (its output is the input's value inside the branches), an
// output (input 0 the true branch's value, input 1 the false branch's).
class IfConditionalBoundaryLayer : public Layer {
 public:
  IfConditional* conditional() const;
};
class ConditionLayer : public IfConditionalBoundaryLayer {};
class IfConditionalInputLayer : public IfConditionalBoundaryLayer {};
class IfConditionalOutputLayer : public IfConditionalBoundaryLayer {};

// A conditional (TensorRT's IIfConditional), made by Network::add_if_conditional and owned by
// the network: each output is its true value where the condition (a 0-D bool) holds, else its
// false value. The builder computes both branches and selects (a condition it can compute picks
// one branch); a branch must not fail where it is not taken.
class IfConditional {
 public:
  const std::string& name() const noexcept { return name_; }
  void set_name(std::string name);
  int index() const noexcept { return index_; }
  ConditionLayer* set_condition(Tensor* condition);
  IfConditionalInputLayer* add_input(Tensor* t);
  IfConditionalOutputLayer* add_output(Tensor* true_value, Tensor* false_value);

 private:
  friend class Network;
  IfConditional(Network* net, int index, std::string name) : net_(net), index_(index), name_(std::move(name)) {}
  Network* net_;
  int index_;
  std::string name_;
};

class Loop {
 public:
  const std::string& name() const noexcept { return name_; }
  void set_name(std::string name);
  int index() const noexcept { return index_; }
  // A recurrence starting from `initial`; its input 1 is the value of the next iteration.
  RecurrenceLayer* add_recurrence(Tensor* initial);
  // COUNT: a 0-D int32 tensor computed before the loop; WHILE: a 0-D bool tensor.
  TripLimitLayer* add_trip_limit(Tensor* limit, TripLimit kind);
  // Iteration i reads slice i of `t` along `axis` (from the end when `reverse`).
  IteratorLayer* add_iterator(Tensor* t, std::int32_t axis = 0, bool reverse = false);
  // kCONCATENATE and kREVERSE take their length (a 0-D int32 tensor) as input 1.
  LoopOutputLayer* add_loop_output(Tensor* t, LoopOutput kind, std::int32_t axis = 0);

 private:
  friend class Network;
  Loop(Network* net, int index, std::string name) : net_(net), index_(index), name_(std::move(name)) {}
  Network* net_;
  int index_;
  std::string name_;
};
class AttentionLayer : public ParamLayer<AttentionParams> {
 public:
  Tensor* mask() const { return num_inputs() > 3 ? get_input(3) : nullptr; }
};

// A plugin layer's creator and fields are fixed when it is added (no setters).
class PluginLayer : public Layer {
 public:
  const PluginParams& plugin() const { return std::get<PluginParams>(params()); }
  const std::string& creator_name() const { return plugin().name; }
  const std::string& creator_version() const { return plugin().version; }
  const std::string& plugin_namespace() const { return plugin().plugin_namespace; }
  const std::vector<PluginField>& fields() const { return plugin().fields; }
};

// ---- the network ------------------------------------------------------------------------

class Network : public std::enable_shared_from_this<Network> {
 public:
  Network();
  ~Network();
  Network(const Network&) = delete;
  Network& operator=(const Network&) = delete;

  // A network input of `type` and `dims` (-1: fixed at execution time within the profile).
  Tensor* add_input(std::string name, DataType type, const Dims& dims);
  // A constant; weights.count() must equal the volume of `shape`.
  ConstantLayer* add_constant(const Dims& shape, Weights weights);
  MatrixMultiplyLayer* add_matrix_multiply(Tensor* a, MatrixOperation op0, Tensor* b, MatrixOperation op1);
  ElementWiseLayer* add_elementwise(Tensor* a, Tensor* b, ElementWiseOperation op);
  ActivationLayer* add_activation(Tensor* x, ActivationType type);
  CastLayer* add_cast(Tensor* x, DataType to);
  // y = saturate(round_half_even(x / scale)) in `to` (kINT8 or kFP8); scale is a constant of
  // one element (per tensor) or of dims[axis] elements (per channel).
  QuantizeLayer* add_quantize(Tensor* x, Tensor* scale, DataType to);
  // y = x * scale in `to` (kFLOAT, kHALF, kBF16).
  DequantizeLayer* add_dequantize(Tensor* x, Tensor* scale, DataType to);
  ShuffleLayer* add_shuffle(Tensor* x);
  IdentityLayer* add_identity(Tensor* x);
  UnaryLayer* add_unary(Tensor* x, UnaryOperation op);
  ReduceLayer* add_reduce(Tensor* x, ReduceOperation op, std::uint32_t axes, bool keep_dims);
  SoftMaxLayer* add_softmax(Tensor* x);
  ConcatenationLayer* add_concatenation(const std::vector<Tensor*>& inputs);
  // Static start/size/stride (rank of x each).
  SliceLayer* add_slice(Tensor* x, const Dims& start, const Dims& size, const Dims& stride);
  GatherLayer* add_gather(Tensor* data, Tensor* indices, std::int32_t axis);
  GatherLayer* add_gather_v2(Tensor* data, Tensor* indices, GatherMode mode);
  SelectLayer* add_select(Tensor* condition, Tensor* then_input, Tensor* else_input);
  // Two outputs: get_output(0) the values, get_output(1) the indices (int32).
  TopKLayer* add_topk(Tensor* x, TopKOperation op, std::int32_t k, std::uint32_t axes);
  ShapeLayer* add_shape(Tensor* x);
  PaddingLayer* add_padding_nd(Tensor* x, const Dims& pre_padding, const Dims& post_padding);
  // Kernel and bias become constant inputs 1 and 2 (an empty bias: no input 2).
  ConvolutionLayer* add_convolution_nd(Tensor* x, std::int32_t num_output_maps, const Dims& kernel_size,
                                       Weights kernel, Weights bias);
  DeconvolutionLayer* add_deconvolution_nd(Tensor* x, std::int32_t num_output_maps, const Dims& kernel_size,
                                           Weights kernel, Weights bias);
  PoolingLayer* add_pooling_nd(Tensor* x, PoolingType type, const Dims& window);
  NormalizationLayer* add_normalization(Tensor* x, Tensor* scale, Tensor* bias, std::uint32_t axes);
  ResizeLayer* add_resize(Tensor* x);
  EinsumLayer* add_einsum(const std::vector<Tensor*>& inputs, std::string equation);
  // Attention over query [B, Nq, Sq, H], key and value [B, Nkv, Skv, H] (see AttentionParams);
  // the mask, when there is one, is set as input 3 with set_layer_input.
  AttentionLayer* add_attention(Tensor* query, Tensor* key, Tensor* value, AttentionNormalizationOp op, bool causal);
  // (x · scale + shift)^power (ScaleParams); empty Weights are the identity. The coefficients
  // are copied (float32, float16 or bfloat16 Weights, stored as float32) into constant inputs
  // 1..3. add_scale's channel axis is the third dim from the end (TensorRT's: C of [N,] C, H, W).
  ScaleLayer* add_scale(Tensor* x, ScaleMode mode, Weights shift, Weights scale, Weights power);
  ScaleLayer* add_scale_nd(Tensor* x, ScaleMode mode, Weights shift, Weights scale, Weights power,
                           std::int32_t channel_axis);
  // Replaces a scale's shift (which 0), scale (1) or power (2) coefficients (empty: identity).
  void set_scale_coefficients(ScaleLayer* layer, int which, Weights w);
  ParametricReluLayer* add_parametric_relu(Tensor* x, Tensor* slope);
  LrnLayer* add_lrn(Tensor* x, std::int32_t window, float alpha, float beta, float k);
  // `axis` must be a 0-D int32/int64 tensor a constant layer produces (as in TensorRT).
  CumulativeLayer* add_cumulative(Tensor* x, Tensor* axis, CumulativeOperation op, bool exclusive, bool reverse);
  ScatterLayer* add_scatter(Tensor* data, Tensor* indices, Tensor* updates, ScatterMode mode);
  // `depth` must be a 0-D int32/int64 tensor a constant layer produces (as in TensorRT).
  OneHotLayer* add_one_hot(Tensor* indices, Tensor* values, Tensor* depth, std::int32_t axis);
  // `axes` must be a 1-D int32/int64 tensor a constant layer produces (as in TensorRT).
  SqueezeLayer* add_squeeze(Tensor* x, Tensor* axes);
  UnsqueezeLayer* add_unsqueeze(Tensor* x, Tensor* axes);
  ReverseSequenceLayer* add_reverse_sequence(Tensor* x, Tensor* sequence_lens);
  // alpha 0 and beta 1 until set (FillParams); tensors for them are set as TensorRT's inputs
  // 1 (alpha) and 2 (beta) with set_layer_input, alpha first; its input 0 (the dims) must be a
  // 1-D int32/int64 constant, which sets `dims`.
  FillLayer* add_fill(const Dims& dims, FillOperation op, DataType to);
  // A new loop (see Loop), named "loop_<n>" until renamed.
  Loop* add_loop();
  int num_loops() const noexcept { return static_cast<int>(loops_.size()); }
  Loop* get_loop(int i) const;  // throws InvalidArgument when out of range
  // A new conditional (see IfConditional), named "conditional_<n>" until renamed.
  IfConditional* add_if_conditional();
  int num_conditionals() const noexcept { return static_cast<int>(conditionals_.size()); }
  IfConditional* get_conditional(int i) const;  // throws InvalidArgument when out of range
  // A plugin layer: creator `name` / `version` in `plugin_namespace` of a plugin library loaded
  // in this process (load_plugin_libraries, or `plugins` of build_serialized_engine and
  // open_engine: the builder loads them before calling the graph function), made from `fields`
  // (checked against the creator's schema). The layer has as many outputs as the plugin says;
  // their types and dims come from the plugin. Throws InvalidArgument naming the layer when the
  // creator is not registered, refuses the fields or the inputs, or reports invalid outputs.
  PluginLayer* add_plugin(const std::string& name, const std::string& version, const std::vector<Tensor*>& inputs,
                          const std::vector<PluginField>& fields, const std::string& plugin_namespace = "");
  // Sets a layer input (a slice's inputs 1..4, an attention's mask 3, or replaces one);
  // throws InvalidArgument. As in TensorRT the tensor may come from a layer added after this
  // one: the layer (and what depends on it) then moves after that producer in the layer order
  // (get_layer); a tensor computed from the layer's own output is refused (a cycle).
  void set_layer_input(Layer* layer, int index, Tensor* t);

  void mark_output(Tensor* t);
  void unmark_output(Tensor* t);

  int num_layers() const noexcept { return static_cast<int>(layers_.size()); }
  Layer* get_layer(int i) const;
  int num_inputs() const noexcept { return static_cast<int>(inputs_.size()); }
  Tensor* get_input(int i) const;
  int num_outputs() const noexcept { return static_cast<int>(outputs_.size()); }
  Tensor* get_output(int i) const;

  const std::string& name() const noexcept { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }

  // Re-runs validation of every layer (setters may invalidate later layers); throws
  // InvalidArgument naming the first invalid layer. The builder calls it first.
  void validate() const;

 private:
  friend class Layer;
  friend class Tensor;
  friend class Loop;
  friend class IfConditional;
  template <typename L>
  // defer_errors: a layer the parameters do not fit yet is added anyway, marked invalid (the
  // build reports it) until a setter or set_layer_input fixes it, as TensorRT's programs expect
  // of layers they configure after adding them; its output has input 0's type and dims (a
  // fill's own) meanwhile.
  L* add_layer(LayerType type, LayerParams params, std::vector<Tensor*> inputs, bool defer_errors = false);
  // Throws InvalidArgument naming the layer; `full` adds the checks deferred to build time.
  void infer(Layer& layer, const LayerParams& params, bool full = false) const;
  void move_after_producer(const Layer& layer, const Tensor& t);
  void reinfer_after(const Layer& layer);
  void check_tensor(const Tensor* t, const std::string& layer, int index) const;
  std::string unique_layer_name(LayerType type);
  Tensor* add_hidden_constant(const std::string& name, const Dims& shape, Weights w);
  int position(const Layer* l) const;

  std::string name_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<std::unique_ptr<Tensor>> tensors_;
  std::vector<Tensor*> inputs_;
  std::vector<Tensor*> outputs_;
  std::vector<std::string> invalid_;  // per layer: the error a later setter caused, or ""
  std::vector<std::unique_ptr<Loop>> loops_;
  std::vector<std::unique_ptr<IfConditional>> conditionals_;
};

std::string_view layer_type_name(LayerType t) noexcept;  // "matrix_multiply", ...

}  // namespace tensoracle
