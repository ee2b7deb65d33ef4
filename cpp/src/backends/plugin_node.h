// Internal: running a plugin node, shared by the CPU and CUDA backends (each passes its own
// enqueue): the plugin's output descriptions at these input shapes, the check against shape
// inference, and the outputs this node does not keep placed in the workspace after the
// plugin's own scratch. Errors are prefixed with the backend and layer, keeping their class.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "plugin/instance.h"
#include "backends/backend.h"
#include "tensoracle/errors.h"

namespace tensoracle::backends {

inline std::vector<PluginTensorDesc> plugin_descs(std::span<const Buffer> in, std::size_t count) {
  std::vector<PluginTensorDesc> d;
  for (std::size_t i = 0; i < count; ++i) d.push_back({in[i].type, in[i].dims});
  return d;
}

// Runs `f`, prefixing what it throws with `prefix` (same class for the classes a plugin's calls
// raise).
template <typename F>
void with_prefix(const std::string& prefix, F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(prefix + e.what());
  } catch (const UnsupportedError& e) {
    throw UnsupportedError(prefix + e.what());
  } catch (const PluginLibraryError& e) {
    throw PluginLibraryError(prefix + e.what());
  } catch (const IoError&) {
    throw;
  } catch (const Error& e) {
    throw Error(prefix + e.what());
  }
}

// Calls enqueue(input descs, input pointers, output descs, output pointers, plugin workspace
// or null, its bytes) for plugin node `node` writing output `p.output` into `out`.
template <typename Enqueue>
void run_plugin_node(const std::string& backend, const graph::Node& node, const PluginParams& p, int backend_bit,
                     std::size_t align, std::span<const Buffer> in, const Buffer& out, std::byte* ws, Enqueue&& enqueue) {
  with_prefix("[" + backend + "] layer '" + node.name + "': ", [&] {
    const auto descs = plugin_descs(in, node.inputs.size());
    const int keep = std::max(p.output, 0);
    const PluginCall call = plan_plugin_call(*p.plugin, backend_bit, descs, keep, align);
    const auto& mine = call.outputs[static_cast<std::size_t>(keep)];
    if (mine.type != out.type || !(mine.dims == out.dims))
      throw Error(p.plugin->label() + ": output " + std::to_string(keep) + " is " + std::string(type_name(mine.type)) + " " +
                  mine.dims.str() + " at run time, but shape inference said " + std::string(type_name(out.type)) + " " +
                  out.dims.str());
    std::vector<const void*> inputs;
    for (std::size_t i = 0; i < node.inputs.size(); ++i) inputs.push_back(in[i].data);
    std::vector<void*> outputs(call.outputs.size());
    for (std::size_t k = 0; k < outputs.size(); ++k)
      outputs[k] = static_cast<int>(k) == keep ? out.data : static_cast<void*>(ws + call.offsets[k]);
    enqueue(descs, inputs.data(), call.outputs, outputs.data(), call.plugin_workspace ? ws : nullptr, call.plugin_workspace);
  });
}

}  // namespace tensoracle::backends
