#include "cache/digest_memo.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "cache/lock.h"
#include "cache/store.h"
#include "core/atomic_file.h"
#include "core/mapped_file.h"
#include "tensoracle/cache.h"
#include "tensoracle/errors.h"

namespace tensoracle::cache {

namespace {

using json = nlohmann::json;
constexpr const char* kFormat = "tensoracle.digest-memo";
constexpr int kVersion = 1;

std::string hex128(const XXH128_hash_t& h) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s = "xxh3-128:";
  for (unsigned char b : c.digest) {
    s += kHex[b >> 4];
    s += kHex[b & 0xF];
  }
  return s;
}

std::map<std::string, DigestMemo::Record> read_memo(const std::filesystem::path& file) {
  std::map<std::string, DigestMemo::Record> out;
  std::ifstream in(file, std::ios::binary);
  if (!in) return out;
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("format") || j["format"] != kFormat || !j.contains("version") ||
      j["version"] != kVersion)
    return out;
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
  const Counters& c = counters();
  return {c.files_hashed.load(), c.bytes_hashed.load(), c.engine_digest_checks.load()};
}

std::string hash_file(int fd, const std::filesystem::path& path, const std::string& component,
                      const std::string& what) {
#ifdef POSIX_FADV_SEQUENTIAL
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
  if (!state) throw std::bad_alloc();
  XXH3_128bits_reset(state.get());
  constexpr std::size_t kChunk = std::size_t{4} << 20;
  std::vector<unsigned char> buf(kChunk);
  std::uint64_t total = 0;
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      core::throw_io_error(component, "cannot read " + what, path, errno);
    }
    if (n == 0) break;
    XXH3_128bits_update(state.get(), buf.data(), static_cast<std::size_t>(n));
    total += static_cast<std::uint64_t>(n);
  }
  counters().files_hashed.fetch_add(1);
  counters().bytes_hashed.fetch_add(total);
  return hex128(XXH3_128bits_digest(state.get()));
}

DigestMemo::DigestMemo(std::filesystem::path cache_dir) : dir_(std::move(cache_dir)), records_(read_memo(file(dir_))) {}

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
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    auto lock = FileLock::acquire(dir_ / "digests.lock", "cache");
    // Every writer of the memo holds this lock: other temporaries of it are leftovers of a
    // killed process.
    const std::string leftover = core::AtomicFile::temporary_prefix(file(dir_));
    for (std::filesystem::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec))
      if (it->path().filename().string().rfind(leftover, 0) == 0) ::unlink(it->path().c_str());
    auto merged = read_memo(file(dir_));
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
    core::AtomicFile out(file(dir_), "cache");
    out.write(std::as_bytes(std::span(text)));
    out.commit();
    for (auto& [k, r] : updates_) records_[k] = r;
    updates_.clear();
  } catch (const std::exception&) {
    // Not remembered; the next open hashes again.
  }
}

}  // namespace tensoracle::cache
