// The CPU backend's pooling (kernels.h): packed NCHW-style and channels-last, 1, 2 or 3 spatial
// dims normalized to 3 (window_util.h). Direct loops over output rows; averages accumulate in
// double.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/op_kernel.h"
#include "backends/cpu/kernels_util.h"
#include "backends/cpu/onednn.h"
#include "backends/cpu/window_util.h"
#include "tensoracle/errors.h"

namespace tensoracle::cpu {

namespace {

using namespace window;  // window_util.h

// ---- pooling ------------------------------------------------------------------------------------

// Where the padded input ends, per spatial dim: in + post (explicit modes; EXPLICIT_ROUND_UP
// windows may reach past it and are clipped there). SAME windows never reach past their
// computed padding.
std::array<i64, kS> pool_limits(const Geo& g) {
  std::array<i64, kS> lim{};
  for (int i = 0; i < kS; ++i) lim[i] = g.same ? INT64_MAX / 4 : g.in[i] + g.post[i];
  return lim;
}

// The window of output position o: its taps inside the input ([lo, hi) per spatial dim, walked
// in row-major order), how many there are, and its size within the padded input.
struct PoolWindow {
  std::array<i64, kS> lo{}, hi{};
  i64 count = 1, padded = 1;
};
PoolWindow pool_window(const Geo& g, const std::array<i64, kS>& lim, const std::array<i64, kS>& o) {
  PoolWindow w;
  for (int i = 0; i < kS; ++i) {
    const i64 start = o[i] * g.s[i] - g.pre[i];
    w.lo[i] = std::max<i64>(0, start);
    w.hi[i] = std::min(g.in[i], start + g.k[i]);
    w.count *= std::max<i64>(0, w.hi[i] - w.lo[i]);
    w.padded *= std::min(start + g.k[i], lim[i]) - start;
  }
  return w;
}

// A window's pooled value from its taps' maximum and (double) sum.
double pool_value(const PoolingParams& p, float mx, double sum, const PoolWindow& w) {
  if (p.type == PoolingType::kMAX) return mx;
  const double div = p.average_count_excludes_padding ? static_cast<double>(w.count) : static_cast<double>(w.padded);
  const double avg = sum / div;
  if (p.type == PoolingType::kAVERAGE) return avg;
  const double blend = p.blend_factor;
  return blend * static_cast<double>(mx) + (1.0 - blend) * avg;
}

template <class Tr>
void pool(const PoolingParams& p, const Geo& g, const TensorRef& x, const TensorRef& out) {
  using T = typename Tr::T;
  const auto* xs = static_cast<const T*>(x.data);
  auto* os = static_cast<T*>(out.data);
  const i64 OD = g.out[0], OH = g.out[1], OW = g.out[2];
  const i64 rows = g.N * g.C * OD * OH;
  const bool want_max = p.type != PoolingType::kAVERAGE, want_avg = p.type != PoolingType::kMAX;
  const std::array<i64, kS> lim = pool_limits(g);
  // One output row (n, c, od, oh), window by window: the taps in row-major order, a NaN sticks,
  // the average's sum in double.
  auto exact_row = [&](i64 r) {
    const i64 oh = r % OH, od = (r / OH) % OD, nc = r / (OH * OD);
    const T* xc = xs + nc * g.in_sp;
    T* orow = os + r * OW;
    for (i64 ow = 0; ow < OW; ++ow) {
      const PoolWindow w = pool_window(g, lim, {od, oh, ow});
      if (w.count == 0) {  // a window entirely in (or past) the padding
        orow[ow] = Tr::store(0.f);
        continue;
      }
      float mx = -INFINITY;
      double sum = 0.0;
      for (i64 id = w.lo[0]; id < w.hi[0]; ++id) {
        for (i64 ih = w.lo[1]; ih < w.hi[1]; ++ih) {
          const T* xrow = xc + (id * g.in[1] + ih) * g.in[2];
          if (want_max) {
            for (i64 iw = w.lo[2]; iw < w.hi[2]; ++iw) {
              const float v = Tr::load(xrow[iw]);
              if (v > mx || std::isnan(v)) mx = std::isnan(mx) ? mx : v;
            }
          }
          if (want_avg)
            for (i64 iw = w.lo[2]; iw < w.hi[2]; ++iw) sum += Tr::load(xrow[iw]);
        }
      }
      orow[ow] = Tr::store(static_cast<float>(pool_value(p, mx, sum, w)));
    }
  };
  if (p.type != PoolingType::kMAX || OD != 1 || g.in[0] != 1 || g.k[0] != 1) {
    parallel_rows(rows, OW * g.kvol, [&](i64 r0, i64 r1) {
      for (i64 r = r0; r < r1; ++r) exact_row(r);
    });
    return;
  }
  // A 2-D max pool, tap by tap over a whole output row: for tap (ih, kw) the outputs whose
  // window holds it ([lo[kw], hi[kw]) of the row) take it as exact_row would (the taps in the
  // same order, `v > max` keeping the first of equal values), in a loop the compiler can
  // pipeline. A row that meets a NaN is recomputed by exact_row (which keeps the first NaN).
  const i64 H = g.in[1], W = g.in[2], KW = g.k[2], SW = g.s[2], PW = g.pre[2];
  std::vector<i64> lo(static_cast<std::size_t>(KW)), hi(static_cast<std::size_t>(KW));
  std::vector<unsigned char> empty(static_cast<std::size_t>(OW), 1);  // no tap inside in w
  for (i64 kw = 0; kw < KW; ++kw) {
    // ow * SW - PW + kw in [0, W)
    const i64 a = PW - kw, b = W - 1 + PW - kw;
    i64 first = a <= 0 ? 0 : (a + SW - 1) / SW, last = b < 0 ? -1 : b / SW;
    first = std::max<i64>(first, 0);
    last = std::min(last, OW - 1);
    lo[static_cast<std::size_t>(kw)] = first;
    hi[static_cast<std::size_t>(kw)] = std::max(first, last + 1);
    for (i64 ow = first; ow <= last; ++ow) empty[static_cast<std::size_t>(ow)] = 0;
  }
  parallel_rows(rows, OW * g.kvol, [&](i64 r0, i64 r1) {
    std::vector<float> acc(static_cast<std::size_t>(OW));
    for (i64 r = r0; r < r1; ++r) {
      const i64 oh = r % OH, nc = r / OH;
      const T* xc = xs + nc * g.in_sp;
      T* orow = os + r * OW;
      const i64 sh = oh * g.s[1] - g.pre[1];
      const i64 h0 = std::max<i64>(0, sh), h1 = std::min(H, sh + g.k[1]);
      std::fill(acc.begin(), acc.end(), -INFINITY);
      bool nan = false;
      for (i64 ih = h0; ih < h1; ++ih) {
        const T* xrow = xc + ih * W;
        for (i64 kw = 0; kw < KW; ++kw) {
          const i64 off = kw - PW, e = hi[static_cast<std::size_t>(kw)];
          for (i64 ow = lo[static_cast<std::size_t>(kw)]; ow < e; ++ow) {
            const float v = Tr::load(xrow[ow * SW + off]);
            nan |= v != v;
            acc[static_cast<std::size_t>(ow)] = v > acc[static_cast<std::size_t>(ow)] ? v : acc[static_cast<std::size_t>(ow)];
          }
        }
      }
      if (nan) {
        exact_row(r);
        continue;
      }
      const bool none = h1 <= h0;
      for (i64 ow = 0; ow < OW; ++ow)
        orow[ow] = Tr::store(none || empty[static_cast<std::size_t>(ow)] ? 0.f : acc[static_cast<std::size_t>(ow)]);
    }
  });
}

// Rows [r0, r1) of (n, od, oh) positions, OW outputs of C channels each; mx and sum hold C
// values of scratch.
template <class Tr>
void pool_channels_last_rows(const PoolingParams& p, const Geo& g, const std::array<i64, kS>& lim,
                             const typename Tr::T* xs, typename Tr::T* os, i64 r0, i64 r1, float* mx, double* sum) {
  const i64 C = g.C, OD = g.out[0], OH = g.out[1], OW = g.out[2];
  const bool want_max = p.type != PoolingType::kAVERAGE, want_avg = p.type != PoolingType::kMAX;
  for (i64 r = r0; r < r1; ++r) {
    const i64 oh = r % OH, od = (r / OH) % OD, n = r / (OH * OD);
    const auto* xn = xs + n * g.in_sp * C;
    for (i64 ow = 0; ow < OW; ++ow) {
      auto* o = os + (r * OW + ow) * C;
      const PoolWindow w = pool_window(g, lim, {od, oh, ow});
      if (w.count == 0) {
        for (i64 c = 0; c < C; ++c) o[c] = Tr::store(0.f);
        continue;
      }
      // exact_row's rule without branches (so the loops vectorize): the tap replaces the
      // maximum when greater or NaN, unless the maximum is already NaN.
      auto take = [](float f, float cur) { return (((f > cur) | (f != f)) & (cur == cur)) ? f : cur; };
      auto tap = [&](i64 id, i64 ih, i64 iw) { return xn + ((id * g.in[1] + ih) * g.in[2] + iw) * C; };
      i64 c0 = 0;  // channels below c0 are done
      if (p.type == PoolingType::kMAX) {
        // Blocks of 16 channels whose maxima stay in registers over the window's taps.
        for (; c0 + 16 <= C; c0 += 16) {
          float acc[16];
          for (int j = 0; j < 16; ++j) acc[j] = -INFINITY;
          for (i64 id = w.lo[0]; id < w.hi[0]; ++id)
            for (i64 ih = w.lo[1]; ih < w.hi[1]; ++ih)
              for (i64 iw = w.lo[2]; iw < w.hi[2]; ++iw) {
                const auto* v = tap(id, ih, iw) + c0;
#pragma omp simd
                for (int j = 0; j < 16; ++j) acc[j] = take(Tr::load(v[j]), acc[j]);
              }
#pragma omp simd
          for (int j = 0; j < 16; ++j) o[c0 + j] = Tr::store(acc[j]);
        }
        if (c0 == C) continue;
      }
      const i64 rest = C - c0;  // the other channels: their maxima (and sums) in scratch
      float* __restrict m = mx;
      double* __restrict su = sum;
      if (want_max) std::fill_n(m, rest, -INFINITY);
      if (want_avg) std::fill_n(su, rest, 0.0);
      for (i64 id = w.lo[0]; id < w.hi[0]; ++id)
        for (i64 ih = w.lo[1]; ih < w.hi[1]; ++ih)
          for (i64 iw = w.lo[2]; iw < w.hi[2]; ++iw) {
            const auto* v = tap(id, ih, iw) + c0;
            if (want_max) {
#pragma omp simd
              for (i64 c = 0; c < rest; ++c) m[c] = take(Tr::load(v[c]), m[c]);
            }
            if (want_avg)
              for (i64 c = 0; c < rest; ++c) su[c] += Tr::load(v[c]);
          }
      o += c0;
      if (p.type == PoolingType::kMAX) {  // pool_value is the maximum itself
#pragma omp simd
        for (i64 c = 0; c < rest; ++c) o[c] = Tr::store(m[c]);
      } else {
        for (i64 c = 0; c < rest; ++c) o[c] = Tr::store(static_cast<float>(pool_value(p, m[c], su[c], w)));
      }
    }
  }
}

// A float32 max pool's rows compiled for AVX-512 (16 lanes instead of SSE2's 4; everything it
// calls is inlined into it, flatten, and so compiled for it). Selecting and copying floats is
// exact in any width: the results are the baseline's bit for bit (a test compares them). Only
// for kMAX (no arithmetic on the values) and where avx512_kernels() holds.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TA_POOL_WIDE 1
[[gnu::target("avx512f,avx512dq,avx512bw,avx512vl"), gnu::flatten]] void max_pool_channels_last_rows_wide(
    const PoolingParams& p, const Geo& g, const std::array<i64, kS>& lim, const float* xs, float* os, i64 r0, i64 r1,
    float* mx, double* sum) {
  pool_channels_last_rows<F32>(p, g, lim, xs, os, r0, r1, mx, sum);
}
#endif

// The same pooling over channels-last values: x and out hold [N, spatial..., C] (their dims are
// the logical [N, C, spatial...]). Each output position walks its window's taps in exact_row's
// order for all C channels at once (a NaN sticks, the first of equal values is kept, the
// average's sum in double), so every element is the packed kernel's bit for bit (but for the sign
// of an average over NaNs of both signs, which follows the compiler's operand order in either);
// the channel loop is contiguous and vectorizes. A float32 max pool runs in AVX-512 where the CPU
// has it (TENSORACLE_POOL_NO_AVX512=1 keeps the baseline).
template <class Tr>
void pool_channels_last(const PoolingParams& p, const Geo& g, const TensorRef& x, const TensorRef& out) {
  using T = typename Tr::T;
  const auto* xs = static_cast<const T*>(x.data);
  auto* os = static_cast<T*>(out.data);
  const std::array<i64, kS> lim = pool_limits(g);
  const i64 rows = g.N * g.out[0] * g.out[1];  // (n, od, oh): OW positions of C channels each
  [[maybe_unused]] const bool wide = std::is_same_v<Tr, F32> && p.type == PoolingType::kMAX &&
                                     detail::avx512_kernels("TENSORACLE_POOL_NO_AVX512");
  parallel_rows(rows, g.out[2] * g.kvol * g.C, [&](i64 r0, i64 r1) {
    std::vector<float> mx(static_cast<std::size_t>(g.C));
    std::vector<double> sum(static_cast<std::size_t>(g.C));
#ifdef TA_POOL_WIDE
    if constexpr (std::is_same_v<Tr, F32>)
      if (wide) {
        max_pool_channels_last_rows_wide(p, g, lim, xs, os, r0, r1, mx.data(), sum.data());
        return;
      }
#endif
    pool_channels_last_rows<Tr>(p, g, lim, xs, os, r0, r1, mx.data(), sum.data());
  });
}

// A pooling's checks and geometry, for the packed and the channels-last kernel.
void run_pooling(const PoolingParams& p, const TensorRef& x, const TensorRef& out, bool channels_last) {
  detail::checked_volume(x, "pooling", "input 0");
  const i64 n = detail::checked_volume(out, "pooling", "the output");
  check_float(x, "pooling", "input 0");
  if (x.dims.rank() < 3 || x.dims.rank() != p.window.rank() + 2)
    fail("pooling: input dims " + x.dims.str() + " do not match window " + p.window.str());
  if (p.type != PoolingType::kMAX && p.type != PoolingType::kAVERAGE && p.type != PoolingType::kMAX_AVERAGE_BLEND)
    fail("pooling: unknown pooling type " + std::to_string(static_cast<int>(p.type)));
  check_inference(p, "pooling", {{x.type, x.dims}}, out);
  if (n == 0) return;
  const Geo g = make_geo(x.dims, out.dims, p.window, p.stride, p.pre_padding, p.post_padding, Dims{}, p.padding_mode,
                         false, 1);
  dispatch(x.type, [&](auto tr) {
    if (channels_last) pool_channels_last<decltype(tr)>(p, g, x, out);
    else pool<decltype(tr)>(p, g, x, out);
  });
}

}  // namespace

void pooling(const PoolingParams& p, const TensorRef& x, const TensorRef& out) { run_pooling(p, x, out, false); }

void pooling_channels_last(const PoolingParams& p, const TensorRef& x, const TensorRef& out) {
  run_pooling(p, x, out, true);
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

namespace {

// A pooling whose output is stored channels-last (onednn.h): the node reads and writes
// channels-last values.
struct PoolingState final : OpState {};

std::unique_ptr<OpState> prepare_pooling(const graph::Graph& g, const graph::Node& n) {
  if (!graph::channels_last_value(g, n.output)) return nullptr;
  // Only where the builder stores it so (onednn.h): an engine file's layouts are not trusted.
  const std::string why = onednn::pooling_channels_last_refusal(g, n);
  if (!why.empty())
    throw CorruptEngineError("[cpu] node '" + n.name + "': its output is stored channels-last, but " + why +
                             " (malformed engine)");
  return std::make_unique<PoolingState>();
}

}  // namespace

extern const OpKernel kPoolingKernel = {
    LayerType::kPOOLING, prepare_pooling, nullptr, [](const OpCall& c) {
      const auto& p = std::get<PoolingParams>(c.node.params);
      if (c.state) pooling_channels_last(p, ref(c.in[0]), ref(c.out));
      else pooling(p, ref(c.in[0]), ref(c.out));
    }};

}  // namespace ops

}  // namespace tensoracle::cpu
