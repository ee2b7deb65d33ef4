// The CPU backend's reduce-view helpers that are not inline (reduce_util.h).
#include "backends/cpu/reduce_util.h"

#include <algorithm>
#include <cstdint>

namespace tensoracle::cpu::reduction {

i64 min_items(i64 work) { return std::max<i64>(1, kParallelWork / std::max<i64>(1, work)); }

Layout make_layout(int rank, const i64* dims, const bool* reduced) {
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
  Layout L;
  i64 stride = 1;
  i64 st[kMaxGroups];
  for (int g = m - 1; g >= 0; --g) {
    st[g] = stride;
    stride *= size[g];
  }
  L.inner_reduced = red[m - 1];
  L.inner = size[m - 1];
  for (int g = 0; g < m - 1; ++g) {
    if (red[g]) {
      L.rs[L.nr] = size[g];
      L.rst[L.nr] = st[g];
      L.rcount *= size[g];
      ++L.nr;
    } else {
      L.ks[L.nk] = size[g];
      L.kst[L.nk] = st[g];
      L.kcount *= size[g];
      ++L.nk;
    }
  }
  L.reduced = L.rcount * (L.inner_reduced ? L.inner : 1);
  return L;
}

}  // namespace tensoracle::cpu::reduction
