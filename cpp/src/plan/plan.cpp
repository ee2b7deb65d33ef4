#include "plan/plan.h"

#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/json.h"
#include "core/text.h"
#include "graph/json_values.h"
#include "graph/op.h"
#include "graph/tactic.h"
#include "plugin/registry.h"
#include "tensoracle/errors.h"
#include "tensoracle/safetensors.h"

namespace tensoracle::plan {

namespace st = tensoracle::safetensors;
using json = nlohmann::json;
using graph::dims_json;
using graph::dims_of;
using graph::type_of;

namespace {

constexpr std::string_view kDigestKey = "tensoracle.digest";
constexpr std::string_view kDigestPrefix = "xxh3-128:";
constexpr std::size_t kDigestHex = 32;

json desc_json(const graph::TensorDesc& d) { return {{"type", type_name(d.type)}, {"dims", dims_json(d.dims)}}; }
graph::TensorDesc desc_of(const json& j) { return {type_of(j.at("type")), dims_of(j.at("dims"))}; }

json params_json(const LayerParams& params) { return graph::op_traits(static_cast<LayerType>(params.index())).to_json(params); }

LayerParams params_of(const std::string& layer, const json& j) {
  const graph::OpTraits* op = graph::find_op(layer);
  if (op == nullptr || op->from_json == nullptr) throw CorruptEngineError("[engine] unknown layer type '" + layer + "' in the plan");
  return op->from_json(j);
}

st::Dtype st_dtype(DataType t) {
  switch (t) {
    case DataType::kFLOAT: return st::Dtype::F32;
    case DataType::kHALF: return st::Dtype::F16;
    case DataType::kBF16: return st::Dtype::BF16;
    case DataType::kINT8: return st::Dtype::I8;
    case DataType::kINT32: return st::Dtype::I32;
    case DataType::kINT64: return st::Dtype::I64;
    case DataType::kBOOL: return st::Dtype::BOOL;
    case DataType::kUINT8: return st::Dtype::U8;
    case DataType::kFP8: return st::Dtype::F8_E4M3;
  }
  throw BuildError("[engine] invalid data type");
}

std::string weight_name(std::size_t id) { return "value." + std::to_string(id); }

std::string hex(const XXH128_hash_t& h) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (unsigned char b : c.digest) {
    s += kHex[b >> 4];
    s += kHex[b & 0xF];
  }
  return s;
}

// Digest of `bytes` with the kDigestHex bytes at `at` read as '0'.
std::string digest(std::span<const std::byte> bytes, std::size_t at) {
  static const std::string zeros(kDigestHex, '0');
  XXH3_state_t* s = XXH3_createState();
  if (s == nullptr) throw std::bad_alloc();
  XXH3_128bits_reset(s);
  XXH3_128bits_update(s, bytes.data(), at);
  XXH3_128bits_update(s, zeros.data(), kDigestHex);
  XXH3_128bits_update(s, bytes.data() + at + kDigestHex, bytes.size() - at - kDigestHex);
  auto h = XXH3_128bits_digest(s);
  XXH3_freeState(s);
  return hex(h);
}

// Position of the digest's hex digits in the file: `"tensoracle.digest":"xxh3-128:` occurs
// once in the header (JSON escapes any quote inside strings, so it cannot occur in a value).
std::size_t digest_position(std::span<const std::byte> bytes, std::uint64_t header_end) {
  std::string needle = "\"" + std::string(kDigestKey) + "\":\"" + std::string(kDigestPrefix);
  std::string_view header(reinterpret_cast<const char*>(bytes.data()), header_end);
  auto p = header.find(needle);
  if (p == std::string_view::npos || header.find(needle, p + 1) != std::string_view::npos) return std::string_view::npos;
  p += needle.size();
  if (p + kDigestHex >= header.size()) return std::string_view::npos;
  return p;
}

}  // namespace

