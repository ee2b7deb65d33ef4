// `tensoracle compare CANDIDATE REFERENCE [--atol A --rtol R] [--json] [--plot FILE.svg]`:
// compare_outputs over .npy, .npz and .safetensors files, tensor by tensor (matching names).
// Exit 1 when tolerances are given and a tensor has elements outside them or non-finite
// values; 2 for bad input; 0 otherwise.
#include <fmt/core.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <variant>

#include "core/atomic_file.h"
#include "core/text.h"
#include "io/npy.h"
#include "tensoracle/compare.h"
#include "tensoracle/errors.h"
#include "tensoracle/safetensors.h"
#include "tools/commands.h"
#include "tools/plot.h"
#include "tools/tensor_files.h"

namespace tensoracle::tools {

namespace {

namespace st = tensoracle::safetensors;

struct Pair {
  std::string name;  // empty for two .npy files
  std::size_t candidate = 0, reference = 0;  // indices into the files' names
};

// Pairs by name; a .npy's single array pairs with the other file's only tensor.
std::vector<Pair> pair_up(const TensorFile& c, const TensorFile& r) {
  std::vector<Pair> pairs;
  if (!c.named || !r.named) {
    const TensorFile& named = c.named ? c : r;
    if (named.named && named.names.size() != 1)
      throw InvalidArgument(fmt::format(
          "[compare] {} holds one unnamed array but {} holds {} tensors: compare it with a file of one "
          "tensor, or save both as .npz or .safetensors with matching names",
          (c.named ? r : c).path, named.path, named.names.size()));
    pairs.push_back({named.named ? named.names[0] : std::string(), 0, 0});
    return pairs;
  }
  std::map<std::string, std::size_t> in_r;
  for (std::size_t i = 0; i < r.names.size(); ++i) in_r.emplace(r.names[i], i);
  std::set<std::string> in_c;
  std::vector<std::string> only_c, only_r;
  for (std::size_t i = 0; i < c.names.size(); ++i) {
    const std::string& name = c.names[i];
    in_c.insert(name);
    auto it = in_r.find(name);
    if (it == in_r.end()) only_c.push_back(name);
    else pairs.push_back({name, i, it->second});
  }
  for (const std::string& name : r.names)
    if (!in_c.count(name)) only_r.push_back(name);
  if (!only_c.empty() || !only_r.empty()) {
    std::string what = "[compare] the files hold different tensors:";
    if (!only_c.empty()) what += fmt::format(" only in {}: {};", c.path, name_list(only_c));
    if (!only_r.empty()) what += fmt::format(" only in {}: {};", r.path, name_list(only_r));
    what.back() = '.';
    throw InvalidArgument(what);
  }
  if (pairs.empty()) throw InvalidArgument(fmt::format("[compare] {} and {} hold no tensors", c.path, r.path));
  std::sort(pairs.begin(), pairs.end(), [](const Pair& a, const Pair& b) { return a.name < b.name; });
  return pairs;
}

std::string opt(const std::optional<double>& v) { return v ? fmt::format("{:.6g}", *v) : "-"; }

// The plot's panel of one pair (while its arrays are loaded).
PlotPanel plot_panel(const Pair& pair, const ArrayView& candidate, const ArrayView& reference,
                     const OutputComparison& c, const std::optional<double>& atol, const std::optional<double>& rtol) {
  PlotPanel p;
  p.title = fmt::format("{} — {} {}, {} elements", pair.name.empty() ? "array" : "tensor " + core::quote_name(pair.name),
                        numpy_name(c.dtype), shape_text(c.shape), c.element_count);
  p.distribution = error_distribution(candidate, reference, 40, 2000,
                                      pair.name.empty() ? std::string() : "tensor " + core::quote_name(pair.name));
  p.atol = atol;
  p.rtol = rtol;
  p.summary = fmt::format("max |c - r| {}, relative L2 {}, cosine {}, non-finite {}/{}", opt(c.max_absolute_error),
                          opt(c.relative_l2_error), opt(c.cosine_similarity), c.candidate_nonfinite_count,
                          c.reference_nonfinite_count);
  if (c.outside_tolerance_count) p.summary += fmt::format(", outside tolerance {}", *c.outside_tolerance_count);
  if (p.distribution.nonfinite_pairs)
    p.summary += fmt::format(" ({} pairs with a non-finite value not plotted)", p.distribution.nonfinite_pairs);
  return p;
}

void write_plot(const std::string& file, const std::string& cpath, const std::string& rpath,
                const std::vector<PlotPanel>& panels) {
  std::string svg = error_plot_svg(fmt::format("candidate {} vs reference {}", cpath, rpath), panels);
  core::AtomicFile out(file, "compare");
  out.write(std::as_bytes(std::span(svg)));
  out.commit();
}

}  // namespace

Command add_compare(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "compare",
      "Compare a candidate's outputs with a reference's (.npy, .npz or .safetensors; tensors matched by name): "
      "non-finite counts, max |c - r|, relative L2 error, cosine similarity and, with --atol and --rtol, the "
      "elements outside |c - r| <= atol + rtol*|r|. Exit 1 when tolerances are given and anything is outside "
      "them or not finite");
  auto candidate = std::make_shared<std::string>();
  auto reference = std::make_shared<std::string>();
  auto atol = std::make_shared<std::optional<double>>();
  auto rtol = std::make_shared<std::optional<double>>();
  auto json = std::make_shared<bool>(false);
  auto plot = std::make_shared<std::string>();
  auto limits = std::make_shared<npy::Limits>();
  sub->add_option("CANDIDATE", *candidate, "the outputs under test (e.g. the bf16 engine's)")->required();
  sub->add_option("REFERENCE", *reference, "the accepted outputs (e.g. the fp32 engine's)")->required();
  sub->add_option_function<double>("--atol", [atol](double v) { *atol = v; }, "absolute tolerance (>= 0)")
      ->type_name("A");
  sub->add_option_function<double>("--rtol", [rtol](double v) { *rtol = v; }, "relative tolerance (>= 0)")
      ->type_name("R");
  sub->add_flag("--json", *json, "print JSON instead of a table");
  sub->add_option("--plot", *plot, "write an SVG plot: histogram of |c - r| and |c - r| against |r|")
      ->type_name("FILE.svg");
  sub->add_option("--max-inflated", limits->max_inflated_bytes,
                  fmt::format("the most the compressed arrays of one .npz (np.savez_compressed) may inflate to, "
                              "in all (default {} GiB; units: KiB, MiB, GiB, ...)",
                              npy::kDefaultMaxInflatedBytes >> 30))
      ->type_name("SIZE")
      ->transform(CLI::AsSizeValue(false));

