// Header-only (C++17): run a plugin's kernels from cubins embedded in the plugin library.
//
//   extern const tensoracle::cubin::Embedded my_cubins[];   // tensoracle_add_cubin_plugin
//   extern const std::size_t my_cubins_count;               // writes both
//   static tensoracle::cubin::Module module(my_cubins, my_cubins_count);
//   void* args[] = {&x, &n};
//   module.launch("add_one", {blocks, 1, 1}, {256, 1, 1}, 0, stream, args);  // may throw
//
// The module picks, per device, the cubin built for its architecture, or else the newest one
// of the same major version that is not newer than the device (a cubin for sm_86 runs on
// sm_89; "a" variants only on their own architecture), and loads it with cuModuleLoadData
// on first use. The CUDA driver (libcuda.so.1) is opened with dlopen, so a plugin library
// that also has a CPU implementation loads and runs on machines without CUDA. Errors are
// std::runtime_error naming the device, the architectures present and the kernel; a plugin's
// enqueue turns them into its error code (tensoracle/plugin.hpp does).
#pragma once

#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace tensoracle::cubin {

struct Embedded {
  int sm;                     // 86, 89, 90, 120, ...
  bool arch_specific;         // an "a" cubin (sm_90a): runs only on that architecture
  const unsigned char* data;
  std::size_t size;
  const char* file;           // the cubin's file name, for messages
};

// The cubin to load on a device of compute capability major.minor, or null.
inline const Embedded* select(const Embedded* cubins, std::size_t count, int major, int minor) {
  const int device = major * 10 + minor;
  const Embedded* best = nullptr;
  for (std::size_t i = 0; i < count; ++i)  // built for this architecture: the portable one first
    if (cubins[i].sm == device && (!best || best->arch_specific)) best = &cubins[i];
  if (best) return best;
  for (std::size_t i = 0; i < count; ++i) {  // else the newest of the same major, not newer
    const Embedded& c = cubins[i];
    if (!c.arch_specific && c.sm / 10 == major && c.sm <= device && (!best || c.sm > best->sm)) best = &c;
  }
  return best;
}

class Module {
 public:
  Module(const Embedded* cubins, std::size_t count) : cubins_(cubins), count_(count) {}
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Launches kernel `name` on `stream` (a cudaStream_t / CUstream; null: the legacy stream) of
  // the calling thread's current device.
  void launch(const char* name, const unsigned (&grid)[3], const unsigned (&block)[3], unsigned shared_bytes, void* stream,
              void** args) {
    const Driver& d = driver();
    void* fn = function(d, name);
    check(d, d.launch(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared_bytes, stream, args, nullptr),
          std::string("launching kernel '") + name + "'");
  }

 private:
  // The driver functions used, from libcuda.so.1 (CUDA's driver API, cuda.h).
  struct Driver {
    int (*init)(unsigned) = nullptr;
    int (*ctx_get_device)(int*) = nullptr;
    int (*device_attribute)(int*, int, int) = nullptr;
    int (*module_load_data)(void**, const void*) = nullptr;
    int (*module_get_function)(void**, void*, const char*) = nullptr;
    int (*launch)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**, void**) = nullptr;
    int (*error_string)(int, const char**) = nullptr;
    std::string why;
  };

  static const Driver& driver() {
    static const Driver d = [] {
      Driver r;
      void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        r.why = "the CUDA driver (libcuda.so.1) is not installed";
        return r;
      }
      auto sym = [&](auto& fn, const char* n) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, n));
        return fn != nullptr;
      };
      if (!(sym(r.init, "cuInit") && sym(r.ctx_get_device, "cuCtxGetDevice") &&
            sym(r.device_attribute, "cuDeviceGetAttribute") && sym(r.module_load_data, "cuModuleLoadData") &&
            sym(r.module_get_function, "cuModuleGetFunction") && sym(r.launch, "cuLaunchKernel") &&
            sym(r.error_string, "cuGetErrorString"))) {
        r.why = "libcuda.so.1 lacks a function the cubin loader needs";
        r.init = nullptr;
        return r;
      }
      if (r.init(0) != 0) r.why = "cuInit failed: no usable CUDA device";
      return r;
    }();
    if (!d.why.empty()) throw std::runtime_error("[cubin] " + d.why);
    return d;
  }

  static void check(const Driver& d, int status, const std::string& what) {
    if (status == 0) return;
    const char* s = nullptr;
    d.error_string(status, &s);
    throw std::runtime_error("[cubin] " + what + ": CUDA driver error " + std::to_string(status) + " (" + (s ? s : "?") + ")");
  }

  void* function(const Driver& d, const char* name) {
    int device = 0;
    check(d, d.ctx_get_device(&device), "finding the current device (is a CUDA context current?)");
    std::lock_guard<std::mutex> lock(mutex_);
    auto key = std::make_pair(device, std::string(name));
    if (auto it = functions_.find(key); it != functions_.end()) return it->second;
    void*& module = modules_[device];
    if (!module) {
      int major = 0, minor = 0;
      constexpr int kMajor = 75, kMinor = 76;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR
      check(d, d.device_attribute(&major, kMajor, device), "reading the device's compute capability");
      check(d, d.device_attribute(&minor, kMinor, device), "reading the device's compute capability");
      const Embedded* c = select(cubins_, count_, major, minor);
      if (!c) {
        std::string have;
        for (std::size_t i = 0; i < count_; ++i)
          have += (i ? ", sm_" : "sm_") + std::to_string(cubins_[i].sm) + (cubins_[i].arch_specific ? "a" : "");
        throw std::runtime_error("[cubin] no embedded cubin runs on device " + std::to_string(device) + " (sm_" +
                                 std::to_string(major * 10 + minor) + "); the plugin has " +
                                 (have.empty() ? std::string("none") : have));
      }
      check(d, d.module_load_data(&module, c->data), std::string("loading ") + c->file);
    }
    void* fn = nullptr;
    check(d, d.module_get_function(&fn, module, name), std::string("finding kernel '") + name + "'");
    functions_[key] = fn;
    return fn;
  }

  const Embedded* cubins_;
  std::size_t count_;
  std::mutex mutex_;
  std::map<int, void*> modules_;  // per device ordinal; kept for the life of the process
  std::map<std::pair<int, std::string>, void*> functions_;
};

}  // namespace tensoracle::cubin
