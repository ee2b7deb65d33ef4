// Internal: type and shape inference for every layer kind — one function used by the network
// (dims may be -1), the builder (profile bounds) and the runtime (concrete shapes). Each kind's
// rules are in its op unit (graph/ops/<layer>.cpp, graph/op.h); infer() dispatches to them.
#pragma once

#include <cstdint>
#include <optional>
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

// What inference may know about an input beyond its type and dims: whether it is a constant,
// and the values of a shape tensor (a small int32/int64 tensor known on the host: constants,
// add_shape outputs and what is computed from them) when they are known.
struct InputFacts {
  bool is_constant = false;
  std::optional<std::vector<std::int64_t>> values;
};

// Shape tensors hold at most this many elements.
inline constexpr std::int64_t kMaxShapeTensorElements = 64;
bool is_shape_tensor_type(DataType t) noexcept;
// What shape inference tracks the values of (shape tensors, and the small bool tensors of the
// comparisons and selects that compute them: Equal -> Where chains of exported models). Values
// are held as int64 (bool: 0 or 1).
bool is_host_value_type(DataType t) noexcept;
// Bytes of a tensor of type `t` and dims `d`; nullopt when a dim is unknown (-1) or the count
// overflows 64 bits. Every size taken from untrusted dims goes through this.
std::optional<std::uint64_t> byte_size(DataType t, const Dims& d) noexcept;
// The values of int32/int64/bool weights of at most kMaxShapeTensorElements elements; else nullopt.
std::optional<std::vector<std::int64_t>> shape_values_of(const Weights& w);

// Output descriptions of a layer with `params` applied to `inputs`. Throws InvalidArgument with
// a message that names the input or parameter but not the layer (the caller prefixes it).
// `full` = false skips the checks TensorRT defers to build time, so that a layer's properties
// can be set in any order: a per-channel scale against the channel axis, a shuffle's reshape
// against the input's volume (its unresolved dims are then -1).
std::vector<TensorDesc> infer(const LayerParams& params, std::span<const TensorDesc> inputs,
                              std::span<const InputFacts> facts, bool full = true);

// The fewest and most inputs a layer kind takes (max -1: any number); infer() refuses others.
struct InputArity {
  int min, max;
};
InputArity input_arity(LayerType type);

// Broadcast of two equal-rank dims (TensorRT's rule: equal, or one of them 1; -1 unknown).
// Throws InvalidArgument describing the mismatch.
Dims broadcast_dims(const Dims& a, const Dims& b);

// Resolves a shuffle's reshape dims for `input` (handles 0 and -1). Throws InvalidArgument; with
// `full` = false, a volume mismatch or a 0 beyond the input's rank gives -1 dims instead.
Dims reshape_dims(const Dims& input, const Dims& spec, bool zero_is_placeholder, bool full = true);

std::string perm_text(const Permutation& p, int rank);

// The pre padding a window layer (convolution, pooling; deconvolution when `transposed`) applies
// to each spatial dimension of input `x`, for every PaddingMode (SAME: computed from the sizes).
// Defaults: stride and dilation 1, padding 0.
Dims window_pre_padding(const Dims& x, const Dims& kernel, const Dims& stride, const Dims& pre, const Dims& post,
                        const Dims& dilation, PaddingMode mode, bool transposed);

// TensorRT's default axis for softmax and concatenation: rank - 3, or 0 below rank 3.
int default_axis(int rank);
int softmax_axis(const SoftmaxParams& p, int rank);
int concat_axis(const ConcatenationParams& p, int rank);

struct Graph;
struct Node;

// The head size of attention node `n` (AttentionParams): its head_size in the sequence-major
// layout, else the query's last dim; -1 where unknown until run time or `n` is no attention.
std::int64_t attention_head_size(const Graph& g, const Node& n);

// A parsed einsum equation: one letter string per operand and for the output.
struct EinsumSpec {
  std::vector<std::string> operands;
  std::string output;
};
EinsumSpec parse_einsum(const std::string& equation, std::size_t inputs);

}  // namespace tensoracle::graph
