// Op unit: the shuffle layer. How backends run it: backends/cpu/ops/shuffle.cpp and
// backends/cuda/ops/shuffle.cu where they exist. Every layer's unit is listed in
// graph/ops/registry.cpp.
#include <array>

#include "graph/ops/common.h"

namespace tensoracle::graph {

using namespace ops;

std::string perm_text(const Permutation& p, int rank) {
  std::string s = "(";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(p.order[static_cast<std::size_t>(i)]);
  return s + ")";
}

Dims reshape_dims(const Dims& input, const Dims& spec, bool zero_is_placeholder, bool full) {
  if (!full) {
    // Always wrong, whatever the other properties: more than one -1, dims below -1.
    int minus_ones = 0;
    for (auto v : spec) {
      if (v < -1) invalid("reshape_dims " + spec.str() + " has negative dimension " + std::to_string(v));
      minus_ones += v == -1;
    }
    if (minus_ones > 1) invalid("reshape_dims " + spec.str() + " has more than one -1");
    try {
      return reshape_dims(input, spec, zero_is_placeholder, true);
    } catch (const InvalidArgument&) {
      Dims out = spec;  // other properties may still change: resolved when the network is built
      for (int i = 0; i < spec.rank(); ++i)
        if (spec[i] == -1 || (spec[i] == 0 && zero_is_placeholder)) out[i] = i < input.rank() && spec[i] == 0 ? input[i] : -1;
      return out;
    }
  }
  Dims out = spec;
  int infer_at = -1;
  std::int64_t known = 1;
  bool unknown = false;
  for (int i = 0; i < spec.rank(); ++i) {
    std::int64_t v = spec[i];
    if (v == 0 && zero_is_placeholder) {
      if (i >= input.rank())
        invalid("reshape_dims " + spec.str() + ": 0 at index " + std::to_string(i) + " copies a dimension the input " +
                input.str() + " does not have");
      v = input[i];
    } else if (v == -1) {
      if (infer_at >= 0) invalid("reshape_dims " + spec.str() + " has more than one -1");
      infer_at = i;
      continue;
    } else if (v < 0) {
      invalid("reshape_dims " + spec.str() + " has negative dimension " + std::to_string(v));
    }
    out[i] = v;
    if (v < 0) unknown = true;
    else if (__builtin_mul_overflow(known, v, &known)) invalid("reshape_dims " + spec.str() + " hold more elements than 64 bits count");
  }
  std::int64_t volume = input.volume();
  if (infer_at >= 0) {
    if (volume < 0 || unknown) {
      out[infer_at] = -1;
    } else {
      if (known == 0 || volume % known != 0)
        invalid("reshape_dims " + spec.str() + " cannot hold the " + std::to_string(volume) + " elements of " + input.str());
      out[infer_at] = volume / known;
    }
  } else if (volume >= 0 && !unknown && volume != known) {
    invalid("reshape_dims " + spec.str() + " hold " + std::to_string(known) + " elements but the input " +
            input.str() + " has " + std::to_string(volume));
  }
  return out;
}

namespace ops {

namespace {

void check_perm(const Permutation& p, int rank, const char* what) {
  std::array<bool, Dims::kMaxRank> seen{};
  for (int i = 0; i < rank; ++i) {
    int v = p.order[static_cast<std::size_t>(i)];
    if (v < 0 || v >= rank || seen[static_cast<std::size_t>(v)])
      invalid(std::string(what) + " " + perm_text(p, rank) + " is not a permutation of 0.." +
              std::to_string(rank - 1));
    seen[static_cast<std::size_t>(v)] = true;
  }
}

Dims permute(const Dims& d, const Permutation& p) {
  Dims out = d;
  for (int i = 0; i < d.rank(); ++i) out[i] = d[p.order[static_cast<std::size_t>(i)]];
  return out;
}

json perm_json(const Permutation& p) { return std::vector<int>(p.order.begin(), p.order.end()); }
Permutation perm_of(const json& j) {
  auto v = j.get<std::vector<int>>();
  if (v.size() != static_cast<std::size_t>(Dims::kMaxRank)) throw CorruptEngineError("[engine] bad permutation in the plan");
  Permutation p;
  std::copy(v.begin(), v.end(), p.order.begin());
  return p;
}

std::vector<TensorDesc> infer_op(const ShuffleParams& p, std::span<const TensorDesc> in, std::span<const InputFacts> facts, bool full) {
  int rank = in[0].dims.rank();
  check_perm(p.first_transpose, rank, "first_transpose");
  Dims d = permute(in[0].dims, p.first_transpose);
  if (in.size() > 1) {
    // Input 1 (a shape tensor) gives the reshape dims at run time; they override
    // reshape_dims. Its length is the output's rank; its values, when shape inference
    // knows them, the dims.
    const TensorDesc& s = in[1];
    if (!is_shape_tensor_type(s.type) || s.dims.rank() != 1 || s.dims[0] < 0 || s.dims[0] > Dims::kMaxRank)
      invalid("input 1 (the reshape dims) is " + tname(s.type) + s.dims.str() +
              "; it must be a 1-D int32 or int64 shape tensor of known length <= 8");
    if (facts.size() > 1 && facts[1].values) {
      d = reshape_dims(d, Dims(std::span<const std::int64_t>(*facts[1].values)), p.zero_is_placeholder, full);
    } else {
      std::vector<std::int64_t> unknown(static_cast<std::size_t>(s.dims[0]), -1);
      d = Dims(std::span<const std::int64_t>(unknown));
    }
  } else if (p.reshape_dims) {
    d = reshape_dims(d, *p.reshape_dims, p.zero_is_placeholder, full);
  }
  check_perm(p.second_transpose, d.rank(), "second_transpose");
  return {{in[0].type, permute(d, p.second_transpose)}};
}

json params_to_json(const ShuffleParams& p) {
  return {{"first_transpose", perm_json(p.first_transpose)},
          {"reshape_dims", p.reshape_dims ? dims_json(*p.reshape_dims) : json(nullptr)},
          {"second_transpose", perm_json(p.second_transpose)},
          {"zero_is_placeholder", p.zero_is_placeholder}};
}

ShuffleParams params_from_json(const json& j) {
  ShuffleParams p;
  p.first_transpose = perm_of(j.at("first_transpose"));
  if (!j.at("reshape_dims").is_null()) p.reshape_dims = dims_of(j.at("reshape_dims"));
  p.second_transpose = perm_of(j.at("second_transpose"));
  p.zero_is_placeholder = j.at("zero_is_placeholder").get<bool>();
  return p;
}

}  // namespace

// Optional reshape dims tensor.
extern const OpTraits kShuffleOp =
    make_op<ShuffleParams, infer_op, params_to_json, params_from_json>("shuffle", {1, 2});

}  // namespace ops

}  // namespace tensoracle::graph
