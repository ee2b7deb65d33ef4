// The cache folder's management: list, verify, prune, clear (tensoracle::cache in cache.h;
// the CLI's `tensoracle cache ...` and Python's tensoracle.cache call these).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <tuple>

#include "cache/digest_memo.h"
#include "cache/folder.h"
#include "cache/lock.h"
#include "cache/store.h"
#include "core/atomic_file.h"
#include "core/mapped_file.h"
#include "runtime/engine_access.h"
#include "tensoracle/cache.h"
#include "tensoracle/errors.h"

namespace tensoracle::cache {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::system_clock;
constexpr std::int64_t kStaleTemporaryNs = std::int64_t{3600} * 1'000'000'000;  // an hour

Clock::time_point at(std::int64_t ns) { return Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(ns))); }

fs::path folder_path(const fs::path& dir) { return dir.empty() ? default_cache_dir() : dir; }

// The cache folder for list, verify, prune and clear: nullopt when it is missing (an empty
// cache); checked like open_engine's (IoError when others can write it or it is not yours).
std::optional<CacheFolder> open_folder(const fs::path& dir) { return CacheFolder::open(folder_path(dir), false); }

// The entry of the engine file "<base>.engine", when it is the cache's (store.h): its record
// names this very entry, or there is no usable record and the file starts with an engine header.
std::optional<Entry> entry_of(const CacheFolder& folder, const std::string& base) {
  const EntryPaths p = entry_paths_of_base(folder.path(), base);
  auto est = folder.lstat(p.engine.filename().string());
  if (!est || !S_ISREG(est->st_mode)) return std::nullopt;
  Entry e;
  e.path = p.engine;
  e.size = static_cast<std::uint64_t>(est->st_size);
  e.created = e.last_used = at(core::FileStat::of(*est).mtime_ns);
  const auto record = read_record(folder.file(p.record.filename().string()));
  if (record && entry_paths(folder.path(), record->name, record->identity).base == base) {
    e.name = record->name;
    e.graph_version = record->graph_version;
    e.identity = record->identity;
    e.device = record->device;
    e.created = at(record->created_ns);
    if (auto rst = folder.lstat(p.record.filename().string())) {
      e.size += static_cast<std::uint64_t>(rst->st_size);
      e.last_used = at(core::FileStat::of(*rst).mtime_ns);
    }
    e.has_record = true;
    return e;
  }
  if (!is_engine_file(folder.file(p.engine.filename().string()))) return std::nullopt;
  // What the file name tells: "<name part>-<32 hex digits>".
  e.name = name_part_of_base(base);
  e.identity = base.substr(e.name.size() + 1);
  return e;
}

void remove_entry(const CacheFolder& folder, const Entry& e) {
  const EntryPaths p = entry_paths_of_base(folder.path(), e.path.stem().string());
  // Under the entry's lock: a build of it in progress finishes first, and no open can be
  // writing its record meanwhile.
  FileLock lock = FileLock::acquire(folder.file(p.lock.filename().string()), "cache");
  folder.remove(p.record.filename().string());
  if (!folder.remove(p.engine.filename().string()) && errno != ENOENT)
    core::throw_io_error("cache", "cannot remove", p.engine, errno);
  remove_temporaries(folder, p.base);
  lock.remove_file();
}

// Lock files of the cache's naming whose engine is gone (a build that failed, say), empty as the
// cache leaves them, of `name_part` when given: removed when nobody holds them. Never created,
// never through a link.
void remove_orphan_locks(const CacheFolder& folder, const std::string& name_part) {
  for (const auto& n : folder.names()) {
    auto base = entry_base(n, ".lock");
    if (!base || (!name_part.empty() && name_part_of_base(*base) != name_part)) continue;
    auto st = folder.lstat(n);
    if (!st || !S_ISREG(st->st_mode) || st->st_size != 0) continue;
    const std::string engine = *base + ".engine";
    if (folder.lstat(engine)) continue;
    if (auto lock = FileLock::try_acquire(folder.file(n), /*create=*/false)) {
      if (!folder.lstat(engine)) lock->remove_file();
    }
  }
}

std::vector<Entry> list_in(const CacheFolder& folder) {
  std::vector<Entry> out;
  for (const auto& n : folder.names())
    if (auto base = entry_base(n, ".engine"))
      if (auto e = entry_of(folder, *base)) out.push_back(std::move(*e));
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.name, a.graph_version, a.created, a.path) < std::tie(b.name, b.graph_version, b.created, b.path);
  });
  return out;
}

}  // namespace

std::vector<Entry> list(const fs::path& dir) {
  auto folder = open_folder(dir);
  return folder ? list_in(*folder) : std::vector<Entry>{};
}

