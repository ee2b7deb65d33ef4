// The CPU backend's attention (kernels.h; AttentionParams in tensoracle/network.h): a blocked,
// fused attention. Each task takes a block of up to 128 queries of one batch and query head and
// walks the keys in tiles of 128: the tile's scores, the masks, (softmax) the online update of
// each row's maximum and sum with its accumulator rescaled, then the accumulator plus the
// tile's probabilities times its values. No [queries, keys] matrix exists beyond a tile.
// float16 / bfloat16 tiles are converted to float32 first; everything is float32 arithmetic.
//
// The two products: on CPUs with AVX-512 and head sizes that are multiples of 16 (32, 64, 128:
// the transformers' sizes), register-blocked kernels of this file — blocks of 4 rows × up to 64
// columns held in 16 registers, the key tile transposed once so that both products stream
// contiguous rows; elsewhere (and with TENSORACLE_ATTENTION_NO_AVX512 set) one BLAS product
// each, whose per-call packing costs more than these small products themselves.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

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

#ifdef TA_WIDE
#define TA_AVX512 gnu::target("avx512f,avx512dq,avx512bw,avx512vl")

// s[R rows, 16·C columns] = q[R rows, h] · kt[h, 16·C columns]; row strides h (q), ldk (kt), lds (s).
template <int R, int C>
[[TA_AVX512, gnu::always_inline]] inline void scores_block(const float* q, i64 h, const float* kt, i64 ldk, float* s,
                                                          i64 lds) {
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  for (i64 d = 0; d < h; ++d) {
    __m512 kv[C];
    for (int c = 0; c < C; ++c) kv[c] = _mm512_loadu_ps(kt + d * ldk + 16 * c);
    for (int r = 0; r < R; ++r) {
      const __m512 qv = _mm512_set1_ps(q[r * h + d]);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(qv, kv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(s + r * lds + 16 * c, acc[r][c]);
}

// acc[R rows, 16·C columns] += p[R rows, n] · v[n rows, those columns]; row strides ldp, ldv, lda.
template <int R, int C>
[[TA_AVX512, gnu::always_inline]] inline void pv_block(const float* p, i64 ldp, const float* v, i64 ldv, i64 n,
                                                      float* acc, i64 lda) {
  __m512 a[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) a[r][c] = _mm512_loadu_ps(acc + r * lda + 16 * c);
  for (i64 j = 0; j < n; ++j) {
    __m512 vv[C];
    for (int c = 0; c < C; ++c) vv[c] = _mm512_loadu_ps(v + j * ldv + 16 * c);
    for (int r = 0; r < R; ++r) {
      const __m512 pv = _mm512_set1_ps(p[r * ldp + j]);
      for (int c = 0; c < C; ++c) a[r][c] = _mm512_fmadd_ps(pv, vv[c], a[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(acc + r * lda + 16 * c, a[r][c]);
}

// The blocks above over whole matrices: rows in fours, columns in groups of up to 4 registers.
// `kernel(R, C)` is one instantiation per (R, C) in [1, 4]².
#define TA_DISPATCH_BLOCK(KERNEL, R, C, ...)                                \
  switch ((R) * 4 + (C)) {                                                   \
    case 5: KERNEL<1, 1>(__VA_ARGS__); break;                               \
    case 6: KERNEL<1, 2>(__VA_ARGS__); break;                               \
    case 7: KERNEL<1, 3>(__VA_ARGS__); break;                               \
    case 8: KERNEL<1, 4>(__VA_ARGS__); break;                               \
    case 9: KERNEL<2, 1>(__VA_ARGS__); break;                               \
    case 10: KERNEL<2, 2>(__VA_ARGS__); break;                              \
    case 11: KERNEL<2, 3>(__VA_ARGS__); break;                              \
    case 12: KERNEL<2, 4>(__VA_ARGS__); break;                              \
    case 13: KERNEL<3, 1>(__VA_ARGS__); break;                              \
    case 14: KERNEL<3, 2>(__VA_ARGS__); break;                              \
    case 15: KERNEL<3, 3>(__VA_ARGS__); break;                              \
    case 16: KERNEL<3, 4>(__VA_ARGS__); break;                              \
    case 17: KERNEL<4, 1>(__VA_ARGS__); break;                              \
    case 18: KERNEL<4, 2>(__VA_ARGS__); break;                              \
    case 19: KERNEL<4, 3>(__VA_ARGS__); break;                              \
    default: KERNEL<4, 4>(__VA_ARGS__); break;                              \
  }

// s[rows, ntp] = q[rows, h] · kt[h, ntp], ntp a multiple of 16.
[[TA_AVX512]] void scores_wide(const float* q, i64 rows, i64 h, const float* kt, i64 ntp, float* s) {
  for (i64 r = 0; r < rows; r += 4) {
    const int R = static_cast<int>(std::min<i64>(4, rows - r));
    for (i64 c = 0; c < ntp; c += 64) {
      const int C = static_cast<int>(std::min<i64>(4, (ntp - c) / 16));
      TA_DISPATCH_BLOCK(scores_block, R, C, q + r * h, h, kt + c, ntp, s + r * ntp + c, ntp)
    }
  }
}

// acc[rows, h] += p[rows, n] (row stride ldp) · v[n, h], h a multiple of 16.
[[TA_AVX512]] void pv_wide(const float* p, i64 ldp, i64 rows, const float* v, i64 n, i64 h, float* acc) {
  for (i64 r = 0; r < rows; r += 4) {
    const int R = static_cast<int>(std::min<i64>(4, rows - r));
    for (i64 c = 0; c < h; c += 64) {
      const int C = static_cast<int>(std::min<i64>(4, (h - c) / 16));
      TA_DISPATCH_BLOCK(pv_block, R, C, p + r * ldp, ldp, v + c, h, n, acc + r * h + c, h)
    }
  }
}
#undef TA_DISPATCH_BLOCK

// e^z for z <= 0 (and NaN), 16 lanes: exp_nonpositive's reduction and polynomial, with 2^n
// applied by scalef (exact, gradual underflow included); z < -104 (-inf among them) gives 0.
[[TA_AVX512, gnu::always_inline]] inline __m512 exp_nonpositive16(__m512 z) {
  const __mmask16 tiny = _mm512_cmp_ps_mask(z, _mm512_set1_ps(-104.0f), _CMP_LT_OQ);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(z, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723212e-6f),
                                    _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), z));
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(static_cast<__mmask16>(~tiny), p, n);
}

// softmax_row_update in 16 lanes (the same steps; the exponential above), adding the row `add`
// of an additive float32 mask first when given (contiguous keys).
[[TA_AVX512]] float softmax_row_update_wide(float* srow, i64 nt, float& m, float& l, const float* add) {
  __m512 vmax = _mm512_set1_ps(kNegInf);
  __mmask16 nan = 0;
  i64 j = 0;
  for (; j + 16 <= nt; j += 16) {
    __m512 x = _mm512_loadu_ps(srow + j);
    if (add) {
      x = _mm512_add_ps(x, _mm512_loadu_ps(add + j));
      _mm512_storeu_ps(srow + j, x);
    }
    nan |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    vmax = _mm512_max_ps(vmax, x);
  }
  const __mmask16 tail = static_cast<__mmask16>((1u << (nt - j)) - 1u);
  if (tail) {
    __m512 x = _mm512_maskz_loadu_ps(tail, srow + j);
    if (add) {
      x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(tail, add + j));
      _mm512_mask_storeu_ps(srow + j, tail, x);
    }
    nan |= _mm512_mask_cmp_ps_mask(tail, x, x, _CMP_UNORD_Q);
    vmax = _mm512_mask_max_ps(vmax, tail, vmax, x);
  }
  const float tile_max = nan ? std::numeric_limits<float>::quiet_NaN() : _mm512_reduce_max_ps(vmax);
  const float m_new = max_nan(m, tile_max);
  const float base = m_new == kNegInf ? 0.f : m_new;
  const float corr = exp_nonpositive(m - base);
  const __m512 vb = _mm512_set1_ps(base);
  __m512 vsum = _mm512_setzero_ps();
  for (j = 0; j + 16 <= nt; j += 16) {
    const __m512 e = exp_nonpositive16(_mm512_sub_ps(_mm512_loadu_ps(srow + j), vb));
    _mm512_storeu_ps(srow + j, e);
    vsum = _mm512_add_ps(vsum, e);
  }
  if (tail) {
    const __m512 e = exp_nonpositive16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, srow + j), vb));
    _mm512_mask_storeu_ps(srow + j, tail, e);
    vsum = _mm512_mask_add_ps(vsum, tail, vsum, e);
  }
  l = l * corr + _mm512_reduce_add_ps(vsum);
  m = m_new;
  return corr;
}
#endif

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
#ifdef TA_WIDE
  const bool wide = attention_runs_wide(h);
