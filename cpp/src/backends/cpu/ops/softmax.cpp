// The CPU backend's softmax (kernels.h): per row the maximum, e^(x - max) by exp_nonpositive,
// their sum in double (sum16's fixed order), with AVX-512 rows that compute the baseline's bits.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/op_kernel.h"
#include "graph/ops.h"
#include "backends/cpu/kernels_util.h"
#include "backends/cpu/reduce_util.h"

namespace tensoracle::cpu {

namespace {

using namespace reduction;  // reduce_util.h

// ---- softmax ----------------------------------------------------------------------------

// NaN-propagating maximum of a contiguous row (NaN if any element is NaN).
template <class FT>
float row_max(const typename FT::T* p, i64 n) noexcept {
  float m = -std::numeric_limits<float>::infinity();
  int nan = 0;
  TA_SIMD_REDUCE2(max, m, |, nan)
  for (i64 i = 0; i < n; ++i) {
    const float v = FT::load(p[i]);
    nan |= v != v;
    m = v > m ? v : m;
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : m;
}

// Rows of up to kSoftmaxBufferMax elements go through a buffer of their exponentials.
constexpr i64 kSoftmaxBufferMax = i64{1} << 16;

// One row of n <= kSoftmaxBufferMax contiguous elements: its maximum, e^(x - max) into `ex`,
// their sum in double (sum16), then each quotient.
template <class FT>
inline void softmax_row(const typename FT::T* p, typename FT::T* o, i64 n, float* ex) {
  const float m = row_max<FT>(p, n);
  TA_SIMD
  for (i64 i = 0; i < n; ++i) ex[i] = exp_nonpositive(FT::load(p[i]) - m);
  const double inv = 1.0 / sum16(n, [ex](i64 i) { return static_cast<double>(ex[i]); });
  TA_SIMD
  for (i64 k = 0; k < n; ++k) o[k] = FT::store_d(static_cast<double>(ex[k]) * inv);
}

// float32 rows [b, e) through softmax_row compiled for AVX-512 (16 float lanes instead of SSE2's
// 4); switched off by TENSORACLE_SOFTMAX_NO_AVX512 (as compare.cpp's TENSORACLE_COMPARE_NO_AVX2).
#ifdef TA_WIDE
TA_WIDE_FUNCTION void softmax_rows_wide(const float* x, float* out, i64 b, i64 e, i64 n, float* ex) {
  for (i64 r = b; r < e; ++r) softmax_row<F32>(x + r * n, out + r * n, n, ex);
}
#endif

// Rows of n contiguous elements (the axis is the innermost non-trivial dim).
template <class FT>
void softmax_rows(const typename FT::T* x, typename FT::T* out, i64 rows, i64 n) {
  [[maybe_unused]] const bool wide = std::is_same_v<FT, F32> && n <= kSoftmaxBufferMax &&
                                    detail::avx512_kernels("TENSORACLE_SOFTMAX_NO_AVX512");
  detail::parallel_ranges(
      rows,
      [&](i64 b, i64 e) {
        std::vector<float> buf(static_cast<std::size_t>(n <= kSoftmaxBufferMax ? n : 0));
#ifdef TA_WIDE
        if constexpr (std::is_same_v<FT, F32>)
          if (wide) {
            softmax_rows_wide(x, out, b, e, n, buf.data());
            return;
          }
#endif
        for (i64 r = b; r < e; ++r) {
          const auto* p = x + r * n;
          auto* o = out + r * n;
          if (n <= kSoftmaxBufferMax) {
            softmax_row<FT>(p, o, n, buf.data());
            continue;
          }
          const float m = row_max<FT>(p, n);
          double s = 0.0;
          TA_SIMD_REDUCE(+, s)
          for (i64 i = 0; i < n; ++i) s += static_cast<double>(exp_nonpositive(FT::load(p[i]) - m));
          const double inv = 1.0 / s;
          TA_SIMD
          for (i64 i = 0; i < n; ++i) o[i] = FT::store_d(static_cast<double>(exp_nonpositive(FT::load(p[i]) - m)) * inv);
        }
      },
      min_items(3 * n));
}

// The axis has stride `inner` > 1: columns of a chunk are processed side by side.
template <class FT>
void softmax_columns(const typename FT::T* x, typename FT::T* out, i64 outer, i64 n, i64 inner) {
  const i64 ncc = (inner + kColChunk - 1) / kColChunk;
  detail::parallel_ranges(
      outer * ncc,
      [&](i64 b, i64 e) {
        float m[kColChunk];
        double s[kColChunk];
        for (i64 it = b; it < e; ++it) {
          const i64 c0 = (it % ncc) * kColChunk, len = std::min(kColChunk, inner - c0);
          const auto* p = x + (it / ncc) * n * inner + c0;
          auto* o = out + (it / ncc) * n * inner + c0;
          std::fill_n(m, len, -std::numeric_limits<float>::infinity());
          std::fill_n(s, len, 0.0);
          for (i64 i = 0; i < n; ++i) {
            const auto* q = p + i * inner;
            TA_SIMD
            for (i64 j = 0; j < len; ++j) {
              const float v = FT::load(q[j]);
              m[j] = (v > m[j] || v != v) ? v : m[j];
            }
          }
          for (i64 i = 0; i < n; ++i) {
            const auto* q = p + i * inner;
            TA_SIMD
            for (i64 j = 0; j < len; ++j) s[j] += static_cast<double>(exp_nonpositive(FT::load(q[j]) - m[j]));
          }
          for (i64 j = 0; j < len; ++j) s[j] = 1.0 / s[j];
          for (i64 i = 0; i < n; ++i) {
            const auto* q = p + i * inner;
            auto* w = o + i * inner;
            TA_SIMD
            for (i64 j = 0; j < len; ++j)
              w[j] = FT::store_d(static_cast<double>(exp_nonpositive(FT::load(q[j]) - m[j])) * s[j]);
          }
        }
      },
      min_items(3 * n * std::min(inner, kColChunk)));
}

}  // namespace

void softmax(int axis, const TensorRef& x, const TensorRef& out) {
  const i64 n = detail::checked_volume(x, "softmax", "the input");
  detail::checked_volume(out, "softmax", "the output");
  const int rank = x.dims.rank();
  if (axis < 0 || axis >= rank)
    fail("softmax: axis " + std::to_string(axis) + " is out of range for the input " + x.dims.str());
  if (out.type != x.type || !(out.dims == x.dims))
    fail("softmax: the output " + tn(out.type) + out.dims.str() + " differs from the input " + tn(x.type) +
         x.dims.str());
  with_float(x.type, "softmax", [&](auto tag) {
    using FT = decltype(tag);
    if (n == 0) return;
    i64 outer = 1, inner = 1;
    for (int d = 0; d < axis; ++d) outer *= x.dims[d];
    for (int d = axis + 1; d < rank; ++d) inner *= x.dims[d];
    const auto* xp = static_cast<const typename FT::T*>(x.data);
    auto* op = static_cast<typename FT::T*>(out.data);
    if (inner == 1) softmax_rows<FT>(xp, op, outer, x.dims[axis]);
    else softmax_columns<FT>(xp, op, outer, x.dims[axis], inner);
  });
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kSoftmaxKernel = {
    LayerType::kSOFTMAX, nullptr, nullptr, [](const OpCall& c) {
      softmax(graph::softmax_axis(std::get<SoftmaxParams>(c.node.params), c.in[0].dims.rank()), ref(c.in[0]), ref(c.out));
    }};

}  // namespace ops

}  // namespace tensoracle::cpu
