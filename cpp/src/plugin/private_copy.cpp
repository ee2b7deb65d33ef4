// A sealed memfd copy of a plugin library (see plugin/private_copy.h).
#include "plugin/private_copy.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <vector>

#include "tensoracle/errors.h"

namespace tensoracle::plugin {

namespace {

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& why) {
  throw PluginLibraryError("[plugin] " + path.string() + ": " + why);
}

// Appends `size` bytes of `in` (from offset 0) to `out`: sendfile, else read and write.
void copy_bytes(int in, int out, std::uint64_t size, const std::filesystem::path& path) {
  off_t offset = 0;
  std::uint64_t left = size;
  while (left > 0) {
    ssize_t n = ::sendfile(out, in, &offset, static_cast<std::size_t>(std::min<std::uint64_t>(left, 1u << 30)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EINVAL || errno == ENOSYS)) break;  // not for this pair of files: copy below
    if (n < 0) fail(path, std::string("cannot read the plugin library: ") + std::strerror(errno));
    if (n == 0) fail(path, "the plugin library changed while it was read; load it once it is written completely");
    left -= static_cast<std::uint64_t>(n);
  }
  std::vector<char> buffer(static_cast<std::size_t>(std::min<std::uint64_t>(left, 1u << 20)));
  while (left > 0) {
    ssize_t n = ::pread(in, buffer.data(), static_cast<std::size_t>(std::min<std::uint64_t>(left, buffer.size())), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, std::string("cannot read the plugin library: ") + std::strerror(errno));
    if (n == 0) fail(path, "the plugin library changed while it was read; load it once it is written completely");
    for (ssize_t done = 0; done < n;) {
      ssize_t w = ::write(out, buffer.data() + done, static_cast<std::size_t>(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) fail(path, std::string("cannot copy the plugin library into memory: ") + std::strerror(w < 0 ? errno : EIO));
      done += w;
    }
    offset += n;
    left -= static_cast<std::uint64_t>(n);
  }
}

}  // namespace

PrivateCopy PrivateCopy::of(int fd, std::uint64_t size, const std::filesystem::path& path) {
  PrivateCopy c;
#ifdef MFD_ALLOW_SEALING
  // Named after the file, so that /proc/PID/maps shows "/memfd:libx.so (deleted)".
  c.fd_ = ::memfd_create(path.filename().c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (c.fd_ < 0) return c;  // ENOSYS, or EACCES where vm.memfd_noexec forbids executable memfds
  copy_bytes(fd, c.fd_, size, path);
  // No writes, no resizing, no removing of these seals: the code cannot change any more.
  if (::fcntl(c.fd_, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    fail(path, std::string("cannot seal the in-memory copy of the plugin library: ") + std::strerror(errno));
#else
  (void)fd;
  (void)size;
  (void)path;
#endif
  return c;
}

PrivateCopy& PrivateCopy::operator=(PrivateCopy&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

PrivateCopy::~PrivateCopy() {
  if (fd_ >= 0) ::close(fd_);
}

std::string PrivateCopy::dlopen_name() const { return "/proc/self/fd/" + std::to_string(fd_); }

bool PrivateCopy::mentions_origin() const {
  off_t size = ::lseek(fd_, 0, SEEK_END);
  if (size <= 0) return false;
  void* p = ::mmap(nullptr, static_cast<std::size_t>(size), PROT_READ, MAP_PRIVATE, fd_, 0);
  if (p == MAP_FAILED) return false;
  std::string_view bytes(static_cast<const char*>(p), static_cast<std::size_t>(size));
  const bool found = bytes.find("$ORIGIN") != std::string_view::npos || bytes.find("${ORIGIN}") != std::string_view::npos;
  ::munmap(p, static_cast<std::size_t>(size));
  return found;
}

}  // namespace tensoracle::plugin
