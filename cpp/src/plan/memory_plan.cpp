#include "plan/memory_plan.h"

#include <algorithm>
#include <utility>

namespace tensoracle::plan {

using graph::Graph;

MemoryPlan plan_memory(const Graph& g, const std::vector<std::uint64_t>& bytes) {
  MemoryPlan plan;
  plan.offsets.assign(g.values.size(), -1);
  struct Item {
    int value;
    int first, last;
    std::uint64_t size;
  };
  std::vector<Item> items;
  std::vector<int> last_use(g.values.size(), -1);
  for (std::size_t n = 0; n < g.nodes.size(); ++n)
    for (int v : g.nodes[n].all_inputs()) last_use[static_cast<std::size_t>(v)] = static_cast<int>(n);
  for (std::size_t v = 0; v < g.values.size(); ++v) {
    const auto& val = g.values[v];
    if (val.producer < 0 || val.is_output || val.constant) continue;
    std::uint64_t size = (bytes[v] + MemoryPlan::kAlignment - 1) / MemoryPlan::kAlignment * MemoryPlan::kAlignment;
    items.push_back({static_cast<int>(v), val.producer, std::max(val.producer, last_use[v]), size});
    plan.naive_bytes += size;
  }
  // Largest first; each at the lowest offset free over its whole lifetime.
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return a.size != b.size ? a.size > b.size : a.value < b.value;
  });
  std::vector<const Item*> placed;
  for (const Item& it : items) {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> busy;
    for (const Item* p : placed)
      if (p->first <= it.last && it.first <= p->last) {
        auto off = static_cast<std::uint64_t>(plan.offsets[static_cast<std::size_t>(p->value)]);
        busy.emplace_back(off, off + p->size);
      }
    std::sort(busy.begin(), busy.end());
    std::uint64_t offset = 0;
    for (auto [b, e] : busy) {
      if (offset + it.size <= b) break;
      offset = std::max(offset, e);
    }
    plan.offsets[static_cast<std::size_t>(it.value)] = static_cast<std::int64_t>(offset);
    plan.arena_bytes = std::max(plan.arena_bytes, offset + it.size);
    placed.push_back(&it);
  }
  return plan;
}

}  // namespace tensoracle::plan
