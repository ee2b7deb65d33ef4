// The CUDA backend's attention (kernels.h; AttentionParams in tensoracle/network.h), fused: the
// [queries, keys] scores never reach global memory. Two kernels:
// - float16 / bfloat16 with head size 32, 64 or 128 on sm80+: a tensor-core kernel (below);
//   its probabilities are rounded to the input type for the second product, as in every
//   flash-attention kernel;
// - everything else (float32, other head sizes up to 256): one warp per query row walks the
//   keys with an online softmax (running maximum, sum and output accumulator in float32);
//   each lane holds the head dims lane, lane + 32, ... of the query and the accumulator, so
//   every key's row and value row are read coalesced.
// Both read query, key and value and write the output through AttentionShape's HeadRows: the
// [B, N, S, H] layout or the sequence-major rows the fusion pass leaves (AttentionParams::heads);
// the tensor-core kernel wants every row on 16 bytes (flash_aligned), else the row kernel runs.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <type_traits>

#include "backends/common/attention_shape.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/op_kernel.h"

namespace tensoracle::cuda {

namespace {

using dev::i64;
using backends::common::AttentionShape;

constexpr int kWarps = 4;  // query rows per block

struct RowParams {
  AttentionShape a;
  float scale;
  bool causal, softmax;
};

__device__ inline float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// kPer: head dims per lane (head size <= 32 * kPer). An additive mask has the query's type.
template <class Tag, int kPer>
__global__ void __launch_bounds__(kWarps * 32) attention_rows(RowParams P, const typename Tag::T* __restrict__ q,
                                                              const typename Tag::T* __restrict__ k,
                                                              const typename Tag::T* __restrict__ v,
                                                              const void* __restrict__ mask,
                                                              typename Tag::T* __restrict__ out) {
  using T = typename Tag::T;
  const AttentionShape& a = P.a;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const i64 rows = a.batch * a.q_heads * a.queries;
  const i64 warps = static_cast<i64>(gridDim.x) * kWarps;
  for (i64 row = static_cast<i64>(blockIdx.x) * kWarps + threadIdx.x / 32; row < rows; row += warps) {
    const i64 qi = row % a.queries, head = (row / a.queries) % a.q_heads, b = row / (a.queries * a.q_heads);
    const i64 h = a.head_size;
    const T* qr = q + a.q.at(b, head, qi);
    const T* kh = k + a.k.at(b, head / a.group, 0);
    const T* vh = v + a.v.at(b, head / a.group, 0);
    float qreg[kPer], acc[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const i64 d = lane + 32 * i;
      qreg[i] = d < h ? Tag::load(qr[d]) * P.scale : 0.f;
      acc[i] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    const i64 key_end = P.causal ? (qi + 1 < a.keys ? qi + 1 : a.keys) : a.keys;
    const i64 mbase = b * a.mask_stride[0] + head * a.mask_stride[1] + qi * a.mask_stride[2];
    for (i64 j = 0; j < key_end; ++j) {
      float add = 0.f;
      if (a.has_mask) {
        const i64 off = mbase + j * a.mask_stride[3];
        if (a.bool_mask) {
          if (static_cast<const std::uint8_t*>(mask)[off] == 0) continue;
        } else {
          add = Tag::load(static_cast<const T*>(mask)[off]);
        }
      }
      const T* kr = kh + j * a.k.row;
      const T* vr = vh + j * a.v.row;
      float part = 0.f;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const i64 d = lane + 32 * i;
        if (d < h) part += qreg[i] * Tag::load(kr[d]);
      }
      const float s = warp_sum(part) + add;
      float w;
      if (P.softmax) {
        const float m_new = (s > m || s != s) ? s : m;
        if (m_new == -INFINITY) continue;  // a score of -inf: nothing to add yet
        const float corr = expf(m - m_new);  // e^-inf = 0 for the first key
        w = expf(s - m_new);
        l = l * corr + w;
#pragma unroll
        for (int i = 0; i < kPer; ++i) acc[i] *= corr;
        m = m_new;
      } else {
        w = s;
      }
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const i64 d = lane + 32 * i;
        if (d < h) acc[i] += w * Tag::load(vr[d]);
      }
    }
    // softmax: divide by the sum; a query whose every key is masked out gives zeros
    const float inv = !P.softmax ? 1.f : l > 0.f ? 1.f / l : 0.f;
    T* o = out + a.out.at(b, head, qi);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const i64 d = lane + 32 * i;
      if (d < h) o[d] = Tag::store(P.softmax && m == -INFINITY ? 0.f : acc[i] * inv);
    }
  }
}

