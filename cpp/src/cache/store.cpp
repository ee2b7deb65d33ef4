#include "cache/store.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <vector>

#include "core/atomic_file.h"
#include "core/json.h"
#include "core/mapped_file.h"
#include "tensoracle/cache.h"
#include "tensoracle/errors.h"

namespace tensoracle {

namespace {

std::optional<std::filesystem::path> env_dir(const char* var) {
  const char* v = std::getenv(var);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::filesystem::path(v);
}

}  // namespace

std::filesystem::path default_cache_dir() {
  // XDG: a relative $XDG_CACHE_HOME is invalid and ignored.
  if (auto xdg = env_dir("XDG_CACHE_HOME"); xdg && xdg->is_absolute()) return *xdg / "tensoracle";
#if defined(_WIN32)
  auto home = env_dir("USERPROFILE");
#else
  auto home = env_dir("HOME");
  if (!home) {
    std::vector<char> buf(16384);
    struct passwd pw {}, *found = nullptr;
    if (getpwuid_r(getuid(), &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr && pw.pw_dir &&
        *pw.pw_dir)
      home = std::filesystem::path(pw.pw_dir);
  }
#endif
  if (!home)
    throw InvalidArgument(
        "[cache] no folder for the engine cache: set XDG_CACHE_HOME or HOME (USERPROFILE on Windows), "
        "or pass cache_dir");
  return *home / ".cache" / "tensoracle";
}

namespace cache {

namespace {

using json = nlohmann::json;
constexpr const char* kRecordFormat = "tensoracle.cache-entry";
constexpr int kRecordVersion = 2;  // 2: engine_digest
// Records hold the identity text: weight and plugin digests, the target. Far below this.
constexpr std::size_t kMaxRecordBytes = std::size_t{16} << 20;
constexpr std::uint64_t kMaxEngineHeaderBytes = std::uint64_t{256} << 20;

json stat_json(const core::FileStat& s) {
  return {{"size", s.size}, {"mtime_ns", s.mtime_ns}, {"ctime_ns", s.ctime_ns}, {"inode", s.inode}, {"device", s.device}};
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

bool lower_hex(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// ".<base>.engine.tmp-<pid>-<16 hex>" and the like: the base's temporaries, as AtomicFile names them.
bool is_temporary_of(const std::string& n, const std::string& file) {
  const std::string prefix = core::AtomicFile::temporary_prefix(file);
  if (!starts_with(n, prefix)) return false;
  const std::string rest = n.substr(prefix.size());
  const auto dash = rest.find('-');
  return dash != std::string::npos && dash > 0 &&
         std::all_of(rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(dash), [](char c) { return c >= '0' && c <= '9'; }) &&
         rest.size() - dash - 1 == 16 && lower_hex(rest.substr(dash + 1));
}

// The file an AtomicFile temporary named `n` stands for ("" when none of the cache's).
std::string temporary_target(const std::string& n) {
  if (n.size() < 2 || n[0] != '.') return {};
  const auto tmp = n.find(".tmp-");
  if (tmp == std::string::npos) return {};
  const std::string file = n.substr(1, tmp - 1);
  if (!is_temporary_of(n, file)) return {};
  if (file == "digests.json" || entry_base(file, ".engine") || entry_base(file, ".json")) return file;
  return {};
}

}  // namespace

std::string file_name_part(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (out.size() >= 64) break;
    out += name_char(c) ? c : '_';
  }
  if (out.empty() || out[0] == '.') out.insert(out.begin(), '_');
  return out;
}

std::optional<std::string> entry_base(const std::string& file_name, const std::string& extension) {
  if (file_name.size() <= extension.size() || !file_name.ends_with(extension)) return std::nullopt;
  const std::string base = file_name.substr(0, file_name.size() - extension.size());
  const auto dash = base.rfind('-');
  if (dash == std::string::npos || base.size() - dash - 1 != 32 || !lower_hex(base.substr(dash + 1)))
    return std::nullopt;
  const std::string name = base.substr(0, dash);
  // What file_name_part makes: 1 to 65 name characters, no leading '.'.
  if (name.empty() || name.size() > 65 || name[0] == '.' || !std::all_of(name.begin(), name.end(), name_char))
    return std::nullopt;
  return base;
}

std::string name_part_of_base(const std::string& base) { return base.substr(0, base.rfind('-')); }

EntryPaths entry_paths_of_base(const std::filesystem::path& dir, const std::string& base) {
  return {base, dir / (base + ".engine"), dir / (base + ".json"), dir / (base + ".lock")};
}

core::FileStat stat_of(const json& j) {
  core::FileStat s;
  s.size = integer_field<std::uint64_t>(j, "size");
  s.mtime_ns = integer_field<std::int64_t>(j, "mtime_ns");
  s.ctime_ns = integer_field<std::int64_t>(j, "ctime_ns");
  s.inode = integer_field<std::uint64_t>(j, "inode");
  s.device = integer_field<std::uint64_t>(j, "device");
  return s;
}

EntryPaths entry_paths(const std::filesystem::path& dir, const std::string& name, const std::string& identity) {
  return entry_paths_of_base(dir, file_name_part(name) + "-" + identity);
}

std::optional<Record> read_record(const FileRef& file) {
  auto text = read_small_file(file, kMaxRecordBytes);
  if (!text) return std::nullopt;
  try {
    json j = core::parse_untrusted(*text);
    if (!j.is_object() || j.at("format") != kRecordFormat || j.at("version") != kRecordVersion) return std::nullopt;
    Record r;
    r.name = j.at("name").get<std::string>();
    r.graph_version = j.at("graph_version").get<std::string>();
    r.identity = j.at("identity").get<std::string>();
    r.identity_text = j.at("identity_text");
    r.device = j.at("device").get<std::string>();
    r.created_ns = integer_field<std::int64_t>(j, "created_ns");
    r.engine_digest = j.at("engine_digest").get<std::string>();
    r.verified = stat_of(j.at("verified"));
    r.verified_ns = integer_field<std::int64_t>(j.at("verified"), "recorded_ns");
    return r;
  } catch (const std::exception&) {  // core::JsonError, nlohmann's type and key errors
    return std::nullopt;
  }
}

void write_record(const FileRef& file, const Record& r) {
  json verified = stat_json(r.verified);
  verified["recorded_ns"] = r.verified_ns;
  json j = {{"format", kRecordFormat},     {"version", kRecordVersion},  {"name", r.name},
            {"graph_version", r.graph_version}, {"identity", r.identity}, {"identity_text", r.identity_text},
            {"device", r.device},          {"created_ns", r.created_ns}, {"engine_digest", r.engine_digest},
            {"verified", verified}};
  std::string text = j.dump(1) + "\n";
  auto out = file.dir == AT_FDCWD ? core::AtomicFile(file.path, "cache")
                                   : core::AtomicFile(file.dir, file.name, file.path, "cache");
  out.write(std::as_bytes(std::span(text)));
  out.commit();
}

bool is_engine_file(const FileRef& file) {
  Fd fd(open_no_follow(file, O_RDONLY));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  unsigned char size_bytes[8];
  if (::pread(fd.get(), size_bytes, 8, 0) != 8) return false;
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | size_bytes[i];
  if (n == 0 || n > kMaxEngineHeaderBytes || n > static_cast<std::uint64_t>(st.st_size) - 8) return false;
  std::string header(static_cast<std::size_t>(n), '\0');
  if (::pread(fd.get(), header.data(), header.size(), 8) != static_cast<ssize_t>(header.size())) return false;
  try {
    json j = core::parse_untrusted(header);
    const auto& meta = j.at("__metadata__");
    return meta.is_object() && meta.contains("tensoracle.format") && meta.at("tensoracle.format").is_string();
  } catch (const std::exception&) {
    return false;
  }
}

void remove_temporaries(const CacheFolder& dir, const std::string& base) noexcept {
  try {
    for (const auto& n : dir.names()) {
      if (!is_temporary_of(n, base + ".engine") && !is_temporary_of(n, base + ".json")) continue;
      if (auto st = dir.lstat(n); st && S_ISREG(st->st_mode)) dir.remove(n);
    }
  } catch (const std::exception&) {
    // Leftovers stay until the next build or prune.
  }
}

void remove_stale_temporaries(const CacheFolder& dir, std::int64_t age_ns, const std::string& name_part) noexcept {
  try {
    const std::int64_t now = core::now_ns();
    for (const auto& n : dir.names()) {
      const std::string file = temporary_target(n);
      if (file.empty()) continue;
      if (!name_part.empty() &&
          (file == "digests.json" || name_part_of_base(file.substr(0, file.rfind('.'))) != name_part))
        continue;
      auto st = dir.lstat(n);
      if (!st || !S_ISREG(st->st_mode)) continue;
      const core::FileStat fs = core::FileStat::of(*st);
      if (now - std::max(fs.mtime_ns, fs.ctime_ns) > age_ns) dir.remove(n);
    }
  } catch (const std::exception&) {
  }
}

void remove_stale_temporaries(const std::filesystem::path& dir, std::int64_t age_ns) noexcept {
  try {
    if (auto folder = CacheFolder::open(dir, false)) remove_stale_temporaries(*folder, age_ns);
  } catch (const std::exception&) {
  }
}

CacheFolder cache_folder(const std::filesystem::path& requested) {
  return std::move(*CacheFolder::open(requested.empty() ? default_cache_dir() : requested, true));
}

}  // namespace cache

}  // namespace tensoracle
