// Internal: the identity of a file's current contents as the file system reports it — what a
// digest memo compares to decide that a file is unchanged without reading it.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <optional>

namespace tensoracle::core {

struct FileStat {
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::int64_t ctime_ns = 0;

  static FileStat of(const struct stat& st) noexcept;
  friend bool operator==(const FileStat&, const FileStat&) = default;
};

// stat(2) of `path` (following links); nullopt when it cannot be read (errno is kept).
std::optional<FileStat> stat_path(const std::filesystem::path& path) noexcept;

// Nanoseconds since the Unix epoch, from the real-time clock file times are taken from.
std::int64_t now_ns() noexcept;

// True when `st` was recorded too soon after the file's last change for the record to prove
// anything: file times come from a clock that ticks coarsely (a jiffy, or a second or two on
// some file systems), so a change made within the same tick after the record leaves size,
// times and inode all equal. Such a record must be re-checked by content (git calls these
// entries "racily clean").
bool racy(const FileStat& st, std::int64_t recorded_ns) noexcept;

// The margin racy() applies to `st`: 25 ms (above a jiffy, the coarsest tick of file times
// with sub-second resolution), or 3 s where times are whole seconds (FAT keeps 2 s).
std::int64_t racy_margin_ns(const FileStat& st) noexcept;

}  // namespace tensoracle::core