json plan_to_json(const Plan& plan) {
  json j;
  j["name"] = plan.name;
  auto& io = j["io"] = json::array();
  for (std::size_t i = 0; i < plan.io.size(); ++i) {
    const auto& t = plan.io[i];
    io.push_back({{"name", t.name}, {"mode", t.mode == TensorIOMode::kINPUT ? "input" : "output"},
                  {"type", type_name(t.type)}, {"dims", dims_json(t.dims)}, {"min", dims_json(t.min)},
                  {"opt", dims_json(t.opt)}, {"max", dims_json(t.max)}, {"value", plan.io_values[i]}});
  }
  auto& values = j["values"] = json::array();
  const auto& g = plan.graph;
  for (std::size_t v = 0; v < g.values.size(); ++v) {
    const auto& val = g.values[v];
    json e = {{"name", val.name}, {"type", type_name(val.desc.type)}, {"dims", dims_json(val.desc.dims)}};
    e["role"] = val.is_input ? "input" : val.constant ? "constant" : val.is_output ? "output" : "activation";
    if (val.is_input && val.is_output) e["role"] = "input";
    e["producer"] = val.producer;
    e["is_output"] = val.is_output;
    e["arena_offset"] = plan.memory.offsets.empty() ? -1 : plan.memory.offsets[v];
    e["max_bytes"] = plan.max_bytes.empty() ? 0 : plan.max_bytes[v];
    e["layout"] = graph::layout_name(val.layout);
    if (val.constant) e["weight"] = weight_name(v);
    values.push_back(std::move(e));
  }
  auto& nodes = j["nodes"] = json::array();
  for (const auto& n : g.nodes) {
    json e = {{"name", n.name}, {"layer", layer_type_name(n.type())}, {"params", params_json(n.params)},
              {"inputs", n.inputs}, {"output", n.output}, {"extra_outputs", n.extra_outputs}, {"main", desc_json(n.main_desc)},
              {"tactic", graph::tactic_json(n.tactic)}};
    if (n.quantized()) e["folded_dequantize"] = n.folded_dequantize;
    if (!n.absorbed.empty()) e["absorbed"] = n.absorbed;
    auto& ep = e["epilogue"] = json::array();
    for (const auto& op : n.epilogue)
      ep.push_back({{"layer_name", op.layer},
                    {"layer", layer_type_name(static_cast<LayerType>(op.params.index()))},
                    {"params", params_json(op.params)},
                    {"operand", op.operand},
                    {"operand_first", op.operand_first},
                    {"out", desc_json(op.desc)}});
    nodes.push_back(std::move(e));
  }
  j["inputs"] = g.inputs;
  j["outputs"] = g.outputs;
  j["memory"] = {{"arena_bytes", plan.memory.arena_bytes},
                 {"naive_bytes", plan.memory.naive_bytes},
                 {"alignment", MemoryPlan::kAlignment},
                 {"workspace_bytes", plan.workspace_bytes}};
  j["build"] = plan.build;
  return j;
}

std::vector<std::byte> write_engine(const Plan& plan, int format_version) {
  return write_engine_with(plan, nullptr, format_version);
}

std::vector<std::byte> write_engine_with(const Plan& plan, const std::function<void(json&)>& edit, int format_version) {
  json doc = plan_to_json(plan);
  if (edit) edit(doc);
  return write_engine_text(plan, doc.dump(), {}, format_version);
}

std::vector<std::byte> write_engine_text(const Plan& plan, const std::string& plan_text, const std::string& target_text,
                                         int format_version) {
  std::vector<st::TensorData> tensors;
  for (std::size_t v = 0; v < plan.graph.values.size(); ++v) {
    const auto& val = plan.graph.values[v];
    if (!val.constant) continue;
    tensors.push_back({weight_name(v), st_dtype(val.desc.type), val.desc.dims.vec(), val.constant->bytes()});
  }
  st::Metadata meta;
  meta["tensoracle.format"] = std::to_string(format_version);
  meta["tensoracle.target"] = target_text.empty() ? plan.target.dump() : target_text;
  meta["tensoracle.plan"] = plan_text;
  meta[std::string(kDigestKey)] = std::string(kDigestPrefix) + std::string(kDigestHex, '0');
  auto bytes = st::serialize(tensors, meta);
  std::uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  auto at = digest_position(bytes, 8 + n);
  if (at == std::string_view::npos) throw BuildError("[engine] internal error: digest field not found");
  auto d = digest(bytes, at);
  std::memcpy(bytes.data() + at, d.data(), kDigestHex);
  return bytes;
}

