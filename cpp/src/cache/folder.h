// Internal: the cache folder, opened once and checked, and every file in it named relative to
// that open folder, never through a link.
//
//   CacheFolder dir = CacheFolder::open(path, /*create=*/true);   // IoError: refused or missing
//   FileRef record = dir.file("linear-<identity>.json");
//   auto text = read_small_file(record, kMaxRecordBytes);        // nullopt: missing, a link, ...
//
// A cache folder is used only when it is owned by the current user (or root) and no one else
// can write it (no group or other write bit, sticky or not): anyone who can create files in it
// could plant links or engines under the cache's names, as ssh and pip reason about their own
// folders. tensoracle creates missing folders 0700. Every open, create, unlink and time change
// in it goes through openat & co. relative to the folder's descriptor with O_NOFOLLOW /
// AT_SYMLINK_NOFOLLOW, so a link where a cache file belongs is never followed nor created
// through, and a regular file is required of whatever is opened (fstat on the descriptor).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tensoracle::cache {

// A file named relative to an open folder: `dir` is the folder's descriptor (AT_FDCWD: `name`
// is a whole path) and `path` names the file in messages. Borrows `dir`.
struct FileRef {
  int dir = AT_FDCWD;
  std::string name;
  std::filesystem::path path;

  static FileRef at_path(const std::filesystem::path& p) { return {AT_FDCWD, p.string(), p}; }
};

// An owned file descriptor (-1: none).
class Fd {
 public:
  explicit Fd(int fd = -1) noexcept : fd_(fd) {}
  ~Fd();
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }

 private:
  int fd_;
};

class CacheFolder {
 public:
  // Opens the folder `dir` (creating it and missing parents 0700 when `create`) and checks its
  // owner and mode. Returns nullopt when it is missing and !create. Throws IoError naming the
  // folder: it cannot be created or opened, is not a folder, is owned by another user (EPERM:
  // "chown" it or choose another cache_dir) or others can write it (EPERM: "chmod go-w" it
  // or choose another cache_dir).
  static std::optional<CacheFolder> open(const std::filesystem::path& dir, bool create);

  const std::filesystem::path& path() const noexcept { return path_; }
  int fd() const noexcept { return fd_.get(); }
  FileRef file(const std::string& name) const { return {fd_.get(), name, path_ / name}; }

  // The names in the folder ("." and ".." left out); empty when it cannot be read.
  std::vector<std::string> names() const;
  // lstat of a name in the folder (a link is reported as a link); nullopt when missing.
  std::optional<struct stat> lstat(const std::string& name) const noexcept;
  // unlinkat (a link is removed, never its target); false with errno set on failure.
  bool remove(const std::string& name) const noexcept;

 private:
  CacheFolder(Fd fd, std::filesystem::path path) : fd_(std::move(fd)), path_(std::move(path)) {}
  Fd fd_;
  std::filesystem::path path_;
};

// openat(f.dir, f.name, flags | O_NOFOLLOW | O_CLOEXEC, 0600): -1 with errno set on failure
// (ELOOP where the name is a link). O_NONBLOCK is added unless O_CREAT is given, so that a FIFO
// does not block the open.
int open_no_follow(const FileRef& f, int flags) noexcept;
// The whole of a regular file of at most `max_bytes`; nullopt when it is missing, a link, not a
// regular file, larger, or cannot be read.
std::optional<std::string> read_small_file(const FileRef& f, std::size_t max_bytes);
// Sets the file's mtime to now without following a link; failures are ignored.
void touch(const FileRef& f) noexcept;

}  // namespace tensoracle::cache
