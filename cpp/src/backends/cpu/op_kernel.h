// Internal to the CPU backend: how it runs one layer kind's own op (before the node's epilogue).
// Each kind's entry is defined by its layer file, ops/<layer>.cpp (ops/quantize.cpp holds
// quantize and dequantize), next to its kernels; ops/registry.cpp lists them all, in LayerType
// order. The node kernel (cpu_backend.cpp) looks the entry up by the node's type and adds what
// is common to every kind: oneDNN's fused path, the epilogue passes and their scratch.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "backends/backend.h"
#include "backends/common/buffer_refs.h"
#include "backends/cpu/kernels.h"
#include "graph/graph.h"

namespace tensoracle::cpu {

// The CPU backend's buffer alignment: of allocations, and of each part of a node's workspace.
inline constexpr std::size_t kAlign = 64;
inline std::size_t align_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// What a kind's `prepare` keeps for a node's runs (its tactic's reading); kinds derive from it.
struct OpState {
  virtual ~OpState() = default;
};

// One run (or sizing) of a node's own op.
struct OpCall {
  const graph::Node& node;
  const OpState* state;                  // what `prepare` returned (null: nothing)
  std::span<const backends::Buffer> in;  // the node's inputs, then its epilogue operands
  const backends::Buffer& out;           // the op's result; its data is null while only sizing
  std::byte* workspace;                  // the op's scratch; null while only sizing
  // A multi-output node's outputs 1.. (topk, a plugin: their `output` -1), written in the same
  // run as `out`; empty otherwise.
  std::span<const backends::Buffer> extra_out = {};
};

struct OpKernel {
  LayerType type;
  // Called once per node when its kernel is instantiated: checks what the node's tactic says
  // (an engine file's tactic is not trusted; CorruptEngineError) and keeps what its runs need.
  // Null: nothing to check or keep.
  std::unique_ptr<OpState> (*prepare)(const graph::Graph& g, const graph::Node& n);
  // The op's scratch bytes at the call's input shapes (`out` has the op's result dims). Null: none.
  std::size_t (*workspace)(const OpCall& call);
  // Runs the op into call.out. Null: the kind has no kernel (input, constant).
  void (*run)(const OpCall& call);
};

// Buffers as the kernels take them (backends/common/buffer_refs.h): one, the node's own inputs.
using backends::common::input_refs;
using backends::common::ref;

// The entry of layer kind `type`; null for the kinds that are never run (input, constant).
// InvalidArgument for a value that is no LayerType.
const OpKernel* op_kernel(LayerType type);

}  // namespace tensoracle::cpu