  return [=]() -> int {
    if (atol->has_value() != rtol->has_value())
      throw InvalidArgument(fmt::format("[compare] --{} without --{}: give both (--rtol 0 for an absolute "
                                        "bound, --atol 0 for a relative one)",
                                        *atol ? "atol" : "rtol", *atol ? "rtol" : "atol"));
    TensorFile c = open_tensor_file(*candidate, *limits), r = open_tensor_file(*reference, *limits);
    std::vector<Pair> pairs = pair_up(c, r);
    std::vector<OutputComparison> results;
    std::vector<PlotPanel> panels;
    for (const Pair& p : pairs) {  // one pair of arrays in memory at a time
      const TensorFile::Loaded a = c.load(p.candidate), b = r.load(p.reference);
      CompareOptions o;
      o.atol = *atol;
      o.rtol = *rtol;
      // Errors name both files and the tensor: "[compare] c.npz vs r.npz, tensor 'x': ...".
      o.label = fmt::format("{} vs {}{}", *candidate, *reference,
                            p.name.empty() ? std::string() : ", tensor " + core::quote_name(p.name));
      results.push_back(compare_outputs(a.view, b.view, o));
      if (!plot->empty()) panels.push_back(plot_panel(p, a.view, b.view, results.back(), *atol, *rtol));
    }
    if (!plot->empty()) write_plot(*plot, *candidate, *reference, panels);
    std::vector<ComparedTensor> tensors;
    for (std::size_t i = 0; i < pairs.size(); ++i) tensors.push_back({pairs[i].name, results[i]});
    print_comparison(*candidate, *reference, *atol, *rtol, tensors, *plot, *json);
    if (!(*atol && *rtol)) return 0;
    for (const OutputComparison& res : results)
      if (!comparison_passed(res)) return 1;
    return 0;
  };
}

}  // namespace tensoracle::tools