#else
  constexpr bool wide = false;
#endif
  // float32 keys and values in rows of exactly h elements are read in place; otherwise (other
  // types, the sequence-major layout) each tile is first copied into float32 rows
  const bool in_place = kF32 && a.k.row == h && a.v.row == h;
  detail::ensure_blas_threads();
  detail::parallel_ranges(
      tasks,
      [&](i64 begin, i64 end) {
        const std::size_t block = static_cast<std::size_t>(kQueryBlock), tile = static_cast<std::size_t>(kKeyTile),
                          hs = static_cast<std::size_t>(h);
        std::vector<float> qf(block * hs), s(block * tile), acc(block * hs), m(block), l(block);
        std::vector<float> kf(in_place ? 0 : tile * hs), vf(in_place ? 0 : tile * hs);
        std::vector<float> kt(wide ? tile * hs : 0);  // the key tile transposed: [h, tile]
        for (i64 task = begin; task < end; ++task) {
          const i64 blk = task % blocks, head = (task / blocks) % a.q_heads, b = task / (blocks * a.q_heads);
          const i64 kv_head = head / a.group;
          const i64 r0 = blk * kQueryBlock, rows = std::min(kQueryBlock, a.queries - r0);
          const T* kb = kp + a.k.at(b, kv_head, 0);
          const T* vb = vp + a.v.at(b, kv_head, 0);
          for (i64 r = 0; r < rows; ++r) {
            const T* qr = qp + a.q.at(b, head, r0 + r);
            float* qd = qf.data() + r * h;
            TA_SIMD
            for (i64 d = 0; d < h; ++d) qd[d] = FT::load(qr[d]) * p.scale;
          }
          std::fill(acc.begin(), acc.end(), 0.f);
          std::fill(m.begin(), m.end(), kNegInf);
          std::fill(l.begin(), l.end(), 0.f);
          // causal: the block's last query sees keys up to its own index
          const i64 key_end = p.causal ? std::min(a.keys, r0 + rows) : a.keys;
          for (i64 j0 = 0; j0 < key_end; j0 += kKeyTile) {
            const i64 nt = std::min(kKeyTile, key_end - j0);
            const float* kt_src = nullptr;
            const float* vt = nullptr;
            if (in_place) {
              if constexpr (kF32) {
                kt_src = kb + j0 * h;
                vt = vb + j0 * h;
              }
            } else {
              for (i64 j = 0; j < nt; ++j) {
                const T* kr = kb + (j0 + j) * a.k.row;
                const T* vr = vb + (j0 + j) * a.v.row;
                float* kd = kf.data() + j * h;
                float* vd = vf.data() + j * h;
                TA_SIMD
                for (i64 d = 0; d < h; ++d) {
                  kd[d] = FT::load(kr[d]);
                  vd[d] = FT::load(vr[d]);
                }
              }
              kt_src = kf.data();
              vt = vf.data();
            }
            // s: [rows, ld] (ld = nt, or nt rounded up to 16 for the wide kernels)
            i64 ld = nt;
#ifdef TA_WIDE
            if (wide) {
              ld = (nt + 15) / 16 * 16;
              for (i64 d = 0; d < h; ++d) {
                float* row = kt.data() + d * ld;
                for (i64 j = 0; j < nt; ++j) row[j] = kt_src[j * h + d];
                for (i64 j = nt; j < ld; ++j) row[j] = 0.f;
              }
              scores_wide(qf.data(), rows, h, kt.data(), ld, s.data());
            } else
#endif
              gemm_nt(rows, nt, h, qf.data(), kt_src, s.data());
            for (i64 r = 0; r < rows; ++r) {
              float* srow = s.data() + r * ld;
              const i64 qi = r0 + r;
              if (p.causal)
                for (i64 j = std::max<i64>(qi + 1 - j0, 0); j < nt; ++j) srow[j] = masked;
              const float* add = nullptr;  // an additive float32 mask row the wide softmax adds itself
              if (mask) {
                const i64 base = b * a.mask_stride[0] + head * a.mask_stride[1] + qi * a.mask_stride[2];
                const i64 step = a.mask_stride[3];
                if constexpr (kF32)
                  if (wide && softmax && !a.bool_mask && step == 1) add = static_cast<const float*>(mask->data) + base + j0;
                if (a.bool_mask) {
                  const auto* mp = static_cast<const std::uint8_t*>(mask->data) + base + j0 * step;
                  for (i64 j = 0; j < nt; ++j) srow[j] = mp[j * step] ? srow[j] : masked;
                } else if (add == nullptr) {
                  const T* mp = static_cast<const T*>(mask->data) + base + j0 * step;
                  for (i64 j = 0; j < nt; ++j) srow[j] += FT::load(mp[j * step]);
                }
              }
              if (!softmax) continue;
              float& mr = m[static_cast<std::size_t>(r)];
              float& lr = l[static_cast<std::size_t>(r)];
#ifdef TA_WIDE
              const float corr = wide ? softmax_row_update_wide(srow, nt, mr, lr, add) : softmax_row_update(srow, nt, mr, lr);
#else
              const float corr = softmax_row_update(srow, nt, mr, lr);
#endif
              if (corr != 1.f) {
                float* arow = acc.data() + r * h;
                TA_SIMD
                for (i64 d = 0; d < h; ++d) arow[d] *= corr;
              }
            }
#ifdef TA_WIDE
            if (wide)
              pv_wide(s.data(), ld, rows, vt, nt, h, acc.data());  // acc += s · v
            else
#endif
              gemm_nn_accumulate(rows, h, nt, s.data(), vt, acc.data());  // acc += s · v
          }
          for (i64 r = 0; r < rows; ++r) {
            T* orow = op + a.out.at(b, head, r0 + r);
            // softmax: divide by the sum; a query whose every key is masked out gives zeros
            const float lr = l[static_cast<std::size_t>(r)];
            const float inv = !softmax ? 1.f : lr > 0.f && m[static_cast<std::size_t>(r)] != kNegInf ? 1.f / lr : 0.f;
            const float* arow = acc.data() + r * h;
            TA_SIMD
            for (i64 d = 0; d < h; ++d) orow[d] = FT::store(arow[d] * inv);
          }
        }
      },
      2);
}

}  // namespace

bool attention_runs_wide(std::int64_t head_size) {
#ifdef TA_WIDE
  return head_size > 0 && head_size % 16 == 0 && detail::avx512_kernels("TENSORACLE_ATTENTION_NO_AVX512");
#else
  (void)head_size;
  return false;
#endif
}

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
