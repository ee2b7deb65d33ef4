// Internal to the CUDA backend: what reduce, softmax and normalization share (ops/reduce.cu,
// softmax.cu, normalization.cu; grid_for and kMaxBlock also topk.cu). Defined in
// reduce_util.cu where not templates or inline.
//
// - One view of the input, shared by reduce, softmax and normalization, built on the host
//   exactly as the CPU builds it (make_layout): dims of size 1 dropped, adjacent dims of the
//   same kind (reduced or kept) merged. Each output (a statistics set for normalization, a row
//   for softmax) owns the elements of its reduced groups. A "team" of threads walks them:
//     SubRowTeam - 8, 16 or 32 lanes per output (rows of up to 128, 256 or 512 elements),
//                  2-4 outputs sharing a warp; rows of contiguous elements are read once
//                  into registers and every pass runs there (softmax, normalization),
//     RowTeam    - one warp per output (up to 1023 elements) or one block per output (longer
//                  rows), the team's threads striding over the reduced elements,
//     ColumnTeam - 32 outputs per block, one per threadIdx.x, when the innermost dim is kept
//                  and at least 32 long (loads stay coalesced); threadIdx.y splits the
//                  reduced positions.
//   Partial results combine in a fixed order (shuffle tree, then warps/rows in order), so
//   every result is deterministic.
// - Accumulation as on the CPU: float SUM/PROD/AVG, softmax sums and normalization statistics
//   in double; a double result reaches float16/bfloat16 through round-to-odd float32
//   (to_float_odd, as kernels_util.h), i.e. it is rounded once. MAX/MIN in float, any NaN
//   wins. int32/int64 SUM/PROD wrap (unsigned arithmetic), MAX/MIN exact.
// - Float operations whose rounding the CPU's result depends on (softmax's exp polynomial,
//   the normalization formula) use the _rn intrinsics so nvcc does not contract them into
//   FMAs: the CPU (x86-64 baseline) has none, so the GPU rounds every step the same way.
//   Results may still differ from the CPU in the last bit of a double sum (another order).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backends/common/reduce_layout.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"

