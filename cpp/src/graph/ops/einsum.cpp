// Op unit: the einsum layer. How backends run it: backends/cpu/ops/einsum.cpp and
// backends/cuda/ops/einsum.cu where they exist. Every layer's unit is listed in
// graph/ops/registry.cpp.
#include <algorithm>
#include <map>

#include "graph/ops/common.h"

namespace tensoracle::graph {

using namespace ops;

EinsumSpec parse_einsum(const std::string& eq, std::size_t inputs) {
  EinsumSpec s;
  auto arrow = eq.find("->");
  if (arrow == std::string::npos) invalid("equation '" + eq + "' needs an explicit output ('->')");
  std::string lhs = eq.substr(0, arrow), rhs = eq.substr(arrow + 2);
  auto strip = [](std::string t) {
    t.erase(std::remove(t.begin(), t.end(), ' '), t.end());
    return t;
  };
  lhs = strip(lhs);
  s.output = strip(rhs);
  std::size_t start = 0;
  while (true) {
    auto comma = lhs.find(',', start);
    s.operands.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (s.operands.size() != inputs)
    invalid("equation '" + eq + "' has " + std::to_string(s.operands.size()) + " operands but the layer has " +
            std::to_string(inputs) + " inputs");
  if (inputs < 1 || inputs > 2) invalid("einsum takes one or two inputs");
  for (const auto& t : s.operands)
    for (char c : t)
      if (c < 'a' || c > 'z') invalid("equation '" + eq + "': only lower-case letters are supported (no '...')");
  for (char c : s.output) {
    if (c < 'a' || c > 'z') invalid("equation '" + eq + "': only lower-case letters are supported");
    if (std::count(s.output.begin(), s.output.end(), c) > 1) invalid("equation '" + eq + "': output repeats '" + std::string(1, c) + "'");
    bool found = false;
    for (const auto& t : s.operands) found = found || t.find(c) != std::string::npos;
    if (!found) invalid("equation '" + eq + "': output letter '" + std::string(1, c) + "' appears in no input");
  }
  return s;
}

namespace ops {

namespace {

std::vector<TensorDesc> infer_op(const EinsumParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  EinsumSpec s = parse_einsum(p.equation, in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    require_float(in[i], static_cast<int>(i), "einsum");
    if (in[i].type != in[0].type) invalid("input " + std::to_string(i) + " has type " + tname(in[i].type) + "; einsum needs one type");
    if (static_cast<int>(s.operands[i].size()) != in[i].dims.rank())
      invalid("operand '" + s.operands[i] + "' has " + std::to_string(s.operands[i].size()) + " letters but input " +
              std::to_string(i) + " has dims " + in[i].dims.str());
  }
  std::map<char, std::int64_t> size;
  for (std::size_t i = 0; i < in.size(); ++i)
    for (std::size_t k = 0; k < s.operands[i].size(); ++k) {
      char c = s.operands[i][k];
      std::int64_t d = in[i].dims[static_cast<int>(k)];
      auto it = size.find(c);
      if (it == size.end() || it->second < 0) size[c] = d;
      else if (d >= 0 && it->second != d)
        invalid("letter '" + std::string(1, c) + "' has size " + std::to_string(it->second) + " and " + std::to_string(d));
    }
  std::vector<std::int64_t> out;
  for (char c : s.output) out.push_back(size[c]);
  return {{in[0].type, Dims(std::span<const std::int64_t>(out))}};
}

json params_to_json(const EinsumParams& p) {
  return {{"equation", p.equation}};
}

EinsumParams params_from_json(const json& j) {
  return EinsumParams{j.at("equation").get<std::string>()};
}

}  // namespace

extern const OpTraits kEinsumOp =
    make_op<EinsumParams, infer_op, params_to_json, params_from_json>("einsum", {1, -1});

}  // namespace ops

}  // namespace tensoracle::graph
