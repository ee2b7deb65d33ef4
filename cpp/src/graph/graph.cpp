#include "graph/graph.h"

#include <algorithm>
#include <unordered_map>

#include "tensoracle/errors.h"

namespace tensoracle::graph {

std::vector<int> Node::all_inputs() const {
  std::vector<int> v = inputs;
  for (const auto& e : epilogue)
    if (e.operand >= 0) v.push_back(e.operand);
  return v;
}

std::vector<int> Node::outputs() const {
  std::vector<int> v{output};
  v.insert(v.end(), extra_outputs.begin(), extra_outputs.end());
  return v;
}

DataType arithmetic_type(const Graph& g, const Node& n) {
  return n.quantized() ? g.values[static_cast<std::size_t>(n.inputs[0])].desc.type : n.main_desc.type;
}

std::vector<std::string> fused_layers(const Node& n) {
  std::vector<std::string> names = n.absorbed;
  names.insert(names.end(), n.folded_dequantize.begin(), n.folded_dequantize.end());
  for (const auto& op : n.epilogue) names.push_back(op.layer);
  return names;
}

std::vector<TensorDesc> main_inputs(const Node& n, std::span<const TensorDesc> inputs) {
  if (!n.quantized()) return {inputs.begin(), inputs.begin() + static_cast<std::ptrdiff_t>(n.inputs.size())};
  auto fail = [](const std::string& m) -> void { throw InvalidArgument("folded Q/DQ matrix multiply: " + m); };
  if (n.type() != LayerType::kMATRIX_MULTIPLY || n.inputs.size() != 4 || inputs.size() < 4 || n.folded_dequantize.size() != 2)
    fail("it must be a matrix multiply of two quantized operands and their two scales");
  const DataType q = inputs[0].type, t = n.main_desc.type;
  if ((q != DataType::kINT8 && q != DataType::kFP8) || inputs[1].type != q)
    fail("operands of types " + std::string(type_name(q)) + " and " + std::string(type_name(inputs[1].type)) +
         "; both must be int8 or both fp8");
  for (int i : {2, 3})
    if (inputs[static_cast<std::size_t>(i)].type != DataType::kFLOAT || inputs[static_cast<std::size_t>(i)].dims.volume() != 1)
      fail("scale " + std::to_string(i - 2) + " must be one float32 value, got " +
           std::string(type_name(inputs[static_cast<std::size_t>(i)].type)) + " " + inputs[static_cast<std::size_t>(i)].dims.str());
  if (t != DataType::kFLOAT && t != DataType::kHALF && t != DataType::kBF16)
    fail("operands dequantize to " + std::string(type_name(t)) + "; float32, float16 or bfloat16 expected");
  return {TensorDesc{t, inputs[0].dims}, TensorDesc{t, inputs[1].dims}};
}

std::vector<TensorDesc> infer_all(const Node& n, std::span<const TensorDesc> inputs, std::span<const InputFacts> facts) {
  auto in = main_inputs(n, inputs);
  return infer(n.params, in, facts.first(in.size()));
}

TensorDesc infer_main(const Node& n, std::span<const TensorDesc> inputs, std::span<const InputFacts> facts) {
  return infer_all(n, inputs, facts)[0];
}

std::vector<std::vector<int>> Graph::consumers() const {
  std::vector<std::vector<int>> c(values.size());
  for (std::size_t n = 0; n < nodes.size(); ++n)
    for (int v : nodes[n].all_inputs()) c[static_cast<std::size_t>(v)].push_back(static_cast<int>(n));
  return c;
}

int Graph::find_value(const std::string& name) const {
  for (std::size_t i = 0; i < values.size(); ++i)
    if (values[i].name == name) return static_cast<int>(i);
  return -1;
}

namespace {

InputFacts facts_of(const Graph& g, int v, const ShapeValues* values) {
  const auto& val = g.values[static_cast<std::size_t>(v)];
  InputFacts f{val.constant.has_value(), std::nullopt};
  if (values) f.values = (*values)[static_cast<std::size_t>(v)];
  else if (val.constant) f.values = shape_values_of(*val.constant);
  return f;
}

std::vector<InputFacts> facts_of(const Graph& g, const std::vector<int>& ids, const ShapeValues* values) {
  std::vector<InputFacts> f;
  for (int v : ids) f.push_back(facts_of(g, v, values));
  return f;
}

// Runs inference for node `n` given the descriptions in `desc` (and the shape tensors' values
// when known); returns its outputs' (n.outputs() order: the final result first).
std::vector<TensorDesc> infer_node(const Graph& g, const Node& n, const std::vector<TensorDesc>& desc,
                                   const ShapeValues* values = nullptr) {
  std::vector<TensorDesc> in;
  for (int v : n.inputs) in.push_back(desc[static_cast<std::size_t>(v)]);
  auto fin = facts_of(g, n.inputs, values);
  std::vector<TensorDesc> all;
  try {
    all = infer_all(n, in, fin);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument("[build] layer '" + n.name + "': " + e.what());
  }
  if (all.size() != 1 + n.extra_outputs.size() || (!n.extra_outputs.empty() && !n.epilogue.empty()))
    throw InvalidArgument("[build] layer '" + n.name + "' has " + std::to_string(all.size()) + " outputs, its node " +
                          std::to_string(1 + n.extra_outputs.size()) + (n.epilogue.empty() ? "" : " and an epilogue"));
  TensorDesc& cur = all[0];
  for (const auto& op : n.epilogue) {
    std::vector<TensorDesc> ein{cur};
    std::vector<InputFacts> efacts{InputFacts{}};
    if (op.operand >= 0) {
      ein.push_back(desc[static_cast<std::size_t>(op.operand)]);
      efacts.push_back(facts_of(g, op.operand, values));
      if (op.operand_first) {
        std::swap(ein[0], ein[1]);
        std::swap(efacts[0], efacts[1]);
      }
    }
    try {
      cur = infer(op.params, ein, efacts)[0];
    } catch (const InvalidArgument& e) {
      throw InvalidArgument("[build] layer '" + op.layer + "': " + e.what());
    }
  }
  return all;
}

}  // namespace

std::vector<TensorDesc> epilogue_chain(const Node& n, std::span<const TensorDesc> inputs, std::span<const InputFacts> facts) {
  std::vector<TensorDesc> descs;
  descs.push_back(infer_main(n, inputs.first(n.inputs.size()), facts.first(n.inputs.size())));
  std::size_t k = n.inputs.size();
  for (const auto& op : n.epilogue) {
    std::vector<TensorDesc> in{descs.back()};
    std::vector<InputFacts> f{InputFacts{}};
    if (op.operand >= 0) {
      in.push_back(inputs[k]);
      f.push_back(facts[k]);
      ++k;
      if (op.operand_first) {
        std::swap(in[0], in[1]);
        std::swap(f[0], f[1]);
      }
    }
    descs.push_back(infer(op.params, in, f)[0]);
  }
  return descs;
}

std::vector<TensorDesc> infer_shapes(const Graph& g, const std::vector<Dims>& input_dims, const ShapeEvaluator& evaluate,
                                     ShapeValues* values_out) {
  std::vector<TensorDesc> desc(g.values.size());
  ShapeValues values(g.values.size());
  for (std::size_t i = 0; i < g.values.size(); ++i) {
    desc[i] = g.values[i].desc;
    if (g.values[i].constant) values[i] = shape_values_of(*g.values[i].constant);
  }
  for (std::size_t i = 0; i < g.inputs.size(); ++i) desc[static_cast<std::size_t>(g.inputs[i])].dims = input_dims[i];
  for (const Node& n : g.nodes) {
    const auto out = static_cast<std::size_t>(n.output);
    const auto all = infer_node(g, n, desc, &values);
    desc[out] = all[0];
    for (std::size_t k = 1; k < all.size(); ++k) desc[static_cast<std::size_t>(n.extra_outputs[k - 1])] = all[k];
    // Shape tensors: of single-output nodes (a multi-output node is not evaluated on the host).
    if (!n.extra_outputs.empty()) continue;
    const TensorDesc& d = desc[out];
    if (!is_host_value_type(d.type) || !d.dims.all_known() || d.dims.volume() > kMaxShapeTensorElements) continue;
    if (std::holds_alternative<ShapeParams>(n.params) && n.epilogue.empty()) {
      const Dims& x = desc[static_cast<std::size_t>(n.inputs[0])].dims;
      if (x.all_known()) values[out] = x.vec();
      continue;
    }
    if (!evaluate || std::holds_alternative<PluginParams>(n.params)) continue;  // plugins run in the engine only
    bool known = true;
    for (int v : n.all_inputs()) known = known && values[static_cast<std::size_t>(v)].has_value();
    if (!known) continue;
    std::vector<TensorDesc> in;
    for (int v : n.all_inputs()) in.push_back(desc[static_cast<std::size_t>(v)]);
    values[out] = evaluate(g, n, in, values, d);
  }
  if (values_out) *values_out = std::move(values);
  return desc;
}

void verify(const Graph& g, const std::string& after) {
  // After a builder pass a broken invariant is our bug; after "load" it is the engine file's
  // (plan::read_engine says which file).
  auto fail = [&](const std::string& what) {
    throw BuildError(after == "load" ? what : "[build] internal error after pass '" + after + "': " + what);
  };
  const auto nv = static_cast<int>(g.values.size());
  const auto nn = static_cast<int>(g.nodes.size());
  auto in_range = [&](int v) { return v >= 0 && v < nv; };
  // Each value is exactly one of: a network input, a constant, or the output of the node it
  // names as producer (and that node's output is this value).
  for (std::size_t i = 0; i < g.values.size(); ++i) {
    const Value& val = g.values[i];
    if (val.is_input && val.constant) fail("value '" + val.name + "' is both a network input and a constant");
    if (val.producer < -1 || val.producer >= nn)
      fail("value '" + val.name + "' names node " + std::to_string(val.producer) + " as its producer");
    if (val.producer >= 0 && (val.is_input || val.constant))
      fail("value '" + val.name + "' is a network input or a constant but names a producer");
    if (val.producer >= 0) {
      const auto outs = g.nodes[static_cast<std::size_t>(val.producer)].outputs();
      if (std::find(outs.begin(), outs.end(), static_cast<int>(i)) == outs.end())
        fail("value '" + val.name + "' names node '" + g.nodes[static_cast<std::size_t>(val.producer)].name +
             "' as producer, which writes other values");
    }
  }
  // The network's inputs: each an input value, listed once; and every input value listed.
  std::vector<bool> listed(g.values.size(), false);
  for (int v : g.inputs) {
    if (!in_range(v)) fail("a network input names value id " + std::to_string(v));
    if (!g.values[static_cast<std::size_t>(v)].is_input)
      fail("network input '" + g.values[static_cast<std::size_t>(v)].name + "' is not an input value");
    if (listed[static_cast<std::size_t>(v)]) fail("network input '" + g.values[static_cast<std::size_t>(v)].name + "' is listed twice");
    listed[static_cast<std::size_t>(v)] = true;
  }
  for (std::size_t i = 0; i < g.values.size(); ++i)
    if (g.values[i].is_input && !listed[i]) fail("input value '" + g.values[i].name + "' is not a network input");
  std::vector<bool> defined(g.values.size(), false);
  for (std::size_t i = 0; i < g.values.size(); ++i)
    if (g.values[i].is_input || g.values[i].constant) defined[i] = true;
  for (std::size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& node = g.nodes[n];
    for (const auto& op : node.epilogue) {
      if (!std::holds_alternative<ActivationParams>(op.params) && !std::holds_alternative<ElementWiseParams>(op.params) &&
          !std::holds_alternative<CastParams>(op.params) && !std::holds_alternative<QuantizeParams>(op.params))
        fail("node '" + node.name + "': fused layer '" + op.layer + "' is a " +
             std::string(layer_type_name(static_cast<LayerType>(op.params.index()))) +
             " layer; only activation, elementwise, cast and quantize layers are fused");
      if (op.operand < -1) fail("node '" + node.name + "': fused layer '" + op.layer + "' reads value id " + std::to_string(op.operand));
    }
    for (int v : node.all_inputs()) {
      if (!in_range(v)) fail("node '" + node.name + "' reads value id " + std::to_string(v));
      if (!defined[static_cast<std::size_t>(v)])
        fail("node '" + node.name + "' reads '" + g.values[static_cast<std::size_t>(v)].name + "' before it is produced");
    }
    if (!in_range(node.output)) fail("node '" + node.name + "' has no output");
    if (!node.extra_outputs.empty() && !node.epilogue.empty())
      fail("node '" + node.name + "' has several outputs and fused layers");
    for (int o : node.outputs()) {
      if (!in_range(o)) fail("node '" + node.name + "' writes value id " + std::to_string(o));
      const Value& out = g.values[static_cast<std::size_t>(o)];
      if (out.is_input || out.constant) fail("node '" + node.name + "' writes '" + out.name + "', a network input or a constant");
      if (out.producer != static_cast<int>(n)) fail("value '" + out.name + "' does not name node '" + node.name + "' as producer");
      if (defined[static_cast<std::size_t>(o)]) fail("node '" + node.name + "' writes '" + out.name + "' twice");
      defined[static_cast<std::size_t>(o)] = true;
    }
  }
  // The network's outputs: each produced by a node (never an input or a constant, which no
  // kernel would write into the caller's buffer), listed once, and marked as outputs.
  std::fill(listed.begin(), listed.end(), false);
  for (int v : g.outputs) {
    if (!in_range(v) || !defined[static_cast<std::size_t>(v)]) fail("an output is not produced");
    const Value& val = g.values[static_cast<std::size_t>(v)];
    if (val.producer < 0) fail("output '" + val.name + "' is not produced by a layer");
    if (!val.is_output) fail("output '" + val.name + "' is not marked as an output");
    if (listed[static_cast<std::size_t>(v)]) fail("output '" + val.name + "' is listed twice");
    listed[static_cast<std::size_t>(v)] = true;
  }
  for (std::size_t i = 0; i < g.values.size(); ++i)
    if (g.values[i].is_output && !listed[i]) fail("value '" + g.values[i].name + "' is marked as an output but not listed");
  // A channels-last value is an internal one a node writes, of rank 3 or more (the backends check
  // that its producer and readers take it so).
  for (const Value& val : g.values)
    if (val.layout == Layout::kChannelsLast && (val.producer < 0 || val.is_output || val.desc.dims.rank() < 3))
      fail("value '" + val.name + "' is stored channels-last but is " +
           (val.producer < 0 ? "not a layer's output" : val.is_output ? "a network output" : "of fewer than 3 dims"));
  // Types and network-level dims must re-infer to what the values say.
  std::vector<TensorDesc> desc(g.values.size());
  for (std::size_t i = 0; i < g.values.size(); ++i) desc[i] = g.values[i].desc;
  for (const Node& n : g.nodes) {
    // A plugin node read without its library (plan::read_engine for inspection) cannot be asked.
    if (const auto* p = std::get_if<PluginParams>(&n.params); p && !p->plugin) continue;
    const auto all = infer_node(g, n, desc);
    const auto outs = n.outputs();
    for (std::size_t k = 0; k < outs.size(); ++k)
      if (all[k].type != g.values[static_cast<std::size_t>(outs[k])].desc.type)
        fail("node '" + n.name + "' infers type " + std::string(type_name(all[k].type)) + " for '" +
             g.values[static_cast<std::size_t>(outs[k])].name + "' but its value says " +
             std::string(type_name(g.values[static_cast<std::size_t>(outs[k])].desc.type)));
  }
}

bool channels_last_value(const Graph& g, int v) {
  return g.values[static_cast<std::size_t>(v)].layout == Layout::kChannelsLast;
}

void compact(Graph& g, const std::vector<bool>& dead) {
  std::vector<bool> used(g.values.size(), false);
  for (int v : g.inputs) used[static_cast<std::size_t>(v)] = true;
  for (int v : g.outputs) used[static_cast<std::size_t>(v)] = true;
  for (std::size_t n = 0; n < g.nodes.size(); ++n) {
    if (dead[n]) continue;
    for (int v : g.nodes[n].all_inputs()) used[static_cast<std::size_t>(v)] = true;
    for (int v : g.nodes[n].outputs()) used[static_cast<std::size_t>(v)] = true;
  }
  std::vector<int> remap(g.values.size(), -1);
  std::vector<Value> values;
  for (std::size_t i = 0; i < g.values.size(); ++i) {
    if (!used[i]) continue;
    remap[i] = static_cast<int>(values.size());
    values.push_back(std::move(g.values[i]));
  }
  std::vector<Node> nodes;
  for (std::size_t n = 0; n < g.nodes.size(); ++n) {
    if (dead[n]) continue;
    Node node = std::move(g.nodes[n]);
    for (int& v : node.inputs) v = remap[static_cast<std::size_t>(v)];
    for (auto& e : node.epilogue)
      if (e.operand >= 0) e.operand = remap[static_cast<std::size_t>(e.operand)];
    node.output = remap[static_cast<std::size_t>(node.output)];
    for (int& v : node.extra_outputs) v = remap[static_cast<std::size_t>(v)];
    for (int v : node.outputs()) values[static_cast<std::size_t>(v)].producer = static_cast<int>(nodes.size());
    nodes.push_back(std::move(node));
  }
  for (auto& v : values)
    if (v.producer >= 0 && (v.constant || v.is_input)) v.producer = -1;
  for (int& v : g.inputs) v = remap[static_cast<std::size_t>(v)];
  for (int& v : g.outputs) v = remap[static_cast<std::size_t>(v)];
  g.values = std::move(values);
  g.nodes = std::move(nodes);
}

}  // namespace tensoracle::graph
