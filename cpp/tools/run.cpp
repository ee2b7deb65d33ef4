// `tensoracle run ENGINE [--inputs FILE|NAME=FILE.npy]... [--shape NAME=DIMS]... [--seed N]
//  [--shapes NAME:DIMS,...] [--save-inputs FILE] [--save-outputs FILE] [--compare-with ENGINE2 [--atol A --rtol R]]
//  [--plugins LIB]... [--threads N] [--json]`: runs an engine once, on inputs read from files
// (.npz or .safetensors by tensor name, or one .npy per input) or generated (seeded: floating
// inputs uniform in [-1, 1), integer and bool inputs zero, as `bench` does), prints a summary
// of each output and saves inputs and outputs (.npz or .safetensors) for `tensoracle compare`.
// --compare-with runs a second engine (another precision, device or build of the same network)
// on the same inputs and compares the outputs by name, with compare's metrics and tolerance
// rule; exit 1 when tolerances are given and an output is outside them or not finite.
// trtexec's --loadInputs / --exportOutput and Polygraphy's --load-inputs / --save-outputs /
// --save-inputs are accepted as spellings of the same options.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/numeric.h"
#include "core/text.h"
#include "tensoracle/compare.h"
#include "tensoracle/engine.h"
#include "tensoracle/errors.h"
#include "tensoracle/plugin_library.h"
#include "tools/commands.h"
#include "tools/sniff.h"
#include "tools/tensor_files.h"

