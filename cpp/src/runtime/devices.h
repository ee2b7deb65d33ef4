// Internal: which backend runs a device string. The CPU backend is linked in (backends/cpu);
// the CUDA backend is libtensoracle_cuda.so, opened with dlopen on first use (devices.cpp).
#pragma once

#include <string>

#include "backends/backend.h"

namespace tensoracle::runtime {

// The backend for a device string ("cpu", "cuda", "cuda:N", or "auto": CUDA device 0 where a
// driver, the backend library and a device are there, else the CPU); throws
// BuildError when the device is unavailable (no CUDA backend library, driver or device) and
// InvalidArgument when the string is malformed.
const backends::Backend& backend_for(const std::string& device);

// The CUDA backend for device `index` (-1: the calling thread's current CUDA device), loaded
// from libtensoracle_cuda.so on first use. Throws BuildError saying why it is unavailable.
const backends::Backend& cuda_backend(int index);

}  // namespace tensoracle::runtime
