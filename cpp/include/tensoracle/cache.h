// tensoracle/cache.h — open_engine: build an engine once per machine, reopen it in milliseconds.
//
//   tensoracle::OpenOptions options;
//   options.name = "linear";
//   options.graph_version = "1";                     // raise it when the graph code changes
//   options.weights = {"linear.safetensors"};        // their contents are part of the identity
//   options.io.inputs["features"] = {tensoracle::DataType::kFLOAT, {16, 32}};
//   options.io.outputs["result"] = {tensoracle::DataType::kFLOAT, {16, 16}};
//   tensoracle::EngineHandle h = tensoracle::open_engine(graph, declaration, options);
//   // h.built: this call built it (the graph function ran); else it was reopened from h.path
//   tensoracle::Execution exec = h.create_execution();
//
// The first call for an identity builds the engine (calling `graph` once), saves it in the
// cache folder and returns it; every later call — from any thread or process — reopens the
// saved file without calling `graph`. The identity is a digest of everything the engine
// depends on: the contents of every weight file and plugin library, name, graph_version, the
// canonical EngineBuild, the device (CPU: model, ISA features), OS, CPU architecture, engine
// format version and library versions. Anything else that changes the engine (the graph code
// itself, a build recipe) must be folded into graph_version by the caller.
//
// The cache folder is `cache_dir` when given, else $XDG_CACHE_HOME/tensoracle, else
// <home>/.cache/tensoracle (home: $HOME; %USERPROFILE% on Windows). Writes are atomic; a
// per-identity lock file makes concurrent openers of a missing engine build it once; a
// process killed at any moment leaves nothing that opens as valid. Weight digests are
// remembered per (real path, size, mtime, ctime, inode, device), so a warm open reads no
// weights. The folder is managed with the functions in `tensoracle::cache` below and with
// `tensoracle cache list|verify|prune|clear`.
//
// The folder must be the caller's: owned by the effective user (or root) and writable by no
// one else (no group or other write bit); tensoracle creates it 0700. Every file in it is
// opened relative to the folder and never through a symbolic link. Each entry's record holds
// the digest of its engine file's bytes: an open accepts the engine file only when the record
// is of the computed identity and vouches for the file (unchanged since checked, or the same
// bytes); without a usable record the entry is rebuilt. The management functions consider only
// the cache's own files (docs/engines.md, "The cache rules"), so a folder that is not a cache
// loses nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tensoracle/builder.h"
#include "tensoracle/engine.h"
#include "tensoracle/types.h"

namespace tensoracle {

// The type and build-time shape of one engine input or output: the shape as the network
// declares it (-1 for a dimension set at execution time), as Engine::io_tensor(name).dims.
struct TensorSpec {
  DataType type = DataType::kFLOAT;
  Dims shape;
};

// The inputs and outputs the caller expects of an engine, by name.
struct EngineIO {
  std::map<std::string, TensorSpec> inputs;
  std::map<std::string, TensorSpec> outputs;
};

struct OpenOptions {
  std::string name;                              // required, non-empty UTF-8
  std::string graph_version;                     // required, non-empty UTF-8
  std::vector<std::filesystem::path> weights;    // files whose contents the engine depends on
  EngineIO io;                                   // checked against the engine on every open
  std::vector<std::filesystem::path> plugins;    // plugin libraries, loaded first (plugin_library.h)
  bool force_rebuild = false;                    // build and replace even an intact entry
  std::optional<std::string> device;             // overrides declaration.settings.device
  std::filesystem::path cache_dir;               // empty: the default folder (above)
};

// What open_engine returns. The Engine maps the saved file; it stays valid when the entry is
// replaced or removed later (the file is replaced by rename, never rewritten in place).
struct EngineHandle {
  Engine engine;
  std::filesystem::path path;   // the saved engine file
  std::string identity;         // 32 hex digits: XXH3-128 of the identity text
  bool built = false;           // true when this call built the engine

