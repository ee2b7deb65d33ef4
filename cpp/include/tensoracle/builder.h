// tensoracle/builder.h — turn a graph function into a serialized engine.
//
//   tensoracle::EngineBuild decl;
//   decl.inputs["features"] = tensoracle::InputShape::fixed({16, 32});
//   decl.settings.optimization_level = 0;
//   std::vector<std::byte> engine = tensoracle::build_serialized_engine(
//       [&](tensoracle::Network& net) { /* add_input, add_matrix_multiply, mark_output ... */ },
//       decl);
//
// The graph function is called once, with an empty Network. The builder holds it in a
// std::shared_ptr and drops its reference when it returns: a caller that needs the network
// afterwards takes a share of it with network.shared_from_this() (the Python binding does, so
// that networks, layers and tensors a Python graph function keeps stay valid); any other
// reference must not outlive the call. The builder validates the declaration against the network (InvalidArgument), runs its
// passes (dead code, constant folding, pointwise fusion), picks a tactic per node on the
// chosen backend, plans activation memory, and serialises everything into one engine file
// (see engine.h). A network the backend cannot run raises BuildError.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tensoracle/errors.h"
#include "tensoracle/network.h"
#include "tensoracle/types.h"

namespace tensoracle {

// The shapes an input may take at execution time: min <= opt <= max elementwise. The engine is
// tuned for `opt` and sized for `max`.
struct InputShape {
  Dims min, opt, max;
  static InputShape fixed(const Dims& dims) { return {dims, dims, dims}; }
  static InputShape ranged(const Dims& min, const Dims& opt, const Dims& max) { return {min, opt, max}; }
  bool is_fixed() const { return min == opt && opt == max; }
};

// Told of the build's progress (TensorRT's IProgressMonitor): phases nest ("Building engine",
// then its parts), each with a number of steps. The builder calls these on its own thread, in
// order; returning false from step_complete cancels the build, which then throws BuildCancelled.
// An exception thrown by a method ends the build and reaches the caller as it is.
//   "Building engine"            4 steps: the next four phases
//     "Optimizing the graph"     one step per pass (dead code, constant folding, fusions, ...)
//     "Choosing tactics"         one step per node (the CUDA backend times candidates here)
//     "Sizing scratch memory"    one step per node
//     "Writing the engine"       1 step
class BuildCancelled : public BuildError {
 public:
  using BuildError::BuildError;
};

class ProgressMonitor {
 public:
  virtual ~ProgressMonitor() = default;
  virtual void phase_start(const std::string& phase, const std::string& parent, int num_steps) = 0;
  virtual bool step_complete(const std::string& phase, int step) = 0;
  virtual void phase_finish(const std::string& phase) = 0;
};

struct BuilderSettings {
  int optimization_level = 3;      // 0..5: 0 takes the first tactic, >= 2 times candidates
  std::string device = "auto";     // "cpu", "cuda:N", or "auto" (a GPU when one is usable)
  std::uint64_t workspace_limit = 0;  // bytes of activation + scratch memory; 0 = no limit
  bool tf32 = false;               // must stay false: TF32 is never used
  bool verbose = false;            // log each pass's rewrites to stderr
  // Told of the build's progress; null: nobody. Not part of the engine's identity.
  std::shared_ptr<ProgressMonitor> progress;
  // kFLOAT: every layer computes in the type the network gives it (strongly typed). kHALF or
  // kBF16: TensorRT's weak typing (BuilderFlag.FP16 / BF16): float32 layers may compute in that
  // type, except reductions and normalizations; inputs and outputs keep their types.
  DataType weak_precision = DataType::kFLOAT;

  // Throws InvalidArgument for tf32 = true, optimization_level outside 0..5 or a
  // weak_precision other than kFLOAT, kHALF and kBF16.
  void validate() const;
};

struct EngineBuild {
  std::map<std::string, InputShape> inputs;
  BuilderSettings settings;

  // A canonical, deterministic text of the declaration (for cache identities).
  std::string canonical() const;
};

using GraphFunction = std::function<void(Network&)>;

// Builds and serialises an engine. Throws InvalidArgument for an invalid declaration or network
// (unknown or missing input, rank mismatch, min > opt or opt > max, a static dim contradicted,
// tf32 = true, optimization_level outside 0..5), BuildError when the build cannot be done.
// `plugins` names plugin libraries, loaded first (load_plugin_libraries: PluginLibraryError)
// so that the graph function can add their layers (Network::add_plugin). A plugin layer the
// chosen backend cannot run raises BuildError naming the layer and the backend.
std::vector<std::byte> build_serialized_engine(const GraphFunction& graph, const EngineBuild& declaration,
                                               const std::vector<std::filesystem::path>& plugins = {});

// Builds a network that is already defined (TensorRT's IBuilder::buildSerializedNetwork): the
// same build as above, for a program that creates the Network itself, adds its layers, then
// declares the shapes. The network is only read; it may be built again with other declarations.
// Plugin libraries its plugin layers need were loaded when the layers were added.
std::vector<std::byte> build_serialized_network(const Network& network, const EngineBuild& declaration);

}  // namespace tensoracle
