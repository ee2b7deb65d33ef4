// The CUDA backend's reduce, softmax, normalization and topk kernels (kernels.h), with the
// semantics of the CPU backend's kernels_reduce.cpp and kernels_index.cpp (topk):
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
// - topk: one block per slice. The elements' keys (value mapped to an unsigned integer whose
//   order is the wanted order, NaN largest, -0 == +0; MIN flips it) and indices stream
//   through shared memory: candidates better than the current k-th best are collected, then
//   sorted (bitonic) and merged into the best P >= k (bitonic half-cleaner + merge). Keys
//   compare by (key, lower index first), so the order is exactly the CPU's stable order.
//
// Nothing here allocates device memory or synchronizes; validation throws (InvalidArgument,
// as the CPU kernels, or UnsupportedError for a limit of this implementation) before any launch.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "tensoracle/errors.h"

namespace tensoracle::cuda {

namespace {

using dev::BF16;
using dev::F16;
using dev::F32;
using dev::i64;
using dev::checked_volume;
using dev::desc;
using dev::fail;
using dev::tn;
using R = ReduceOperation;

const char* reduce_name(R op) {
  switch (op) {
    case R::kSUM: return "SUM";
    case R::kPROD: return "PROD";
    case R::kMAX: return "MAX";
    case R::kMIN: return "MIN";
    case R::kAVG: return "AVG";
  }
  return "an unknown operation";
}

// Grid size for `units` independent work units of `per_block` units per block.
unsigned grid_for(i64 units, i64 per_block = 1) {
  const i64 need = (units + per_block - 1) / per_block;
  constexpr i64 kMaxBlocks = 65535 * 8;
  return static_cast<unsigned>(need < 1 ? 1 : need > kMaxBlocks ? kMaxBlocks : need);
}

// ---- the reduce/normalize view (a port of the CPU's make_layout) ---------------------------

// The view of a normalization has one more dim than its input (the split channels).
constexpr int kMaxGroups = Dims::kMaxRank + 1;

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

// `reduced[i]` says whether dim i is reduced; every dim must be >= 1. Same grouping as the
// CPU's make_layout (kernels_reduce.cpp).
Plan make_plan(int rank, const i64* dims, const bool* reduced) {
  int m = 0;
  i64 size[kMaxGroups];
  bool red[kMaxGroups];
  for (int i = 0; i < rank; ++i) {
    if (dims[i] == 1) continue;
    if (m > 0 && red[m - 1] == reduced[i]) {
      size[m - 1] *= dims[i];
    } else {
      size[m] = dims[i];
      red[m] = reduced[i];
      ++m;
    }
  }
  bool any_reduced = false;
  for (int g = 0; g < m; ++g) any_reduced |= red[g];
  if (!any_reduced) {  // only size-1 dims are reduced: rows of one element
    size[m] = 1;
    red[m] = true;
    ++m;
  }
  i64 st[kMaxGroups];
  i64 stride = 1;
  for (int g = m - 1; g >= 0; --g) {
    st[g] = stride;
    stride *= size[g];
  }
  Plan p;
  const bool inner_reduced = red[m - 1];
  const i64 inner = size[m - 1];
  p.kin = inner_reduced ? 1 : inner;
  p.rin = inner_reduced ? inner : 1;
  i64 kcount = 1;
  for (int g = 0; g < m - 1; ++g) {
    if (red[g]) {
      p.rs[p.nr] = size[g];
      p.rst[p.nr] = st[g];
      p.rcount *= size[g];
      ++p.nr;
    } else {
      p.ks[p.nk] = size[g];
      p.kst[p.nk] = st[g];
      kcount *= size[g];
      ++p.nk;
    }
  }
  p.count = p.rcount * p.rin;
  p.nout = kcount * p.kin;
  return p;
}

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

// A float scale/bias element of any float type (validated on the host).
__device__ inline float load_any_float(const void* p, DataType t, i64 i) {
  switch (t) {
    case DataType::kHALF: return __half2float(static_cast<const __half*>(p)[i]);
    case DataType::kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
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

// ---- reducers ----------------------------------------------------------------------------
// A: accumulator, add(a, stored value), combine(a, b), finish(a, count) -> stored value.

template <class Tag>
struct FSum {
  using T = typename Tag::T;
  using A = double;
  __device__ static A init() { return 0.0; }
  __device__ static A add(A a, T v) { return __dadd_rn(a, static_cast<double>(Tag::load(v))); }
  __device__ static A combine(A a, A b) { return __dadd_rn(a, b); }
  __device__ static T finish(A a, i64) { return store_d<Tag>(a); }
};
template <class Tag>
struct FAvg : FSum<Tag> {
  using T = typename Tag::T;
  // AVG over nothing: 0 / 0 = NaN, as the CPU.
  __device__ static T finish(double a, i64 count) { return store_d<Tag>(__ddiv_rn(a, static_cast<double>(count))); }
};
template <class Tag>
struct FProd {
  using T = typename Tag::T;
  using A = double;
  __device__ static A init() { return 1.0; }
  __device__ static A add(A a, T v) { return __dmul_rn(a, static_cast<double>(Tag::load(v))); }
  __device__ static A combine(A a, A b) { return __dmul_rn(a, b); }
  __device__ static T finish(A a, i64) { return store_d<Tag>(a); }
};
// MAX or MIN of floats, exact in float; a NaN is never replaced (any NaN gives NaN).
template <class Tag, bool kMax>
struct FExt {
  using T = typename Tag::T;
  using A = float;
  __device__ static A init() { return kMax ? -INFINITY : INFINITY; }
  __device__ static A combine(A a, A b) { return ((kMax ? b > a : b < a) || b != b) && a == a ? b : a; }
  __device__ static A add(A a, T v) { return combine(a, Tag::load(v)); }
  __device__ static T finish(A a, i64) { return Tag::store(a); }
};
// int32/int64 SUM and PROD in unsigned arithmetic: they wrap.
template <class I, bool kProd>
struct IArith {
  using T = I;
  using A = std::make_unsigned_t<I>;
  __device__ static A init() { return kProd ? A{1} : A{0}; }
  __device__ static A combine(A a, A b) { return kProd ? static_cast<A>(a * b) : static_cast<A>(a + b); }
  __device__ static A add(A a, T v) { return combine(a, static_cast<A>(v)); }
  __device__ static T finish(A a, i64) { return static_cast<I>(a); }
};
template <class I, bool kMax>
struct IExt {
  using T = I;
  using A = I;
  static constexpr I kInit = kMax ? std::numeric_limits<I>::lowest() : std::numeric_limits<I>::max();
  __device__ static A init() { return kInit; }
  __device__ static A combine(A a, A b) { return kMax ? (b > a ? b : a) : (b < a ? b : a); }
  __device__ static A add(A a, T v) { return combine(a, v); }
  __device__ static T finish(A a, i64) { return a; }
};

template <class Rd>
struct Combine {
  __device__ typename Rd::A operator()(typename Rd::A a, typename Rd::A b) const { return Rd::combine(a, b); }
};

// ---- reduce ------------------------------------------------------------------------------

template <class Team, class Rd>
__global__ void __launch_bounds__(kMaxBlock) reduce_kernel(Plan p, const typename Rd::T* __restrict__ x,
                                                           typename Rd::T* __restrict__ out) {
  using A = typename Rd::A;
  __shared__ alignas(8) unsigned char scratch_raw[kScratch * 8];
  A* scratch = reinterpret_cast<A*>(scratch_raw);
  const i64 units = units_of<Team>(p);
  for (i64 u = Team::first(); u < units; u += Team::step()) {
    i64 o;
    const bool active = output_of<Team>(p, u, o);
    A a = Rd::init();
    if (active) for_each_reduced<Team>(p, o, [&](i64 off) { a = Rd::add(a, x[off]); });
    a = Team::reduce(a, Combine<Rd>{}, scratch);
    if (active && Team::leader()) out[o] = Rd::finish(a, p.count);
  }
}

// Reducing over an empty dim: every output is the identity (AVG: 0 / 0).
template <class Rd>
__global__ void reduce_empty_kernel(typename Rd::T* out, i64 n) {
  const typename Rd::T v = Rd::finish(Rd::init(), 0);
  for (i64 i = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += static_cast<i64>(gridDim.x) * blockDim.x)
    out[i] = v;
}

// Few outputs over many elements: each output's walk (walk_of) is cut into `splits` chunks,
// one block each, which write their partial results to the workspace; a second kernel
// combines each output's partials in chunk order and finishes it. Deterministic, like the
// one-team path (a sum is only grouped differently: it may differ in the last bit of the
// double before the one rounding to the output type).
constexpr i64 kSplitBlocks = 512;         // blocks to aim for (units x chunks)
constexpr i64 kSplitMinElements = 16384;  // elements per block at least
constexpr i64 kSplitMaxUnits = kSplitBlocks / 4;
constexpr int kSplitColumnRows = 16;

struct Split {
  bool columns = false;
  i64 units = 0, walk = 0, splits = 1, chunk = 0;
};

// Whether (and how) a plan splits; splits == 1: it does not.
Split split_of(const Plan& p) {
  Split s;
  s.columns = p.kin >= 32;
  s.units = s.columns ? (p.nout / p.kin) * ((p.kin + 31) / 32) : p.nout;
  s.walk = walk_of(p, s.columns, kMaxBlock);
  if (s.units > kSplitMaxUnits || s.walk < 2) return s;
  // elements a unit reduces: a column chunk holds up to 32 outputs
  const i64 per_unit = s.columns ? p.rcount * std::min<i64>(p.kin, 32) : p.count;
  const i64 by_work = per_unit / kSplitMinElements, by_blocks = (kSplitBlocks + s.units - 1) / s.units;
  const i64 want = std::min({by_work, by_blocks, s.walk});
  if (want < 2) return s;
  s.chunk = (s.walk + want - 1) / want;
  s.splits = (s.walk + s.chunk - 1) / s.chunk;
  return s;
}

template <class Team, class Rd>
__global__ void __launch_bounds__(kMaxBlock) reduce_split_kernel(Plan p, const typename Rd::T* __restrict__ x,
                                                                 typename Rd::A* __restrict__ partial, i64 splits,
                                                                 i64 chunk, i64 walk) {
  using A = typename Rd::A;
  __shared__ alignas(8) unsigned char scratch_raw[kScratch * 8];
  A* scratch = reinterpret_cast<A*>(scratch_raw);
  const i64 work = units_of<Team>(p) * splits;
  for (i64 w = blockIdx.x; w < work; w += gridDim.x) {  // uniform over the block
    const i64 u = w / splits, j = w % splits;
    i64 o;
    const bool active = output_of<Team>(p, u, o);
    const i64 lo = j * chunk, hi = lo + chunk < walk ? lo + chunk : walk;
    A a = Rd::init();
    if (active) for_each_reduced_range<Team>(p, o, lo, hi, [&](i64 off) { a = Rd::add(a, x[off]); });
    a = Team::reduce(a, Combine<Rd>{}, scratch);
    if (active && Team::leader()) partial[o * splits + j] = a;
  }
}

template <class Rd>
__global__ void reduce_combine_kernel(const typename Rd::A* __restrict__ partial, typename Rd::T* __restrict__ out,
                                      i64 nout, i64 splits, i64 count) {
  for (i64 o = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; o < nout;
       o += static_cast<i64>(gridDim.x) * blockDim.x) {
    typename Rd::A a = partial[o * splits];
    for (i64 j = 1; j < splits; ++j) a = Rd::combine(a, partial[o * splits + j]);
    out[o] = Rd::finish(a, count);
  }
}

template <class Rd>
void run_reduce(const Plan* plan, const TensorRef& x, const TensorRef& out, i64 no, void* workspace,
                cudaStream_t stream) {
  using T = typename Rd::T;
  if (no == 0) return;
  auto* o = static_cast<T*>(out.data);
  if (plan == nullptr) {
    reduce_empty_kernel<Rd><<<dev::blocks_for(no), dev::kThreads, 0, stream>>>(o, no);
    dev::check_launch("reduce");
    return;
  }
  const auto* xp = static_cast<const T*>(x.data);
  if (workspace != nullptr) {
    const Split sp = split_of(*plan);
    if (sp.splits > 1) {
      static_assert(sizeof(typename Rd::A) <= 8, "partials of at most 8 bytes (reduce_split_workspace_bytes)");
      auto* partial = static_cast<typename Rd::A*>(workspace);
      const dim3 grid(static_cast<unsigned>(std::min<i64>(sp.units * sp.splits, 65535 * 8)));
      if (sp.columns)
        reduce_split_kernel<ColumnTeam, Rd><<<grid, dim3(32, kSplitColumnRows), 0, stream>>>(*plan, xp, partial, sp.splits,
                                                                                             sp.chunk, sp.walk);
      else
        reduce_split_kernel<RowTeam, Rd><<<grid, dim3(kMaxBlock, 1), 0, stream>>>(*plan, xp, partial, sp.splits, sp.chunk,
                                                                                 sp.walk);
      dev::check_launch("reduce (split)");
      reduce_combine_kernel<Rd><<<dev::blocks_for(no), dev::kThreads, 0, stream>>>(partial, o, no, sp.splits, plan->count);
      dev::check_launch("reduce (combine)");
      return;
    }
  }
  launch_teams(*plan, [&](auto team, dim3 grid, dim3 block) {
    reduce_kernel<decltype(team), Rd><<<grid, block, 0, stream>>>(*plan, xp, o);
  });
  dev::check_launch("reduce");
}

// ---- softmax -----------------------------------------------------------------------------

// e^z for z <= 0 (and NaN): the CPU's exp_nonpositive (kernels_reduce.cpp) step for step,
// every operation rounded on its own (no FMA), so the results are bit-identical. (The CPU
// selects +0 below -104 rather than clamping to -110, to spare x86 its underflow assists; both
// give +0 there. GPUs handle subnormals at full speed.)
__device__ inline float exp_nonpositive(float z) {
  z = z < -110.0f ? -110.0f : z;  // e^-110 is below half the smallest subnormal; NaN passes
  constexpr float kShift = 12582912.0f;  // 1.5 * 2^23
  const float t = __fadd_rn(__fmul_rn(z, 1.44269504088896341f), kShift);
  const float n = __fsub_rn(t, kShift);  // round(z / ln2)
  const std::int32_t ni = __float_as_int(t) - __float_as_int(kShift);
  const float r = __fsub_rn(__fsub_rn(z, __fmul_rn(n, 0.693145751953125f)), __fmul_rn(n, 1.42860682030941723212e-6f));
  float q = 1.0f / 5040.0f;
  q = __fadd_rn(__fmul_rn(q, r), 1.0f / 720.0f);
  q = __fadd_rn(__fmul_rn(q, r), 1.0f / 120.0f);
  q = __fadd_rn(__fmul_rn(q, r), 1.0f / 24.0f);
  q = __fadd_rn(__fmul_rn(q, r), 1.0f / 6.0f);
  q = __fadd_rn(__fmul_rn(q, r), 0.5f);
  q = __fadd_rn(__fmul_rn(q, r), 1.0f);
  q = __fadd_rn(__fmul_rn(q, r), 1.0f);
  const std::int32_t n1 = ni / 2, n2 = ni - n1;  // 2^n1, 2^n2 normal
  const float s1 = __uint_as_float(static_cast<std::uint32_t>(n1 + 127) << 23);
  const float s2 = __uint_as_float(static_cast<std::uint32_t>(n2 + 127) << 23);
  return __fmul_rn(__fmul_rn(q, s1), s2);
}

struct MaxNan {  // NaN-sticky maximum
  __device__ float operator()(float a, float b) const { return (b > a || b != b) && a == a ? b : a; }
};
struct AddD {
  __device__ double operator()(double a, double b) const { return __dadd_rn(a, b); }
};

// Per row: m = max (NaN if any), s = sum of e^(x - m) in double, y = e^(x - m) * (1 / s).
template <class Team, class Tag>
__global__ void __launch_bounds__(kMaxBlock) softmax_kernel(Plan p, const typename Tag::T* __restrict__ x,
                                                            typename Tag::T* __restrict__ out) {
  __shared__ alignas(8) unsigned char scratch_raw[kScratch * 8];
  const i64 units = units_of<Team>(p);
  if constexpr (Team::kCached) {
    if (cached_rows<Team>(p)) {  // the same operations in the same order, each element read once
      const i64 rank = Team::rank(), size = Team::size();
      for (i64 u = Team::first(); u < units; u += Team::step()) {
        i64 o;
        const bool active = output_of<Team>(p, u, o);
        const i64 base = base_of(p, o);
        float v[kCache];
        float m = -INFINITY;
#pragma unroll
        for (int j = 0; j < kCache; ++j) {
          const i64 i = rank + j * size;
          v[j] = active && i < p.rin ? Tag::load(x[base + i]) : -INFINITY;
          m = MaxNan{}(m, v[j]);
        }
        m = Team::reduce(m, MaxNan{}, reinterpret_cast<float*>(scratch_raw));
        double s = 0.0;
#pragma unroll
        for (int j = 0; j < kCache; ++j)
          if (active && rank + j * size < p.rin) {
            v[j] = exp_nonpositive(__fsub_rn(v[j], m));
            s = __dadd_rn(s, static_cast<double>(v[j]));
          }
        s = Team::reduce(s, AddD{}, reinterpret_cast<double*>(scratch_raw));
        const double inv = __ddiv_rn(1.0, s);
#pragma unroll
        for (int j = 0; j < kCache; ++j) {
          const i64 i = rank + j * size;
          if (active && i < p.rin) out[base + i] = store_d<Tag>(__dmul_rn(static_cast<double>(v[j]), inv));
        }
      }
      return;
    }
  }
  for (i64 u = Team::first(); u < units; u += Team::step()) {
    i64 o;
    const bool active = output_of<Team>(p, u, o);
    float m = -INFINITY;
    if (active) for_each_reduced<Team>(p, o, [&](i64 off) { m = MaxNan{}(m, Tag::load(x[off])); });
    m = Team::reduce(m, MaxNan{}, reinterpret_cast<float*>(scratch_raw));
    double s = 0.0;
    if (active)
      for_each_reduced<Team>(p, o, [&](i64 off) {
        s = __dadd_rn(s, static_cast<double>(exp_nonpositive(__fsub_rn(Tag::load(x[off]), m))));
      });
    s = Team::reduce(s, AddD{}, reinterpret_cast<double*>(scratch_raw));
    const double inv = __ddiv_rn(1.0, s);
    if (active)
      for_each_reduced<Team>(p, o, [&](i64 off) {
        const double e = static_cast<double>(exp_nonpositive(__fsub_rn(Tag::load(x[off]), m)));
        out[off] = store_d<Tag>(__dmul_rn(e, inv));
      });
  }
}

// ---- normalization -----------------------------------------------------------------------

// Offsets of the scale and the bias over the input's dims (0 where they broadcast), with
// dims of size 1 dropped and dims merged where both tensors allow it.
struct Bcast {
  int rank = 0;
  i64 d[Dims::kMaxRank] = {}, ss[Dims::kMaxRank] = {}, bs[Dims::kMaxRank] = {};
};

__device__ inline void bcast_offsets(const Bcast& b, i64 lin, i64& so, i64& bo) {
  so = 0;
  bo = 0;
  for (int k = b.rank - 1; k >= 0; --k) {
    const i64 idx = lin % b.d[k];
    lin /= b.d[k];
    so += idx * b.ss[k];
    bo += idx * b.bs[k];
  }
}

// Longest row whose weights norm_kernel stages in shared memory (2 x 8 KiB).
constexpr int kStagedRow = 2048;

struct NormArgs {
  const void* scale;
  const void* bias;
  DataType scale_type, bias_type;
  Bcast bc;
  double inv_count, eps;
  // Scale and bias that vary along each output's contiguous elements only (a LayerNorm's
  // (1, .., H) weights): their offsets are the position in the row times these strides.
  bool row = false;
  i64 row_ss = 0, row_bs = 0;
};

// The scale's and the bias's offsets for element `off`, `in_row` its position in its output's
// elements: without divisions for the common layouts.
__device__ inline void norm_offsets(const NormArgs& a, i64 off, i64 in_row, i64& so, i64& bo) {
  if (a.row) {
    so = in_row * a.row_ss;
    bo = in_row * a.row_bs;
  } else if (a.bc.rank == 1) {
    so = off * a.bc.ss[0];
    bo = off * a.bc.bs[0];
  } else {
    bcast_offsets(a.bc, off, so, bo);
  }
}

// Per statistics set: mean and 1 / sqrt(var + eps) in double (two passes), rounded to float;
// then y = (x - mean) * rstd * scale + bias in float, rounded once to the output.
template <class Team, class Tag>
__global__ void __launch_bounds__(kMaxBlock) norm_kernel(Plan p, NormArgs a, const typename Tag::T* __restrict__ x,
                                                         typename Tag::T* __restrict__ out) {
  __shared__ alignas(8) unsigned char scratch_raw[kScratch * 8];
  double* scratch = reinterpret_cast<double*>(scratch_raw);
  const i64 units = units_of<Team>(p);
  // Row weights (a LayerNorm's scale and bias, the same for every row) staged once per block
  // as floats: each output element then reads them from shared memory, with no type switch
  // and no global load after the statistics.
  __shared__ float staged_w[Team::kColumns ? 1 : 2 * kStagedRow];
  const bool staged = !Team::kColumns && a.row && p.rin <= kStagedRow;
  if (staged) {
    const int threads = static_cast<int>(blockDim.x * blockDim.y);
    for (int i = static_cast<int>(threadIdx.y * blockDim.x + threadIdx.x); i < p.rin; i += threads) {
      staged_w[i] = load_any_float(a.scale, a.scale_type, i * a.row_ss);
      staged_w[kStagedRow + i] = load_any_float(a.bias, a.bias_type, i * a.row_bs);
    }
    __syncthreads();
  }
  // The scale and the bias for element `off`, `in_row` its position in its output's elements:
  // from the stage, from global memory, or whichever applies.
  auto from_stage = [&](i64, i64 in_row, float& sc, float& bi) {
    sc = staged_w[in_row];
    bi = staged_w[kStagedRow + in_row];
  };
  auto from_global = [&](i64 off, i64 in_row, float& sc, float& bi) {
    i64 so, bo;
    norm_offsets(a, off, in_row, so, bo);
    sc = load_any_float(a.scale, a.scale_type, so);
    bi = load_any_float(a.bias, a.bias_type, bo);
  };
  auto weights = [&](i64 off, i64 in_row, float& sc, float& bi) {
    if (staged) from_stage(off, in_row, sc, bi);
    else from_global(off, in_row, sc, bi);
  };
  if constexpr (Team::kCached) {
    if (cached_rows<Team>(p)) {  // the same operations in the same order, each element read once
      const i64 rank = Team::rank(), size = Team::size();
      for (i64 u = Team::first(); u < units; u += Team::step()) {
        i64 o;
        const bool active = output_of<Team>(p, u, o);
        const i64 base = base_of(p, o);
        float v[kCache];
        double sum = 0.0;
#pragma unroll
        for (int j = 0; j < kCache; ++j) {
          const i64 i = rank + j * size;
          v[j] = active && i < p.rin ? Tag::load(x[base + i]) : 0.f;
          if (active && i < p.rin) sum = __dadd_rn(sum, static_cast<double>(v[j]));
        }
        sum = Team::reduce(sum, AddD{}, scratch);
        const double mu = __dmul_rn(sum, a.inv_count);
        double sq = 0.0;
#pragma unroll
        for (int j = 0; j < kCache; ++j)
          if (active && rank + j * size < p.rin) {
            const double d = __dsub_rn(static_cast<double>(v[j]), mu);
            sq = __dadd_rn(sq, __dmul_rn(d, d));
          }
        sq = Team::reduce(sq, AddD{}, scratch);
        const float mean = __double2float_rn(mu);
        const float rstd = __double2float_rn(__ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(__dmul_rn(sq, a.inv_count), a.eps))));
        auto write = [&](auto weights_of) {  // unswitched: the staged loop has no global loads
#pragma unroll
          for (int j = 0; j < kCache; ++j) {
            const i64 i = rank + j * size;
            if (!active || i >= p.rin) continue;
            float sc, bi;
            weights_of(base + i, i, sc, bi);
            out[base + i] = Tag::store(__fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(v[j], mean), rstd), sc), bi));
          }
        };
        if (staged) write(from_stage);
        else write(from_global);
      }
      return;
    }
  }
  for (i64 u = Team::first(); u < units; u += Team::step()) {
    i64 o;
    const bool active = output_of<Team>(p, u, o);
    double sum = 0.0;
    if (active) for_each_reduced<Team>(p, o, [&](i64 off) { sum = __dadd_rn(sum, static_cast<double>(Tag::load(x[off]))); });
    sum = Team::reduce(sum, AddD{}, scratch);
    const double mu = __dmul_rn(sum, a.inv_count);
    double sq = 0.0;
    if (active)
      for_each_reduced<Team>(p, o, [&](i64 off) {
        const double d = __dsub_rn(static_cast<double>(Tag::load(x[off])), mu);
        sq = __dadd_rn(sq, __dmul_rn(d, d));
      });
    sq = Team::reduce(sq, AddD{}, scratch);
    const float mean = __double2float_rn(mu);
    const float rstd = __double2float_rn(__ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(__dmul_rn(sq, a.inv_count), a.eps))));
    const i64 base = a.row ? base_of(p, o) : 0;
    if (active)
      for_each_reduced<Team>(p, o, [&](i64 off) {
        float sc, bi;
        weights(off, off - base, sc, bi);
        const float y = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(Tag::load(x[off]), mean), rstd), sc), bi);
        out[off] = Tag::store(y);
      });
  }
}

