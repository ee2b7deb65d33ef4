// Internal: the backend interface. One implementation per device kind (CPU here; CUDA as
// its own shared library later). A backend says which nodes it runs, which pointwise layers
// it can fuse into a node, which tactics it has for a node, and instantiates a node's kernel
// from its (serialised) tactic. It also owns the memory kind its kernels read and write.
#pragma once

#include <cstddef>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace tensoracle::runtime {

struct Buffer {
  void* data = nullptr;
  DataType type = DataType::kFLOAT;
  Dims dims;
};

// A node's executable form: inputs are node.all_inputs() in order, then the output.
class NodeKernel {
 public:
  virtual ~NodeKernel() = default;
  virtual std::size_t workspace_bytes(std::span<const Buffer> inputs, const Buffer& output) const = 0;
  virtual void run(std::span<const Buffer> inputs, const Buffer& output, void* workspace) const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda"
  // What an engine built here depends on: goes into the engine's target and the cache identity.
  virtual nlohmann::json target() const = 0;
  // Throws IncompatibleEngineError when an engine built for `target` cannot run here.
  virtual void check_compatible(const nlohmann::json& target) const = 0;
  // Empty when supported; else why not (the builder raises BuildError with it).
  virtual std::string unsupported_reason(const graph::Graph& g, const graph::Node& n) const = 0;
  virtual bool can_fuse(const graph::Graph& g, const graph::Node& producer, const graph::EpilogueOp& op) const = 0;
  // Candidate tactics for the node, best guess first.
  virtual std::vector<std::string> tactics(const graph::Graph& g, const graph::Node& n) const = 0;
  virtual std::unique_ptr<NodeKernel> instantiate(const graph::Graph& g, const graph::Node& n) const = 0;

  virtual void* allocate(std::size_t bytes) const = 0;
  virtual void deallocate(void* p) const noexcept = 0;
};

const Backend& cpu_backend();

// The backend for a device string ("cpu", "cuda:0", "auto"); throws BuildError when the
// device is unavailable and InvalidArgument when the string is malformed.
const Backend& backend_for(const std::string& device);

// Evaluates node `n` of `g` on the CPU with constant inputs only; the result as owned weights.
Weights evaluate_constant_node(const graph::Graph& g, const graph::Node& n);

// The shape-tensor evaluator of graph::infer_shapes: runs node `n` on the CPU from the values
// of its inputs (all shape tensors).
std::vector<std::int64_t> evaluate_shape_node(const graph::Graph& g, const graph::Node& n,
                                              std::span<const graph::TensorDesc> inputs, const graph::ShapeValues& values,
                                              const graph::TensorDesc& out);

}  // namespace tensoracle::runtime
