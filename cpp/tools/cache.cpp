// `tensoracle cache list|verify|prune|clear [--dir DIR]`: the engine cache's folder (see
// tensoracle/cache.h). Exit codes: 0 done, 1 `verify` found a corrupt entry, 2 bad input.
#include <fmt/core.h>

#include <filesystem>
#include <time.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tensoracle/cache.h"
#include "tensoracle/errors.h"
#include "tools/commands.h"

namespace tensoracle::tools {

namespace {

using Clock = std::chrono::system_clock;

std::string utc(Clock::time_point t, bool iso) {
  std::time_t s = Clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, iso ? "%Y-%m-%dT%H:%M:%SZ" : "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string human(std::uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", n) : fmt::format("{:.1f} {}", v, units[u]);
}

std::string label(const cache::Entry& e) {
  return e.has_record ? fmt::format("{} (graph_version {})", e.name, e.graph_version) : e.name + " (no record)";
}

nlohmann::ordered_json entry_json(const cache::Entry& e) {
  return {{"name", e.name},
          {"graph_version", e.has_record ? nlohmann::ordered_json(e.graph_version) : nlohmann::ordered_json(nullptr)},
          {"identity", e.identity},
          {"device", e.has_record ? nlohmann::ordered_json(e.device) : nlohmann::ordered_json(nullptr)},
          {"size", e.size},
          {"created", utc(e.created, true)},
          {"last_used", utc(e.last_used, true)},
          {"path", e.path.string()}};
}

int run_list(const std::string& dir, bool json) {
  auto entries = cache::list(dir);
  if (json) {
    auto j = nlohmann::ordered_json::array();
    for (const auto& e : entries) j.push_back(entry_json(e));
    fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
    return 0;
  }
  const std::string where = dir.empty() ? default_cache_dir().string() : dir;
  if (entries.empty()) {
    fmt::print("no engines in {}\n", where);
    return 0;
  }
  std::size_t wn = 4, wv = 7, wd = 6;
  for (const auto& e : entries) {
    wn = std::max(wn, e.name.size());
    wv = std::max(wv, e.graph_version.size());
    wd = std::max(wd, e.device.size());
  }
  fmt::print("{:<{}}  {:<{}}  {:<12}  {:<{}}  {:>9}  {:<19}  {:<19}\n", "NAME", wn, "VERSION", wv, "IDENTITY",
             "DEVICE", wd, "SIZE", "CREATED (UTC)", "LAST USED (UTC)");
  std::uint64_t total = 0;
  for (const auto& e : entries) {
    total += e.size;
    fmt::print("{:<{}}  {:<{}}  {:<12}  {:<{}}  {:>9}  {:<19}  {:<19}\n", e.name, wn,
               e.has_record ? e.graph_version : "?", wv, e.identity.substr(0, 12), e.has_record ? e.device : "?", wd,
               human(e.size), utc(e.created, false), utc(e.last_used, false));
  }
  fmt::print("{} {}, {} in {}\n", entries.size(), entries.size() == 1 ? "entry" : "entries", human(total), where);
  return 0;
}

int run_verify(const std::string& dir) {
  auto checks = cache::verify(dir);
  std::size_t corrupt = 0;
  for (const auto& c : checks) {
    switch (c.health) {
      case cache::Health::kOk: fmt::print("ok            {}  {}\n", label(c.entry), c.entry.path.string()); break;
      case cache::Health::kIncompatible:
        fmt::print("incompatible  {}  {}: {}\n", label(c.entry), c.entry.path.string(), c.problem);
        break;
      case cache::Health::kCorrupt:
        ++corrupt;
        fmt::print("CORRUPT       {}  {}: {}\n", label(c.entry), c.entry.path.string(), c.problem);
        break;
    }
  }
  if (corrupt > 0) {
    std::string names;
    for (const auto& c : checks)
      if (c.health == cache::Health::kCorrupt) names += (names.empty() ? "" : ", ") + c.entry.path.string();
    fmt::print(stderr, "error: {} of {} entries corrupt: {}; open them with force_rebuild=True or run "
                       "'tensoracle cache clear --name NAME'\n", corrupt, checks.size(), names);
    return 1;
  }
  fmt::print("{} {} verified\n", checks.size(), checks.size() == 1 ? "entry" : "entries");
  return 0;
}

int report_removed(const std::vector<cache::Entry>& removed) {
  std::uint64_t total = 0;
  for (const auto& e : removed) {
    total += e.size;
    fmt::print("removed {}  {}  {}\n", label(e), human(e.size), e.path.string());
  }
  fmt::print("{} {} removed, {} freed\n", removed.size(), removed.size() == 1 ? "entry" : "entries", human(total));
  return 0;
}

}  // namespace