// Checks scale/bias as the CPU's load_broadcast does; fills their strides over x's dims.
void check_broadcast(const TensorRef& t, const Dims& x, const char* name, i64* strides) {
  checked_volume(t, "normalization", name);
  if (t.dims.rank() != x.rank())
    fail(std::string("normalization: ") + name + " " + t.dims.str() + " must have the input's rank (input " +
         x.str() + ")");
  i64 st = 1;
  for (int d = x.rank() - 1; d >= 0; --d) {
    if (t.dims[d] != 1 && t.dims[d] != x[d])
      fail(std::string("normalization: ") + name + " " + t.dims.str() + " does not broadcast into the input " +
           x.str());
    strides[d] = t.dims[d] == 1 ? 0 : st;
    st *= t.dims[d];
  }
  if (t.type != DataType::kFLOAT && t.type != DataType::kHALF && t.type != DataType::kBF16)
    fail(std::string("normalization: ") + name + " takes float32, float16 or bfloat16, not " + tn(t.type));
}

// ---- topk --------------------------------------------------------------------------------
// Key types: key(stored value) is an unsigned integer whose order is the value's (MAX) order.

// Floats: NaN above everything (all NaNs equal), -0 equal to +0, then the usual sign-flip map.
template <class Tag>
struct FloatKey {
  using T = typename Tag::T;
  using V = std::uint32_t;
  __device__ static V key(T raw) {
    float f = Tag::load(raw);
    if (f != f) return 0xFFFFFFFFu;
    if (f == 0.0f) f = 0.0f;
    const std::uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  }
};
struct Int32Key {
  using T = std::int32_t;
  using V = std::uint32_t;
  __device__ static V key(T v) { return static_cast<std::uint32_t>(v) ^ 0x80000000u; }
};
struct Int64Key {
  using T = std::int64_t;
  using V = unsigned long long;
  __device__ static V key(T v) { return static_cast<unsigned long long>(v) ^ (1ull << 63); }
};

