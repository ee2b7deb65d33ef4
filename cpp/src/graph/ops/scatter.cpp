// Op unit: the scatter layer. How backends run it: backends/cpu/ops/scatter.cpp and
// backends/cuda/ops/scatter.cu. Every layer's unit is listed in graph/ops/registry.cpp.
#include <array>
#include <string_view>

#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

namespace {

constexpr std::array<std::string_view, 2> kModes = {"ELEMENT", "ND"};
constexpr std::array<std::string_view, 5> kReductions = {"NONE", "SUM", "PROD", "MAX", "MIN"};

// Dims a and b agree where both are known.
bool agree(std::int64_t a, std::int64_t b) { return a < 0 || b < 0 || a == b; }

std::vector<TensorDesc> infer_op(const ScatterParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  const Dims &D = in[0].dims, &I = in[1].dims, &U = in[2].dims;
  if (!is_int(in[1].type)) invalid("indices (input 1) have type " + tname(in[1].type) + "; they must be int32 or int64");
  if (in[2].type != in[0].type)
    invalid("updates (input 2) have type " + tname(in[2].type) + " but data (input 0) has " + tname(in[0].type));
  const int r = D.rank();
  if (r == 0) invalid("data (input 0) must have rank 1 or more");
  if (static_cast<int>(p.reduction) < 0 || static_cast<int>(p.reduction) > static_cast<int>(ScatterReduction::kMIN))
    invalid("unknown scatter reduction " + std::to_string(static_cast<int>(p.reduction)));
  if (p.reduction != ScatterReduction::kNONE && !is_float(in[0].type) && !is_int(in[0].type))
    invalid("a scatter reduction takes float or int32/int64 data, not " + tname(in[0].type));
  if (p.mode == ScatterMode::kELEMENT) {
    const int axis = normalize_axis(p.axis, r, "axis");
    if (I.rank() != r || U.rank() != r)
      invalid("ELEMENT mode: indices " + I.str() + " and updates " + U.str() + " must have data's rank " + std::to_string(r));
    for (int k = 0; k < r; ++k) {
      if (!agree(I[k], U[k])) invalid("ELEMENT mode: indices " + I.str() + " and updates " + U.str() + " must have one shape");
      if (k != axis && I[k] >= 0 && D[k] >= 0 && I[k] > D[k])
        invalid("ELEMENT mode: indices " + I.str() + " exceed data " + D.str() + " in dim " + std::to_string(k));
    }
  } else if (p.mode == ScatterMode::kND) {
    const int q = I.rank();
    if (q < 1) invalid("ND mode: indices must have rank 1 or more");
    const std::int64_t depth = I[q - 1];
    if (depth < 0) invalid("ND mode: the last dim of indices " + I.str() + " must be known");
    if (depth < 1 || depth > r) invalid("ND mode: the last dim of indices " + I.str() + " must be in 1.." + std::to_string(r));
    const int want = q - 1 + r - static_cast<int>(depth);
    if (U.rank() != want) invalid("ND mode: updates " + U.str() + " must have rank " + std::to_string(want));
    for (int k = 0; k < q - 1; ++k)
      if (!agree(U[k], I[k])) invalid("ND mode: updates " + U.str() + " must start with indices' dims " + I.str());
    for (int k = static_cast<int>(depth); k < r; ++k)
      if (!agree(U[q - 1 + k - static_cast<int>(depth)], D[k]))
        invalid("ND mode: updates " + U.str() + " must end with data's dims from " + std::to_string(depth) + " " + D.str());
  } else {
    invalid("unknown scatter mode " + std::to_string(static_cast<int>(p.mode)));
  }
  return {in[0]};
}

json params_to_json(const ScatterParams& p) {
  return {{"mode", enum_name(kModes, p.mode)}, {"axis", p.axis}, {"reduction", enum_name(kReductions, p.reduction)}};
}

ScatterParams params_from_json(const json& j) {
  return ScatterParams{enum_value<ScatterMode>(kModes, j.at("mode")), j.at("axis").get<std::int32_t>(),
                       enum_value<ScatterReduction>(kReductions, j.at("reduction"))};
}

}  // namespace

extern const OpTraits kScatterOp = make_op<ScatterParams, infer_op, params_to_json, params_from_json>("scatter", {3, 3});

}  // namespace ops

}  // namespace tensoracle::graph
