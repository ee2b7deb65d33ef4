#include "runtime/memory_checks.h"

#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "tensoracle/errors.h"

namespace tensoracle::runtime {

using backends::Buffer;

void check_memory_plan(const plan::Plan& plan, std::span<const std::unique_ptr<backends::NodeKernel>> kernels,
                       const std::string& name) {
  auto corrupt = [&](const std::string& why) {
    return CorruptEngineError("[engine] " + name + ": " + why + "; rebuild the engine");
  };
  const auto& g = plan.graph;
  std::vector<Dims> max_dims;
  for (std::size_t i = 0; i < g.inputs.size(); ++i) max_dims.push_back(plan.io[i].max);
  std::vector<graph::TensorDesc> at_max;
  try {
    at_max = graph::infer_shapes(g, max_dims, cpu::evaluate_shape_node);
  } catch (const std::exception& e) {
    throw corrupt(std::string("its shapes at the profile's max do not infer (") + e.what() + ")");
  }
  constexpr std::uint64_t kAlign = plan::MemoryPlan::kAlignment;
  std::uint64_t laid_end_to_end = 0;  // the arena values, each aligned: no plan needs more
  for (std::size_t v = 0; v < g.values.size(); ++v) {
    const auto& val = g.values[v];
    const auto bytes = graph::byte_size(at_max[v].type, at_max[v].dims);
    if (!bytes || *bytes > kMaxEngineMemory)
      throw corrupt("tensor '" + val.name + "' has dims " + at_max[v].dims.str() +
                    " at the profile's max, more than any device holds");
    if (*bytes != plan.max_bytes[v])
      throw corrupt("tensor '" + val.name + "' is planned for " + std::to_string(plan.max_bytes[v]) + " bytes but needs " +
                    std::to_string(*bytes) + " at the profile's max");
    if (plan.memory.offsets[v] >= 0) {
      laid_end_to_end += (*bytes + kAlign - 1) / kAlign * kAlign;  // each term <= 2^50: no overflow
      if (laid_end_to_end > kMaxEngineMemory) throw corrupt("its activations need more memory than any device holds");
    }
  }
  const std::uint64_t arena = plan.memory.arena_bytes;
  if (arena > laid_end_to_end)
    throw corrupt("its arena of " + std::to_string(arena) + " bytes is larger than its activations laid end to end (" +
                  std::to_string(laid_end_to_end) + " bytes)");
  if (plan.workspace_bytes > kMaxEngineMemory - laid_end_to_end)
    throw corrupt("its workspace of " + std::to_string(plan.workspace_bytes) + " bytes is more than any device holds");
  std::vector<Buffer> in, out;
  for (std::size_t n = 0; n < g.nodes.size(); ++n) {
    const auto& node = g.nodes[n];
    in.clear();
    out.clear();
    for (int v : node.all_inputs()) in.push_back({nullptr, at_max[static_cast<std::size_t>(v)].type, at_max[static_cast<std::size_t>(v)].dims});
    for (int v : node.outputs()) out.push_back({nullptr, at_max[static_cast<std::size_t>(v)].type, at_max[static_cast<std::size_t>(v)].dims});
    std::uint64_t need = 0;
    try {
      need = kernels[n]->workspace_bytes(in, out);
    } catch (const std::exception& e) {
      throw corrupt("layer '" + node.name + "' cannot size its scratch at the profile's max (" + e.what() + ")");
    }
    if (need > plan.workspace_bytes)
      throw corrupt("layer '" + node.name + "' needs " + std::to_string(need) + " bytes of scratch at the profile's max; the plan reserves " +
                    std::to_string(plan.workspace_bytes));
  }
}

}  // namespace tensoracle::runtime
