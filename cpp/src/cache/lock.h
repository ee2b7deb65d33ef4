// Internal: an exclusive lock on a lock file (flock(2)), held for the object's lifetime.
//
//   auto lock = FileLock::acquire(folder.file("linear-<id>.lock"), "cache");   // blocks
//   ... build, write ...
//   // destructor: unlock (the kernel also drops it when the process dies, SIGKILL included)
//
// Each acquire opens its own descriptor, so two threads of one process exclude each other
// as two processes do. A lock file may be deleted only by its holder (remove_file()); an
// acquirer that locked a file deleted meanwhile notices (its inode is no longer the name's)
// and locks the new one, so deleting never lets two holders in. The lock file is opened
// relative to its folder's descriptor and never through a link (cache/folder.h): a link where
// the lock file belongs is an IoError, never followed, never created through.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "cache/folder.h"

namespace tensoracle::cache {

class FileLock {
 public:
  // Creates the file (0600) when missing. Throws IoError naming it (ELOOP: it is a link).
  // Borrows `file.dir`: the folder must stay open while the lock is held.
  static FileLock acquire(const FileRef& file, const std::string& component);
  static FileLock acquire(const std::filesystem::path& path, const std::string& component) {
    return acquire(FileRef::at_path(path), component);
  }
  // As acquire, but returns nullopt at once when another holder has the lock, or the file
  // cannot be opened (a link, say), or it is missing and !create, instead of waiting.
  static std::optional<FileLock> try_acquire(const FileRef& file, bool create = true);
  static std::optional<FileLock> try_acquire(const std::filesystem::path& path) {
    return try_acquire(FileRef::at_path(path));
  }
  ~FileLock();
  FileLock(FileLock&& o) noexcept : fd_(o.fd_), file_(std::move(o.file_)) { o.fd_ = -1; }
  FileLock& operator=(FileLock&&) = delete;
  FileLock(const FileLock&) = delete;

  // Unlinks the lock file while holding it (then releases on destruction).
  void remove_file() noexcept;

 private:
  static std::optional<FileLock> lock(const FileRef& file, const std::string& component, bool wait, bool create);
  FileLock(int fd, FileRef file) : fd_(fd), file_(std::move(file)) {}
  int fd_ = -1;
  FileRef file_;
};

}  // namespace tensoracle::cache
