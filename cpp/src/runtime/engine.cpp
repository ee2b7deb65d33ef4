#include "tensoracle/engine.h"

#include <chrono>
#include <cstring>
#include <unordered_map>

#include "backends/cpu/kernels.h"
#include "core/mapped_file.h"
#include "plan/plan.h"
#include "runtime/backend.h"
#include "runtime/engine_access.h"
#include "tensoracle/errors.h"

namespace tensoracle {

namespace {

constexpr std::size_t kAlign = 64;
std::uint64_t align_up(std::uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

std::uint64_t bytes_of(DataType t, const Dims& d) {
  auto v = d.volume();
  return v < 0 ? 0 : static_cast<std::uint64_t>(v) * element_size(t);
}

}  // namespace

void set_cpu_threads(int n) {
  if (n < 0) throw InvalidArgument("[engine] set_cpu_threads: " + std::to_string(n) + " is negative");
  cpu::set_num_threads(n);
}
int cpu_threads() { return cpu::num_threads(); }

struct Engine::State {
  plan::Plan plan;
  std::shared_ptr<const void> owner;  // the mapping or the byte copy the weights live in
  const runtime::Backend* backend = nullptr;
  std::vector<std::unique_ptr<runtime::NodeKernel>> kernels;
  std::unordered_map<std::string, std::size_t> io_index;
  std::uint64_t weight_bytes = 0;
};

namespace {

std::shared_ptr<const Engine::State> open_state(std::span<const std::byte> bytes, const std::string& name,
                                                std::shared_ptr<const void> owner, bool verify_digest = true) {
  auto st = std::make_shared<Engine::State>();
  st->plan = plan::read_engine(bytes, name, owner, verify_digest);
  st->owner = std::move(owner);
  const auto& backend_name = st->plan.target.is_object() ? st->plan.target.value("backend", "") : "";
  if (backend_name != "cpu")
    throw IncompatibleEngineError("[engine] " + name + ": built for the '" + backend_name +
                                  "' backend, which this build of tensoracle does not have; rebuild it for this device");
  st->backend = &runtime::cpu_backend();
  st->backend->check_compatible(st->plan.target);
  for (const auto& n : st->plan.graph.nodes) st->kernels.push_back(st->backend->instantiate(st->plan.graph, n));
  for (std::size_t i = 0; i < st->plan.io.size(); ++i) st->io_index.emplace(st->plan.io[i].name, i);
  for (const auto& v : st->plan.graph.values)
    if (v.constant) st->weight_bytes += v.constant->bytes().size();
  return st;
}

}  // namespace

Engine Engine::deserialize(std::span<const std::byte> bytes) {
  // Copy into 64-byte aligned storage, so weights are aligned as in a mapped file.
  auto storage = std::shared_ptr<std::byte[]>(static_cast<std::byte*>(std::aligned_alloc(kAlign, align_up(bytes.size() + 1))),
                                              [](std::byte* p) { std::free(p); });
  if (!storage) throw std::bad_alloc();
  if (!bytes.empty()) std::memcpy(storage.get(), bytes.data(), bytes.size());
  std::span<const std::byte> copy(storage.get(), bytes.size());
  return Engine(open_state(copy, "<engine bytes>", std::shared_ptr<const void>(storage, storage.get())));
}

Engine Engine::load(const std::filesystem::path& path) {
  return runtime::EngineAccess::load_file(path, nullptr).engine;
}

namespace runtime {

LoadedEngine EngineAccess::load_file(const std::filesystem::path& path,
                                     const std::function<bool(const core::FileStat&)>& skip_digest) {
  std::shared_ptr<core::MappedFile> map;
  try {
    map = std::make_shared<core::MappedFile>(path, false, "engine");
  } catch (const FormatError& e) {
    throw CorruptEngineError(std::string(e.what()) + "; expected an engine file");
  }
  auto bytes = map->bytes();
  const bool verify = !skip_digest || !skip_digest(map->stat());
  core::FileStat stat = map->stat();
  return {Engine(open_state(bytes, path.string(), std::shared_ptr<const void>(map, bytes.data()), verify)), stat,
          verify};
}

}  // namespace runtime

const std::vector<IOTensorInfo>& Engine::io_tensors() const noexcept { return state_->plan.io; }

const IOTensorInfo& Engine::io_tensor(std::string_view name) const {
  auto it = state_->io_index.find(std::string(name));
  if (it == state_->io_index.end()) {
    std::string names;
    for (const auto& t : state_->plan.io) names += (names.empty() ? "" : ", ") + t.name;
    throw InvalidArgument("[engine] no input or output named '" + std::string(name) + "' (the engine has: " + names + ")");
  }
  return state_->plan.io[it->second];
}

const std::string& Engine::name() const noexcept { return state_->plan.name; }

std::vector<LayerInfo> Engine::layers() const {
  std::vector<LayerInfo> out;
  const auto& g = state_->plan.graph;
  for (const auto& n : g.nodes) {
    LayerInfo l;
    l.name = n.name;
    l.type = std::string(layer_type_name(n.type()));
    for (const auto& op : n.epilogue) l.fused.push_back(op.layer);
    l.tactic = n.tactic;
    for (int v : n.all_inputs()) l.inputs.push_back(g.values[static_cast<std::size_t>(v)].name);
    l.output = g.values[static_cast<std::size_t>(n.output)].name;
    out.push_back(std::move(l));
  }
  return out;
}

std::string Engine::target_json() const { return state_->plan.target.dump(); }
std::string Engine::plan_json() const { return plan::plan_to_json(state_->plan).dump(); }
std::uint64_t Engine::activation_bytes() const noexcept { return state_->plan.memory.arena_bytes; }
std::uint64_t Engine::naive_activation_bytes() const noexcept { return state_->plan.memory.naive_bytes; }
std::uint64_t Engine::weight_bytes() const noexcept { return state_->weight_bytes; }

// ---- Execution --------------------------------------------------------------------------

struct Execution::State {
  Engine engine;
  std::byte* arena = nullptr;
  std::vector<Dims> input_dims;       // per graph input; rank -1 style: `set` flags below
  std::vector<bool> input_set;
  std::vector<void*> addresses;       // per io entry
  std::vector<graph::TensorDesc> shapes;  // per value, valid when !dirty
  bool dirty = true;

