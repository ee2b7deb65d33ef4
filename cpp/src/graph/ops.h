// Internal: type and shape inference for every layer kind — one function used by the network
// (dims may be -1), the builder (profile bounds) and the runtime (concrete shapes).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "tensoracle/network.h"

namespace tensoracle::graph {

struct TensorDesc {
  DataType type = DataType::kFLOAT;
  Dims dims;
  bool operator==(const TensorDesc&) const = default;
};

// What inference may know about a constant input beyond its type and dims.
struct InputFacts {
  bool is_constant = false;
};

// Output descriptions of a layer with `params` applied to `inputs`. Throws InvalidArgument with
// a message that names the input or parameter but not the layer (the caller prefixes it).
std::vector<TensorDesc> infer(const LayerParams& params, std::span<const TensorDesc> inputs,
                              std::span<const InputFacts> facts);

// Number of inputs a layer kind takes.
int input_count(LayerType type) noexcept;

// Broadcast of two equal-rank dims (TensorRT's rule: equal, or one of them 1; -1 unknown).
// Throws InvalidArgument describing the mismatch.
Dims broadcast_dims(const Dims& a, const Dims& b);

// Resolves a shuffle's reshape dims for `input` (handles 0 and -1). Throws InvalidArgument.
Dims reshape_dims(const Dims& input, const Dims& spec, bool zero_is_placeholder);

std::string perm_text(const Permutation& p, int rank);

}  // namespace tensoracle::graph
