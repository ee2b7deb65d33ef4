// The CPU backend's normalization (kernels.h) over the view of reduce_util.h: per statistics set
// the mean and variance in double (sum16's fixed order), then y = (x - mean) * rstd * scale +
// bias rounded once; AVX-512 variants compute the baseline's bits.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/op_kernel.h"
#include "backends/cpu/kernels_util.h"
#include "backends/cpu/reduce_util.h"

namespace tensoracle::cpu {

namespace {

using namespace reduction;  // reduce_util.h

// ---- normalization ----------------------------------------------------------------------

// A statistics set's mean and 1 / sqrt(var + eps), stored as float.
inline void norm_finish(double sum, double sq, double inv_count, double eps, float* mean, float* rstd) noexcept {
  *mean = static_cast<float>(sum * inv_count);
  *rstd = static_cast<float>(1.0 / std::sqrt(sq * inv_count + eps));
}

// Statistics sets [b, e) of a layout whose contiguous rows are normalized over: per set, the sum
// of its rows (each row's by sum16, the rows' in order), the mean, then the squared deviations
// the same way. sum16 fixes the order of every double sum, so norm_row_statistics_wide computes
// these bits.
template <class FT>
inline void norm_row_statistics(const Layout& L, const typename FT::T* x, double inv_count, double eps, float* mean,
                                float* rstd, i64 b, i64 e) {
  const i64 inner = L.inner;
  Odometer k(L.nk, L.ks, L.kst, b);
  for (i64 o = b; o < e; ++o, k.next()) {
    const auto* base = x + k.off;
    double sum = 0.0;
    {
      Odometer r(L.nr, L.rs, L.rst, 0);
      for (i64 t = 0; t < L.rcount; ++t, r.next()) {
        const auto* p = base + r.off;
        sum += sum16(inner, [p](i64 i) { return static_cast<double>(FT::load(p[i])); });
      }
    }
    const double mu = sum * inv_count;
    double sq = 0.0;
    Odometer r(L.nr, L.rs, L.rst, 0);
    for (i64 t = 0; t < L.rcount; ++t, r.next()) {
      const auto* p = base + r.off;
      sq += sum16(inner, [p, mu](i64 i) {
        const double d = static_cast<double>(FT::load(p[i])) - mu;
        return d * d;
      });
    }
    norm_finish(sum, sq, inv_count, eps, mean + o, rstd + o);
  }
}

// float32 normalizations compiled for AVX-512 (8 double lanes instead of SSE2's 2): the same
// bits as the baseline (fixed sums); switched off by TENSORACLE_NORM_NO_AVX512.
constexpr const char* kNormSwitch = "TENSORACLE_NORM_NO_AVX512";
#ifdef TA_WIDE
TA_WIDE_FUNCTION void norm_row_statistics_wide(const Layout& L, const float* x, double inv_count, double eps,
                                               float* mean, float* rstd, i64 b, i64 e) {
  norm_row_statistics<F32>(L, x, inv_count, eps, mean, rstd, b, e);
}
#endif

// Per statistics set (numbered like the outputs of a reduce over the same layout): mean and
// 1 / sqrt(var + eps), both computed in double (two passes) and stored as float.
template <class FT>
void norm_statistics(const Layout& L, const typename FT::T* x, double eps, float* mean, float* rstd) {
  const i64 count = L.reduced;
  const double inv_count = 1.0 / static_cast<double>(count);
  if (L.inner_reduced) {
    [[maybe_unused]] const bool wide = std::is_same_v<FT, F32> && detail::avx512_kernels(kNormSwitch);
    detail::parallel_ranges(
        L.kcount,
        [&](i64 b, i64 e) {
#ifdef TA_WIDE
          if constexpr (std::is_same_v<FT, F32>)
            if (wide) return norm_row_statistics_wide(L, x, inv_count, eps, mean, rstd, b, e);
#endif
          norm_row_statistics<FT>(L, x, inv_count, eps, mean, rstd, b, e);
        },
        min_items(2 * count));
    return;
  }
  const i64 inner = L.inner;
  const i64 ncc = (inner + kColChunk - 1) / kColChunk;
  detail::parallel_ranges(
      L.kcount * ncc,
      [&](i64 b, i64 e) {
        double sum[kColChunk], mu[kColChunk], sq[kColChunk];
        for (i64 it = b; it < e; ++it) {
          const i64 blk = it / ncc, c0 = (it % ncc) * kColChunk, len = std::min(kColChunk, inner - c0);
          const auto* base = x + Odometer(L.nk, L.ks, L.kst, blk).off + c0;
          std::fill_n(sum, len, 0.0);
          std::fill_n(sq, len, 0.0);
          {
            Odometer r(L.nr, L.rs, L.rst, 0);
            for (i64 t = 0; t < L.rcount; ++t, r.next()) FSum<FT>::accum(sum, base + r.off, len);
          }
          for (i64 j = 0; j < len; ++j) mu[j] = sum[j] * inv_count;
          Odometer r(L.nr, L.rs, L.rst, 0);
          for (i64 t = 0; t < L.rcount; ++t, r.next()) {
            const auto* p = base + r.off;
            TA_SIMD
            for (i64 j = 0; j < len; ++j) {
              const double d = static_cast<double>(FT::load(p[j])) - mu[j];
              sq[j] += d * d;
            }
          }
          for (i64 j = 0; j < len; ++j) {
            const i64 o = blk * inner + c0 + j;
            norm_finish(sum[j], sq[j], inv_count, eps, mean + o, rstd + o);
          }
        }
      },
      min_items(2 * L.rcount * std::min(inner, kColChunk)));
}

// The output pass: dims after merging, with the strides (in elements) of the statistics,
// the scale and the bias over them (the input and output are contiguous).
struct NormPlan {
  int rank = 0;
  i64 dims[kMaxGroups] = {};
  i64 sm[kMaxGroups] = {}, ss[kMaxGroups] = {}, sb[kMaxGroups] = {};
};

// o[0, len) from x[0, len): (x - mean) * rstd * scale + bias in float; each of mean/rstd,
// scale and bias advances by 0 or 1 per element (template flags) or by a runtime stride.
template <class FT, int MS, int SS, int BS>
void norm_span(const typename FT::T* x, typename FT::T* o, i64 len, const float* mean, const float* rstd,
               const float* sc, const float* bi) noexcept {
  TA_SIMD
  for (i64 i = 0; i < len; ++i)
    o[i] = FT::store((FT::load(x[i]) - mean[MS * i]) * rstd[MS * i] * sc[SS * i] + bi[BS * i]);
}

template <class FT>
void norm_span_strided(const typename FT::T* x, typename FT::T* o, i64 len, const float* mean, const float* rstd,
                       i64 ms, const float* sc, i64 ss, const float* bi, i64 bs) noexcept {
  for (i64 i = 0; i < len; ++i)
    o[i] = FT::store((FT::load(x[i]) - mean[ms * i]) * rstd[ms * i] * sc[ss * i] + bi[bs * i]);
}

// Output elements [begin, end) (flat indices into the contiguous input and output).
template <class FT>
inline void norm_output_range(const NormPlan& p, const typename FT::T* x, typename FT::T* out, const float* mean,
                              const float* rstd, const float* sc, const float* bi, i64 begin, i64 end) {
  const int m = p.rank;
  const i64 inner = p.dims[m - 1], ms = p.sm[m - 1], ss = p.ss[m - 1], bs = p.sb[m - 1];
  const bool unit = (ms == 0 || ms == 1) && (ss == 0 || ss == 1) && (bs == 0 || bs == 1);
  const int which = static_cast<int>(ms * 4 + ss * 2 + bs);
  auto span = [&](i64 pos, i64 len, i64 om, i64 os, i64 ob) {
    const auto* xp = x + pos;
    auto* op = out + pos;
    const float *mp = mean + om, *rp = rstd + om, *sp = sc + os, *bp = bi + ob;
    if (!unit) return norm_span_strided<FT>(xp, op, len, mp, rp, ms, sp, ss, bp, bs);
    switch (which) {
      case 0: return norm_span<FT, 0, 0, 0>(xp, op, len, mp, rp, sp, bp);
      case 1: return norm_span<FT, 0, 0, 1>(xp, op, len, mp, rp, sp, bp);
      case 2: return norm_span<FT, 0, 1, 0>(xp, op, len, mp, rp, sp, bp);
      case 3: return norm_span<FT, 0, 1, 1>(xp, op, len, mp, rp, sp, bp);
      case 4: return norm_span<FT, 1, 0, 0>(xp, op, len, mp, rp, sp, bp);
      case 5: return norm_span<FT, 1, 0, 1>(xp, op, len, mp, rp, sp, bp);
      case 6: return norm_span<FT, 1, 1, 0>(xp, op, len, mp, rp, sp, bp);
      default: return norm_span<FT, 1, 1, 1>(xp, op, len, mp, rp, sp, bp);
    }
  };
  i64 idx[kMaxGroups];
  i64 om = 0, os = 0, ob = 0, rem = begin;
  for (int k = m - 1; k >= 0; --k) {
    idx[k] = rem % p.dims[k];
    rem /= p.dims[k];
    om += idx[k] * p.sm[k];
    os += idx[k] * p.ss[k];
    ob += idx[k] * p.sb[k];
  }
  i64 pos = begin;
  while (true) {
    const i64 len = std::min(inner - idx[m - 1], end - pos);
    span(pos, len, om, os, ob);
    pos += len;
    if (pos >= end) break;
    om -= idx[m - 1] * ms;
    os -= idx[m - 1] * ss;
    ob -= idx[m - 1] * bs;
    idx[m - 1] = 0;
    for (int k = m - 2; k >= 0; --k) {
      ++idx[k];
      om += p.sm[k];
      os += p.ss[k];
      ob += p.sb[k];
      if (idx[k] < p.dims[k]) break;
      om -= idx[k] * p.sm[k];
      os -= idx[k] * p.ss[k];
      ob -= idx[k] * p.sb[k];
      idx[k] = 0;
    }
  }
}

#ifdef TA_WIDE
TA_WIDE_FUNCTION void norm_output_range_wide(
    const NormPlan& p, const float* x, float* out, const float* mean, const float* rstd, const float* sc,
    const float* bi, i64 begin, i64 end) {
  norm_output_range<F32>(p, x, out, mean, rstd, sc, bi, begin, end);
}
#endif

template <class FT>
void norm_output(const NormPlan& p, const typename FT::T* x, typename FT::T* out, i64 n, const float* mean,
                 const float* rstd, const float* sc, const float* bi) {
  [[maybe_unused]] const bool wide = std::is_same_v<FT, F32> && detail::avx512_kernels(kNormSwitch);
  detail::parallel_ranges(
      n,
      [&](i64 begin, i64 end) {
#ifdef TA_WIDE
        if constexpr (std::is_same_v<FT, F32>)
          if (wide) return norm_output_range_wide(p, x, out, mean, rstd, sc, bi, begin, end);
#endif
        norm_output_range<FT>(p, x, out, mean, rstd, sc, bi, begin, end);
      },
      kParallelWork);
}

// scale or bias as float values (any float type), with its strides over x's dims (0 where it
// broadcasts).
std::vector<float> load_broadcast(const TensorRef& t, const Dims& x, const char* name, i64* strides) {
  const i64 n = backends::common::check_normalization_operand(detail::kFail, t, x, name, strides);
  std::vector<float> v(static_cast<std::size_t>(n));
  with_float(t.type, std::string("normalization: ") + name, [&](auto tag) {
    using FT = decltype(tag);
    const auto* p = static_cast<const typename FT::T*>(t.data);
    for (i64 i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = FT::load(p[i]);
  });
  return v;
}

}  // namespace

void normalization(const NormalizationParams& p, const TensorRef& x, const TensorRef& scale, const TensorRef& bias,
                   const TensorRef& out) {
  const i64 n = backends::common::check_normalization(detail::kFail, p, x, out);
  const Dims& xd = x.dims;
  const int rank = xd.rank();
  const i64 groups = p.num_groups;
  i64 sst[Dims::kMaxRank], bst[Dims::kMaxRank];
  const std::vector<float> sc = load_broadcast(scale, xd, "the scale", sst);
  const std::vector<float> bi = load_broadcast(bias, xd, "the bias", bst);
  with_float(x.type, "normalization", [&](auto tag) {
    using FT = decltype(tag);
    if (n == 0) return;
    // The view: x's dims, with the channels split into (groups, channels per group) when
    // grouped; the channels per group are normalized over like the masked axes.
    int vr = 0;
    i64 vd[kMaxGroups], vs[kMaxGroups], vb[kMaxGroups];
    bool vred[kMaxGroups];
    for (int d = 0; d < rank; ++d) {
      if (groups > 1 && d == 1) {
        const i64 per = xd[1] / groups;
        vd[vr] = groups, vred[vr] = false, vs[vr] = sst[1] * per, vb[vr] = bst[1] * per, ++vr;
        vd[vr] = per, vred[vr] = true, vs[vr] = sst[1], vb[vr] = bst[1], ++vr;
      } else {
        vd[vr] = xd[d], vred[vr] = (p.axes >> d) & 1u, vs[vr] = sst[d], vb[vr] = bst[d], ++vr;
      }
    }
    const Layout L = make_layout(vr, vd, vred);
    const i64 nstat = L.kcount * (L.inner_reduced ? 1 : L.inner);
    std::vector<float> mean(static_cast<std::size_t>(nstat)), rstd(static_cast<std::size_t>(nstat));
    const auto* xp = static_cast<const typename FT::T*>(x.data);
    norm_statistics<FT>(L, xp, static_cast<double>(p.epsilon), mean.data(), rstd.data());
    // Statistics strides over the view: row-major over the kept dims, 0 on the normalized ones.
    i64 vm[kMaxGroups];
    i64 st = 1;
    for (int d = vr - 1; d >= 0; --d) {
      vm[d] = vred[d] ? 0 : st;
      if (!vred[d]) st *= vd[d];
    }
    NormPlan plan;
    for (int d = 0; d < vr; ++d) {
      if (vd[d] == 1) continue;
      const int last = plan.rank - 1;
      const i64 s = vd[d];
      if (last >= 0 && plan.sm[last] == vm[d] * s && plan.ss[last] == vs[d] * s && plan.sb[last] == vb[d] * s) {
        plan.dims[last] *= s;
        plan.sm[last] = vm[d];
        plan.ss[last] = vs[d];
        plan.sb[last] = vb[d];
      } else {
        plan.dims[plan.rank] = s;
        plan.sm[plan.rank] = vm[d];
        plan.ss[plan.rank] = vs[d];
        plan.sb[plan.rank] = vb[d];
        ++plan.rank;
      }
    }
    if (plan.rank == 0) {
      plan.rank = 1;
      plan.dims[0] = 1;
    }
    norm_output<FT>(plan, xp, static_cast<typename FT::T*>(out.data), n, mean.data(), rstd.data(), sc.data(),
                    bi.data());
  });
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kNormalizationKernel = {
    LayerType::kNORMALIZATION, nullptr, nullptr, [](const OpCall& c) {
      normalization(std::get<NormalizationParams>(c.node.params), ref(c.in[0]), ref(c.in[1]), ref(c.in[2]), ref(c.out));
    }};

}  // namespace ops

}  // namespace tensoracle::cpu
