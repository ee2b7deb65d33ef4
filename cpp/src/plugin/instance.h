// Internal: the host side of one plugin — a TensoraclePlugin made by a creator, owned here and
// called only through these methods, which check what the plugin returns and turn its error
// codes into exceptions naming it. The graph (shape inference), the CPU backend and the CUDA
// backend use it; it has no state beyond the plugin, so the CUDA backend library may carry its
// own copy of this code (registry.h, which has process state, stays in the core).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tensoracle/network.h"
#include "tensoracle/plugin.h"

namespace tensoracle {

struct PluginTensorDesc {
  DataType type = DataType::kFLOAT;
  Dims dims;
};

class PluginInstance {
 public:
  // Takes ownership of `plugin` (destroyed through its ABI). `label` names it in messages
  // ("plugin 'ns::Name' version 1 (libx.so)"). Throws PluginLibraryError for a plugin of another
  // ABI version or without the functions every plugin has, InvalidArgument when it reports no
  // outputs or an error (the plugin is destroyed either way).
  PluginInstance(TensoraclePlugin* plugin, std::string label);
  ~PluginInstance();
  PluginInstance(const PluginInstance&) = delete;
  PluginInstance& operator=(const PluginInstance&) = delete;

  const std::string& label() const noexcept { return label_; }
  int num_outputs() const noexcept { return num_outputs_; }
  bool has_backend(int backend_bit) const noexcept;

  // The outputs' types and dims for inputs `in` (dims may be -1). Checks the plugin's answer:
  // a valid type, rank <= 8, dims >= -1, and no -1 when every input dim is known. Throws
  // InvalidArgument (without the layer's name: the caller adds it).
  std::vector<PluginTensorDesc> output_descs(std::span<const PluginTensorDesc> in) const;
  // Empty when `backend_bit` runs these types and dims, else why not.
  std::string unsupported_reason(int backend_bit, std::span<const PluginTensorDesc> in,
                                 std::span<const PluginTensorDesc> out) const;
  std::uint64_t workspace_size(int backend_bit, std::span<const PluginTensorDesc> in,
                               std::span<const PluginTensorDesc> out) const;
  // Runs the plugin; throws (InvalidArgument, UnsupportedError or Error) with its message.
  void enqueue_cpu(std::span<const PluginTensorDesc> in, const void* const* inputs, std::span<const PluginTensorDesc> out,
                   void* const* outputs, void* workspace, std::uint64_t workspace_bytes) const;
  void enqueue_cuda(std::span<const PluginTensorDesc> in, const void* const* inputs, std::span<const PluginTensorDesc> out,
                    void* const* outputs, void* workspace, std::uint64_t workspace_bytes, void* stream) const;

 private:
  [[noreturn]] void fail(std::int32_t code, const char* what, const char* message) const;

  TensoraclePlugin* plugin_;
  std::string label_;
  int num_outputs_ = 0;
};

// One call of a plugin node that keeps output `keep` (the others are scratch), or all of them
// (keep < 0: a node with every output): every output's description at inputs `in`, and the
// node's workspace — the plugin's own scratch first, then each output not kept, each at a
// multiple of `align`.
struct PluginCall {
  std::vector<PluginTensorDesc> outputs;
  std::uint64_t plugin_workspace = 0;
  std::vector<std::uint64_t> offsets;  // per output: its place in the workspace (unused for `keep`, or all where keep < 0)
  std::uint64_t workspace = 0;         // total bytes
};
PluginCall plan_plugin_call(const PluginInstance& plugin, int backend_bit, std::span<const PluginTensorDesc> in, int keep,
                            std::uint64_t align);

}  // namespace tensoracle
