// Internal: write a file atomically — a temporary file in the destination's folder, written,
// fsync'ed and closed with every result checked, then renamed over the destination, then the
// folder fsync'ed. Until commit() succeeds the destination is untouched; if the writer is
// destroyed without commit() (an exception, say) the temporary file is removed.
//
// Only a regular file is ever replaced: when the destination exists and is anything else — a
// directory, a device such as /dev/null, a FIFO, a socket, or a symbolic link (not followed:
// replacing the link would silently detach it from its target) — the constructor and commit()
// throw IoError (EISDIR for a directory, else EEXIST) naming the path. Every writer (engine
// saves in the cache, safetensors, convert, compare --plot, cubin) goes through here.
//
//   AtomicFile out(path, "safetensors");
//   out.write(bytes);          // throws IoError (e.g. ENOSPC, EFBIG) naming the destination
//   out.commit();
#pragma once

#include <fcntl.h>

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>

namespace tensoracle::core {

class AtomicFile {
 public:
  // `component` prefixes error messages ("[safetensors] ...").
  AtomicFile(std::filesystem::path destination, std::string component);
  // The file `name` of the open folder `dir_fd` (borrowed: it must outlive this object), every
  // step relative to it (openat, renameat, unlinkat, fsync of `dir_fd`); `destination` names the
  // file in messages. Whatever is named `name` is replaced, a link included, never followed:
  // for the engine cache, whose folder is the user's own and whose files are its own (the
  // path form above refuses anything but a regular file at a path the user named).
  AtomicFile(int dir_fd, std::string name, std::filesystem::path destination, std::string component);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(std::span<const std::byte> bytes);
  // Appends `length` bytes at `offset` of the open file `in` (its file offset is unchanged):
  // copy_file_range where the kernel has it for these files, else pread and write. IoError
  // (EIO) if `in` ends early.
  void copy_from(int in, std::uint64_t offset, std::uint64_t length);

  // Whether commit() may replace an existing destination. kNo fails with IoError EEXIST
  // instead, atomically (renameat2 RENAME_NOREPLACE, or link + unlink where the file system
  // lacks it), leaving the destination untouched.
  enum class Replace { kYes, kNo };
  void commit(Replace replace = Replace::kYes);

  const std::filesystem::path& temporary_path() const noexcept { return temp_; }

  // Prefix of every temporary file's name, so that leftovers of killed processes can be
  // recognised and cleaned: ".<destination name>.tmp-".
  static std::string temporary_prefix(const std::filesystem::path& destination);

 private:
  [[noreturn]] void fail(const std::string& what, int err);
  void check_replaceable() const;  // IoError unless dest_ is absent or a regular file
  void discard() noexcept;

  void create_temporary();

  std::filesystem::path dest_;
  std::filesystem::path temp_;
  std::string component_;
  int fd_ = -1;
  // AT_FDCWD with whole paths, or the destination's folder with bare names.
  int dir_fd_ = AT_FDCWD;
  std::string dest_name_, temp_name_;
};

}  // namespace tensoracle::core
