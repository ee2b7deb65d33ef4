// Internal: the CUDA backend's kernels — one host function per layer kind, on device buffers,
// launched asynchronously on `stream`. This header is their index: one group per file of ops/
// (one file per layer, the same stem as the CPU backend's ops/*.cpp), in alphabetical order;
// convolution, deconvolution and einsum are objects declared in conv.h, and the channels-last
// copies (channels_last.cu) come last. Semantics are exactly those of backends/cpu/kernels.h
// (its ops/*.cpp; the conformance suite compares the two backends): values of the narrow
// float types are computed in float32 and rounded once when stored (round to nearest even;
// fp16/bf16 overflow to infinity; fp8 e4m3 stores saturate to ±448, NaN stays NaN), int32/int64
// arithmetic wraps, reductions accumulate in float32 or wider as the CPU kernels do (results
// may differ from the CPU by the float32 rounding of a different summation order).
//
// Differences from the CPU kernels, by necessity (a kernel cannot throw): a gather index
// outside [-dim, dim) yields zeros instead of an InvalidArgument.
//
// Host-side validation (unsupported type or parameter) throws UnsupportedError /
// InvalidArgument naming the kernel before anything is launched; a failed launch throws
// tensoracle::Error with CUDA's message. Nothing here synchronizes the stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "backends/common/checks.h"
#include "tensoracle/network.h"
#include "tensoracle/types.h"

