// Internal to the backends: the view of a reduction's input that reduce, softmax and
// normalization share on both backends (backends/cpu/reduce_util.h, backends/cuda/reduce_util.cuh),
// and the host-side checks of reduce and normalization. Plain host C++ (checks.h).
//
// The view: dims of size 1 dropped, adjacent dims of the same kind (reduced or kept) merged.
// The last merged group decides the loop: reduced last (rows) or kept last (columns).
#pragma once

#include "backends/common/checks.h"
#include "tensoracle/network.h"

namespace tensoracle::backends::common {

// The view of a normalization has one more dim than its input (the split channels).
constexpr int kMaxGroups = Dims::kMaxRank + 1;

// dims (contiguous) split into kept and reduced groups. The last group is `inner` elements
// long and contiguous; the other kept groups (k*) and reduced groups (r*) carry their strides.
// Outputs (one per kept position) are numbered row-major over the kept groups.
struct ReduceLayout {
  bool inner_reduced = true;
  i64 inner = 1;
  int nk = 0, nr = 0;
  i64 ks[kMaxGroups] = {}, kst[kMaxGroups] = {};
  i64 rs[kMaxGroups] = {}, rst[kMaxGroups] = {};
  i64 kcount = 1;   // product of ks (blocks of `inner` outputs when inner is kept)
  i64 rcount = 1;   // product of rs (rows of `inner` when inner is reduced)
  i64 reduced = 1;  // reduced elements per output
};

// `reduced[i]` says whether dim i is reduced; every dim must be >= 1.
ReduceLayout reduce_layout(int rank, const i64* dims, const bool* reduced);

// A reduce's checks: the volumes of x and out (nx, no), the axes, the output's type and dims;
// and the view (empty when nx is 0: an empty dim is reduced, every output is the identity).
struct ReduceShape {
  i64 nx = 0, no = 0;
  ReduceLayout layout;
};
ReduceShape check_reduce(const Fail& fail, const ReduceParams& p, const TensorRef& x, const TensorRef& out);

// A normalization's checks of x, out and the parameters; returns x's volume.
i64 check_normalization(const Fail& fail, const NormalizationParams& p, const TensorRef& x, const TensorRef& out);

// Checks the scale or the bias (`name`) of a normalization: x's rank, broadcasting into x
// (each dim 1 or x's), a float type; fills its strides over x's dims (0 where it broadcasts).
// Returns its volume.
i64 check_normalization_operand(const Fail& fail, const TensorRef& t, const Dims& x, const char* name, i64* strides);

// A layer that runs along one axis of its input (cumulative: its axis; LRN: the channels, dim
// 1): the input is [outer, dim, inner].
struct AxisShape {
  i64 n = 0;
  i64 outer = 1, dim = 1, inner = 1;
};
AxisShape check_cumulative(const Fail& fail, const CumulativeParams& p, const TensorRef& x, const TensorRef& out);
AxisShape check_lrn(const Fail& fail, const LrnParams& p, const TensorRef& x, const TensorRef& out);

}  // namespace tensoracle::backends::common
