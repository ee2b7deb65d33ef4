// `tensoracle inspect FILE [--json]`: an engine, a safetensors file, or a torch checkpoint.
#include <fmt/core.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/mapped_file.h"
#include "plan/plan.h"
#include "tensoracle/convert.h"
#include "tensoracle/errors.h"
#include "tensoracle/engine.h"
#include "tensoracle/safetensors.h"
#include "tools/commands.h"
#include "tools/sniff.h"

namespace tensoracle::tools {

namespace {

namespace st = tensoracle::safetensors;

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string human_bytes(std::uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", n) : fmt::format("{:.1f} {}", v, units[u]);
}

int inspect_json(const st::File& f) {
  nlohmann::ordered_json j;
  j["file"] = f.display_name();
  j["format"] = "safetensors";
  j["file_size"] = f.file_size();
  j["header_size"] = f.header_size();
  j["metadata"] = f.has_metadata() ? nlohmann::ordered_json(f.metadata()) : nlohmann::ordered_json(nullptr);
  auto& tensors = j["tensors"] = nlohmann::ordered_json::array();
  for (const auto& t : f.tensors()) {
    tensors.push_back({{"name", t.name},
                       {"dtype", st::dtype_name(t.dtype)},
                       {"shape", t.shape},
                       {"bytes", t.nbytes()},
                       {"data_offsets", {t.begin, t.end}},
                       {"file_offset", f.data_offset() + t.begin}});
  }
  fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
  return 0;
}

int inspect_text(const st::File& f) {
  fmt::print("file:     {}\n", f.display_name());
  fmt::print("format:   safetensors, {} ({} bytes), header {} bytes, {} tensors\n",
             human_bytes(f.file_size()), f.file_size(), f.header_size(), f.tensors().size());
  if (f.has_metadata()) {
    fmt::print("metadata: {} entries\n", f.metadata().size());
    for (const auto& [k, v] : f.metadata()) fmt::print("  {}: {}\n", k, v);
  } else {
    fmt::print("metadata: none\n");
  }
  std::size_t wn = 4, ws = 5;
  for (const auto& t : f.tensors()) {
    wn = std::max(wn, t.name.size());
    ws = std::max(ws, shape_text(t.shape).size());
  }
  fmt::print("{:<{}}  {:<7}  {:<{}}  {:>14}  {:>14}\n", "name", wn, "dtype", "shape", ws, "bytes",
             "offset");
  for (const auto& t : f.tensors())
    fmt::print("{:<{}}  {:<7}  {:<{}}  {:>14}  {:>14}\n", t.name, wn, st::dtype_name(t.dtype),
               shape_text(t.shape), ws, t.nbytes(), f.data_offset() + t.begin);
  return 0;
}

std::string dims_text(const Dims& d) { return d.str(); }

// Reads the engine's plan without opening it on a backend: a CUDA engine is inspected on a
// machine without a GPU, and a large one without uploading its weights.
int inspect_engine(const std::string& path, bool json) {
  core::MappedFile map(path, false, "engine");
  plan::Plan p;
  try {
    p = plan::read_engine(map.bytes(), path, nullptr, true, /*with_plugins=*/false);
  } catch (const FormatError& e) {
    throw CorruptEngineError(std::string(e.what()) + "; expected an engine file");
  }
  auto plan = nlohmann::ordered_json::parse(plan::plan_to_json(p).dump());
  auto target = nlohmann::ordered_json::parse(p.target.dump());
  std::uint64_t weight_bytes = 0;
  for (const auto& v : p.graph.values)
    if (v.constant) weight_bytes += v.constant->bytes().size();
  if (json) {
    nlohmann::ordered_json j;
    j["file"] = path;
    j["format"] = "tensoracle engine";
    j["format_version"] = kEngineFormatVersion;
    j["target"] = target;
    j["plan"] = plan;
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("file:     {}\n", path);
  fmt::print("format:   tensoracle engine, version {}\n", kEngineFormatVersion);
  const std::string backend = target.value("backend", "?");
  const std::string detail = backend == "cuda" ? "compute capability " + target.value("compute_capability", std::string("?"))
                                               : target.value("arch", std::string("?"));
  fmt::print("target:   {} ({}, {})\n", backend, target.value("device", "?"), detail);
  fmt::print("inputs and outputs:\n");
  for (const auto& t : p.io)
    fmt::print("  {:<6} {:<20} {:<9} {}  min {} opt {} max {}\n", t.mode == TensorIOMode::kINPUT ? "input" : "output",
               t.name, type_name(t.type), dims_text(t.dims), dims_text(t.min), dims_text(t.opt), dims_text(t.max));
  fmt::print("nodes:    {} (after fusion)\n", p.graph.nodes.size());
  for (const auto& n : p.graph.nodes) {
    std::string fused;
    for (const auto& name : graph::fused_layers(n)) fused += " + " + name;
    if (const auto* pp = std::get_if<PluginParams>(&n.params))
      fused += "  creator " + (pp->plugin_namespace.empty() ? "" : pp->plugin_namespace + "::") + pp->name + "/" + pp->version;
    if (!n.extra_outputs.empty()) {
      fused += "  outputs";
      for (int v : n.outputs()) fused += " " + p.graph.values[static_cast<std::size_t>(v)].name;
    }
    if (p.graph.values[static_cast<std::size_t>(n.output)].layout == graph::Layout::kChannelsLast)
      fused += "  output channels-last";
    fmt::print("  {:<24} {:<16} {:<8} tactic {:<20}{}\n", n.name, layer_type_name(n.type()),
               type_name(graph::arithmetic_type(p.graph, n)), graph::describe(n.tactic),
               fused.empty() ? "" : fused.rfind(" + ", 0) == 0 ? "  fused:" + fused.substr(2) : fused);
  }
  const auto& mem = plan["memory"];
  fmt::print("memory:   activations {} bytes (sum of sizes {}), scratch {} bytes, weights {} bytes\n",
             mem["arena_bytes"].get<std::uint64_t>(), mem["naive_bytes"].get<std::uint64_t>(),
             mem["workspace_bytes"].get<std::uint64_t>(), weight_bytes);
  return 0;
}

// A torch checkpoint: a zip archive ("PK\x03\x04"), or a pickle (the legacy format: refused
// by inspect_pth with a message saying what it is). A safetensors file has '{' at byte 8 (its
// header follows the 8-byte length, whose first byte may well be 0x80), which neither has.
bool looks_like_checkpoint(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char head[9] = {};
  f.read(head, sizeof head);
  auto n = f.gcount();
  if (n < 1 || (n == 9 && head[8] == '{')) return false;
  if (static_cast<unsigned char>(head[0]) == 0x80) return true;
  return n >= 4 && std::string_view(head, 4) == std::string_view("PK\x03\x04", 4);
}

std::string dtype_text(const CheckpointTensor& t) {
  return t.dtype ? std::string(st::dtype_name(*t.dtype)) : std::string("(none)");
}

int inspect_checkpoint(const std::string& path, bool json) {
  CheckpointInfo c = inspect_pth(path);
  if (json) {
    nlohmann::ordered_json j;
    j["file"] = c.file;
    j["format"] = "torch checkpoint";
    j["file_size"] = c.file_size;
    j["archive"] = c.archive;
    j["byteorder"] = c.byteorder;
    j["format_version"] = c.format_version;
    j["pickle_protocol"] = c.pickle_protocol;
    j["storages"] = c.storages;
    j["storage_bytes"] = c.storage_bytes;
    auto& tensors = j["tensors"] = nlohmann::ordered_json::array();
    for (const auto& t : c.tensors) {
      nlohmann::ordered_json x = {{"name", t.name},
                                  {"torch_dtype", t.torch_dtype},
                                  {"dtype", t.dtype ? nlohmann::ordered_json(st::dtype_name(*t.dtype)) : nlohmann::ordered_json(nullptr)},
                                  {"shape", t.shape},
                                  {"stride", t.stride},
                                  {"storage_offset", t.storage_offset},
                                  {"storage", t.storage},
                                  {"bytes", t.nbytes},
                                  {"contiguous", t.contiguous},
                                  {"parameter", t.parameter},
                                  {"requires_grad", t.requires_grad},
                                  {"shares_storage_with", t.shares_storage_with}};
      tensors.push_back(std::move(x));
    }
    auto& values = j["values"] = nlohmann::ordered_json::object();
    for (const auto& [k, v] : c.values) values[k] = v;  // JSON text, as it goes into the metadata
    fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
    return 0;
  }
  std::uint64_t tensor_bytes = 0;
  for (const auto& t : c.tensors) tensor_bytes += t.nbytes;
  fmt::print("file:     {}\n", c.file);
  fmt::print("format:   torch checkpoint (zip), {} ({} bytes), folder '{}', version {}, pickle protocol {}, {}-endian\n",
             human_bytes(c.file_size), c.file_size, c.archive, c.format_version, c.pickle_protocol, c.byteorder);
  fmt::print("storages: {} ({}); tensors: {} ({})\n", c.storages, human_bytes(c.storage_bytes), c.tensors.size(),
             human_bytes(tensor_bytes));
  if (!c.values.empty()) {
    fmt::print("values:   {} (kept as JSON metadata)\n", c.values.size());
    for (const auto& [k, v] : c.values)
      fmt::print("  {}: {}\n", k, v.size() > 200 ? v.substr(0, 200) + "..." : v);
  }
  std::size_t wn = 4, ws = 5;
  for (const auto& t : c.tensors) {
    wn = std::max(wn, t.name.size());
    ws = std::max(ws, shape_text(t.shape).size());
  }
  fmt::print("{:<{}}  {:<16}  {:<7}  {:<{}}  {:>14}  {}\n", "name", wn, "torch dtype", "out", "shape", ws, "bytes", "notes");
  for (const auto& t : c.tensors) {
    std::string notes = t.storage;
    if (!t.contiguous) notes += ", view (stride " + shape_text(t.stride) + ", offset " + std::to_string(t.storage_offset) + ")";
    if (t.parameter) notes += ", parameter";
    if (!t.shares_storage_with.empty()) notes += ", shares storage with " + std::to_string(t.shares_storage_with.size());
    if (!t.dtype) notes += ", NOT CONVERTIBLE (no safetensors dtype)";
    fmt::print("{:<{}}  {:<16}  {:<7}  {:<{}}  {:>14}  {}\n", t.name, wn, t.torch_dtype, dtype_text(t), shape_text(t.shape), ws,
               t.nbytes, notes);
  }
  return 0;
}

}  // namespace

Command add_inspect(CLI::App& app) {
  auto* sub = app.add_subcommand("inspect", "Show an engine (format, target, I/O, fused nodes with tactics, "
                                            "memory plan), a safetensors file (metadata; each tensor's name, "
                                            "dtype, shape, bytes, file offset) or a torch checkpoint (what "
                                            "convert would write)");
  auto path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  sub->add_option("FILE", *path, "engine, safetensors file or torch checkpoint (.pth)")->required();
  sub->add_flag("--json", *json, "print JSON instead of a table");
  return [path, json] {
    // A file of another known kind is named for what it is; unknown bytes go to the readers,
    // whose messages say what is damaged.
    require_kind("inspect", *path, {FileKind::kSafetensors, FileKind::kTorchZip, FileKind::kTorchLegacy, FileKind::kOther},
                 "an engine, a safetensors file or a torch checkpoint (.pth)");
    if (looks_like_checkpoint(*path)) return inspect_checkpoint(*path, *json);
    auto f = st::File::open(*path);
    if (f.metadata().count("tensoracle.format")) return inspect_engine(*path, *json);
    return *json ? inspect_json(f) : inspect_text(f);
  };
}

}  // namespace tensoracle::tools
