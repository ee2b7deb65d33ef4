// tensoracle/errors.h — the exceptions every tensoracle function may throw.
//
//   try {
//     auto file = tensoracle::safetensors::File::open("model.safetensors");
//   } catch (const tensoracle::FormatError& e) {
//     std::cerr << e.what() << "\n";   // "[safetensors] model.safetensors: tensor 'w': ..."
//   }
//
// Every exception derives from tensoracle::Error (itself a std::runtime_error). Messages
// start with the component in brackets, then name the file, tensor or layer concerned and
// the rule that was broken. The Python binding maps each class to one Python exception
// class of the same name (see python/native/module.cpp); nothing else converts them.
#pragma once

#include <stdexcept>
#include <string>

namespace tensoracle {

// Base of all tensoracle exceptions.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A caller passed a value that the function cannot accept (Python: ValueError).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// An input file is malformed: its bytes break a rule of its format (Python: ValueError).
class FormatError : public Error {
 public:
  using Error::Error;
};

// A checkpoint's pickle asks for something outside the allow list (Python: FormatError).
class UnsafeCheckpointError : public FormatError {
 public:
  using FormatError::FormatError;
};

// A network could not be built into an engine (Python: RuntimeError).
class BuildError : public Error {
 public:
  using Error::Error;
};

// An engine file is damaged or truncated.
class CorruptEngineError : public Error {
 public:
  using Error::Error;
};

// An engine file has another format version or was built for another device.
class IncompatibleEngineError : public Error {
 public:
  using Error::Error;
};

// An engine's inputs or outputs differ from what the caller declared.
class EngineIOError : public Error {
 public:
  using Error::Error;
};

// A plugin library is missing, unreadable, incompatible or changed after loading.
class PluginLibraryError : public Error {
 public:
  using Error::Error;
};

// A valid request that this version of tensoracle does not support.
class UnsupportedError : public Error {
 public:
  using Error::Error;
};

// An operating-system call failed (open, write, fsync, rename, ...). errno_value() is the
// errno reported by the system (Python: OSError with that errno and the file name).
class IoError : public Error {
 public:
  IoError(const std::string& message, int errno_value, std::string path)
      : Error(message), errno_(errno_value), path_(std::move(path)) {}
  int errno_value() const noexcept { return errno_; }
  const std::string& path() const noexcept { return path_; }

 private:
  int errno_;
  std::string path_;
};

}  // namespace tensoracle
