// The `tensoracle` program's subcommands. Each registers itself on the CLI11 app and
// returns the process exit code: 0 success, 1 a failed check, 2 bad input or usage.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace tensoracle::tools {

using Command = std::function<int()>;

// `tensoracle inspect FILE [--json]`
Command add_inspect(CLI::App& app);

// `tensoracle convert IN.pth OUT.safetensors [--key K] [--strip-prefix P]
//  [--dtype keep|float32|float16|bfloat16] [--force]`
Command add_convert(CLI::App& app);

// `tensoracle bench ENGINE [--iterations N] [--warmup N] [--shape NAME=DIMS]... [--threads N]
//  [--per-layer] [--json]`
Command add_bench(CLI::App& app);

Command add_run(CLI::App& app);

// `tensoracle build MODEL.onnx [trtexec's flags]`: import, build, save, time.
Command add_build(CLI::App& app);

// What `build` asks `bench` to time (bench.cpp): an engine file, timed as `tensoracle bench`.
struct BenchRequest {
  std::string path;
  int iterations = 100;
  int warmup = 10;
  double warmup_ms = 0;
  double duration_s = 0;
  bool per_layer = false;
};
int bench_engine(const BenchRequest& request);

// `tensoracle compare CANDIDATE REFERENCE [--atol A --rtol R] [--json] [--plot FILE.svg]`
Command add_compare(CLI::App& app);

// `tensoracle cache list [--json] | verify | prune --older-than DAYS | --max-size SIZE |
// clear [--name NAME]`, each with [--dir DIR]
Command add_cache(CLI::App& app);

// `tensoracle cubin produce KERNELS.cu --arch sm_86,... -o DIR [-I DIR] [-D X] [--std S]
//  [--option OPT]` and `tensoracle cubin inspect DIR|MANIFEST|FILE [--json]`
Command add_cubin(CLI::App& app);

}  // namespace tensoracle::tools
