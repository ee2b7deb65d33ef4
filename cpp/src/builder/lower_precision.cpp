// builder::lower_precision (passes.h): TensorRT's weak typing, float32 layers computed in
// float16 or bfloat16 with casts where the types meet.
#include <string>
#include <utility>
#include <vector>

#include "builder/passes.h"
#include "core/numeric.h"
#include "tensoracle/errors.h"

namespace tensoracle::builder {

using graph::Graph;
using graph::Node;

namespace {

// Kinds weak typing moves to the lower precision (lower_precision): the rest keep float32.
bool lowerable(LayerType t) {
  switch (t) {
    case LayerType::kMATRIX_MULTIPLY: case LayerType::kELEMENTWISE: case LayerType::kACTIVATION:
    case LayerType::kSHUFFLE: case LayerType::kIDENTITY: case LayerType::kUNARY: case LayerType::kSOFTMAX:
    case LayerType::kCONCATENATION: case LayerType::kSLICE: case LayerType::kGATHER: case LayerType::kSELECT:
    case LayerType::kPADDING: case LayerType::kCONVOLUTION: case LayerType::kDECONVOLUTION: case LayerType::kPOOLING:
    case LayerType::kRESIZE: case LayerType::kEINSUM: case LayerType::kATTENTION: case LayerType::kSCALE:
    case LayerType::kPARAMETRIC_RELU: case LayerType::kLRN: case LayerType::kSCATTER: case LayerType::kONE_HOT:
    case LayerType::kSQUEEZE: case LayerType::kUNSQUEEZE: case LayerType::kREVERSE_SEQUENCE:
      return true;
    default:
      return false;
  }
}

// float32 weights converted to `to` (kHALF or kBF16), rounded to nearest even.
Weights converted(const Weights& w, DataType to) {
  std::vector<std::uint16_t> v(static_cast<std::size_t>(w.count()));
  const auto* f = static_cast<const float*>(w.values());
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = to == DataType::kHALF ? core::float_to_half(f[i]) : core::float_to_bf16(f[i]);
  return Weights::copy_of(to, v.data(), static_cast<std::int64_t>(v.size()));
}

}  // namespace

PassLog lower_precision(Graph& g, DataType to, const LoweringPolicy& accept) {
  PassLog log{"lower_precision", {}};
  if (to != DataType::kHALF && to != DataType::kBF16) return log;
  const std::string suffix = to == DataType::kHALF ? "/float16" : "/bfloat16";
  const std::size_t original = g.values.size();
  // low[v]: the `to` version of float32 value v; high[v]: the float32 version of a value a
  // lowered node now makes in `to`.
  std::vector<int> low(original, -1), high(original, -1);
  std::vector<bool> lowered(original, false);
  std::vector<Node> out;
  out.reserve(g.nodes.size() * 2);
  auto new_value = [&](std::string name, graph::TensorDesc desc) {
    graph::Value v;
    v.name = std::move(name);
    v.desc = desc;
    g.values.push_back(std::move(v));
    return static_cast<int>(g.values.size()) - 1;
  };
  auto cast = [&](int from, DataType t, const std::string& name) {
    graph::TensorDesc d{t, g.values[static_cast<std::size_t>(from)].desc.dims};
    const int v = new_value(name, d);
    Node c;
    c.name = name;
    c.params = CastParams{t};
    c.inputs = {from};
    c.main_desc = d;
    c.output = v;
    out.push_back(std::move(c));
    return v;
  };
  auto in_low = [&](int v) {
    const auto u = static_cast<std::size_t>(v);
    if (u >= original || g.values[u].desc.type != DataType::kFLOAT) return v;
    if (low[u] < 0) {
      if (g.values[u].constant) {
        Weights w = converted(*g.values[u].constant, to);
        const int c = new_value(g.values[u].name + suffix, {to, g.values[u].desc.dims});
        g.values[static_cast<std::size_t>(c)].constant = std::move(w);
        low[u] = c;
      } else {
        low[u] = cast(v, to, g.values[u].name + suffix);
      }
    }
    return low[u];
  };
  auto in_high = [&](int v) {
    const auto u = static_cast<std::size_t>(v);
    if (u >= original || !lowered[u]) return v;
    if (high[u] < 0) high[u] = cast(v, DataType::kFLOAT, g.values[u].name + "/float32");
    return high[u];
  };
  for (Node& node : g.nodes) {
    Node n = std::move(node);
    const auto o = static_cast<std::size_t>(n.output);
    bool lower = lowerable(n.type()) && n.main_desc.type == DataType::kFLOAT && n.extra_outputs.empty() &&
                 n.epilogue.empty() && !n.quantized();
    if (lower) {
      Node cand = n;
      for (std::size_t i = 0; i < cand.inputs.size(); ++i)
        if (n.type() != LayerType::kSCALE || i == 0) cand.inputs[i] = in_low(cand.inputs[i]);
      std::vector<graph::TensorDesc> descs;
      std::vector<graph::InputFacts> facts;
      for (int v : cand.inputs) {
        const auto& val = g.values[static_cast<std::size_t>(v)];
        descs.push_back(val.desc);
        facts.push_back({val.constant.has_value(), val.constant ? graph::shape_values_of(*val.constant) : std::nullopt});
      }
      try {
        cand.main_desc = graph::infer_main(cand, descs, facts);
      } catch (const InvalidArgument&) {
        lower = false;
      }
      lower = lower && cand.main_desc.type == to && (!accept || accept(g, cand));
      if (lower) {
        n = std::move(cand);
        if (g.values[o].is_output) {
          // The output keeps float32: the node writes a new value, which a cast turns into it.
          const int w = new_value(g.values[o].name + suffix, n.main_desc);
          low[o] = w;
          n.output = w;
          log.changes.push_back("node '" + n.name + "' computes in " + std::string(type_name(to)) + " (output '" +
                                g.values[o].name + "' cast back to float32)");
          Node c;
          c.name = n.name + "/float32";
          c.params = CastParams{DataType::kFLOAT};
          c.inputs = {w};
          c.main_desc = g.values[o].desc;
          c.output = static_cast<int>(o);
          out.push_back(std::move(n));
          out.push_back(std::move(c));
          continue;
        }
        g.values[o].desc = n.main_desc;
        lowered[o] = true;
        log.changes.push_back("node '" + n.name + "' computes in " + std::string(type_name(to)));
        out.push_back(std::move(n));
        continue;
      }
    }
    for (int& v : n.inputs) v = in_high(v);
    out.push_back(std::move(n));
  }
  g.nodes = std::move(out);
  for (auto& v : g.values) v.producer = -1;
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    for (int v : g.nodes[i].outputs()) g.values[static_cast<std::size_t>(v)].producer = static_cast<int>(i);
  graph::compact(g, std::vector<bool>(g.nodes.size(), false));  // float32 constants no node reads any more
  return log;
}

}  // namespace tensoracle::builder
