// Internal: the copy of a plugin library that dlopen maps. A library dlopen'ed from its own
// file runs code paged in from that file: rewriting the file in place (`cp new.so lib.so`,
// which truncates and writes the same inode) changes the code under the running process, which
// then crashes, typically at exit when the library's destructors run. So the loader copies the
// file's bytes into an anonymous memory file (memfd_create), seals it against every write,
// resize and further sealing, and dlopens "/proc/self/fd/N": no other process, and no later
// write to the original file, can change what runs. The digest is taken of the copy, so it
// describes exactly the code that runs.
//
//   PrivateCopy copy = PrivateCopy::of(fd, size, path);   // PluginLibraryError if unreadable
//   void* h = dlopen(copy.dlopen_name().c_str(), RTLD_NOW | RTLD_LOCAL);
//   copy.keep();   // once loaded: the descriptor stays open for the life of the process
//
// The loader names the original file in every message; dladdr() and debuggers name the copy
// ("/proc/self/fd/N", mapped as "/memfd:<file name> (deleted)").
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace tensoracle::plugin {

class PrivateCopy {
 public:
  // Copies the `size` bytes of the open file `fd` (from offset 0) into a sealed memfd.
  // Throws PluginLibraryError naming `path` when the file cannot be read or ends early.
  // Returns a copy with valid() false when the system cannot make one (no memfd_create, or
  // memfds not executable): the caller then loads the file itself, as before.
  static PrivateCopy of(int fd, std::uint64_t size, const std::filesystem::path& path);

  PrivateCopy() = default;
  PrivateCopy(PrivateCopy&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  PrivateCopy& operator=(PrivateCopy&& o) noexcept;
  PrivateCopy(const PrivateCopy&) = delete;
  PrivateCopy& operator=(const PrivateCopy&) = delete;
  ~PrivateCopy();  // closes the memfd unless keep() was called

  bool valid() const noexcept { return fd_ >= 0; }
  int fd() const noexcept { return fd_; }
  // "/proc/self/fd/N". The descriptor must stay open while the library is loaded: glibc
  // recognises an already loaded library by this name, so the number must never be reused.
  std::string dlopen_name() const;
  // Whether the library's bytes mention $ORIGIN (a RUNPATH, RPATH or NEEDED entry relative to
  // its own folder): loaded from the copy, $ORIGIN would be /proc/self/fd.
  bool mentions_origin() const;
  // Leaves the descriptor open for the life of the process (the library stays loaded).
  void keep() noexcept { fd_ = -1; }

 private:
  int fd_ = -1;
};

}  // namespace tensoracle::plugin
