// Op unit: the topk layer. How backends run it: backends/cpu/ops/topk.cpp and
// backends/cuda/ops/topk.cu where they exist. Every layer's unit is listed in
// graph/ops/registry.cpp.
#include <array>
#include <bit>
#include <string_view>

#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

namespace {

// TensorRT's limit on k (and on the reduced dimension's size for k's sake).
constexpr std::int32_t kMaxTopK = 3840;

constexpr std::array<std::string_view, 2> kTopK = {"MAX", "MIN"};

std::vector<TensorDesc> infer_op(const TopKParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool full) {
  const DataType t = in[0].type;
  if (!is_float(t) && t != DataType::kINT32 && t != DataType::kINT64)
    invalid("input 0 has type " + tname(t) + "; topk takes float32, float16, bfloat16, int32 or int64");
  if (p.op != TopKOperation::kMAX && p.op != TopKOperation::kMIN)
    invalid("unknown topk operation " + std::to_string(static_cast<int>(p.op)));
  const int rank = in[0].dims.rank();
  if (rank < 1) invalid("input 0 is a scalar; topk needs rank >= 1");
  if (p.axes == 0 || (p.axes & (p.axes - 1)) != 0 || p.axes >= (1u << rank))
    invalid("axes " + std::to_string(p.axes) + " must set exactly one bit below the input's rank " + std::to_string(rank));
  const int axis = std::countr_zero(p.axes);
  if (p.k < 1 || p.k > kMaxTopK) invalid("k " + std::to_string(p.k) + " must be in [1, " + std::to_string(kMaxTopK) + "]");
  const std::int64_t n = in[0].dims[axis];
  if (full && n >= 0 && p.k > n)
    invalid("k " + std::to_string(p.k) + " is larger than dimension " + std::to_string(axis) + " of input 0 " + in[0].dims.str());
  if (p.output < -1 || p.output > 1) invalid("output " + std::to_string(p.output) + " must be -1, 0 or 1");
  Dims d = in[0].dims;
  d[axis] = p.k;
  TensorDesc values{t, d}, indices{DataType::kINT32, d};
  if (p.output == 0) return {values};
  if (p.output == 1) return {indices};
  return {values, indices};
}

json params_to_json(const TopKParams& p) {
  return {{"op", enum_name(kTopK, p.op)}, {"k", p.k}, {"axes", p.axes}, {"output", p.output}};
}

TopKParams params_from_json(const json& j) {
  return TopKParams{enum_value<TopKOperation>(kTopK, j.at("op")), j.at("k").get<std::int32_t>(),
                    j.at("axes").get<std::uint32_t>(), j.at("output").get<std::int32_t>()};
}

}  // namespace

extern const OpTraits kTopkOp =
    make_op<TopKParams, infer_op, params_to_json, params_from_json>("topk", {1, 1});

}  // namespace ops

}  // namespace tensoracle::graph