  Execution create_execution() const { return engine.create_execution(); }
};

// Opens the engine for (graph, declaration, options), building and saving it when the cache
// has no entry for its identity. `graph` is called only when building.
// Throws: InvalidArgument (empty name or graph_version, bad declaration); IoError (a weight
// file cannot be read, the cache folder cannot be written: nothing partial is left behind;
// EPERM: the cache folder is another user's or others can write it; ELOOP: the entry's lock
// file is a symbolic link);
// PluginLibraryError (a plugin library is missing, unreadable, incompatible or changed since it
// was loaded — raised before any cached engine is opened — or a saved engine needs a plugin
// creator no library registered); CorruptEngineError (the saved entry fails its digest, or is
// an intact engine other than the one its record vouches for: the message names the file and
// says to pass force_rebuild=true); EngineIOError (the engine's inputs/outputs differ from
// options.io: each difference listed; a freshly built engine stays saved); what the graph
// function or the builder throws. An entry of another engine format version is rebuilt.
EngineHandle open_engine(const GraphFunction& graph, const EngineBuild& declaration, const OpenOptions& options);

// The identity open_engine would use, without building or opening anything (it does read
// and remember weight digests). `text` is the canonical JSON the digest is taken over.
struct EngineIdentity {
  std::string identity;
  std::string text;
};
EngineIdentity engine_identity(const EngineBuild& declaration, const OpenOptions& options);

// $XDG_CACHE_HOME/tensoracle, else <home>/.cache/tensoracle. Throws InvalidArgument when
// neither variable is set (nor the password database names a home).
std::filesystem::path default_cache_dir();

namespace cache {

// One saved engine. Times are wall-clock; `last_used` moves on every open.
struct Entry {
  std::string name;
  std::string graph_version;
  std::string identity;
  std::string device;                 // "cpu: <model>" for the CPU backend
  std::filesystem::path path;         // the engine file
  std::uint64_t size = 0;             // bytes on disk (engine + record)
  std::chrono::system_clock::time_point created;
  std::chrono::system_clock::time_point last_used;
  bool has_record = false;            // false: the record file is missing (name etc. unknown)
};

enum class Health { kOk, kCorrupt, kIncompatible };

struct Check {
  Entry entry;
  Health health = Health::kOk;
  std::string problem;                // empty when kOk
};

// `dir` empty means default_cache_dir(). A missing folder is an empty cache; a folder that is
// another user's or that others can write is refused (IoError, EPERM), as by open_engine. Only
// the cache's own files are listed or removed.
std::vector<Entry> list(const std::filesystem::path& dir = {});
// Reads every entry in full and checks its digest, format and target, and that it is the
// engine its record vouches for (kCorrupt otherwise).
std::vector<Check> verify(const std::filesystem::path& dir = {});
// Removes entries not used for `older_than` (when given), then the least recently used until
// the total is at most `max_size` bytes (when given). Returns the removed entries.
std::vector<Entry> prune(std::optional<std::chrono::seconds> older_than, std::optional<std::uint64_t> max_size,
                         const std::filesystem::path& dir = {});
// Removes the entries of `name` (every entry and the digest memo when nullopt).
std::vector<Entry> clear(const std::optional<std::string>& name, const std::filesystem::path& dir = {});

// Process-wide counts of what open_engine and these functions have read so far (for
// benchmarks and tests: a warm open adds nothing to the first two).
struct ReadCounts {
  std::uint64_t files_hashed = 0;          // weight files and plugin libraries hashed in full
  std::uint64_t bytes_hashed = 0;
  std::uint64_t engine_digest_checks = 0;  // engine files read in full to check their digest
};
ReadCounts read_counts();

// "500M", "2G", "1.5GiB", "10GB", "4096": K/M/G/T and KiB/MiB/GiB/TiB are powers of 1024,
// KB/MB/GB/TB powers of 1000. Throws InvalidArgument naming the text.
std::uint64_t parse_size(const std::string& text);

}  // namespace cache

}  // namespace tensoracle
