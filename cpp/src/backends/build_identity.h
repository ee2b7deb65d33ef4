// Which sources the backend boundary was built from (cmake/BuildIdentity.cmake): a SHA-256 over
// the headers whose types cross from the core into libtensoracle_cuda.so (the public headers and
// those of core, io, plugin, graph and backends), the compiler and the version. The core and the
// CUDA backend each compile their own copy in; the backend refuses a core whose identity differs
// (runtime/devices.cpp passes it), since C++ classes, std::string, std::variant and
// nlohmann::json cross that boundary and are laid out by those headers.
#pragma once

namespace tensoracle::backends {

// 64 lowercase hex digits.
const char* build_identity() noexcept;

}  // namespace tensoracle::backends
