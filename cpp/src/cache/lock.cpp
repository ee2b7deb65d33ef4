#include "cache/lock.h"

#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "core/mapped_file.h"
#include "tensoracle/errors.h"

namespace tensoracle::cache {

std::optional<FileLock> FileLock::lock(const FileRef& file, const std::string& component, bool wait, bool create) {
  for (;;) {
    int fd = open_no_follow(file, create ? O_RDWR | O_CREAT : O_RDWR);
    if (fd < 0) {
      int err = errno;
      if (!wait) return std::nullopt;
      if (err == ELOOP)
        throw IoError("[" + component + "] " + file.path.string() +
                          ": the lock file is a symbolic link, which the cache never follows; remove the link",
                      ELOOP, file.path.string());
      core::throw_io_error(component, "cannot open the lock file", file.path, err);
    }
    struct stat held {};
    if (::fstat(fd, &held) != 0 || !S_ISREG(held.st_mode)) {
      ::close(fd);
      if (!wait) return std::nullopt;
      throw IoError("[" + component + "] " + file.path.string() + ": the lock file is not a regular file; remove it",
                    EINVAL, file.path.string());
    }
    int rc;
    do rc = ::flock(fd, wait ? LOCK_EX : LOCK_EX | LOCK_NB);
    while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      int err = errno;
      ::close(fd);
      if (!wait) return std::nullopt;
      core::throw_io_error(component, "cannot lock", file.path, err);
    }
    // The holder before us may have removed the file (and someone may have created a new
    // one): only a lock on the file the name names now counts.
    struct stat named {};
    if (::fstat(fd, &held) == 0 && ::fstatat(file.dir, file.name.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 &&
        held.st_dev == named.st_dev && held.st_ino == named.st_ino)
      return FileLock(fd, file);
    ::close(fd);
    if (!wait) return std::nullopt;
  }
}

FileLock FileLock::acquire(const FileRef& file, const std::string& component) {
  return std::move(*lock(file, component, true, true));
}

std::optional<FileLock> FileLock::try_acquire(const FileRef& file, bool create) {
  return lock(file, "cache", false, create);
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

void FileLock::remove_file() noexcept {
  if (fd_ >= 0) ::unlinkat(file_.dir, file_.name.c_str(), 0);
}

}  // namespace tensoracle::cache