namespace tensoracle::cuda::reduction {

using dev::BF16;
using dev::F16;
using dev::F32;
using dev::i64;
using dev::checked_volume;
using dev::desc;
using dev::fail;
using dev::tn;

// Grid size for `units` independent work units of `per_block` units per block.
inline unsigned grid_for(i64 units, i64 per_block = 1) {
  const i64 need = (units + per_block - 1) / per_block;
  constexpr i64 kMaxBlocks = 65535 * 8;
  return static_cast<unsigned>(need < 1 ? 1 : need > kMaxBlocks ? kMaxBlocks : need);
}

// ---- the reduce/normalize view (backends/common/reduce_layout.h) ---------------------------

// The view of a normalization has one more dim than its input (the split channels).
using backends::common::kMaxGroups;

// What the kernels need of the view. Output o (numbered row-major over the kept groups, i.e.
// the packed order of the reduced tensor) is o = kb * kin + c: kb over the kept groups
// (nk, ks, kst), c in the innermost group when it is kept (kin = its size, else 1). Its
// elements are at base(o) + off(r) + i: r over the reduced groups (nr, rs, rst; rcount
// positions), i in the innermost group when it is reduced (rin = its size, else 1).
// Offsets are element offsets into the packed input.
struct Plan {
  int nk = 0, nr = 0;
  i64 ks[kMaxGroups] = {}, kst[kMaxGroups] = {};
  i64 rs[kMaxGroups] = {}, rst[kMaxGroups] = {};
  i64 kin = 1, rin = 1;
  i64 rcount = 1;  // product of rs
  i64 count = 1;   // reduced elements per output: rcount * rin
  i64 nout = 1;    // outputs: product of ks * kin
};

// The view as the kernels need it (backends/common/reduce_layout.h: the CPU's too).
Plan plan_of(const backends::common::ReduceLayout& L);

// `reduced[i]` says whether dim i is reduced; every dim must be >= 1.
Plan make_plan(int rank, const i64* dims, const bool* reduced);

// ---- device helpers ----------------------------------------------------------------------

// Offset of the flat index `flat` over n dims (row-major) with the given strides.
__device__ inline i64 group_offset(i64 flat, int n, const i64* size, const i64* stride) {
  i64 off = 0;
  for (int g = n - 1; g >= 0; --g) {
    off += (flat % size[g]) * stride[g];
    flat /= size[g];
  }
  return off;
}

// The offset of output o's first element (its kept position). Without a kept innermost group
// and with at most one kept group (rows over the innermost dims: a softmax or LayerNorm over
// the last axis), no division: o < ks[0].
__device__ inline i64 base_of(const Plan& p, i64 o) {
  if (p.kin == 1 && p.nk <= 1) return p.nk == 0 ? 0 : o * p.kst[0];
  return group_offset(o / p.kin, p.nk, p.ks, p.kst) + o % p.kin;
}

// d rounded to float32 toward zero with the lowest bit set when inexact (round to odd), as the
// CPU's to_float_odd: a later rounding to float16/bfloat16 then equals rounding d once.
__device__ inline float to_float_odd(double d) {
  const float f = __double2float_rz(d);
  if (static_cast<double>(f) == d || d != d) return f;
  return __uint_as_float(__float_as_uint(f) | 1u);
}

// Rounds a double once to the storage type (the CPU's store_d).
template <class Tag>
__device__ inline typename Tag::T store_d(double d) {
  if constexpr (std::is_same_v<Tag, F32>) return __double2float_rn(d);
  else return Tag::store(to_float_odd(d));
}

// Calls f(Tag{}) for float32, float16 or bfloat16 and returns true; false for any other type.
// (dev::with_float would also instantiate f for fp8, which none of these kernels take.)
template <class Fn>
bool with_float3(DataType t, Fn&& f) {
  switch (t) {
    case DataType::kFLOAT: f(F32{}); return true;
    case DataType::kHALF: f(F16{}); return true;
    case DataType::kBF16: f(BF16{}); return true;
    default: return false;
  }
}

// ---- teams: who reduces one output ---------------------------------------------------------

// Shared scratch of the block and column reductions: up to 1024 values of <= 8 bytes.
constexpr int kScratch = 1024;
constexpr int kMaxBlock = 512;  // threads per block of these kernels (__launch_bounds__)

// Reduces v over the warp (tree over lanes, fixed order); every lane gets lane 0's result.
template <class A, class Op>
__device__ inline A warp_reduce(A v, Op op) {
  for (int d = 16; d > 0; d >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, d));
  return __shfl_sync(0xffffffffu, v, 0);
}

// One output per team of blockDim.x threads; blockDim = (32, warps): one warp per output
// (threadIdx.y picks the warp's output), or (threads, 1): one block per output.
struct RowTeam {
  static constexpr bool kColumns = false;
  static constexpr bool kCached = false;  // see cached_rows
  static constexpr int kRows = 1;         // outputs per warp
  __device__ static int rank() { return static_cast<int>(threadIdx.x); }
  __device__ static int size() { return static_cast<int>(blockDim.x); }
  __device__ static i64 first() { return static_cast<i64>(blockIdx.x) * blockDim.y + threadIdx.y; }
  __device__ static i64 step() { return static_cast<i64>(gridDim.x) * blockDim.y; }
  __device__ static bool leader() { return threadIdx.x == 0; }
  // Lanes first (a shuffle tree), then, for a block, the warps' results in order; every
  // thread of the team gets the result.
  template <class A, class Op>
  __device__ static A reduce(A v, Op op, A* scratch) {
    if (blockDim.x == 32) return warp_reduce(v, op);
    for (int d = 16; d > 0; d >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, d));
    __syncthreads();  // the scratch's previous use is over
    if ((threadIdx.x & 31u) == 0) scratch[threadIdx.x / 32] = v;
    __syncthreads();
    A r = scratch[0];
    for (unsigned w = 1; w < blockDim.x / 32; ++w) r = op(r, scratch[w]);
    return r;
  }
};

