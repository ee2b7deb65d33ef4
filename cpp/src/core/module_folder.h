// Internal: the folder of the loaded module (shared library or program) that holds `address`,
// where tensoracle looks for the files it loads at run time (the CUDA backend, NVRTC).
#pragma once

#include <filesystem>

namespace tensoracle::core {

// Empty when the module cannot be found.
std::filesystem::path module_folder(const void* address);

}  // namespace tensoracle::core