namespace {

// Makes each plugin node's plugin from its stored fields, with the creators registered now.
void bind_plugins(graph::Graph& g, const std::string& name) {
  for (auto& n : g.nodes) {
    auto* p = std::get_if<PluginParams>(&n.params);
    if (!p) continue;
    const std::string key = plugin::creator_key(p->plugin_namespace, p->name, p->version);
    if (!plugin::has_creator(p->plugin_namespace, p->name, p->version))
      throw PluginLibraryError("[engine] " + name + ": layer '" + n.name + "' needs plugin creator '" + key +
                               "', which is not registered in this process; pass the plugin library that provides it "
                               "in plugins= (open_engine, load_engine, deserialize_engine) or load it with load_plugin_libraries first");
    try {
      p->plugin = plugin::create(n.name, *p);
    } catch (const Error& e) {
      throw PluginLibraryError("[engine] " + name + ": layer '" + n.name + "': the loaded library cannot make the plugin "
                               "stored in the engine (" + e.what() + "); load the library the engine was built with, "
                               "or rebuild the engine");
    }
  }
}

// A plan's numbers are integers except the float parameters the op units name
// (OpTraits::float_keys; nlohmann converts a float to an integer type, or a double to float, with
// a cast: undefined behaviour out of range). The build record is kept as JSON for inspection and
// never converted.
void check_numbers(const json& j, std::string_view key) {
  if (j.is_number_float()) {
    if (!graph::is_float_key(key))
      throw CorruptEngineError("[engine] its plan has a fraction where '" + std::string(key) + "' needs an integer");
    const double v = j.get<double>();
    if (!(std::fabs(v) <= static_cast<double>(std::numeric_limits<float>::max())))
      throw CorruptEngineError("[engine] its plan's '" + std::string(key) + "' is beyond float32's range");
  } else if (j.is_object()) {
    for (const auto& [k, v] : j.items())
      if (k != "build") check_numbers(v, k);
  } else if (j.is_array()) {
    for (const auto& v : j) check_numbers(v, key);
  }
}

// The I/O table as the builder writes it: the network's inputs, then its outputs, each entry
// naming its value, with the value's type and dims, and a profile of that rank. Executions bind
// caller buffers through it and size them from it, so any other table is corrupt.
template <class Corrupt>
void check_io(const Plan& plan, const Corrupt& corrupt) {
  const auto& g = plan.graph;
  if (plan.io.size() != plan.io_values.size() || plan.io.size() != g.inputs.size() + g.outputs.size())
    throw corrupt("its I/O table does not list the network's inputs and outputs");
  for (std::size_t i = 0; i < plan.io.size(); ++i) {
    const bool input = i < g.inputs.size();
    const auto& t = plan.io[i];
    const int v = input ? g.inputs[i] : g.outputs[i - g.inputs.size()];
    const auto& val = g.values[static_cast<std::size_t>(v)];
    const int rank = val.desc.dims.rank();
    if (plan.io_values[i] != v || t.mode != (input ? TensorIOMode::kINPUT : TensorIOMode::kOUTPUT) ||
        t.type != val.desc.type || !(t.dims == val.desc.dims) || t.min.rank() != rank || t.opt.rank() != rank ||
        t.max.rank() != rank || (input && !val.is_input) || (!input && !val.is_output))
      throw corrupt("I/O tensor '" + t.name + "' does not match value '" + val.name + "'");
  }
}

// The memory plan as plan_memory makes it: exactly the values a node produces that are
// neither network outputs nor constants have an arena offset, each aligned and with its
// planned bytes inside the arena. Kernels write those values through these offsets, so a plan
// that says otherwise is corrupt, not something to run.
template <class Corrupt>
void check_memory(const Plan& plan, const Corrupt& corrupt) {
  const auto& g = plan.graph;
  if (plan.memory.offsets.size() != g.values.size() || plan.max_bytes.size() != g.values.size())
    throw corrupt("its memory plan does not cover its values");
  const std::uint64_t arena = plan.memory.arena_bytes;
  for (std::size_t v = 0; v < g.values.size(); ++v) {
    const auto& val = g.values[v];
    const std::int64_t offset = plan.memory.offsets[v];
    const bool in_arena = val.producer >= 0 && !val.is_output && !val.constant;
    if (in_arena != (offset >= 0))
      throw corrupt("value '" + val.name + "' " + (in_arena ? "has no place in the arena" : "has an arena offset it cannot use"));
    if (offset < 0) continue;
    const auto off = static_cast<std::uint64_t>(offset);
    if (off % MemoryPlan::kAlignment != 0)
      throw corrupt("value '" + val.name + "' has arena offset " + std::to_string(off) + ", not a multiple of " +
                    std::to_string(MemoryPlan::kAlignment));
    if (off > arena || plan.max_bytes[v] > arena - off)
      throw corrupt("value '" + val.name + "' (" + std::to_string(plan.max_bytes[v]) + " bytes at offset " +
                    std::to_string(off) + ") does not fit the " + std::to_string(arena) + "-byte arena");
  }
}

}  // namespace

