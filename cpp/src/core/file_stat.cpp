#include "core/file_stat.h"

#include <time.h>

#include <algorithm>

namespace tensoracle::core {

FileStat FileStat::of(const struct stat& st) noexcept {
  FileStat f;
  f.device = static_cast<std::uint64_t>(st.st_dev);
  f.inode = static_cast<std::uint64_t>(st.st_ino);
  f.size = static_cast<std::uint64_t>(st.st_size);
#if defined(__APPLE__)
  f.mtime_ns = static_cast<std::int64_t>(st.st_mtimespec.tv_sec) * 1'000'000'000 + st.st_mtimespec.tv_nsec;
  f.ctime_ns = static_cast<std::int64_t>(st.st_ctimespec.tv_sec) * 1'000'000'000 + st.st_ctimespec.tv_nsec;
#else
  f.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  f.ctime_ns = static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
#endif
  return f;
}

std::optional<FileStat> stat_path(const std::filesystem::path& path) noexcept {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileStat::of(st);
}

std::int64_t now_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::int64_t racy_margin_ns(const FileStat& st) noexcept {
  const bool coarse = st.mtime_ns % 1'000'000'000 == 0 && st.ctime_ns % 1'000'000'000 == 0;
  return coarse ? 3'000'000'000 : 25'000'000;
}

bool racy(const FileStat& st, std::int64_t recorded_ns) noexcept {
  // A later change gets a time at least one tick after the record's: if the record is more
  // than a tick younger than the file's last change, that change cannot share its time.
  return recorded_ns - std::max(st.mtime_ns, st.ctime_ns) < racy_margin_ns(st);
}

}  // namespace tensoracle::core
