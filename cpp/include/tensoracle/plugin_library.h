// tensoracle/plugin_library.h — load plugin libraries into this process and list their creators.
//
//   tensoracle::load_plugin_libraries({"build/libtensoracle_example_plugins.so"});
//   for (const auto& c : tensoracle::registered_plugin_creators())
//     std::cout << c.name << " " << c.version << " from " << c.library << "\n";
//   // then: network.add_plugin("RMSNorm", "1", {x, weight}, {PluginField::float32("epsilon", {1e-6f})},
//   //                          "tensoracle.examples");
//
// build_serialized_engine and open_engine call load_plugin_libraries with their `plugins`
// first, so most programs never call it themselves. A plugin library is a shared library
// exporting getCreators (the ABI: tensoracle/plugin.h; a C++ author's header: plugin.hpp).
//
// Loading: the file must exist and be a readable regular file; its bytes are hashed
// (XXH3-128: the digest that open_engine puts in the engine's identity), then it is opened with
// dlopen(RTLD_NOW | RTLD_LOCAL) — from a sealed in-memory copy of those bytes (memfd), so that
// rewriting the file in place later (`cp new.so lib.so`) cannot change the code this process
// runs (a library whose bytes mention $ORIGIN is opened from its file, so that $ORIGIN names
// its folder; so is any library where memfds are unavailable); getCreators is looked up and every creator's ABI version
// checked, and its creators are registered under (namespace, name, version). Libraries stay
// loaded until the process exits. Loading a library again — the same file, or another file with
// the same bytes — registers nothing new. A library whose file changed on disk since it was
// loaded (another size, time or digest) is refused: the process runs the old code, which the
// new bytes no longer describe; restart the process to use the new library.
//
// Errors are PluginLibraryError naming the file and the problem: missing or unreadable, not a
// shared library, no getCreators, an ABI version other than TENSORACLE_PLUGIN_ABI_VERSION,
// a creator without a name, changed since it was loaded, or a creator (namespace, name,
// version) that another library registered already (both files are named).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tensoracle/network.h"

namespace tensoracle {

struct PluginLibraryInfo {
  std::filesystem::path path;  // canonical path of the file that was loaded
  std::string digest;          // "xxh3-128:<32 hex digits>" of its bytes
  std::uint64_t size = 0;      // bytes
  std::vector<std::string> creators;  // "namespace::name/version" (or "name/version")
};

struct PluginFieldSpec {
  std::string name;
  PluginFieldType type = PluginFieldType::kINT32;
  std::int64_t count = -1;  // -1: any number of elements
};

struct PluginCreatorInfo {
  std::string name;
  std::string version;
  std::string plugin_namespace;
  std::vector<PluginFieldSpec> fields;
  std::filesystem::path library;
};

// Loads `path` (see above); returns what was loaded. Thread-safe.
PluginLibraryInfo load_plugin_library(const std::filesystem::path& path);
// Loads each library in order; stops at the first error.
std::vector<PluginLibraryInfo> load_plugin_libraries(const std::vector<std::filesystem::path>& paths);

// Every creator registered in this process, sorted by (namespace, name, version).
std::vector<PluginCreatorInfo> registered_plugin_creators();

}  // namespace tensoracle
