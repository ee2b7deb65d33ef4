// Op unit: the attention layer (TensorRT's IAttention; tensoracle/network.h's AttentionParams).
// How backends run it: backends/cpu/ops/attention.cpp and backends/cuda/ops/attention.cu.
// Every layer's unit is listed in graph/ops/registry.cpp.
#include <array>
#include <cmath>
#include <string_view>

#include "graph/graph.h"
#include "graph/ops.h"
#include "graph/ops/common.h"

namespace tensoracle::graph {

std::int64_t attention_head_size(const Graph& g, const Node& n) {
  const auto* p = std::get_if<AttentionParams>(&n.params);
  if (!p || n.inputs.empty()) return -1;
  if (p->heads > 0) return p->head_size;
  const Dims& q = g.values[static_cast<std::size_t>(n.inputs[0])].desc.dims;
  return q.rank() == 4 ? q[3] : -1;
}

namespace ops {

namespace {

constexpr std::array<std::string_view, 2> kNormalization = {"NONE", "SOFTMAX"};

// Two dims agree when equal or when either is unknown until run time (-1).
bool agree(std::int64_t a, std::int64_t b) { return a < 0 || b < 0 || a == b; }

void check_common(const AttentionParams& p, std::span<const TensorDesc> in, const std::int64_t (&scores)[4]) {
  if (p.normalization != AttentionNormalizationOp::kNONE && p.normalization != AttentionNormalizationOp::kSOFTMAX)
    invalid("unknown normalization operation " + std::to_string(static_cast<int>(p.normalization)));
  if (!std::isfinite(p.scale)) invalid("scale " + std::to_string(p.scale) + " must be finite");
  if (in.size() == 4) {
    // (the builder's fused nodes of the sequence-major layout may have both: a causal mask written
    // as a constant plus a padding mask)
    if (p.causal && p.heads == 0) invalid("a causal attention takes no mask (TensorRT's rule): drop the mask or causal");
    if (in[3].type != DataType::kBOOL && in[3].type != in[0].type)
      invalid("input 3 (mask) has type " + tname(in[3].type) + "; it must be bool or the query's " + tname(in[0].type));
    if (in[3].dims.rank() != 4)
      invalid("input 3 (mask) has dims " + in[3].dims.str() + "; attention takes a rank-4 mask [batch, heads, queries, keys]");
    for (int d = 0; d < 4; ++d)
      if (in[3].dims[d] != 1 && !agree(in[3].dims[d], scores[d]))
        invalid("input 3 (mask) has dims " + in[3].dims.str() + "; each must be 1 or [batch, query heads, queries, keys] = " +
                Dims{scores[0], scores[1], scores[2], scores[3]}.str() + "'s");
  }
}

void check_types(std::span<const TensorDesc> in) {
  const char* names[] = {"query", "key", "value"};
  require_float(in[0], 0, "attention");
  for (std::size_t i : {1u, 2u})
    if (in[i].type != in[0].type)
      invalid("input " + std::to_string(i) + " (" + names[i] + ") has type " + tname(in[i].type) + "; it must be the query's " +
              tname(in[0].type));
}

// The sequence-major layout (AttentionParams::heads > 0): rows [B, S, width].
std::vector<TensorDesc> infer_rows(const AttentionParams& p, std::span<const TensorDesc> in) {
  const char* names[] = {"query", "key", "value"};
  if (p.kv_heads <= 0 || p.head_size <= 0 || p.heads % p.kv_heads != 0)
    invalid("sequence-major layout: " + std::to_string(p.heads) + " query heads, " + std::to_string(p.kv_heads) +
            " key heads of size " + std::to_string(p.head_size) + " (key heads must divide query heads, sizes be positive)");
  const std::int64_t offsets[3] = {p.q_offset, p.k_offset, p.v_offset};
  const std::int64_t heads[3] = {p.heads, p.kv_heads, p.kv_heads};
  for (std::size_t i = 0; i < 3; ++i) {
    const Dims& d = in[i].dims;
    const std::string what = "input " + std::to_string(i) + " (" + names[i] + ")";
    if (d.rank() != 3) invalid(what + " has dims " + d.str() + "; the sequence-major layout takes rows [batch, sequence, width]");
    if (offsets[i] < 0 || offsets[i] > (std::int64_t{1} << 48))
      invalid(what + ": column offset " + std::to_string(offsets[i]) + " is negative or beyond 2^48");
    const std::int64_t end = offsets[i] + heads[i] * static_cast<std::int64_t>(p.head_size);
    if (d[2] >= 0 && end > d[2])
      invalid(what + " has rows of " + std::to_string(d[2]) + "; its " + std::to_string(heads[i]) + " heads of " +
              std::to_string(p.head_size) + " from column " + std::to_string(offsets[i]) + " need " + std::to_string(end));
  }
  const Dims& q = in[0].dims;
  const Dims& k = in[1].dims;
  const Dims& v = in[2].dims;
  for (int d : {0, 1})
    if (!agree(k[d], v[d])) invalid("input 2 (value) " + v.str() + " must have the key's batch and sequence " + k.str());
  if (!agree(q[0], k[0])) invalid("the query's batch " + std::to_string(q[0]) + " differs from the key's " + std::to_string(k[0]));
  const std::int64_t scores[4] = {q[0], p.heads, q[1], k[1]};
  check_common(p, in, scores);
  return {TensorDesc{in[0].type, Dims{q[0], q[1], static_cast<std::int64_t>(p.heads) * p.head_size}}};
}

std::vector<TensorDesc> infer_op(const AttentionParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  const char* names[] = {"query", "key", "value", "mask"};
  auto input = [&](std::size_t i) { return "input " + std::to_string(i) + " (" + names[i] + ")"; };
  check_types(in);
  if (p.heads > 0) return infer_rows(p, in);
  for (std::size_t i = 0; i < 3; ++i)
    if (in[i].dims.rank() != 4)
      invalid(input(i) + " has dims " + in[i].dims.str() + "; attention takes rank-4 tensors [batch, heads, sequence, head size]");
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
  const std::int64_t scores[4] = {q[0], q[1], q[2], k[2]};
  check_common(p, in, scores);
  return {TensorDesc{in[0].type, q}};
}

json params_to_json(const AttentionParams& p) {
  json j = {{"normalization", enum_name(kNormalization, p.normalization)},
            {"causal", p.causal},
            {"decomposable", p.decomposable},
            {"scale", p.scale}};
  if (p.heads > 0)  // the sequence-major layout: a reader without it refuses the rank-3 inputs
    j["rows"] = {{"heads", p.heads}, {"kv_heads", p.kv_heads}, {"head_size", p.head_size},
                 {"offsets", {p.q_offset, p.k_offset, p.v_offset}}};
  return j;
}

AttentionParams params_from_json(const json& j) {
  AttentionParams p{enum_value<AttentionNormalizationOp>(kNormalization, j.at("normalization")),
                    j.at("causal").get<bool>(), j.at("decomposable").get<bool>(), j.at("scale").get<float>()};
  if (const auto it = j.find("rows"); it != j.end()) {
    p.heads = it->at("heads").get<std::int32_t>();
    p.kv_heads = it->at("kv_heads").get<std::int32_t>();
    p.head_size = it->at("head_size").get<std::int32_t>();
    const auto& o = it->at("offsets");
    if (!o.is_array() || o.size() != 3) invalid("attention: \"rows\".\"offsets\" must be 3 numbers");
    p.q_offset = o[0].get<std::int64_t>();
    p.k_offset = o[1].get<std::int64_t>();
    p.v_offset = o[2].get<std::int64_t>();
    if (p.heads <= 0) invalid("attention: \"rows\".\"heads\" must be positive");
  }
  return p;
}

constexpr std::array<std::string_view, 1> kFloatKeys = {"scale"};

}  // namespace

extern const OpTraits kAttentionOp =
    make_op<AttentionParams, infer_op, params_to_json, params_from_json>("attention", {3, 4}, kFloatKeys);

}  // namespace ops

}  // namespace tensoracle::graph
