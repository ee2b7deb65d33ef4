// The CPU backend's attention (kernels.h; AttentionParams in tensoracle/network.h): a blocked,
// fused attention. Each task takes a block of queries of one batch and query head and walks
// the keys in tiles: the tile's scores, then (softmax) the online update of each row's
// maximum, sum and output accumulator, so no [queries, keys] matrix exists beyond a tile.
// Loads convert to float32 into the tile buffers; everything after them is float32 arithmetic
// on those buffers, compiled for AVX-512 too where the CPU has it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
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

constexpr i64 kQueryBlock = 32;  // queries per task
constexpr i64 kKeyTile = 64;     // keys per tile
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// NaN-propagating maximum.
inline float max_nan(float a, float b) noexcept { return (b > a || b != b) ? b : a; }

// One tile's float32 work for `rows` queries against `nt` keys. q: [rows, h] (already scaled),
// kt: the keys transposed [h, kKeyTile], vf: the values [nt, h], s: [rows, kKeyTile] holding the
// masks' contributions on entry (0, a mask's value, or -inf / `kMasked` where a key is masked
// out), acc: [rows, h]; m and l: each row's running maximum and sum (softmax).
struct Tile {
  const float* q;
  const float* kt;
  const float* vf;
  float* s;
  const std::uint8_t* masked;  // [rows, kKeyTile]: 1 where the key is masked out
  float* acc;
  float* m;
  float* l;
  i64 rows, nt, h;
  bool softmax;
};

inline void run_tile(const Tile& t) {
  for (i64 r = 0; r < t.rows; ++r) {
    float* srow = t.s + r * kKeyTile;
    const std::uint8_t* mrow = t.masked + r * kKeyTile;
    const float* qrow = t.q + r * t.h;
    float* arow = t.acc + r * t.h;
    // scores: s[j] += sum_d q[d] * k[j][d], d outermost so that j vectorizes
    float dot[kKeyTile];
    std::fill_n(dot, t.nt, 0.f);
    for (i64 d = 0; d < t.h; ++d) {
      const float qd = qrow[d];
      const float* kd = t.kt + d * kKeyTile;
      TA_SIMD
      for (i64 j = 0; j < t.nt; ++j) dot[j] += qd * kd[j];
    }
    if (!t.softmax) {
      // no normalization: the scores weigh the values as they are; masked-out keys count 0
      for (i64 j = 0; j < t.nt; ++j) {
        if (mrow[j]) continue;
        const float w = dot[j] + srow[j];
        const float* vj = t.vf + j * t.h;
        TA_SIMD
        for (i64 d = 0; d < t.h; ++d) arow[d] += w * vj[d];
      }
      continue;
    }
    float tile_max = kNegInf;
    for (i64 j = 0; j < t.nt; ++j) {
      srow[j] = mrow[j] ? kNegInf : dot[j] + srow[j];
      tile_max = max_nan(tile_max, srow[j]);
    }
    const float m_new = max_nan(t.m[r], tile_max);
    if (m_new == kNegInf) continue;  // every key so far masked out
    const float corr = exp_nonpositive(t.m[r] - m_new);  // e^-inf = 0 for the first keys
    float sum = 0.f;
    TA_SIMD_REDUCE(+, sum)
    for (i64 j = 0; j < t.nt; ++j) {
      srow[j] = exp_nonpositive(srow[j] - m_new);
      sum += srow[j];
    }
    t.l[r] = t.l[r] * corr + sum;
    t.m[r] = m_new;
    if (corr != 1.f) {
      TA_SIMD
      for (i64 d = 0; d < t.h; ++d) arow[d] *= corr;
    }
    for (i64 j = 0; j < t.nt; ++j) {
      const float w = srow[j];
      if (w == 0.f) continue;
      const float* vj = t.vf + j * t.h;
      TA_SIMD
      for (i64 d = 0; d < t.h; ++d) arow[d] += w * vj[d];
    }
  }
}

#ifdef TA_WIDE
TA_WIDE_FUNCTION void run_tile_wide(const Tile& t) { run_tile(t); }
#endif

