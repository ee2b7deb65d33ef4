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
  using NodeScratch = std::function<std::size_t(const graph::Graph& g, const graph::Node& n, const std::string& tactic,
                                                const backends::TacticQuery& q)>;

  Tuner(const Device& device, NodeScratch node_scratch) : device_(device), node_scratch_(std::move(node_scratch)) {}

  // Matrix multiplies (`base`: the node's one tactic): cuBLASLt may use kGemmWorkspaceBytes of
  // scratch, or what a workspace limit leaves beside the node's other scratch ("/ws:<bytes>").
  // From level 2 cuBLASLt's top candidates (within that scratch) are timed at the profile's opt
  // shapes (on scratch buffers of this device, in interleaved rounds; tuning.h says which one
  // wins) and the chosen algorithm is stored ("/algo:<hex>"); gemm_tactic.h has the format.
  std::string choose_gemm(const graph::Graph& g, const graph::Node& n, const MatrixMultiplyParams& mm,
                          const std::string& base, const backends::TacticQuery& q) const;

  // Convolutions at fixed shapes where cuDNN is available: level 0 and 1 take cuDNN's first
  // usable configuration (cudnn_conv.h says which are usable), except for depthwise convolutions,
  // which keep the backend's direct kernel; from level 2 the backend's own path and the first 8
  // usable configurations of cuDNN's heuristics and of its fallback list are timed as GEMMs
  // are (cuDNN's first kept unless beaten by more than kTunedMargin; the direct kernel first
  // for depthwise), with channels-last configurations for float16/bfloat16 (tuner.cpp).
  // The tactic stores the problem and the configuration:
  // "cuda.convolution.cudnn/<shape>/cfg:<configuration>" (cudnn_tactic.h).
  std::string choose_convolution(const graph::Graph& g, const graph::Node& n, const ConvolutionParams& p,
                                 const std::string& base, const backends::TacticQuery& q) const;

 private:
  const Device& device_;
  NodeScratch node_scratch_;
};

}  // namespace tensoracle::cuda
