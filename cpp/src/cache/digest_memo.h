// Internal: content digests of input files (weights, plugin libraries), remembered across
// processes in the cache folder so that a warm open reads none of them.
//
//   DigestMemo memo(folder);                           // a CacheFolder, which must outlive it
//   FileDigest d = memo.digest("model.safetensors");   // reads the file only when needed
//   memo.save();                                       // best effort, atomic
//
// A record is keyed by the file's real path and holds (size, mtime_ns, ctime_ns, inode,
// device) as fstat reported them while the file was hashed, the digest, and when it was
// recorded. It is used only when all five still match and the record is not racy (see
// core::racy: a change within the same clock tick as the record could otherwise go unseen).
// The memo file is JSON written atomically; a missing, damaged (too deeply nested included),
// linked or foreign memo file counts as empty and is replaced on the next save. Concurrent
// savers merge under a lock file. Both are opened relative to the folder, never through links.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>

#include "cache/folder.h"
#include "core/digest.h"
#include "core/file_stat.h"

namespace tensoracle::cache {

struct FileDigest {
  std::string digest;   // "xxh3-128:<32 hex digits>"
  std::uint64_t size = 0;
};

// Process-wide counts, for tests and benchmarks: engine files the cache read in full to check
// them. Files hashed in full (weight files, plugin libraries) are core::hash_counters().
struct Counters {
  std::atomic<std::uint64_t> engine_digest_checks{0};
};
Counters& counters();

// Content digests (core/digest.h): hash_file is counted in core::hash_counters(),
// digest_of_file is not (the cache's own engine files).
using core::digest_of_bytes;
using core::digest_of_file;
using core::hash_file;

class DigestMemo {
 public:
  static constexpr std::size_t kMaxRecords = 1024;  // oldest records are dropped beyond this

  explicit DigestMemo(const CacheFolder& folder);

  // `kind` names the file in messages ("weight file"). Throws IoError naming `path` when it
  // cannot be opened or read, or keeps changing while it is read; FormatError when it is not
  // a regular file.
  FileDigest digest(const std::filesystem::path& path, const std::string& kind);

  // Writes the records made by digest() (merged into what is on disk now). A failure to write
  // is ignored: the memo only saves time, and AtomicFile leaves nothing partial behind.
  void save() noexcept;

  static std::filesystem::path file(const std::filesystem::path& cache_dir) { return cache_dir / kFileName; }
  static constexpr const char* kFileName = "digests.json";
  static constexpr const char* kLockName = "digests.lock";
  // Whether the folder holds a memo file of this format (what `cache clear` may remove).
  static bool present(const CacheFolder& folder);

  struct Record {
    core::FileStat stat;
    std::string digest;
    std::int64_t recorded_ns = 0;
  };

 private:
  const CacheFolder& folder_;
  std::map<std::string, Record> records_;   // as loaded
  std::map<std::string, Record> updates_;   // made by this object
};

}  // namespace tensoracle::cache
