// Internal to the CUDA backend, and free of CUDA so that the CPU tests can check it: where the
// builder stores values channels-last (Value::layout, chosen with the producer's tactic:
// docs/architecture.md, "Layouts"), and which producers and readers an engine's channels-last
// value may have.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "backends/cuda/cudnn_tactic.h"
#include "graph/graph.h"

namespace tensoracle::cuda {

using graph::channels_last_value;

// Where a channels-last value may come from and be read: written by a convolution, or by a
// pooling without fused epilogue layers; read as a convolution's or a pooling's data (input 0)
// or as the operand of an elementwise op in a convolution's epilogue, whose pass converts it
// where the layouts differ. `why` says what else reads it. Engine files are untrusted: the
// loader checks this for every node that writes channels-last, the builder only writes it so
// where it holds.
inline bool channels_last_readers_ok(const graph::Graph& g, const graph::Node& n, std::string* why = nullptr) {
  const auto& out = g.values[static_cast<std::size_t>(n.output)];
  auto fail = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  const bool pooling = std::holds_alternative<PoolingParams>(n.params);
  if (!pooling && !std::holds_alternative<ConvolutionParams>(n.params))
    return fail("it is neither a convolution nor a pooling");
  if (pooling && !n.epilogue.empty()) return fail("layers are fused into its epilogue");
  if (out.is_output) return fail("its output is a network output");
  for (const auto& r : g.nodes) {
    const auto all = r.all_inputs();
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (all[i] != n.output) continue;
      const bool conv = std::holds_alternative<ConvolutionParams>(r.params);
      bool ok = (conv || std::holds_alternative<PoolingParams>(r.params)) && i == 0;
      if (conv && i >= r.inputs.size()) {  // an epilogue operand: which op takes it
        std::size_t k = r.inputs.size();
        for (const auto& op : r.epilogue) {
          if (op.operand < 0) continue;
          if (k++ == i) ok = std::holds_alternative<ElementWiseParams>(op.params);
        }
      }
      if (!ok) return fail("layer '" + r.name + "' reads it as input " + std::to_string(i));
    }
  }
  return true;
}

// Whether node n may store its output channels-last (an engine's Value::layout): a convolution
// run by cuDNN's tactic or a pooling that reads a channels-last value, with readers as
// channels_last_readers_ok asks. `why` says what is wrong.
inline bool channels_last_writer_ok(const graph::Graph& g, const graph::Node& n, std::string* why = nullptr) {
  if (std::holds_alternative<ConvolutionParams>(n.params) && n.tactic.kernel != graph::kCudnnConvKernel) {
    if (why) *why = "its tactic is not a cuDNN convolution's";
    return false;
  }
  if (std::holds_alternative<PoolingParams>(n.params) && (n.inputs.empty() || !channels_last_value(g, n.inputs[0]))) {
    if (why) *why = "its input is not";
    return false;
  }
  return channels_last_readers_ok(g, n, why);
}

// Whether n's output has readers and each of them suits a channels-last value of type `type`:
// a convolution of that type without groups, taking it as data or as an epilogue operand of the
// same dims as its own result (the dims compared as the network declares them, a dynamic dim
// matching the same dynamic dim: a reader's pass refuses other dims at run time), or a pooling
// of that type. channels_last_readers_ok is checked separately.
inline bool chain_readers(const graph::Graph& g, const graph::Node& n, DataType type) {
  const Dims& declared = g.values[static_cast<std::size_t>(n.output)].desc.dims;
  bool read = false;
  for (const auto& r : g.nodes) {
    const auto all = r.all_inputs();
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (all[i] != n.output) continue;
      if (r.main_desc.type != type) return false;
      if (const auto* c = std::get_if<ConvolutionParams>(&r.params); c && c->num_groups != 1) return false;
      if (i > 0 && !(r.main_desc.dims == declared)) return false;
      read = true;
    }
  }
  return read;
}

// Whether convolution n (cuDNN problem `shape`; inputs `in` and result `main` at the
// profile's opt shapes) should store its output channels-last for its readers: float16/
// bfloat16 without groups, a multiple of 8 output channels (its readers' plans then pad
// none), every epilogue operand of the result's dims or a single value (so the epilogue keeps
// the dims), and readers as channels_last_readers_ok and chain_readers ask.
inline bool chain_output(const graph::Graph& g, const graph::Node& n, const CudnnConvShape& shape,
                         std::span<const graph::TensorDesc> in, const graph::TensorDesc& main) {
  if (shape.type == DataType::kFLOAT || shape.w[1] != shape.x[1] || shape.y[1] % 8 != 0) return false;
  if (!channels_last_readers_ok(g, n) || main.dims.rank() < 3) return false;
  for (std::size_t k = n.inputs.size(); k < in.size(); ++k)
    if (!(in[k].dims == main.dims) && in[k].dims.volume() != 1) return false;
  return chain_readers(g, n, shape.type);
}

// Whether pooling n should store its output channels-last: it reads a channels-last float16/
// bfloat16 value (a convolution's or a pooling's) with a multiple of 8 channels, has no fused
// epilogue layers, and its readers are as for a convolution (chain_output). Its readers then
// take the value in place instead of converting it.
inline bool pooling_chain_output(const graph::Graph& g, const graph::Node& n) {
  if (!std::holds_alternative<PoolingParams>(n.params) || n.inputs.empty() || !channels_last_value(g, n.inputs[0]))
    return false;
  const graph::TensorDesc& d = g.values[static_cast<std::size_t>(n.output)].desc;
  if (d.type != DataType::kHALF && d.type != DataType::kBF16) return false;
  if (d.dims.rank() < 3 || d.dims[1] <= 0 || d.dims[1] % 8 != 0) return false;
  return channels_last_readers_ok(g, n) && chain_readers(g, n, d.type);
}

}  // namespace tensoracle::cuda
