// library_info() (tensoracle/info.h): the version, the engine format, the build identity and, per
// backend, whether it runs here, on what, with which libraries, or why not.
#include "tensoracle/info.h"

#include <nlohmann/json.hpp>

#include "backends/build_identity.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/onednn.h"
#include "runtime/devices.h"
#include "tensoracle/engine.h"
#include "tensoracle/errors.h"

#ifndef TENSORACLE_VERSION
#error "TENSORACLE_VERSION must be defined by the build (cpp/CMakeLists.txt)"
#endif

namespace tensoracle {

LibraryInfo library_info() {
  LibraryInfo info;
  info.version = TENSORACLE_VERSION;
  info.engine_format = kEngineFormatVersion;
  info.build = std::string(backends::build_identity()).substr(0, 16);

  BackendInfo cpu;
  cpu.name = "cpu";
  cpu.available = true;
  cpu.device = "cpu";
  const nlohmann::json t = cpu::cpu_backend().target();
  cpu.detail = t.value("device", std::string("?")) + " (" + t.value("arch", std::string("?")) + ")";
  std::string openblas = cpu::openblas_version();  // "OpenBLAS 0.3.21 ..."
  if (openblas.rfind("OpenBLAS ", 0) == 0) openblas.erase(0, 9);
  cpu.libraries.emplace_back("OpenBLAS", openblas);
  const std::string onednn = cpu::onednn::version();
  if (!onednn.empty()) cpu.libraries.emplace_back("oneDNN", onednn);
  info.backends.push_back(std::move(cpu));

  BackendInfo cuda;
  cuda.name = "cuda";
  try {
    const auto& backend = runtime::cuda_backend(0);
    const nlohmann::json ct = backend.target();
    cuda.available = true;
    cuda.device = backend.device();
    cuda.detail = ct.value("device", std::string("?")) + ", compute capability " +
                  ct.value("compute_capability", std::string("?"));
    const int cudnn = ct.value("cudnn", 0);
    cuda.libraries.emplace_back("cuDNN", cudnn ? std::to_string(cudnn) : std::string("none"));
  } catch (const Error& e) {
    cuda.reason = e.what();
  }
  info.backends.push_back(std::move(cuda));
  return info;
}

}  // namespace tensoracle
