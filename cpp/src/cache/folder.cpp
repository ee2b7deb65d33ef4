#include "cache/folder.h"

#include <dirent.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "core/mapped_file.h"
#include "tensoracle/errors.h"

namespace tensoracle::cache {

namespace {

namespace fs = std::filesystem;

// mkdir -p, each missing folder 0700.
void create_private(const fs::path& dir) {
  fs::path sofar;
  for (const auto& part : dir) {
    sofar /= part;
    if (::mkdir(sofar.c_str(), 0700) != 0 && errno != EEXIST)
      core::throw_io_error("cache", "cannot create the cache folder", dir, errno);
  }
}

std::string octal(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

void check_owner_and_mode(const struct stat& st, const fs::path& dir) {
  const uid_t me = ::geteuid();
  if (st.st_uid != me && st.st_uid != 0)
    throw IoError("[cache] " + dir.string() + ": the cache folder is owned by uid " + std::to_string(st.st_uid) +
                      ", not by you (uid " + std::to_string(me) +
                      "), who could replace the engines in it; 'chown' it to yourself or pass another cache_dir "
                      "(or set XDG_CACHE_HOME)",
                  EPERM, dir.string());
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    throw IoError("[cache] " + dir.string() + ": the cache folder can be written by other users (mode " +
                      octal(st.st_mode) + "), who could plant links or engines in it; run 'chmod go-w " +
                      dir.string() + "' or pass another cache_dir (or set XDG_CACHE_HOME)",
                  EPERM, dir.string());
}

}  // namespace

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

std::optional<CacheFolder> CacheFolder::open(const fs::path& dir, bool create) {
  if (create) create_private(dir);
  // The folder's own path may pass through links (~/.cache may be one); its files never do.
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT && !create) return std::nullopt;
    if (errno == ENOTDIR) core::throw_io_error("cache", "the cache folder is not a folder", dir, ENOTDIR);
    core::throw_io_error("cache", "cannot open the cache folder", dir, errno);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) core::throw_io_error("cache", "cannot stat the cache folder", dir, errno);
  check_owner_and_mode(st, dir);
  return CacheFolder(std::move(fd), dir);
}

std::vector<std::string> CacheFolder::names() const {
  std::vector<std::string> out;
  int own = ::openat(fd_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (own < 0) return out;
  DIR* d = ::fdopendir(own);
  if (d == nullptr) {
    ::close(own);
    return out;
  }
  while (const dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(std::move(n));
  }
  ::closedir(d);
  return out;
}

std::optional<struct stat> CacheFolder::lstat(const std::string& name) const noexcept {
  struct stat st {};
  if (::fstatat(fd_.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return std::nullopt;
  return st;
}

bool CacheFolder::remove(const std::string& name) const noexcept {
  return ::unlinkat(fd_.get(), name.c_str(), 0) == 0;
}

int open_no_follow(const FileRef& f, int flags) noexcept {
  if ((flags & O_CREAT) == 0) flags |= O_NONBLOCK;
  return ::openat(f.dir, f.name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, 0600);
}

std::optional<std::string> read_small_file(const FileRef& f, std::size_t max_bytes) {
  Fd fd(open_no_follow(f, O_RDONLY));
  if (!fd) return std::nullopt;
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || static_cast<std::uint64_t>(st.st_size) > max_bytes)
    return std::nullopt;
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::nullopt;
    if (n == 0) break;  // shrank meanwhile: what was read is what there is
    got += static_cast<std::size_t>(n);
  }
  text.resize(got);
  return text;
}

void touch(const FileRef& f) noexcept {
  const struct timespec times[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
  ::utimensat(f.dir, f.name.c_str(), times, AT_SYMLINK_NOFOLLOW);
}

}  // namespace tensoracle::cache