namespace tensoracle::cuda {

// A buffer with its type and dims (backends/common/checks.h).
using TensorRef = backends::common::TensorRef;

// ops/activation.cu
void activation(const ActivationParams& p, const TensorRef& x, const TensorRef& out, cudaStream_t stream);  // out may alias x
// In place over y [N, C, rest...] (a float type): y = activation(y + bias[c]) per channel c, the
// sum rounded to y's type before the activation (as an elementwise layer then an activation
// layer give); `bias` (C elements of y's type) or `act` may be null. One pass: a convolution's
// epilogue after cuDNN.
void bias_activation(const TensorRef& y, const void* bias, const ActivationParams* act, cudaStream_t stream);
// The same over a channels-last y: y.dims are the logical [N, C, rest...], y.data holds
// [N, rest..., C] (channel c of position s of image n at (n * S + s) * C + c).
void bias_activation_channels_last(const TensorRef& y, const void* bias, const ActivationParams* act,
                                   cudaStream_t stream);

// ops/attention.cu
// See AttentionParams. mask: null for none. Fused (online softmax in float32); head size <= 256.
void attention(const AttentionParams& p, const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef* mask,
               const TensorRef& out, cudaStream_t stream);
// Whether float16 / bfloat16 attention of this head size runs on tensor cores on the current
// device (sm80+, head size 32, 64 or 128; not with TENSORACLE_ATTENTION_KERNEL=rows).
bool attention_tensor_cores(std::int64_t head_size);

// ops/cast.cu
void cast(const TensorRef& x, const TensorRef& out, cudaStream_t stream);

// ops/concatenation.cu
// `axis` already resolved (0 <= axis < rank).
void concatenation(int axis, std::span<const TensorRef> inputs, const TensorRef& out, cudaStream_t stream);

// ops/convolution.cu: ConvolutionKernel (conv.h).

// ops/cumulative.cu
// Running sum along p.axis (CumulativeParams); out may alias x.
void cumulative(const CumulativeParams& p, const TensorRef& x, const TensorRef& out, cudaStream_t stream);

// ops/deconvolution.cu: DeconvolutionKernel (conv.h).

// ops/einsum.cu: EinsumKernel (conv.h).

// ops/elementwise.cu
// out = a OP b with TensorRT broadcasting (equal ranks; each dim equal or 1). out may alias a
// or b when it has the same dims and type.
void elementwise(ElementWiseOperation op, const TensorRef& a, const TensorRef& b, const TensorRef& out,
                 cudaStream_t stream);
// elementwise(kSUM, ...) then ReLU in one pass (a float type), the sum rounded to the type
// first: the two layers' values. A residual block's add and activation.
void sum_relu(const TensorRef& a, const TensorRef& b, const TensorRef& out, cudaStream_t stream);

// ops/gather.cu
void gather(const GatherParams& p, const TensorRef& data, const TensorRef& indices, const TensorRef& out,
            cudaStream_t stream);

// ops/identity.cu
// Same type and volume; a device-to-device copy.
void copy(const TensorRef& x, const TensorRef& out, cudaStream_t stream);

// ops/lrn.cu
// Local response normalization across dim 1 (LrnParams).
void lrn(const LrnParams& p, const TensorRef& x, const TensorRef& out, cudaStream_t stream);

// ops/matrix_multiply.cu
// out = float(acc) * (*scale_a * *scale_b), rounded once to out's float type: an int8 GEMM's
// int32 sums (acc) scaled by its operands' per-tensor float32 scales (device pointers). With a
// `bias` (out's type, one value per column of out's last dim), that row is then added and the
// sum rounded again: the two passes' arithmetic, in one.
void scale_accumulator(const TensorRef& acc, const void* scale_a, const void* scale_b, const void* bias,
                       const TensorRef& out, cudaStream_t stream);

// ops/normalization.cu
void normalization(const NormalizationParams& p, const TensorRef& x, const TensorRef& scale, const TensorRef& bias,
                   const TensorRef& out, cudaStream_t stream);

// ops/one_hot.cu
// OneHotParams; values: [off, on] of the output's type.
void one_hot(const OneHotParams& p, const TensorRef& indices, const TensorRef& values, const TensorRef& out, cudaStream_t stream);

// ops/reverse_sequence.cu
// ReverseSequenceParams; lens: [batch] int32/int64 (clamped into [0, sequence]).
void reverse_sequence(const ReverseSequenceParams& p, const TensorRef& x, const TensorRef& lens, const TensorRef& out,
                      cudaStream_t stream);

// ops/fill.cu
// FillParams; alpha and beta: the tensors (TensorRT's inputs 1 and 2, in device memory), or both null.
void fill_tensor(const FillParams& p, const TensorRef* alpha, const TensorRef* beta, const TensorRef& out, cudaStream_t stream);

// ops/parametric_relu.cu
// y = x >= 0 ? x : slope · x, the slope broadcasting to x.
void parametric_relu(const TensorRef& x, const TensorRef& slope, const TensorRef& out, cudaStream_t stream);

// ops/padding.cu
void padding(const PaddingParams& p, const TensorRef& x, const TensorRef& out, cudaStream_t stream);

// ops/pooling.cu
// x and out have their logical dims [N, C, spatial...]; either may be stored channels-last
// ([N, spatial..., C], layouts.h): same taps, order and arithmetic, so the same values.
void pooling(const PoolingParams& p, const TensorRef& x, const TensorRef& out, cudaStream_t stream,
             bool x_channels_last = false, bool out_channels_last = false);

// ops/quantize.cu
// Per-tensor (scale has one element) or per-channel along `axis` (already normalized >= 0).
void quantize(const TensorRef& x, const TensorRef& scale, int axis, const TensorRef& out, cudaStream_t stream);
void dequantize(const TensorRef& x, const TensorRef& scale, int axis, const TensorRef& out, cudaStream_t stream);
// quantize(activation(x), scale) in one pass, the activation's result rounded to x's type as if
// stored; a per-tensor scale (one element).
void activation_quantize(const ActivationParams& p, const TensorRef& x, const TensorRef& scale, const TensorRef& out,
                         cudaStream_t stream);

// ops/reduce.cu
// `workspace`: nullptr, or reduce_split_workspace_bytes() of scratch (256-byte aligned); with
// it, few outputs over many elements (reduce_splits) are reduced by many blocks in two passes
// (a full reduction: one block otherwise).
void reduce(const ReduceParams& p, const TensorRef& x, const TensorRef& out, cudaStream_t stream,
            void* workspace = nullptr);
std::size_t reduce_split_workspace_bytes();
// Whether reduce() splits reducing an input of these dims (given the workspace).
bool reduce_splits(const ReduceParams& p, const Dims& x);

// ops/resize.cu
void resize(const ResizeParams& p, const TensorRef& x, const TensorRef& out, cudaStream_t stream);

// ops/scale.cu
// (x · scale + shift)^power (ScaleParams; shift, scale and power float32 of 1 or the mode's count).
void scale(const ScaleParams& p, const TensorRef& x, const TensorRef& shift, const TensorRef& scale, const TensorRef& power,
           const TensorRef& out, cudaStream_t stream);

// ops/scatter.cu
// The data with the updates written at the indices (ScatterParams); out may alias data.
void scatter(const ScatterParams& p, const TensorRef& data, const TensorRef& indices, const TensorRef& updates,
             const TensorRef& out, cudaStream_t stream);

// ops/select.cu
void select(const TensorRef& condition, const TensorRef& then_input, const TensorRef& else_input, const TensorRef& out,
            cudaStream_t stream);

// ops/shuffle.cu
// out = second_transpose(reshape(first_transpose(x))); out.dims are the result's dims.
void shuffle(const ShuffleParams& p, const TensorRef& x, const TensorRef& out, cudaStream_t stream);

// ops/slice.cu
// p.start/size/stride are the resolved values; `fill` (device, one element) is the FILL
// mode's value (null: zero).
void slice(const SliceParams& p, const TensorRef& x, const TensorRef* fill, const TensorRef& out, cudaStream_t stream);

// ops/softmax.cu
// Softmax along `axis` (0 <= axis < rank), max-subtracted.
void softmax(int axis, const TensorRef& x, const TensorRef& out, cudaStream_t stream);

// ops/topk.cu
// topk's values and/or int32 indices (null: not written; one at least), in one kernel.
void topk(const TopKParams& p, const TensorRef& x, const TensorRef* values, const TensorRef* indices, cudaStream_t stream);

// ops/unary.cu
void unary(UnaryOperation op, const TensorRef& x, const TensorRef& out, cudaStream_t stream);

// channels_last.cu (not a layer: the copies around cuDNN convolutions, and the backend's
// layout conversions)
// x [N, C, rest...] (a float type) into `out` channels-last with `channels` (>= C) channels: the
// value of channel c at position s of image n goes to out[(n * S + s) * channels + c] (S: the
// volume of rest), zeros where c >= C. A cuDNN convolution's input (and kernel) copy.
void to_channels_last(const TensorRef& x, std::int64_t channels, void* out, cudaStream_t stream);
// y [N, K, rest...] = activation(v + bias[k]) with v the channels-last value at `in` (N x S x K
// of y's type): bias_activation's arithmetic, from a channels-last convolution result; `bias`
// and `act` may be null (then a plain copy).
void from_channels_last(const void* in, const TensorRef& y, const void* bias, const ActivationParams* act,
                        cudaStream_t stream);

}  // namespace tensoracle::cuda