// An empty slot: worse than every element (whose index is < 2^31).
constexpr std::uint32_t kNoIndex = 0xFFFFFFFFu;

// (va, ia) comes before (vb, ib): larger key, or equal key and lower index.
template <class V>
__device__ inline bool topk_before(V va, std::uint32_t ia, V vb, std::uint32_t ib) {
  return va > vb || (va == vb && ia < ib);
}
template <class V>
__device__ inline void topk_swap(V* v, std::uint32_t* ix, int a, int b) {
  const V tv = v[a];
  v[a] = v[b];
  v[b] = tv;
  const std::uint32_t ti = ix[a];
  ix[a] = ix[b];
  ix[b] = ti;
}

// Shared memory: keys v[2P] and indices ix[2P]; [0, P) the best so far, sorted best first;
// [P, 2P) the candidates, `count` of them. Merges the candidates into the best P.
template <class V>
__device__ void topk_flush(V* v, std::uint32_t* ix, int P, int count) {
  const int tid = static_cast<int>(threadIdx.x), T = static_cast<int>(blockDim.x);
  V* cv = v + P;
  std::uint32_t* ci = ix + P;
  for (int j = count + tid; j < P; j += T) {
    cv[j] = 0;
    ci[j] = kNoIndex;
  }
  __syncthreads();
  // Bitonic sort of the candidates, worst first.
  for (int size = 2; size <= P; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int t = tid; t < P / 2; t += T) {
        const int a = 2 * t - (t & (stride - 1)), b = a + stride;
        const bool ascending = (a & size) == 0;  // this run ends worst first
        if (topk_before(cv[a], ci[a], cv[b], ci[b]) == ascending) topk_swap(cv, ci, a, b);
      }
      __syncthreads();
    }
  }
  // best (best first) followed by candidates (worst first) is bitonic: the half-cleaner puts
  // the best P of both in [0, P), as a bitonic sequence ...
  for (int j = tid; j < P; j += T)
    if (topk_before(cv[j], ci[j], v[j], ix[j])) {
      v[j] = cv[j];
      ix[j] = ci[j];
    }
  __syncthreads();
  // ... which a bitonic merge sorts, best first.
  for (int stride = P >> 1; stride > 0; stride >>= 1) {
    for (int t = tid; t < P / 2; t += T) {
      const int a = 2 * t - (t & (stride - 1)), b = a + stride;
      if (topk_before(v[b], ix[b], v[a], ix[a])) topk_swap(v, ix, a, b);
    }
    __syncthreads();
  }
}

