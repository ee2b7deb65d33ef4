// `tensoracle convert IN.pth OUT.safetensors [--key K] [--strip-prefix P]
//  [--dtype keep|float32|float16|bfloat16] [--force]`
#include <fmt/core.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "tensoracle/convert.h"
#include "tools/commands.h"

namespace tensoracle::tools {

namespace {

std::string mib(std::uint64_t n) { return fmt::format("{:.1f} MiB", static_cast<double>(n) / (1 << 20)); }

struct Args {
  std::string in, out, key, strip_prefix, dtype = "keep";
  bool force = false;
};

int run(const Args& a) {
  ConvertOptions o;
  o.key = a.key;
  o.strip_prefix = a.strip_prefix;
  o.overwrite = a.force;
  auto dtype = parse_convert_dtype(a.dtype);
  if (!dtype) throw InvalidArgument("--dtype must be keep, float32, float16 or bfloat16, not '" + a.dtype + "'");
  o.dtype = *dtype;
  // Progress on a terminal only, at most a few times a second, for conversions of 64 MiB or more.
  bool tty = ::isatty(STDERR_FILENO) == 1;
  auto last = std::chrono::steady_clock::now();
  bool shown = false;
  if (tty) {
    o.progress = [&](const ConvertProgress& p) {
      auto now = std::chrono::steady_clock::now();
      bool done = p.tensors_done == p.tensors_total;
      if (p.bytes_total < (64u << 20) || (!done && now - last < std::chrono::milliseconds(200))) return;
      last = now;
      shown = true;
      fmt::print(stderr, "\rconverting: {:3.0f}%  {} of {}, {}/{} tensors", 100.0 * static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total),
                 mib(p.bytes_done), mib(p.bytes_total), p.tensors_done, p.tensors_total);
      std::fflush(stderr);
    };
  }
  ConvertReport r = convert_pth(a.in, a.out, o);
  if (shown) fmt::print(stderr, "\n");
  fmt::print("wrote {}: {} tensors, {} of tensor data, {} metadata entries\n", a.out, r.tensors, mib(r.tensor_bytes),
             r.metadata_entries);
  if (r.shared_storages)
    fmt::print("  {} storages were shared by several tensors: each tensor is written in full "
               "(metadata 'tensoracle.shared_storage' lists them)\n", r.shared_storages);
  if (r.views_made_contiguous) fmt::print("  {} non-contiguous views were written contiguous\n", r.views_made_contiguous);
  if (r.byte_swapped) fmt::print("  the checkpoint was big-endian: data byte-swapped\n");
  return 0;
}

}  // namespace

Command add_convert(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "convert",
      "Convert a PyTorch checkpoint (torch.save's zip format) to safetensors, without torch and "
      "without running the checkpoint's pickle code");
  auto a = std::make_shared<Args>();
  sub->add_option("IN", a->in, "the .pth / .pt / .bin checkpoint")->required();
  sub->add_option("OUT", a->out, "the safetensors file to write")->required();
  sub->add_option("--key", a->key, "convert only this entry (e.g. state_dict, model; dotted paths walk nested dicts)");
  sub->add_option("--strip-prefix", a->strip_prefix, "remove this prefix from names that start with it (e.g. module.)");
  sub->add_option("--dtype", a->dtype, "floating-point tensors as: keep (default), float32, float16, bfloat16");
  sub->add_flag("--force", a->force, "replace OUT if it exists");
  return [a] { return run(*a); };
}

}  // namespace tensoracle::tools
