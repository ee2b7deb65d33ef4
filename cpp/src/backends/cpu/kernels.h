// Internal: the CPU backend's kernels — one function per layer kind, on typed buffers. This
// header is their index: one group per file of ops/ (one file per layer, the same stem as the
// CUDA backend's ops/*.cu), in alphabetical order; the threads at the end (kernels.cpp).
//
// Semantics (shared with the CUDA backend, checked by the conformance suite):
// - Values are computed in float32 for float16/bfloat16/fp8 inputs and rounded to the output
//   type once, when stored (round to nearest even; fp16/bf16 overflow to infinity).
// - int32/int64 arithmetic wraps around (two's complement); integer DIV truncates toward zero,
//   FLOOR_DIV rounds toward negative infinity; integer division by zero gives 0 (documented;
//   GPUs do not trap either).
// - Casts: float to integer truncates toward zero and saturates to the integer's range
//   (NaN gives 0); to bool: value != 0; from bool: 0 or 1.
// - Quantize: q = saturate(round_half_even(x / scale)) (int8: [-128, 127], NaN gives 0; fp8
//   e4m3: ±448, NaN stays NaN); dequantize: x = q * scale, rounded to the output type.
// - Matrix multiply: float32 accumulation for every float type (never TF32).
// - Reductions (reduce, softmax, normalization statistics) accumulate in double and round to
//   the output type once.
//
// Every function takes dims that are fully known and buffers that do not overlap, except
// where noted ("may alias"). Multi-threaded with OpenMP where it pays. Errors in the data (an
// out-of-range gather index) throw InvalidArgument naming the kernel and the offending value;
// kernels never read or write out of bounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "backends/common/checks.h"
#include "tensoracle/network.h"
#include "tensoracle/types.h"

