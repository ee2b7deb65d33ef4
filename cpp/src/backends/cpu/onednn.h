// Internal: the CPU backend's oneDNN tactics. A float32 matrix multiply or convolution runs
// as one oneDNN primitive (brgemm/JIT kernels for the machine's ISA) with a prefix of the
// node's epilogue as post-ops, constant weights reordered once into oneDNN's blocked layout.
//
// Semantics are the generic kernels' (float32 accumulation, never TF32); results differ from
// them only by summation order and by oneDNN's activation approximations (a few ulp).
// Shapes oneDNN cannot run as planned (an operand broadcast it lacks, say) fall back to the
// generic kernels for that shape: the node stays correct, only slower.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "graph/graph.h"
#include "backends/backend.h"

namespace tensoracle::cpu::onednn {

class Accelerated {
 public:
  virtual ~Accelerated() = default;
  // How many epilogue ops run as post-ops (a prefix of node.epilogue).
  virtual std::size_t fused() const = 0;
  // Workspace the run at these input shapes needs; nullopt-like false when oneDNN does not run
  // them (the caller then uses the generic kernels). `main_out` is the main op's result dims.
  virtual bool fits(std::span<const backends::Buffer> in, const Dims& main_out, std::size_t& workspace) const = 0;
  // Runs the main op and the fused prefix; `out` has the type and dims of the value the
  // prefix's last op produces. Only after fits(...) returned true for these shapes.
  virtual void run(std::span<const backends::Buffer> in, const Dims& main_out, const backends::Buffer& out,
                   void* workspace) const = 0;
};

// The kernels' names, and whether a node can use one.
inline constexpr const char* kMatmulTactic = "cpu.gemm.onednn";
inline constexpr const char* kConvTactic = "cpu.conv.onednn";
bool applicable(const graph::Graph& g, const graph::Node& n);
// Whether oneDNN convolution n stores its output channels-last (NHWC / NDHWC, the same bytes as
// the plain layout, permuted; Value::layout): where every reader of that output is a oneDNN
// convolution (as its data input or as its fused residual) or a pooling as below, so that no
// reorder runs between them.
bool output_channels_last(const graph::Graph& g, const graph::Node& n);
// Whether pooling n stores its output channels-last: a pooling between two such convolutions
// (a ResNet's max-pool after its stem) reads the convolution's channels-last output and writes
// its own so (kernels.h's pooling_channels_last) where every reader of its output is a oneDNN
// convolution as above.
bool pooling_channels_last(const graph::Graph& g, const graph::Node& n);
// For an engine's pooling whose output is stored channels-last: empty when its input is
// stored channels-last and its readers take its output so, else why not.
std::string pooling_channels_last_refusal(const graph::Graph& g, const graph::Node& n);

// Null when the node's tactic is not a oneDNN tactic.
std::unique_ptr<Accelerated> make(const graph::Graph& g, const graph::Node& n);

// "major.minor.patch" of the oneDNN library loaded (goes into the engine target).
std::string version();

}  // namespace tensoracle::cpu::onednn
