// open_engine: identity → saved entry (no lock: entries only ever appear whole, by rename) →
// else lock, look again, build, write, record. Every file is opened relative to the checked
// cache folder, never through a link (cache/folder.h); the record vouches for the engine
// file's bytes (cache/store.h).
#include "cache/open.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>
#include <variant>

#include "cache/digest_memo.h"
#include "cache/folder.h"
#include "cache/lock.h"
#include "cache/store.h"
#include "core/atomic_file.h"
#include "core/mapped_file.h"
#include "runtime/devices.h"
#include "runtime/engine_access.h"
#include "tensoracle/errors.h"

namespace tensoracle {

namespace cache {

namespace {

// Why there is no usable saved entry: none, none that the record vouches for (no usable
// record, a link or not a regular file where the engine belongs: rebuilt in its place),
// another format version or device (rebuilt in its place), or a valid engine other than the
// one recorded (looked at again under the lock: a writer may have been between its two files).
enum class Miss { kMissing, kUnproven, kIncompatible, kOtherEngine };

Record make_record(const Environment& env, const OpenOptions& options, const EngineIdentity& id,
                   const std::string& engine_digest, const core::FileStat& stat, std::int64_t verified_ns,
                   std::int64_t created_ns) {
  Record r;
  r.name = options.name;
  r.graph_version = options.graph_version;
  r.identity = id.identity;
  r.identity_text = nlohmann::json::parse(id.text);
  r.device = device_label(env.target);
  r.created_ns = created_ns;
  r.engine_digest = engine_digest;
  r.verified = stat;
  r.verified_ns = verified_ns;
  return r;
}

// Opens the saved entry, if there is one that is usable. The engine file is accepted when the
// record (of this identity) proves it is the one checked before — same size, times, inode and
// device, and the record not racy — without reading it, or else when its bytes hash to the
// record's engine_digest (then the record is brought up to date). `locked`: the caller holds
// the entry's lock, so no writer is between the engine file and its record.
std::variant<runtime::LoadedEngine, Miss> open_saved(const Environment& env, const CacheFolder& folder,
                                                     const EntryPaths& p, const EngineIdentity& id,
                                                     const OpenOptions& options, bool locked) {
  const FileRef engine_file = folder.file(p.engine.filename().string());
  Fd fd(open_no_follow(engine_file, O_RDONLY));
  if (!fd) {
    if (errno == ENOENT) return Miss::kMissing;
    if (errno == ELOOP) return Miss::kUnproven;  // a link is never followed; the rebuild replaces it
    core::throw_io_error("cache", "cannot open the saved engine", p.engine, errno);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) core::throw_io_error("cache", "cannot stat the saved engine", p.engine, errno);
  if (!S_ISREG(st.st_mode)) return Miss::kUnproven;
  const auto record = read_record(folder.file(p.record.filename().string()));
  if (!record || record->identity != id.identity) return Miss::kUnproven;
  const core::FileStat stat = core::FileStat::of(st);
  const bool trusted = record->verified == stat && !core::racy(stat, record->verified_ns);
  bool same_bytes = trusted;
  if (!trusted) {
    same_bytes = digest_of_file(fd.get(), p.engine, "cache", "the saved engine") == record->engine_digest;
    counters().engine_digest_checks.fetch_add(1);
  }
  std::optional<runtime::LoadedEngine> loaded;
  try {
    // Bytes equal to those checked when the record was written need no second digest pass.
    loaded.emplace(runtime::EngineAccess::load_fd(fd.get(), p.engine,
                                                  [&](const core::FileStat& mapped) { return same_bytes && mapped == stat; }));
  } catch (const IncompatibleEngineError&) {
    return Miss::kIncompatible;  // another format version (or device): rebuilt in its place
  } catch (const CorruptEngineError& e) {
    throw CorruptEngineError("[cache] " + p.engine.string() + ": the saved engine '" + options.name +
                             "' is damaged; pass force_rebuild=True to replace it (" + e.what() + ")");
  }
  if (!same_bytes) {
    // A valid engine, but not the one its record vouches for: copied or moved over it.
    if (!locked) return Miss::kOtherEngine;
    throw CorruptEngineError("[cache] " + p.engine.string() + ": the saved engine '" + options.name +
                             "' is not the engine its record vouches for (its bytes differ from those saved: was "
                             "another engine put in its place?); pass force_rebuild=True to replace it");
  }
  if (!trusted) {
    const std::int64_t now = core::now_ns();
    // A record that would still be racy proves nothing new: skip the write unless needed.
    if (record->verified != stat || !core::racy(stat, now)) {
      try {
        // Under the entry's lock, and only while the name still holds this file: every writer
        // of an engine file holds the lock, so the record cannot vouch for a file replaced meanwhile.
        auto lock = locked ? std::nullopt : FileLock::try_acquire(folder.file(p.lock.filename().string()));
        auto named = folder.lstat(engine_file.name);
        if ((locked || lock) && named && core::FileStat::of(*named) == stat)
          write_record(folder.file(p.record.filename().string()),
                       make_record(env, options, id, record->engine_digest, stat, now, record->created_ns));
      } catch (const IoError&) {
        // Only a shortcut is lost: the next open checks the digest again.
      }
    }
  }
  return std::move(*loaded);
}

EngineHandle finish(runtime::LoadedEngine&& loaded, const CacheFolder& folder, const EntryPaths& p,
                    const EngineIdentity& id, const OpenOptions& options, bool built) {
  check_io(loaded.engine, options.io, options.name, p.engine);
  touch(folder.file(p.record.filename().string()));
  return EngineHandle{std::move(loaded.engine), p.engine, id.identity, built};
}

}  // namespace

void check_io(const Engine& engine, const EngineIO& io, const std::string& name, const std::filesystem::path& path) {
  std::vector<std::string> diffs;
  auto mode_word = [](TensorIOMode m) { return m == TensorIOMode::kINPUT ? std::string("input") : std::string("output"); };
  auto find = [&](const std::string& n) -> const IOTensorInfo* {
    for (const auto& t : engine.io_tensors())
      if (t.name == n) return &t;
    return nullptr;
  };
  for (TensorIOMode mode : {TensorIOMode::kINPUT, TensorIOMode::kOUTPUT}) {
    const auto& declared = mode == TensorIOMode::kINPUT ? io.inputs : io.outputs;
    const std::string kind = mode_word(mode);
    for (const auto& [n, spec] : declared) {
      const IOTensorInfo* t = find(n);
      if (t == nullptr) {
        diffs.push_back(kind + " '" + n + "': declared, but the engine has no tensor of that name");
      } else if (t->mode != mode) {
        diffs.push_back(kind + " '" + n + "': declared as an " + kind + ", but the engine has it as an " +
                        mode_word(t->mode));
      } else {
        if (t->type != spec.type)
          diffs.push_back(kind + " '" + n + "': type " + std::string(type_name(t->type)) + " in the engine, " +
                          std::string(type_name(spec.type)) + " declared");
        if (!(t->dims == spec.shape))
          diffs.push_back(kind + " '" + n + "': shape " + t->dims.str() + " in the engine, " + spec.shape.str() +
                          " declared");
      }
    }
  }
  for (const auto& t : engine.io_tensors())
    if (!io.inputs.contains(t.name) && !io.outputs.contains(t.name))
      diffs.push_back(mode_word(t.mode) + " '" + t.name + "': in the engine (" + std::string(type_name(t.type)) + " " +
                      t.dims.str() + "), but not declared in EngineIO");
  if (diffs.empty()) return;
  std::string msg = "[cache] " + path.string() + ": engine '" + name + "' does not match the declared EngineIO (" +
                    std::to_string(diffs.size()) + (diffs.size() == 1 ? " difference" : " differences") + "):";
  for (const auto& d : diffs) msg += "\n  - " + d;
  msg += "\nDeclare in io what the graph function builds, or change the graph and raise graph_version.";
  throw EngineIOError(msg);
}

EngineIdentity engine_identity_with(const Environment& env, const EngineBuild& declaration, const OpenOptions& options) {
  check_options(options);
  EngineBuild eff = effective_declaration(declaration, options);
  const backends::Backend& backend = runtime::backend_for(eff.settings.device);
  const CacheFolder folder = cache_folder(options.cache_dir);
  DigestMemo memo(folder);
  auto id = compute_identity(env, backend, eff, options, memo);
  memo.save();
  return id;
}

EngineHandle open_engine_with(const Environment& env, const GraphFunction& graph, const EngineBuild& declaration,
                              const OpenOptions& options) {
  check_options(options);
  EngineBuild eff = effective_declaration(declaration, options);
  const backends::Backend& backend = runtime::backend_for(eff.settings.device);
  const CacheFolder folder = cache_folder(options.cache_dir);
  DigestMemo memo(folder);
  const EngineIdentity id = compute_identity(env, backend, eff, options, memo);
  memo.save();
  const EntryPaths p = entry_paths(folder.path(), options.name, id.identity);
  const FileRef engine_file = folder.file(p.engine.filename().string());
  const FileRef record_file = folder.file(p.record.filename().string());

  if (!options.force_rebuild)
    if (auto r = open_saved(env, folder, p, id, options, false); std::holds_alternative<runtime::LoadedEngine>(r))
      return finish(std::get<runtime::LoadedEngine>(std::move(r)), folder, p, id, options, false);

  std::optional<runtime::LoadedEngine> built;
  {
    FileLock lock = FileLock::acquire(folder.file(p.lock.filename().string()), "cache");
    remove_temporaries(folder, p.base);  // leftovers of a process killed while writing this entry
    // Another process may have built it while this one waited for the lock.
    if (!options.force_rebuild)
      if (auto r = open_saved(env, folder, p, id, options, true); std::holds_alternative<runtime::LoadedEngine>(r))
        return finish(std::get<runtime::LoadedEngine>(std::move(r)), folder, p, id, options, false);

    std::string engine_digest;
    {
      std::vector<std::byte> bytes = build_serialized_engine(graph, eff, options.plugins);
      engine_digest = digest_of_bytes(bytes);
      core::AtomicFile out(folder.fd(), engine_file.name, p.engine, "cache");
      out.write(bytes);
      out.commit();
    }
    try {
      // Read back what was written: the record then vouches for a file checked in full.
      Fd fd(open_no_follow(engine_file, O_RDONLY));
      if (!fd) core::throw_io_error("cache", "cannot open the engine just written", p.engine, errno);
      built.emplace(runtime::EngineAccess::load_fd(fd.get(), p.engine, nullptr));
      counters().engine_digest_checks.fetch_add(1);
      // Wait out the rest of the racy margin (at most 25 ms where file times have sub-second
      // resolution) so that the record vouches for the file at once: the next open, in any
      // process, then maps it without a digest pass.
      const std::int64_t wait = core::racy_margin_ns(built->stat) -
                                (core::now_ns() - std::max(built->stat.mtime_ns, built->stat.ctime_ns));
      if (wait > 0 && wait <= 25'000'000) std::this_thread::sleep_for(std::chrono::nanoseconds(wait + 1'000'000));
      // Created: the file's own time, on the clock that last-used times (the record's mtime)
      // are taken from.
      write_record(record_file,
                   make_record(env, options, id, engine_digest, built->stat, core::now_ns(), built->stat.mtime_ns));
    } catch (...) {
      // An open that fails leaves no entry behind (a failed write must not be remembered as a
      // result).
      built.reset();
      folder.remove(record_file.name);
      folder.remove(engine_file.name);
      throw;
    }
  }
  return finish(std::move(*built), folder, p, id, options, true);
}

}  // namespace cache

EngineHandle open_engine(const GraphFunction& graph, const EngineBuild& declaration, const OpenOptions& options) {
  EngineBuild eff = cache::effective_declaration(declaration, options);
  return cache::open_engine_with(cache::current_environment(runtime::backend_for(eff.settings.device)), graph,
                                 declaration, options);
}

EngineIdentity engine_identity(const EngineBuild& declaration, const OpenOptions& options) {
  EngineBuild eff = cache::effective_declaration(declaration, options);
  return cache::engine_identity_with(cache::current_environment(runtime::backend_for(eff.settings.device)),
                                     declaration, options);
}

}  // namespace tensoracle