template <class FT>
void attention_typed(const AttentionParams& p, const AttentionShape& a, const TensorRef& q, const TensorRef& k,
                     const TensorRef& v, const TensorRef* mask, const TensorRef& out) {
  using T = typename FT::T;
  const T* qp = static_cast<const T*>(q.data);
  const T* kp = static_cast<const T*>(k.data);
  const T* vp = static_cast<const T*>(v.data);
  T* op = static_cast<T*>(out.data);
  const i64 h = a.head_size;
  const i64 blocks = (a.queries + kQueryBlock - 1) / kQueryBlock;
  const i64 tasks = a.batch * a.q_heads * blocks;
  const bool softmax = p.normalization == AttentionNormalizationOp::kSOFTMAX;
  [[maybe_unused]] const bool wide = detail::avx512_kernels("TENSORACLE_ATTENTION_NO_AVX512");
  detail::parallel_ranges(
      tasks,
      [&](i64 begin, i64 end) {
        std::vector<float> qf(static_cast<std::size_t>(kQueryBlock * h)), kt(static_cast<std::size_t>(h * kKeyTile)),
            vf(static_cast<std::size_t>(kKeyTile * h)), s(static_cast<std::size_t>(kQueryBlock * kKeyTile)),
            acc(static_cast<std::size_t>(kQueryBlock * h)), m(kQueryBlock), l(kQueryBlock);
        std::vector<std::uint8_t> masked(static_cast<std::size_t>(kQueryBlock * kKeyTile));
        for (i64 task = begin; task < end; ++task) {
          const i64 block = task % blocks, head = (task / blocks) % a.q_heads, b = task / (blocks * a.q_heads);
          const i64 kv_head = head / a.group;
          const i64 r0 = block * kQueryBlock, rows = std::min(kQueryBlock, a.queries - r0);
          const T* qb = qp + ((b * a.q_heads + head) * a.queries + r0) * h;
          const T* kb = kp + (b * a.kv_heads + kv_head) * a.keys * h;
          const T* vb = vp + (b * a.kv_heads + kv_head) * a.keys * h;
          for (i64 i = 0; i < rows * h; ++i) qf[static_cast<std::size_t>(i)] = FT::load(qb[i]) * p.scale;
          std::fill(acc.begin(), acc.end(), 0.f);
          std::fill(m.begin(), m.end(), kNegInf);
          std::fill(l.begin(), l.end(), 0.f);
          // causal: the last query of the block sees keys up to its own index
          const i64 key_end = p.causal ? std::min(a.keys, r0 + rows) : a.keys;
          for (i64 j0 = 0; j0 < key_end; j0 += kKeyTile) {
            const i64 nt = std::min(kKeyTile, key_end - j0);
            for (i64 j = 0; j < nt; ++j)
              for (i64 d = 0; d < h; ++d) {
                kt[static_cast<std::size_t>(d * kKeyTile + j)] = FT::load(kb[(j0 + j) * h + d]);
                vf[static_cast<std::size_t>(j * h + d)] = FT::load(vb[(j0 + j) * h + d]);
              }
            for (i64 r = 0; r < rows; ++r) {
              float* srow = s.data() + r * kKeyTile;
              std::uint8_t* mrow = masked.data() + r * kKeyTile;
              const i64 qi = r0 + r;
              for (i64 j = 0; j < nt; ++j) {
                srow[j] = 0.f;
                mrow[j] = p.causal && j0 + j > qi;
              }
              if (!mask) continue;
              const i64 base = b * a.mask_stride[0] + head * a.mask_stride[1] + qi * a.mask_stride[2];
              const i64 step = a.mask_stride[3];
              if (a.bool_mask) {
                const auto* mp = static_cast<const std::uint8_t*>(mask->data) + base;
                for (i64 j = 0; j < nt; ++j) mrow[j] = mp[(j0 + j) * step] == 0;
              } else {
                const T* mp = static_cast<const T*>(mask->data) + base;
                for (i64 j = 0; j < nt; ++j) srow[j] = FT::load(mp[(j0 + j) * step]);
              }
            }
            const Tile tile{qf.data(), kt.data(), vf.data(), s.data(), masked.data(), acc.data(), m.data(), l.data(),
                            rows, nt, h, softmax};
#ifdef TA_WIDE
            if (wide) {
              run_tile_wide(tile);
              continue;
            }
#endif
            run_tile(tile);
          }
          T* ob = op + ((b * a.q_heads + head) * a.queries + r0) * h;
          for (i64 r = 0; r < rows; ++r) {
            // softmax: divide by the sum; a query whose every key is masked out gives zeros
            const float inv = !softmax ? 1.f : l[static_cast<std::size_t>(r)] > 0.f ? 1.f / l[static_cast<std::size_t>(r)] : 0.f;
            const bool none = softmax && m[static_cast<std::size_t>(r)] == kNegInf;
            for (i64 d = 0; d < h; ++d)
              ob[r * h + d] = FT::store(none ? 0.f : acc[static_cast<std::size_t>(r * h + d)] * inv);
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