template <class Tag, int kPer>
void launch_rows(const RowParams& P, const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef* mask,
                 const TensorRef& out, cudaStream_t stream) {
  using T = typename Tag::T;
  const i64 rows = P.a.batch * P.a.q_heads * P.a.queries;
  const i64 need = (rows + kWarps - 1) / kWarps;
  const unsigned blocks = static_cast<unsigned>(need > 65535 * 16 ? 65535 * 16 : need);
  attention_rows<Tag, kPer><<<blocks, kWarps * 32, 0, stream>>>(
      P, static_cast<const T*>(q.data), static_cast<const T*>(k.data), static_cast<const T*>(v.data),
      mask ? mask->data : nullptr, static_cast<T*>(out.data));
}

// ---- the tensor-core kernel: float16 / bfloat16, head size 32, 64 or 128, sm80+ ---------------
//
// FlashAttention-2's scheme with mma.sync m16n8k16 (float32 accumulators): a block of 4 warps
// takes 64 queries of one batch and head, each warp 16 of them; the keys and values go through
// shared memory in tiles of 64. Per tile a warp computes its 16 x 64 scores (Q fragments held
// in registers, K fragments by ldmatrix), masks and scales them, updates each row's running
// maximum and sum, turns the probabilities into the A fragments of the second product in
// registers (the layouts coincide) and adds P·V (V fragments by ldmatrix.trans).

constexpr int kFlashRows = 64;  // queries per block
constexpr int kFlashKeys = 64;  // keys per tile
constexpr int kFlashPad = 8;    // halves of padding per shared row (bank conflicts of ldmatrix)

template <class T>
struct MmaType;
template <>
struct MmaType<__half> {
  __device__ static std::uint32_t pack(float a, float b) {
    const __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<const std::uint32_t*>(&h);
  }
  __device__ static void mma(float* c, const std::uint32_t* a, const std::uint32_t* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};
template <>
struct MmaType<__nv_bfloat16> {
  __device__ static std::uint32_t pack(float a, float b) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<const std::uint32_t*>(&h);
  }
  __device__ static void mma(float* c, const std::uint32_t* a, const std::uint32_t* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

__device__ inline std::uint32_t smem_addr(const void* p) { return static_cast<std::uint32_t>(__cvta_generic_to_shared(p)); }

__device__ inline void ldmatrix_x4(std::uint32_t* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ inline void ldmatrix_x4_trans(std::uint32_t* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// Copies rows [row0, row0 + kRows) of a [rows, D] matrix whose rows start `ld` elements apart
// into shared memory (stride D + pad), zeros beyond `rows`; 16 bytes per thread per step,
// asynchronously (cp.async: the caller commits the group and waits for it).
template <int D, int kRows, class T>
__device__ inline void load_tile_async(T* __restrict__ s, const T* __restrict__ g, i64 ld, int row0, int rows) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  for (int c = threadIdx.x; c < kRows * kChunks; c += blockDim.x) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const bool inside = row0 + r < rows;
    const T* src = inside ? g + static_cast<i64>(row0 + r) * ld + col : g;
    const int bytes = inside ? 16 : 0;  // 0: the 16 bytes are zero-filled
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(s + r * (D + kFlashPad) + col)),
                 "l"(src), "r"(bytes));
  }
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

constexpr float kLog2e = 1.4426950408889634f;

template <class Tag, int D>
__global__ void __launch_bounds__(128) attention_flash(RowParams P, const typename Tag::T* __restrict__ q,
                                                       const typename Tag::T* __restrict__ k,
                                                       const typename Tag::T* __restrict__ v,
                                                       const void* __restrict__ mask, typename Tag::T* __restrict__ out) {
  using T = typename Tag::T;
  using M = MmaType<T>;
  constexpr int kStride = D + kFlashPad;
  extern __shared__ __align__(16) unsigned char flash_smem[];
  T* qs = reinterpret_cast<T*>(flash_smem);
  T* ks = qs + kFlashRows * kStride;
  T* vs = ks + kFlashKeys * kStride;
  const AttentionShape& a = P.a;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) & 31;
  const int g = lane / 4, t = lane % 4;
  // the launch checks that queries and keys fit in 31 bits
  const int queries = static_cast<int>(a.queries), keys = static_cast<int>(a.keys);
  const int blocks = (queries + kFlashRows - 1) / kFlashRows;
  const int block = static_cast<int>(blockIdx.x % static_cast<unsigned>(blocks));
  const i64 bh = blockIdx.x / static_cast<unsigned>(blocks);
  const i64 head = bh % a.q_heads, b = bh / a.q_heads;
  const int q0 = block * kFlashRows;
  const T* qg = q + a.q.at(b, head, 0);
  const T* kg = k + a.k.at(b, head / a.group, 0);
  const T* vg = v + a.v.at(b, head / a.group, 0);
  const int key_end = P.causal ? min(q0 + kFlashRows, keys) : keys;

