// Internal: the backend interface. One implementation per device kind: the CPU's
// (backends/cpu, in the core library) and CUDA's (backends/cuda, libtensoracle_cuda.so, loaded
// at run time by runtime::backend_for, see runtime/devices.cpp). A backend says which nodes it runs, which pointwise layers it can
// fuse into a node, which tactics it has for a node, and instantiates a node's kernel from its
// (serialised) tactic. It also owns the memory its kernels read and write, copies and streams.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace tensoracle::backends {

// The entry point's own version: bumped when tensoracle_cuda_backend's parameters change, so
// that a library of another version refuses before it reads them. Whether the structures passed
// after that match is the build identity's check (backends/build_identity.h), which needs no
// bump: any change to the headers that define them changes it.
inline constexpr int kBackendAbiVersion = 7;  // 2: plugin nodes; 3: Timeline; 4: TacticQuery; 5: build identity; 6: typed tactics, layouts, multi-output nodes; 7: fuses_attention

struct Buffer {
  void* data = nullptr;  // in the backend's memory
  DataType type = DataType::kFLOAT;
  Dims dims;
  // A shape tensor's values when the runtime knows them on the host (add_shape outputs and
  // what derives from them and constants): kernels of device backends read these instead of
  // `data` (a slice's start, for one). Null otherwise.
  const std::vector<std::int64_t>* host_values = nullptr;
};

enum class MemoryKind { kHost, kDevice };

inline constexpr std::uint64_t kNoScratchLimit = ~std::uint64_t{0};
enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };

// A node's executable form: inputs are node.all_inputs() in order, outputs node.outputs() (the
// final result first, then a multi-output node's others).
class NodeKernel {
 public:
  virtual ~NodeKernel() = default;
  virtual std::size_t workspace_bytes(std::span<const Buffer> inputs, std::span<const Buffer> outputs) const = 0;
  // Launches the node on `stream` (the CPU backend takes none and runs to completion).
  virtual void run(std::span<const Buffer> inputs, std::span<const Buffer> outputs, void* workspace, void* stream) const = 0;
};

// What the builder asks of Backend::choose_tactic for one node.
struct TacticQuery {
  // The node's inputs (node.all_inputs()) and output at the profile's opt shapes, where
  // candidates are timed, and at its max shapes, where its scratch is reserved.
  std::span<const graph::TensorDesc> inputs;
  graph::TensorDesc output;
  std::span<const graph::TensorDesc> max_inputs;
  graph::TensorDesc max_output;
  int optimization_level = 0;
  // Bytes of scratch the node may use: the build's workspace_limit less the activations' arena
  // (kNoScratchLimit without a limit).
  std::uint64_t scratch_limit = kNoScratchLimit;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda"
  virtual std::string device() const { return name(); }  // "cpu", "cuda:0"
  // What an engine built here depends on: goes into the engine's target and the cache identity.
  virtual nlohmann::json target() const = 0;
  // Throws IncompatibleEngineError when an engine built for `target` cannot run here.
  virtual void check_compatible(const nlohmann::json& target) const = 0;
  // Empty when supported; else why not (the builder raises BuildError with it).
  virtual std::string unsupported_reason(const graph::Graph& g, const graph::Node& n) const = 0;
  virtual bool can_fuse(const graph::Graph& g, const graph::Node& producer, const graph::EpilogueOp& op) const = 0;
  // Whether builder::fuse_attention should replace the decomposed attention by `attention` (an
  // attention node, its inputs set): where the backend's fused kernel beats the layers it replaces.
  virtual bool fuses_attention(const graph::Graph& g, const graph::Node& attention) const = 0;
  // Candidate tactics for the node, best guess first.
  virtual std::vector<graph::Tactic> tactics(const graph::Graph& g, const graph::Node& n) const = 0;
  // The tactic to store for node `n`, and the layout its output is stored in (graph/tactic.h):
  // the first candidate and a linear output unless the backend decides otherwise at this
  // level. The builder calls it node by node in order, recording each choice's layout on the
  // node's output before the next node's call, so a node sees how its inputs are stored. A
  // tactic's scratch (NodeKernel::workspace_bytes at the profile's max shapes) must stay within
  // q.scratch_limit where the backend has a leaner choice; the builder checks the result.
  struct Choice {
    graph::Tactic tactic;
    graph::Layout output_layout = graph::Layout::kLinear;
  };
  virtual Choice choose_tactic(const graph::Graph& g, const graph::Node& n, const TacticQuery& q) const {
    (void)q;
    auto t = tactics(g, n);
    return {t.empty() ? graph::Tactic() : t.front()};
  }
  // Instantiates node `n` with its tactic and its values' layouts; throws CorruptEngineError
  // when they are not ones this backend would choose for the node (an engine file is untrusted).
  virtual std::unique_ptr<NodeKernel> instantiate(const graph::Graph& g, const graph::Node& n) const = 0;

  // Memory the kernels use (host for the CPU, the GPU's for CUDA), aligned to 64 bytes or more.
  virtual MemoryKind memory() const { return MemoryKind::kHost; }
  virtual void* allocate(std::size_t bytes) const = 0;
  virtual void deallocate(void* p) const noexcept = 0;
  // Asynchronous on `stream` for device backends (a host source must stay valid until the
  // stream reaches the copy); the CPU's copies are memcpy.
  virtual void copy(void* dst, const void* src, std::size_t bytes, CopyKind kind, void* stream) const;
  // Streams of the backend (null for the CPU); synchronize waits for everything on `stream`.
  virtual void* create_stream() const { return nullptr; }
  virtual void destroy_stream(void*) const noexcept {}
  virtual void synchronize(void*) const {}
  // Checks a caller's stream argument (the CPU refuses a non-null one).
  virtual void check_stream(void* stream) const;

  // Per-node timing (Execution::enqueue_profiled): mark() after each node's launches;
  // seconds() waits for the work and gives the time between consecutive marks (the first from
  // when the timeline was made). A device backend times on the device (events on the stream)
  // so nothing stalls between nodes; the default synchronizes and reads the host clock.
  struct Timeline {
    virtual ~Timeline() = default;
    virtual void mark() = 0;
    virtual std::vector<double> seconds() = 0;
  };
  virtual std::unique_ptr<Timeline> timeline(void* stream) const;

  // Executions of fixed shapes may record their launches once and replay them (CUDA graphs).
  // Returns an opaque recording, or null when the backend has none; see runtime/engine.cpp.
  struct Recording {
    virtual ~Recording() = default;
    virtual void replay(void* stream) const = 0;
  };
  virtual std::unique_ptr<Recording> record(void* stream, const std::function<void(void*)>& launches) const {
    (void)stream;
    (void)launches;
    return nullptr;
  }
};

}  // namespace tensoracle::backends
