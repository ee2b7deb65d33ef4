// The CUDA backend's reduce-view helpers that are not templates or inline (reduce_util.cuh).
#include "backends/cuda/reduce_util.cuh"

namespace tensoracle::cuda::reduction {

Plan make_plan(int rank, const i64* dims, const bool* reduced) {
  int m = 0;
  i64 size[kMaxGroups];
  bool red[kMaxGroups];
  for (int i = 0; i < rank; ++i) {
    if (dims[i] == 1) continue;
    if (m > 0 && red[m - 1] == reduced[i]) {
      size[m - 1] *= dims[i];
    } else {
      size[m] = dims[i];
      red[m] = reduced[i];
      ++m;
    }
  }
  bool any_reduced = false;
  for (int g = 0; g < m; ++g) any_reduced |= red[g];
  if (!any_reduced) {  // only size-1 dims are reduced: rows of one element
    size[m] = 1;
    red[m] = true;
    ++m;
  }
  i64 st[kMaxGroups];
  i64 stride = 1;
  for (int g = m - 1; g >= 0; --g) {
    st[g] = stride;
    stride *= size[g];
  }
  Plan p;
  const bool inner_reduced = red[m - 1];
  const i64 inner = size[m - 1];
  p.kin = inner_reduced ? 1 : inner;
  p.rin = inner_reduced ? inner : 1;
  i64 kcount = 1;
  for (int g = 0; g < m - 1; ++g) {
    if (red[g]) {
      p.rs[p.nr] = size[g];
      p.rst[p.nr] = st[g];
      p.rcount *= size[g];
      ++p.nr;
    } else {
      p.ks[p.nk] = size[g];
      p.kst[p.nk] = st[g];
      kcount *= size[g];
      ++p.nk;
    }
  }
  p.count = p.rcount * p.rin;
  p.nout = kcount * p.kin;
  return p;
}

}  // namespace tensoracle::cuda::reduction