  explicit State(Engine e) : engine(std::move(e)) {}
  ~State() {
    if (arena) engine.state_->backend->deallocate(arena);
  }
  const plan::Plan& plan() const { return engine.state_->plan; }

  std::size_t io(std::string_view name) const {
    const auto& info = engine.io_tensor(name);
    return static_cast<std::size_t>(&info - plan().io.data());
  }

  void infer() {
    if (!dirty) return;
    const auto& p = plan();
    for (std::size_t i = 0; i < input_set.size(); ++i)
      if (!input_set[i])
        throw InvalidArgument("[execution] input '" + p.io[i].name + "' " + p.io[i].dims.str() +
                              " has dynamic dimensions: call set_input_shape first");
    shapes = graph::infer_shapes(p.graph, input_dims, runtime::evaluate_shape_node);
    for (std::size_t v = 0; v < shapes.size(); ++v)
      if (!shapes[v].dims.all_known())
        throw InvalidArgument("[execution] tensor '" + p.graph.values[v].name + "' has dims " + shapes[v].dims.str() +
                              " that depend on tensor values shape inference cannot compute (reshape dims and slice "
                              "bounds must come from add_shape outputs and constants)");
    for (std::size_t v = 0; v < shapes.size(); ++v)
      if (p.memory.offsets[v] >= 0 && bytes_of(shapes[v].type, shapes[v].dims) > p.max_bytes[v])
        throw InvalidArgument("[execution] tensor '" + p.graph.values[v].name + "' would need " +
                              std::to_string(bytes_of(shapes[v].type, shapes[v].dims)) + " bytes at these input shapes, more than the " +
                              std::to_string(p.max_bytes[v]) + " planned for the profile's max");
    dirty = false;
  }
};

Execution Engine::create_execution() const {
  auto st = std::make_unique<Execution::State>(*this);
  const auto& p = state_->plan;
  std::uint64_t bytes = align_up(p.memory.arena_bytes) + p.workspace_bytes;
  st->arena = static_cast<std::byte*>(state_->backend->allocate(bytes));
  st->addresses.assign(p.io.size(), nullptr);
  std::size_t inputs = p.graph.inputs.size();
  st->input_dims.resize(inputs);
  st->input_set.assign(inputs, false);
  for (std::size_t i = 0; i < inputs; ++i)
    if (p.io[i].min == p.io[i].max) {  // a fixed profile: the shape is known
      st->input_dims[i] = p.io[i].min;
      st->input_set[i] = true;
    }
  return Execution(std::move(st));
}

Execution::Execution(std::unique_ptr<State> s) : state_(std::move(s)) {}
Execution::~Execution() = default;
Execution::Execution(Execution&&) noexcept = default;
Execution& Execution::operator=(Execution&&) noexcept = default;

const Engine& Execution::engine() const noexcept { return state_->engine; }

void Execution::set_input_shape(std::string_view name, const Dims& dims) {
  auto i = state_->io(name);
  const auto& t = state_->plan().io[i];
  if (t.mode != TensorIOMode::kINPUT) throw InvalidArgument("[execution] '" + t.name + "' is an output, not an input");
  if (dims.rank() != t.dims.rank())
    throw InvalidArgument("[execution] input '" + t.name + "': shape " + dims.str() + " has rank " +
                          std::to_string(dims.rank()) + ", the engine's input has rank " + std::to_string(t.dims.rank()));
  for (int k = 0; k < dims.rank(); ++k)
    if (dims[k] < t.min[k] || dims[k] > t.max[k])
      throw InvalidArgument("[execution] input '" + t.name + "': shape " + dims.str() + " is outside the profile min " +
                            t.min.str() + ", max " + t.max.str() + " (dimension " + std::to_string(k) + ")");
  if (!state_->input_set[i] || !(state_->input_dims[i] == dims)) state_->dirty = true;
  state_->input_dims[i] = dims;
  state_->input_set[i] = true;
}

Dims Execution::tensor_shape(std::string_view name) const {
  auto i = state_->io(name);
  state_->infer();
  return state_->shapes[static_cast<std::size_t>(state_->plan().io_values[i])].dims;
}

void Execution::set_tensor_address(std::string_view name, void* data) { state_->addresses[state_->io(name)] = data; }

void Execution::enqueue(void* stream) { run_nodes(stream, nullptr); }

std::vector<double> Execution::enqueue_profiled(void* stream) {
  std::vector<double> seconds;
  run_nodes(stream, &seconds);
  return seconds;
}

void Execution::run_nodes(void* stream, std::vector<double>* seconds) {
  if (stream != nullptr) throw InvalidArgument("[execution] the CPU backend takes no stream (pass none)");
  auto& s = *state_;
  s.infer();
  const auto& p = s.plan();
  const auto& g = p.graph;
  std::vector<void*> ptr(g.values.size(), nullptr);
  for (std::size_t i = 0; i < p.io.size(); ++i) {
    auto v = static_cast<std::size_t>(p.io_values[i]);
    if (s.addresses[i] == nullptr && bytes_of(s.shapes[v].type, s.shapes[v].dims) > 0)
      throw InvalidArgument("[execution] no address for " + std::string(p.io[i].mode == TensorIOMode::kINPUT ? "input" : "output") +
                            " '" + p.io[i].name + "': call set_tensor_address");
    ptr[v] = s.addresses[i];
  }
  for (std::size_t v = 0; v < g.values.size(); ++v) {
    if (g.values[v].constant) ptr[v] = const_cast<void*>(g.values[v].constant->values());
    else if (p.memory.offsets[v] >= 0) ptr[v] = s.arena + p.memory.offsets[v];
  }
  void* workspace = s.arena + align_up(p.memory.arena_bytes);
  const auto& kernels = s.engine.state_->kernels;
  std::vector<runtime::Buffer> in;
  for (std::size_t n = 0; n < g.nodes.size(); ++n) {
    const auto& node = g.nodes[n];
    in.clear();
    for (int v : node.all_inputs()) {
      auto u = static_cast<std::size_t>(v);
      in.push_back({ptr[u], s.shapes[u].type, s.shapes[u].dims});
    }
    auto o = static_cast<std::size_t>(node.output);
    const auto start = seconds ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    kernels[n]->run(in, {ptr[o], s.shapes[o].type, s.shapes[o].dims}, workspace);
    if (seconds) seconds->push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
}

std::map<std::string, HostTensor> Execution::run(const std::map<std::string, HostTensorView>& inputs) {
  const auto& p = state_->plan();
  // run() binds the caller's arrays and its own outputs only for this call: afterwards the
  // addresses set with set_tensor_address are back (a later enqueue() must not write into
  // arrays this call returned, which the caller may have freed).
  struct Restore {
    std::vector<void*>& addresses;
    std::vector<void*> saved;
    ~Restore() { addresses = std::move(saved); }
  } restore{state_->addresses, state_->addresses};
  for (const auto& [name, view] : inputs) {
    const auto& t = state_->engine.io_tensor(name);
    if (t.mode != TensorIOMode::kINPUT) throw InvalidArgument("[execution] '" + name + "' is an output, not an input");
    if (view.type != t.type)
      throw InvalidArgument("[execution] input '" + name + "' is " + std::string(type_name(view.type)) + " but the engine takes " +
                            std::string(type_name(t.type)));
    set_input_shape(name, view.dims);
    set_tensor_address(name, const_cast<void*>(view.data));
  }
  for (const auto& t : p.io)
    if (t.mode == TensorIOMode::kINPUT && !inputs.count(t.name))
      throw InvalidArgument("[execution] input '" + t.name + "' is missing");
  std::map<std::string, HostTensor> out;
  for (const auto& t : p.io) {
    if (t.mode != TensorIOMode::kOUTPUT) continue;
    HostTensor h;
    h.type = t.type;
    h.dims = tensor_shape(t.name);
    h.nbytes = bytes_of(h.type, h.dims);
    h.data = std::shared_ptr<std::byte[]>(new std::byte[h.nbytes > 0 ? h.nbytes : 1]);
    set_tensor_address(t.name, h.data.get());
    out.emplace(t.name, std::move(h));
  }
  enqueue();
  return out;
}

}  // namespace tensoracle
