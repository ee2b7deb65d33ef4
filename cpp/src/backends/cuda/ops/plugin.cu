// The CUDA backend's plugin layer: the plugin's own CUDA entry point (plugin/instance.h) on the
// execution's stream, with device pointers, called once per run for all the node's outputs; its
// scratch goes into the node's workspace (backends/plugin_node.h).
#include <algorithm>
#include <cstddef>
#include <string>

#include "backends/cuda/device.h"
#include "backends/cuda/op_kernel.h"
#include "backends/plugin_node.h"
#include "plugin/instance.h"

namespace tensoracle::cuda::ops {

extern const OpKernel kPluginKernel = {
    LayerType::kPLUGIN, nullptr,
    [](const OpCall& c) {
      const auto& p = std::get<PluginParams>(c.node.params);
      std::size_t bytes = 0;
      backends::with_prefix("[cuda] layer '" + c.node.name + "': ", [&] {
        bytes = plan_plugin_call(*p.plugin, TENSORACLE_BACKEND_CUDA, backends::plugin_descs(c.in, c.node.inputs.size()),
                                 p.output, kAlign).workspace;
      });
      return bytes;
    },
    [](const OpCall& c) {
      const auto& p = std::get<PluginParams>(c.node.params);
      backends::run_plugin_node("cuda", c.node, p, TENSORACLE_BACKEND_CUDA, kAlign, c.in,
                                backends::node_outputs(c.out, c.extra_out), c.workspace,
                                [&](auto... args) { p.plugin->enqueue_cuda(args..., static_cast<void*>(c.stream)); });
    }};

}  // namespace tensoracle::cuda::ops
