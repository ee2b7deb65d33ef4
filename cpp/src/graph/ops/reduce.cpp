// Op unit: the reduce layer. How backends run it: backends/cpu/ops/reduce.cpp and
// backends/cuda/ops/reduce.cu where they exist. Every layer's unit is listed in
// graph/ops/registry.cpp.
#include <array>
#include <string_view>

#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

namespace {

constexpr std::array<std::string_view, 5> kReduce = {"SUM", "PROD", "MAX", "MIN", "AVG"};

std::vector<TensorDesc> infer_op(const ReduceParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  DataType t = in[0].type;
  if (!is_float(t) && !(is_int(t) && p.op != ReduceOperation::kAVG))
    invalid("input 0 has type " + tname(t) + "; reduce takes float32, float16, bfloat16 (and int32/int64 except AVG)");
  int rank = in[0].dims.rank();
  check_axes(p.axes, rank, "axes");
  std::vector<std::int64_t> out;
  for (int i = 0; i < rank; ++i) {
    bool reduced = (p.axes >> i) & 1u;
    if (!reduced) out.push_back(in[0].dims[i]);
    else if (p.keep_dims) out.push_back(1);
  }
  return {{t, Dims(std::span<const std::int64_t>(out))}};
}

json params_to_json(const ReduceParams& p) {
  return {{"op", enum_name(kReduce, p.op)}, {"axes", p.axes}, {"keep_dims", p.keep_dims}};
}

ReduceParams params_from_json(const json& j) {
  return ReduceParams{enum_value<ReduceOperation>(kReduce, j.at("op")), j.at("axes").get<std::uint32_t>(), j.at("keep_dims").get<bool>()};
}

}  // namespace

extern const OpTraits kReduceOp =
    make_op<ReduceParams, infer_op, params_to_json, params_from_json>("reduce", {1, 1});

}  // namespace ops

}  // namespace tensoracle::graph