// One block per slice (outer index, inner index): n elements at stride `inner`. Writes the
// first k of the order: values (raw copies) or int32 indices.
template <class K>
__global__ void __launch_bounds__(kMaxBlock) topk_kernel(const typename K::T* __restrict__ x, void* __restrict__ out,
                                                         i64 slices, i64 n, i64 inner, int k, int P, bool min,
                                                         bool want_indices) {
  using V = typename K::V;
  extern __shared__ __align__(8) unsigned char topk_smem[];
  V* v = reinterpret_cast<V*>(topk_smem);
  auto* ix = reinterpret_cast<std::uint32_t*>(v + 2 * P);
  __shared__ int s_count;
  const int tid = static_cast<int>(threadIdx.x), T = static_cast<int>(blockDim.x);
  for (i64 s = blockIdx.x; s < slices; s += gridDim.x) {
    const i64 o = s / inner, i = s % inner, base = o * n * inner + i;
    for (int j = tid; j < P; j += T) {
      v[j] = 0;
      ix[j] = kNoIndex;
    }
    if (tid == 0) s_count = 0;
    V tv = 0;  // the current k-th best: only better elements can enter
    std::uint32_t ti = kNoIndex;
    int count = 0;  // candidates collected (the same in every thread)
    __syncthreads();
    for (i64 j0 = 0; j0 < n; j0 += T) {
      const i64 j = j0 + tid;
      bool take = false;
      if (j < n) {
        V kv = K::key(x[base + j * inner]);
        if (min) kv = ~kv;  // NaN (largest) becomes the smallest: last for MIN
        const auto kj = static_cast<std::uint32_t>(j);
        if (topk_before(kv, kj, tv, ti)) {
          take = true;
          const int pos = atomicAdd(&s_count, 1);
          v[P + pos] = kv;
          ix[P + pos] = kj;
        }
      }
      count += __syncthreads_count(take);
      // Flush before a next round could overflow the candidates, and at the end.
      if (count > P - T || (j0 + T >= n && count > 0)) {
        topk_flush(v, ix, P, count);
        tv = v[k - 1];
        ti = ix[k - 1];
        count = 0;
        if (tid == 0) s_count = 0;
        __syncthreads();
      }
    }
    const i64 obase = o * k * inner + i;
    if (want_indices) {
      auto* y = static_cast<std::int32_t*>(out);
      for (int j = tid; j < k; j += T) y[obase + j * inner] = static_cast<std::int32_t>(ix[j]);
    } else {
      auto* y = static_cast<typename K::T*>(out);
      for (int j = tid; j < k; j += T) y[obase + j * inner] = x[base + static_cast<i64>(ix[j]) * inner];
    }
    __syncthreads();  // the next slice reuses the shared memory
  }
}

