// Internal: the activations' memory plan. The builder makes it (builder.cpp), the engine file
// stores it (plan.h: Plan::memory), and the runtime checks it before use (runtime/memory_checks.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph.h"

namespace tensoracle::plan {

// Activation memory: every value a node produces that is not a network output gets an offset
// in one arena; values whose lifetimes (producer .. last reader) overlap never share bytes.
struct MemoryPlan {
  std::vector<std::int64_t> offsets;  // per value; -1 when not in the arena
  std::uint64_t arena_bytes = 0;      // peak
  std::uint64_t naive_bytes = 0;      // sum of all arena values' sizes (no sharing)
  static constexpr std::uint64_t kAlignment = 256;
};
MemoryPlan plan_memory(const graph::Graph& g, const std::vector<std::uint64_t>& value_bytes);

}  // namespace tensoracle::plan
