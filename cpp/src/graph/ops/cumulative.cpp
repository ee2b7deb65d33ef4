// Op unit: the cumulative layer. How backends run it: backends/cpu/ops/cumulative.cpp and
// backends/cuda/ops/cumulative.cu. Every layer's unit is listed in graph/ops/registry.cpp.
#include <array>
#include <string_view>

#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

namespace {

constexpr std::array<std::string_view, 1> kOps = {"SUM"};

std::vector<TensorDesc> infer_op(const CumulativeParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  const DataType t = in[0].type;
  if (!is_float(t) && !is_int(t)) invalid("input 0 has type " + tname(t) + "; cumulative takes float or int32/int64");
  if (p.op != CumulativeOperation::kSUM) invalid("unknown cumulative operation " + std::to_string(static_cast<int>(p.op)));
  if (in[0].dims.rank() == 0) invalid("cumulative needs an input of rank 1 or more");
  normalize_axis(p.axis, in[0].dims.rank(), "axis");
  return {in[0]};
}

json params_to_json(const CumulativeParams& p) {
  return {{"op", enum_name(kOps, p.op)}, {"axis", p.axis}, {"exclusive", p.exclusive}, {"reverse", p.reverse}};
}

CumulativeParams params_from_json(const json& j) {
  return CumulativeParams{enum_value<CumulativeOperation>(kOps, j.at("op")), j.at("axis").get<std::int32_t>(),
                          j.at("exclusive").get<bool>(), j.at("reverse").get<bool>()};
}

}  // namespace

extern const OpTraits kCumulativeOp =
    make_op<CumulativeParams, infer_op, params_to_json, params_from_json>("cumulative", {1, 1});

}  // namespace ops

}  // namespace tensoracle::graph
