// Internal: the CPU backend (cpu_backend.cpp), the one every process has. Besides running CPU
// engines it evaluates, on the host, what the builder and the runtime compute before any
// device runs: constant folding and shape tensors (also for CUDA engines).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "graph/graph.h"
#include "tensoracle/types.h"

namespace tensoracle::cpu {

const backends::Backend& cpu_backend();

// The OpenBLAS the kernels run ("OpenBLAS 0.3.21"): part of a CPU engine's cache identity.
std::string openblas_version();

// Evaluates node `n` of `g` on the CPU with constant inputs only; the result as owned weights.
Weights evaluate_constant_node(const graph::Graph& g, const graph::Node& n);

// The shape-tensor evaluator of graph::infer_shapes: runs node `n` on the CPU from the values
// of its inputs (all shape tensors).
std::vector<std::int64_t> evaluate_shape_node(const graph::Graph& g, const graph::Node& n,
                                              std::span<const graph::TensorDesc> inputs, const graph::ShapeValues& values,
                                              const graph::TensorDesc& out);

}  // namespace tensoracle::cpu