// W <= 32 lanes per output, blockDim = (32, warps): each warp serves 32 / W consecutive outputs
// at once. For short rows, whose time goes to the per-output work (the reductions' shuffle
// trees, a division): a warp does it for several outputs with the same instructions. The loop
// over units stays uniform across the warp (its outputs past the end are inactive).
template <int W>
struct SubRowTeam {
  static_assert(W == 8 || W == 16 || W == 32);
  static constexpr bool kColumns = false;
  static constexpr bool kCached = true;
  static constexpr int kRows = 32 / W;
  __device__ static int rank() { return static_cast<int>(threadIdx.x) % W; }
  __device__ static int size() { return W; }
  __device__ static i64 first() { return (static_cast<i64>(blockIdx.x) * blockDim.y + threadIdx.y) * kRows; }
  __device__ static i64 step() { return static_cast<i64>(gridDim.x) * blockDim.y * kRows; }
  __device__ static bool leader() { return rank() == 0; }
  // A shuffle tree over the W lanes of the output; each of them gets the result.
  template <class A, class Op>
  __device__ static A reduce(A v, Op op, A*) {
    for (int d = W / 2; d > 0; d >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, d, W));
    return __shfl_sync(0xffffffffu, v, 0, W);
  }
};

// blockDim = (32, rows): output per threadIdx.x, reduced positions split over threadIdx.y.
struct ColumnTeam {
  static constexpr bool kColumns = true;
  static constexpr bool kCached = false;
  __device__ static i64 first() { return blockIdx.x; }
  __device__ static i64 step() { return gridDim.x; }
  __device__ static bool leader() { return threadIdx.y == 0; }
  // Rows combined in order; every thread of the column gets the result.
  template <class A, class Op>
  __device__ static A reduce(A v, Op op, A* scratch) {
    __syncthreads();
    scratch[threadIdx.y * 32 + threadIdx.x] = v;
    __syncthreads();
    A r = scratch[threadIdx.x];
    for (unsigned y = 1; y < blockDim.y; ++y) r = op(r, scratch[y * 32 + threadIdx.x]);
    return r;
  }
};

// Work units of a team: outputs, or (kept block, chunk of 32 columns) for ColumnTeam.
template <class Team>
__device__ inline i64 units_of(const Plan& p) {
  if constexpr (Team::kColumns) return (p.nout / p.kin) * ((p.kin + 31) / 32);
  else return p.nout;
}
// The output this thread works on in unit u; false when it has none (a column past the end).
template <class Team>
__device__ inline bool output_of(const Plan& p, i64 u, i64& o) {
  if constexpr (Team::kColumns) {
    const i64 chunks = (p.kin + 31) / 32;
    const i64 c = (u % chunks) * 32 + threadIdx.x;
    o = (u / chunks) * p.kin + c;
    return c < p.kin;
  } else if constexpr (Team::kRows > 1) {
    o = u + static_cast<i64>(threadIdx.x) / (32 / Team::kRows);
    return o < p.nout;
  } else {
    o = u;
    return true;
  }
}
// f(i) for i = begin, begin + step, ... < end, in that order; unrolled so that the loads of
// several elements are in flight at once.
template <class F>
__device__ inline void strided(i64 begin, i64 end, i64 step, F&& f) {
  constexpr int kUnroll = 4;
  i64 i = begin;
  for (; i + (kUnroll - 1) * step < end; i += kUnroll * step) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) f(i + u * step);
  }
  for (; i < end; i += step) f(i);
}

// The positions the team's threads stride over for one output (for_each_reduced_range's lo
// and hi count them): ColumnTeam the reduced rows; the others the reduced elements of a
// contiguous row (nr == 0), whole rows when each keeps the team busy, else the flat reduced
// positions. `team_size`: Team::size().
__host__ __device__ inline i64 walk_of(const Plan& p, bool columns, int team_size) {
  if (columns) return p.rcount;
  if (p.nr == 0) return p.rin;
  return p.rin >= team_size ? p.rcount : p.count;
}