  // The query tile and the first key tile in flight together; then per key tile the value tile
  // loads while the scores and the softmax run, and the next key tile while P·V runs.
  load_tile_async<D, kFlashRows>(qs, qg, a.q.row, q0, queries);
  load_tile_async<D, kFlashKeys>(ks, kg, a.k.row, 0, keys);
  cp_async_commit();
  // the scores go to exp2: the scale (and an additive mask) carry log2(e) under a softmax
  const float scale = P.softmax ? P.scale * kLog2e : P.scale;
  const float mask_scale = P.softmax ? kLog2e : 1.f;

  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  i64 mask_row[2] = {0, 0};
  if (a.has_mask)
    for (int r = 0; r < 2; ++r) mask_row[r] = b * a.mask_stride[0] + head * a.mask_stride[1] + row[r] * a.mask_stride[2];
  std::uint32_t qf[D / 16][4];

  for (int j0 = 0; j0 < key_end; j0 += kFlashKeys) {
    load_tile_async<D, kFlashKeys>(vs, vg, a.v.row, j0, keys);
    cp_async_commit();
    cp_async_wait<1>();  // the key tile (and, the first time, the query tile) has landed
    __syncthreads();
    if (j0 == 0) {
      // the warp's Q fragments, A operands of m16n8k16 (row-major 16 x 16 per k step)
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        ldmatrix_x4(qf[kk], qs + (warp * 16 + (lane % 8) + 8 * ((lane / 8) % 2)) * kStride + kk * 16 + 8 * (lane / 16));
    }
    // scores: 16 rows x 64 keys per warp, 8 n-tiles of 8 keys
    float s[kFlashKeys / 8][4];
#pragma unroll
    for (int n = 0; n < kFlashKeys / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
      for (int n = 0; n < kFlashKeys / 8; n += 2) {
        // B fragments of two n-tiles: K rows (keys) as stored, 16 head dims
        std::uint32_t kb[4];
        ldmatrix_x4(kb, ks + (n * 8 + (lane % 8) + 8 * (lane / 16)) * kStride + kk * 16 + 8 * ((lane / 8) % 2));
        M::mma(s[n], qf[kk], kb);
        M::mma(s[n + 1], qf[kk], kb + 2);
      }
    __syncthreads();  // every warp is done with the key tile: the next one may load
    if (j0 + kFlashKeys < key_end) load_tile_async<D, kFlashKeys>(ks, kg, a.k.row, j0 + kFlashKeys, keys);
    cp_async_commit();  // (an empty group on the last tile keeps the count)
    // scale, masks, and each row's maximum over the tile
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kFlashKeys / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2;
        const int j = j0 + n * 8 + 2 * t + (e % 2);
        float x = s[n][e] * scale;
        bool keep = j < keys && (!P.causal || j <= row[r]);
        if (keep && a.has_mask && row[r] < queries) {
          const i64 off = mask_row[r] + j * a.mask_stride[3];
          if (a.bool_mask) keep = static_cast<const std::uint8_t*>(mask)[off] != 0;
          else x += Tag::load(static_cast<const T*>(mask)[off]) * mask_scale;
        }
        if (!P.softmax) {
          s[n][e] = keep ? x : 0.f;
          continue;
        }
        x = keep ? x : -INFINITY;
        s[n][e] = x;
        tile_max[r] = (x > tile_max[r] || x != x) ? x : tile_max[r];
      }
    if (P.softmax) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float tm = tile_max[r];
        for (int o2 = 1; o2 < 4; o2 <<= 1) {
          const float y = __shfl_xor_sync(0xffffffffu, tm, o2);
          tm = (y > tm || y != y) ? y : tm;
        }
        const float m_new = (tm > m[r] || tm != tm) ? tm : m[r];
        // every key so far masked out: the probabilities are 0 and nothing is rescaled
        const float base = m_new == -INFINITY ? 0.f : m_new;
        const float corr = exp2f(m[r] - base);
        float sum = 0.f;
#pragma unroll
        for (int n = 0; n < kFlashKeys / 8; ++n)
#pragma unroll
          for (int e = 2 * r; e < 2 * r + 2; ++e) {
            s[n][e] = exp2f(s[n][e] - base);
            sum += s[n][e];
          }
        l[r] = l[r] * corr + sum;  // this thread's part of the row's sum (added up at the end)
        m[r] = m_new;
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
          o[n][2 * r] *= corr;
          o[n][2 * r + 1] *= corr;
        }
      }
    }
    cp_async_wait<1>();  // the value tile has landed (the next key tile may still be loading)
    __syncthreads();
    // O += P·V: P's C fragments of n-tiles 2kk and 2kk + 1 are the A fragment of k step kk
