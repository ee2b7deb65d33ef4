// Op unit: the unary layer. How backends run it: backends/cpu/ops/unary.cpp and
// backends/cuda/ops/unary.cu where they exist. Every layer's unit is listed in
// graph/ops/registry.cpp.
#include <array>
#include <string_view>

#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

namespace {

constexpr std::array<std::string_view, 25> kUnary = {
    "EXP", "LOG", "SQRT", "RECIP", "ABS", "NEG", "SIN", "COS", "TAN", "SINH", "COSH", "ASIN", "ACOS",
    "ATAN", "ASINH", "ACOSH", "ATANH", "CEIL", "FLOOR", "ERF", "NOT", "SIGN", "ROUND", "ISINF", "ISNAN"};

std::vector<TensorDesc> infer_op(const UnaryParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  using U = UnaryOperation;
  DataType t = in[0].type;
  switch (p.op) {
    case U::kNOT:
      if (t != DataType::kBOOL) invalid("input 0 has type " + tname(t) + "; NOT takes bool");
      return {in[0]};
    case U::kABS: case U::kNEG: case U::kSIGN:
      if (!is_float(t) && !is_int(t)) invalid("input 0 has type " + tname(t) + "; ABS, NEG and SIGN take float or int32/int64");
      return {in[0]};
    case U::kISINF: case U::kISNAN:
      require_float(in[0], 0, "ISINF/ISNAN");
      return {{DataType::kBOOL, in[0].dims}};
    default:
      if (static_cast<int>(p.op) < 0 || static_cast<int>(p.op) > static_cast<int>(U::kISNAN))
        invalid("unknown unary operation " + std::to_string(static_cast<int>(p.op)));
      require_float(in[0], 0, "this unary operation");
      return {in[0]};
  }
}

json params_to_json(const UnaryParams& p) {
  return {{"op", enum_name(kUnary, p.op)}};
}

UnaryParams params_from_json(const json& j) {
  return UnaryParams{enum_value<UnaryOperation>(kUnary, j.at("op"))};
}

}  // namespace

extern const OpTraits kUnaryOp =
    make_op<UnaryParams, infer_op, params_to_json, params_from_json>("unary", {1, 1});

}  // namespace ops

}  // namespace tensoracle::graph
