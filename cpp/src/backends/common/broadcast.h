// Internal to the backends: broadcast walks over K operands, the same on both backends (the
// CPU's elementwise, the CUDA backend's elementwise and select kernels, which take the plan by
// value). Plain host C++, header only (checks.h).
#pragma once

#include "backends/common/checks.h"
#include "tensoracle/types.h"

namespace tensoracle::backends::common {

// K operands' element strides (0 on broadcast dims) over the output's dims, after dropping
// size-1 dims and merging adjacent dims across which every operand stays contiguous. Equal
// shapes collapse to one dim with strides 1, a scalar operand to stride 0, a bias row to dims
// (rows, n) with strides (n, 1) and (0, 1), a column to (rows, n), (1, 0). Always rank >= 1.
template <int K>
struct BroadcastPlan {
  int rank = 0;
  i64 d[Dims::kMaxRank] = {};
  i64 s[K][Dims::kMaxRank] = {};
};

// Whether each input has out's rank and broadcasts to it (each dim equal or 1).
template <int K>
bool broadcasts(const Dims* const (&ins)[K], const Dims& out) {
  for (int k = 0; k < K; ++k) {
    if (ins[k]->rank() != out.rank()) return false;
    for (int i = 0; i < out.rank(); ++i)
      if ((*ins[k])[i] != out[i] && (*ins[k])[i] != 1) return false;
  }
  return true;
}

// `ins` must broadcast to out (broadcasts()).
template <int K>
BroadcastPlan<K> broadcast_plan(const Dims* const (&ins)[K], const Dims& out) {
  i64 st[K][Dims::kMaxRank];
  for (int k = 0; k < K; ++k) {
    const Dims& in = *ins[k];
    i64 acc = 1;
    for (int i = in.rank() - 1; i >= 0; --i) {
      st[k][i] = in[i] == 1 && out[i] != 1 ? 0 : acc;
      acc *= in[i];
    }
  }
  BroadcastPlan<K> p;
  for (int i = 0; i < out.rank(); ++i) {
    const i64 n = out[i];
    if (n == 1) continue;
    const int last = p.rank - 1;
    bool merge = last >= 0;
    for (int k = 0; k < K && merge; ++k) merge = p.s[k][last] == st[k][i] * n;
    if (merge) {  // the previous dim and this one walk every operand as one
      p.d[last] *= n;
      for (int k = 0; k < K; ++k) p.s[k][last] = st[k][i];
    } else {
      p.d[p.rank] = n;
      for (int k = 0; k < K; ++k) p.s[k][p.rank] = st[k][i];
      ++p.rank;
    }
  }
  if (p.rank == 0) {  // every dim is 1: one element
    p.rank = 1;
    p.d[0] = 1;
  }
  return p;
}

}  // namespace tensoracle::backends::common
