// Internal: the builder's IR — values and nodes in topological order, copied from a Network.
//
// Constants are values with weights (no node). A node has one output value, or several for a
// layer with several outputs (topk, a plugin), which its own op writes in one run. A node of one
// output may carry an epilogue: pointwise layers fused into it by the fusion pass, applied in
// order to its output; only the last one's value is materialised.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "graph/ops.h"
#include "graph/tactic.h"
#include "tensoracle/network.h"

namespace tensoracle::graph {

struct Value {
  std::string name;
  TensorDesc desc;               // network-level: dims may hold -1
  int producer = -1;             // node index; -1 for network inputs and constants
  bool is_input = false;
  bool is_output = false;
  std::optional<Weights> constant;
  // How its producer stores it (graph/tactic.h): chosen with the producer's tactic; linear for
  // inputs, constants and outputs.
  Layout layout = Layout::kLinear;
};

struct EpilogueOp {
  std::string layer;        // the fused layer's name
  LayerParams params;       // ActivationParams, ElementWiseParams, CastParams or QuantizeParams
  int operand = -1;         // elementwise: the other input's value id; quantize: the scale's
  bool operand_first = false;  // elementwise: the other input was input 0 (e.g. c - x)
  TensorDesc desc;          // the intermediate value this op produced
};

struct Node {
  std::string name;             // the producing layer's name
  LayerParams params;
  std::vector<int> inputs;      // value ids
  TensorDesc main_desc;         // output of the node's own op, before the epilogue
  std::vector<EpilogueOp> epilogue;
  int output = -1;              // value id of the final result (the layer's output 0)
  // Outputs 1..N-1 of a layer with several (topk, a plugin; its parameters' `output` is -1: all),
  // written by the node's own op in the same run; such a node has no epilogue.
  std::vector<int> extra_outputs;
  Tactic tactic;                // the backend's kernel for it (graph/tactic.h)
  // Q/DQ folding (builder::fold_qdq): the names of the two dequantize layers this matrix multiply
  // absorbed. When set, inputs = {a_q, b_q, a_scale, b_scale} — int8 or fp8 tensors and their
  // one-element float32 scales — and the product reads dequantize(a_q, a_scale) and
  // dequantize(b_q, b_scale) in its own result's type (main_desc.type).
  std::vector<std::string> folded_dequantize;
  // The layers a rewrite pass merged into this node's own op (builder::fuse_attention: the
  // scores' product, scaling, mask and softmax of an attention), in graph order.
  std::vector<std::string> absorbed;

  bool quantized() const noexcept { return !folded_dequantize.empty(); }
  LayerType type() const noexcept { return static_cast<LayerType>(params.index()); }
  // Every value the node reads: inputs, then epilogue operands.
  std::vector<int> all_inputs() const;
  // Every value the node writes: output, then extra_outputs.
  std::vector<int> outputs() const;
};

struct Graph;
// Whether value v is stored channels-last (Value::layout).
bool channels_last_value(const Graph& g, int v);

struct Graph {
  std::vector<Value> values;
  std::vector<Node> nodes;
  std::vector<int> inputs;   // value ids, in network order
  std::vector<int> outputs;  // value ids, in network order

  // consumers()[v] = indices of the nodes reading value v (inputs or epilogue operands).
  std::vector<std::vector<int>> consumers() const;
  int find_value(const std::string& name) const;  // -1 when absent
};

// The values a shape tensor of `g` takes (value id `v`; `g` is the part of a graph it depends on,
// its inputs those it reads) when they are the same at every shape the engine allows; nullopt
// otherwise. The builder's: shape inference at the profile's corners.
using ShapeValueOf = std::function<std::optional<std::vector<std::int64_t>>(const Graph& g, int v)>;

// The network copied into the IR, its loops unrolled (graph/from_network.cpp). Trip counts and
// loop output lengths must be constants or values `value_of` gives. Throws InvalidArgument or
// UnsupportedError naming the loop or layer.
Graph from_network(const Network& network, const ShapeValueOf& value_of = {});

// Checks the IR's invariants (ids in range, each value an input, a constant or one node's
// output, inputs and outputs listed once, topological order, arity, types re-inferred equal);
// throws BuildError naming the pass that broke them ("load": an engine file's plan).
void verify(const Graph& g, const std::string& after_pass);

// Removes nodes marked in `dead` and values no longer referenced (inputs and outputs stay),
// renumbering ids.
void compact(Graph& g, const std::vector<bool>& dead_nodes);

// Shape tensors during shape inference: the values of small int32/int64 tensors known on the
// host (constants, add_shape outputs, and nodes whose every input is known). Nodes other than
// add_shape are evaluated by `evaluate` (the runtime runs them with the CPU backend's kernels):
// it gets the node, its inputs' descriptions and values, and its output's description.
using ShapeValues = std::vector<std::optional<std::vector<std::int64_t>>>;
using ShapeEvaluator = std::function<std::vector<std::int64_t>(
    const Graph& g, const Node& n, std::span<const TensorDesc> inputs, const ShapeValues& values, const TensorDesc& out)>;

// The type node `n` computes in: its own result's, or a quantized matrix multiply's int8/fp8.
DataType arithmetic_type(const Graph& g, const Node& n);
// The layers fused into node `n`, in order: folded dequantize layers, then its epilogue's.
std::vector<std::string> fused_layers(const Node& n);

// The descriptions node `n`'s own op reads for inputs described by `inputs` (n.inputs order):
// the inputs themselves, or a quantized matrix multiply's two dequantized operands.
std::vector<TensorDesc> main_inputs(const Node& n, std::span<const TensorDesc> inputs);
// Node `n`'s own result (before its epilogue). Throws InvalidArgument (without the layer's name).
TensorDesc infer_main(const Node& n, std::span<const TensorDesc> inputs, std::span<const InputFacts> facts);
// Every result of node `n`'s own op: its main result, then one per extra output.
std::vector<TensorDesc> infer_all(const Node& n, std::span<const TensorDesc> inputs, std::span<const InputFacts> facts);

// The descriptions of node `n`'s own result and of each of its epilogue's values, for inputs
// described by `inputs` (n.all_inputs() order) with `facts` (same order). What a backend's
// node kernel needs to size and place its intermediate values.
std::vector<TensorDesc> epilogue_chain(const Node& n, std::span<const TensorDesc> inputs, std::span<const InputFacts> facts);

// Output descriptions of every value for concrete input dims (name -> dims), with the same
// inference as the network. Throws InvalidArgument naming the layer when shapes conflict.
// Without an evaluator, only constants and add_shape outputs have known values. `values_out`
// (optional) receives every value's shape-tensor values where known.
std::vector<TensorDesc> infer_shapes(const Graph& g, const std::vector<Dims>& input_dims,
                                     const ShapeEvaluator& evaluate = {}, ShapeValues* values_out = nullptr);

}  // namespace tensoracle::graph
