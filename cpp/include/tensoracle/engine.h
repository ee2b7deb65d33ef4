// tensoracle/engine.h — open an engine file and execute it.
//
//   tensoracle::Engine engine = tensoracle::Engine::load("linear.engine");
//   tensoracle::Execution exec = engine.create_execution();
//   exec.set_input_shape("features", {16, 32});
//   exec.set_tensor_address("features", features.data());   // caller-owned buffers
//   exec.set_tensor_address("result", result.data());
//   exec.enqueue();                                          // CPU: runs to completion
//
// An Engine is a shared, immutable handle: copies share the weights (mapped from the file, or
// copied once from bytes); Executions keep it alive. Each Execution owns its activation memory
// and shapes; several Executions of one Engine may run at the same time on different threads.
// One Execution runs one call at a time: a call from a second thread while another is inside
// it raises InvalidArgument (create one Execution per thread).
//
// Opening verifies, before anything else, the file's digest (XXH3-128 over the whole file but
// the digest itself) — any damaged or truncated file raises CorruptEngineError — then the
// format version and the target device (IncompatibleEngineError).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensoracle/types.h"

namespace tensoracle {

// The engine file format version this library reads and writes. 2: tactics are JSON objects
// and values carry their layout (an engine of version 1 gives IncompatibleEngineError, and
// open_engine's cache rebuilds it).
inline constexpr int kEngineFormatVersion = 2;

// Threads the CPU backend's kernels use, process-wide (default: the machine's cores;
// set_cpu_threads(0) restores the default).
void set_cpu_threads(int n);
int cpu_threads();

enum class TensorIOMode { kNONE = 0, kINPUT = 1, kOUTPUT = 2 };  // TensorRT's values (kNONE: not an I/O tensor)

struct IOTensorInfo {
  std::string name;
  TensorIOMode mode = TensorIOMode::kINPUT;
  DataType type = DataType::kFLOAT;
  Dims dims;            // as declared in the network: -1 for dims set at execution time
  Dims min, opt, max;   // inputs: the profile; outputs: the shapes at the profile's min/opt/max
};

// One node of the engine after fusion.
struct LayerInfo {
  std::string name;
  std::string type;                 // "matrix_multiply", ...
  std::vector<std::string> fused;   // layers fused into it, in order (folded dequantize layers first)
  std::string precision;            // the type it computes in: "float32", ..., "int8" / "fp8" for folded Q/DQ
  std::string tactic;                // the kernel and its configuration, one line ("cpu.gemm.onednn", ...)
  std::vector<std::string> inputs;  // tensor names
  std::string output;               // the node's result (a multi-output layer's output 0)
  std::vector<std::string> outputs; // every output it writes in one run: output, then a topk's or a plugin's others
  std::string output_layout;        // how the engine stores the output: "linear" or "channels_last"
};

// Owned host memory with a type and shape (what Execution::run returns).
struct HostTensor {
  DataType type = DataType::kFLOAT;
  Dims dims;
  std::shared_ptr<std::byte[]> data;
  std::size_t nbytes = 0;
};

// Borrowed host memory with a type and shape (what Execution::run takes).
struct HostTensorView {
  DataType type = DataType::kFLOAT;
  Dims dims;
  const void* data = nullptr;
};

// Writes engine bytes (what build_serialized_engine returns) to `path` atomically: a
// temporary file in the same folder, written and fsync'ed, then renamed over `path`, so that a
// reader never sees a partial file and an engine open on the old file keeps its bytes. Refuses
// to replace anything but a regular file. Throws IoError naming `path`.
void save_engine(std::span<const std::byte> bytes, const std::filesystem::path& path);

class Execution;
namespace runtime {
struct EngineAccess;  // internal: how the engine cache opens files it has verified before
}

class Engine {
 public:
  // Opens an engine held in memory (the bytes are copied). Throws CorruptEngineError,
  // IncompatibleEngineError.
  static Engine deserialize(std::span<const std::byte> bytes);
  // Opens an engine file, reading it into memory: whatever happens to the file afterwards
  // (replaced, deleted, or rewritten and truncated in place) the open engine keeps running on
  // the bytes it read. (open_engine maps the cache's own entries instead, which the cache only
  // ever replaces by rename: see cache.h.) Throws IoError, CorruptEngineError,
  // IncompatibleEngineError.
  static Engine load(const std::filesystem::path& path);

