// Op unit: the elementwise layer. How backends run it: backends/cpu/ops/elementwise.cpp and
// backends/cuda/ops/elementwise.cu where they exist. Every layer's unit is listed in
// graph/ops/registry.cpp.
#include <array>
#include <string_view>

#include "graph/ops/common.h"

namespace tensoracle::graph {

using namespace ops;

Dims broadcast_dims(const Dims& a, const Dims& b) {
  if (a.rank() != b.rank())
    invalid("inputs have dims " + a.str() + " and " + b.str() +
            " of different rank; TensorRT broadcasting needs equal ranks (reshape with a shuffle layer)");
  Dims out = a;
  for (int i = 0; i < a.rank(); ++i) {
    std::int64_t x = a[i], y = b[i];
    if (x >= 0 && y >= 0 && x != y && x != 1 && y != 1)
      invalid("inputs have dims " + a.str() + " and " + b.str() + ": dimension " + std::to_string(i) +
              " is neither equal nor 1");
    out[i] = x == 1 ? y : y == 1 ? x : (x >= 0 ? x : y);
  }
  return out;
}

namespace ops {

namespace {

constexpr std::array<std::string_view, 14> kEwOps = {"SUM", "PROD", "MAX", "MIN", "SUB", "DIV", "POW",
                                                     "FLOOR_DIV", "AND", "OR", "XOR", "EQUAL", "GREATER", "LESS"};

TensorDesc infer_elementwise(const ElementWiseParams& p, std::span<const TensorDesc> in) {
  using E = ElementWiseOperation;
  require_same_type(in, "elementwise");
  DataType t = in[0].type;
  bool fl = is_float(t), integer = t == DataType::kINT32 || t == DataType::kINT64;
  DataType out = t;
  switch (p.op) {
    case E::kSUM: case E::kPROD: case E::kMAX: case E::kMIN: case E::kSUB: case E::kDIV: case E::kFLOOR_DIV:
      if (!fl && !integer)
        invalid("inputs have type " + tname(t) + "; this operation takes float32, float16, bfloat16, int32 or int64");
      break;
    case E::kPOW:
      if (!fl) invalid("inputs have type " + tname(t) + "; POW takes float32, float16 or bfloat16");
      break;
    case E::kAND: case E::kOR: case E::kXOR:
      if (t != DataType::kBOOL) invalid("inputs have type " + tname(t) + "; AND, OR and XOR take bool");
      break;
    case E::kEQUAL:
      if (!fl && !integer && t != DataType::kBOOL)
        invalid("inputs have type " + tname(t) + "; EQUAL takes float, int32, int64 or bool");
      out = DataType::kBOOL;
      break;
    case E::kGREATER: case E::kLESS:
      if (!fl && !integer) invalid("inputs have type " + tname(t) + "; GREATER and LESS take float, int32 or int64");
      out = DataType::kBOOL;
      break;
    default: invalid("unknown elementwise operation " + std::to_string(static_cast<int>(p.op)));
  }
  return {out, broadcast_dims(in[0].dims, in[1].dims)};
}

std::vector<TensorDesc> infer_op(const ElementWiseParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  return {infer_elementwise(p, in)};
}

json params_to_json(const ElementWiseParams& p) {
  return {{"op", enum_name(kEwOps, p.op)}};
}

ElementWiseParams params_from_json(const json& j) {
  return ElementWiseParams{enum_value<ElementWiseOperation>(kEwOps, j.at("op"))};
}

}  // namespace

extern const OpTraits kElementwiseOp =
    make_op<ElementWiseParams, infer_op, params_to_json, params_from_json>("elementwise", {2, 2});

}  // namespace ops

}  // namespace tensoracle::graph
