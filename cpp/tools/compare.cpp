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

namespace tensoracle::tools {

namespace {

namespace st = tensoracle::safetensors;

// The arrays of one file, by name; `named` is false for a .npy file (one unnamed array).
// Arrays are read one at a time (load): an .npz's compressed arrays are inflated only while
// they are compared, so at most one array of each file is held at once.
struct Tensors {
  std::string path;
  bool named = true;
  std::vector<std::string> names;
  std::variant<std::monostate, npy::File, st::File> holder;  // keeps the bytes alive

  struct Loaded {
    ArrayView view;
    std::shared_ptr<const void> owner;  // what an .npz entry inflated to (freed when dropped)
  };
  Loaded load(std::size_t i) const {
    if (const auto* f = std::get_if<npy::File>(&holder)) {
      npy::Array a = f->read(i);
      return {ArrayView{a.data.data(), a.dtype, a.shape}, std::move(a.owner)};
    }
    const st::File& f = std::get<st::File>(holder);
    const st::TensorInfo& info = f.tensors().at(i);
    return {ArrayView{f.view(info).bytes().data(), info.dtype, info.shape}, nullptr};
  }
};

Tensors open_tensors(const std::string& path, const npy::Limits& limits) {
  Tensors t;
  t.path = path;
  std::byte head[8] = {};
  {
    std::ifstream in(path, std::ios::binary);
    if (in) in.read(reinterpret_cast<char*>(head), sizeof head);
  }
  std::span<const std::byte> first(head, sizeof head);
  if (npy::looks_like_npy(first) || npy::looks_like_zip(first)) {
    npy::File f = npy::File::open(path, limits);
    t.named = f.is_npz();
    t.names = f.names();
    t.holder = std::move(f);
  } else {  // safetensors has no magic: its parser says what is wrong with anything else
    st::File f = st::File::open(path);
    for (const st::TensorInfo& info : f.tensors()) t.names.push_back(info.name);
    t.holder = std::move(f);
  }
  return t;
}

struct Pair {
  std::string name;  // empty for two .npy files
  std::size_t candidate = 0, reference = 0;  // indices into the files' names
};

std::string name_list(const std::vector<std::string>& names) {
  std::string s;
  for (std::size_t i = 0; i < names.size() && i < 10; ++i) s += (i ? ", " : "") + core::quote_name(names[i]);
  if (names.size() > 10) s += fmt::format(" and {} more", names.size() - 10);
  return s;
}

// Pairs by name; a .npy's single array pairs with the other file's only tensor.
std::vector<Pair> pair_up(const Tensors& c, const Tensors& r) {
  std::vector<Pair> pairs;
  if (!c.named || !r.named) {
    const Tensors& named = c.named ? c : r;
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

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

std::string opt(const std::optional<double>& v) { return v ? fmt::format("{:.6g}", *v) : "-"; }

std::string display_name(const Pair& p) { return p.name.empty() ? "(array)" : p.name; }

// Passed: no non-finite value, nothing outside the tolerances. Only with tolerances.
bool passed(const OutputComparison& c) {
  return c.candidate_nonfinite_count == 0 && c.reference_nonfinite_count == 0 &&
         c.outside_tolerance_count.value_or(1) == 0;
}

nlohmann::ordered_json optional_json(const std::optional<double>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

void print_json(const std::string& cpath, const std::string& rpath, const std::optional<double>& atol,
                const std::optional<double>& rtol, const std::vector<Pair>& pairs,
                const std::vector<OutputComparison>& results, const std::string& plot) {
  const bool tol = atol && rtol;
  nlohmann::ordered_json j;
  j["candidate"] = cpath;
  j["reference"] = rpath;
  j["atol"] = optional_json(atol);
  j["rtol"] = optional_json(rtol);
  bool all = true;
  auto& tensors = j["tensors"] = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const OutputComparison& c = results[i];
    all = all && passed(c);
    nlohmann::ordered_json t;
    t["name"] = pairs[i].name.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(pairs[i].name);
    t["dtype"] = numpy_name(c.dtype);
    t["shape"] = c.shape;
    t["element_count"] = c.element_count;
    t["candidate_nonfinite_count"] = c.candidate_nonfinite_count;
    t["reference_nonfinite_count"] = c.reference_nonfinite_count;
    t["max_absolute_error"] = optional_json(c.max_absolute_error);
    t["relative_l2_error"] = optional_json(c.relative_l2_error);
    t["cosine_similarity"] = optional_json(c.cosine_similarity);
    t["outside_tolerance_count"] = c.outside_tolerance_count ? nlohmann::ordered_json(*c.outside_tolerance_count)
                                                             : nlohmann::ordered_json(nullptr);
    t["outside_tolerance_fraction"] = optional_json(c.outside_tolerance_fraction);
    t["passed"] = tol ? nlohmann::ordered_json(passed(c)) : nlohmann::ordered_json(nullptr);
    tensors.push_back(std::move(t));
  }
  j["passed"] = tol ? nlohmann::ordered_json(all) : nlohmann::ordered_json(nullptr);
  j["plot"] = plot.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(plot);
  fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
}

void print_text(const std::string& cpath, const std::string& rpath, const std::optional<double>& atol,
                const std::optional<double>& rtol, const std::vector<Pair>& pairs,
                const std::vector<OutputComparison>& results, const std::string& plot) {
  const bool tol = atol && rtol;
  fmt::print("candidate: {}\nreference: {}\n", cpath, rpath);
  if (tol) fmt::print("tolerance: |c - r| <= {:.6g} + {:.6g} * |r|\n", *atol, *rtol);
  fmt::print("\n");
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"tensor", "dtype", "shape", "non-finite c/r", "max |c-r|", "relative L2", "cosine", "outside"});
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const OutputComparison& c = results[i];
    std::string outside = "-";
    if (c.outside_tolerance_count) {
      outside = std::to_string(*c.outside_tolerance_count);
      if (c.outside_tolerance_fraction) outside += fmt::format(" ({:.4g}%)", 100 * *c.outside_tolerance_fraction);
    }
    rows.push_back({display_name(pairs[i]), std::string(numpy_name(c.dtype)), shape_text(c.shape),
                    fmt::format("{}/{}", c.candidate_nonfinite_count, c.reference_nonfinite_count),
                    opt(c.max_absolute_error), opt(c.relative_l2_error),
                    c.cosine_similarity ? fmt::format("{:.9f}", *c.cosine_similarity) : "-", outside});
  }
  std::vector<std::size_t> width(rows[0].size(), 0);
  for (const auto& r : rows)
    for (std::size_t k = 0; k < r.size(); ++k) width[k] = std::max(width[k], r[k].size());
  for (const auto& r : rows) {
    std::string line;
    for (std::size_t k = 0; k < r.size(); ++k) line += fmt::format("{:<{}}", r[k], k + 1 < r.size() ? width[k] + 2 : 0);
    fmt::print("{}\n", line);
  }
  fmt::print("\n");
  if (!plot.empty()) fmt::print("plot: {}\n", plot);
  if (!tol) {
    fmt::print("{} compared; no tolerances given (--atol and --rtol), so nothing passes or fails\n",
               pairs.size() == 1 ? "1 tensor" : fmt::format("{} tensors", pairs.size()));
    return;
  }
  std::vector<std::string> failed;
  for (std::size_t i = 0; i < pairs.size(); ++i)
    if (!passed(results[i])) failed.push_back(display_name(pairs[i]));
  if (failed.empty())
    fmt::print("passed: {} within tolerance, all values finite\n",
               pairs.size() == 1 ? "1 tensor" : fmt::format("all {} tensors", pairs.size()));
  else
    fmt::print("FAILED: {} of {} outside tolerance or not finite: {}\n", failed.size(), pairs.size(),
               name_list(failed));
}

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
    Tensors c = open_tensors(*candidate, *limits), r = open_tensors(*reference, *limits);
    std::vector<Pair> pairs = pair_up(c, r);
    std::vector<OutputComparison> results;
    std::vector<PlotPanel> panels;
    for (const Pair& p : pairs) {  // one pair of arrays in memory at a time
      const Tensors::Loaded a = c.load(p.candidate), b = r.load(p.reference);
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
    if (*json) print_json(*candidate, *reference, *atol, *rtol, pairs, results, *plot);
    else print_text(*candidate, *reference, *atol, *rtol, pairs, results, *plot);
    if (!(*atol && *rtol)) return 0;
    for (const OutputComparison& res : results)
      if (!passed(res)) return 1;
    return 0;
  };
}

}  // namespace tensoracle::tools
