// `tensoracle cubin produce KERNELS.cu --arch sm_86,sm_90 -o DIR [-I DIR]... [-D NAME[=V]]...
//  [--std c++17] [--option OPT]...` and `tensoracle cubin inspect DIR|MANIFEST|FILE.cubin [--json]`
// (see tensoracle/cubin.h). Exit codes: 0 done, 1 `inspect` found a cubin that disagrees with
// its manifest, 2 bad input (a compile error included).
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "tensoracle/cubin.h"
#include "tensoracle/errors.h"
#include "tools/commands.h"

namespace tensoracle::tools {

namespace {

nlohmann::ordered_json cubin_json(const cubin::CubinInfo& c) {
  return {{"file", c.file}, {"arch", c.arch}, {"size", c.size}, {"sha256", c.sha256}, {"kernels", c.kernels}};
}

void print_cubin(const cubin::CubinInfo& c) {
  fmt::print("  {:<28} {:<8} {:>9} B  sha256 {}\n", c.file, c.arch, c.size, c.sha256.substr(0, 16));
  for (const auto& k : c.kernels) fmt::print("      kernel {}\n", k);
}

int run_inspect(const std::filesystem::path& target, bool json) {
  std::error_code ec;
  const bool manifest = std::filesystem::is_directory(target, ec) || target.extension() == ".json";
  if (!manifest) {
    auto c = cubin::inspect_file(target);
    if (json) {
      fmt::print("{}\n", cubin_json(c).dump(2));
    } else {
      fmt::print("cubin:\n");
      print_cubin(c);
    }
    return 0;
  }
  std::vector<std::string> problems;
  auto m = cubin::verify(target, problems);
  if (json) {
    nlohmann::ordered_json j = {{"source", m.source},  {"source_sha256", m.source_sha256}, {"compiler", m.compiler},
                                {"flags", m.flags},    {"cubins", nlohmann::ordered_json::array()},
                                {"problems", problems}};
    for (const auto& c : m.cubins) j["cubins"].push_back(cubin_json(c));
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("source:   {} (sha256 {})\ncompiler: {} {}\ncubins:\n", m.source, m.source_sha256.substr(0, 16), m.compiler,
               fmt::join(m.flags, " "));
    for (const auto& c : m.cubins) print_cubin(c);
    for (const auto& p : problems) fmt::print(stderr, "problem: {}\n", p);
    if (problems.empty()) fmt::print("every cubin matches the manifest\n");
  }
  return problems.empty() ? 0 : 1;
}

}  // namespace

Command add_cubin(CLI::App& app) {
  auto* sub = app.add_subcommand("cubin", "Produce cubins for plugins with NVRTC (no nvcc or GPU needed) and inspect them");
  sub->require_subcommand(1);
  auto source = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto archs = std::make_shared<std::vector<std::string>>();
  auto opts = std::make_shared<cubin::ProduceOptions>();
  auto target = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);

  auto* produce = sub->add_subcommand("produce", "Compile KERNELS.cu into one cubin per architecture and a manifest");
  produce->add_option("source", *source, "the CUDA source file")->required();
  produce->add_option("--arch", *archs, "architectures, comma-separated: sm_86,sm_89,sm_90,sm_120")
      ->required()
      ->delimiter(',');
  produce->add_option("-o,--output", *out, "the folder to write (created if missing)")->required();
  produce->add_option("-I,--include", opts->include_dirs, "an include folder (repeatable)");
  produce->add_option("-D,--define", opts->defines, "a macro NAME or NAME=VALUE (repeatable)");
  produce->add_option("--std", opts->std, "the C++ dialect (default c++17)");
  produce->add_option("--option", opts->extra, "a further NVRTC option (repeatable), e.g. --option=--use_fast_math");

  auto* inspect = sub->add_subcommand("inspect", "Show a cubin's architecture and kernels, or check a folder's cubins "
                                                 "against its manifest (exit 1 on a mismatch)");
  inspect->add_option("target", *target, "a produce folder, its manifest.json, or a .cubin file")->required();
  inspect->add_flag("--json", *json, "print JSON");

  return [=]() -> int {
    if (inspect->parsed()) return run_inspect(*target, *json);
    opts->archs = *archs;
    auto m = cubin::produce(*source, *out, *opts);
    fmt::print("{}: {} cubin(s) with {} into {}\n", m.source, m.cubins.size(), m.compiler, *out);
    for (const auto& c : m.cubins) print_cubin(c);
    return 0;
  };
}

}  // namespace tensoracle::tools
