// Internal: opening an engine file with a say in whether its digest is checked. Only the
// engine cache uses it, for files whose digest it checked before and whose stat record proves
// them unchanged since (a 1 GiB engine then opens without reading its weights).
#pragma once

#include <filesystem>
#include <functional>

#include "core/file_stat.h"
#include "tensoracle/engine.h"

namespace tensoracle::runtime {

struct LoadedEngine {
  Engine engine;
  core::FileStat stat;   // of the file that was mapped
  bool digest_checked;   // false when skip_digest said so
};

struct EngineAccess {
  // Opens `path` like Engine::load. `skip_digest` (may be empty) is asked with fstat's record
  // of the file that was opened — not of whatever the path names later — and returns true to
  // skip the digest pass; the format version, target and plan are checked either way.
  // `map` = true maps the file instead of reading it into memory: only for files that nobody
  // rewrites in place (the cache's own entries, which are only ever replaced by rename in a
  // folder of the user's own): a mapped file truncated or rewritten in place would fault or
  // change the running engine's weights. Throws as Engine::load.
  static LoadedEngine load_file(const std::filesystem::path& path,
                                const std::function<bool(const core::FileStat&)>& skip_digest, bool map);
};

}  // namespace tensoracle::runtime
