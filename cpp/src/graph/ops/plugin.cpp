// Op unit: the plugin layer. How backends run it: backends/cpu/ops/plugin.cpp and
// backends/cuda/ops/plugin.cu where they exist. Every layer's unit is listed in
// graph/ops/registry.cpp.
#include <algorithm>
#include <array>

#include "graph/ops/common.h"
#include "plugin/instance.h"

namespace tensoracle::graph {

namespace ops {

namespace {

// Plugin fields: {"name", "type", "data": hex of the bytes}. Read back strictly: engine files
// are untrusted bytes, and the fields reach a plugin's create function.
constexpr std::array<PluginFieldType, 6> kFieldTypes = {PluginFieldType::kINT32,   PluginFieldType::kINT64,
                                                        PluginFieldType::kFLOAT32, PluginFieldType::kFLOAT64,
                                                        PluginFieldType::kSTRING,  PluginFieldType::kBYTES};
constexpr std::size_t kMaxFieldBytes = std::size_t{1} << 26;

std::string hex_of(std::span<const std::byte> bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (std::byte b : bytes) {
    s += kHex[static_cast<unsigned>(b) >> 4];
    s += kHex[static_cast<unsigned>(b) & 0xF];
  }
  return s;
}

json fields_json(const std::vector<PluginField>& fields) {
  json a = json::array();
  for (const auto& f : fields)
    a.push_back({{"name", f.name}, {"type", plugin_field_type_name(f.type)}, {"data", hex_of(f.data)}});
  return a;
}

std::vector<PluginField> fields_of(const json& j) {
  auto bad = [](const std::string& why) { return CorruptEngineError("[engine] a plugin field " + why + " in the plan"); };
  if (!j.is_array()) throw bad("list is not an array");
  std::vector<PluginField> out;
  for (const auto& e : j) {
    if (!e.is_object() || e.size() != 3 || !e.contains("name") || !e.contains("type") || !e.contains("data") ||
        !e["name"].is_string() || !e["type"].is_string() || !e["data"].is_string())
      throw bad("is not an object of a string name, type and data");
    PluginField f;
    f.name = e["name"].get<std::string>();
    const auto type = e["type"].get<std::string>();
    auto t = std::find_if(kFieldTypes.begin(), kFieldTypes.end(), [&](PluginFieldType x) { return plugin_field_type_name(x) == type; });
    if (t == kFieldTypes.end()) throw bad("'" + f.name + "' has unknown type '" + type + "'");
    f.type = *t;
    const auto& hex = e["data"].get_ref<const std::string&>();
    if (hex.size() % 2 != 0 || hex.size() / 2 > kMaxFieldBytes) throw bad("'" + f.name + "' has data of a bad length");
    f.data.resize(hex.size() / 2);
    auto digit = [&](char c) -> unsigned {
      if (c >= '0' && c <= '9') return static_cast<unsigned>(c - '0');
      if (c >= 'a' && c <= 'f') return static_cast<unsigned>(c - 'a' + 10);
      throw bad("'" + f.name + "' has data that is not lower-case hex");
    };
    for (std::size_t i = 0; i < f.data.size(); ++i) f.data[i] = std::byte((digit(hex[2 * i]) << 4) | digit(hex[2 * i + 1]));
    if (f.data.size() % plugin_field_element_size(f.type) != 0)
      throw bad("'" + f.name + "' holds " + std::to_string(f.data.size()) + " bytes, not whole " + type + " elements");
    out.push_back(std::move(f));
  }
  return out;
}


std::vector<TensorDesc> infer_op(const PluginParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  if (!p.plugin)
    invalid("plugin creator '" + (p.plugin_namespace.empty() ? "" : p.plugin_namespace + "::") + p.name + "/" + p.version +
            "' is not loaded; pass the plugin library that provides it in plugins=");
  if (p.output < -1 || p.output >= p.plugin->num_outputs())
    invalid("output " + std::to_string(p.output) + " is not -1 or one of the plugin's " +
            std::to_string(p.plugin->num_outputs()) + " outputs");
  std::vector<PluginTensorDesc> pin;
  for (const auto& d : in) pin.push_back({d.type, d.dims});
  auto pout = p.plugin->output_descs(pin);
  std::vector<TensorDesc> out;
  for (const auto& d : pout) out.push_back({d.type, d.dims});
  if (p.output >= 0) return {out[static_cast<std::size_t>(p.output)]};
  return out;
}

json params_to_json(const PluginParams& p) {
  return {{"creator", p.name}, {"version", p.version}, {"namespace", p.plugin_namespace}, {"output", p.output},
          {"fields", fields_json(p.fields)}};
}

PluginParams params_from_json(const json& j) {
  return PluginParams{j.at("creator").get<std::string>(), j.at("version").get<std::string>(),
                      j.at("namespace").get<std::string>(), fields_of(j.at("fields")), j.at("output").get<std::int32_t>(),
                      nullptr};
}

}  // namespace

extern const OpTraits kPluginOp =
    make_op<PluginParams, infer_op, params_to_json, params_from_json>("plugin", {0, -1});

}  // namespace ops

}  // namespace tensoracle::graph
