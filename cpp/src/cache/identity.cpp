#include "cache/identity.h"

#include <sys/utsname.h>
#include <xxhash.h>

#include <map>
#include <mutex>
#include <sstream>

#include "backends/cpu/cpu_backend.h"
#include "core/text.h"
#include "tensoracle/errors.h"
#include "tensoracle/plugin_library.h"

#ifndef TENSORACLE_VERSION
#error "TENSORACLE_VERSION must be defined by the build (cpp/CMakeLists.txt)"
#endif

namespace tensoracle::cache {

namespace {

using json = nlohmann::json;

std::string os_name() {
#if defined(_WIN32)
  return "Windows";
#else
  struct utsname u {};
  return uname(&u) == 0 ? std::string(u.sysname) : std::string("unknown");
#endif
}

std::string machine_name() {
#if defined(_WIN32)
  return "x86_64";
#else
  struct utsname u {};
  return uname(&u) == 0 ? std::string(u.machine) : std::string("unknown");
#endif
}

std::string hex_digest(const std::string& text) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits(text.data(), text.size()));
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (unsigned char b : c.digest) {
    s += kHex[b >> 4];
    s += kHex[b & 0xF];
  }
  return s;
}

void check_text(const std::string& value, const char* field) {
  if (value.empty())
    throw InvalidArgument(std::string("[cache] open_engine: ") + field + " is empty; " +
                          (std::string(field) == "name"
                               ? "name the engine (it names the saved file and the cache entry)"
                               : "pass a version string and raise it whenever the graph code changes"));
  if (!core::valid_utf8(value))
    throw InvalidArgument(std::string("[cache] open_engine: ") + field + " " + core::quote_name(value) +
                          " is not valid UTF-8");
}

}  // namespace

const Environment& current_environment(const backends::Backend& backend) {
  static std::mutex mu;
  static std::map<std::string, Environment> known;
  std::lock_guard lock(mu);
  auto it = known.find(backend.name());
  if (it == known.end()) {
    Environment env;
    env.target = backend.target();
    env.os = os_name();
    env.arch = machine_name();
    env.engine_format = kEngineFormatVersion;
    env.libraries = {{"tensoracle", TENSORACLE_VERSION}, {"openblas", cpu::openblas_version()}};
    it = known.emplace(backend.name(), std::move(env)).first;
  }
  return it->second;
}

std::string device_label(const json& target) {
  if (!target.is_object()) return "unknown";
  std::string backend = target.value("backend", std::string("?"));
  auto device = target.find("device");
  return device != target.end() && device->is_string() ? backend + ": " + device->get<std::string>() : backend;
}

void check_options(const OpenOptions& options) {
  check_text(options.name, "name");
  check_text(options.graph_version, "graph_version");
}

EngineBuild effective_declaration(const EngineBuild& declaration, const OpenOptions& options) {
  EngineBuild e = declaration;
  if (options.device) e.settings.device = *options.device;
  e.settings.validate();
  return e;
}

EngineIdentity compute_identity(const Environment& env, const backends::Backend& backend, const EngineBuild& effective,
                                const OpenOptions& options, DigestMemo& memo) {
  // Plugin libraries are loaded first — before any saved engine is opened, whose plugin layers
  // need their creators — and their digests are those of the bytes that were loaded.
  json plugins = json::array();
  for (const auto& p : options.plugins) {
    PluginLibraryInfo lib;
    try {
      lib = load_plugin_library(p);
    } catch (const PluginLibraryError& e) {
      throw PluginLibraryError(std::string(e.what()) + "; open_engine needs every plugin library it is given");
    }
    plugins.push_back({{"digest", lib.digest}, {"size", lib.size}});
  }
  json weights = json::array();
  for (const auto& w : options.weights) {
    auto d = memo.digest(w, "weight file");
    weights.push_back({{"digest", d.digest}, {"size", d.size}});
  }
  json decl = json::parse(effective.canonical());
  // "auto" and "cpu" build the same engine where no GPU is usable: name the backend instead.
  decl["settings"]["device"] = backend.name();
  json j = {{"scheme", "tensoracle.engine-identity/1"},
            {"name", options.name},
            {"graph_version", options.graph_version},
            {"declaration", std::move(decl)},
            {"weights", std::move(weights)},
            {"plugins", std::move(plugins)},
            {"target", env.target},
            {"os", env.os},
            {"arch", env.arch},
            {"engine_format", env.engine_format},
            {"libraries", env.libraries}};
  EngineIdentity id;
  id.text = j.dump();
  id.identity = hex_digest(id.text);
  return id;
}

}  // namespace tensoracle::cache
