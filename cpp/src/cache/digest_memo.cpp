#include "cache/digest_memo.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "cache/lock.h"
#include "cache/store.h"
#include "core/atomic_file.h"
#include "core/json.h"
#include "core/mapped_file.h"
#include "tensoracle/cache.h"
#include "tensoracle/errors.h"

namespace tensoracle::cache {

namespace {

using json = nlohmann::json;
constexpr const char* kFormat = "tensoracle.digest-memo";
constexpr int kVersion = 1;
constexpr std::size_t kMaxMemoBytes = std::size_t{64} << 20;  // 1024 records are far below

// The memo document, or nullopt when the file is missing, a link, too large, malformed, too
// deeply nested or of another format.
std::optional<json> read_memo_document(const CacheFolder& folder) {
  auto text = read_small_file(folder.file(DigestMemo::kFileName), kMaxMemoBytes);
  if (!text) return std::nullopt;
  json j;
  try {
    j = core::parse_untrusted(*text);
  } catch (const core::JsonError&) {
    return std::nullopt;
  }
  if (!j.is_object() || !j.contains("format") || j["format"] != kFormat || !j.contains("version") ||
      j["version"] != kVersion)
    return std::nullopt;
  return j;
}

std::map<std::string, DigestMemo::Record> read_memo(const CacheFolder& folder) {
  std::map<std::string, DigestMemo::Record> out;
  auto doc = read_memo_document(folder);
  if (!doc) return out;
  json& j = *doc;
  auto files = j.find("files");
  if (files == j.end() || !files->is_object()) return out;
  for (const auto& [path, e] : files->items()) {
    try {
      DigestMemo::Record r;
      r.stat = stat_of(e);
      r.digest = e.at("digest").get<std::string>();
      r.recorded_ns = integer_field<std::int64_t>(e, "recorded_ns");
      if (r.digest.rfind("xxh3-128:", 0) != 0 || r.digest.size() != 9 + 32) continue;
      out[path] = r;
    } catch (const std::exception&) {
      // A damaged record is no record.
    }
  }
  return out;
}

}  // namespace

Counters& counters() {
  static Counters c;
  return c;
}

ReadCounts read_counts() {
  const core::HashCounters& h = core::hash_counters();
  return {h.files_hashed.load(), h.bytes_hashed.load(), counters().engine_digest_checks.load()};
}

bool DigestMemo::present(const CacheFolder& folder) { return read_memo_document(folder).has_value(); }

DigestMemo::DigestMemo(const CacheFolder& folder) : folder_(folder), records_(read_memo(folder)) {}

FileDigest DigestMemo::digest(const std::filesystem::path& path, const std::string& kind) {
  std::error_code ec;
  std::filesystem::path real = std::filesystem::canonical(path, ec);
  if (ec) core::throw_io_error("cache", "cannot open the " + kind, path, ec.value());
  // O_NONBLOCK: a FIFO must not block the open; it is refused below.
  int fd = ::open(real.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) core::throw_io_error("cache", "cannot open the " + kind, path, errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  for (int attempt = 0;; ++attempt) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) core::throw_io_error("cache", "cannot stat", path, errno);
    if (!S_ISREG(st.st_mode)) throw FormatError("[cache] " + path.string() + ": the " + kind + " is not a regular file");
    core::FileStat before = core::FileStat::of(st);
    const std::string key = real.string();
    for (const auto* m : {&updates_, &records_}) {
      auto it = m->find(key);
      if (it != m->end() && it->second.stat == before && !core::racy(before, it->second.recorded_ns))
        return {it->second.digest, before.size};
    }
    if (::lseek(fd, 0, SEEK_SET) != 0) core::throw_io_error("cache", "cannot seek", path, errno);
    std::string d = hash_file(fd, path, "cache", "the " + kind);
    if (::fstat(fd, &st) != 0) core::throw_io_error("cache", "cannot stat", path, errno);
    if (core::FileStat::of(st) == before) {
      updates_[key] = {before, d, core::now_ns()};
      return {d, before.size};
    }
    if (attempt == 2)
      throw IoError("[cache] " + path.string() + ": the " + kind + " kept changing while it was read; open the engine "
                    "once it is written completely", EAGAIN, path.string());
  }
}

void DigestMemo::save() noexcept {
  if (updates_.empty()) return;
  try {
    auto lock = FileLock::acquire(folder_.file(kLockName), "cache");
    // Every writer of the memo holds this lock: other temporaries of it are leftovers of a
    // killed process.
    const std::string leftover = core::AtomicFile::temporary_prefix(kFileName);
    for (const auto& n : folder_.names())
      if (n.rfind(leftover, 0) == 0)
        if (auto st = folder_.lstat(n); st && S_ISREG(st->st_mode)) folder_.remove(n);
    auto merged = read_memo(folder_);
    for (const auto& [k, r] : updates_) merged[k] = r;
    if (merged.size() > kMaxRecords) {
      std::vector<std::pair<std::int64_t, std::string>> by_age;
      for (const auto& [k, r] : merged) by_age.emplace_back(r.recorded_ns, k);
      std::sort(by_age.begin(), by_age.end());
      for (std::size_t i = 0; i < merged.size() - kMaxRecords; ++i) merged.erase(by_age[i].second);
    }
    json files = json::object();
    for (const auto& [k, r] : merged)
      files[k] = {{"size", r.stat.size},         {"mtime_ns", r.stat.mtime_ns}, {"ctime_ns", r.stat.ctime_ns},
                  {"inode", r.stat.inode},       {"device", r.stat.device},     {"digest", r.digest},
                  {"recorded_ns", r.recorded_ns}};
    json doc = {{"format", kFormat}, {"version", kVersion}, {"files", std::move(files)}};
    // Paths need not be UTF-8: replace what JSON cannot hold (such a record just never matches).
    std::string text = doc.dump(1, ' ', false, json::error_handler_t::replace) + "\n";
    core::AtomicFile out(folder_.fd(), kFileName, file(folder_.path()), "cache");
    out.write(std::as_bytes(std::span(text)));
    out.commit();
    for (auto& [k, r] : updates_) records_[k] = r;
    updates_.clear();
  } catch (const std::exception&) {
    // Not remembered; the next open hashes again.
  }
}

}  // namespace tensoracle::cache
