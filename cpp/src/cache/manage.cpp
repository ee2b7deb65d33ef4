// The cache folder's management: list, verify, prune, clear (tensoracle::cache in cache.h;
// the CLI's `tensoracle cache ...` and Python's tensoracle.cache call these).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <tuple>

#include "cache/digest_memo.h"
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

fs::path folder(const fs::path& dir) { return dir.empty() ? default_cache_dir() : dir; }

bool is_hex(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::optional<Entry> entry_of(const fs::path& engine) {
  auto est = core::stat_path(engine);
  if (!est) return std::nullopt;
  Entry e;
  e.path = engine;
  const std::string base = engine.stem().string();
  const EntryPaths p = entry_paths_of_base(engine.parent_path(), base);
  e.size = est->size;
  e.created = e.last_used = at(est->mtime_ns);
  if (auto r = read_record(p.record)) {
    e.name = r->name;
    e.graph_version = r->graph_version;
    e.identity = r->identity;
    e.device = r->device;
    e.created = at(r->created_ns);
    if (auto rst = core::stat_path(p.record)) {
      e.size += rst->size;
      e.last_used = at(rst->mtime_ns);
    }
    e.has_record = true;
  } else {
    // "<name>-<32 hex digits>": what the file name tells.
    auto dash = base.rfind('-');
    if (dash != std::string::npos && base.size() - dash - 1 == 32 && is_hex(base.substr(dash + 1))) {
      e.name = base.substr(0, dash);
      e.identity = base.substr(dash + 1);
    } else {
      e.name = base;
    }
  }
  return e;
}

void remove_entry(const Entry& e) {
  const EntryPaths p = entry_paths_of_base(e.path.parent_path(), e.path.stem().string());
  // Under the entry's lock: a build of it in progress finishes first, and no open can be
  // writing its record meanwhile.
  FileLock lock = FileLock::acquire(p.lock, "cache");
  ::unlink(p.record.c_str());
  if (::unlink(p.engine.c_str()) != 0 && errno != ENOENT)
    core::throw_io_error("cache", "cannot remove", p.engine, errno);
  remove_temporaries(p.engine.parent_path(), p.base);
  lock.remove_file();
}

// Lock files whose engine is gone (a build that failed, say): removed when nobody holds them.
void remove_orphan_locks(const fs::path& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& f = it->path();
    if (f.extension() != ".lock" || f.filename() == "digests.lock") continue;
    const EntryPaths p = entry_paths_of_base(dir, f.stem().string());
    if (fs::exists(p.engine)) continue;
    if (auto lock = FileLock::try_acquire(f)) {
      if (!fs::exists(p.engine)) lock->remove_file();
    }
  }
}

}  // namespace

std::vector<Entry> list(const fs::path& dir_in) {
  const fs::path dir = folder(dir_in);
  std::vector<Entry> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& f = it->path();
    const std::string n = f.filename().string();
    if (n.empty() || n[0] == '.' || f.extension() != ".engine" || !it->is_regular_file()) continue;
    if (auto e = entry_of(f)) out.push_back(std::move(*e));
  }
  if (ec && ec != std::errc::no_such_file_or_directory)
    core::throw_io_error("cache", "cannot list the cache folder", dir, ec.value());
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.name, a.graph_version, a.created, a.path) < std::tie(b.name, b.graph_version, b.created, b.path);
  });
  return out;
}

std::vector<Check> verify(const fs::path& dir) {
  std::vector<Check> out;
  for (auto& e : list(dir)) {
    Check c{e, Health::kOk, ""};
    try {
      (void)runtime::EngineAccess::load_file(e.path, nullptr, /*map=*/true);
      counters().engine_digest_checks.fetch_add(1);
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
  const fs::path dir = folder(dir_in);
  std::vector<Entry> entries = list(dir), removed;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.last_used < b.last_used; });
  std::vector<Entry> kept;
  const auto now = Clock::now();
  for (auto& e : entries) {
    if (older_than && e.last_used < now - *older_than) {
      remove_entry(e);
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
      remove_entry(e);
      total -= e.size;
      removed.push_back(e);
    }
  }
  remove_orphan_locks(dir);
  remove_stale_temporaries(dir, kStaleTemporaryNs);
  return removed;
}

std::vector<Entry> clear(const std::optional<std::string>& name, const fs::path& dir_in) {
  const fs::path dir = folder(dir_in);
  std::vector<Entry> removed;
  for (auto& e : list(dir)) {
    if (name && e.name != *name) continue;
    remove_entry(e);
    removed.push_back(std::move(e));
  }
  if (!name && fs::exists(dir)) {
    FileLock lock = FileLock::acquire(dir / "digests.lock", "cache");
    ::unlink(DigestMemo::file(dir).c_str());
    lock.remove_file();
  }
  if (fs::exists(dir)) {
    remove_orphan_locks(dir);
    remove_stale_temporaries(dir, kStaleTemporaryNs);
  }
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
