#include "cache/lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "core/mapped_file.h"

namespace tensoracle::cache {

std::optional<FileLock> FileLock::lock(const std::filesystem::path& path, const std::string& component, bool wait) {
  for (;;) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) {
      if (!wait) return std::nullopt;
      core::throw_io_error(component, "cannot open the lock file", path, errno);
    }
    int rc;
    do rc = ::flock(fd, wait ? LOCK_EX : LOCK_EX | LOCK_NB);
    while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      int err = errno;
      ::close(fd);
      if (!wait) return std::nullopt;
      core::throw_io_error(component, "cannot lock", path, err);
    }
    // The holder before us may have removed the file (and someone may have created a new
    // one): only a lock on the file the path names now counts.
    struct stat held {}, named {};
    if (::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
        held.st_ino == named.st_ino)
      return FileLock(fd, path);
    ::close(fd);
    if (!wait) return std::nullopt;
  }
}

FileLock FileLock::acquire(const std::filesystem::path& path, const std::string& component) {
  return std::move(*lock(path, component, true));
}

std::optional<FileLock> FileLock::try_acquire(const std::filesystem::path& path) { return lock(path, "cache", false); }

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

void FileLock::remove_file() noexcept {
  if (fd_ >= 0) ::unlink(path_.c_str());
}

}  // namespace tensoracle::cache
