// Internal: a run's buffers (backend.h) as both backends' kernels take them (checks.h), for
// their layer files' entries (cpu/op_kernel.h, cuda/op_kernel.h).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "backends/backend.h"
#include "backends/common/checks.h"
#include "tensoracle/network.h"

namespace tensoracle::backends::common {

inline TensorRef ref(const Buffer& b) { return {b.data, b.type, b.dims}; }

// The first `count` buffers of `in` (a node's own inputs, before its epilogue operands).
inline std::vector<TensorRef> refs(std::span<const Buffer> in, std::size_t count) {
  std::vector<TensorRef> r;
  for (std::size_t i = 0; i < count; ++i) r.push_back(ref(in[i]));
  return r;
}

// The node's own inputs of an entry's call (its `node` and `in`) as the kernels take them.
template <class Call>
std::vector<TensorRef> input_refs(const Call& call) {
  return refs(call.in, call.node.inputs.size());
}

// Slice `p` with the start, size and stride that its shape-tensor inputs give
// (slice_input_position), each read from its buffer by `dims_of`.
template <class DimsOf>
SliceParams slice_bounds(const SliceParams& p, std::span<const Buffer> in, DimsOf&& dims_of) {
  SliceParams q = p;
  for (int index : {kSliceStart, kSliceSize, kSliceStride}) {
    const int pos = slice_input_position(p, index);
    if (pos < 0) continue;
    (index == kSliceStart ? q.start : index == kSliceSize ? q.size : q.stride) = dims_of(in[static_cast<std::size_t>(pos)]);
  }
  return q;
}

}  // namespace tensoracle::backends::common
