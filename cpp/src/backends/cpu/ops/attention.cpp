// The CPU backend's attention (kernels.h; AttentionParams in tensoracle/network.h): a blocked,
// fused attention. Each task takes a block of up to 128 queries of one batch and query head and
// walks the keys in tiles of 128: the tile's scores (one BLAS product), the masks, (softmax) the
// online update of each row's maximum and sum with its accumulator rescaled, then the
// accumulator plus the tile's probabilities times its values (a second BLAS product). No
// [queries, keys] matrix exists beyond a tile. float16 / bfloat16 tiles are converted to
// float32 first; everything is float32 arithmetic.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/common/attention_shape.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_util.h"
#include "backends/cpu/op_kernel.h"
#include "backends/cpu/reduce_util.h"

namespace tensoracle::cpu {

namespace {

using namespace reduction;  // reduce_util.h
using backends::common::AttentionShape;

constexpr i64 kQueryBlock = 128;  // queries per task
constexpr i64 kKeyTile = 128;     // keys per tile
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// NaN-propagating maximum.
inline float max_nan(float a, float b) noexcept { return (b > a || b != b) ? b : a; }

// C[m, n] = A[m, k] · B[n, k]ᵀ (+ C when accumulate), row-major float32, through BLAS.
void gemm_nt(i64 m, i64 n, i64 k, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.f,
              a, static_cast<int>(k), b, static_cast<int>(k), 0.f, c, static_cast<int>(n));
}
void gemm_nn_accumulate(i64 m, i64 n, i64 k, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
              1.f, a, static_cast<int>(k), b, static_cast<int>(n), 1.f, c, static_cast<int>(n));
}

// One row of a tile's scores after the masks: (softmax) the online update — the new running
// maximum m, the probabilities in place, the sum l, and the factor the row's accumulator is
// rescaled by (returned).
inline float softmax_row_update(float* srow, i64 nt, float& m, float& l) {
  float tile_max = kNegInf;
  for (i64 j = 0; j < nt; ++j) tile_max = max_nan(tile_max, srow[j]);
  const float m_new = max_nan(m, tile_max);
  // every key so far masked out: probabilities 0, nothing rescaled (e^-inf = 0)
  const float base = m_new == kNegInf ? 0.f : m_new;
  const float corr = exp_nonpositive(m - base);
  float sum = 0.f;
  TA_SIMD_REDUCE(+, sum)
  for (i64 j = 0; j < nt; ++j) {
    srow[j] = exp_nonpositive(srow[j] - base);
    sum += srow[j];
  }
  l = l * corr + sum;
  m = m_new;
  return corr;
}

