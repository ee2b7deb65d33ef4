// Internal to the CUDA backend: the builder's choice of a matrix multiply's and a convolution's
// tactic (CudaBackend::choose_tactic routes them here). From level 2 it times candidates on
// scratch buffers of the device, each within the scratch a workspace limit leaves the node, in
// interleaved rounds (tuning.h says which one wins); below that it takes the libraries' first
// choice.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "backends/backend.h"
#include "backends/cuda/device.h"
#include "graph/graph.h"

namespace tensoracle::cuda {

class Tuner {
 public:
  // The scratch node `n` would reserve with `tactic` at the query's max shapes (the backend
  // instantiates the node with it).
  using NodeScratch = std::function<std::size_t(const graph::Graph& g, const graph::Node& n, const graph::Tactic& tactic,
                                                const backends::TacticQuery& q)>;

  Tuner(const Device& device, NodeScratch node_scratch) : device_(device), node_scratch_(std::move(node_scratch)) {}

  // Matrix multiplies (`base`: the node's one cuBLASLt tactic, graph::CublasLtConfig): cuBLASLt
  // may use kGemmWorkspaceBytes of scratch, or what a workspace limit leaves beside the node's
  // other scratch (its workspace field). From level 2 cuBLASLt's top candidates (within that
  // scratch) are timed at the profile's opt shapes (on scratch buffers of this device, in
  // interleaved rounds; tuning.h says which one wins) and the chosen algorithm is stored (its
  // algo field); the fused fp8 GEMM (graph::FusedFp8GemmConfig) is timed against it where it runs.
  graph::Tactic choose_gemm(const graph::Graph& g, const graph::Node& n, const MatrixMultiplyParams& mm,
                            const graph::Tactic& base, const backends::TacticQuery& q) const;

  // Convolutions at fixed shapes where cuDNN is available: level 0 and 1 take cuDNN's first
  // usable configuration (cudnn_conv.h says which are usable), except for depthwise convolutions,
  // which keep the backend's direct kernel; from level 2 the backend's own path and the first 8
  // usable configurations of cuDNN's heuristics and of its fallback list are timed as GEMMs
  // are (cuDNN's first kept unless beaten by more than kTunedMargin; the direct kernel first
  // for depthwise), with channels-last configurations for float16/bfloat16 (tuner.cpp).
  // The tactic stores the problem and the configuration (graph::CudnnConvConfig, cudnn_tactic.h);
  // the choice's layout says whether the node stores its output channels-last for the
  // convolutions that read it (layouts.h's chain_output, from level 2 where a channels-last
  // configuration exists).
  backends::Backend::Choice choose_convolution(const graph::Graph& g, const graph::Node& n, const ConvolutionParams& p,
                                               const graph::Tactic& base, const backends::TacticQuery& q) const;

 private:
  const Device& device_;
  NodeScratch node_scratch_;
};

}  // namespace tensoracle::cuda
