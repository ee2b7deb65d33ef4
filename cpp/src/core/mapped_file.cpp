#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

#include "tensoracle/errors.h"

namespace tensoracle::core {

void throw_io_error(std::string_view component, const std::string& what,
                    const std::filesystem::path& path, int err) {
  throw IoError("[" + std::string(component) + "] " + path.string() + ": " + what + ": " +
                    std::strerror(err),
                err, path.string());
}

namespace {

// Opens `path` read-only. O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused
// below as not a regular file); reads and mmap ignore the flag for regular files.
int open_read_only(const std::filesystem::path& path, std::string_view component) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw_io_error(component, "cannot open", path, errno);
  return fd;
}

// fstat's record of `fd`; FormatError unless it is a regular file.
struct stat stat_regular(int fd, const std::filesystem::path& path, std::string_view component) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw_io_error(component, "cannot stat", path, errno);
  if (!S_ISREG(st.st_mode))
    throw FormatError("[" + std::string(component) + "] " + path.string() + ": not a regular file");
  return st;
}

struct FdCloser {
  int fd;
  ~FdCloser() { ::close(fd); }
};

}  // namespace

FileCopy read_file(int fd, const std::filesystem::path& path, std::string_view component) {
  const struct stat st = stat_regular(fd, path, component);
  FileCopy copy;
  copy.size = static_cast<std::size_t>(st.st_size);
  copy.stat = FileStat::of(st);
  if (copy.size > 0) {
    constexpr std::size_t kAlign = 256;
    auto* p = static_cast<std::byte*>(std::aligned_alloc(kAlign, (copy.size + kAlign - 1) / kAlign * kAlign));
    if (p == nullptr) throw std::bad_alloc();
    copy.data = std::shared_ptr<std::byte[]>(p, [](std::byte* q) { std::free(q); });
    std::size_t done = 0;
    while (done < copy.size) {
      const ssize_t n = ::pread(fd, p + done, std::min<std::size_t>(copy.size - done, std::size_t{1} << 30),
                                static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        throw_io_error(component, n < 0 ? "cannot read" : "the file shrank while it was read", path,
                       n < 0 ? errno : EIO);
      done += static_cast<std::size_t>(n);
    }
  }
  return copy;
}

FileCopy read_file(const std::filesystem::path& path, std::string_view component) {
  FdCloser closer{open_read_only(path, component)};
  return read_file(closer.fd, path, component);
}

MappedFile::MappedFile(const std::filesystem::path& path, bool copy_on_write, std::string_view component) {
  FdCloser closer{open_read_only(path, component)};  // the mapping keeps the file's pages
  map(closer.fd, path, copy_on_write, component);
}

MappedFile::MappedFile(int fd, const std::filesystem::path& path, bool copy_on_write, std::string_view component) {
  map(fd, path, copy_on_write, component);
}

void MappedFile::map(int fd, const std::filesystem::path& path, bool copy_on_write, std::string_view component) {
  const struct stat st = stat_regular(fd, path, component);
  size_ = static_cast<std::size_t>(st.st_size);
  stat_ = FileStat::of(st);
  if (size_ > 0) {
    int prot = copy_on_write ? (PROT_READ | PROT_WRITE) : PROT_READ;
    void* p = ::mmap(nullptr, size_, prot, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) throw_io_error(component, "cannot map", path, errno);
    data_ = static_cast<std::byte*>(p);
  }
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

}  // namespace tensoracle::core
