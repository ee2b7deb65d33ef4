// Internal: the cache folder's files and the record kept beside each engine.
//
//   <dir>/<name>-<identity>.engine    the engine file (written atomically, never in place)
//   <dir>/<name>-<identity>.json      its record: name, graph_version, identity and identity
//                                     text, device, creation time, and the stat of the engine
//                                     file when its digest was last checked in full
//   <dir>/<name>-<identity>.lock      the entry's lock file (flock), held while building
//   <dir>/digests.json, digests.lock  the digest memo (digest_memo.h)
//   <dir>/.<file>.tmp-<pid>-<random>  a write in progress (AtomicFile); a leftover of a killed
//                                     process is removed under the entry's lock
// <name> is the engine name with anything but [A-Za-z0-9._-] replaced by '_' (at most 64
// bytes); the record keeps the name as given. The record file's mtime is the entry's last
// use (set on every open; it costs no fsync).
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>

#include "core/file_stat.h"

namespace tensoracle::cache {

// An integer field of a cache file (a record, the digest memo). A fraction is damage: nlohmann
// would cast it, undefined beyond the type's range. Throws std::exception for a missing or
// non-integer field; the readers treat that as no record.
template <class T>
T integer_field(const nlohmann::json& j, const char* key) {
  const auto& v = j.at(key);
  if (!v.is_number_integer()) throw std::invalid_argument(std::string("cache field '") + key + "' is not an integer");
  return v.get<T>();
}
// A file's stat as the cache files store it ({size, mtime_ns, ctime_ns, inode, device}).
core::FileStat stat_of(const nlohmann::json& j);

struct EntryPaths {
  std::string base;                // "<name>-<identity>"
  std::filesystem::path engine, record, lock;
};

EntryPaths entry_paths(const std::filesystem::path& dir, const std::string& name, const std::string& identity);
EntryPaths entry_paths_of_base(const std::filesystem::path& dir, const std::string& base);

struct Record {
  std::string name;
  std::string graph_version;
  std::string identity;
  nlohmann::json identity_text;    // the identity's canonical JSON, parsed
  std::string device;
  std::int64_t created_ns = 0;
  core::FileStat verified;         // the engine file whose digest was checked
  std::int64_t verified_ns = 0;    // when
};

// nullopt when missing, unreadable, damaged or of another record version.
std::optional<Record> read_record(const std::filesystem::path& path);
// Atomic; throws IoError naming the record file.
void write_record(const std::filesystem::path& path, const Record& record);

// Sets the record file's mtime to now (the entry's last use); failures are ignored.
void touch(const std::filesystem::path& path) noexcept;

// Removes `.<base>.engine.tmp-*` and `.<base>.json.tmp-*` (call with the entry's lock held:
// then no writer of them is alive).
void remove_temporaries(const std::filesystem::path& dir, const std::string& base) noexcept;
// Removes temporaries of any file in `dir` whose last change is older than `age_ns`.
void remove_stale_temporaries(const std::filesystem::path& dir, std::int64_t age_ns) noexcept;

// options.cache_dir or default_cache_dir(), created when missing (IoError naming it).
std::filesystem::path cache_folder(const std::filesystem::path& requested);

}  // namespace tensoracle::cache
