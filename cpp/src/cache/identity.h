// Internal: the identity of an engine — everything it depends on, as one canonical JSON text
// and its XXH3-128 digest. Two calls share a cache entry exactly when their texts are equal.
//
//   {"declaration": <EngineBuild::canonical(), device resolved to the backend>,
//    "engine_format": 1, "graph_version": "1",
//    "libraries": {"openblas": "OpenBLAS 0.3.21", "tensoracle": "0.1.0"},
//    "name": "linear", "os": "Linux", "arch": "x86_64",
//    "plugins": [{"digest": "xxh3-128:...", "size": N}, ...],
//    "scheme": "tensoracle.engine-identity/1",
//    "target": <Backend::target(): backend, device model, ISA, arch, oneDNN version>,
//    "weights": [{"digest": "xxh3-128:...", "size": N}, ...]}
//
// Weight and plugin entries keep the caller's order; paths are not part of the identity
// (moving a file keeps its engine), contents are.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "cache/digest_memo.h"
#include "backends/backend.h"
#include "tensoracle/cache.h"

namespace tensoracle::cache {

// What the identity takes from the machine and this build of tensoracle. Tests substitute
// each field to show that it changes the entry.
struct Environment {
  nlohmann::json target;       // the backend's target (device model, ISA, ..., library versions)
  std::string os;              // "Linux", "Windows", "Darwin"
  std::string arch;            // "x86_64", "aarch64"
  int engine_format = kEngineFormatVersion;
  nlohmann::json libraries;    // versions of the libraries engines run on, tensoracle included
};

// The environment of this process for `backend` (computed once per backend and process).
const Environment& current_environment(const backends::Backend& backend);

// "cpu: AMD EPYC" — backend and device model, for listings.
std::string device_label(const nlohmann::json& target);

// The declaration open_engine builds: options.device applied, settings validated.
EngineBuild effective_declaration(const EngineBuild& declaration, const OpenOptions& options);

// Checks name and graph_version (InvalidArgument naming the field).
void check_options(const OpenOptions& options);

// Loads the plugin libraries (load_plugin_library: their digests are of the loaded bytes), then
// hashes the weights (through `memo`), and returns the identity. Throws PluginLibraryError for a
// plugin library that is missing, unreadable, incompatible or changed since it was loaded,
// IoError/FormatError for a weight file.
EngineIdentity compute_identity(const Environment& env, const backends::Backend& backend, const EngineBuild& effective,
                                const OpenOptions& options, DigestMemo& memo);

}  // namespace tensoracle::cache
