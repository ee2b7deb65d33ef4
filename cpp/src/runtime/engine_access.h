// Internal: opening an engine file with a say in whether its digest is checked. Only the
// engine cache uses it, for files whose digest it checked before and whose stat record proves
// them unchanged since (a 1 GiB engine then opens without reading its weights).
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <span>

#include "core/file_stat.h"
#include "tensoracle/engine.h"

namespace tensoracle::runtime {

struct LoadedEngine {
  Engine engine;
  core::FileStat stat;   // of the file that was read or mapped
  bool digest_checked;   // false when skip_digest said so
};

struct EngineAccess {
  // Engine::load: reads `path` into memory (a private copy: rewriting or truncating the file
  // later cannot change or fault the engine). `skip_digest` (may be empty) is asked with
  // fstat's record of the file that was read — not of whatever the path names later — and
  // returns true to skip the digest pass; the format version, target and plan are checked
  // either way. Throws as Engine::load.
  static LoadedEngine load_file(const std::filesystem::path& path,
                                const std::function<bool(const core::FileStat&)>& skip_digest);
  // The same for a file already open (read-only) as `fd`, which the caller keeps and closes;
  // `path` names it in messages. Maps the file instead of copying it: only for files nobody
  // rewrites in place (the cache's own entries, only ever replaced by rename in a folder of
  // the user's own), since a mapped file truncated or rewritten in place would fault or change
  // the running engine's weights.
  static LoadedEngine load_fd(int fd, const std::filesystem::path& path,
                              const std::function<bool(const core::FileStat&)>& skip_digest);

 private:
  static LoadedEngine load_bytes(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                                 const core::FileStat& stat, const std::filesystem::path& path,
                                 const std::function<bool(const core::FileStat&)>& skip_digest);
};

}  // namespace tensoracle::runtime
