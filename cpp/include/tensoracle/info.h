#pragma once
// tensoracle/info.h — what this build of tensoracle is and which backends this machine has.
//
//   const tensoracle::LibraryInfo info = tensoracle::library_info();
//   for (const auto& b : info.backends)
//     std::cout << b.name << ": " << (b.available ? b.device : "unavailable: " + b.reason) << "\n";
#include <string>
#include <vector>

namespace tensoracle {

struct BackendInfo {
  std::string name;       // "cpu", "cuda"
  bool available = false;
  std::string device;     // where engines of this backend run: "cpu", "cuda:0"; empty when unavailable
  std::string detail;     // CPU: "AMD EPYC ... (x86_64)"; CUDA: "NVIDIA H200, compute capability 9.0"
  std::vector<std::pair<std::string, std::string>> libraries;  // ("OpenBLAS", "0.3.21"), ("cuDNN", "91000"), ...
  std::string reason;     // why it is unavailable (the message the backend gives)
};

struct LibraryInfo {
  std::string version;       // "0.1.0"
  int engine_format = 0;     // the engine file format version it reads and writes
  std::string build;         // the backend boundary's build identity (16 hex digits)
  std::vector<BackendInfo> backends;  // the CPU backend first, then the CUDA backend
};

// Probes the backends (the first call opens the CUDA backend's library where there is one, as
// the first CUDA engine would). Never throws for a missing GPU: that is a backend's `reason`.
LibraryInfo library_info();

}  // namespace tensoracle
