#include "core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>  // renameat2, RENAME_NOREPLACE (glibc >= 2.28)
#include <algorithm>
#include <random>
#include <vector>

#include "core/mapped_file.h"
#include "tensoracle/errors.h"

namespace tensoracle::core {

namespace {

std::string random_suffix() {
  std::random_device rd;
  std::uint64_t v = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::filesystem::path folder_of(const std::filesystem::path& p) {
  auto parent = p.parent_path();
  return parent.empty() ? std::filesystem::path(".") : parent;
}

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

void AtomicFile::check_replaceable() const {
  struct stat st {};
  if (::lstat(dest_.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return;  // absent (or unreadable: open says why)
  throw IoError("[" + component_ + "] " + dest_.string() + ": exists and is " + kind_of(st.st_mode) +
                    "; tensoracle replaces only regular files (a symbolic link is neither followed nor replaced): "
                    "remove it or write to another path",
                S_ISDIR(st.st_mode) ? EISDIR : EEXIST, dest_.string());
}

std::string AtomicFile::temporary_prefix(const std::filesystem::path& destination) {
  return "." + destination.filename().string() + ".tmp-";
}

AtomicFile::AtomicFile(std::filesystem::path destination, std::string component)
    : dest_(std::move(destination)), component_(std::move(component)) {
  if (dest_.filename().empty())
    throw IoError("[" + component_ + "] " + dest_.string() + ": not a file name", EISDIR,
                  dest_.string());
  dest_name_ = dest_.string();
  check_replaceable();
  create_temporary();
}

AtomicFile::AtomicFile(int dir_fd, std::string name, std::filesystem::path destination, std::string component)
    : dest_(std::move(destination)), component_(std::move(component)), dir_fd_(dir_fd), dest_name_(std::move(name)) {
  if (dest_name_.empty() || dest_name_.find('/') != std::string::npos)
    throw IoError("[" + component_ + "] " + dest_.string() + ": not a file name", EISDIR, dest_.string());
  create_temporary();
}

void AtomicFile::create_temporary() {
  for (int attempt = 0; attempt < 16 && fd_ < 0; ++attempt) {
    const std::string name = temporary_prefix(dest_) + std::to_string(::getpid()) + "-" + random_suffix();
    temp_ = folder_of(dest_) / name;
    temp_name_ = dir_fd_ == AT_FDCWD ? temp_.string() : name;
    // O_EXCL: never through a link, never over another file.
    fd_ = ::openat(dir_fd_, temp_name_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd_ < 0 && errno != EEXIST) throw_io_error(component_, "cannot create a file in its folder", dest_, errno);
  }
  if (fd_ < 0) throw_io_error(component_, "cannot create a temporary file", dest_, EEXIST);
}

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::discard() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!temp_.empty()) {
    ::unlinkat(dir_fd_, temp_name_.c_str(), 0);
    temp_.clear();
  }
}

void AtomicFile::fail(const std::string& what, int err) {
  discard();
  throw_io_error(component_, what, dest_, err);
}

void AtomicFile::write(std::span<const std::byte> bytes) {
  if (fd_ < 0) throw IoError("[" + component_ + "] " + dest_.string() + ": write after commit", EBADF, dest_.string());
  while (!bytes.empty()) {
    // Linux writes at most ~2 GiB per call; loop over partial writes and EINTR.
    std::size_t chunk = std::min<std::size_t>(bytes.size(), std::size_t{1} << 30);
    ssize_t n = ::write(fd_, bytes.data(), chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot write", errno);
    }
    if (n == 0) fail("cannot write", EIO);
    bytes = bytes.subspan(static_cast<std::size_t>(n));
  }
}

void AtomicFile::copy_from(int in, std::uint64_t offset, std::uint64_t length) {
  if (fd_ < 0) throw IoError("[" + component_ + "] " + dest_.string() + ": write after commit", EBADF, dest_.string());
#ifdef __linux__
  // In the kernel: no copy through user memory. Not every pair of file systems supports it
  // (EXDEV, EINVAL, EOPNOTSUPP, ...): then the loop below does the rest.
  while (length > 0) {
    auto off = static_cast<off_t>(offset);
    ssize_t n = ::copy_file_range(in, &off, fd_, nullptr, std::min<std::uint64_t>(length, std::uint64_t{1} << 30), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // an error (fall back), or the end of `in` (the fallback says so)
    offset += static_cast<std::uint64_t>(n);
    length -= static_cast<std::uint64_t>(n);
  }
#endif
  std::vector<std::byte> buffer(static_cast<std::size_t>(std::min<std::uint64_t>(length, std::uint64_t{1} << 20)));
  while (length > 0) {
    std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(length, buffer.size()));
    ssize_t n = ::pread(in, buffer.data(), want, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot read the data to copy", errno);
    }
    if (n == 0) fail("the data to copy ends early (was its file truncated?)", EIO);
    write(std::span(buffer).first(static_cast<std::size_t>(n)));
    offset += static_cast<std::uint64_t>(n);
    length -= static_cast<std::uint64_t>(n);
  }
}

void AtomicFile::commit(Replace replace) {
  if (fd_ < 0) throw IoError("[" + component_ + "] " + dest_.string() + ": committed twice", EBADF, dest_.string());
  if (::fsync(fd_) != 0) fail("cannot flush to disk (fsync)", errno);
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("cannot close", errno);
  if (replace == Replace::kYes) {
    try {
      if (dir_fd_ == AT_FDCWD) check_replaceable();  // again: the destination may have changed meanwhile
    } catch (...) {
      discard();
      throw;
    }
    if (::renameat(dir_fd_, temp_name_.c_str(), dir_fd_, dest_name_.c_str()) != 0) fail("cannot rename the temporary file into place", errno);
  } else {
#ifdef RENAME_NOREPLACE
    int err = ::renameat2(dir_fd_, temp_name_.c_str(), dir_fd_, dest_name_.c_str(), RENAME_NOREPLACE) == 0 ? 0 : errno;
#else
    int err = ENOSYS;
#endif
    if (err == EEXIST) fail("already exists (not replaced)", EEXIST);
    if (err != 0 && err != EINVAL && err != ENOSYS) fail("cannot rename the temporary file into place", err);
    if (err != 0) {
      // No RENAME_NOREPLACE here: link() refuses an existing name too.
      if (::linkat(dir_fd_, temp_name_.c_str(), dir_fd_, dest_name_.c_str(), 0) != 0)
        fail(errno == EEXIST ? "already exists (not replaced)" : "cannot link the temporary file into place", errno);
      ::unlinkat(dir_fd_, temp_name_.c_str(), 0);
    }
  }
  temp_.clear();  // now the destination: never unlink it
  int dir = dir_fd_ == AT_FDCWD ? ::open(folder_of(dest_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                                : ::fcntl(dir_fd_, F_DUPFD_CLOEXEC, 0);
  if (dir < 0) throw_io_error(component_, "cannot open its folder to flush the rename", dest_, errno);
  int rc = ::fsync(dir);
  int err = errno;
  ::close(dir);
  // Some file systems refuse fsync on directories (EINVAL); the rename itself has happened.
  if (rc != 0 && err != EINVAL) throw_io_error(component_, "cannot flush its folder (fsync)", dest_, err);
}

}  // namespace tensoracle::core