namespace tensoracle::cpu {

// A buffer with its type and dims (backends/common/checks.h).
using TensorRef = backends::common::TensorRef;

// ops/activation.cpp
// out may alias x.
void activation(const ActivationParams& p, const TensorRef& x, const TensorRef& out);

// ops/attention.cpp
// See AttentionParams. mask: null for none. Scores, the softmax and the products in float32
// (online softmax over tiles of keys: no [queries, keys] buffer beyond a tile).
void attention(const AttentionParams& p, const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef* mask,
               const TensorRef& out);
// Whether attention over heads of `head_size` runs the register-blocked AVX-512 products on this
// machine (head sizes of 16·k on CPUs with AVX-512), where the fused node beats the layers it
// replaces; the builder fuses attention for the CPU only there.
bool attention_runs_wide(std::int64_t head_size);

// ops/cast.cpp
// Any supported type to any; out may alias x when both types have the same size.
void cast(const TensorRef& x, const TensorRef& out);

// ops/concatenation.cpp
void concatenation(int axis, std::span<const TensorRef> inputs, const TensorRef& out);

// ops/convolution.cpp
// Padding: graph::effective_pre_padding gives the pre padding for every PaddingMode.
std::size_t convolution_workspace_bytes(const ConvolutionParams& p, const TensorRef& x, const TensorRef& out);
void convolution(const ConvolutionParams& p, const TensorRef& x, const TensorRef& kernel, const TensorRef* bias,
                 const TensorRef& out, void* workspace);

// ops/cumulative.cpp
// Running sum along p.axis (CumulativeParams); out may alias x.
void cumulative(const CumulativeParams& p, const TensorRef& x, const TensorRef& out);

// ops/deconvolution.cpp
std::size_t deconvolution_workspace_bytes(const DeconvolutionParams& p, const TensorRef& x, const TensorRef& out);
void deconvolution(const DeconvolutionParams& p, const TensorRef& x, const TensorRef& kernel, const TensorRef* bias,
                   const TensorRef& out, void* workspace);

// ops/einsum.cpp
std::size_t einsum_workspace_bytes(const EinsumParams& p, std::span<const TensorRef> inputs, const TensorRef& out);
void einsum(const EinsumParams& p, std::span<const TensorRef> inputs, const TensorRef& out, void* workspace);

// ops/elementwise.cpp
// out = a OP b with TensorRT broadcasting (equal ranks; each dim equal or 1). out may alias a
// or b when it has the same dims and type.
void elementwise(ElementWiseOperation op, const TensorRef& a, const TensorRef& b, const TensorRef& out);

// ops/gather.cpp
// Negative indices count from the end; any index outside [-dim, dim) throws InvalidArgument.
void gather(const GatherParams& p, const TensorRef& data, const TensorRef& indices, const TensorRef& out);

// ops/identity.cpp
// Copies x to out (same type and volume).
void copy(const TensorRef& x, const TensorRef& out);

// ops/lrn.cpp
// Local response normalization across dim 1 (LrnParams).
void lrn(const LrnParams& p, const TensorRef& x, const TensorRef& out);

// ops/matrix_multiply.cpp
// C = op0(A) x op1(B) with batch broadcasting (see graph/ops/matrix_multiply.cpp for the shape rules).
// `workspace` must hold matmul_workspace_bytes(...) bytes.
std::size_t matmul_workspace_bytes(const MatrixMultiplyParams& p, const TensorRef& a, const TensorRef& b);
void matmul(const MatrixMultiplyParams& p, const TensorRef& a, const TensorRef& b, const TensorRef& out,
            void* workspace);

// ops/normalization.cpp
// y = (x - mean) / sqrt(var + eps) * scale + bias; population variance over the axes in the
// mask (and over each group's channels when num_groups > 1); scale and bias broadcast into x.
void normalization(const NormalizationParams& p, const TensorRef& x, const TensorRef& scale, const TensorRef& bias,
                   const TensorRef& out);

// ops/one_hot.cpp
// OneHotParams; values: [off, on] of the output's type.
void one_hot(const OneHotParams& p, const TensorRef& indices, const TensorRef& values, const TensorRef& out);

// ops/reverse_sequence.cpp
// ReverseSequenceParams; lens: [batch] int32/int64, each in [0, sequence].
void reverse_sequence(const ReverseSequenceParams& p, const TensorRef& x, const TensorRef& lens, const TensorRef& out);

// ops/fill.cpp
// FillParams; alpha and beta: the tensors (TensorRT's inputs 1 and 2), or both null.
void fill_tensor(const FillParams& p, const TensorRef* alpha, const TensorRef* beta, const TensorRef& out);

// ops/parametric_relu.cpp
// y = x >= 0 ? x : slope · x, the slope broadcasting to x.
void parametric_relu(const TensorRef& x, const TensorRef& slope, const TensorRef& out);

// ops/padding.cpp
void padding(const PaddingParams& p, const TensorRef& x, const TensorRef& out);

// ops/pooling.cpp
void pooling(const PoolingParams& p, const TensorRef& x, const TensorRef& out);
// The same over channels-last data: x.data and out.data hold [N, spatial..., C] while their dims
// are the logical [N, C, spatial...]; every element equals pooling()'s on the packed data.
void pooling_channels_last(const PoolingParams& p, const TensorRef& x, const TensorRef& out);

// ops/quantize.cpp
// Per-tensor (scale has one element) or per-channel along `axis` (already normalized >= 0).
void quantize(const TensorRef& x, const TensorRef& scale, int axis, const TensorRef& out);
void dequantize(const TensorRef& x, const TensorRef& scale, int axis, const TensorRef& out);

// ops/reduce.cpp
void reduce(const ReduceParams& p, const TensorRef& x, const TensorRef& out);

// ops/resize.cpp
void resize(const ResizeParams& p, const TensorRef& x, const TensorRef& out);

// ops/scale.cpp
// (x · scale + shift)^power (ScaleParams; shift, scale and power float32 of 1 or the mode's count).
void scale(const ScaleParams& p, const TensorRef& x, const TensorRef& shift, const TensorRef& scale, const TensorRef& power,
           const TensorRef& out);

// ops/scatter.cpp
// The data with the updates written at the indices (ScatterParams); out may alias data.
void scatter(const ScatterParams& p, const TensorRef& data, const TensorRef& indices, const TensorRef& updates,
             const TensorRef& out);

// ops/select.cpp
void select(const TensorRef& condition, const TensorRef& then_input, const TensorRef& else_input, const TensorRef& out);

// ops/shuffle.cpp
// out = second_transpose(reshape(first_transpose(x))); out.dims are the result's dims.
void shuffle(const ShuffleParams& p, const TensorRef& x, const TensorRef& out);

// ops/slice.cpp
// `fill` is the FILL mode's value (null: zero).
void slice(const SliceParams& p, const TensorRef& x, const TensorRef* fill, const TensorRef& out);

// ops/softmax.cpp
// Softmax along `axis` (already resolved, 0 <= axis < rank), max-subtracted.
void softmax(int axis, const TensorRef& x, const TensorRef& out);

// ops/topk.cpp
// topk's values and/or int32 indices (null: not written; one at least), in one pass; see TopKParams.
void topk(const TopKParams& p, const TensorRef& x, const TensorRef* values, const TensorRef* indices);

// ops/unary.cpp
// All 25 operations; ROUND rounds half to even; SIGN of 0 is 0; NOT on bool; ISINF/ISNAN give bool.
void unary(UnaryOperation op, const TensorRef& x, const TensorRef& out);

// kernels.cpp: threads
// Number of threads kernels use (default: the machine's cores); set_num_threads(0) restores it.
int num_threads();
void set_num_threads(int n);

// For the scope of one node's run: the calling thread's OpenMP thread count (an ICV of each
// thread) is num_threads(). OpenBLAS's OpenMP build sizes every GEMM by the calling thread's
// count and resets its process-wide count to match, so executions on threads with other counts
// gave other bits and raced on that global; oneDNN sizes its regions the same way.
class ThreadScope {
 public:
  ThreadScope();
  ~ThreadScope();
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace tensoracle::cpu
