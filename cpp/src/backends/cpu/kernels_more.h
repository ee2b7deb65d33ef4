// Internal: CPU kernels of the layers beyond the core set. Same conventions as kernels.h:
// fully known dims, float16/bfloat16 computed in float32 and rounded once when stored,
// reductions accumulated in double and rounded to the output type, OpenMP where it pays.
// Errors in the data (an out-of-range gather index) throw InvalidArgument naming the kernel
// and the offending value; kernels never read or write out of bounds.
#pragma once

#include <cstddef>
#include <span>

#include "backends/cpu/kernels.h"

namespace tensoracle::cpu {

// ---- kernels_reduce.cpp -----------------------------------------------------------------
// All 25 operations; ROUND rounds half to even; SIGN of 0 is 0; NOT on bool; ISINF/ISNAN give bool.
void unary(UnaryOperation op, const TensorRef& x, const TensorRef& out);
void reduce(const ReduceParams& p, const TensorRef& x, const TensorRef& out);
// Softmax along `axis` (already resolved, 0 <= axis < rank), max-subtracted.
void softmax(int axis, const TensorRef& x, const TensorRef& out);
// y = (x - mean) / sqrt(var + eps) * scale + bias; population variance over the axes in the
// mask (and over each group's channels when num_groups > 1); scale and bias broadcast into x.
void normalization(const NormalizationParams& p, const TensorRef& x, const TensorRef& scale, const TensorRef& bias,
                   const TensorRef& out);

// ---- kernels_conv.cpp -------------------------------------------------------------------
// Padding: graph::effective_pre_padding gives the pre padding for every PaddingMode.
std::size_t convolution_workspace_bytes(const ConvolutionParams& p, const TensorRef& x, const TensorRef& out);
void convolution(const ConvolutionParams& p, const TensorRef& x, const TensorRef& kernel, const TensorRef* bias,
                 const TensorRef& out, void* workspace);
std::size_t deconvolution_workspace_bytes(const DeconvolutionParams& p, const TensorRef& x, const TensorRef& out);
void deconvolution(const DeconvolutionParams& p, const TensorRef& x, const TensorRef& kernel, const TensorRef* bias,
                   const TensorRef& out, void* workspace);
void pooling(const PoolingParams& p, const TensorRef& x, const TensorRef& out);
// The same over channels-last data: x.data and out.data hold [N, spatial..., C] while their dims
// are the logical [N, C, spatial...]; every element equals pooling()'s on the packed data.
void pooling_channels_last(const PoolingParams& p, const TensorRef& x, const TensorRef& out);

// ---- kernels_index.cpp ------------------------------------------------------------------
void concatenation(int axis, std::span<const TensorRef> inputs, const TensorRef& out);
// `fill` is the FILL mode's value (null: zero).
void slice(const SliceParams& p, const TensorRef& x, const TensorRef* fill, const TensorRef& out);
// Negative indices count from the end; any index outside [-dim, dim) throws InvalidArgument.
void gather(const GatherParams& p, const TensorRef& data, const TensorRef& indices, const TensorRef& out);
// One output of topk (p.output 0: values, 1: int32 indices); see TopKParams.
void topk(const TopKParams& p, const TensorRef& x, const TensorRef& out);
void select(const TensorRef& condition, const TensorRef& then_input, const TensorRef& else_input, const TensorRef& out);
void padding(const PaddingParams& p, const TensorRef& x, const TensorRef& out);
void resize(const ResizeParams& p, const TensorRef& x, const TensorRef& out);
std::size_t einsum_workspace_bytes(const EinsumParams& p, std::span<const TensorRef> inputs, const TensorRef& out);
void einsum(const EinsumParams& p, std::span<const TensorRef> inputs, const TensorRef& out, void* workspace);

}  // namespace tensoracle::cpu
