// Internal: the builder's optimisation passes — each a function from graph to graph, each
// switchable, each logging what it rewrote (node and layer names) into a PassLog.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace tensoracle::builder {

struct PassLog {
  std::string pass;
  std::vector<std::string> changes;  // one line per rewrite
};

// Removes nodes whose results reach no network output.
PassLog dead_code(graph::Graph& g);

// Evaluates nodes whose inputs are all constants and replaces their outputs by constants; also
// a Gather (constant indices) or static Slice of a Shape node's output whose picked dims are
// all known at build time (the shape's other dims may be unknown).
// Dequantize nodes are kept (so quantized weights stay quantized for Q/DQ-aware kernels), as
// are nodes whose result would exceed `max_bytes`.
using ConstantEvaluator = std::function<Weights(const graph::Graph&, const graph::Node&)>;
PassLog constant_fold(graph::Graph& g, const ConstantEvaluator& evaluate, std::uint64_t max_bytes = 64u << 20);

// Folds Q/DQ pairs into matrix multiplies: a product of dequantize(a_q, a_scale) and
// dequantize(b_q, b_scale) — both int8 or both fp8, per-tensor float32 scales, the first operand
// not transposed — becomes one quantized matrix multiply reading a_q, b_q and the scales
// (graph::Node::folded_dequantize), which backends run as an integer or fp8 GEMM. The second
// operand is stored transposed ([N, K], op1 = TRANSPOSE, the layout tensor-core GEMMs take):
// a constant [K, N] matrix is transposed here; a computed one must already be. Dequantize
// nodes left without readers go with the next dead_code pass.
PassLog fold_qdq(graph::Graph& g);

// Fuses attention written as layers into one attention node (AttentionParams):
//   S = Q · Kᵀ   (a matrix multiply, op1 TRANSPOSE; Q [B, N, Sq, H], K [B, Nkv, Skv, H], Nkv N or 1)
//   S = S * c, c * S or S / c   (optional; c a one-element constant: the node's scale)
//   S = S + M or M + S          (optional; M of rank 4 and the scores' type: the node's mask)
//   P = softmax(S) over the last axis;   O = P · V   (V with K's dims)
// the scaling and the mask in either order, every intermediate read once and no network
// output. Also absorbed: one-element scalings of Q and of K (exporters put sqrt(1/sqrt(H)) on
// each) and Where(IsNaN(P), 0, P) after the softmax (the kernels give fully masked rows as
// zeros already). Where Q, K and V come from rows [B, S, N·H] through shuffles that split the
// heads (a reshape to [B, S, N, H] and the transpose to [B, N, S, H]; [B, N, H, S] for a K
// given transposed, the product's op1 NONE) and the output goes back to [B, S, N·H] through
// the inverse shuffles, those shuffles go too: the node reads and writes the rows (the
// sequence-major layout, AttentionParams::heads). Such a node whose mask is a causal constant
// (0 at and below the diagonal, -inf or a 16-bit type's lowest above), alone or added to
// another mask, becomes causal with the other mask (or none). The attention node takes the final
// product's place and name; the layers it absorbed are listed in Node::absorbed (tensoracle
// inspect shows them as fused).
// `accept` sees each candidate (the attention node as it would be) and may refuse it.
using AttentionPolicy = std::function<bool(const graph::Graph&, const graph::Node&)>;
PassLog fuse_attention(graph::Graph& g, const AttentionPolicy& accept);

// Q, K and V computed from one input by three products with constant weights (x · W, each
// plus a constant bias or none) and read only by an attention node of the sequence-major
// layout (AttentionParams::heads): one product with the weights side by side (and one bias
// add) replaces them, and the attention reads its three parts by column offsets. Runs after
// fuse_attention.
PassLog merge_projections(graph::Graph& g);

// The erf form of GELU written out as layers, x * 0.5 * (1 + erf(x / sqrt(2))) (the scalings in
// either order, / sqrt(2) or * 1/sqrt(2); what exporters and hand-written graphs produce), becomes
// one GELU_ERF activation on x.
PassLog fuse_gelu(graph::Graph& g);

// TensorRT's weak typing (BuilderFlag.FP16 / BF16): where `to` is kHALF or kBF16, nodes that
// compute in float32 compute in `to` instead — their float32 inputs converted (constants once,
// at build time; computed values by a cast node, once per value) — except the numerically
// sensitive kinds, which stay float32 and read float32 (a cast back where their input was
// lowered): reductions, normalizations, cumulative sums, top-k, and what names its type itself
// (cast, quantize, dequantize, fill, plugins, shape). A scale's coefficients stay float32 (its
// rule). The network's inputs and outputs keep their types (an output a lowered node makes gets a
// cast back). `accept` sees each lowered node (its inputs already in `to`) and may keep it
// float32 (a backend without that kernel in `to`). kFLOAT: nothing changes.
using LoweringPolicy = std::function<bool(const graph::Graph&, const graph::Node&)>;
PassLog lower_precision(graph::Graph& g, DataType to, const LoweringPolicy& accept);

// Fuses chains of pointwise layers (activation, cast, elementwise whose other operand
// broadcasts into the result, quantize with a per-tensor constant scale) into the node
// producing their input, when that input has no
// other reader, is not a network output, and `can_fuse` agrees.
using FusionPolicy = std::function<bool(const graph::Graph&, const graph::Node&, const graph::EpilogueOp&)>;
PassLog fuse_pointwise(graph::Graph& g, const FusionPolicy& can_fuse);

}  // namespace tensoracle::builder
