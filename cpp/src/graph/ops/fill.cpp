// Op unit: the fill layer. How backends run it: backends/cpu/ops/fill.cpp and
// backends/cuda/ops/fill.cu. Every layer's unit is listed in graph/ops/registry.cpp.
#include <array>
#include <cmath>
#include <string>
#include <string_view>

#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

namespace {

constexpr std::array<std::string_view, 3> kOps = {"LINSPACE", "RANDOM_UNIFORM", "RANDOM_NORMAL"};

std::vector<TensorDesc> infer_op(const FillParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  const bool linspace = p.op == FillOperation::kLINSPACE;
  if (!linspace && p.op != FillOperation::kRANDOM_UNIFORM && p.op != FillOperation::kRANDOM_NORMAL)
    invalid("unknown fill operation " + std::to_string(static_cast<int>(p.op)));
  if (!is_float(p.to) && !(linspace && is_int(p.to)))
    invalid("output type " + tname(p.to) + ": " + std::string(kOps[static_cast<std::size_t>(p.op)]) + " makes " +
            (linspace ? "float32, float16, bfloat16, int32 or int64" : "float32, float16 or bfloat16"));
  for (int k = 0; k < p.dims.rank(); ++k)
    if (p.dims[k] < 0) invalid("dims " + p.dims.str() + " must all be known (0 or more)");
  if (in.size() == 1)
    invalid("alpha (input 1) is set but beta (input 2) is not: set both as tensors, or neither");
  if (in.empty()) {
    if (!std::isfinite(p.alpha) || !std::isfinite(p.beta)) invalid("alpha and beta must be finite");
    if (linspace && p.dims.rank() > 1)
      invalid("linspace of rank " + std::to_string(p.dims.rank()) + " takes one step per dim: set beta as a [" +
              std::to_string(p.dims.rank()) + "] tensor (input 2)");
    if (p.op == FillOperation::kRANDOM_UNIFORM && !(p.alpha <= p.beta))
      invalid("a uniform fill needs alpha (the low end) <= beta (the high end)");
  } else {
    for (int i = 0; i < 2; ++i)
      if (in[static_cast<std::size_t>(i)].type != p.to)
        invalid(std::string(i == 0 ? "alpha (input 1)" : "beta (input 2)") + " has type " + tname(in[static_cast<std::size_t>(i)].type) +
                "; it must be the output's " + tname(p.to));
    if (in[0].dims.rank() != 0) invalid("alpha (input 1) must be 0-D, not " + in[0].dims.str());
    const Dims& b = in[1].dims;
    if (linspace ? (b.rank() != 1 || (b[0] >= 0 && b[0] != p.dims.rank())) : b.rank() != 0)
      invalid("beta (input 2) " + b.str() + " must be " + (linspace ? "[" + std::to_string(p.dims.rank()) + "] (one step per dim)" : std::string("0-D")));
  }
  return {{p.to, p.dims}};
}

json params_to_json(const FillParams& p) {
  return {{"op", enum_name(kOps, p.op)}, {"dims", dims_json(p.dims)}, {"alpha", p.alpha}, {"beta", p.beta},
          {"to", type_name(p.to)}};
}

FillParams params_from_json(const json& j) {
  return FillParams{enum_value<FillOperation>(kOps, j.at("op")), dims_of(j.at("dims")), j.at("alpha").get<double>(),
                    j.at("beta").get<double>(), type_of(j.at("to"))};
}

constexpr std::array<std::string_view, 2> kFloatKeys = {"alpha", "beta"};

}  // namespace

extern const OpTraits kFillOp = make_op<FillParams, infer_op, params_to_json, params_from_json>("fill", {0, 2}, kFloatKeys);

}  // namespace ops

}  // namespace tensoracle::graph
