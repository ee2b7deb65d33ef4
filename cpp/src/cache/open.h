// Internal: open_engine with the environment passed in (tests substitute fields of it to show
// that each one changes the entry), and the EngineIO check.
#pragma once

#include <filesystem>

#include "cache/identity.h"
#include "tensoracle/cache.h"

namespace tensoracle::cache {

EngineHandle open_engine_with(const Environment& env, const GraphFunction& graph, const EngineBuild& declaration,
                              const OpenOptions& options);
EngineIdentity engine_identity_with(const Environment& env, const EngineBuild& declaration, const OpenOptions& options);

// Throws EngineIOError listing every difference between the engine's I/O and `io`.
void check_io(const Engine& engine, const EngineIO& io, const std::string& name, const std::filesystem::path& path);

}  // namespace tensoracle::cache
