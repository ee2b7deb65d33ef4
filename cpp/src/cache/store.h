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
// bytes, '_' put before a leading '.'); <identity> is 32 lowercase hex digits. The record keeps
// the name as given. The record file's mtime is the entry's last use (set on every open; it
// costs no fsync).
//
// What is the cache's: only files of exactly these names, and of those only an entry whose
// record names that very entry (format "tensoracle.cache-entry", its name and identity giving
// the file name) or, where the record is missing or damaged, whose engine file starts with an
// engine header; a lock file only with its entry, or when it is empty and its entry is gone.
// list, prune and clear consider nothing else: a folder that is not a cache loses nothing.
//
// The record vouches for the engine file: it holds the XXH3-128 digest of the engine file's
// bytes as written (engine_digest) and the stat of the file when that was last checked. An
// open accepts the engine file only when its stat is the recorded one or its bytes hash to
// engine_digest, and the record's identity is the one open_engine computed; an engine without
// a usable record is rebuilt, another valid engine in its place is a CorruptEngineError.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>

#include "cache/folder.h"
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
// The file-name part of an engine name (see above).
std::string file_name_part(const std::string& name);
// "<name part>-<identity>" when `file_name` is exactly that followed by `extension` (".engine",
// ".json", ".lock"), else nullopt.
std::optional<std::string> entry_base(const std::string& file_name, const std::string& extension);
// The name part of a base "<name part>-<identity>".
std::string name_part_of_base(const std::string& base);

struct Record {
  std::string name;
  std::string graph_version;
  std::string identity;
  nlohmann::json identity_text;    // the identity's canonical JSON, parsed
  std::string device;
  std::int64_t created_ns = 0;
  std::string engine_digest;       // "xxh3-128:<32 hex>" of the engine file's bytes
  core::FileStat verified;         // the engine file whose digest was checked
  std::int64_t verified_ns = 0;    // when
};

// nullopt when missing, a link, unreadable, damaged (malformed or too deeply nested JSON
// included) or of another record version.
std::optional<Record> read_record(const FileRef& file);
inline std::optional<Record> read_record(const std::filesystem::path& path) { return read_record(FileRef::at_path(path)); }
// Atomic; throws IoError naming the record file.
void write_record(const FileRef& file, const Record& record);
inline void write_record(const std::filesystem::path& path, const Record& record) {
  write_record(FileRef::at_path(path), record);
}

// Whether the regular file (not a link) starts with an engine header: a safetensors header
// whose metadata has "tensoracle.format".
bool is_engine_file(const FileRef& file);

// Removes `.<base>.engine.tmp-*` and `.<base>.json.tmp-*` (call with the entry's lock held:
// then no writer of them is alive).
void remove_temporaries(const CacheFolder& dir, const std::string& base) noexcept;
// Removes temporaries of the cache's own files (entries, with `name_part` only of that name
// part; the digest memo when `name_part` is empty) whose last change is older than `age_ns`.
void remove_stale_temporaries(const CacheFolder& dir, std::int64_t age_ns, const std::string& name_part = {}) noexcept;
void remove_stale_temporaries(const std::filesystem::path& dir, std::int64_t age_ns) noexcept;

// options.cache_dir or default_cache_dir(), created 0700 when missing, checked and opened
// (CacheFolder::open: IoError naming it).
CacheFolder cache_folder(const std::filesystem::path& requested);

}  // namespace tensoracle::cache