// Largest k this implementation handles (P <= 4096 slots; the graph's limit is 3840).
constexpr i64 kTopKMax = 4096;

template <class K>
void run_topk(const TensorRef& x, const TensorRef& out, i64 slices, i64 n, i64 inner, int k, bool min,
              bool want_indices, cudaStream_t stream) {
  using V = typename K::V;
  // P: a power of two >= k; at least 1024 (or n) so that long rows stream in large chunks.
  const i64 want = std::max<i64>(k, std::min<i64>(n, 1024));
  int P = 64;
  while (P < want) P <<= 1;
  const int threads = std::min(kMaxBlock, P / 2);
  const std::size_t smem = static_cast<std::size_t>(2 * P) * (sizeof(V) + sizeof(std::uint32_t));
  if (smem > 48 * 1024)
    dev::check(cudaFuncSetAttribute(topk_kernel<K>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
               "topk: shared memory of " + std::to_string(smem) + " bytes");
  topk_kernel<K><<<grid_for(slices), threads, smem, stream>>>(static_cast<const typename K::T*>(x.data), out.data,
                                                              slices, n, inner, k, P, min, want_indices);
  dev::check_launch("topk");
}

}  // namespace

// ---- entry points -----------------------------------------------------------------------

std::size_t reduce_split_workspace_bytes() {
  // partials: nout * splits <= 32 * units * ceil(kSplitBlocks / units) <= 32 * (kSplitMaxUnits + kSplitBlocks)
  return static_cast<std::size_t>(32 * (kSplitMaxUnits + kSplitBlocks) * 8);
}

