// The CUDA backend's reduce-view helpers that are not templates or inline (reduce_util.cuh).
#include "backends/cuda/reduce_util.cuh"

namespace tensoracle::cuda::reduction {

Plan plan_of(const backends::common::ReduceLayout& L) {
  Plan p;
  p.nk = L.nk;
  p.nr = L.nr;
  for (int g = 0; g < L.nk; ++g) {
    p.ks[g] = L.ks[g];
    p.kst[g] = L.kst[g];
  }
  for (int g = 0; g < L.nr; ++g) {
    p.rs[g] = L.rs[g];
    p.rst[g] = L.rst[g];
  }
  p.kin = L.inner_reduced ? 1 : L.inner;
  p.rin = L.inner_reduced ? L.inner : 1;
  p.rcount = L.rcount;
  p.count = L.reduced;
  p.nout = L.kcount * p.kin;
  return p;
}

Plan make_plan(int rank, const i64* dims, const bool* reduced) {
  return plan_of(backends::common::reduce_layout(rank, dims, reduced));
}

}  // namespace tensoracle::cuda::reduction