std::vector<Check> verify(const fs::path& dir) {
  std::vector<Check> out;
  auto folder = open_folder(dir);
  if (!folder) return out;
  for (auto& e : list_in(*folder)) {
    Check c{e, Health::kOk, ""};
    try {
      Fd fd(open_no_follow(folder->file(e.path.filename().string()), O_RDONLY));
      if (!fd) core::throw_io_error("cache", "cannot open", e.path, errno);
      (void)runtime::EngineAccess::load_fd(fd.get(), e.path, nullptr);
      counters().engine_digest_checks.fetch_add(1);
      // An intact engine, but is it the one its record vouches for?
      const auto record = read_record(folder->file(e.path.stem().string() + ".json"));
      if (e.has_record && record &&
          digest_of_file(fd.get(), e.path, "cache", "the saved engine") != record->engine_digest) {
        c.health = Health::kCorrupt;
        c.problem = "[cache] " + e.path.string() +
                    ": not the engine its record vouches for (its bytes differ from those saved: was another "
                    "engine put in its place?)";
      }
    } catch (const IncompatibleEngineError& x) {
      c.health = Health::kIncompatible;
      c.problem = x.what();
    } catch (const PluginLibraryError& x) {  // needs a plugin library this process has not loaded
      c.health = Health::kIncompatible;
      c.problem = x.what();
    } catch (const IoError& x) {
      if (x.errno_value() == ENOENT) continue;  // removed meanwhile
      c.health = Health::kCorrupt;
      c.problem = x.what();
    } catch (const Error& x) {
      c.health = Health::kCorrupt;
      c.problem = x.what();
    }
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<Entry> prune(std::optional<std::chrono::seconds> older_than, std::optional<std::uint64_t> max_size,
                         const fs::path& dir_in) {
  if (!older_than && !max_size) throw InvalidArgument("[cache] prune: give older_than, max_size or both");
  if (older_than && older_than->count() < 0) throw InvalidArgument("[cache] prune: older_than is negative");
  auto folder = open_folder(dir_in);
  if (!folder) return {};
  std::vector<Entry> entries = list_in(*folder), removed;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.last_used < b.last_used; });
  std::vector<Entry> kept;
  const auto now = Clock::now();
  for (auto& e : entries) {
    if (older_than && e.last_used < now - *older_than) {
      remove_entry(*folder, e);
      removed.push_back(std::move(e));
    } else {
      kept.push_back(std::move(e));
    }
  }
  if (max_size) {
    std::uint64_t total = 0;
    for (const auto& e : kept) total += e.size;
    for (auto& e : kept) {  // least recently used first
      if (total <= *max_size) break;
      remove_entry(*folder, e);
      total -= e.size;
      removed.push_back(e);
    }
  }
  remove_orphan_locks(*folder, {});
  remove_stale_temporaries(*folder, kStaleTemporaryNs);
  return removed;
}

std::vector<Entry> clear(const std::optional<std::string>& name, const fs::path& dir_in) {
  auto folder = open_folder(dir_in);
  if (!folder) return {};
  std::vector<Entry> removed;
  for (auto& e : list_in(*folder)) {
    // An entry without a record is known by its file name only.
    if (name && (e.has_record ? e.name != *name : e.name != file_name_part(*name))) continue;
    remove_entry(*folder, e);
    removed.push_back(std::move(e));
  }
  if (!name && DigestMemo::present(*folder)) {
    FileLock lock = FileLock::acquire(folder->file(DigestMemo::kLockName), "cache");
    folder->remove(DigestMemo::kFileName);
    lock.remove_file();
  }
  const std::string name_part = name ? file_name_part(*name) : std::string();
  remove_orphan_locks(*folder, name_part);
  remove_stale_temporaries(*folder, kStaleTemporaryNs, name_part);
  return removed;
}

std::uint64_t parse_size(const std::string& text) {
  auto bad = [&]() -> InvalidArgument {
    return InvalidArgument("[cache] size '" + text +
                           "' is not a size: use bytes or a number with K, M, G, T (powers of 1024), KiB, MiB, "
                           "GiB, TiB (1024) or KB, MB, GB, TB (1000), e.g. 500M or 1.5GiB");
  };
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  std::string number = text.substr(0, i), unit = text.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  if (number.empty() || std::count(number.begin(), number.end(), '.') > 1 || number == ".") throw bad();
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const std::pair<const char*, long double> kUnits[] = {
      {"", 1},           {"b", 1},          {"k", 0x1p10L},   {"kib", 0x1p10L}, {"kb", 1e3L},
      {"m", 0x1p20L},    {"mib", 0x1p20L},  {"mb", 1e6L},     {"g", 0x1p30L},   {"gib", 0x1p30L},
      {"gb", 1e9L},      {"t", 0x1p40L},    {"tib", 0x1p40L}, {"tb", 1e12L}};
  for (const auto& [u, factor] : kUnits) {
    if (unit != u) continue;
    long double v = std::strtold(number.c_str(), nullptr) * factor;
    if (!(v >= 0) || v >= 0x1p64L) throw bad();
    return static_cast<std::uint64_t>(v);
  }
  throw bad();
}

}  // namespace tensoracle::cache
