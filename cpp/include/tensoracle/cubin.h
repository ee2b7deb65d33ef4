// Cubins for plugins: compiled CUDA kernels, one file per GPU architecture, produced with NVRTC
// (no nvcc, no GPU needed) and described by a manifest.
//
//   auto m = tensoracle::cubin::produce("kernels.cu", "cubins/", {.archs = {"sm_86", "sm_90"}});
//   // cubins/kernels.sm_86.cubin, cubins/kernels.sm_90.cubin, cubins/manifest.json
//   auto info = tensoracle::cubin::inspect_file("cubins/kernels.sm_90.cubin");  // arch, kernels
//
// NVRTC (libnvrtc.so.13) is loaded when first needed: $TENSORACLE_NVRTC, the nvidia-cuda-nvrtc
// wheel beside this library's Python package or virtual environment, $CUDA_HOME/lib64,
// /usr/local/cuda/lib64, then the dynamic linker's search. `pip install tensoracle[producer]`
// installs the wheel.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace tensoracle::cubin {

// What a cubin says about itself, plus what the manifest records.
struct CubinInfo {
  std::string file;                  // file name (in the manifest's folder)
  std::string arch;                  // "sm_90"
  std::vector<std::string> kernels;  // entry points (mangled names for C++ kernels)
  std::uint64_t size = 0;
  std::string sha256;                // 64 hex digits
};

struct Manifest {
  std::string source;                // the .cu file's name
  std::string source_sha256;
  std::string compiler;              // "NVRTC 13.5"
  std::vector<std::string> flags;    // NVRTC options besides the architecture
  std::vector<CubinInfo> cubins;     // one per architecture, in the order asked for
};

struct ProduceOptions {
  std::vector<std::string> archs;    // "sm_86", "86", "sm_90a", ...; at least one
  std::vector<std::string> include_dirs;
  std::vector<std::string> defines;  // "NAME" or "NAME=VALUE"
  std::vector<std::string> extra;    // further NVRTC options, e.g. "--use_fast_math"
  std::string std = "c++17";
};

// Compiles `source` once per architecture and writes <stem>.<arch>.cubin files and
// manifest.json into `out_dir` (created if missing). Nothing is written unless every
// architecture compiles: BuildError carries NVRTC's log. InvalidArgument for a malformed
// architecture or option, UnsupportedError when NVRTC cannot be loaded, IoError for files.
Manifest produce(const std::filesystem::path& source, const std::filesystem::path& out_dir, const ProduceOptions& options);

// Reads a cubin (a CUDA ELF file): its architecture and kernels. FormatError names what is
// malformed; the bytes are untrusted.
CubinInfo inspect(std::span<const std::byte> bytes);
CubinInfo inspect_file(const std::filesystem::path& path);

// Reads `dir`/manifest.json (or a manifest file) and checks every cubin it lists against it:
// present, same size and SHA-256, the architecture it claims. Returns the manifest and, in
// `problems`, one line per mismatch (empty when all hold). FormatError for a malformed manifest.
Manifest verify(const std::filesystem::path& dir_or_manifest, std::vector<std::string>& problems);

// "NVRTC <major>.<minor>", or throws UnsupportedError when NVRTC cannot be loaded.
std::string nvrtc_version();

}  // namespace tensoracle::cubin
