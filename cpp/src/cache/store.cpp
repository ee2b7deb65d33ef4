#include "cache/store.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/atomic_file.h"
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
constexpr int kRecordVersion = 1;

json stat_json(const core::FileStat& s) {
  return {{"size", s.size}, {"mtime_ns", s.mtime_ns}, {"ctime_ns", s.ctime_ns}, {"inode", s.inode}, {"device", s.device}};
}

std::string file_name_part(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (out.size() >= 64) break;
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    out += ok ? c : '_';
  }
  if (out.empty() || out[0] == '.') out.insert(out.begin(), '_');
  return out;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

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

std::optional<Record> read_record(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  try {
    if (!j.is_object() || j.at("format") != kRecordFormat || j.at("version") != kRecordVersion) return std::nullopt;
    Record r;
    r.name = j.at("name").get<std::string>();
    r.graph_version = j.at("graph_version").get<std::string>();
    r.identity = j.at("identity").get<std::string>();
    r.identity_text = j.at("identity_text");
    r.device = j.at("device").get<std::string>();
    r.created_ns = integer_field<std::int64_t>(j, "created_ns");
    r.verified = stat_of(j.at("verified"));
    r.verified_ns = integer_field<std::int64_t>(j.at("verified"), "recorded_ns");
    return r;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

void write_record(const std::filesystem::path& path, const Record& r) {
  json verified = stat_json(r.verified);
  verified["recorded_ns"] = r.verified_ns;
  json j = {{"format", kRecordFormat},     {"version", kRecordVersion},  {"name", r.name},
            {"graph_version", r.graph_version}, {"identity", r.identity}, {"identity_text", r.identity_text},
            {"device", r.device},          {"created_ns", r.created_ns}, {"verified", verified}};
  std::string text = j.dump(1) + "\n";
  core::AtomicFile out(path, "cache");
  out.write(std::as_bytes(std::span(text)));
  out.commit();
}

void touch(const std::filesystem::path& path) noexcept {
  const struct timespec times[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
  ::utimensat(AT_FDCWD, path.c_str(), times, 0);
}

void remove_temporaries(const std::filesystem::path& dir, const std::string& base) noexcept {
  const std::string a = core::AtomicFile::temporary_prefix(base + ".engine");
  const std::string b = core::AtomicFile::temporary_prefix(base + ".json");
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string n = it->path().filename().string();
    if (starts_with(n, a) || starts_with(n, b)) ::unlink(it->path().c_str());
  }
}

void remove_stale_temporaries(const std::filesystem::path& dir, std::int64_t age_ns) noexcept {
  const std::int64_t now = core::now_ns();
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string n = it->path().filename().string();
    if (n.empty() || n[0] != '.' || n.find(".tmp-") == std::string::npos) continue;
    auto st = core::stat_path(it->path());
    if (st && now - std::max(st->mtime_ns, st->ctime_ns) > age_ns) ::unlink(it->path().c_str());
  }
}

std::filesystem::path cache_folder(const std::filesystem::path& requested) {
  std::filesystem::path dir = requested.empty() ? default_cache_dir() : requested;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) core::throw_io_error("cache", "cannot create the cache folder", dir, ec.value());
  if (!std::filesystem::is_directory(dir, ec))
    core::throw_io_error("cache", "the cache folder is not a folder", dir, ENOTDIR);
  return dir;
}

}  // namespace cache

}  // namespace tensoracle
