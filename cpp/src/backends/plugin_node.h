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
// or null, its bytes) once for plugin node `node`: writing every output into `outs` (p.output
// -1: the node's outputs are the plugin's, in order), or output p.output into outs[0] and the
// others into the workspace.
template <typename Enqueue>
void run_plugin_node(const std::string& backend, const graph::Node& node, const PluginParams& p, int backend_bit,
                     std::size_t align, std::span<const Buffer> in, std::span<const Buffer> outs, std::byte* ws,
                     Enqueue&& enqueue) {
  with_prefix("[" + backend + "] layer '" + node.name + "': ", [&] {
    const auto descs = plugin_descs(in, node.inputs.size());
    const PluginCall call = plan_plugin_call(*p.plugin, backend_bit, descs, p.output, align);
    const std::size_t first = p.output < 0 ? 0 : static_cast<std::size_t>(p.output);
    if (outs.size() != (p.output < 0 ? call.outputs.size() : 1))
      throw Error(p.plugin->label() + ": the node writes " + std::to_string(outs.size()) + " outputs of the plugin's " +
                  std::to_string(call.outputs.size()));
    for (std::size_t k = 0; k < outs.size(); ++k) {
      const auto& mine = call.outputs[first + k];
      if (mine.type != outs[k].type || !(mine.dims == outs[k].dims))
        throw Error(p.plugin->label() + ": output " + std::to_string(first + k) + " is " + std::string(type_name(mine.type)) +
                    " " + mine.dims.str() + " at run time, but shape inference said " + std::string(type_name(outs[k].type)) +
                    " " + outs[k].dims.str());
    }
    std::vector<const void*> inputs;
    for (std::size_t i = 0; i < node.inputs.size(); ++i) inputs.push_back(in[i].data);
    std::vector<void*> outputs(call.outputs.size());
    for (std::size_t k = 0; k < outputs.size(); ++k)
      outputs[k] = k >= first && k - first < outs.size() ? outs[k - first].data : static_cast<void*>(ws + call.offsets[k]);
    enqueue(descs, inputs.data(), call.outputs, outputs.data(), call.plugin_workspace ? ws : nullptr, call.plugin_workspace);
  });
}

// The outputs a node's own op writes: `out`, then a multi-output node's others.
inline std::vector<Buffer> node_outputs(const Buffer& out, std::span<const Buffer> extra) {
  std::vector<Buffer> all{out};
  all.insert(all.end(), extra.begin(), extra.end());
  return all;
}

}  // namespace tensoracle::backends
