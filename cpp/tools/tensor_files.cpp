#include "tools/tensor_files.h"

#include <fmt/core.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/numeric.h"
#include "core/text.h"
#include "tensoracle/errors.h"

namespace tensoracle::tools {

namespace st = tensoracle::safetensors;

TensorFile::Loaded TensorFile::load(std::size_t i) const {
  if (const auto* f = std::get_if<npy::File>(&holder)) {
    npy::Array a = f->read(i);
    return {ArrayView{a.data.data(), a.dtype, a.shape}, std::move(a.owner)};
  }
  const st::File& f = std::get<st::File>(holder);
  const st::TensorInfo& info = f.tensors().at(i);
  return {ArrayView{f.view(info).bytes().data(), info.dtype, info.shape}, nullptr};
}

TensorFile open_tensor_file(const std::string& path, const npy::Limits& limits) {
  TensorFile t;
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

void save_arrays(const std::string& path, const std::vector<npy::NamedArray>& arrays, const std::string& command) {
  auto ends_with = [&](std::string_view suffix) {
    return path.size() >= suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends_with(".npz")) {
    npy::write_npz(path, arrays, command);
  } else if (ends_with(".safetensors")) {
    std::vector<st::TensorData> tensors;
    for (const auto& a : arrays) tensors.push_back({a.name, a.dtype, a.shape, a.data});
    st::save_file(path, tensors);
  } else {
    throw InvalidArgument("[" + command + "] " + path +
                          ": name the file .npz (NumPy's np.load reads it) or .safetensors (any dtype, bfloat16 and fp8 "
                          "included)");
  }
}

std::string name_list(const std::vector<std::string>& names) {
  std::string s;
  for (std::size_t i = 0; i < names.size() && i < 10; ++i) s += (i ? ", " : "") + core::quote_name(names[i]);
  if (names.size() > 10) s += fmt::format(" and {} more", names.size() - 10);
  return s;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

std::pair<std::string, Dims> parse_shape(const std::string& spec, const std::string& command) {
  const std::string where = "[" + command + "] --shape '" + spec + "': ";
  auto eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
    throw InvalidArgument(where + "write NAME=D1xD2x... (for example images=8x3x224x224)");
  std::vector<std::int64_t> dims;
  std::string rest = spec.substr(eq + 1);
  std::size_t at = 0;
  while (at <= rest.size()) {
    std::size_t end = rest.find_first_of("x,", at);
    if (end == std::string::npos) end = rest.size();
    std::string part = rest.substr(at, end - at);
    if (part.empty() || part.size() > 12 || part.find_first_not_of("0123456789") != std::string::npos)
      throw InvalidArgument(where + "'" + part + "' is not a dimension");
    dims.push_back(std::stoll(part));
    at = end + 1;
  }
  if (dims.size() > static_cast<std::size_t>(Dims::kMaxRank))
    throw InvalidArgument(where + "more than " + std::to_string(Dims::kMaxRank) + " dimensions");
  return {spec.substr(0, eq), Dims(std::span<const std::int64_t>(dims))};
}

std::vector<std::string> split_shapes(const std::string& list, const std::string& command) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= list.size()) {
    std::size_t end = list.find(',', at);
    if (end == std::string::npos) end = list.size();
    std::string entry = list.substr(at, end - at);
    // The name ends at the last ':' or '=' (a name may hold ':' itself, as ONNX names do).
    const std::size_t sep = entry.find_last_of(":=");
    if (sep == std::string::npos || sep == 0)
      throw InvalidArgument("[" + command + "] --shapes '" + list + "': '" + entry +
                            "' is not NAME:D1xD2x... (entries separated by commas)");
    entry[sep] = '=';
    out.push_back(std::move(entry));
    at = end + 1;
  }
  return out;
}

std::vector<GivenShape> given_shapes(const Engine& engine, const std::vector<std::string>& shapes,
                                     const std::vector<std::string>& shape_lists, const std::string& command) {
  std::vector<std::string> specs = shapes;
  for (const auto& list : shape_lists)
    for (auto& s : split_shapes(list, command)) specs.push_back(std::move(s));
  std::vector<GivenShape> out;
  for (const auto& s : specs) {
    auto [name, dims] = parse_shape(s, command);
    for (const auto& g : out)
      if (g.name == name) throw InvalidArgument("[" + command + "] the shape of '" + name + "' is given twice");
    const auto& t = engine.io_tensor(name);  // throws for an unknown name
    if (t.mode != TensorIOMode::kINPUT)
      throw InvalidArgument("[" + command + "] --shape: '" + name + "' is an output, not an input");
    out.push_back({name, dims, s});
  }
  return out;
}

void with_shape_hint(const std::vector<std::string>& defaulted, bool some_given, const std::string& command,
                     const std::function<void()>& fn) {
  if (defaulted.empty() || !some_given) return fn();
  std::string list;
  for (const auto& d : defaulted) list += (list.empty() ? "" : ", ") + d;
  const std::string hint = " (the inputs no flag gave a shape to took their profile's opt shape: " + list +
                           "; give every input's shape with " + command + " --shapes NAME:DIMS,NAME:DIMS)";
  try {
    fn();
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(e.what() + hint);
  } catch (const BuildError& e) {
    throw BuildError(e.what() + hint);
  }
}

void fill_generated(std::vector<std::byte>& bytes, DataType type, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const std::size_t n = bytes.size() / element_size(type);
  auto* p = bytes.data();
  for (std::size_t i = 0; i < n; ++i) {
    const float v = u(rng);
    switch (type) {
      case DataType::kFLOAT: std::memcpy(p + i * 4, &v, 4); break;
      case DataType::kHALF: {
        auto h = core::float_to_half(v);
        std::memcpy(p + i * 2, &h, 2);
        break;
      }
      case DataType::kBF16: {
        auto h = core::float_to_bf16(v);
        std::memcpy(p + i * 2, &h, 2);
        break;
      }
      default: break;  // integers, bool, quantized types: zeros
    }
  }
}

bool comparison_passed(const OutputComparison& c) {
  return c.candidate_nonfinite_count == 0 && c.reference_nonfinite_count == 0 &&
         c.outside_tolerance_count.value_or(1) == 0;
}

namespace {

std::string opt(const std::optional<double>& v) { return v ? fmt::format("{:.6g}", *v) : "-"; }

std::string display_name(const ComparedTensor& t) { return t.name.empty() ? "(array)" : t.name; }

nlohmann::ordered_json optional_json(const std::optional<double>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

void print_json(const std::string& cpath, const std::string& rpath, const std::optional<double>& atol,
                const std::optional<double>& rtol, const std::vector<ComparedTensor>& tensors, const std::string& plot) {
  const bool tol = atol && rtol;
  nlohmann::ordered_json j;
  j["candidate"] = cpath;
  j["reference"] = rpath;
  j["atol"] = optional_json(atol);
  j["rtol"] = optional_json(rtol);
  bool all = true;
  auto& out = j["tensors"] = nlohmann::ordered_json::array();
  for (const ComparedTensor& ct : tensors) {
    const OutputComparison& c = ct.result;
    all = all && comparison_passed(c);
    nlohmann::ordered_json t;
    t["name"] = ct.name.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(ct.name);
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
    t["passed"] = tol ? nlohmann::ordered_json(comparison_passed(c)) : nlohmann::ordered_json(nullptr);
    out.push_back(std::move(t));
  }
  j["passed"] = tol ? nlohmann::ordered_json(all) : nlohmann::ordered_json(nullptr);
  j["plot"] = plot.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(plot);
  fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
}

void print_text(const std::string& cpath, const std::string& rpath, const std::optional<double>& atol,
                const std::optional<double>& rtol, const std::vector<ComparedTensor>& tensors, const std::string& plot) {
  const bool tol = atol && rtol;
  fmt::print("candidate: {}\nreference: {}\n", cpath, rpath);
  if (tol) fmt::print("tolerance: |c - r| <= {:.6g} + {:.6g} * |r|\n", *atol, *rtol);
  fmt::print("\n");
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"tensor", "dtype", "shape", "non-finite c/r", "max |c-r|", "relative L2", "cosine", "outside"});
  for (const ComparedTensor& t : tensors) {
    const OutputComparison& c = t.result;
    std::string outside = "-";
    if (c.outside_tolerance_count) {
      outside = std::to_string(*c.outside_tolerance_count);
      if (c.outside_tolerance_fraction) outside += fmt::format(" ({:.4g}%)", 100 * *c.outside_tolerance_fraction);
    }
    rows.push_back({display_name(t), std::string(numpy_name(c.dtype)), shape_text(c.shape),
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
               tensors.size() == 1 ? "1 tensor" : fmt::format("{} tensors", tensors.size()));
    return;
  }
  std::vector<std::string> failed;
  for (const ComparedTensor& t : tensors)
    if (!comparison_passed(t.result)) failed.push_back(display_name(t));
  if (failed.empty())
    fmt::print("passed: {} within tolerance, all values finite\n",
               tensors.size() == 1 ? "1 tensor" : fmt::format("all {} tensors", tensors.size()));
  else
    fmt::print("FAILED: {} of {} outside tolerance or not finite: {}\n", failed.size(), tensors.size(),
               name_list(failed));
}

}  // namespace

void print_comparison(const std::string& candidate, const std::string& reference, const std::optional<double>& atol,
                      const std::optional<double>& rtol, const std::vector<ComparedTensor>& tensors,
                      const std::string& plot, bool json) {
  if (json) print_json(candidate, reference, atol, rtol, tensors, plot);
  else print_text(candidate, reference, atol, rtol, tensors, plot);
}

}  // namespace tensoracle::tools