bool reduce_splits(const ReduceParams& p, const Dims& x) {
  const int rank = x.rank();
  if (rank > Dims::kMaxRank || !x.all_known() || x.volume() <= 0) return false;
  i64 dims[Dims::kMaxRank];
  bool red[Dims::kMaxRank];
  for (int i = 0; i < rank; ++i) {
    dims[i] = x[i];
    red[i] = rank < 32 && ((p.axes >> i) & 1u);
  }
  return split_of(make_plan(rank, dims, red)).splits > 1;
}

void reduce(const ReduceParams& p, const TensorRef& x, const TensorRef& out, cudaStream_t stream, void* workspace) {
  const i64 nx = checked_volume(x, "reduce", "the input");
  const i64 no = checked_volume(out, "reduce", "the output");
  const int rank = x.dims.rank();
  if (rank < 32 && (p.axes >> rank) != 0)
    fail("reduce: axes mask " + std::to_string(p.axes) + " names a dimension beyond the input's rank " +
         std::to_string(rank));
  if (out.type != x.type) fail("reduce: the output type " + tn(out.type) + " differs from the input's " + tn(x.type));
  i64 want[Dims::kMaxRank];
  i64 dims[Dims::kMaxRank];
  bool red[Dims::kMaxRank];
  int wr = 0;
  for (int i = 0; i < rank; ++i) {
    dims[i] = x.dims[i];
    red[i] = (p.axes >> i) & 1u;
    if (!red[i]) want[wr++] = x.dims[i];
    else if (p.keep_dims) want[wr++] = 1;
  }
  const Dims expected(std::span<const i64>(want, static_cast<std::size_t>(wr)));
  if (!(expected == out.dims))
    fail("reduce: reducing " + x.dims.str() + " over axes mask " + std::to_string(p.axes) +
         (p.keep_dims ? " keeping dims" : "") + " gives " + expected.str() + ", not " + out.dims.str());
  // nx == 0 with outputs: an empty dim is reduced, every output is the identity.
  const Plan plan = nx == 0 ? Plan{} : make_plan(rank, dims, red);
  const Plan* pp = nx == 0 ? nullptr : &plan;
  auto run_float = [&](auto tag) {
    using Tag = decltype(tag);
    switch (p.op) {
      case R::kSUM: run_reduce<FSum<Tag>>(pp, x, out, no, workspace, stream); break;
      case R::kPROD: run_reduce<FProd<Tag>>(pp, x, out, no, workspace, stream); break;
      case R::kMAX: run_reduce<FExt<Tag, true>>(pp, x, out, no, workspace, stream); break;
      case R::kMIN: run_reduce<FExt<Tag, false>>(pp, x, out, no, workspace, stream); break;
      case R::kAVG: run_reduce<FAvg<Tag>>(pp, x, out, no, workspace, stream); break;
      default: fail("reduce: unknown operation " + std::to_string(static_cast<int>(p.op)));
    }
  };
  auto run_int = [&](auto zero) {
    using I = decltype(zero);
    switch (p.op) {
      case R::kSUM: run_reduce<IArith<I, false>>(pp, x, out, no, workspace, stream); break;
      case R::kPROD: run_reduce<IArith<I, true>>(pp, x, out, no, workspace, stream); break;
      case R::kMAX: run_reduce<IExt<I, true>>(pp, x, out, no, workspace, stream); break;
      case R::kMIN: run_reduce<IExt<I, false>>(pp, x, out, no, workspace, stream); break;
      default: fail(std::string("reduce: ") + reduce_name(p.op) + " does not take " + tn(x.type));
    }
  };
  switch (x.type) {
    case DataType::kFLOAT: run_float(F32{}); break;
    case DataType::kHALF: run_float(F16{}); break;
    case DataType::kBF16: run_float(BF16{}); break;
    case DataType::kINT32: run_int(std::int32_t{}); break;
    case DataType::kINT64: run_int(std::int64_t{}); break;
    default: fail(std::string("reduce: ") + reduce_name(p.op) + " does not take " + tn(x.type));
  }
}