namespace tensoracle::tools {

namespace {

struct Options {
  std::string engine;
  std::vector<std::string> inputs;
  std::vector<std::string> shapes;
  std::vector<std::string> shape_lists;
  std::vector<std::string> plugins;
  std::string save_inputs, save_outputs, compare_with;
  std::optional<double> atol, rtol;
  unsigned seed = 12345;
  int threads = 0;
  bool json = false;
};

// An input's values: bytes of the engine's type and a shape, and where they came from.
struct Input {
  Dims dims;
  std::vector<std::byte> bytes;
  std::string source;  // "FILE" or "generated"
  bool defaulted = false;  // generated at the profile's opt shape: no file or flag gave its shape
};

Engine open_engine_file(const std::string& path, const std::string& role) {
  require_kind("run", path, {FileKind::kSafetensors, FileKind::kOther},
               "an engine file (from save_engine or the cache) as " + role);
  try {
    return Engine::load(path);
  } catch (const PluginLibraryError& e) {
    throw PluginLibraryError(std::string(e.what()) + " (here: tensoracle run ENGINE --plugins LIB)");
  }
}

std::string input_names(const Engine& e) {
  std::vector<std::string> names;
  for (const auto& t : e.io_tensors())
    if (t.mode == TensorIOMode::kINPUT) names.push_back(t.name);
  return name_list(names);
}

// Takes array `view` as the values of input `name` (type checked; bytes copied).
void take(std::map<std::string, Input>& given, const Engine& engine, const std::string& name, const ArrayView& view,
          const std::string& file) {
  const IOTensorInfo* info = nullptr;
  for (const auto& t : engine.io_tensors())
    if (t.name == name && t.mode == TensorIOMode::kINPUT) info = &t;
  if (info == nullptr)
    throw InvalidArgument(fmt::format("[run] {} holds {}, which is not an input of the engine (its inputs: {})", file,
                                      core::quote_name(name), input_names(engine)));
  if (given.count(name))
    throw InvalidArgument(fmt::format("[run] input {} is given twice (the second time by {})", core::quote_name(name), file));
  if (view.dtype != to_dtype(info->type))
    throw InvalidArgument(fmt::format("[run] {}: {} is {}, but the engine's input is {}; convert it first (in NumPy: "
                                      "a.astype(np.{}))",
                                      file, core::quote_name(name), numpy_name(view.dtype), numpy_name(to_dtype(info->type)),
                                      numpy_name(to_dtype(info->type))));
  if (view.shape.size() != static_cast<std::size_t>(info->dims.rank()))
    throw InvalidArgument(fmt::format("[run] {}: {} has the shape {}, of rank {}; the engine's input has rank {} (its "
                                      "profile: {} to {})",
                                      file, core::quote_name(name), shape_text(view.shape), view.shape.size(),
                                      info->dims.rank(), shape_text(info->min.vec()), shape_text(info->max.vec())));
  Input in;
  in.dims = Dims(std::span<const std::int64_t>(view.shape));
  const auto n = static_cast<std::size_t>(std::max<std::int64_t>(in.dims.volume(), 0)) * element_size(info->type);
  const auto* p = static_cast<const std::byte*>(view.data);
  in.bytes.assign(p, p + n);
  in.source = file;
  given.emplace(name, std::move(in));
}

// --inputs FILE (.npz / .safetensors: every tensor by name; .npy: the engine's only input) or
// NAME=FILE (a .npy, or a file of one tensor). A spec that names an existing file is a file.
void read_inputs(const std::vector<std::string>& specs, const Engine& engine, std::map<std::string, Input>& given) {
  for (const std::string& spec : specs) {
    std::string name, path = spec;
    std::error_code ec;
    if (!std::filesystem::exists(spec, ec)) {
      const auto eq = spec.find('=');
      if (eq != std::string::npos && eq > 0) {
        name = spec.substr(0, eq);
        path = spec.substr(eq + 1);
      }
    }
    const FileKind kind = sniff(path);
    if (kind == FileKind::kMissing) throw InvalidArgument("[run] --inputs " + spec + ": no such file: " + path);
    if (kind != FileKind::kNpy && kind != FileKind::kNpz && kind != FileKind::kSafetensors)
      throw InvalidArgument("[run] --inputs " + path + " is " + describe(kind) +
                            "; run reads inputs from .npy, .npz or .safetensors files");
    TensorFile f = open_tensor_file(path);
    if (!name.empty()) {
      if (f.names.size() != 1)
        throw InvalidArgument(fmt::format("[run] --inputs {}={}: the file holds {} arrays; NAME=FILE takes a file of "
                                          "one (give an .npz or .safetensors file without NAME= to read them by name)",
                                          name, path, f.names.size()));
      take(given, engine, name, f.load(0).view, path);
      continue;
    }
    if (!f.named) {  // a .npy without a name: the engine's only input
      std::vector<std::string> inputs;
      for (const auto& t : engine.io_tensors())
        if (t.mode == TensorIOMode::kINPUT) inputs.push_back(t.name);
      if (inputs.size() != 1)
        throw InvalidArgument(fmt::format("[run] --inputs {}: a .npy file holds one unnamed array and the engine has {} "
                                          "inputs ({}); write NAME={}",
                                          path, inputs.size(), input_names(engine), path));
      take(given, engine, inputs[0], f.load(0).view, path);
      continue;
    }
    if (f.names.empty()) throw InvalidArgument("[run] --inputs " + path + " holds no arrays");
    for (std::size_t i = 0; i < f.names.size(); ++i) take(given, engine, f.names[i], f.load(i).view, path);
  }
}

// Every input's values: given, else generated at its --shape or the profile's opt shape.
std::map<std::string, Input> all_inputs(const Options& o, const Engine& engine) {
  std::map<std::string, Input> given;
  read_inputs(o.inputs, engine, given);
  std::map<std::string, Dims> shapes;
  for (const auto& g : given_shapes(engine, o.shapes, o.shape_lists, "run")) {
    if (given.count(g.name) && given[g.name].dims != g.dims)
      throw InvalidArgument(fmt::format("[run] --shape {}: {} gives that input the shape {}", g.spec,
                                        given[g.name].source, shape_text(given[g.name].dims.vec())));
    shapes[g.name] = g.dims;
  }
  std::mt19937 rng(o.seed);
  for (const auto& t : engine.io_tensors()) {
    if (t.mode != TensorIOMode::kINPUT || given.count(t.name)) continue;
    Input in;
    in.dims = shapes.count(t.name) ? shapes[t.name] : t.opt;
    in.defaulted = !shapes.count(t.name);
    in.bytes.resize(static_cast<std::size_t>(std::max<std::int64_t>(in.dims.volume(), 0)) * element_size(t.type));
    fill_generated(in.bytes, t.type, rng);
    in.source = "generated";
    given.emplace(t.name, std::move(in));
  }
  return given;
}

std::map<std::string, HostTensor> execute(Engine& engine, const std::map<std::string, Input>& inputs) {
  std::map<std::string, HostTensorView> views;
  std::vector<std::string> defaulted;
  bool some_given = false;
  for (const auto& t : engine.io_tensors()) {
    if (t.mode != TensorIOMode::kINPUT) continue;
    const Input& in = inputs.at(t.name);
    views[t.name] = HostTensorView{t.type, in.dims, in.bytes.data()};
    if (in.defaulted && t.min != t.max) defaulted.push_back(t.name + " " + in.dims.str());
    some_given = some_given || !in.defaulted;
  }
  Execution ex = engine.create_execution();
  std::map<std::string, HostTensor> out;
  // run() checks each shape against the profile, naming the input
  with_shape_hint(defaulted, some_given, "run", [&] { out = ex.run(views); });
  return out;
}

// min / max / mean / non-finite count of a floating output (as float64), for the summary.
struct Stats {
  double min = 0, max = 0, mean = 0;
  std::int64_t nonfinite = 0;
  bool floating = false;
};

Stats stats_of(const HostTensor& t) {
  Stats s;
  const auto n = static_cast<std::size_t>(std::max<std::int64_t>(t.dims.volume(), 0));
  auto value = [&](std::size_t i) -> std::optional<double> {
    const std::byte* p = t.data.get() + i * element_size(t.type);
    switch (t.type) {
      case DataType::kFLOAT: {
        float v;
        std::memcpy(&v, p, 4);
        return v;
      }
      case DataType::kHALF: {
        std::uint16_t h;
        std::memcpy(&h, p, 2);
        return core::half_to_float(h);
      }
      case DataType::kBF16: {
        std::uint16_t h;
        std::memcpy(&h, p, 2);
        return core::bf16_to_float(h);
      }
      case DataType::kINT32: {
        std::int32_t v;
        std::memcpy(&v, p, 4);
        return v;
      }
      case DataType::kINT64: {
        std::int64_t v;
        std::memcpy(&v, p, 8);
        return static_cast<double>(v);
      }
      default: return std::nullopt;
    }
  };
  double sum = 0;
  std::size_t finite = 0;
  s.min = std::numeric_limits<double>::infinity();
  s.max = -s.min;
  for (std::size_t i = 0; i < n; ++i) {
    auto v = value(i);
    if (!v) return s;
    s.floating = true;
    if (!std::isfinite(*v)) {
      ++s.nonfinite;
      continue;
    }
    s.min = std::min(s.min, *v);
    s.max = std::max(s.max, *v);
    sum += *v;
    ++finite;
  }
  if (finite == 0) s.min = s.max = std::nan("");
  s.mean = finite ? sum / static_cast<double>(finite) : std::nan("");
  return s;
}

std::vector<npy::NamedArray> arrays_of(const std::map<std::string, HostTensor>& tensors) {
  std::vector<npy::NamedArray> out;
  for (const auto& [name, t] : tensors)
    out.push_back({name, to_dtype(t.type), t.dims.vec(), std::span<const std::byte>(t.data.get(), t.nbytes)});
  return out;
}

int run(const Options& o) {
  if (o.atol.has_value() != o.rtol.has_value())
    throw InvalidArgument(fmt::format("[run] --{} without --{}: give both (--rtol 0 for an absolute bound, --atol 0 "
                                      "for a relative one)",
                                      o.atol ? "atol" : "rtol", o.atol ? "rtol" : "atol"));
  if (o.atol && o.compare_with.empty())
    throw InvalidArgument("[run] --atol and --rtol apply to --compare-with ENGINE2; without it nothing is compared");
  if (o.threads < 0) throw InvalidArgument("[run] --threads must be >= 0 (0: all cores)");
  if (o.threads > 0) set_cpu_threads(o.threads);
  if (!o.plugins.empty()) load_plugin_libraries({o.plugins.begin(), o.plugins.end()});
  Engine engine = open_engine_file(o.engine, "ENGINE");
  const std::map<std::string, Input> inputs = all_inputs(o, engine);
  const std::map<std::string, HostTensor> outputs = execute(engine, inputs);

  if (!o.save_inputs.empty()) {
    std::vector<npy::NamedArray> arrays;
    for (const auto& t : engine.io_tensors())
      if (t.mode == TensorIOMode::kINPUT) {
        const Input& in = inputs.at(t.name);
        arrays.push_back({t.name, to_dtype(t.type), in.dims.vec(), in.bytes});
      }
    save_arrays(o.save_inputs, arrays, "run");
  }
  if (!o.save_outputs.empty()) save_arrays(o.save_outputs, arrays_of(outputs), "run");

  std::vector<ComparedTensor> compared;
  if (!o.compare_with.empty()) {
    Engine reference = open_engine_file(o.compare_with, "--compare-with");
    std::set<std::string> want, have;
    for (const auto& t : engine.io_tensors())
      if (t.mode == TensorIOMode::kINPUT) want.insert(t.name);
    for (const auto& t : reference.io_tensors())
      if (t.mode == TensorIOMode::kINPUT) {
        have.insert(t.name);
        if (!want.count(t.name) || engine.io_tensor(t.name).type != t.type)
          throw InvalidArgument(fmt::format("[run] --compare-with {}: its input {} is not an input of {} of the same type",
                                            o.compare_with, core::quote_name(t.name), o.engine));
      }
    if (want != have)
      throw InvalidArgument(fmt::format("[run] --compare-with {}: it takes the inputs {}, {} takes {}", o.compare_with,
                                        input_names(reference), o.engine, input_names(engine)));
    const std::map<std::string, HostTensor> ref = execute(reference, inputs);
    for (const auto& [name, t] : outputs) {
      auto it = ref.find(name);
      if (it == ref.end()) continue;
      CompareOptions c;
      c.atol = o.atol;
      c.rtol = o.rtol;
      c.label = fmt::format("{} vs {}, output {}", o.engine, o.compare_with, core::quote_name(name));
      // Different precisions give different output types: both are compared as float32.
      if (t.type != it->second.type) {
        throw InvalidArgument(fmt::format("[run] output {} is {} in {} and {} in {}: compare engines whose outputs have "
                                          "the same type",
                                          core::quote_name(name), numpy_name(to_dtype(t.type)), o.engine,
                                          numpy_name(to_dtype(it->second.type)), o.compare_with));
      }
      compared.push_back({name, compare_outputs(ArrayView::of(t.data.get(), t.type, t.dims),
                                                ArrayView::of(it->second.data.get(), it->second.type, it->second.dims), c)});
    }
    if (compared.empty())
      throw InvalidArgument(fmt::format("[run] {} and {} have no output name in common", o.engine, o.compare_with));
  }

  if (o.json) {
    nlohmann::ordered_json j;
    j["engine"] = o.engine;
    j["device"] = engine.device();
    auto& in = j["inputs"] = nlohmann::ordered_json::object();
    for (const auto& t : engine.io_tensors())
      if (t.mode == TensorIOMode::kINPUT)
        in[t.name] = {{"dtype", numpy_name(to_dtype(t.type))}, {"shape", inputs.at(t.name).dims.vec()},
                      {"source", inputs.at(t.name).source}};
    auto& out = j["outputs"] = nlohmann::ordered_json::object();
    for (const auto& [name, t] : outputs) {
      const Stats s = stats_of(t);
      auto& e = out[name] = {{"dtype", numpy_name(to_dtype(t.type))}, {"shape", t.dims.vec()}};
      if (s.floating)
        e.update({{"min", s.min}, {"max", s.max}, {"mean", s.mean}, {"nonfinite_count", s.nonfinite}});
    }
    j["saved_inputs"] = o.save_inputs.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(o.save_inputs);
    j["saved_outputs"] = o.save_outputs.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(o.save_outputs);
    fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
  } else {
    fmt::print("engine:  {} ({})\n", o.engine, engine.device());
    for (const auto& t : engine.io_tensors())
      if (t.mode == TensorIOMode::kINPUT)
        fmt::print("input:   {} {} {} ({})\n", t.name, numpy_name(to_dtype(t.type)), shape_text(inputs.at(t.name).dims.vec()),
                   inputs.at(t.name).source == "generated" ? fmt::format("generated, seed {}", o.seed)
                                                           : "from " + inputs.at(t.name).source);
    for (const auto& [name, t] : outputs) {
      const Stats s = stats_of(t);
      std::string line = fmt::format("output:  {} {} {}", name, numpy_name(to_dtype(t.type)), shape_text(t.dims.vec()));
      if (s.floating)
        line += fmt::format(": min {:.6g}, max {:.6g}, mean {:.6g}{}", s.min, s.max, s.mean,
                            s.nonfinite ? fmt::format(", {} not finite", s.nonfinite) : std::string());
      fmt::print("{}\n", line);
    }
    if (!o.save_inputs.empty()) fmt::print("saved:   inputs to {}\n", o.save_inputs);
    if (!o.save_outputs.empty()) fmt::print("saved:   outputs to {}\n", o.save_outputs);
  }
  if (compared.empty()) return 0;
  if (!o.json) fmt::print("\n");
  print_comparison(o.engine, o.compare_with, o.atol, o.rtol, compared, "", o.json);
  if (!(o.atol && o.rtol)) return 0;
  for (const ComparedTensor& c : compared)
    if (!comparison_passed(c.result)) return 1;
  return 0;
}

}  // namespace

Command add_run(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "run",
      "Run an engine once on inputs from files (.npz or .safetensors by name, NAME=FILE.npy) or generated ones; print "
      "each output's shape and range, save inputs and outputs (.npz or .safetensors) for `tensoracle compare`, or "
      "compare with a second engine on the same inputs (--compare-with; exit 1 when --atol/--rtol are given and an "
      "output is outside them or not finite)");
  auto o = std::make_shared<Options>();
  sub->add_option("ENGINE", o->engine, "engine file")->required();
  sub->add_option("--inputs,--load-inputs,--loadInputs", o->inputs,
                  "input values: an .npz or .safetensors file (by tensor name), or NAME=FILE.npy; inputs not given are "
                  "generated (repeat or list)")
      ->type_name("FILE|NAME=FILE");
  sub->add_option("--shape", o->shapes, "NAME=D1xD2x... of a generated input (default: the profile's opt)");
  sub->add_option("--shapes", o->shape_lists, "every generated input's shape in one flag: NAME:D1xD2x...,NAME:...")
      ->type_name("LIST");
  sub->add_option("--seed", o->seed, "seed of the generated inputs (default 12345)");
  sub->add_option("--save-inputs", o->save_inputs, "write every input (given or generated) to FILE.npz or .safetensors")
      ->type_name("FILE");
  sub->add_option("--save-outputs,--exportOutput", o->save_outputs, "write the outputs to FILE.npz or .safetensors")
      ->type_name("FILE");
  sub->add_option("--compare-with", o->compare_with,
                  "a second engine to run on the same inputs and compare with (ENGINE is the candidate, this the reference)")
      ->type_name("ENGINE2");
  sub->add_option_function<double>("--atol", [o](double v) { o->atol = v; }, "absolute tolerance of --compare-with (>= 0)")
      ->type_name("A");
  sub->add_option_function<double>("--rtol", [o](double v) { o->rtol = v; }, "relative tolerance of --compare-with (>= 0)")
      ->type_name("R");
  sub->add_option("--plugins", o->plugins, "plugin libraries the engines' plugin layers need (repeat or list)");
  sub->add_option("--threads", o->threads, "CPU threads (default: all cores)");
  sub->add_flag("--json", o->json, "print JSON instead of text");
  return [o] { return run(*o); };
}

}  // namespace tensoracle::tools