Plan read_engine(std::span<const std::byte> bytes, const std::string& name, std::shared_ptr<const void> owner,
                 bool verify_digest, bool with_plugins) {
  auto corrupt = [&](const std::string& why) -> CorruptEngineError {
    return CorruptEngineError("[engine] " + name + ": " + why + "; rebuild the engine");
  };
  std::optional<st::File> file;
  try {
    file = st::File::parse(bytes, name);
  } catch (const FormatError& e) {
    throw corrupt(std::string("damaged or truncated (") + e.what() + ")");
  }
  const auto& meta = file->metadata();
  auto get = [&](std::string_view key) -> const std::string& {
    auto it = meta.find(std::string(key));
    if (it == meta.end()) throw corrupt("not a tensoracle engine (no '" + std::string(key) + "' metadata)");
    return it->second;
  };
  // Untrusted JSON: malformed or too deeply nested (it would overflow the stack when used).
  auto parse = [&](const std::string& text, const char* what) {
    try {
      return core::parse_untrusted(text);
    } catch (const core::JsonError& e) {
      throw corrupt(std::string("its ") + what + " is unreadable: " + e.what());
    }
  };
  const std::string& stored = get(kDigestKey);
  auto at = digest_position(bytes, file->data_offset());
  if (at == std::string_view::npos || stored.size() != kDigestPrefix.size() + kDigestHex)
    throw corrupt("its digest field is malformed");
  if (verify_digest && stored.substr(kDigestPrefix.size()) != digest(bytes, at))
    throw corrupt("damaged: its digest does not match its contents");
  const std::string& format = get("tensoracle.format");
  if (format != std::to_string(kEngineFormatVersion))
    throw IncompatibleEngineError("[engine] " + name + ": engine format version " + format +
                                  "; this tensoracle reads version " + std::to_string(kEngineFormatVersion) +
                                  "; rebuild the engine");
  Plan plan;
  try {
    plan.target = parse(get("tensoracle.target"), "target");
    // Backends read the target's fields as strings, integers and lists of strings (the CPU's
    // instruction sets): check_compatible and inspect must not meet anything else.
    if (!plan.target.is_object()) throw corrupt("its target is not a JSON object");
    for (const auto& [key, v] : plan.target.items()) {
      static constexpr std::array<std::string_view, 5> kStrings = {"backend", "device", "arch", "onednn", "compute_capability"};
      const bool text = std::find(kStrings.begin(), kStrings.end(), key) != kStrings.end();
      const bool strings = v.is_array() && std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_string(); });
      if (!v.is_string() && (text || !(v.is_number_integer() || strings)))
        throw corrupt("its target's field " + core::quote_name(key) + " is not " +
                      (text ? "a string" : "a string, an integer or a list of strings"));
    }
    json j = parse(get("tensoracle.plan"), "plan");
    check_numbers(j, "plan");
    plan.name = j.at("name").get<std::string>();
    auto& g = plan.graph;
    for (const auto& e : j.at("values")) {
      graph::Value v;
      v.name = e.at("name").get<std::string>();
      v.desc = {type_of(e.at("type")), dims_of(e.at("dims"))};
      v.producer = e.at("producer").get<int>();
      v.is_input = e.at("role") == "input";
      v.is_output = e.at("is_output").get<bool>();
      v.layout = graph::layout_of(e.at("layout"));
      plan.memory.offsets.push_back(e.at("arena_offset").get<std::int64_t>());
      plan.max_bytes.push_back(e.at("max_bytes").get<std::uint64_t>());
      if (e.contains("weight")) {
        const auto& t = file->at(e.at("weight").get<std::string>());
        if (t.dtype != st_dtype(v.desc.type) || t.shape != v.desc.dims.vec())
          throw corrupt("weight '" + t.name + "' does not match its value");
        auto view = file->view(t).bytes();
        v.constant = Weights(v.desc.type, view.data(), static_cast<std::int64_t>(t.numel()), owner);
      }
      g.values.push_back(std::move(v));
    }
    for (const auto& e : j.at("nodes")) {
      graph::Node n;
      n.name = e.at("name").get<std::string>();
      n.params = params_of(e.at("layer").get<std::string>(), e.at("params"));
      n.inputs = e.at("inputs").get<std::vector<int>>();
      n.output = e.at("output").get<int>();
      n.extra_outputs = e.at("extra_outputs").get<std::vector<int>>();
      n.main_desc = desc_of(e.at("main"));
      n.tactic = graph::tactic_of(e.at("tactic"));
      if (e.contains("folded_dequantize")) {
        n.folded_dequantize = e.at("folded_dequantize").get<std::vector<std::string>>();
        if (n.folded_dequantize.size() != 2) throw corrupt("node '" + n.name + "' folds a number of dequantize layers other than 2");
      }
      if (e.contains("absorbed")) n.absorbed = e.at("absorbed").get<std::vector<std::string>>();
      for (const auto& o : e.at("epilogue")) {
        graph::EpilogueOp op;
        op.layer = o.at("layer_name").get<std::string>();
        op.params = params_of(o.at("layer").get<std::string>(), o.at("params"));
        op.operand = o.at("operand").get<int>();
        op.operand_first = o.at("operand_first").get<bool>();
        op.desc = desc_of(o.at("out"));
        n.epilogue.push_back(std::move(op));
      }
      g.nodes.push_back(std::move(n));
    }
    g.inputs = j.at("inputs").get<std::vector<int>>();
    g.outputs = j.at("outputs").get<std::vector<int>>();
    for (const auto& e : j.at("io")) {
      IOTensorInfo t;
      t.name = e.at("name").get<std::string>();
      t.mode = e.at("mode") == "input" ? TensorIOMode::kINPUT : TensorIOMode::kOUTPUT;
      t.type = type_of(e.at("type"));
      t.dims = dims_of(e.at("dims"));
      t.min = dims_of(e.at("min"));
      t.opt = dims_of(e.at("opt"));
      t.max = dims_of(e.at("max"));
      plan.io.push_back(std::move(t));
      plan.io_values.push_back(e.at("value").get<int>());
    }
    const auto& m = j.at("memory");
    plan.memory.arena_bytes = m.at("arena_bytes").get<std::uint64_t>();
    plan.memory.naive_bytes = m.at("naive_bytes").get<std::uint64_t>();
    plan.workspace_bytes = m.at("workspace_bytes").get<std::uint64_t>();
    plan.build = j.at("build");
    if (with_plugins) bind_plugins(g, name);
    graph::verify(g, "load");
    check_io(plan, corrupt);
    check_memory(plan, corrupt);
  } catch (const CorruptEngineError& e) {
    // The plan's readers (op units, tactics) say what is wrong but not which file.
    const std::string_view what = e.what(), prefix = "[engine] ";
    if (what.starts_with(prefix) && !what.substr(prefix.size()).starts_with(name + ": "))
      throw corrupt(std::string(what.substr(prefix.size())));
    throw;
  } catch (const PluginLibraryError&) {
    throw;
  } catch (const std::exception& e) {
    throw corrupt(std::string("its plan is inconsistent: ") + e.what());
  }
  return plan;
}

}  // namespace tensoracle::plan
