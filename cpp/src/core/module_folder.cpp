#include "core/module_folder.h"

#include <dlfcn.h>

namespace tensoracle::core {

std::filesystem::path module_folder(const void* address) {
  Dl_info info{};
  if (dladdr(address, &info) == 0 || info.dli_fname == nullptr) return {};
  std::error_code ec;
  auto path = std::filesystem::canonical(info.dli_fname, ec);
  if (ec) {  // the main program's name may be relative to a folder we left: ask the kernel
    path = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) return {};
  }
  return path.parent_path();
}

}  // namespace tensoracle::core
