// Op unit: the attention layer (TensorRT's IAttention; tensoracle/network.h's AttentionParams).
// How backends run it: backends/cpu/ops/attention.cpp and backends/cuda/ops/attention.cu.
// Every layer's unit is listed in graph/ops/registry.cpp.
#include <array>
#include <cmath>
#include <string_view>

#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

namespace {

constexpr std::array<std::string_view, 2> kNormalization = {"NONE", "SOFTMAX"};

// Two dims agree when equal or when either is unknown until run time (-1).
bool agree(std::int64_t a, std::int64_t b) { return a < 0 || b < 0 || a == b; }

std::vector<TensorDesc> infer_op(const AttentionParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  const char* names[] = {"query", "key", "value", "mask"};
  auto input = [&](std::size_t i) { return "input " + std::to_string(i) + " (" + names[i] + ")"; };
  require_float(in[0], 0, "attention");
  for (std::size_t i : {1u, 2u})
    if (in[i].type != in[0].type)
      invalid(input(i) + " has type " + tname(in[i].type) + "; it must be the query's " + tname(in[0].type));
  for (std::size_t i = 0; i < in.size(); ++i)
    if (in[i].dims.rank() != 4)
      invalid(input(i) + " has dims " + in[i].dims.str() + "; attention takes rank-4 tensors" +
              (i < 3 ? " [batch, heads, sequence, head size]" : " [batch, heads, queries, keys]"));
  const Dims& q = in[0].dims;
  const Dims& k = in[1].dims;
  const Dims& v = in[2].dims;
  for (int d = 0; d < 4; ++d)
    if (!agree(k[d], v[d])) invalid("input 2 (value) " + v.str() + " must have the key's dims " + k.str());
  if (!agree(q[0], k[0])) invalid("the query's batch " + std::to_string(q[0]) + " differs from the key's " + std::to_string(k[0]));
  if (!agree(q[3], k[3]))
    invalid("the query's head size " + std::to_string(q[3]) + " differs from the key's " + std::to_string(k[3]));
  if (k[1] == 0) invalid("input 1 (key) has 0 heads");
  if (q[1] >= 0 && k[1] > 0 && q[1] % k[1] != 0)
    invalid("the query's " + std::to_string(q[1]) + " heads are not a multiple of the key's " + std::to_string(k[1]) +
            " (grouped-query attention shares each key head among Nq / Nkv query heads)");
  if (p.normalization != AttentionNormalizationOp::kNONE && p.normalization != AttentionNormalizationOp::kSOFTMAX)
    invalid("unknown normalization operation " + std::to_string(static_cast<int>(p.normalization)));
  if (!std::isfinite(p.scale)) invalid("scale " + std::to_string(p.scale) + " must be finite");
  if (in.size() == 4) {
    if (p.causal) invalid("a causal attention takes no mask (TensorRT's rule): drop the mask or causal");
    if (in[3].type != DataType::kBOOL && in[3].type != in[0].type)
      invalid("input 3 (mask) has type " + tname(in[3].type) + "; it must be bool or the query's " + tname(in[0].type));
    const std::int64_t want[4] = {q[0], q[1], q[2], k[2]};
    for (int d = 0; d < 4; ++d)
      if (in[3].dims[d] != 1 && !agree(in[3].dims[d], want[d]))
        invalid("input 3 (mask) has dims " + in[3].dims.str() + "; each must be 1 or [batch, query heads, queries, keys] = " +
                Dims{want[0], want[1], want[2], want[3]}.str() + "'s");
  }
  return {TensorDesc{in[0].type, q}};
}

json params_to_json(const AttentionParams& p) {
  return {{"normalization", enum_name(kNormalization, p.normalization)},
          {"causal", p.causal},
          {"decomposable", p.decomposable},
          {"scale", p.scale}};
}

AttentionParams params_from_json(const json& j) {
  return AttentionParams{enum_value<AttentionNormalizationOp>(kNormalization, j.at("normalization")),
                         j.at("causal").get<bool>(), j.at("decomposable").get<bool>(), j.at("scale").get<float>()};
}

constexpr std::array<std::string_view, 1> kFloatKeys = {"scale"};

}  // namespace

extern const OpTraits kAttentionOp =
    make_op<AttentionParams, infer_op, params_to_json, params_from_json>("attention", {3, 4}, kFloatKeys);

}  // namespace ops

}  // namespace tensoracle::graph
