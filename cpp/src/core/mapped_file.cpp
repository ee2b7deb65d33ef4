#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tensoracle/errors.h"

namespace tensoracle::core {

void throw_io_error(std::string_view component, const std::string& what,
                    const std::filesystem::path& path, int err) {
  throw IoError("[" + std::string(component) + "] " + path.string() + ": " + what + ": " +
                    std::strerror(err),
                err, path.string());
}

MappedFile::MappedFile(const std::filesystem::path& path, bool copy_on_write, std::string_view component) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; mmap ignores the flag.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw_io_error(component, "cannot open", path, errno);
  try {
    map(fd, path, copy_on_write, component);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);  // the mapping keeps the file's pages; the descriptor is not needed
}

MappedFile::MappedFile(int fd, const std::filesystem::path& path, bool copy_on_write, std::string_view component) {
  map(fd, path, copy_on_write, component);
}

void MappedFile::map(int fd, const std::filesystem::path& path, bool copy_on_write, std::string_view component) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw_io_error(component, "cannot stat", path, errno);
  if (!S_ISREG(st.st_mode))
    throw FormatError("[" + std::string(component) + "] " + path.string() + ": not a regular file");
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