#pragma unroll
    for (int kk = 0; kk < kFlashKeys / 16; ++kk) {
      std::uint32_t pa[4] = {M::pack(s[2 * kk][0], s[2 * kk][1]), M::pack(s[2 * kk][2], s[2 * kk][3]),
                             M::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]), M::pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int n = 0; n < D / 8; n += 2) {
        // B fragments of two n-tiles (8 head dims each): V rows (keys) transposed
        std::uint32_t vb[4];
        ldmatrix_x4_trans(vb, vs + (kk * 16 + (lane % 8) + 8 * ((lane / 8) % 2)) * kStride + n * 8 + 8 * (lane / 16));
        M::mma(o[n], pa, vb);
        M::mma(o[n + 1], pa, vb + 2);
      }
    }
    __syncthreads();  // every warp is done with the value tile: the next one may load
  }
  cp_async_wait<0>();
  // the row sums over the 4 threads of each row, then the output
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = l[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const float inv = !P.softmax ? 1.f : sum > 0.f && m[r] != -INFINITY ? 1.f / sum : 0.f;
    if (row[r] >= queries) continue;
    T* orow = out + a.out.at(b, head, row[r]);
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      const std::uint32_t packed = M::pack(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
      *reinterpret_cast<std::uint32_t*>(orow + n * 8 + 2 * t) = packed;
    }
  }
}

