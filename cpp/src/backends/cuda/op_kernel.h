// Internal to the CUDA backend: how it runs one layer kind's own op (before the part of the
// node's epilogue it does not apply itself). Each kind's entry is defined by its layer file,
// ops/<layer>.cu (ops/quantize.cu holds quantize and dequantize), next to its kernels;
// ops/registry.cu lists them all, in LayerType order. The node kernel (node_kernel.cpp) looks
// the entry up by the node's type and adds what is common to every kind: the device, the
// epilogue passes with their scratch and their operands' layout conversions.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "backends/backend.h"
#include "backends/common/buffer_refs.h"
#include "backends/cuda/cudnn_conv.h"
#include "backends/cuda/kernels.h"
#include "graph/graph.h"

namespace tensoracle::cuda {

class Device;  // device.h (not included here: the window kernels' files have a kAlign of their own)

// What a kind's `prepare` keeps for a node's runs (per-node objects such as a cuda::Gemm, its
// tactic's reading); kinds derive from it.
struct OpState {
  virtual ~OpState() = default;
};

// What `prepare` sees of the node.
struct OpSetup {
  const Device& device;
  cublasLtHandle_t lt;       // device.lt()
  const CudnnContext& dnn;   // device.dnn()
  const graph::Graph& graph;
  const graph::Node& node;
  const std::vector<bool>& operand_channels_last;  // channels_last_value of each of node.all_inputs()
  // The node's output is stored channels-last (Value::layout; the node kernel has checked that
  // the node may write it so: layouts.h's channels_last_writer_ok).
  bool out_channels_last;
};

// What `prepare` gives the node kernel.
struct OpPrepared {
  std::unique_ptr<OpState> state;  // null: nothing kept
  std::size_t fused = 0;           // the node's first epilogue ops that the op applies itself
};

// One run (or sizing) of a node's own op.
struct OpCall {
  const graph::Node& node;
  const OpState* state;                  // what `prepare` kept (null: nothing)
  std::span<const backends::Buffer> in;  // the node's inputs, then its epilogue operands
  const backends::Buffer& out;           // the op's result; its data is null while only sizing
  std::byte* workspace;                  // the op's scratch; null while only sizing
  cudaStream_t stream;                   // null while only sizing
  // A multi-output node's outputs 1.. (topk, a plugin: their `output` -1), written in the same
  // run as `out`; empty otherwise.
  std::span<const backends::Buffer> extra_out = {};
};

struct OpKernel {
  LayerType type;
  // Called once per node when its kernel is made: checks what the node's tactic says (an
  // engine file's tactic is not trusted; CorruptEngineError) and makes what its runs need.
  // Null: nothing to check or keep, no epilogue op applied, a packed result.
  OpPrepared (*prepare)(const OpSetup& setup);
  // The op's scratch bytes at the call's input shapes (`out` has the op's result). Null: none.
  std::size_t (*workspace)(const OpCall& call);
  // Enqueues the op on call.stream. Null: the kind has no kernel (input, constant).
  void (*run)(const OpCall& call);
};

// Buffers as the kernels take them (backends/common/buffer_refs.h): one, the node's own inputs.
using backends::common::input_refs;
using backends::common::ref;

// The entry of layer kind `type`; null for the kinds that are never run (input, constant).
// InvalidArgument for a value that is no LayerType.
const OpKernel* op_kernel(LayerType type);

}  // namespace tensoracle::cuda
