// The window layers' geometry both backends plan from (window_geometry.h).
#include "backends/common/window_geometry.h"

namespace tensoracle::backends::common {

i64 dim_or(const Dims& d, int i, i64 def) { return d.rank() == 0 ? def : d[i]; }

WindowGeo window_geo(const Dims& x, const Dims& out, const Dims& window, const Dims& stride, const Dims& pre,
                     const Dims& post, const Dims& dilation, PaddingMode mode, bool transposed, i64 groups) {
  constexpr int kS = kWindowSpatial;
  WindowGeo g;
  const int n = window.rank();
  const Dims eff = graph::window_pre_padding(x, window, stride, pre, post, dilation, mode, transposed);
  g.N = x[0];
  g.C = x[1];
  g.K = out[1];
  g.groups = groups;
  g.Cg = g.C / groups;
  g.Kg = g.K / groups;
  g.same = mode == PaddingMode::kSAME_UPPER || mode == PaddingMode::kSAME_LOWER;
  const int off = kS - n;
  for (int i = 0; i < kS; ++i) {
    if (i < off) {
      g.in[i] = g.out[i] = g.k[i] = g.s[i] = g.d[i] = 1;
      g.pre[i] = g.post[i] = 0;
      continue;
    }
    const int j = i - off;
    g.in[i] = x[2 + j];
    g.out[i] = out[2 + j];
    g.k[i] = window[j];
    g.s[i] = dim_or(stride, j, 1);
    g.d[i] = dim_or(dilation, j, 1);
    g.pre[i] = eff[j];
    g.post[i] = dim_or(post, j, 0);
  }
  for (int i = 0; i < kS; ++i) {
    g.in_sp *= g.in[i];
    g.out_sp *= g.out[i];
    g.kvol *= g.k[i];
  }
  return g;
}

}  // namespace tensoracle::backends::common
