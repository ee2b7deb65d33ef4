// Internal: read-only or copy-on-write memory mapping of a whole regular file.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/file_stat.h"

namespace tensoracle::core {

class MappedFile {
 public:
  // Opens and maps `path`. Throws IoError (open/fstat/mmap failed) or FormatError (not a
  // regular file). An empty file maps to an empty span. Opening never blocks on FIFOs.
  // `component` prefixes error messages ("[safetensors] ...").
  MappedFile(const std::filesystem::path& path, bool copy_on_write, std::string_view component);
  // Maps the file open as `fd` (read-only; the caller keeps and closes it); `path` names it.
  MappedFile(int fd, const std::filesystem::path& path, bool copy_on_write, std::string_view component);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<std::byte> bytes() const noexcept { return {data_, size_}; }
  // What fstat said of the file that was mapped (not of whatever the path names later).
  const FileStat& stat() const noexcept { return stat_; }

 private:
  void map(int fd, const std::filesystem::path& path, bool copy_on_write, std::string_view component);

  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  FileStat stat_;
};

// A whole regular file read into private, 256-byte aligned memory: unlike a mapping, nothing
// another process does to the file afterwards (rewriting or truncating it in place) can change
// these bytes or fault a reader of them. Throws as MappedFile; IoError (EIO) when the file
// shrinks while it is read.
struct FileCopy {
  std::shared_ptr<std::byte[]> data;  // null for an empty file
  std::size_t size = 0;
  FileStat stat;  // what fstat said before reading
};
FileCopy read_file(const std::filesystem::path& path, std::string_view component);
// The same for a file open (read-only) as `fd`, which the caller keeps and closes.
FileCopy read_file(int fd, const std::filesystem::path& path, std::string_view component);

// Throws IoError for a failed system call `what` on `path`, with errno's text.
[[noreturn]] void throw_io_error(std::string_view component, const std::string& what,
                                 const std::filesystem::path& path, int err);

}  // namespace tensoracle::core