template <class FT>
void attention_typed(const AttentionParams& p, const AttentionShape& a, const TensorRef& q, const TensorRef& k,
                     const TensorRef& v, const TensorRef* mask, const TensorRef& out) {
  using T = typename FT::T;
  constexpr bool kF32 = std::is_same_v<FT, F32>;
  const T* qp = static_cast<const T*>(q.data);
  const T* kp = static_cast<const T*>(k.data);
  const T* vp = static_cast<const T*>(v.data);
  T* op = static_cast<T*>(out.data);
  const i64 h = a.head_size;
  const i64 blocks = (a.queries + kQueryBlock - 1) / kQueryBlock;
  const i64 tasks = a.batch * a.q_heads * blocks;
  const bool softmax = p.normalization == AttentionNormalizationOp::kSOFTMAX;
  // masked-out scores: -inf before a softmax, 0 without one (they weigh nothing)
  const float masked = softmax ? kNegInf : 0.f;
  detail::ensure_blas_threads();
  detail::parallel_ranges(
      tasks,
      [&](i64 begin, i64 end) {
        const std::size_t block = static_cast<std::size_t>(kQueryBlock), tile = static_cast<std::size_t>(kKeyTile),
                          hs = static_cast<std::size_t>(h);
        std::vector<float> qf(block * hs), s(block * tile), acc(block * hs), m(block), l(block);
        std::vector<float> kf(kF32 ? 0 : tile * hs), vf(kF32 ? 0 : tile * hs);
        for (i64 task = begin; task < end; ++task) {
          const i64 blk = task % blocks, head = (task / blocks) % a.q_heads, b = task / (blocks * a.q_heads);
          const i64 kv_head = head / a.group;
          const i64 r0 = blk * kQueryBlock, rows = std::min(kQueryBlock, a.queries - r0);
          const T* qb = qp + ((b * a.q_heads + head) * a.queries + r0) * h;
          const T* kb = kp + (b * a.kv_heads + kv_head) * a.keys * h;
          const T* vb = vp + (b * a.kv_heads + kv_head) * a.keys * h;
          TA_SIMD
          for (i64 i = 0; i < rows * h; ++i) qf[static_cast<std::size_t>(i)] = FT::load(qb[i]) * p.scale;
          std::fill(acc.begin(), acc.end(), 0.f);
          std::fill(m.begin(), m.end(), kNegInf);
          std::fill(l.begin(), l.end(), 0.f);
          // causal: the block's last query sees keys up to its own index
          const i64 key_end = p.causal ? std::min(a.keys, r0 + rows) : a.keys;
          for (i64 j0 = 0; j0 < key_end; j0 += kKeyTile) {
            const i64 nt = std::min(kKeyTile, key_end - j0);
            const float* kt = nullptr;
            const float* vt = nullptr;
            if constexpr (kF32) {
              kt = kb + j0 * h;
              vt = vb + j0 * h;
            } else {
              TA_SIMD
              for (i64 i = 0; i < nt * h; ++i) {
                kf[static_cast<std::size_t>(i)] = FT::load(kb[j0 * h + i]);
                vf[static_cast<std::size_t>(i)] = FT::load(vb[j0 * h + i]);
              }
              kt = kf.data();
              vt = vf.data();
            }
            gemm_nt(rows, nt, h, qf.data(), kt, s.data());  // s: [rows, nt]
            for (i64 r = 0; r < rows; ++r) {
              float* srow = s.data() + r * nt;
              const i64 qi = r0 + r;
              if (p.causal)
                for (i64 j = std::max<i64>(qi + 1 - j0, 0); j < nt; ++j) srow[j] = masked;
              if (mask) {
                const i64 base = b * a.mask_stride[0] + head * a.mask_stride[1] + qi * a.mask_stride[2];
                const i64 step = a.mask_stride[3];
                if (a.bool_mask) {
                  const auto* mp = static_cast<const std::uint8_t*>(mask->data) + base + j0 * step;
                  for (i64 j = 0; j < nt; ++j) srow[j] = mp[j * step] ? srow[j] : masked;
                } else {
                  const T* mp = static_cast<const T*>(mask->data) + base + j0 * step;
                  for (i64 j = 0; j < nt; ++j) srow[j] += FT::load(mp[j * step]);
                }
              }
              if (!softmax) continue;
              const float corr = softmax_row_update(srow, nt, m[static_cast<std::size_t>(r)], l[static_cast<std::size_t>(r)]);
              if (corr != 1.f) {
                float* arow = acc.data() + r * h;
                TA_SIMD
                for (i64 d = 0; d < h; ++d) arow[d] *= corr;
              }
            }
            gemm_nn_accumulate(rows, h, nt, s.data(), vt, acc.data());  // acc += s · v
          }
          T* ob = op + ((b * a.q_heads + head) * a.queries + r0) * h;
          for (i64 r = 0; r < rows; ++r) {
            // softmax: divide by the sum; a query whose every key is masked out gives zeros
            const float lr = l[static_cast<std::size_t>(r)];
            const float inv = !softmax ? 1.f : lr > 0.f && m[static_cast<std::size_t>(r)] != kNegInf ? 1.f / lr : 0.f;
            const float* arow = acc.data() + r * h;
            TA_SIMD
            for (i64 d = 0; d < h; ++d) ob[r * h + d] = FT::store(arow[d] * inv);
          }
        }
      },
      2);
}

}  // namespace

void attention(const AttentionParams& p, const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef* mask,
               const TensorRef& out) {
  const AttentionShape a = backends::common::check_attention(detail::kFail, p, q, k, v, mask, out);
  if (a.batch * a.q_heads * a.queries * a.head_size == 0) return;
  with_float(q.type, "attention", [&](auto tag) { attention_typed<decltype(tag)>(p, a, q, k, v, mask, out); });
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kAttentionKernel = {
    LayerType::kATTENTION, nullptr, nullptr, [](const OpCall& c) {
      const TensorRef mask = c.node.inputs.size() > 3 ? ref(c.in[3]) : TensorRef{};
      attention(std::get<AttentionParams>(c.node.params), ref(c.in[0]), ref(c.in[1]), ref(c.in[2]),
                c.node.inputs.size() > 3 ? &mask : nullptr, ref(c.out));
    }};

}  // namespace ops

}  // namespace tensoracle::cpu
