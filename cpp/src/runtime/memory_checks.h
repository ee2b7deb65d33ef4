// Internal: an engine's memory plan held against what its nodes need, before anything is
// allocated or run. The plan comes from an engine file, which anyone can write with a valid
// digest: its sizes are claims to check, not facts.
//
//   check_memory_plan(plan, kernels, "model.engine");   // throws CorruptEngineError
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "backends/backend.h"
#include "plan/plan.h"

namespace tensoracle::runtime {

// More activation and scratch memory than any device holds (1 PiB): a plan that asks for it
// is corrupt, not merely too large for this machine.
inline constexpr std::uint64_t kMaxEngineMemory = std::uint64_t{1} << 50;

// Infers every value's shape at the profile's max (as the builder did) and checks, in
// overflow-checked arithmetic: each value's planned bytes equal what its shape needs there;
// the arena is no larger than its values laid end to end and, with the workspace, within
// kMaxEngineMemory; every node's scratch at the profile's max (`kernels[i]` runs node i) fits
// the workspace. Throws CorruptEngineError naming the engine (`name`) and the tensor or layer.
void check_memory_plan(const plan::Plan& plan, std::span<const std::unique_ptr<backends::NodeKernel>> kernels,
                       const std::string& name);

}  // namespace tensoracle::runtime
