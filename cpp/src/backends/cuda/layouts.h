// Internal to the CUDA backend, and free of CUDA so that the CPU tests can check it: which values
// an engine stores channels-last (a convolution's tactic field o:1, CudnnTactic::out_channels_last)
// and where the builder chooses to (docs/architecture.md, "Channels-last values between
// convolutions").
#pragma once

#include <span>
#include <string>
#include <variant>

#include "backends/cuda/cudnn_tactic.h"
#include "graph/graph.h"

namespace tensoracle::cuda {

// Whether node n stores its output channels-last (its tactic: CudnnTactic::out_channels_last).
inline bool writes_channels_last(const graph::Node& n) {
  if (!n.tactic.starts_with(kCudnnTacticPrefix)) return false;
  CudnnTactic t;
  return parse_cudnn_tactic(n.tactic, t) && t.out_channels_last;
}

// Whether value v is stored channels-last: its producer writes it so.
inline bool channels_last_value(const graph::Graph& g, int v) {
  const int p = g.values[static_cast<std::size_t>(v)].producer;
  return p >= 0 && writes_channels_last(g.nodes[static_cast<std::size_t>(p)]);
}

// Where a channels-last value may be read: as a convolution's data (input 0) or as the operand
// of an elementwise op in a convolution's epilogue, whose pass converts it where the layouts
// differ; `why` says what else reads it. Engine files are untrusted: the loader checks this for
// every node that writes channels-last, the builder only writes it so where it holds.
inline bool channels_last_readers_ok(const graph::Graph& g, const graph::Node& n, std::string* why = nullptr) {
  const auto& out = g.values[static_cast<std::size_t>(n.output)];
  auto fail = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  if (!std::holds_alternative<ConvolutionParams>(n.params)) return fail("it is not a convolution");
  if (out.is_output) return fail("its output is a network output");
  for (const auto& r : g.nodes) {
    const auto all = r.all_inputs();
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (all[i] != n.output) continue;
      const bool conv = std::holds_alternative<ConvolutionParams>(r.params);
      bool ok = conv && i == 0;
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

// Whether convolution n (cuDNN problem `shape`; inputs `in` and result `main` at the
// profile's opt shapes) should store its output channels-last for its readers: float16/
// bfloat16 without groups, a multiple of 8 output channels (its readers' plans then pad
// none), every epilogue operand of the result's dims or a single value (so the epilogue keeps
// the dims), and every reader a convolution of the same type without groups taking it as data
// or as an epilogue operand of the same dims as its own result (channels_last_readers_ok; the
// dims compared as the network declares them, a dynamic dim matching the same dynamic dim: a
// reader's pass refuses other dims at run time).
inline bool chain_output(const graph::Graph& g, const graph::Node& n, const CudnnConvShape& shape,
                         std::span<const graph::TensorDesc> in, const graph::TensorDesc& main) {
  if (shape.type == DataType::kFLOAT || shape.w[1] != shape.x[1] || shape.y[1] % 8 != 0) return false;
  if (!channels_last_readers_ok(g, n) || main.dims.rank() < 3) return false;
  for (std::size_t k = n.inputs.size(); k < in.size(); ++k)
    if (!(in[k].dims == main.dims) && in[k].dims.volume() != 1) return false;
  const Dims& declared = g.values[static_cast<std::size_t>(n.output)].desc.dims;
  bool read = false;
  for (const auto& r : g.nodes) {
    const auto all = r.all_inputs();
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (all[i] != n.output) continue;
      if (r.main_desc.type != shape.type || std::get<ConvolutionParams>(r.params).num_groups != 1) return false;
      if (i > 0 && !(r.main_desc.dims == declared)) return false;
      read = true;
    }
  }
  return read;
}

}  // namespace tensoracle::cuda
