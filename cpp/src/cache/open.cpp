// open_engine: identity → saved entry (no lock: entries only ever appear whole, by rename) →
// else lock, look again, build, write, record.
#include "cache/open.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>
#include <variant>

#include "cache/digest_memo.h"
#include "cache/lock.h"
#include "cache/store.h"
#include "core/atomic_file.h"
#include "runtime/engine_access.h"
#include "tensoracle/errors.h"

namespace tensoracle {

namespace cache {

namespace {

enum class Miss { kMissing, kIncompatible };

Record make_record(const Environment& env, const OpenOptions& options, const EngineIdentity& id,
                   const core::FileStat& stat, std::int64_t verified_ns, std::int64_t created_ns) {
  Record r;
  r.name = options.name;
  r.graph_version = options.graph_version;
  r.identity = id.identity;
  r.identity_text = nlohmann::json::parse(id.text);
  r.device = device_label(env.target);
  r.created_ns = created_ns;
  r.verified = stat;
  r.verified_ns = verified_ns;
  return r;
}

// Opens the saved entry, if there is one that is usable. The digest pass is skipped when the
// record proves the file is the one checked before (same size, times, inode and device, and
// the record not racy); else the file is read in full, and an intact file is recorded.
std::variant<runtime::LoadedEngine, Miss> open_saved(const Environment& env, const EntryPaths& p,
                                                     const EngineIdentity& id, const OpenOptions& options) {
  auto record = read_record(p.record);
  const bool usable_record = record && record->identity == id.identity;
  auto trusted = [&](const core::FileStat& st) {
    return usable_record && record->verified == st && !core::racy(st, record->verified_ns);
  };
  std::optional<runtime::LoadedEngine> loaded;
  try {
    loaded.emplace(runtime::EngineAccess::load_file(p.engine, trusted, /*map=*/true));
  } catch (const IoError& e) {
    if (e.errno_value() == ENOENT) return Miss::kMissing;
    throw;
  } catch (const IncompatibleEngineError&) {
    return Miss::kIncompatible;  // another format version (or device): rebuilt in its place
  } catch (const CorruptEngineError& e) {
    throw CorruptEngineError("[cache] " + p.engine.string() + ": the saved engine '" + options.name +
                             "' is damaged; pass force_rebuild=True to replace it (" + e.what() + ")");
  }
  if (loaded->digest_checked) {
    counters().engine_digest_checks.fetch_add(1);
    const std::int64_t now = core::now_ns();
    // A record that would still be racy proves nothing new: skip the write unless needed.
    if (!usable_record || record->verified != loaded->stat || !core::racy(loaded->stat, now)) {
      try {
        write_record(p.record, make_record(env, options, id, loaded->stat, now,
                                           usable_record ? record->created_ns : loaded->stat.mtime_ns));
      } catch (const IoError&) {
        // Only a shortcut is lost: the next open checks the digest again.
      }
    }
  }
  return std::move(*loaded);
}

EngineHandle finish(runtime::LoadedEngine&& loaded, const EntryPaths& p, const EngineIdentity& id,
                    const OpenOptions& options, bool built) {
  check_io(loaded.engine, options.io, options.name, p.engine);
  touch(p.record);
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
  const runtime::Backend& backend = runtime::backend_for(eff.settings.device);
  DigestMemo memo(cache_folder(options.cache_dir));
  auto id = compute_identity(env, backend, eff, options, memo);
  memo.save();
  return id;
}

EngineHandle open_engine_with(const Environment& env, const GraphFunction& graph, const EngineBuild& declaration,
                              const OpenOptions& options) {
  check_options(options);
  EngineBuild eff = effective_declaration(declaration, options);
  const runtime::Backend& backend = runtime::backend_for(eff.settings.device);
  const std::filesystem::path dir = cache_folder(options.cache_dir);
  DigestMemo memo(dir);
  const EngineIdentity id = compute_identity(env, backend, eff, options, memo);
  memo.save();
  const EntryPaths p = entry_paths(dir, options.name, id.identity);

  if (!options.force_rebuild)
    if (auto r = open_saved(env, p, id, options); std::holds_alternative<runtime::LoadedEngine>(r))
      return finish(std::get<runtime::LoadedEngine>(std::move(r)), p, id, options, false);

  std::optional<runtime::LoadedEngine> built;
  {
    FileLock lock = FileLock::acquire(p.lock, "cache");
    remove_temporaries(dir, p.base);  // leftovers of a process killed while writing this entry
    // Another process may have built it while this one waited for the lock.
    if (!options.force_rebuild)
      if (auto r = open_saved(env, p, id, options); std::holds_alternative<runtime::LoadedEngine>(r))
        return finish(std::get<runtime::LoadedEngine>(std::move(r)), p, id, options, false);

    {
      std::vector<std::byte> bytes = build_serialized_engine(graph, eff, options.plugins);
      core::AtomicFile out(p.engine, "cache");
      out.write(bytes);
      out.commit();
    }
    try {
      // Read back what was written: the record then vouches for a file checked in full.
      built.emplace(runtime::EngineAccess::load_file(p.engine, nullptr, /*map=*/true));
      counters().engine_digest_checks.fetch_add(1);
      // Wait out the rest of the racy margin (at most 25 ms where file times have sub-second
      // resolution) so that the record vouches for the file at once: the next open, in any
      // process, then maps it without a digest pass.
      const std::int64_t wait = core::racy_margin_ns(built->stat) -
                                (core::now_ns() - std::max(built->stat.mtime_ns, built->stat.ctime_ns));
      if (wait > 0 && wait <= 25'000'000) std::this_thread::sleep_for(std::chrono::nanoseconds(wait + 1'000'000));
      // Created: the file's own time, on the clock that last-used times (the record's mtime)
      // are taken from.
      write_record(p.record, make_record(env, options, id, built->stat, core::now_ns(), built->stat.mtime_ns));
    } catch (...) {
      // An open that fails leaves no entry behind (an engine without its record would be
      // reopened, but a failed write must not be remembered as a result).
      built.reset();
      ::unlink(p.record.c_str());
      ::unlink(p.engine.c_str());
      throw;
    }
  }
  return finish(std::move(*built), p, id, options, true);
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