void softmax(int axis, const TensorRef& x, const TensorRef& out, cudaStream_t stream) {
  const i64 n = checked_volume(x, "softmax", "the input");
  checked_volume(out, "softmax", "the output");
  const int rank = x.dims.rank();
  if (axis < 0 || axis >= rank)
    fail("softmax: axis " + std::to_string(axis) + " is out of range for the input " + x.dims.str());
  if (out.type != x.type || !(out.dims == x.dims))
    fail("softmax: the output " + desc(out) + " differs from the input " + desc(x));
  const bool ok = with_float3(x.type, [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::T;
    if (n == 0) return;
    i64 dims[Dims::kMaxRank];
    bool red[Dims::kMaxRank];
    for (int d = 0; d < rank; ++d) {
      dims[d] = x.dims[d];
      red[d] = d == axis;
    }
    const Plan plan = make_plan(rank, dims, red);
    const auto* xp = static_cast<const T*>(x.data);
    auto* op = static_cast<T*>(out.data);
    launch_teams(plan, [&](auto team, dim3 grid, dim3 block) {
      softmax_kernel<decltype(team), Tag><<<grid, block, 0, stream>>>(plan, xp, op);
    });
    dev::check_launch("softmax");
  });
  if (!ok) fail("softmax takes float32, float16 or bfloat16, not " + tn(x.type));
}

