// tensoracle — command-line front end. Errors print "error: <message>" on stderr; the exit
// code is 2 for bad input or usage (out of memory included), 1 for a failed check, 0 otherwise;
// 3 for an internal error (a bug).
#include <fmt/core.h>

#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "tensoracle/engine.h"
#include "tensoracle/errors.h"
#include "tensoracle/info.h"
#include "tools/commands.h"

namespace {

// `tensoracle --version`: the version, the engine format it reads and writes, its build, and
// the backends this machine has (library_info: each backend's device and libraries, or why
// there is none).
std::string version_text() {
  const tensoracle::LibraryInfo info = tensoracle::library_info();
  std::string s = fmt::format("tensoracle {}\nengine format {}, build {}\n", info.version, info.engine_format, info.build);
  for (const auto& b : info.backends) {
    if (!b.available) {
      s += fmt::format("{} backend: unavailable ({})\n", b.name, b.reason);
      continue;
    }
    std::string libs;
    for (const auto& [name, version] : b.libraries) libs += fmt::format("{}{} {}", libs.empty() ? "" : ", ", name, version);
    if (b.name == "cpu") s += fmt::format("cpu backend: {}; {}\n", libs, b.detail);
    else s += fmt::format("{} backend: {} ({}, {})\n", b.name, b.device, b.detail, libs);
  }
  s.pop_back();
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tensoracle: build, save, reuse and execute inference engines from safetensors weights"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_text, "print the version, the engine format and the backends this machine has");
  std::vector<std::pair<CLI::App*, tensoracle::tools::Command>> commands;
  auto add = [&](tensoracle::tools::Command (*adder)(CLI::App&)) {
    std::size_t before = app.get_subcommands({}).size();
    auto cmd = adder(app);
    commands.emplace_back(app.get_subcommands({}).at(before), std::move(cmd));
  };
  add(tensoracle::tools::add_inspect);
  add(tensoracle::tools::add_convert);
  add(tensoracle::tools::add_cache);
  add(tensoracle::tools::add_compare);
  add(tensoracle::tools::add_bench);
  add(tensoracle::tools::add_run);
  add(tensoracle::tools::add_build);
  add(tensoracle::tools::add_cubin);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    fmt::print(stderr, "run '{} --help' for usage\n", app.get_name().empty() ? "tensoracle" : app.get_name());
    return 2;
  }
  try {
    for (auto& [sub, run] : commands)
      if (sub->parsed()) return run();
  } catch (const tensoracle::Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    // Memory runs out where an input asks for more than the machine has: bad input, not a bug
    // (the readers name the file and array where they can; this is the last resort).
    fmt::print(stderr, "error: out of memory: the inputs need more memory than this process can get "
                       "(free memory, raise the process's limits, or use smaller inputs)\n");
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: internal: {}\n", e.what());
    return 3;
  }
  return 2;
}
