#include "tensoracle/builder.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_backend.h"
#include "builder/passes.h"
#include "graph/graph.h"
#include "plan/memory_plan.h"
#include "plan/plan.h"
#include "runtime/devices.h"
#include "tensoracle/errors.h"
#include "tensoracle/plugin_library.h"

namespace tensoracle {

namespace {

using json = nlohmann::json;

[[noreturn]] void invalid(const std::string& m) { throw InvalidArgument("[build] " + m); }

}  // namespace

void BuilderSettings::validate() const {
  const BuilderSettings& s = *this;
  if (s.tf32) invalid("tf32=true is not allowed: tensoracle never uses TF32 (fp32 stays fp32)");
  if (s.optimization_level < 0 || s.optimization_level > 5)
    invalid("optimization_level " + std::to_string(s.optimization_level) + " is outside 0..5");
  if (s.weak_precision != DataType::kFLOAT && s.weak_precision != DataType::kHALF && s.weak_precision != DataType::kBF16)
    invalid(std::string("weak_precision ") + std::string(type_name(s.weak_precision)) +
            " is not float32 (off), float16 or bfloat16");
}

namespace {

// Checks the declaration against the network's inputs; returns the profile per graph input.
std::vector<InputShape> check_declaration(const Network& net, const EngineBuild& decl) {
  std::vector<InputShape> out;
  for (const auto& [name, _] : decl.inputs) {
    bool found = false;
    for (int i = 0; i < net.num_inputs(); ++i) found = found || net.get_input(i)->name() == name;
    if (!found) {
      std::string names;
      for (int i = 0; i < net.num_inputs(); ++i) names += (i ? ", " : "") + net.get_input(i)->name();
      invalid("the declaration names input '" + name + "', which the network does not have (its inputs: " + names + ")");
    }
  }
  for (int i = 0; i < net.num_inputs(); ++i) {
    const Tensor* t = net.get_input(i);
    auto it = decl.inputs.find(t->name());
    if (it == decl.inputs.end())
      invalid("input '" + t->name() + "' " + t->dims().str() + " has no InputShape in the declaration");
    const InputShape& s = it->second;
    const Dims& d = t->dims();
    for (const Dims* x : {&s.min, &s.opt, &s.max}) {
      if (x->rank() != d.rank())
        invalid("input '" + t->name() + "': declared shape " + x->str() + " has rank " + std::to_string(x->rank()) +
                " but the network's input " + d.str() + " has rank " + std::to_string(d.rank()));
      for (int k = 0; k < d.rank(); ++k) {
        if ((*x)[k] < 0) invalid("input '" + t->name() + "': declared shape " + x->str() + " has a negative dimension");
        if (d[k] >= 0 && (*x)[k] != d[k])
          invalid("input '" + t->name() + "': declared shape " + x->str() + " contradicts static dimension " +
                  std::to_string(k) + " = " + std::to_string(d[k]) + " of " + d.str());
      }
    }
    for (int k = 0; k < d.rank(); ++k)
      if (s.min[k] > s.opt[k] || s.opt[k] > s.max[k])
        invalid("input '" + t->name() + "': dimension " + std::to_string(k) + " needs min <= opt <= max, got min " +
                s.min.str() + ", opt " + s.opt.str() + ", max " + s.max.str());
    out.push_back(s);
  }
  return out;
}

// The build's phases as ProgressMonitor sees them (builder.h); does nothing without a monitor.
// A phase left by an exception is not finished (TensorRT's monitors see the same).
class Progress {
 public:
  explicit Progress(ProgressMonitor* m) : m_(m) {}
  void start(const char* phase, const char* parent, int steps) {
    if (m_) m_->phase_start(phase, parent, steps);
  }
  void step(const char* phase, int step) {
    if (m_ && !m_->step_complete(phase, step))
      throw BuildCancelled(std::string("[build] cancelled by the progress monitor in phase '") + phase + "' at step " +
                           std::to_string(step));
  }
  void finish(const char* phase) {
    if (m_) m_->phase_finish(phase);
  }

