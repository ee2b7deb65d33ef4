// `tensoracle build MODEL.onnx [--saveEngine=FILE] [--minShapes=.. --optShapes=.. --maxShapes=..]
//  [--shapes=..] [--memPoolSize=workspace:SIZE] [--builderOptimizationLevel=N] [--device=D]
//  [--int8] [--fp8] [--best] [--iterations=N] [--warmUp=MS] [--duration=S] [--dumpProfile]
//  [--skipInference] [--threads=N]`: trtexec's workflow. Parses the ONNX model (OnnxParser),
// builds an engine for the device, saves it, then times it as `tensoracle bench` does.
//
// Shapes: an input with -1 dims takes min/opt/max from --minShapes/--optShapes/--maxShapes (all
// three), else --shapes (fixed), else the build stops naming it. Precision flags: the network is
// weakly typed as TensorRT's: --fp16 (and --best) or --bf16 let the builder compute float32
// layers in that type (BuilderSettings::weak_precision; reductions and normalizations stay
// float32); --int8 and --fp8 change nothing and say so (quantization is the model's Q/DQ nodes).
#include <fmt/core.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tensoracle/builder.h"
#include "tensoracle/engine.h"
#include "tensoracle/errors.h"
#include "tensoracle/network.h"
#include "tensoracle/onnx_parser.h"
#include "tools/commands.h"
#include "tools/tensor_files.h"

namespace tensoracle::tools {

namespace {

// The build's progress (a ProgressMonitor) on stdout, with the command's clock: each part of
// the build as a line when it ends (steps and seconds); on a terminal, also a bar redrawn in
// place while a part runs (tactic timing on CUDA is the long one).
class ProgressLines final : public ProgressMonitor {
 public:
  explicit ProgressLines(std::function<double()> seconds) : seconds_(std::move(seconds)), tty_(::isatty(STDOUT_FILENO) == 1) {}
  void phase_start(const std::string& phase, const std::string& parent, int num_steps) override {
    if (parent.empty()) return;  // the whole build: the command prints its own lines around it
    steps_ = num_steps;
    started_ = seconds_();
  }
  bool step_complete(const std::string& phase, int step) override {
    if (tty_ && steps_ > 0 && phase != "Building engine") {
      constexpr int kWidth = 30;
      const int done = (step + 1) * kWidth / steps_;
      fmt::print("\r[{:6.2f} s]   {} [{}{}] {}/{}", seconds_(), phase, std::string(static_cast<std::size_t>(done), '#'),
                 std::string(static_cast<std::size_t>(kWidth - done), '.'), step + 1, steps_);
      std::fflush(stdout);
    }
    return true;
  }
  void phase_finish(const std::string& phase) override {
    if (phase == "Building engine") return;
    fmt::print("{}[{:6.2f} s]   {}: {} step{} in {:.2f} s\n", tty_ ? "\r\x1b[K" : "", seconds_(), phase, steps_,
               steps_ == 1 ? "" : "s", seconds_() - started_);
    std::fflush(stdout);
  }

