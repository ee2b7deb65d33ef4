// Internal: an exclusive lock on a lock file (flock(2)), held for the object's lifetime.
//
//   auto lock = FileLock::acquire(dir / "linear-<id>.lock", "cache");   // blocks
//   ... build, write ...
//   // destructor: unlock (the kernel also drops it when the process dies, SIGKILL included)
//
// Each acquire opens its own descriptor, so two threads of one process exclude each other
// as two processes do. A lock file may be deleted only by its holder (remove_file()); an
// acquirer that locked a file deleted meanwhile notices (its inode is no longer the path's)
// and locks the new one, so deleting never lets two holders in.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace tensoracle::cache {

class FileLock {
 public:
  // Creates the file when missing. Throws IoError naming it.
  static FileLock acquire(const std::filesystem::path& path, const std::string& component);
  // As acquire, but returns nullopt at once when another holder has the lock (or the file
  // cannot be opened) instead of waiting.
  static std::optional<FileLock> try_acquire(const std::filesystem::path& path);
  ~FileLock();
  FileLock(FileLock&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }
  FileLock& operator=(FileLock&&) = delete;
  FileLock(const FileLock&) = delete;

  // Unlinks the lock file while holding it (then releases on destruction).
  void remove_file() noexcept;

 private:
  static std::optional<FileLock> lock(const std::filesystem::path& path, const std::string& component, bool wait);
  FileLock(int fd, std::filesystem::path path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::filesystem::path path_;
};

}  // namespace tensoracle::cache