void normalization(const NormalizationParams& p, const TensorRef& x, const TensorRef& scale, const TensorRef& bias,
                   const TensorRef& out, cudaStream_t stream) {
  const i64 n = checked_volume(x, "normalization", "the input");
  checked_volume(out, "normalization", "the output");
  const Dims& xd = x.dims;
  const int rank = xd.rank();
  if (out.type != x.type || !(out.dims == xd))
    fail("normalization: the output " + desc(out) + " differs from the input " + desc(x));
  if (rank < 32 && (p.axes >> rank) != 0)
    fail("normalization: axes mask " + std::to_string(p.axes) + " names a dimension beyond the input's rank " +
         std::to_string(rank));
  if (!(p.epsilon >= 0.0f)) fail("normalization: epsilon " + std::to_string(p.epsilon) + " must be >= 0");
  const i64 groups = p.num_groups;
  if (groups < 1) fail("normalization: num_groups " + std::to_string(groups) + " must be >= 1");
  if (groups > 1) {
    if (rank < 2) fail("normalization: num_groups > 1 needs a channel dimension (rank >= 2)");
    if (xd[1] % groups != 0)
      fail("normalization: channels " + std::to_string(xd[1]) + " are not divisible by num_groups " +
           std::to_string(groups));
    if (p.axes & 2u) fail("normalization: with num_groups > 1 the channel dimension (1) is grouped, not in axes");
  }
  i64 sst[Dims::kMaxRank] = {}, bst[Dims::kMaxRank] = {};
  check_broadcast(scale, xd, "the scale", sst);
  check_broadcast(bias, xd, "the bias", bst);
  const bool ok = with_float3(x.type, [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::T;
    if (n == 0) return;
    // The view: x's dims, with the channels split into (groups, channels per group) when
    // grouped; the channels per group are normalized over like the masked axes.
    int vr = 0;
    i64 vd[kMaxGroups];
    bool vred[kMaxGroups];
    for (int d = 0; d < rank; ++d) {
      if (groups > 1 && d == 1) {
        vd[vr] = groups, vred[vr] = false, ++vr;
        vd[vr] = xd[1] / groups, vred[vr] = true, ++vr;
      } else {
        vd[vr] = xd[d], vred[vr] = (p.axes >> d) & 1u, ++vr;
      }
    }
    const Plan plan = make_plan(vr, vd, vred);
    NormArgs a{};
    a.scale = scale.data;
    a.bias = bias.data;
    a.scale_type = scale.type;
    a.bias_type = bias.type;
    a.inv_count = 1.0 / static_cast<double>(plan.count);
    a.eps = static_cast<double>(p.epsilon);
    for (int d = 0; d < rank; ++d) {  // x's dims, merged where scale and bias allow
      const i64 s = xd[d];
      if (s == 1) continue;
      Bcast& b = a.bc;
      const int last = b.rank - 1;
      if (last >= 0 && b.ss[last] == sst[d] * s && b.bs[last] == bst[d] * s) {
        b.d[last] *= s;
        b.ss[last] = sst[d];
        b.bs[last] = bst[d];
      } else {
        b.d[b.rank] = s;
        b.ss[b.rank] = sst[d];
        b.bs[b.rank] = bst[d];
        ++b.rank;
      }
    }
    // Rows of contiguous elements (no reduced group but the innermost) whose length is the
    // innermost broadcast group's, the outer groups broadcasting scale and bias.
    const Bcast& b = a.bc;
    if (plan.nr == 0 && plan.kin == 1 && b.rank >= 2 && b.d[b.rank - 1] == plan.rin) {
      a.row = true;
      for (int g = 0; g + 1 < b.rank; ++g) a.row = a.row && b.ss[g] == 0 && b.bs[g] == 0;
      a.row_ss = b.ss[b.rank - 1];
      a.row_bs = b.bs[b.rank - 1];
    }
    const auto* xp = static_cast<const T*>(x.data);
    auto* op = static_cast<T*>(out.data);
    launch_teams(plan, [&](auto team, dim3 grid, dim3 block) {
      norm_kernel<decltype(team), Tag><<<grid, block, 0, stream>>>(plan, a, xp, op);
    });
    dev::check_launch("normalization");
  });
  if (!ok) fail("normalization takes float32, float16 or bfloat16, not " + tn(x.type));
}

void topk(const TopKParams& p, const TensorRef& x, const TensorRef& out, cudaStream_t stream) {
  checked_volume(x, "topk", "the input");
  const i64 m = checked_volume(out, "topk", "the output");
  const int r = x.dims.rank();
  if (p.axes == 0 || (p.axes & (p.axes - 1)) != 0 || r < 1 || p.axes >= (1u << r))
    fail("topk: axes " + std::to_string(p.axes) + " must set one bit below the input's rank " + std::to_string(r));
  const int axis = std::countr_zero(p.axes);
  const i64 n = x.dims[axis], k = p.k;
  Dims expect = x.dims;
  expect[axis] = k;
  const bool want_values = p.output != 1;
  if (p.output != 0 && p.output != 1) fail("topk: the kernel computes one output (0 or 1)");
  if (k < 1 || k > n)
    fail("topk: k " + std::to_string(k) + " is outside [1, " + std::to_string(n) + "] for input " + desc(x));
  const DataType out_type = want_values ? x.type : DataType::kINT32;
  if (!(out.dims == expect) || out.type != out_type)
    fail("topk: output " + desc(out) + " should be " + tn(out_type) + expect.str() + " for input " + desc(x));
  if (n > INT32_MAX) fail("topk: dimension " + std::to_string(n) + " does not fit int32 indices");
  if (m == 0) return;
  i64 outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x.dims[d];
  for (int d = axis + 1; d < r; ++d) inner *= x.dims[d];
  const bool min = p.op != TopKOperation::kMAX;  // as the CPU: anything but MAX is MIN
  const auto launch = [&](auto key) {
    using K = decltype(key);
    if (k > kTopKMax)
      dev::unsupported("topk: k " + std::to_string(k) + " is above " + std::to_string(kTopKMax));
    run_topk<K>(x, out, outer * inner, n, inner, static_cast<int>(k), min, !want_values, stream);
  };
  switch (x.type) {
    case DataType::kFLOAT: launch(FloatKey<F32>{}); break;
    case DataType::kHALF: launch(FloatKey<F16>{}); break;
    case DataType::kBF16: launch(FloatKey<BF16>{}); break;
    case DataType::kINT32: launch(Int32Key{}); break;
    case DataType::kINT64: launch(Int64Key{}); break;
    default: fail("topk: input type " + tn(x.type) + " is not supported");
  }
}

}  // namespace tensoracle::cuda
