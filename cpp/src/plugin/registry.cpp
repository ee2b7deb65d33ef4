// The plugin loader and registry (see tensoracle/plugin_library.h for the rules).
#include "plugin/registry.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include "core/digest.h"
#include "core/file_stat.h"
#include "plugin/private_copy.h"
#include "tensoracle/errors.h"
#include "tensoracle/plugin_library.h"

namespace tensoracle::plugin {

namespace fs = std::filesystem;

namespace {

constexpr std::int32_t kMaxCreators = 4096;
constexpr std::int32_t kMaxFields = 4096;

struct Library {
  PluginLibraryInfo info;
  core::FileStat stat;            // when it was hashed
  std::int64_t recorded_ns = 0;   // when that stat was taken (racy check)
};

struct Creator {
  const TensoraclePluginCreator* abi = nullptr;
  std::vector<PluginFieldSpec> fields;
  std::string library;  // the file that registered it
};

struct Registry {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<Library>> by_path;  // canonical path -> library
  std::map<std::string, Creator> creators;                  // creator_key -> creator
  // Libraries refused after dlopen ran their initializers: they stay loaded (see below).
  std::vector<void*> refused;
};

// Never destroyed: plugins may be released after static destructors have run.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

[[noreturn]] void fail(const fs::path& path, const std::string& why) {
  throw PluginLibraryError("[plugin] " + path.string() + ": " + why);
}

// XXH3-128 of the whole file behind `fd` (from its start), as the cache hashes weight files.
std::string hash_fd(int fd, const fs::path& path) {
  if (::lseek(fd, 0, SEEK_SET) != 0) fail(path, std::string("cannot read the plugin library: ") + std::strerror(errno));
  try {
    return core::hash_file(fd, path, "plugin", "the plugin library");
  } catch (const IoError& e) {
    fail(path, std::string("cannot read the plugin library: ") + std::strerror(e.errno_value()));
  }
}

std::string stat_text(const core::FileStat& s) {
  return std::to_string(s.size) + " bytes, mtime " + std::to_string(s.mtime_ns) + " ns";
}

std::string text_or_empty(const char* s) { return s ? std::string(s) : std::string(); }

// Checks what getCreators returned; returns the creators by key (throws naming the problem).
std::map<std::string, Creator> read_creators(const fs::path& path, TensoracleGetCreatorsFn get) {
  std::int32_t count = -1;
  const TensoraclePluginCreator* const* list = get(&count);
  if (count < 0 || count > kMaxCreators)
    fail(path, "getCreators returned a count of " + std::to_string(count) + " (0 to " + std::to_string(kMaxCreators) + " expected)");
  if (count > 0 && list == nullptr) fail(path, "getCreators returned no array for " + std::to_string(count) + " creators");
  std::map<std::string, Creator> out;
  for (std::int32_t i = 0; i < count; ++i) {
    const TensoraclePluginCreator* c = list[i];
    const std::string which = "creator " + std::to_string(i);
    if (c == nullptr) fail(path, which + " is null");
    if (c->abi_version != TENSORACLE_PLUGIN_ABI_VERSION)
      fail(path, which + " has plugin ABI version " + std::to_string(c->abi_version) + "; this tensoracle speaks version " +
                     std::to_string(TENSORACLE_PLUGIN_ABI_VERSION) + " (rebuild the library against this tensoracle's plugin.h)");
    if (c->name == nullptr || *c->name == '\0') fail(path, which + " has no name");
    if (c->version == nullptr) fail(path, which + " ('" + c->name + "') has no version");
    if (c->create == nullptr) fail(path, which + " ('" + c->name + "') has no create function");
    if (c->num_fields < 0 || c->num_fields > kMaxFields || (c->num_fields > 0 && c->fields == nullptr))
      fail(path, which + " ('" + c->name + "') declares " + std::to_string(c->num_fields) + " fields without a valid list");
    Creator cr;
    cr.abi = c;
    cr.library = path.string();
    std::set<std::string> names;
    for (std::int32_t f = 0; f < c->num_fields; ++f) {
      const auto& s = c->fields[f];
      if (s.name == nullptr || *s.name == '\0') fail(path, which + " ('" + c->name + "'): field " + std::to_string(f) + " has no name");
      if (s.type < 0 || s.type > TENSORACLE_FIELD_BYTES)
        fail(path, which + " ('" + c->name + "'): field '" + s.name + "' has unknown type " + std::to_string(s.type));
      if (s.count < -1) fail(path, which + " ('" + c->name + "'): field '" + s.name + "' has count " + std::to_string(s.count));
      if (!names.insert(s.name).second) fail(path, which + " ('" + c->name + "') declares field '" + s.name + "' twice");
      cr.fields.push_back({s.name, static_cast<PluginFieldType>(s.type), s.count});
    }
    const std::string key = creator_key(text_or_empty(c->plugin_namespace), c->name, c->version);
    if (out.count(key)) fail(path, "it has two creators " + key);
    out.emplace(key, std::move(cr));
  }
  return out;
}

int open_library_file(const fs::path& path, struct stat& st) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail(path, std::string("cannot open the plugin library: ") + std::strerror(errno));
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail(path, std::string("cannot stat the plugin library: ") + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, "the plugin library is not a regular file");
  }
  return fd;
}

}  // namespace