  const std::vector<IOTensorInfo>& io_tensors() const noexcept;
  const IOTensorInfo& io_tensor(std::string_view name) const;  // throws InvalidArgument
  std::vector<LayerInfo> layers() const;
  const std::string& name() const noexcept;

  std::string target_json() const;   // the device the engine was built for
  std::string device() const;        // where it runs in this process: "cpu", "cuda:0"
  std::string plan_json() const;     // the whole plan (I/O, nodes, tactics, memory)
  std::uint64_t activation_bytes() const noexcept;        // arena peak
  std::uint64_t naive_activation_bytes() const noexcept;  // sum of activation sizes
  std::uint64_t scratch_bytes() const noexcept;           // the nodes' scratch, at most one node's at a time
  std::uint64_t weight_bytes() const noexcept;
  // The engine file's bytes this engine was opened from (TensorRT's ICudaEngine::serialize):
  // save_engine(engine.serialized(), path) writes the same file. Valid while the engine lives.
  std::span<const std::byte> serialized() const noexcept;

  Execution create_execution() const;

  // The engine's device, for callers without a CUDA runtime of their own (the CLI's bench):
  // memory there (host memory for the CPU; freed with the last copy of the pointer), blocking
  // copies from and to the host, a stream (null for the CPU) and waiting for one.
  std::shared_ptr<void> allocate(std::size_t bytes) const;
  void copy_from_host(void* device_dst, const void* host_src, std::size_t bytes) const;
  void copy_to_host(void* host_dst, const void* device_src, std::size_t bytes) const;
  std::shared_ptr<void> create_stream() const;
  void synchronize(void* stream) const;

  struct State;

 private:
  explicit Engine(std::shared_ptr<const State> s) : state_(std::move(s)) {}
  friend class Execution;
  friend struct runtime::EngineAccess;
  std::shared_ptr<const State> state_;
};

class Execution {
 public:
  ~Execution();
  Execution(Execution&&) noexcept;
  Execution& operator=(Execution&&) noexcept;

  // Sets a dynamic input's shape for the next enqueue; throws InvalidArgument for an unknown
  // input, a rank or static-dim mismatch, or a shape outside the profile.
  void set_input_shape(std::string_view name, const Dims& dims);
  // The current shape of an I/O tensor (outputs follow from the input shapes).
  Dims tensor_shape(std::string_view name) const;
  // Binds a caller-owned buffer to an input or output: host memory for the CPU backend, device
  // memory of the engine's GPU for CUDA.
  void set_tensor_address(std::string_view name, void* data);
  // Runs the engine on the bound buffers. CPU: `stream` must be null; work completes before
  // enqueue returns. CUDA: `stream` is a cudaStream_t of the engine's device (null: the default
  // stream); kernels are queued on it and enqueue returns without waiting. Throws InvalidArgument when an input shape is unset or
  // an address is missing.
  void enqueue(void* stream = nullptr);
  // CUDA: after an enqueue on a stream (not the default stream), a later enqueue with the same
  // shapes and addresses captures the launches once as a CUDA graph and from then on replays it
  // (one launch instead of one per kernel). On by default; off launches every kernel each time.
  // The CPU backend ignores it.
  void set_graph_replay(bool enabled);
  bool graph_replay() const noexcept;
  // enqueue() that also measures each node: seconds per entry of Engine::layers(), in order
  // (the per-layer view of `tensoracle bench`). CUDA times on the device with events between
  // the nodes' launches, so a node's time is its kernels' time plus any launch gap before them;
  // the CPU times each node on the host. Does not replay a CUDA graph; returns once the work is done.
  std::vector<double> enqueue_profiled(void* stream = nullptr);

  // Convenience: sets shapes and addresses from `inputs` (host memory; types must match
  // exactly), allocates outputs, runs, returns them by name. CUDA: copies the inputs to device
  // buffers the execution keeps, runs on its own stream and copies the outputs back.
  std::map<std::string, HostTensor> run(const std::map<std::string, HostTensorView>& inputs);

  const Engine& engine() const noexcept;

  struct State;

 private:
  friend class Engine;
  struct Profiler;  // engine.cpp: marks after each node (enqueue_profiled)
  void run_nodes(void* stream, Profiler* profiler);
  explicit Execution(std::unique_ptr<State> s);
  std::unique_ptr<State> state_;
};

}  // namespace tensoracle
