// `tensoracle bench ENGINE [--iterations N] [--warmup N] [--warmup-ms MS] [--duration S]
//  [--shape NAME=DIMS]... [--shapes NAME:DIMS,...] [--threads N]
//  [--plugins LIB]... [--per-layer] [--json]`: latency percentiles, throughput and memory of one
// execution. An engine with plugin layers needs the libraries of its plugins (--plugins, loaded
// before the engine opens, as open_engine's plugins=).
//
// Inputs are filled once before timing: floating inputs uniform in [-1, 1) (seeded), integer
// and bool inputs zero (a valid index for any gather). Dynamic inputs take the profile's opt
// shape unless --shape gives one. Each timed iteration is one enqueue() (the CPU backend runs
// to completion inside it; on CUDA, enqueue on the engine's stream + waiting for it, so a
// latency includes the launch: after the first iterations that is one CUDA-graph replay);
// --per-layer then runs the same number of profiled iterations and reports each fused node's
// median (on CUDA each node is waited for, so its time includes its launch).
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "tensoracle/engine.h"
#include "tensoracle/plugin_library.h"
#include "tensoracle/errors.h"
#include "tools/commands.h"
#include "tools/sniff.h"
#include "tools/tensor_files.h"

namespace tensoracle::tools {

namespace {

struct Options {
  std::string path;
  int iterations = 100;
  int warmup = 10;
  double warmup_ms = 0;   // and warm up for at least this long (trtexec's --warmUp)
  double duration_s = 0;  // time for at least this long, and at least `iterations` (trtexec's --duration)
  int threads = 0;
  bool per_layer = false;
  bool json = false;
  std::vector<std::string> shapes;
  std::vector<std::string> shape_lists;
  std::vector<std::string> plugins;
};

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return 0;
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(pos);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

int run(const Options& o) {
  if (o.iterations < 1 || o.warmup < 0)
    throw InvalidArgument("[bench] --iterations must be >= 1 and --warmup >= 0");
  if (!(o.warmup_ms >= 0 && o.warmup_ms <= 3.6e6) || !(o.duration_s >= 0 && o.duration_s <= 86400))
    throw InvalidArgument("[bench] --warmup-ms must be in [0, 3600000] and --duration in [0, 86400] seconds");
  if (o.threads < 0) throw InvalidArgument("[bench] --threads must be >= 0 (0: all cores)");
  if (o.threads > 0) set_cpu_threads(o.threads);
  require_kind("bench", o.path, {FileKind::kSafetensors, FileKind::kOther}, "an engine file (from save_engine or the cache)");
  if (!o.plugins.empty()) load_plugin_libraries({o.plugins.begin(), o.plugins.end()});
  std::optional<Engine> opened;
  try {
    opened.emplace(Engine::load(o.path));
  } catch (const PluginLibraryError& e) {
    throw PluginLibraryError(std::string(e.what()) + " (here: tensoracle bench ENGINE --plugins LIB)");
  }
  Engine& engine = *opened;
  Execution ex = engine.create_execution();
  std::map<std::string, Dims> given;
  for (auto& g : given_shapes(engine, o.shapes, o.shape_lists, "bench")) given[g.name] = g.dims;
  std::mt19937 rng(12345);
  std::vector<std::vector<std::byte>> buffers;
  nlohmann::ordered_json inputs = nlohmann::ordered_json::object();
  std::uint64_t io_bytes = 0;
  std::vector<std::string> defaulted;
  for (const auto& t : engine.io_tensors()) {
    if (t.mode != TensorIOMode::kINPUT) continue;
    Dims d = given.count(t.name) ? given[t.name] : t.opt;
    if (!given.count(t.name) && t.min != t.max) defaulted.push_back(t.name + " " + d.str());
    ex.set_input_shape(t.name, d);  // checks the profile
    inputs[t.name] = d.vec();
  }
  std::vector<Dims> shapes;  // every I/O tensor's, inferred from the inputs'
  with_shape_hint(defaulted, !given.empty(), "bench", [&] {
    for (const auto& t : engine.io_tensors()) shapes.push_back(ex.tensor_shape(t.name));
  });
  // I/O buffers in the engine's memory (the device's for CUDA), inputs filled on the host.
  std::vector<std::shared_ptr<void>> device_buffers;
  std::size_t io_index = 0;
  for (const auto& t : engine.io_tensors()) {
    Dims d = shapes[io_index++];
    buffers.emplace_back(static_cast<std::size_t>(std::max<std::int64_t>(d.volume(), 0)) * element_size(t.type) + 1);
    io_bytes += buffers.back().size() - 1;
    if (t.mode == TensorIOMode::kINPUT) fill_generated(buffers.back(), t.type, rng);
    device_buffers.push_back(engine.allocate(buffers.back().size()));
    engine.copy_from_host(device_buffers.back().get(), buffers.back().data(), buffers.back().size());
    ex.set_tensor_address(t.name, device_buffers.back().get());
  }
  const std::shared_ptr<void> stream = engine.create_stream();  // null for the CPU
  auto once = [&] {
    ex.enqueue(stream.get());
    engine.synchronize(stream.get());
  };
  int warmed = 0;
  const auto w0 = std::chrono::steady_clock::now();
  while (warmed < o.warmup ||
         std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w0).count() < o.warmup_ms) {
    once();
    ++warmed;
  }
  std::vector<double> ms;
  const auto t0 = std::chrono::steady_clock::now();
  while (static_cast<int>(ms.size()) < o.iterations ||
         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < o.duration_s) {
    const auto a = std::chrono::steady_clock::now();
    once();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  const int timed = static_cast<int>(ms.size());
  const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double mean = std::accumulate(ms.begin(), ms.end(), 0.0) / static_cast<double>(ms.size());
  std::int64_t batch = 1;
  for (const auto& t : engine.io_tensors())
    if (t.mode == TensorIOMode::kINPUT && ex.tensor_shape(t.name).rank() > 0) {
      batch = ex.tensor_shape(t.name)[0];
      break;
    }

  auto layers = engine.layers();
  std::vector<double> layer_ms(layers.size(), 0.0);
  if (o.per_layer) {
    std::vector<std::vector<double>> samples(layers.size());
    for (int i = 0; i < o.iterations; ++i) {
      auto s = ex.enqueue_profiled(stream.get());
      for (std::size_t k = 0; k < s.size() && k < samples.size(); ++k) samples[k].push_back(s[k] * 1e3);
    }
    for (std::size_t k = 0; k < layers.size(); ++k) layer_ms[k] = percentile(samples[k], 0.5);
  }
  const double layer_sum = std::accumulate(layer_ms.begin(), layer_ms.end(), 0.0);

  nlohmann::ordered_json j;
  j["engine"] = o.path;
  j["device"] = nlohmann::json::parse(engine.target_json()).value("device", std::string("?"));
  j["threads"] = cpu_threads();
  j["inputs"] = inputs;
  j["iterations"] = timed;
  j["warmup"] = warmed;
  j["latency_ms"] = {{"median", percentile(ms, 0.5)}, {"p90", percentile(ms, 0.9)}, {"p99", percentile(ms, 0.99)},
                     {"mean", mean}, {"min", *std::min_element(ms.begin(), ms.end())},
                     {"max", *std::max_element(ms.begin(), ms.end())}};
  j["throughput"] = {{"inferences_per_s", static_cast<double>(timed) / total_s},
                     {"batch", batch},
                     {"items_per_s", static_cast<double>(timed * batch) / total_s}};
  j["memory_bytes"] = {{"weights", engine.weight_bytes()}, {"activations", engine.activation_bytes()}, {"io", io_bytes}};
  if (o.per_layer) {
    auto& out = j["layers"] = nlohmann::ordered_json::array();
    for (std::size_t k = 0; k < layers.size(); ++k)
      out.push_back({{"name", layers[k].name}, {"type", layers[k].type}, {"tactic", layers[k].tactic},
                     {"fused", layers[k].fused}, {"median_ms", layer_ms[k]},
                     {"share", layer_sum > 0 ? layer_ms[k] / layer_sum : 0.0}});
  }
  if (o.json) {
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("engine:     {} ({})\n", o.path, j["device"].get<std::string>());
  std::string in_text;
  for (const auto& [name, dims] : inputs.items()) in_text += (in_text.empty() ? "" : ", ") + name + " " + dims.dump();
  fmt::print("inputs:     {}; {} thread(s); {} warm-up + {} timed iterations\n", in_text, cpu_threads(), warmed, timed);
  fmt::print("latency:    median {:.3f} ms, p90 {:.3f}, p99 {:.3f}, mean {:.3f}, min {:.3f}, max {:.3f}\n",
             percentile(ms, 0.5), percentile(ms, 0.9), percentile(ms, 0.99), mean, j["latency_ms"]["min"].get<double>(),
             j["latency_ms"]["max"].get<double>());
  fmt::print("throughput: {:.1f} inferences/s, {:.1f} items/s (batch {})\n", static_cast<double>(timed) / total_s,
             static_cast<double>(timed * batch) / total_s, batch);
  fmt::print("memory:     weights {} B, activations {} B, inputs + outputs {} B\n", engine.weight_bytes(),
             engine.activation_bytes(), io_bytes);
  if (o.per_layer) {
    std::vector<std::size_t> order(layers.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return layer_ms[a] > layer_ms[b]; });
    fmt::print("\nper layer (median of {} profiled runs; sum {:.3f} ms):\n", o.iterations, layer_sum);
    fmt::print("  {:>9}  {:>6}  {:<28} {:<16} {}\n", "ms", "share", "node", "type", "tactic + fused");
    for (std::size_t k : order) {
      std::string fused;
      for (const auto& f : layers[k].fused) fused += (fused.empty() ? " + " : ", ") + f;
      fmt::print("  {:>9.3f}  {:>5.1f}%  {:<28} {:<16} {}{}\n", layer_ms[k], layer_sum > 0 ? 100 * layer_ms[k] / layer_sum : 0.0,
                 layers[k].name, layers[k].type, layers[k].tactic, fused);
    }
  }
  return 0;
}

}  // namespace

int bench_engine(const BenchRequest& r) {
  Options o;
  o.path = r.path;
  o.iterations = r.iterations;
  o.warmup = r.warmup;
  o.warmup_ms = r.warmup_ms;
  o.duration_s = r.duration_s;
  o.per_layer = r.per_layer;
  return run(o);
}

Command add_bench(CLI::App& app) {
  auto* sub = app.add_subcommand("bench", "Time an engine on this machine: latency (median, p90, p99, mean), throughput "
                                          "and memory; --per-layer times each fused node");
  auto o = std::make_shared<Options>();
  sub->add_option("ENGINE", o->path, "engine file")->required();
  sub->add_option("--iterations", o->iterations, "timed iterations, at least (default 100)");
  sub->add_option("--warmup", o->warmup, "untimed iterations first, at least (default 10)");
  sub->add_option("--warmup-ms,--warmUp", o->warmup_ms, "warm up for at least this many milliseconds too (trtexec's --warmUp)")
      ->type_name("MS");
  sub->add_option("--duration", o->duration_s, "time for at least this many seconds (and at least --iterations)")
      ->type_name("S");
  sub->add_option("--shape", o->shapes, "NAME=D1xD2x... for a dynamic input (default: the profile's opt)");
  sub->add_option("--shapes", o->shape_lists,
                  "every input's shape in one flag: NAME:D1xD2x...,NAME:... (trtexec's spelling; = works as well as :)")
      ->type_name("LIST");
  sub->add_option("--threads", o->threads, "CPU threads (default: all cores)");
  sub->add_option("--plugins", o->plugins, "plugin libraries the engine's plugin layers need (repeat or list)");
  sub->add_flag("--per-layer", o->per_layer, "also time each fused node");
  sub->add_flag("--json", o->json, "print JSON instead of text");
  return [o] { return run(*o); };
}

}  // namespace tensoracle::tools
