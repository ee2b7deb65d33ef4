// Which backend runs a device string: the CPU backend is linked in; the CUDA backend is
// libtensoracle_cuda.so, opened with dlopen the first time a CUDA device is asked for (or
// "auto" finds a CUDA driver), so the core, the CLI and the Python package work on machines
// without CUDA.
//
// Where the library is looked for, in order: $TENSORACLE_CUDA_BACKEND (a file path); beside
// the module that holds this code (the Python extension's folder, the CLI's folder); that
// folder's ../lib; then the dynamic linker's own search (LD_LIBRARY_PATH, ...).
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "backends/build_identity.h"
#include "backends/cpu/cpu_backend.h"
#include "core/module_folder.h"
#include "runtime/devices.h"
#include "tensoracle/errors.h"

namespace tensoracle::runtime {

using backends::Backend;
using backends::kBackendAbiVersion;
using cpu::cpu_backend;

namespace {

// The entry point libtensoracle_cuda.so exports (backends/cuda/cuda_backend.cpp).
// abi_version and build_identity (backends/build_identity.h) come first: the library refuses a
// core of another build before it reads anything else.
using CudaEntry = const Backend* (*)(int abi_version, const char* build_identity, int device_index, char* error,
                                     std::size_t error_size);
constexpr const char* kCudaLibrary = "libtensoracle_cuda.so";
constexpr const char* kCudaEntry = "tensoracle_cuda_backend";

struct CudaLibrary {
  CudaEntry entry = nullptr;
  std::string error;  // why there is no entry
};

CudaLibrary open_cuda_library() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("TENSORACLE_CUDA_BACKEND"); env && *env) {
    candidates.emplace_back(env);
  } else {
    auto here = core::module_folder(reinterpret_cast<const void*>(&cuda_backend));
    if (!here.empty()) {
      candidates.push_back((here / kCudaLibrary).string());
      candidates.push_back((here.parent_path() / "lib" / kCudaLibrary).string());
    }
    candidates.emplace_back(kCudaLibrary);
  }
  CudaLibrary lib;
  std::string tried;
  for (const auto& c : candidates) {
    const bool is_path = c.find('/') != std::string::npos;
    std::error_code ec;
    if (is_path && !std::filesystem::exists(c, ec)) {
      tried += "\n  " + c + ": not found";
      continue;
    }
    // RTLD_LOCAL: the backend's copies of core symbols stay its own.
    void* handle = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      tried += "\n  " + c + ": " + (why ? why : "dlopen failed");
      continue;
    }
    lib.entry = reinterpret_cast<CudaEntry>(dlsym(handle, kCudaEntry));
    if (lib.entry == nullptr) {
      lib.error = c + " does not export " + kCudaEntry + "; it is not a tensoracle CUDA backend";
      dlclose(handle);
      return lib;
    }
    return lib;  // kept open for the life of the process
  }
  lib.error = std::string("the CUDA backend library ") + kCudaLibrary +
              " could not be loaded (this build of tensoracle may have none: it is built where a CUDA toolkit with "
              "cuBLASLt is found; set TENSORACLE_CUDA_BACKEND to its path otherwise). Tried:" + tried;
  return lib;
}

}  // namespace

const Backend& cuda_backend(int index) {
  static const CudaLibrary lib = open_cuda_library();
  if (lib.entry == nullptr) throw BuildError("[cuda] " + lib.error);
  char error[1024] = {};
  const Backend* backend = lib.entry(kBackendAbiVersion, backends::build_identity(), index, error, sizeof error);
  if (backend == nullptr) throw BuildError(std::string("[cuda] ") + error);
  return *backend;
}

namespace {

// "auto": CUDA device 0 where the CUDA driver is installed and the backend library loads and
// finds a device; the CPU otherwise. Decided once per process; without a driver, the backend
// library (and cuBLASLt behind it) is not even loaded.
const Backend& auto_backend() {
  static const Backend* chosen = [] {
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (driver == nullptr) return &cpu_backend();
    dlclose(driver);
    try {
      return &cuda_backend(0);
    } catch (const BuildError& e) {
      // A driver says this machine is meant to run CUDA, yet engines will be CPU engines: say so
      // once, on stderr, rather than leave the user to find out from the timings.
      std::fprintf(stderr,
                   "[tensoracle] device='auto' builds for the CPU: this machine has an NVIDIA driver but the CUDA "
                   "backend is unavailable. Pass device='cpu' to choose the CPU and silence this notice; "
                   "`tensoracle --version` lists the backends. Why: %s\n",
                   e.what());
      return &cpu_backend();
    }
  }();
  return *chosen;
}

}  // namespace

const Backend& backend_for(const std::string& device) {
  if (device == "cpu") return cpu_backend();
  if (device == "auto" || device.empty()) return auto_backend();
  if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
    auto idx = device.size() > 5 ? device.substr(5) : std::string("0");
    if (idx.empty() || idx.size() > 4 || idx.find_first_not_of("0123456789") != std::string::npos)
      throw InvalidArgument("[build] device '" + device + "' is not 'cpu', 'cuda', 'cuda:N' or 'auto'");
    try {
      return cuda_backend(std::stoi(idx));
    } catch (const BuildError& e) {
      throw BuildError("[build] device '" + device + "': " + e.what());
    }
  }
  throw InvalidArgument("[build] device '" + device + "' is not 'cpu', 'cuda', 'cuda:N' or 'auto'");
}

}  // namespace tensoracle::runtime