// Calls f(offset) for this thread's share of output o's reduced elements whose walk positions
// (walk_of) lie in [lo, hi), in the team's order.
template <class Team, class F>
__device__ inline void for_each_reduced_range(const Plan& p, i64 o, i64 lo, i64 hi, F&& f) {
  const i64 base = base_of(p, o);
  if constexpr (Team::kColumns) {  // rin == 1 here
    for (i64 r = lo + threadIdx.y; r < hi; r += blockDim.y) f(base + group_offset(r, p.nr, p.rs, p.rst));
  } else {
    const int rank = Team::rank(), size = Team::size();
    if (p.nr == 0) {
      strided(lo + rank, hi, size, [&](i64 i) { f(base + i); });
    } else if (p.rin >= size) {  // rows long enough to keep the team busy
      for (i64 r = lo; r < hi; ++r) {
        const i64 row = base + group_offset(r, p.nr, p.rs, p.rst);
        for (i64 i = rank; i < p.rin; i += size) f(row + i);
      }
    } else {  // short rows: the team walks the flat reduced positions
      for (i64 t = lo + rank; t < hi; t += size) f(base + group_offset(t / p.rin, p.nr, p.rs, p.rst) + t % p.rin);
    }
  }
}

// Calls f(offset) for this thread's share of output o's reduced elements.
template <class Team, class F>
__device__ inline void for_each_reduced(const Plan& p, i64 o, F&& f) {
  if constexpr (Team::kColumns) for_each_reduced_range<Team>(p, o, 0, p.rcount, f);
  else for_each_reduced_range<Team>(p, o, 0, walk_of(p, false, Team::size()), f);
}

// Rows of at most Team::size() * kCache contiguous elements (a softmax or a LayerNorm over the
// innermost dims) with a SubRowTeam: each thread reads its elements (rank, rank + size, ...:
// the order of for_each_reduced) once into registers and makes every pass over them there.
// (Not with RowTeam, whose block-wide instantiations would then spill registers.)
constexpr int kCache = 16;
template <class Team>
__device__ inline bool cached_rows(const Plan& p) {
  return p.nr == 0 && p.rin <= static_cast<i64>(Team::size()) * kCache;
}

// Picks the team for a plan and calls launch(Team{}, grid, block).
template <class Launch>
void launch_teams(const Plan& p, Launch&& launch) {
  if (p.kin >= 32) {
    const i64 units = (p.nout / p.kin) * ((p.kin + 31) / 32);
    const unsigned rows = (units < 256 && p.rcount >= 64) ? 16 : 8;  // few columns: more rows
    launch(ColumnTeam{}, dim3(grid_for(units)), dim3(32, rows));
  } else if (p.count >= 1024) {  // a block per output
    const unsigned threads = (p.nout < 256 && p.count >= 16384) ? kMaxBlock : 256;
    launch(RowTeam{}, dim3(grid_for(p.nout)), dim3(threads, 1));
  } else if (p.count <= 128) {  // 4 outputs per warp, 8 warps per block
    launch(SubRowTeam<8>{}, dim3(grid_for(p.nout, 8 * 4)), dim3(32, 8));
  } else if (p.count <= 256) {  // 2 outputs per warp
    launch(SubRowTeam<16>{}, dim3(grid_for(p.nout, 8 * 2)), dim3(32, 8));
  } else if (p.count <= 32 * kCache) {  // a warp per output, the row in registers
    launch(SubRowTeam<32>{}, dim3(grid_for(p.nout, 8)), dim3(32, 8));
  } else {  // a warp per output, 8 per block
    launch(RowTeam{}, dim3(grid_for(p.nout, 8)), dim3(32, 8));
  }
}

struct MaxNan {  // NaN-sticky maximum
  __device__ float operator()(float a, float b) const { return (b > a || b != b) && a == a ? b : a; }
};
struct AddD {
  __device__ double operator()(double a, double b) const { return __dadd_rn(a, b); }
};

}  // namespace tensoracle::cuda::reduction