 private:
  ProgressMonitor* m_;
};

constexpr const char* kTop = "Building engine";
constexpr const char* kPasses = "Optimizing the graph";
constexpr const char* kTactics = "Choosing tactics";
constexpr const char* kScratch = "Sizing scratch memory";
constexpr const char* kWrite = "Writing the engine";
constexpr int kPassCount = 11;  // the record(...) calls below

std::uint64_t bytes_of(const graph::TensorDesc& d) {
  auto v = d.dims.volume();
  return v < 0 ? 0 : static_cast<std::uint64_t>(v) * element_size(d.type);
}

}  // namespace

std::string EngineBuild::canonical() const {
  json j;
  auto& in = j["inputs"] = json::object();
  for (const auto& [name, s] : inputs) in[name] = {{"min", s.min.vec()}, {"opt", s.opt.vec()}, {"max", s.max.vec()}};
  j["settings"] = {{"optimization_level", settings.optimization_level},
                   {"device", settings.device},
                   {"workspace_limit", settings.workspace_limit},
                   {"tf32", settings.tf32}};
  // (only when set: the identities of engines built without it stay what they were)
  if (settings.weak_precision != DataType::kFLOAT) j["settings"]["weak_precision"] = type_name(settings.weak_precision);
  return j.dump();
}

std::vector<std::byte> build_serialized_engine(const GraphFunction& graph_fn, const EngineBuild& decl,
                                               const std::vector<std::filesystem::path>& plugins) {
  decl.settings.validate();
  load_plugin_libraries(plugins);  // before the graph function, which may add plugin layers
  runtime::backend_for(decl.settings.device);  // an unusable device fails before the graph function runs

  // Shared, so that the graph function may keep the network beyond this call (builder.h).
  const auto owned = std::make_shared<Network>();
  graph_fn(*owned);
  return build_serialized_network(*owned, decl);
}

std::vector<std::byte> build_serialized_network(const Network& net, const EngineBuild& decl) {
  decl.settings.validate();
  const backends::Backend& backend = runtime::backend_for(decl.settings.device);
  net.validate();
  auto profile = check_declaration(net, decl);

  Progress progress(decl.settings.progress.get());
  progress.start(kTop, "", 4);
  // Loops unroll with the trip counts their shapes give: the same at every corner of the profile.
  auto value_of = [&](const graph::Graph& sub, int v) -> std::optional<std::vector<std::int64_t>> {
    std::optional<std::vector<std::int64_t>> seen;
    for (Dims InputShape::*corner : {&InputShape::min, &InputShape::opt, &InputShape::max}) {
      std::vector<Dims> dims;
      for (int in : sub.inputs)
        for (int i = 0; i < net.num_inputs(); ++i)
          if (net.get_input(i)->name() == sub.values[static_cast<std::size_t>(in)].name) dims.push_back(profile[static_cast<std::size_t>(i)].*corner);
      graph::ShapeValues values;
      graph::infer_shapes(sub, dims, cpu::evaluate_shape_node, &values);
      const auto& got = values[static_cast<std::size_t>(v)];
      if (!got || (seen && *seen != *got)) return std::nullopt;
      seen = got;
    }
    return seen;
  };
  graph::Graph g = graph::from_network(net, value_of);
  graph::verify(g, "from_network");
  json passes = json::array();
  progress.start(kPasses, kTop, kPassCount);
  auto record = [&](const builder::PassLog& log) {
    if (decl.settings.verbose)
      for (const auto& line : log.changes) std::fprintf(stderr, "[build] %s: %s\n", log.pass.c_str(), line.c_str());
    passes.push_back({{"pass", log.pass}, {"changes", log.changes}});
    graph::verify(g, log.pass);
    progress.step(kPasses, static_cast<int>(passes.size()) - 1);
  };
  record(builder::dead_code(g));
  record(builder::constant_fold(g, cpu::evaluate_constant_node));
  record(builder::dead_code(g));
  record(builder::fold_qdq(g));
  record(builder::lower_precision(g, decl.settings.weak_precision, [&](const graph::Graph& gr, const graph::Node& n) {
    return backend.unsupported_reason(gr, n).empty();
  }));
  record(builder::dead_code(g));
  record(builder::fuse_gelu(g));
  record(builder::fuse_attention(g, [&](const graph::Graph& gr, const graph::Node& n) { return backend.fuses_attention(gr, n); }));
  record(builder::merge_projections(g));
  record(builder::dead_code(g));  // a mask the attention nodes no longer read (a causal constant's sum)
  record(builder::fuse_pointwise(g, [&](const graph::Graph& gr, const graph::Node& n, const graph::EpilogueOp& op) {
    return backend.can_fuse(gr, n, op);
  }));
  progress.finish(kPasses);
  progress.step(kTop, 0);

  for (const auto& n : g.nodes) {
    auto why = backend.unsupported_reason(g, n);
    if (!why.empty()) throw BuildError("[build] layer '" + n.name + "': " + why);
  }

  // Shapes at the profile's corners: any conflict (a broadcast that fails for some allowed
  // shape) is an invalid declaration.
  auto corner = [&](Dims InputShape::*which) {
    std::vector<Dims> dims;
    for (const auto& s : profile) dims.push_back(s.*which);
    return graph::infer_shapes(g, dims, cpu::evaluate_shape_node);
  };
  auto at_min = corner(&InputShape::min), at_opt = corner(&InputShape::opt), at_max = corner(&InputShape::max);
  for (std::size_t v = 0; v < at_max.size(); ++v)
    if (!at_max[v].dims.all_known()) {
      int p = g.values[v].producer;
      throw BuildError("[build] layer '" + (p >= 0 ? g.nodes[static_cast<std::size_t>(p)].name : g.values[v].name) +
                       "': its output dims " + at_max[v].dims.str() +
                       " depend on tensor values the builder cannot compute; reshape dims and slice bounds must come "
                       "from add_shape outputs and constants (shape tensors)");
    }

  plan::Plan plan;
  plan.name = net.name();
  // Activations first (their sizes do not depend on tactics): the workspace limit left after
  // them bounds every node's scratch, and the backend picks tactics within it.
  plan.max_bytes.resize(g.values.size());
  for (std::size_t v = 0; v < g.values.size(); ++v) plan.max_bytes[v] = bytes_of(at_max[v]);
  plan.memory = plan::plan_memory(g, plan.max_bytes);
  const std::uint64_t limit = decl.settings.workspace_limit;
  if (limit > 0 && plan.memory.arena_bytes > limit)
    throw BuildError("[build] the engine's activations need " + std::to_string(plan.memory.arena_bytes) +
                     " bytes at the profile's max shapes, above workspace_limit " + std::to_string(limit));
  const std::uint64_t scratch_limit = limit > 0 ? limit - plan.memory.arena_bytes : backends::kNoScratchLimit;
  auto descs_of = [&](const std::vector<graph::TensorDesc>& at, const graph::Node& n) {
    std::vector<graph::TensorDesc> d;
    for (int v : n.all_inputs()) d.push_back(at[static_cast<std::size_t>(v)]);
    return d;
  };
  progress.start(kTactics, kTop, static_cast<int>(g.nodes.size()));
  for (auto& n : g.nodes) {
    if (backend.tactics(g, n).empty())
      throw BuildError("[build] layer '" + n.name + "': the " + backend.name() + " backend has no kernel for it");
    // Level 0 takes the first candidate; the CUDA backend times GEMM algorithms from level 2.
    const auto in = descs_of(at_opt, n), in_max = descs_of(at_max, n);
    backends::TacticQuery q{in, at_opt[static_cast<std::size_t>(n.output)], in_max, at_max[static_cast<std::size_t>(n.output)],
                           decl.settings.optimization_level, scratch_limit};
    auto choice = backend.choose_tactic(g, n, q);
    n.tactic = std::move(choice.tactic);
    g.values[static_cast<std::size_t>(n.output)].layout = choice.output_layout;
    progress.step(kTactics, static_cast<int>(&n - g.nodes.data()));
  }
  progress.finish(kTactics);
  progress.step(kTop, 1);

  // Scratch: the most any node needs at the profile's max.
  const graph::Node* widest = nullptr;
  progress.start(kScratch, kTop, static_cast<int>(g.nodes.size()));
  for (const auto& n : g.nodes) {
    auto kernel = backend.instantiate(g, n);
    std::vector<backends::Buffer> in, out;
    for (int v : n.all_inputs()) in.push_back({nullptr, at_max[static_cast<std::size_t>(v)].type, at_max[static_cast<std::size_t>(v)].dims});
    for (int v : n.outputs()) out.push_back({nullptr, at_max[static_cast<std::size_t>(v)].type, at_max[static_cast<std::size_t>(v)].dims});
    const std::uint64_t bytes = kernel->workspace_bytes(in, out);
    if (!widest || bytes > plan.workspace_bytes) widest = &n;
    plan.workspace_bytes = std::max<std::uint64_t>(plan.workspace_bytes, bytes);
    progress.step(kScratch, static_cast<int>(&n - g.nodes.data()));
  }
  progress.finish(kScratch);
  progress.step(kTop, 2);
  if (limit > 0 && plan.workspace_bytes > scratch_limit)
    throw BuildError("[build] layer '" + widest->name + "' needs " + std::to_string(plan.workspace_bytes) +
                     " bytes of scratch at the profile's max shapes (" + graph::describe(widest->tactic) + "); workspace_limit " +
                     std::to_string(limit) + " leaves " + std::to_string(scratch_limit) + " after " +
                     std::to_string(plan.memory.arena_bytes) + " bytes of activations");

  for (std::size_t i = 0; i < g.inputs.size(); ++i) {
    const auto& v = g.values[static_cast<std::size_t>(g.inputs[i])];
    plan.io.push_back({v.name, TensorIOMode::kINPUT, v.desc.type, v.desc.dims, profile[i].min, profile[i].opt, profile[i].max});
    plan.io_values.push_back(g.inputs[i]);
  }
  for (int o : g.outputs) {
    const auto& v = g.values[static_cast<std::size_t>(o)];
    auto u = static_cast<std::size_t>(o);
    plan.io.push_back({v.name, TensorIOMode::kOUTPUT, v.desc.type, v.desc.dims, at_min[u].dims, at_opt[u].dims, at_max[u].dims});
    plan.io_values.push_back(o);
  }
  plan.target = backend.target();
  plan.build = {{"declaration", json::parse(decl.canonical())}, {"passes", passes}};
  plan.graph = std::move(g);
  progress.start(kWrite, kTop, 1);
  auto bytes = plan::write_engine(plan);
  progress.step(kWrite, 0);
  progress.finish(kWrite);
  progress.step(kTop, 3);
  progress.finish(kTop);
  return bytes;
}

}  // namespace tensoracle