std::string creator_key(const std::string& ns, const std::string& name, const std::string& version) {
  return (ns.empty() ? "" : ns + "::") + name + "/" + version;
}

bool has_creator(const std::string& ns, const std::string& name, const std::string& version) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  return r.creators.count(creator_key(ns, name, version)) > 0;
}

std::shared_ptr<const PluginInstance> create(const std::string& layer, const PluginParams& p) {
  const std::string key = creator_key(p.plugin_namespace, p.name, p.version);
  Creator creator;
  {
    auto& r = registry();
    std::lock_guard lock(r.mu);
    auto it = r.creators.find(key);
    if (it == r.creators.end()) {
      std::string known;
      for (const auto& [k, c] : r.creators) {
        if (known.size() > 300) {
          known += ", ...";
          break;
        }
        known += (known.empty() ? "" : ", ") + k;
      }
      throw InvalidArgument("plugin creator '" + key + "' is not registered in this process; pass the plugin library "
                            "that provides it in plugins= (build_serialized_engine, open_engine) or load it with "
                            "load_plugin_libraries first (registered: " + (known.empty() ? "none" : known) + ")");
    }
    creator = it->second;
  }
  const std::string label = "plugin '" + key + "' (" + fs::path(creator.library).filename().string() + ")";
  (void)layer;
  // The schema: known names, once each, with the declared type and count.
  std::set<std::string> seen;
  for (const auto& f : p.fields) {
    auto spec = std::find_if(creator.fields.begin(), creator.fields.end(), [&](const PluginFieldSpec& s) { return s.name == f.name; });
    if (spec == creator.fields.end()) {
      std::string names;
      for (const auto& s : creator.fields) names += (names.empty() ? "" : ", ") + s.name;
      throw InvalidArgument(label + ": unknown field '" + f.name + "' (its fields: " + (names.empty() ? "none" : names) + ")");
    }
    if (!seen.insert(f.name).second) throw InvalidArgument(label + ": field '" + f.name + "' is given twice");
    if (spec->type != f.type)
      throw InvalidArgument(label + ": field '" + f.name + "' is " + std::string(plugin_field_type_name(f.type)) +
                            "; the creator takes " + std::string(plugin_field_type_name(spec->type)));
    if (plugin_field_element_size(f.type) == 0 || f.data.size() % plugin_field_element_size(f.type) != 0)
      throw InvalidArgument(label + ": field '" + f.name + "' holds " + std::to_string(f.data.size()) +
                            " bytes, not a whole number of elements");
    if (spec->count >= 0 && f.count() != spec->count)
      throw InvalidArgument(label + ": field '" + f.name + "' has " + std::to_string(f.count()) + " elements; the creator takes " +
                            std::to_string(spec->count));
  }
  // The ABI's view of the fields; strings get a NUL after their bytes.
  std::vector<std::vector<std::byte>> storage;
  std::vector<TensoraclePluginField> abi;
  storage.reserve(p.fields.size());
  for (const auto& f : p.fields) {
    storage.push_back(f.data);
    if (f.type == PluginFieldType::kSTRING) storage.back().push_back(std::byte{0});
    abi.push_back({f.name.c_str(), static_cast<std::int32_t>(f.type), f.count(),
                   storage.back().empty() ? nullptr : storage.back().data()});
  }
  std::array<char, 1024> error{};
  TensoraclePlugin* made = nullptr;
  auto rc = creator.abi->create(creator.abi, abi.data(), static_cast<std::int32_t>(abi.size()), &made, error.data(), error.size());
  error.back() = '\0';
  if (rc != TENSORACLE_PLUGIN_OK) {
    if (made && made->destroy) made->destroy(made);
    std::string m = label + ": the creator refuses the fields";
    if (error[0]) m += ": " + std::string(error.data());
    if (rc != TENSORACLE_PLUGIN_INVALID_ARGUMENT) m += " (error code " + std::to_string(rc) + ")";
    throw InvalidArgument(m);
  }
  return std::make_shared<const PluginInstance>(made, label);
}

}  // namespace tensoracle::plugin