template <class Tag, int D>
void launch_flash(const RowParams& P, const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef* mask,
                  const TensorRef& out, cudaStream_t stream) {
  using T = typename Tag::T;
  constexpr int kSmem = (kFlashRows + 2 * kFlashKeys) * (D + kFlashPad) * static_cast<int>(sizeof(T));
  static const cudaError_t attr =
      cudaFuncSetAttribute(attention_flash<Tag, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  dev::check(attr, "attention: shared memory of the tensor-core kernel");
  const i64 grid = P.a.batch * P.a.q_heads * ((P.a.queries + kFlashRows - 1) / kFlashRows);
  if (grid > INT32_MAX) dev::unsupported("attention: " + dev::num(grid) + " blocks");
  attention_flash<Tag, D><<<static_cast<unsigned>(grid), 128, kSmem, stream>>>(
      P, static_cast<const T*>(q.data), static_cast<const T*>(k.data), static_cast<const T*>(v.data),
      mask ? mask->data : nullptr, static_cast<T*>(out.data));
}

// Whether the tensor-core kernel takes a float16 / bfloat16 attention of this head size on the
// current device (sm80 or newer); TENSORACLE_ATTENTION_KERNEL=rows sends every attention to
// the row kernel (for the tests that compare the two, and for debugging).
bool flash_kernel_fits_impl(i64 head_size) {
  if (head_size != 32 && head_size != 64 && head_size != 128) return false;
  if (const char* e = std::getenv("TENSORACLE_ATTENTION_KERNEL"); e && std::string_view(e) == "rows") return false;
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess)
    return false;
  return major >= 8;
}

// The tensor-core kernel reads 16-byte chunks of rows and writes pairs of elements: every row
// must start on 16 bytes (offsets and strides multiples of 8 elements, bases aligned).
bool flash_aligned(const AttentionShape& a, const TensorRef& q, const TensorRef& k, const TensorRef& v,
                   const TensorRef& out) {
  auto fits = [](const backends::common::HeadRows& r, const void* p) {
    return (r.offset | r.batch | r.head | r.row) % 8 == 0 && reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
  };
  // (its row and key indices are 32-bit)
  return a.queries < (i64{1} << 30) && a.keys < (i64{1} << 30) && fits(a.q, q.data) && fits(a.k, k.data) &&
         fits(a.v, v.data) && fits(a.out, out.data);
}

}  // namespace

bool attention_tensor_cores(std::int64_t head_size) { return flash_kernel_fits_impl(head_size); }

void attention(const AttentionParams& p, const TensorRef& q, const TensorRef& k, const TensorRef& v, const TensorRef* mask,
               const TensorRef& out, cudaStream_t stream) {
  const AttentionShape a = backends::common::check_attention(dev::kFail, p, q, k, v, mask, out);
  if (a.batch * a.q_heads * a.queries * a.head_size == 0) return;
  if (a.head_size > 256) dev::unsupported("attention: head size " + dev::num(a.head_size) + " is above 256");
  const RowParams P{a, p.scale, p.causal, p.normalization == AttentionNormalizationOp::kSOFTMAX};
  const bool ok = dev::with_float(q.type, [&](auto tag) {
    using Tag = decltype(tag);
    if constexpr (std::is_same_v<Tag, dev::F16> || std::is_same_v<Tag, dev::BF16>) {
      if (attention_tensor_cores(a.head_size) && flash_aligned(a, q, k, v, out)) {
        if (a.head_size == 32) launch_flash<Tag, 32>(P, q, k, v, mask, out, stream);
        else if (a.head_size == 64) launch_flash<Tag, 64>(P, q, k, v, mask, out, stream);
        else launch_flash<Tag, 128>(P, q, k, v, mask, out, stream);
        return;
      }
    }
    if (a.head_size <= 32) launch_rows<Tag, 1>(P, q, k, v, mask, out, stream);
    else if (a.head_size <= 64) launch_rows<Tag, 2>(P, q, k, v, mask, out, stream);
    else if (a.head_size <= 128) launch_rows<Tag, 4>(P, q, k, v, mask, out, stream);
    else launch_rows<Tag, 8>(P, q, k, v, mask, out, stream);
  });
  if (!ok) dev::fail("attention takes float32, float16 or bfloat16, not " + dev::tn(q.type));
  dev::check_launch("attention");
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kAttentionKernel = {
    LayerType::kATTENTION, nullptr, nullptr, [](const OpCall& c) {
      const TensorRef mask = c.node.inputs.size() > 3 ? ref(c.in[3]) : TensorRef{};
      attention(std::get<AttentionParams>(c.node.params), ref(c.in[0]), ref(c.in[1]), ref(c.in[2]),
                c.node.inputs.size() > 3 ? &mask : nullptr, ref(c.out), c.stream);
    }};

}  // namespace ops

}  // namespace tensoracle::cuda
