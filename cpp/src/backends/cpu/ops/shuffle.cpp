// The CPU backend's shuffle: second_transpose(reshape(first_transpose(x))).
// A reshape moves no bytes (row-major); each non-identity transpose is one N-d permutation
// copy. When both transposes move data, the first goes to a temporary buffer.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backends/common/index_checks.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/op_kernel.h"
#include "backends/cpu/kernels_util.h"
#include "tensoracle/errors.h"

namespace tensoracle::cpu {

namespace {

using i64 = std::int64_t;
using detail::fail;

constexpr i64 kParallelMin = 32 * 1024;  // elements

// A permutation copy in the output's dim order: output dim i has size dims[i] and advances
// the input by in_stride[i] elements. Size-1 dims are dropped and output dims that are also
// adjacent (in order) in the input are merged, so an identity becomes one contiguous dim.
struct TransposePlan {
  int rank = 0;
  i64 dims[Dims::kMaxRank] = {};
  i64 in_stride[Dims::kMaxRank] = {};
};

TransposePlan plan_transpose(const Dims& d, const Permutation& perm) {
  const int r = d.rank();
  i64 stride[Dims::kMaxRank];
  i64 s = 1;
  for (int k = r - 1; k >= 0; --k) {
    stride[k] = s;
    s *= d[k];
  }
  TransposePlan p;
  for (int i = 0; i < r; ++i) {
    const int k = perm.order[static_cast<std::size_t>(i)];
    const i64 n = d[k];
    if (n == 1) continue;
    if (p.rank > 0 && p.in_stride[p.rank - 1] == stride[k] * n) {
      p.dims[p.rank - 1] *= n;
      p.in_stride[p.rank - 1] = stride[k];
    } else {
      p.dims[p.rank] = n;
      p.in_stride[p.rank] = stride[k];
      ++p.rank;
    }
  }
  return p;
}

template <class T>
void parallel_memcpy(const T* in, T* out, i64 n) {
  detail::parallel_ranges(
      n, [&](i64 b, i64 e) { std::memcpy(out + b, in + b, static_cast<std::size_t>(e - b) * sizeof(T)); },
      std::int64_t{1} << 20);
}

// out (contiguous, n elements) = the permutation copy of `in` described by p.
template <class T>
void transpose_typed(const T* in, T* out, const TransposePlan& p, i64 n) {
  const int m = p.rank;
  if (m == 0 || (m == 1 && p.in_stride[0] == 1)) {
    parallel_memcpy(in, out, n);
    return;
  }
  i64 out_stride[Dims::kMaxRank];
  i64 s = 1;
  for (int k = m - 1; k >= 0; --k) {
    out_stride[k] = s;
    s *= p.dims[k];
  }
  const i64 inner = p.dims[m - 1];

  if (p.in_stride[m - 1] == 1) {
    // Output rows are contiguous in the input too: copy row by row.
    const i64 rows = n / inner;
    detail::parallel_ranges(
        rows,
        [&](i64 begin, i64 end) {
          i64 idx[Dims::kMaxRank] = {};
          i64 off = 0, rem = begin;
          for (int k = m - 2; k >= 0; --k) {
            idx[k] = rem % p.dims[k];
            rem /= p.dims[k];
            off += idx[k] * p.in_stride[k];
          }
          for (i64 r = begin; r < end; ++r) {
            std::memcpy(out + r * inner, in + off, static_cast<std::size_t>(inner) * sizeof(T));
            for (int k = m - 2; k >= 0; --k) {
              ++idx[k];
              off += p.in_stride[k];
              if (idx[k] < p.dims[k]) break;
              off -= idx[k] * p.in_stride[k];
              idx[k] = 0;
            }
          }
        },
        std::max<i64>(1, kParallelMin / inner));
    return;
  }

  // The input's contiguous dim is output dim c (c < m - 1): copy tiles of kTile x kTile over
  // (dim c, last dim) through a local buffer, reading kTile-element runs of the input and
  // writing kTile-element runs of the output. (Walking the tile directly would touch kTile
  // lines a power-of-two stride apart, which share an L1 set and evict each other.)
  int c = -1;
  for (int k = 0; k < m - 1; ++k)
    if (p.in_stride[k] == 1) c = k;
  if (c < 0) fail("shuffle: internal error: no contiguous input dim");  // cannot happen: row-major input
  constexpr i64 kTile = sizeof(T) >= 4 ? 32 : 64;
  int outer_dims[Dims::kMaxRank];
  int no = 0;
  for (int k = 0; k < m - 1; ++k)
    if (k != c) outer_dims[no++] = k;
  const i64 dc = p.dims[c], oc = out_stride[c], sj = p.in_stride[m - 1];
  const i64 tiles_c = (dc + kTile - 1) / kTile;
  const i64 tasks = n / (dc * inner) * tiles_c;
  detail::parallel_ranges(
      tasks,
      [&](i64 begin, i64 end) {
        for (i64 t = begin; t < end; ++t) {
          i64 rem = t / tiles_c, in_off = 0, out_off = 0;
          for (int q = no - 1; q >= 0; --q) {
            const int k = outer_dims[q];
            const i64 idx = rem % p.dims[k];
            rem /= p.dims[k];
            in_off += idx * p.in_stride[k];
            out_off += idx * out_stride[k];
          }
          const i64 c0 = (t % tiles_c) * kTile, cn = std::min(dc - c0, kTile);
          T tile[kTile * kTile];
          for (i64 j0 = 0; j0 < inner; j0 += kTile) {
            const i64 jn = std::min(inner - j0, kTile);
            for (i64 j = 0; j < jn; ++j) {  // input rows: contiguous along dim c
              const T* src = in + in_off + (j0 + j) * sj + c0;
              std::copy_n(src, cn, tile + j * kTile);
            }
            for (i64 ci = 0; ci < cn; ++ci) {  // output rows: contiguous along the last dim
              T* dst = out + out_off + (c0 + ci) * oc + j0;
              for (i64 j = 0; j < jn; ++j) dst[j] = tile[j * kTile + ci];
            }
          }
        }
      },
      std::max<i64>(1, kParallelMin / (kTile * inner)));
}

void transpose(const void* in, void* out, const Dims& in_dims, const Permutation& perm, std::size_t esize, i64 n) {
  const TransposePlan p = plan_transpose(in_dims, perm);
  switch (esize) {
    case 1: transpose_typed(static_cast<const std::uint8_t*>(in), static_cast<std::uint8_t*>(out), p, n); break;
    case 2: transpose_typed(static_cast<const std::uint16_t*>(in), static_cast<std::uint16_t*>(out), p, n); break;
    case 4: transpose_typed(static_cast<const std::uint32_t*>(in), static_cast<std::uint32_t*>(out), p, n); break;
    case 8: transpose_typed(static_cast<const std::uint64_t*>(in), static_cast<std::uint64_t*>(out), p, n); break;
    default: fail("shuffle: unsupported element size " + std::to_string(esize));
  }
}

bool is_identity(const Permutation& p, int rank) {
  for (int i = 0; i < rank; ++i)
    if (p.order[static_cast<std::size_t>(i)] != i) return false;
  return true;
}

}  // namespace

void shuffle(const ShuffleParams& p, const TensorRef& x, const TensorRef& out) {
  const backends::common::ShuffleShape shape = backends::common::check_shuffle(detail::kFail, p, x, out);
  const i64 n = shape.n;
  const Dims& reshaped = shape.reshaped;
  const int r1 = x.dims.rank(), r2 = out.dims.rank();
  if (n == 0) return;
  const std::size_t esize = element_size(x.type);
  const bool id1 = is_identity(p.first_transpose, r1), id2 = is_identity(p.second_transpose, r2);
  if (id1 && id2) {
    if (x.data != out.data) transpose(x.data, out.data, Dims{n}, Permutation{}, esize, n);  // a copy
  } else if (id2) {
    transpose(x.data, out.data, x.dims, p.first_transpose, esize, n);
  } else if (id1) {
    transpose(x.data, out.data, reshaped, p.second_transpose, esize, n);
  } else {
    std::vector<std::uint64_t> tmp((static_cast<std::size_t>(n) * esize + 7) / 8);
    transpose(x.data, tmp.data(), x.dims, p.first_transpose, esize, n);
    transpose(tmp.data(), out.data, reshaped, p.second_transpose, esize, n);
  }
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kShuffleKernel = {
    LayerType::kSHUFFLE, nullptr, nullptr, [](const OpCall& c) {
      const auto& p = std::get<ShuffleParams>(c.node.params);
      if (c.node.inputs.size() > 1) {  // reshape dims from a shape tensor: the output's dims say them
        ShuffleParams q = p;
        q.reshape_dims = c.out.dims;
        shuffle(q, ref(c.in[0]), ref(c.out));
      } else {
        shuffle(p, ref(c.in[0]), ref(c.out));
      }
    }};

}  // namespace ops

}  // namespace tensoracle::cpu
