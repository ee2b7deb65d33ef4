// Internal to the CUDA backend: a node's kernel (backends::NodeKernel) from its tactic, and what
// the tactics and the tuner share with it: which of a node's epilogue ops its main op applies.
// The kernel runs the node's own op through its kind's entry (op_kernel.h: cuBLASLt for matrix
// multiplies, gemm.h; the convolution kernels of conv.h; a plugin's enqueue; every other layer
// through kernels.h), then the rest of its epilogue as in-order pointwise passes over scratch
// buffers (node_kernel.cpp).
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <utility>

#include "backends/backend.h"
#include "backends/cuda/device.h"
#include "backends/cuda/fp8_gemm.h"
#include "backends/cuda/gemm.h"
#include "graph/graph.h"

namespace tensoracle::cuda {

// A reduce whose few outputs each cover many elements, split over blocks (kernels.h, reduce);
// "cuda.reduce" (and engines from before it) reduce each output with one team.
inline constexpr const char* kReduceSplitTactic = "cuda.reduce.split";

// The ops of a matrix multiply's epilogue cuBLASLt applies itself: a SUM with a constant bias
// row ([1, ..., 1, N] in the output's type), optionally followed by RELU or GELU_TANH. Returns
// how many of the node's epilogue ops that covers (0, 1 or 2) and the GEMM epilogue.
// An int8 product applies none (its sums are scaled by a kernel of ours); an fp8 product only
// into a float16 or bfloat16 result (cuBLASLt's bias types for fp8).
std::pair<std::size_t, cuda::GemmEpilogue> lt_epilogue(const graph::Graph& g, const graph::Node& n);

// The epilogue the fused fp8 GEMM (fp8_gemm.h) can apply to node `n`: a folded fp8 product into
// float16 whose first operand is used as is and second is a [N, K] matrix used transposed (a
// linear layer's weight), with the epilogue a constant bias row, GELU (erf) and, optionally,
// the next layer's per-tensor fp8 quantize by a constant scale (the lookup table bakes it in);
// nothing after them.
std::optional<cuda::Fp8Epilogue> fused_fp8_epilogue(const graph::Graph& g, const graph::Node& n);

// Node `n`'s kernel on `device`, as its tactic says (CorruptEngineError for a tactic that does
// not fit the node).
std::unique_ptr<backends::NodeKernel> make_node_kernel(const Device& device, const graph::Graph& g,
                                                       const graph::Node& n);

}  // namespace tensoracle::cuda
