#include "tensoracle/engine.h"

#include <atomic>
#include <cstring>
#include <thread>
#include <unordered_map>

#include "backends/cpu/cpu_backend.h"
#include "core/atomic_file.h"
#include "core/mapped_file.h"
#include "plan/plan.h"
#include "runtime/devices.h"
#include "runtime/engine_access.h"
#include "runtime/memory_checks.h"
#include "tensoracle/errors.h"

namespace tensoracle {

namespace {

constexpr std::size_t kAlign = 256;  // what GPU kernels (cuBLASLt's among them) like best
std::uint64_t align_up(std::uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Bytes of a tensor whose shape inference gave known dims (checked against the plan before use).
std::uint64_t bytes_of(DataType t, const Dims& d) { return graph::byte_size(t, d).value_or(0); }

}  // namespace

struct Engine::State {
  plan::Plan plan;
  std::shared_ptr<const void> owner;  // the mapping or the byte copy the weights live in
  std::span<const std::byte> file;     // the engine file's bytes (in `owner`)
  const backends::Backend* backend = nullptr;
  std::vector<std::unique_ptr<backends::NodeKernel>> kernels;
  std::unordered_map<std::string, std::size_t> io_index;
  std::uint64_t weight_bytes = 0;
  // Where each constant value lives for the kernels: in the mapping for host backends; for
  // device backends, in one block uploaded when the engine opens and shared by its executions.
  std::vector<void*> constants;
  void* device_weights = nullptr;
  // Plugin nodes: their CUDA enqueue need not be capturable, so such engines stay eager.
  bool has_plugins = false;

