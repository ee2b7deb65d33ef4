// Internal: the engine file — a safetensors container holding the weights (one tensor per
// constant value, "value.<id>") and, in "__metadata__":
//   tensoracle.format  the format version ("1")
//   tensoracle.target  JSON: backend, device, architecture, ISA / compute capability, versions
//   tensoracle.plan    JSON: I/O with profiles, values, nodes with epilogues and tactics, memory
//   tensoracle.digest  "xxh3-128:<32 hex digits>" over the whole file with these 32 digits as '0'
// Reading verifies the digest first (CorruptEngineError), then the version and the target
// (IncompatibleEngineError), then the plan's consistency.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "plan/memory_plan.h"
#include "tensoracle/engine.h"

namespace tensoracle::plan {

struct Plan {
  std::string name;
  graph::Graph graph;                 // after the passes, with tactics
  std::vector<IOTensorInfo> io;       // inputs then outputs, in network order
  std::vector<int> io_values;         // value id of each io entry
  MemoryPlan memory;                  // offsets per value at the profile's max
  std::vector<std::uint64_t> max_bytes;  // per value, at the profile's max
  std::uint64_t workspace_bytes = 0;  // scratch for the largest node, at the profile's max
  nlohmann::json target;
  nlohmann::json build;               // settings and pass logs, for inspection
};

// `format_version` exists for tests of version checks.
std::vector<std::byte> write_engine(const Plan& plan, int format_version = kEngineFormatVersion);
// The same with `edit` applied to the plan document before it is written (tests of readers:
// a consistent digest over a plan that says something wrong).
std::vector<std::byte> write_engine_with(const Plan& plan, const std::function<void(nlohmann::json&)>& edit,
                                         int format_version = kEngineFormatVersion);
// The same with the plan and target documents given as text, stored as they are (tests and the
// fuzzer: documents no JSON value can hold, such as nesting a million levels deep). An empty
// `target_text` stores the plan's target.
std::vector<std::byte> write_engine_text(const Plan& plan, const std::string& plan_text, const std::string& target_text = {},
                                         int format_version = kEngineFormatVersion);

// Parses and verifies an engine held in `bytes` (which `owner` keeps alive; weights borrow
// from it): digest, then format version. The caller checks the target with its backend.
// `display_name` names the source in messages. `verify_digest` = false skips the digest pass
// (only for a file whose digest was checked before and which has not changed since: the
// engine cache proves that with a stat record, see cache/open.cpp); everything else is
// still checked. Plugin nodes get their plugins from the creators registered in the process
// (PluginLibraryError naming the layer and the creator when one is missing); `with_plugins` =
// false leaves them without (for inspection only: such a plan cannot run).
Plan read_engine(std::span<const std::byte> bytes, const std::string& display_name,
                 std::shared_ptr<const void> owner, bool verify_digest = true, bool with_plugins = true);

nlohmann::json plan_to_json(const Plan& plan);  // the tensoracle.plan document

}  // namespace tensoracle::plan