Command add_cache(CLI::App& app) {
  auto* sub = app.add_subcommand("cache", "Manage the engine cache (default: $XDG_CACHE_HOME/tensoracle or "
                                          "~/.cache/tensoracle)");
  sub->require_subcommand(1);
  auto dir = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto days = std::make_shared<std::optional<double>>();
  auto max_size = std::make_shared<std::string>();
  auto name = std::make_shared<std::string>();

  auto* list = sub->add_subcommand("list", "List saved engines: name, graph version, identity, device, size, "
                                           "created, last used");
  auto* verify = sub->add_subcommand("verify", "Read every saved engine in full and check it; exit 1 if any is corrupt");
  auto* prune = sub->add_subcommand("prune", "Remove engines unused for DAYS and/or the least recently used "
                                             "beyond SIZE");
  auto* clear = sub->add_subcommand("clear", "Remove every saved engine (or those of one name)");
  for (auto* s : {list, verify, prune, clear})
    s->add_option("--dir", *dir, "the cache folder (default: the one open_engine uses)");
  list->add_flag("--json", *json, "print JSON instead of a table");
  auto* older = prune->add_option_function<double>("--older-than", [days](double d) { *days = d; },
                                                   "remove entries not used for DAYS days (fractions allowed)");
  older->type_name("DAYS");
  auto* size = prune->add_option("--max-size", *max_size, "then remove the least recently used until the cache "
                                                          "holds at most SIZE (500M, 2G, 1.5GiB, 10GB, bytes)");
  size->type_name("SIZE");
  clear->add_option("--name", *name, "only the engines of this name");

  return [=]() -> int {
    // verify's folder, named on the command line, must exist: a typo would otherwise read as an
    // empty cache ("0 entries verified", exit 0: a silent pass in a CI check). The default folder
    // may not exist yet (nothing was saved); list, prune and clear of a missing folder report
    // nothing there, which is true.
    std::error_code ec;
    if (verify->parsed() && !dir->empty() && !std::filesystem::is_directory(*dir, ec))
      throw InvalidArgument("[cache] --dir " + *dir + ": " +
                            (std::filesystem::exists(*dir, ec) ? "not a folder" : "no such folder"));
    if (list->parsed()) return run_list(*dir, *json);
    if (verify->parsed()) return run_verify(*dir);
    if (prune->parsed()) {
      if (!*days && max_size->empty())
        throw InvalidArgument("[cache] prune needs --older-than DAYS, --max-size SIZE or both");
      std::optional<std::chrono::seconds> age;
      if (*days) {
        if (!(**days >= 0) || **days > 1e6)
          throw InvalidArgument(fmt::format("[cache] --older-than {}: not a number of days", **days));
        age = std::chrono::seconds(static_cast<std::int64_t>(**days * 86400.0));
      }
      std::optional<std::uint64_t> limit;
      if (!max_size->empty()) limit = cache::parse_size(*max_size);
      return report_removed(cache::prune(age, limit, *dir));
    }
    if (clear->parsed())
      return report_removed(cache::clear(name->empty() ? std::nullopt : std::optional<std::string>(*name), *dir));
    return 2;
  };
}

}  // namespace tensoracle::tools
