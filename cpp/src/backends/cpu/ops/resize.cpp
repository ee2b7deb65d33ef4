// The CPU backend's resize (kernels.h). Nearest resize is a table copy (index_util.h); linear and
// cubic resize compute in float32 over per-dim taps (separable weights) and round once.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backends/common/index_checks.h"
#include "backends/cpu/index_util.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/op_kernel.h"
#include "backends/cpu/kernels_util.h"

namespace tensoracle::cpu {

namespace {

using namespace indexing;  // index_util.h

// ---- resize -----------------------------------------------------------------------------

using RCT = ResizeCoordinateTransformation;

// The input coordinate that output index o of one dim samples.
double resize_coordinate(const ResizeParams& p, int d, i64 o, i64 in, i64 out) {
  if (out == 1 && p.selector_for_single_pixel == ResizeSelector::kUPPER) return 0.0;
  const bool given = !p.scales.empty();
  const double x = static_cast<double>(o);
  const double scale = given ? static_cast<double>(p.scales[static_cast<std::size_t>(d)]) : 0.0;
  switch (p.coordinate_transformation) {
    case RCT::kALIGN_CORNERS:
      return out == 1 ? 0.0 : x * static_cast<double>(in - 1) / static_cast<double>(out - 1);
    case RCT::kASYMMETRIC:
      return given ? x / scale : x * static_cast<double>(in) / static_cast<double>(out);
    case RCT::kHALF_PIXEL:
      return given ? (x + 0.5) / scale - 0.5 : (x + 0.5) * static_cast<double>(in) / static_cast<double>(out) - 0.5;
  }
  fail("resize: unknown coordinate transformation " + std::to_string(static_cast<int>(p.coordinate_transformation)));
}

i64 nearest_index(ResizeRoundMode m, double x, i64 in) {
  double r;
  switch (m) {
    case ResizeRoundMode::kHALF_UP: r = std::floor(x + 0.5); break;
    case ResizeRoundMode::kHALF_DOWN: r = std::ceil(x - 0.5); break;
    case ResizeRoundMode::kFLOOR: r = std::floor(x); break;
    case ResizeRoundMode::kCEIL: r = std::ceil(x); break;
    default: fail("resize: unknown nearest rounding " + std::to_string(static_cast<int>(m)));
  }
  if (!(r >= 0.0)) return 0;  // also NaN
  if (r >= static_cast<double>(in - 1)) return in - 1;
  return static_cast<i64>(r);
}

double cubic_weight(double d, double a) {
  d = std::fabs(d);
  if (d <= 1.0) return ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0;
  if (d < 2.0) return ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a;
  return 0.0;
}

// Per output index of one dim: K taps (input offset = index * stride, weight).
struct DimTaps {
  int K = 1;
  std::vector<i64> off;
  std::vector<float> w;
};

DimTaps resize_taps(const ResizeParams& p, int d, i64 in, i64 out, i64 stride) {
  DimTaps t;
  std::vector<double> x(static_cast<std::size_t>(out));
  bool integral = true;
  for (i64 o = 0; o < out; ++o) {
    double v = resize_coordinate(p, d, o, in, out);
    if (p.mode == InterpolationMode::kLINEAR) v = std::clamp(v, 0.0, static_cast<double>(in - 1));
    x[static_cast<std::size_t>(o)] = v;
    integral = integral && std::floor(v) == v && v >= 0.0 && v <= static_cast<double>(in - 1);
  }
  auto clampi = [&](i64 i) { return std::clamp<i64>(i, 0, in - 1); };
  if (integral) {  // every sample sits on an input element: one tap of weight 1
    t.K = 1;
    for (i64 o = 0; o < out; ++o) {
      t.off.push_back(static_cast<i64>(x[static_cast<std::size_t>(o)]) * stride);
      t.w.push_back(1.f);
    }
    return t;
  }
  t.K = p.mode == InterpolationMode::kLINEAR ? 2 : 4;
  for (i64 o = 0; o < out; ++o) {
    const double v = x[static_cast<std::size_t>(o)];
    const double f = std::floor(v);
    const double frac = v - f;
    const i64 i0 = static_cast<i64>(f);
    if (t.K == 2) {
      t.off.push_back(clampi(i0) * stride);
      t.off.push_back(clampi(i0 + 1) * stride);
      t.w.push_back(static_cast<float>(1.0 - frac));
      t.w.push_back(static_cast<float>(frac));
    } else {
      const double a = p.cubic_coeff;
      for (int k = -1; k <= 2; ++k) {
        t.off.push_back(clampi(i0 + k) * stride);
        t.w.push_back(static_cast<float>(cubic_weight(frac - k, a)));
      }
    }
  }
  return t;
}

// KL: the innermost dim's taps (1, 2 or 4), a template argument so the inner loop unrolls.
template <DataType T, int KL>
void resize_interp(const TensorRef& x, const TensorRef& out, const std::vector<DimTaps>& taps) {
  const Dims& od = out.dims;
  const int r = od.rank();
  const i64 inner = od[r - 1];
  const i64 rows = prod(od, 0, r - 1);
  // Outer dims with more than one tap: their combinations per row.
  int multi[Dims::kMaxRank];
  int nm = 0;
  i64 combos = 1;
  for (int k = 0; k < r - 1; ++k)
    if (taps[static_cast<std::size_t>(k)].K > 1) {
      multi[nm++] = k;
      combos *= taps[static_cast<std::size_t>(k)].K;
    }
  const DimTaps& last = taps[static_cast<std::size_t>(r - 1)];
  const i64* loff = last.off.data();
  const float* lw = last.w.data();
  std::atomic<bool> no_memory{false};
  detail::parallel_ranges(
      rows,
      [&](i64 begin, i64 end) {
        std::vector<i64> coff;
        std::vector<float> cw;
        try {
          coff.resize(static_cast<std::size_t>(combos));
          cw.resize(static_cast<std::size_t>(combos));
        } catch (...) {
          no_memory = true;
          return;
        }
        RowIndex at(od, r, begin);
        const i64* const idx = at.idx;
        for (i64 row = begin; row < end; ++row) {
          i64 base = 0;
          for (int k = 0; k < r - 1; ++k) {
            const DimTaps& t = taps[static_cast<std::size_t>(k)];
            if (t.K == 1) base += t.off[static_cast<std::size_t>(idx[k])];
          }
          // The row's combinations of the outer multi-tap dims.
          int tix[Dims::kMaxRank] = {};
          for (i64 c = 0; c < combos; ++c) {
            i64 off = base;
            float w = 1.f;
            for (int m = 0; m < nm; ++m) {
              const DimTaps& t = taps[static_cast<std::size_t>(multi[m])];
              const std::size_t s = static_cast<std::size_t>(idx[multi[m]] * t.K + tix[m]);
              off += t.off[s];
              w *= t.w[s];
            }
            coff[static_cast<std::size_t>(c)] = off;
            cw[static_cast<std::size_t>(c)] = w;
            for (int m = nm - 1; m >= 0; --m) {
              if (++tix[m] < taps[static_cast<std::size_t>(multi[m])].K) break;
              tix[m] = 0;
            }
          }
          for (i64 j = 0; j < inner; ++j) {
            const i64* jo = loff + j * KL;
            const float* jw = lw + j * KL;
            float acc = 0.f;
            for (i64 c = 0; c < combos; ++c) {
              const i64 o = coff[static_cast<std::size_t>(c)];
              float part = 0.f;
              for (int k = 0; k < KL; ++k) part += jw[k] * load_f<T>(x.data, o + jo[k]);
              acc += cw[static_cast<std::size_t>(c)] * part;
            }
            store_f<T>(out.data, row * inner + j, acc);
          }
          at.next();
        }
      },
      std::max<i64>(1, kParallelMin / std::max<i64>(1, inner * combos * KL)));
  if (no_memory) throw std::bad_alloc();
}

}  // namespace

// ---- resize -----------------------------------------------------------------------------

void resize(const ResizeParams& p, const TensorRef& x, const TensorRef& out) {
  const i64 n = backends::common::check_resize(detail::kFail, p, x, out);
  const int r = x.dims.rank();
  if (n == 0) return;
  i64 st[Dims::kMaxRank];
  strides_of(x.dims, st);
  if (p.mode == InterpolationMode::kNEAREST) {
    std::vector<std::vector<i64>> table(static_cast<std::size_t>(r));
    for (int d = 0; d < r; ++d) {
      const i64 in = x.dims[d], on = out.dims[d];
      auto& tab = table[static_cast<std::size_t>(d)];
      for (i64 o = 0; o < on; ++o) tab.push_back(nearest_index(p.nearest_rounding, resize_coordinate(p, d, o, in, on), in) * st[d]);
    }
    table_copy(x, out, table, nullptr, "resize");
    return;
  }
  if (r == 0) {
    std::memcpy(out.data, x.data, element_size(x.type));
    return;
  }
  std::vector<DimTaps> taps;
  for (int d = 0; d < r; ++d) taps.push_back(resize_taps(p, d, x.dims[d], out.dims[d], st[d]));
  by_float_type(x.type, "resize", [&](auto t) {
    constexpr DataType T = decltype(t)::value;
    switch (taps.back().K) {
      case 1: resize_interp<T, 1>(x, out, taps); break;
      case 2: resize_interp<T, 2>(x, out, taps); break;
      default: resize_interp<T, 4>(x, out, taps); break;
    }
  });
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kResizeKernel = {
    LayerType::kRESIZE, nullptr, nullptr,
    [](const OpCall& c) { resize(std::get<ResizeParams>(c.node.params), ref(c.in[0]), ref(c.out)); }};

}  // namespace ops

}  // namespace tensoracle::cpu