 private:
  std::function<double()> seconds_;
  bool tty_;
  int steps_ = 0;
  double started_ = 0;
};

struct Options {
  std::string model;
  std::string onnx;  // --onnx=FILE, trtexec's spelling of the positional argument
  std::string save;
  std::vector<std::string> min_shapes, opt_shapes, max_shapes, shapes;
  std::string mem_pool;
  int level = 3;
  std::string device = "auto";
  bool fp16 = false, bf16 = false, int8 = false, fp8 = false, best = false;
  int iterations = 10;
  double warmup_ms = 200;
  double duration_s = 3;
  bool dump_profile = false;
  bool skip_inference = false;
  int threads = 0;
};

// NAME:DIMS lists of one flag (repeatable) -> name -> dims.
std::map<std::string, Dims> shape_map(const std::vector<std::string>& lists, const char* flag) {
  std::map<std::string, Dims> out;
  for (const auto& list : lists)
    for (const auto& spec : split_shapes(list, "build")) {
      auto [name, dims] = parse_shape(spec, std::string("build] [") + flag);
      if (!out.emplace(name, dims).second) throw InvalidArgument("[build] " + std::string(flag) + " gives '" + name + "' twice");
    }
  return out;
}

// "workspace:1024" (MiB, trtexec's default unit), "workspace:512M", "workspace:2G", "workspace:64K".
std::uint64_t workspace_bytes(const std::string& spec) {
  const std::string prefix = "workspace:";
  if (spec.rfind(prefix, 0) != 0)
    throw InvalidArgument("[build] --memPoolSize '" + spec + "': only the workspace pool is supported (workspace:SIZE)");
  std::string v = spec.substr(prefix.size());
  std::uint64_t unit = 1 << 20;
  if (!v.empty() && (v.back() == 'K' || v.back() == 'M' || v.back() == 'G')) {
    unit = v.back() == 'K' ? 1ull << 10 : v.back() == 'M' ? 1ull << 20 : 1ull << 30;
    v.pop_back();
  }
  std::size_t used = 0;
  double n = -1;
  try {
    n = std::stod(v, &used);
  } catch (const std::exception&) {
  }
  if (used != v.size() || v.empty() || !(n > 0) || n * static_cast<double>(unit) > 1e18)
    throw InvalidArgument("[build] --memPoolSize '" + spec + "': the size must be a positive number of MiB, or end in K, M or G");
  return static_cast<std::uint64_t>(n * static_cast<double>(unit));
}

int run(const Options& o) {
  std::string path = !o.onnx.empty() ? o.onnx : o.model;
  if (path.empty()) throw InvalidArgument("[build] no model: tensoracle build MODEL.onnx (or --onnx=MODEL.onnx)");
  if (!o.onnx.empty() && !o.model.empty() && o.onnx != o.model)
    throw InvalidArgument("[build] two models: '" + o.model + "' and --onnx='" + o.onnx + "'");
  if (o.iterations < 1 || o.warmup_ms < 0 || o.duration_s < 0)
    throw InvalidArgument("[build] --iterations must be >= 1, --warmUp and --duration >= 0");
  if (o.threads < 0) throw InvalidArgument("[build] --threads must be >= 0 (0: all cores)");
  if (o.threads > 0) set_cpu_threads(o.threads);
  if (o.int8 || o.fp8)
    fmt::print("note: --int8 / --fp8 change nothing: quantized layers are the model's QuantizeLinear / "
               "DequantizeLinear nodes (explicit quantization)\n");

  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  fmt::print("[{:6.2f} s] parsing {}\n", seconds(), path);
  std::fflush(stdout);
  Network net;
  OnnxParser parser(net);
  if (!parser.parse_from_file(path)) {
    for (int i = 0; i < parser.num_errors(); ++i) fmt::print(stderr, "{}\n", parser.get_error(i).str());
    throw InvalidArgument("[build] " + path + ": the model could not be imported (" + std::to_string(parser.num_errors()) +
                          " error" + (parser.num_errors() == 1 ? "" : "s") + " above)");
  }
  fmt::print("[{:6.2f} s] parsed: {} layers, {} inputs, {} outputs\n", seconds(), net.num_layers() - net.num_inputs(),
             net.num_inputs(), net.num_outputs());

  const auto mins = shape_map(o.min_shapes, "--minShapes"), opts = shape_map(o.opt_shapes, "--optShapes"),
             maxs = shape_map(o.max_shapes, "--maxShapes"), fixed = shape_map(o.shapes, "--shapes");
  EngineBuild decl;
  std::vector<std::string> missing;
  for (int i = 0; i < net.num_inputs(); ++i) {
    const Tensor* t = net.get_input(i);
    const std::string& name = t->name();
    const int ranged = static_cast<int>(mins.count(name)) + static_cast<int>(opts.count(name)) + static_cast<int>(maxs.count(name));
    if (ranged == 3) decl.inputs[name] = InputShape::ranged(mins.at(name), opts.at(name), maxs.at(name));
    else if (ranged != 0)
      throw InvalidArgument("[build] input '" + name + "': give all of --minShapes, --optShapes and --maxShapes, or none");
    else if (fixed.count(name)) decl.inputs[name] = InputShape::fixed(fixed.at(name));
    else if (t->dims().all_known()) decl.inputs[name] = InputShape::fixed(t->dims());
    else missing.push_back(name + " " + t->dims().str());
  }
  for (const auto* m : {&mins, &opts, &maxs, &fixed})
    for (const auto& [name, dims] : *m)
      if (!decl.inputs.count(name) && std::find_if(missing.begin(), missing.end(), [&](const std::string& s) {
                                         return s.rfind(name + " ", 0) == 0;
                                       }) == missing.end())
        throw InvalidArgument("[build] the shapes name '" + name + "', which is not an input of " + path);
  if (!missing.empty())
    throw InvalidArgument("[build] inputs with dynamic dims need shapes: " + name_list(missing) +
                          " (--shapes=NAME:D1xD2x... for one shape, or --minShapes/--optShapes/--maxShapes for a range)");
  decl.settings.optimization_level = o.level;
  decl.settings.device = o.device;
  if (!o.mem_pool.empty()) decl.settings.workspace_limit = workspace_bytes(o.mem_pool);
  decl.settings.progress = std::make_shared<ProgressLines>(seconds);
  // TensorRT's weak typing: --fp16 (or --best, which trtexec reads as every precision) first, then --bf16
  if (o.fp16 || o.best) decl.settings.weak_precision = DataType::kHALF;
  else if (o.bf16) decl.settings.weak_precision = DataType::kBF16;

  fmt::print("[{:6.2f} s] building for {} (optimization level {}{})\n", seconds(), o.device, o.level,
             decl.settings.weak_precision == DataType::kFLOAT
                 ? std::string()
                 : ", float32 layers in " + std::string(type_name(decl.settings.weak_precision)) + " where they may");
  std::fflush(stdout);
  auto bytes = build_serialized_network(net, decl);
  Engine engine = Engine::deserialize(bytes);
  fmt::print("[{:6.2f} s] built: {} bytes ({} B of weights, {} B of activations)\n", seconds(), bytes.size(),
             engine.weight_bytes(), engine.activation_bytes());
  std::string timed_path = o.save;
  std::filesystem::path temporary;
  if (!o.save.empty()) {
    save_engine(bytes, o.save);
    fmt::print("[{:6.2f} s] saved {}\n", seconds(), o.save);
  }
  if (o.skip_inference) return 0;
  if (timed_path.empty()) {
    temporary = std::filesystem::temp_directory_path() /
                fmt::format("tensoracle-build-{}-{}.engine", static_cast<long>(::getpid()),
                            std::chrono::steady_clock::now().time_since_epoch().count());
    save_engine(bytes, temporary);
    timed_path = temporary.string();
  }
  std::fflush(stdout);
  BenchRequest b;
  b.path = timed_path;
  b.iterations = o.iterations;
  b.warmup = 1;
  b.warmup_ms = o.warmup_ms;
  b.duration_s = o.duration_s;
  b.per_layer = o.dump_profile;
  int rc;
  try {
    rc = bench_engine(b);
  } catch (...) {
    if (!temporary.empty()) std::filesystem::remove(temporary);
    throw;
  }
  if (!temporary.empty()) std::filesystem::remove(temporary);
  return rc;
}

}  // namespace

Command add_build(CLI::App& app) {
  auto* sub = app.add_subcommand("build", "Import an ONNX model, build an engine for this machine, save it and time it "
                                          "(trtexec's flags)");
  auto o = std::make_shared<Options>();
  sub->add_option("MODEL", o->model, "the ONNX model (external data files beside it)");
  sub->add_option("--onnx", o->onnx, "the ONNX model (trtexec's spelling)");
  sub->add_option("--saveEngine", o->save, "write the engine here (atomically)");
  sub->add_option("--minShapes", o->min_shapes, "NAME:D1xD2x...,... the profile's smallest shapes")->type_name("LIST");
  sub->add_option("--optShapes", o->opt_shapes, "NAME:D1xD2x...,... the shapes to tune for")->type_name("LIST");
  sub->add_option("--maxShapes", o->max_shapes, "NAME:D1xD2x...,... the profile's largest shapes")->type_name("LIST");
  sub->add_option("--shapes", o->shapes, "NAME:D1xD2x...,... one fixed shape per dynamic input")->type_name("LIST");
  sub->add_option("--memPoolSize", o->mem_pool, "workspace:SIZE (MiB, or with K/M/G): the activation + scratch limit")
      ->type_name("POOL:SIZE");
  sub->add_option("--builderOptimizationLevel", o->level, "0..5 (default 3): >= 2 times candidate kernels");
  sub->add_option("--device", o->device, "cpu, cuda:N or auto (default)");
  sub->add_flag("--fp16", o->fp16, "compute float32 layers in float16 where they may (weak typing)");
  sub->add_flag("--bf16", o->bf16, "compute float32 layers in bfloat16 where they may (weak typing)");
  sub->add_flag("--int8", o->int8, "accepted: quantization is the model's Q/DQ nodes");
  sub->add_flag("--fp8", o->fp8, "accepted: quantization is the model's Q/DQ nodes");
  sub->add_flag("--best", o->best, "every precision: as --fp16 here (quantization is the model's Q/DQ nodes)");
  sub->add_option("--iterations", o->iterations, "timed iterations, at least (default 10)");
  sub->add_option("--warmUp", o->warmup_ms, "warm up for this many milliseconds (default 200)")->type_name("MS");
  sub->add_option("--duration", o->duration_s, "time for at least this many seconds (default 3)")->type_name("S");
  sub->add_flag("--dumpProfile", o->dump_profile, "also time each fused node");
  sub->add_flag("--skipInference", o->skip_inference, "build (and save) only");
  sub->add_option("--threads", o->threads, "CPU threads (default: all cores)");
  return [o] { return run(*o); };
}

}  // namespace tensoracle::tools
