// Op unit: the gather layer. How backends run it: backends/cpu/ops/gather.cpp and
// backends/cuda/ops/gather.cu where they exist. Every layer's unit is listed in
// graph/ops/registry.cpp.
#include <array>
#include <string_view>

#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

namespace {

constexpr std::array<std::string_view, 3> kGather = {"DEFAULT", "ELEMENT", "ND"};

std::vector<TensorDesc> infer_op(const GatherParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  const Dims& d = in[0].dims;
  const Dims& idx = in[1].dims;
  if (!is_int(in[1].type)) invalid("input 1 (indices) has type " + tname(in[1].type) + "; indices are int32 or int64");
  int rank = d.rank();
  std::vector<std::int64_t> out;
  switch (p.mode) {
    case GatherMode::kDEFAULT: {
      if (rank == 0) invalid("input 0 (data) is a scalar; gather needs rank >= 1");
      int axis = p.axis < 0 ? p.axis + rank : p.axis;
      if (axis < 0 || axis >= rank) invalid("axis " + std::to_string(p.axis) + " is out of range for rank " + std::to_string(rank));
      if (p.num_elementwise_dims > 1) invalid("num_elementwise_dims must be 0 or 1 in mode DEFAULT");
      int nb = p.num_elementwise_dims;
      if (nb == 1 && (idx.rank() < 1 || axis < 1)) invalid("num_elementwise_dims 1 needs indices of rank >= 1 and axis >= 1");
      if (nb == 1 && idx[0] >= 0 && d[0] >= 0 && idx[0] != d[0])
        invalid("num_elementwise_dims 1: dimension 0 of data " + d.str() + " and indices " + idx.str() + " must match");
      for (int i = 0; i < axis; ++i) out.push_back(d[i]);
      for (int i = nb; i < idx.rank(); ++i) out.push_back(idx[i]);
      for (int i = axis + 1; i < rank; ++i) out.push_back(d[i]);
      break;
    }
    case GatherMode::kELEMENT: {
      int axis = p.axis < 0 ? p.axis + rank : p.axis;
      if (axis < 0 || axis >= rank) invalid("axis " + std::to_string(p.axis) + " is out of range for rank " + std::to_string(rank));
      if (idx.rank() != rank)
        invalid("input 1 (indices) has dims " + idx.str() + "; mode ELEMENT needs the data's rank " + std::to_string(rank));
      for (int i = 0; i < rank; ++i)
        if (i != axis && idx[i] >= 0 && d[i] >= 0 && idx[i] > d[i])
          invalid("input 1 (indices) dims " + idx.str() + " exceed the data's " + d.str() + " in dimension " + std::to_string(i));
      out = idx.vec();
      break;
    }
    case GatherMode::kND: {
      int nb = p.num_elementwise_dims;
      if (idx.rank() < 1) invalid("input 1 (indices) must have rank >= 1 in mode ND");
      std::int64_t last = idx[idx.rank() - 1];
      if (last < 0) invalid("input 1 (indices): its last dimension must be static in mode ND");
      if (nb < 0 || nb >= idx.rank() || nb + last > rank)
        invalid("indices " + idx.str() + " with num_elementwise_dims " + std::to_string(nb) + " do not fit data " + d.str());
      for (int i = 0; i < nb; ++i)
        if (idx[i] >= 0 && d[i] >= 0 && idx[i] != d[i])
          invalid("batch dimension " + std::to_string(i) + " differs between data " + d.str() + " and indices " + idx.str());
      for (int i = 0; i < idx.rank() - 1; ++i) out.push_back(idx[i]);
      for (int i = nb + static_cast<int>(last); i < rank; ++i) out.push_back(d[i]);
      break;
    }
    default: invalid("unknown gather mode " + std::to_string(static_cast<int>(p.mode)));
  }
  if (out.size() > static_cast<std::size_t>(Dims::kMaxRank)) invalid("the output would have rank above 8");
  return {{in[0].type, Dims(std::span<const std::int64_t>(out))}};
}

json params_to_json(const GatherParams& p) {
  return {{"axis", p.axis}, {"mode", enum_name(kGather, p.mode)}, {"num_elementwise_dims", p.num_elementwise_dims}};
}

GatherParams params_from_json(const json& j) {
  return GatherParams{j.at("axis").get<std::int32_t>(), enum_value<GatherMode>(kGather, j.at("mode")),
                      j.at("num_elementwise_dims").get<std::int32_t>()};
}

}  // namespace

extern const OpTraits kGatherOp =
    make_op<GatherParams, infer_op, params_to_json, params_from_json>("gather", {2, 2});

}  // namespace ops

}  // namespace tensoracle::graph