  ~State() {
    if (device_weights) backend->deallocate(device_weights);
  }
};

namespace {

// Points State::constants at the weights: in place for host backends; for device backends
// after copying them all into one device block (once per engine).
void upload_constants(Engine::State& st) {
  const auto& values = st.plan.graph.values;
  st.constants.assign(values.size(), nullptr);
  if (st.backend->memory() == backends::MemoryKind::kHost) {
    for (std::size_t v = 0; v < values.size(); ++v)
      if (values[v].constant) st.constants[v] = const_cast<void*>(values[v].constant->values());
    return;
  }
  std::uint64_t total = 0;
  for (const auto& v : values)
    if (v.constant) total += align_up(v.constant->bytes().size());
  if (total == 0) return;
  st.device_weights = st.backend->allocate(total);
  auto* base = static_cast<std::byte*>(st.device_weights);
  std::uint64_t at = 0;
  void* stream = st.backend->create_stream();
  try {
    for (std::size_t v = 0; v < values.size(); ++v) {
      if (!values[v].constant) continue;
      auto bytes = values[v].constant->bytes();
      st.constants[v] = base + at;
      st.backend->copy(base + at, bytes.data(), bytes.size(), backends::CopyKind::kHostToDevice, stream);
      at += align_up(bytes.size());
    }
    st.backend->synchronize(stream);
  } catch (...) {
    st.backend->destroy_stream(stream);
    throw;
  }
  st.backend->destroy_stream(stream);
}

std::shared_ptr<const Engine::State> open_state(std::span<const std::byte> bytes, const std::string& name,
                                                std::shared_ptr<const void> owner, bool verify_digest = true) {
  auto st = std::make_shared<Engine::State>();
  st->plan = plan::read_engine(bytes, name, owner, verify_digest);
  st->owner = std::move(owner);
  st->file = bytes;
  const auto& backend_name = st->plan.target.is_object() ? st->plan.target.value("backend", "") : "";
  if (backend_name == "cpu") {
    st->backend = &cpu::cpu_backend();
  } else if (backend_name == "cuda") {
    try {
      st->backend = &runtime::cuda_backend(-1);  // the calling thread's current device
    } catch (const BuildError& e) {
      throw IncompatibleEngineError("[engine] " + name + ": built for CUDA (" + st->plan.target.value("device", "?") +
                                    "), which is not available here: " + e.what());
    }
  } else {
    throw IncompatibleEngineError("[engine] " + name + ": built for the '" + backend_name +
                                  "' backend, which this build of tensoracle does not have; rebuild it for this device");
  }
  st->backend->check_compatible(st->plan.target);
  for (const auto& n : st->plan.graph.nodes) {
    st->kernels.push_back(st->backend->instantiate(st->plan.graph, n));
    st->has_plugins = st->has_plugins || n.type() == LayerType::kPLUGIN;
  }
  runtime::check_memory_plan(st->plan, st->kernels, name);
  for (std::size_t i = 0; i < st->plan.io.size(); ++i) st->io_index.emplace(st->plan.io[i].name, i);
  for (const auto& v : st->plan.graph.values)
    if (v.constant) st->weight_bytes += v.constant->bytes().size();
  upload_constants(*st);
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

std::span<const std::byte> Engine::serialized() const noexcept { return state_->file; }

void save_engine(std::span<const std::byte> bytes, const std::filesystem::path& path) {
  core::AtomicFile out(path, "engine");
  out.write(bytes);
  out.commit();
}

Engine Engine::load(const std::filesystem::path& path) {
  return runtime::EngineAccess::load_file(path, nullptr).engine;
}

namespace runtime {

LoadedEngine EngineAccess::load_bytes(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                                      const core::FileStat& stat, const std::filesystem::path& path,
                                      const std::function<bool(const core::FileStat&)>& skip_digest) {
  const bool verify = !skip_digest || !skip_digest(stat);
  return {Engine(open_state(bytes, path.string(), std::move(owner), verify)), stat, verify};
}

LoadedEngine EngineAccess::load_file(const std::filesystem::path& path,
                                     const std::function<bool(const core::FileStat&)>& skip_digest) {
  core::FileCopy copy;
  try {
    copy = core::read_file(path, "engine");
  } catch (const FormatError& e) {
    throw CorruptEngineError(std::string(e.what()) + "; expected an engine file");
  }
  const std::span<const std::byte> bytes{copy.data.get(), copy.size};
  return load_bytes(bytes, std::shared_ptr<const void>(copy.data, copy.data.get()), copy.stat, path, skip_digest);
}

LoadedEngine EngineAccess::load_fd(int fd, const std::filesystem::path& path,
                                   const std::function<bool(const core::FileStat&)>& skip_digest) {
  std::shared_ptr<core::MappedFile> map;
  try {
    map = std::make_shared<core::MappedFile>(fd, path, false, "engine");
  } catch (const FormatError& e) {
    throw CorruptEngineError(std::string(e.what()) + "; expected an engine file");
  }
  const auto bytes = map->bytes();
  return load_bytes(bytes, std::shared_ptr<const void>(map, bytes.data()), map->stat(), path, skip_digest);
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
    l.fused = graph::fused_layers(n);
    l.precision = std::string(type_name(graph::arithmetic_type(g, n)));
    l.tactic = graph::describe(n.tactic);
    for (int v : n.all_inputs()) l.inputs.push_back(g.values[static_cast<std::size_t>(v)].name);
    l.output = g.values[static_cast<std::size_t>(n.output)].name;
    for (int v : n.outputs()) l.outputs.push_back(g.values[static_cast<std::size_t>(v)].name);
    l.output_layout = std::string(graph::layout_name(g.values[static_cast<std::size_t>(n.output)].layout));
    out.push_back(std::move(l));
  }
  return out;
}

std::string Engine::target_json() const { return state_->plan.target.dump(); }
std::string Engine::device() const { return state_->backend->device(); }

std::shared_ptr<void> Engine::allocate(std::size_t bytes) const {
  auto st = state_;
  void* p = st->backend->allocate(std::max<std::size_t>(bytes, 1));
  return std::shared_ptr<void>(p, [st](void* q) { st->backend->deallocate(q); });
}

void Engine::copy_from_host(void* dst, const void* src, std::size_t bytes) const {
  const auto& b = *state_->backend;
  b.copy(dst, src, bytes, b.memory() == backends::MemoryKind::kHost ? backends::CopyKind::kDeviceToDevice : backends::CopyKind::kHostToDevice, nullptr);
  b.synchronize(nullptr);
}

void Engine::copy_to_host(void* dst, const void* src, std::size_t bytes) const {
  const auto& b = *state_->backend;
  b.copy(dst, src, bytes, b.memory() == backends::MemoryKind::kHost ? backends::CopyKind::kDeviceToDevice : backends::CopyKind::kDeviceToHost, nullptr);
  b.synchronize(nullptr);
}

std::shared_ptr<void> Engine::create_stream() const {
  auto st = state_;
  void* s = st->backend->create_stream();
  if (!s) return nullptr;
  return std::shared_ptr<void>(s, [st](void* q) { st->backend->destroy_stream(q); });
}

void Engine::synchronize(void* stream) const { state_->backend->synchronize(stream); }
std::string Engine::plan_json() const { return plan::plan_to_json(state_->plan).dump(); }
std::uint64_t Engine::activation_bytes() const noexcept { return state_->plan.memory.arena_bytes; }
std::uint64_t Engine::naive_activation_bytes() const noexcept { return state_->plan.memory.naive_bytes; }
std::uint64_t Engine::scratch_bytes() const noexcept { return state_->plan.workspace_bytes; }
std::uint64_t Engine::weight_bytes() const noexcept { return state_->weight_bytes; }

// ---- Execution --------------------------------------------------------------------------

struct Execution::State {
  Engine engine;
  const backends::Backend& backend;
  std::byte* arena = nullptr;
  std::vector<Dims> input_dims;       // per graph input; rank -1 style: `set` flags below
  std::vector<bool> input_set;
  std::vector<void*> addresses;       // per io entry
  std::vector<graph::TensorDesc> shapes;  // per value, valid when !dirty
  graph::ShapeValues values;          // per value: shape-tensor values known on the host
  // Device backends: the bytes of host-known shape tensors, uploaded instead of running their
  // nodes (per value; empty when the node runs).
  std::vector<std::vector<std::byte>> host_bytes;
  bool dirty = true;
  // CUDA graphs: the shape epoch (bumped when an input shape changes) and addresses of the
  // previous eager enqueue, and the recording made from them.
  bool graph_replay = true;
  std::uint64_t shape_epoch = 0;
  std::uint64_t warm_epoch = ~0ull;
  std::vector<void*> warm_addresses;
  void* warm_stream = nullptr;
  std::unique_ptr<backends::Backend::Recording> recording;
  // Execution::run on a device backend: I/O buffers in device memory and a stream of its own.
  std::byte* io_block = nullptr;
  std::vector<std::byte*> io_device;
  void* run_stream = nullptr;

  // The thread inside one of the Execution's methods (none when idle): one Execution used
  // from two threads at once is refused, not raced.
  std::atomic<std::thread::id> user{};

  explicit State(Engine e) : engine(std::move(e)), backend(*engine.state_->backend) {}
  ~State() {
    if (arena) backend.deallocate(arena);
    if (io_block) backend.deallocate(io_block);
    if (run_stream) backend.destroy_stream(run_stream);
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
    shapes = graph::infer_shapes(p.graph, input_dims, cpu::evaluate_shape_node, &values);
    for (std::size_t v = 0; v < shapes.size(); ++v)
      if (!shapes[v].dims.all_known())
        throw InvalidArgument("[execution] tensor '" + p.graph.values[v].name + "' has dims " + shapes[v].dims.str() +
                              " that depend on tensor values shape inference cannot compute (reshape dims and slice "
                              "bounds must come from add_shape outputs and constants)");
    // Every tensor a kernel writes or the caller binds (arena values, inputs and outputs, whose
    // device buffers run() sizes from the plan) must fit what was planned at the profile's max.
    for (std::size_t v = 0; v < shapes.size(); ++v) {
      if (p.graph.values[v].constant) continue;
      const auto bytes = graph::byte_size(shapes[v].type, shapes[v].dims);
      if (!bytes || *bytes > p.max_bytes[v])
        throw InvalidArgument("[execution] tensor '" + p.graph.values[v].name + "' has dims " + shapes[v].dims.str() +
                              " at these input shapes, more than the " + std::to_string(p.max_bytes[v]) +
                              " bytes planned for the profile's max");
    }
    // Each node's scratch at these shapes must fit what was planned at the profile's max (a
    // kernel's need may not shrink with its shapes: a plugin's workspace_size, say).
    std::vector<backends::Buffer> in, out;
    for (std::size_t n = 0; n < p.graph.nodes.size(); ++n) {
      const auto& node = p.graph.nodes[n];
      in.clear();
      out.clear();
      for (int v : node.all_inputs()) in.push_back({nullptr, shapes[static_cast<std::size_t>(v)].type, shapes[static_cast<std::size_t>(v)].dims});
      for (int v : node.outputs()) out.push_back({nullptr, shapes[static_cast<std::size_t>(v)].type, shapes[static_cast<std::size_t>(v)].dims});
      const auto need = engine.state_->kernels[n]->workspace_bytes(in, out);
      if (need > p.workspace_bytes)
        throw InvalidArgument("[execution] layer '" + node.name + "' needs " + std::to_string(need) +
                              " bytes of scratch at these input shapes, more than the " + std::to_string(p.workspace_bytes) +
                              " planned at the profile's max" +
                              (node.type() == LayerType::kPLUGIN ? " (a plugin's workspace_size must not grow when shapes shrink)" : ""));
    }
    host_bytes.assign(shapes.size(), {});
    if (backend.memory() == backends::MemoryKind::kDevice)
      for (const auto& n : p.graph.nodes) {
        auto o = static_cast<std::size_t>(n.output);
        if (!values[o]) continue;
        const auto& v = *values[o];
        auto& b = host_bytes[o];
        if (shapes[o].type == DataType::kINT32) {
          b.resize(v.size() * 4);
          for (std::size_t k = 0; k < v.size(); ++k) {
            auto x = static_cast<std::int32_t>(v[k]);
            std::memcpy(b.data() + 4 * k, &x, 4);
          }
        } else {
          b.resize(v.size() * 8);
          if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
        }
      }
    dirty = false;
  }
};

Execution Engine::create_execution() const {
  auto st = std::make_unique<Execution::State>(*this);
  const auto& p = state_->plan;
  // Both sizes were checked against kMaxEngineMemory when the engine opened: no overflow.
  const std::uint64_t bytes = align_up(p.memory.arena_bytes) + p.workspace_bytes;
  try {
    st->arena = static_cast<std::byte*>(st->backend.allocate(bytes));
  } catch (const std::bad_alloc&) {
    throw IncompatibleEngineError("[execution] engine '" + p.name + "': cannot allocate " + std::to_string(bytes) +
                                  " bytes of activations and scratch on " + st->backend.device() +
                                  " (out of memory); free memory, or rebuild the engine with a smaller profile max");
  }
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

namespace {

// Marks an Execution in use by this thread for the scope of one public call (calls nested in
// it on the same thread pass); another thread's call meanwhile raises InvalidArgument.
class InUse {
 public:
  explicit InUse(std::atomic<std::thread::id>& user) : user_(user) {
    std::thread::id idle{};
    const auto me = std::this_thread::get_id();
    if (user_.compare_exchange_strong(idle, me, std::memory_order_acquire)) {
      outer_ = true;
    } else if (idle != me) {
      throw InvalidArgument("[execution] this execution is in use by another thread; an Execution runs one call at a "
                            "time: create one execution per thread (Engine::create_execution)");
    }
  }
  ~InUse() {
    if (outer_) user_.store(std::thread::id{}, std::memory_order_release);
  }
  InUse(const InUse&) = delete;
  InUse& operator=(const InUse&) = delete;

 private:
  std::atomic<std::thread::id>& user_;
  bool outer_ = false;
};

}  // namespace

Execution::Execution(std::unique_ptr<State> s) : state_(std::move(s)) {}
Execution::~Execution() = default;
Execution::Execution(Execution&&) noexcept = default;
Execution& Execution::operator=(Execution&&) noexcept = default;

const Engine& Execution::engine() const noexcept { return state_->engine; }

void Execution::set_input_shape(std::string_view name, const Dims& dims) {
  InUse in_use(state_->user);
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
  if (!state_->input_set[i] || !(state_->input_dims[i] == dims)) {
    state_->dirty = true;
    ++state_->shape_epoch;
  }
  state_->input_dims[i] = dims;
  state_->input_set[i] = true;
}

Dims Execution::tensor_shape(std::string_view name) const {
  InUse in_use(state_->user);
  auto i = state_->io(name);
  state_->infer();
  return state_->shapes[static_cast<std::size_t>(state_->plan().io_values[i])].dims;
}

void Execution::set_tensor_address(std::string_view name, void* data) {
  InUse in_use(state_->user);
  state_->addresses[state_->io(name)] = data;
}

void Execution::set_graph_replay(bool enabled) {
  InUse in_use(state_->user);
  state_->graph_replay = enabled;
  if (!enabled) state_->recording.reset();
}
bool Execution::graph_replay() const noexcept { return state_->graph_replay; }

void Execution::enqueue(void* stream) {
  InUse in_use(state_->user);
  auto& s = *state_;
  const bool device = s.backend.memory() == backends::MemoryKind::kDevice;
  if (!device || !s.graph_replay || stream == nullptr) {
    run_nodes(stream, nullptr);
    return;
  }
  s.infer();
  // Host-computed shape tensors are copied from pageable memory, and plugins' launches need not
  // be capturable: such engines run eagerly.
  bool uploads = s.engine.state_->has_plugins;
  for (const auto& b : s.host_bytes) uploads = uploads || !b.empty();
  const bool same = s.warm_epoch == s.shape_epoch && s.warm_addresses == s.addresses && s.warm_stream == stream;
  if (uploads || !same) {
    s.recording.reset();
    run_nodes(stream, nullptr);
    s.warm_epoch = s.shape_epoch;
    s.warm_addresses = s.addresses;
    s.warm_stream = stream;
    return;
  }
  if (!s.recording) {
    s.recording = s.backend.record(stream, [this](void* st) { run_nodes(st, nullptr); });
    if (!s.recording) {
      run_nodes(stream, nullptr);
      return;
    }
  }
  s.recording->replay(stream);
}

struct Execution::Profiler {
  backends::Backend::Timeline& timeline;
};

std::vector<double> Execution::enqueue_profiled(void* stream) {
  InUse in_use(state_->user);
  state_->backend.check_stream(stream);
  auto timeline = state_->backend.timeline(stream);
  Profiler profiler{*timeline};
  run_nodes(stream, &profiler);
  return timeline->seconds();
}

void Execution::run_nodes(void* stream, Profiler* profiler) {
  auto& s = *state_;
  const auto& backend = s.backend;
  backend.check_stream(stream);
  s.infer();
  const auto& p = s.plan();
  const auto& g = p.graph;
  const bool device = backend.memory() == backends::MemoryKind::kDevice;
  std::vector<void*> ptr(g.values.size(), nullptr);
  for (std::size_t i = 0; i < p.io.size(); ++i) {
    auto v = static_cast<std::size_t>(p.io_values[i]);
    if (s.addresses[i] == nullptr && bytes_of(s.shapes[v].type, s.shapes[v].dims) > 0)
      throw InvalidArgument("[execution] no address for " + std::string(p.io[i].mode == TensorIOMode::kINPUT ? "input" : "output") +
                            " '" + p.io[i].name + "': call set_tensor_address");
    ptr[v] = s.addresses[i];
  }
  const auto& constants = s.engine.state_->constants;
  for (std::size_t v = 0; v < g.values.size(); ++v) {
    if (g.values[v].constant) ptr[v] = constants[v];
    else if (p.memory.offsets[v] >= 0) ptr[v] = s.arena + p.memory.offsets[v];
  }
  void* workspace = s.arena + align_up(p.memory.arena_bytes);
  const auto& kernels = s.engine.state_->kernels;
  std::vector<backends::Buffer> in, out;
  for (std::size_t n = 0; n < g.nodes.size(); ++n) {
    const auto& node = g.nodes[n];
    auto o = static_cast<std::size_t>(node.output);  // a host-computed shape tensor: one output
    if (device && !s.host_bytes[o].empty()) {
      // A shape tensor the host computed: its bytes, not a kernel.
      if (ptr[o]) backend.copy(ptr[o], s.host_bytes[o].data(), s.host_bytes[o].size(), backends::CopyKind::kHostToDevice, stream);
    } else {
      in.clear();
      for (int v : node.all_inputs()) {
        auto u = static_cast<std::size_t>(v);
        in.push_back({ptr[u], s.shapes[u].type, s.shapes[u].dims, s.values[u] ? &*s.values[u] : nullptr});
      }
      // The node's outputs (node.outputs() order), without allocating on this path: every run.
      out.clear();
      auto add = [&](int v) {
        auto u = static_cast<std::size_t>(v);
        out.push_back({ptr[u], s.shapes[u].type, s.shapes[u].dims});
      };
      add(node.output);
      for (int v : node.extra_outputs) add(v);
      kernels[n]->run(in, out, workspace, stream);
    }
    if (profiler) profiler->timeline.mark();
  }
}

std::map<std::string, HostTensor> Execution::run(const std::map<std::string, HostTensorView>& inputs) {
  InUse in_use(state_->user);
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
  auto& s = *state_;
  if (s.backend.memory() == backends::MemoryKind::kHost) {
    enqueue();
    return out;
  }
  // A device backend: copy the inputs into device buffers (sized for the profile's max, made
  // once), run on the execution's own stream, copy the outputs back.
  if (!s.io_block) {
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < p.io.size(); ++i) total += align_up(p.max_bytes[static_cast<std::size_t>(p.io_values[i])]);
    s.io_block = static_cast<std::byte*>(s.backend.allocate(std::max<std::uint64_t>(total, kAlign)));
    std::uint64_t at = 0;
    for (std::size_t i = 0; i < p.io.size(); ++i) {
      s.io_device.push_back(s.io_block + at);
      at += align_up(p.max_bytes[static_cast<std::size_t>(p.io_values[i])]);
    }
    s.run_stream = s.backend.create_stream();
  }
  std::vector<const void*> host(p.io.size(), nullptr);
  for (std::size_t i = 0; i < p.io.size(); ++i) {
    host[i] = s.addresses[i];
    s.addresses[i] = s.io_device[i];
  }
  s.infer();
  for (std::size_t i = 0; i < p.io.size(); ++i) {
    if (p.io[i].mode != TensorIOMode::kINPUT) continue;
    const auto& d = s.shapes[static_cast<std::size_t>(p.io_values[i])];
    s.backend.copy(s.io_device[i], host[i], bytes_of(d.type, d.dims), backends::CopyKind::kHostToDevice, s.run_stream);
  }
  enqueue(s.run_stream);
  for (auto& [name, h] : out)
    s.backend.copy(h.data.get(), s.io_device[s.io(name)], h.nbytes, backends::CopyKind::kDeviceToHost, s.run_stream);
  s.backend.synchronize(s.run_stream);
  return out;
}

}  // namespace tensoracle