namespace tensoracle {

using plugin::fail;
namespace fs = std::filesystem;

PluginLibraryInfo load_plugin_library(const fs::path& path) {
  std::error_code ec;
  if (path.empty()) throw PluginLibraryError("[plugin] an empty path was given as a plugin library");
  fs::path real = fs::canonical(path, ec);
  if (ec) fail(path, "cannot open the plugin library: " + ec.message());
  struct stat st {};
  int fd = plugin::open_library_file(real, st);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  const core::FileStat before = core::FileStat::of(st);

  auto& r = plugin::registry();
  std::lock_guard lock(r.mu);
  if (auto it = r.by_path.find(real.string()); it != r.by_path.end()) {
    plugin::Library& lib = *it->second;
    if (lib.stat == before && !core::racy(before, lib.recorded_ns)) return lib.info;
    const std::string digest = plugin::hash_fd(fd, path);
    if (digest != lib.info.digest || before.size != lib.info.size)
      fail(path, "the plugin library changed on disk after it was loaded in this process (loaded: " + plugin::stat_text(lib.stat) +
                     ", " + lib.info.digest + "; now: " + plugin::stat_text(before) + ", " + digest +
                     "); the process still runs the old code: restart it to use the new library");
    lib.stat = before;
    lib.recorded_ns = core::now_ns();
    return lib.info;
  }

  const std::int64_t hashed_ns = core::now_ns();
  // The code that runs comes from a sealed copy (see plugin/private_copy.h), and the digest is
  // that copy's: rewriting the file later changes neither.
  plugin::PrivateCopy copy = plugin::PrivateCopy::of(fd, static_cast<std::uint64_t>(before.size), path);
  if (copy.valid() && copy.mentions_origin()) copy = {};  // $ORIGIN must name the file's own folder
  const std::string digest = plugin::hash_fd(copy.valid() ? copy.fd() : fd, path);
  if (auto now = core::stat_path(real); !now || *now != before)
    fail(path, "the plugin library changed while it was read; load it once it is written completely");
  // The same bytes under another name: the same library (nothing is opened or registered again).
  for (const auto& [p, lib] : r.by_path)
    if (lib->info.digest == digest && lib->info.size == before.size) {
      auto alias = std::make_shared<plugin::Library>(*lib);
      alias->stat = before;
      alias->recorded_ns = hashed_ns;
      r.by_path.emplace(real.string(), alias);
      return alias->info;
    }

  dlerror();
  const std::string load_name = copy.valid() ? copy.dlopen_name() : real.string();
  void* handle = ::dlopen(load_name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    std::string text = why ? why : "dlopen failed";
    // dlerror names what was opened: name the file instead of the copy.
    for (std::size_t at; copy.valid() && (at = text.find(load_name)) != std::string::npos;)
      text.replace(at, load_name.size(), real.string());
    fail(path, "cannot load the plugin library: " + text);
  }
  // Once dlopen has run a library's initializers it is never unloaded, refused or not: they may
  // have registered with other libraries (a CUDA runtime linked into the plugin registers its
  // kernels), started threads or queued exit handlers, and unloading leaves those pointing at
  // unmapped code. A refused library stays mapped, unused, with its copy's descriptor (glibc
  // finds a loaded library by the copy's name, so that number must not be reused).
  struct Retire {
    plugin::Registry& r;
    void* handle;
    plugin::PrivateCopy& copy;
    bool armed = true;
    ~Retire() {
      if (!armed) return;
      r.refused.push_back(handle);
      copy.keep();
    }
  } retire{r, handle, copy};
  if (auto now = core::stat_path(real); !now || *now != before)
    fail(path, "the plugin library changed while it was loaded; load it once it is written completely");
  auto get = reinterpret_cast<TensoracleGetCreatorsFn>(::dlsym(handle, "getCreators"));
  if (get == nullptr)
    fail(path, "it does not export getCreators; it is not a tensoracle plugin library (define getCreators as "
               "tensoracle/plugin.h says, or use TENSORACLE_EXPORT_PLUGINS from tensoracle/plugin.hpp)");
  auto creators = plugin::read_creators(path, get);
  for (const auto& [key, c] : creators)
    if (auto it = r.creators.find(key); it != r.creators.end())
      fail(path, "its plugin creator " + key + " is registered already by another library, " + it->second.library +
                     "; load only one of them");
  auto lib = std::make_shared<plugin::Library>();
  lib->info.path = real;
  lib->info.digest = digest;
  lib->info.size = before.size;
  lib->stat = before;
  lib->recorded_ns = hashed_ns;
  for (auto& [key, c] : creators) {
    c.library = real.string();
    lib->info.creators.push_back(key);
    r.creators.emplace(key, std::move(c));
  }
  r.by_path.emplace(real.string(), lib);
  retire.armed = false;  // kept for the life of the process
  copy.keep();           // and so is its copy's descriptor (its name must not be reused)
  return lib->info;
}

std::vector<PluginLibraryInfo> load_plugin_libraries(const std::vector<fs::path>& paths) {
  std::vector<PluginLibraryInfo> out;
  for (const auto& p : paths) out.push_back(load_plugin_library(p));
  return out;
}

std::vector<PluginCreatorInfo> registered_plugin_creators() {
  auto& r = plugin::registry();
  std::lock_guard lock(r.mu);
  std::vector<PluginCreatorInfo> out;
  for (const auto& [key, c] : r.creators)
    out.push_back({c.abi->name, c.abi->version, plugin::text_or_empty(c.abi->plugin_namespace), c.fields, c.library});
  std::sort(out.begin(), out.end(), [](const PluginCreatorInfo& a, const PluginCreatorInfo& b) {
    return std::tie(a.plugin_namespace, a.name, a.version) < std::tie(b.plugin_namespace, b.name, b.version);
  });
  return out;
}

}  // namespace tensoracle
