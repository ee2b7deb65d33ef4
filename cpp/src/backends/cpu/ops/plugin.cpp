// The CPU backend's plugin layer: the plugin's own CPU entry point (plugin/instance.h), called
// once per run for all the node's outputs, with its scratch in the node's workspace
// (backends/plugin_node.h).
#include <algorithm>
#include <cstddef>
#include <string>

#include "backends/cpu/op_kernel.h"
#include "backends/plugin_node.h"
#include "plugin/instance.h"

namespace tensoracle::cpu::ops {

extern const OpKernel kPluginKernel = {
    LayerType::kPLUGIN, nullptr,
    [](const OpCall& c) {
      const auto& p = std::get<PluginParams>(c.node.params);
      std::size_t bytes = 0;
      backends::with_prefix("[cpu] layer '" + c.node.name + "': ", [&] {
        bytes = plan_plugin_call(*p.plugin, TENSORACLE_BACKEND_CPU, backends::plugin_descs(c.in, c.node.inputs.size()),
                                 p.output, kAlign).workspace;
      });
      return bytes;
    },
    [](const OpCall& c) {
      const auto& p = std::get<PluginParams>(c.node.params);
      backends::run_plugin_node("cpu", c.node, p, TENSORACLE_BACKEND_CPU, kAlign, c.in,
                                backends::node_outputs(c.out, c.extra_out), c.workspace,
                                [&](auto... args) { p.plugin->enqueue_cpu(args...); });
    }};

}  // namespace tensoracle::cpu::ops
