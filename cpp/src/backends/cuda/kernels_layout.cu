// The CUDA backend's layout, indexing and window kernels: shuffle, concatenation, slice, gather,
// padding, resize and pooling (kernels.h), with exactly the semantics of the CPU kernels
// (backends/cpu/kernels_layout.cpp for shuffle, kernels_index.cpp for concatenation, slice,
// gather, padding and resize, kernels_conv.cpp for pooling). Host-side checks repeat the CPU
// kernels' checks and messages, throwing InvalidArgument("[cuda] <kernel>: ...") before anything
// is launched; all work is asynchronous on the given stream (no synchronization, no host reads of
// device data, no allocations).
//
// Data movement (shuffle, concatenation, slice, gather, padding, nearest resize) copies raw
// elements of 1, 2, 4 or 8 bytes, so every type moves bit-exactly. Where the layout allows it (a
// contiguous innermost run whose length, offsets and both pointers are multiples of a wider
// unit) elements move in units of up to 16 bytes ("widening": a float16 row copies 8 elements
// per load).
//
// Index arithmetic: every kernel is a grid-stride loop over the output whose linear index is
// split over the output dims with a Divider: a multiply-shift for 32-bit indices (used when every
// index and offset involved is below 2^31) and a 64-bit division otherwise. A Plan maps an output
// index to an input offset (dims in the output's order with the input stride of each; size-1
// dims dropped and dims that stay adjacent merged, so a contiguous copy becomes one dim):
//   shuffle        one plan per non-identity transpose (two composed when both move data), or
//                  a cudaMemcpyAsync when neither does; a single plan that moves the innermost
//                  dim goes through shared-memory tiles (tiled_transpose) so that reads and
//                  writes are both coalesced
//   slice          a plan and a base offset when every index read lies inside the input; else a
//                  per-dim sampling kernel (WRAP, CLAMP, REFLECT, FILL)
//   padding        the same machinery: a FILL slice with zero (start = -pre_padding)
//   concatenation  one 2-D copy per input into its slab of the output
//   gather         one kernel per mode; an index outside [-dim, dim) writes zeros (kernels.h)
// Resize (linear, cubic) and pooling compute in float32 (pooling's sum and average in double, as
// the CPU does) in the CPU's order of operations, written with the _rn intrinsics so that no
// multiply and add is contracted into an FMA (the CPU build does not contract either): results
// are bit-identical to the CPU's. Resize's sample coordinates are computed in double by one
// function shared by the host (which decides per dim whether every sample is integral, as the
// CPU's resize_taps does, and which dims map every index to itself) and the device.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "graph/ops.h"
#include "tensoracle/errors.h"

namespace tensoracle::cuda {

namespace {

using dev::blocks_for;
using dev::check_launch;
using dev::i64;
using dev::checked_volume;
using dev::desc;
using dev::fail;
using dev::num;
using dev::tn;
using dev::kThreads;
using u32 = std::uint32_t;
constexpr int kMaxRank = Dims::kMaxRank;
// Indices, offsets and counts below this use 32-bit index arithmetic.
constexpr i64 kSmall = i64{1} << 31;

bool is_float_type(DataType t) { return t == DataType::kFLOAT || t == DataType::kHALF || t == DataType::kBF16; }

i64 prod(const Dims& d, int from, int to) {
  i64 p = 1;
  for (int k = from; k < to; ++k) p *= d[k];
  return p;
}

// Row-major strides, in elements.
void strides_of(const Dims& d, i64* s) {
  i64 acc = 1;
  for (int k = d.rank() - 1; k >= 0; --k) {
    s[k] = acc;
    acc *= d[k];
  }
}

void memcpy_async(void* dst, const void* src, i64 bytes, cudaStream_t stream, const char* kernel) {
  dev::check(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(bytes), cudaMemcpyDeviceToDevice, stream),
             std::string(kernel) + ": cudaMemcpyAsync");
}

// ---- launch helpers ----------------------------------------------------------------------

// Calls f(E{}) with the trivially copyable type of `bytes` bytes (uint4 for 16).
template <class F>
void by_width(int bytes, const char* kernel, F&& f) {
  switch (bytes) {
    case 1: f(std::uint8_t{}); break;
    case 2: f(std::uint16_t{}); break;
    case 4: f(std::uint32_t{}); break;
    case 8: f(std::uint64_t{}); break;
    case 16: f(uint4{}); break;
    default: fail(std::string(kernel) + ": unsupported element size " + std::to_string(bytes));
  }
}

// Calls f(Tag{}) for float32, float16 or bfloat16 (the types resize and pooling compute on; the
// caller has checked the type).
template <class F>
void by_float(DataType t, F&& f) {
  switch (t) {
    case DataType::kHALF: f(dev::F16{}); break;
    case DataType::kBF16: f(dev::BF16{}); break;
    default: f(dev::F32{}); break;
  }
}

// Calls f(I{}) with the index type: 32-bit when `small`, else 64-bit.
template <class F>
void by_index(bool small, F&& f) {
  if (small) f(u32{});
  else f(i64{});
}

// The widest unit of at most 16 bytes, a multiple of the element size `es`, to which every
// pointer is aligned and for which fits(k) holds (k = elements per unit); `es` when none.
template <class Fits>
int unit_bytes(std::size_t es, std::initializer_list<const void*> ptrs, Fits&& fits) {
  const int e = static_cast<int>(es);
  for (int w = 16; w > e; w /= 2) {
    if (w % e != 0) continue;
    bool aligned = true;
    for (const void* p : ptrs) aligned = aligned && reinterpret_cast<std::uintptr_t>(p) % static_cast<unsigned>(w) == 0;
    if (aligned && fits(static_cast<i64>(w / e))) return w;
  }
  return e;
}

// ---- division by a launch-time constant ---------------------------------------------------

template <class I>
struct Divider;

// 32-bit: q = (umulhi(n, mul) + n) >> shift with shift = ceil(log2(d)) and
// mul = floor(2^32 * (2^shift - d) / d) + 1; exact for every dividend n < 2^31 (the sum then
// stays below 2^32).
template <>
struct Divider<u32> {
  u32 d = 1, mul = 1, shift = 0;
  Divider() = default;
  explicit Divider(i64 divisor) : d(static_cast<u32>(divisor < 1 ? 1 : divisor)) {
    while (shift < 31 && (std::uint64_t{1} << shift) < d) ++shift;
    mul = static_cast<u32>((std::uint64_t{1} << 32) * ((std::uint64_t{1} << shift) - d) / d + 1);
  }
  __device__ u32 div(u32 n) const { return (__umulhi(n, mul) + n) >> shift; }
};

template <>
struct Divider<i64> {
  i64 d = 1;
  Divider() = default;
  explicit Divider(i64 divisor) : d(divisor < 1 ? 1 : divisor) {}
  __device__ i64 div(i64 n) const { return n / d; }
};

// The index along one dim: returns lin % dim and leaves lin / dim in lin.
template <class I>
__device__ __forceinline__ I take(I& lin, const Divider<I>& dim) {
  const I q = dim.div(lin);
  const I r = lin - q * dim.d;
  lin = q;
  return r;
}

// ---- plans: output linear index -> input offset ------------------------------------------

// Host form: dims in the output's order (row-major), each advancing the input by stride[k].
struct HostPlan {
  int rank = 0;
  i64 dim[kMaxRank] = {};
  i64 stride[kMaxRank] = {};
};

// Appends an output dim: a size-1 dim is dropped, a dim that continues the previous one in the
// input (previous stride == stride * n) is merged into it.
void push_dim(HostPlan& p, i64 n, i64 stride) {
  if (n == 1) return;
  if (p.rank > 0 && p.stride[p.rank - 1] == stride * n) {
    p.dim[p.rank - 1] *= n;
    p.stride[p.rank - 1] = stride;
  } else {
    p.dim[p.rank] = n;
    p.stride[p.rank] = stride;
    ++p.rank;
  }
}

// After the last push_dim: a plan of one element gets one dim of size 1 (rank >= 1 always).
void finish(HostPlan& p) {
  if (p.rank == 0) {
    p.rank = 1;
    p.dim[0] = 1;
    p.stride[0] = 1;
  }
}

// Output dim i of a transpose of `d` by `perm` is input dim perm[i].
HostPlan transpose_plan(const Dims& d, const Permutation& perm) {
  i64 st[kMaxRank];
  strides_of(d, st);
  HostPlan p;
  for (int i = 0; i < d.rank(); ++i) {
    const int k = perm.order[static_cast<std::size_t>(i)];
    push_dim(p, d[k], st[k]);
  }
  finish(p);
  return p;
}

// Reads its input in order: one contiguous dim.
bool is_identity(const HostPlan& p) { return p.rank == 1 && p.stride[0] == 1; }

// Whether the plan can move units of k elements: contiguous innermost dim of a multiple of k
// elements, every other stride a multiple of k.
bool widenable(const HostPlan& p, i64 k) {
  const int last = p.rank - 1;
  if (p.stride[last] != 1 || p.dim[last] % k != 0) return false;
  for (int i = 0; i < last; ++i)
    if (p.stride[i] % k != 0) return false;
  return true;
}

void widen(HostPlan& p, i64 k) {
  const int last = p.rank - 1;
  p.dim[last] /= k;
  for (int i = 0; i < last; ++i) p.stride[i] /= k;
}

// Device form. With 32-bit indices a negative stride is stored modulo 2^32: the offsets wrap
// back into range, since every true offset lies in [0, 2^31).
template <class I>
struct Plan {
  int rank = 1;
  Divider<I> dim[kMaxRank];
  I stride[kMaxRank] = {};
};

template <class I>
Plan<I> device_plan(const HostPlan& h) {
  Plan<I> p;
  p.rank = h.rank;
  for (int i = 0; i < h.rank; ++i) {
    p.dim[i] = Divider<I>(h.dim[i]);
    p.stride[i] = static_cast<I>(h.stride[i]);
  }
  return p;
}

template <class I>
__device__ __forceinline__ I plan_offset(const Plan<I>& p, I lin) {
  I off = 0;
#pragma unroll
  for (int k = kMaxRank - 1; k > 0; --k)
    if (k < p.rank) off += take(lin, p.dim[k]) * p.stride[k];
  return off + lin * p.stride[0];  // lin < dim[0]: no division for the outermost dim
}

// Grid-stride loop bounds (I: u32 or i64; with u32, n < 2^31 keeps i + step below 2^32).
#define GRID_STRIDE_LOOP(I, i, n)                                                       \
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x))

// y[i] = x[base + outer(inner(i))] (kTwo) or x[base + outer(i)].
template <class E, class I, bool kTwo>
__global__ void __launch_bounds__(kThreads)
    plan_copy_kernel(const E* __restrict__ x, E* __restrict__ y, I n, I base, Plan<I> outer, Plan<I> inner) {
  GRID_STRIDE_LOOP(I, i, n) {
    const I a = kTwo ? plan_offset(inner, i) : i;
    y[i] = x[base + plan_offset(outer, a)];
  }
}

// A plan whose innermost output dim is strided in the input (a transpose that moves the
// innermost dim): tiles of kTile x kTile over dim A (the one read contiguously, input stride 1)
// and dim B (the innermost output dim) pass through shared memory, so that reads and writes are
// both coalesced. The other dims ("batch") are walked per tile, in 64-bit.
constexpr int kTile = 32, kTileRows = kThreads / kTile;

struct TileArgs {
  i64 tiles_a = 1, tiles_b = 1, tiles = 1;  // tiles along A, along B, in all
  i64 dim_a = 1, dim_b = 1;
  i64 in_b = 0;   // input stride of B
  i64 out_a = 0;  // output stride of A
  i64 base = 0;   // input offset of the first element
  int nbatch = 0;
  i64 batch_dim[kMaxRank] = {}, batch_in[kMaxRank] = {}, batch_out[kMaxRank] = {};
};

template <class E>
__global__ void __launch_bounds__(kThreads)
    tiled_transpose_kernel(const E* __restrict__ x, E* __restrict__ y, TileArgs a) {
  __shared__ E tile[kTile][kTile + 1];  // [b][a]; the padding column avoids bank conflicts
  const int tx = static_cast<int>(threadIdx.x) % kTile, ty = static_cast<int>(threadIdx.x) / kTile;
  for (i64 t = blockIdx.x; t < a.tiles; t += gridDim.x) {
    i64 rest = t / a.tiles_b;
    const i64 b0 = (t - rest * a.tiles_b) * kTile;
    i64 batch = rest / a.tiles_a;
    const i64 a0 = (rest - batch * a.tiles_a) * kTile;
    i64 in_off = a.base, out_off = 0;
    for (int k = a.nbatch - 1; k >= 0; --k) {
      const i64 q = batch / a.batch_dim[k];
      const i64 idx = batch - q * a.batch_dim[k];
      in_off += idx * a.batch_in[k];
      out_off += idx * a.batch_out[k];
      batch = q;
    }
    // Read: consecutive threads take consecutive a (contiguous in the input).
    for (int j = ty; j < kTile; j += kTileRows) {
      const i64 ia = a0 + tx, ib = b0 + j;
      if (ia < a.dim_a && ib < a.dim_b) tile[j][tx] = x[in_off + ia + ib * a.in_b];
    }
    __syncthreads();
    // Write: consecutive threads take consecutive b (contiguous in the output).
    for (int j = ty; j < kTile; j += kTileRows) {
      const i64 ia = a0 + j, ib = b0 + tx;
      if (ia < a.dim_a && ib < a.dim_b) y[out_off + ia * a.out_a + ib] = tile[tx][j];
    }
    __syncthreads();
  }
}

// Launches tiled_transpose_kernel when the (unwidened) plan suits it: its innermost dim is
// strided in the input, some other dim has input stride 1, and both hold at least a quarter
// tile. Returns false (nothing launched) otherwise.
bool tiled_transpose(const void* x, void* y, std::size_t es, i64 base, const HostPlan& p, cudaStream_t stream,
                     const char* kernel) {
  const int m = p.rank, last = m - 1;
  if (m < 2 || p.stride[last] == 1) return false;
  int c = -1;
  for (int k = 0; k < last; ++k)
    if (p.stride[k] == 1) c = k;
  if (c < 0 || p.dim[c] < kTile / 4 || p.dim[last] < kTile / 4) return false;
  i64 out_stride[kMaxRank];
  i64 s = 1;
  for (int k = last; k >= 0; --k) {
    out_stride[k] = s;
    s *= p.dim[k];
  }
  TileArgs a;
  a.dim_a = p.dim[c];
  a.dim_b = p.dim[last];
  a.in_b = p.stride[last];
  a.out_a = out_stride[c];
  a.base = base;
  a.tiles_a = (a.dim_a + kTile - 1) / kTile;
  a.tiles_b = (a.dim_b + kTile - 1) / kTile;
  i64 batches = 1;
  for (int k = 0; k < last; ++k) {
    if (k == c) continue;
    a.batch_dim[a.nbatch] = p.dim[k];
    a.batch_in[a.nbatch] = p.stride[k];
    a.batch_out[a.nbatch] = out_stride[k];
    ++a.nbatch;
    batches *= p.dim[k];
  }
  a.tiles = batches * a.tiles_a * a.tiles_b;
  const unsigned blocks = static_cast<unsigned>(std::min<i64>(a.tiles, 65535 * 8));
  by_width(static_cast<int>(es), kernel, [&](auto e) {
    using E = decltype(e);
    tiled_transpose_kernel<E><<<blocks, kThreads, 0, stream>>>(static_cast<const E*>(x), static_cast<E*>(y), a);
  });
  check_launch(kernel);
  return true;
}

// Launches plan_copy_kernel over n elements of `es` bytes: `outer` (and `inner` when two) are
// widened together when they allow it. `in_elems` bounds the input offsets. A single plan that
// cannot be widened goes through tiled_transpose when it suits it.
void plan_copy(const void* x, void* y, i64 n, std::size_t es, i64 base, HostPlan outer, const HostPlan* inner,
               i64 in_elems, cudaStream_t stream, const char* kernel) {
  HostPlan in2 = inner ? *inner : HostPlan{};
  const int w = unit_bytes(es, {x, y}, [&](i64 k) {
    return base % k == 0 && widenable(outer, k) && (inner == nullptr || widenable(in2, k));
  });
  const i64 k = w / static_cast<i64>(es);
  if (k > 1) {
    widen(outer, k);
    if (inner) widen(in2, k);
  } else if (inner == nullptr && tiled_transpose(x, y, es, base, outer, stream, kernel)) {
    return;
  }
  const i64 units = n / k;
  const bool small = units < kSmall && in_elems < kSmall;
  by_width(w, kernel, [&](auto e) {
    using E = decltype(e);
    by_index(small, [&](auto ix) {
      using I = decltype(ix);
      const auto* xs = static_cast<const E*>(x);
      auto* ys = static_cast<E*>(y);
      if (inner)
        plan_copy_kernel<E, I, true><<<blocks_for(units), kThreads, 0, stream>>>(
            xs, ys, static_cast<I>(units), static_cast<I>(base / k), device_plan<I>(outer), device_plan<I>(in2));
      else
        plan_copy_kernel<E, I, false><<<blocks_for(units), kThreads, 0, stream>>>(
            xs, ys, static_cast<I>(units), static_cast<I>(base / k), device_plan<I>(outer), Plan<I>{});
    });
  });
  check_launch(kernel);
}

// ---- shuffle helpers (the CPU's) -----------------------------------------------------------

bool is_permutation(const Permutation& p, int rank) {
  bool seen[kMaxRank] = {};
  for (int i = 0; i < rank; ++i) {
    const int v = p.order[static_cast<std::size_t>(i)];
    if (v < 0 || v >= rank || seen[v]) return false;
    seen[v] = true;
  }
  return true;
}

std::string perm_text(const Permutation& p, int rank) {
  std::string s = "(";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(p.order[static_cast<std::size_t>(i)]);
  return s + ")";
}

// ---- concatenation -------------------------------------------------------------------------

// One input's slab: input element i = (o, j) of [outer, cols] goes to o * row + offset + j.
template <class E, class I>
__global__ void __launch_bounds__(kThreads)
    concat_kernel(const E* __restrict__ x, E* __restrict__ y, I n, Divider<I> cols, I row, I offset) {
  GRID_STRIDE_LOOP(I, i, n) {
    I o = i;
    const I j = take(o, cols);
    y[o * row + offset + j] = x[i];
  }
}

// ---- sampling (slice with out-of-range reads, padding) -------------------------------------

// Per output dim: input index = start + o * step; `mode` maps one outside [0, in_dim)
// (-1: every index of the dim is inside, no check).
template <class I>
struct SampleArgs {
  int rank = 0;
  Divider<I> dim[kMaxRank];
  I in_stride[kMaxRank] = {};
  i64 start[kMaxRank] = {}, step[kMaxRank] = {}, in_dim[kMaxRank] = {};
  int mode[kMaxRank] = {};
};

// An index outside [0, dim) under WRAP, CLAMP or REFLECT (dim > 0), or -1 (FILL).
__device__ __forceinline__ i64 map_outside(i64 v, i64 dim, int mode) {
  switch (static_cast<SampleMode>(mode)) {
    case SampleMode::kWRAP: return ((v % dim) + dim) % dim;
    case SampleMode::kCLAMP: return v < 0 ? 0 : dim - 1;
    case SampleMode::kREFLECT: {
      if (dim == 1) return 0;
      const i64 period = 2 * dim - 2;
      const i64 q = ((v % period) + period) % period;
      return q < dim ? q : period - q;
    }
    default: return -1;
  }
}

// fill: one element (null: zero), read when a dim maps to -1.
template <class E, class I>
__global__ void __launch_bounds__(kThreads)
    sample_kernel(const E* __restrict__ x, E* __restrict__ y, I n, SampleArgs<I> a, const E* __restrict__ fill) {
  GRID_STRIDE_LOOP(I, i, n) {
    I lin = i, off = 0;
    bool inside = true;
#pragma unroll
    for (int k = kMaxRank - 1; k >= 0; --k) {
      if (k < a.rank) {
        const I o = k > 0 ? take(lin, a.dim[k]) : lin;
        i64 v = a.start[k] + static_cast<i64>(o) * a.step[k];
        if (a.mode[k] >= 0 && (v < 0 || v >= a.in_dim[k])) v = map_outside(v, a.in_dim[k], a.mode[k]);
        if (v < 0) inside = false;
        else off += static_cast<I>(v) * a.in_stride[k];
      }
    }
    y[i] = inside ? x[off] : fill != nullptr ? *fill : E{};
  }
}

// The first i in [0, size) whose index start + i * step lies outside [0, dim), or -1.
i64 first_outside(i64 start, i64 step, i64 size, i64 dim) {
  i64 i;
  if (start < 0 || start >= dim) i = 0;
  else if (step > 0) i = (dim - start + step - 1) / step;
  else if (step < 0) i = start / -step + 1;
  else return -1;
  return i < size ? i : -1;
}

// out[o] = x[start + o * step] per dim, under `mode` where that leaves the input (the caller has
// refused what the CPU refuses: STRICT_BOUNDS out of range, an empty dim outside FILL). `fill`
// (device, one element; null: zero) is FILL's value.
void sample_copy(const TensorRef& x, const TensorRef& out, const i64* start, const i64* step, SampleMode mode,
                 const void* fill, cudaStream_t stream, const char* kernel) {
  const int r = x.dims.rank();
  const std::size_t es = element_size(x.type);
  const i64 n = out.dims.volume(), in_elems = x.dims.volume();
  i64 st[kMaxRank];
  strides_of(x.dims, st);
  bool inside[kMaxRank] = {};
  bool all_inside = true;
  for (int d = 0; d < r; ++d) {
    inside[d] = first_outside(start[d], step[d], out.dims[d], x.dims[d]) < 0;
    all_inside = all_inside && inside[d];
  }
  if (all_inside) {  // an affine read: base + sum of o_d * step_d * stride_d
    HostPlan p;
    i64 base = 0;
    for (int d = 0; d < r; ++d) {
      base += start[d] * st[d];
      push_dim(p, out.dims[d], step[d] * st[d]);
    }
    finish(p);
    if (is_identity(p)) {
      memcpy_async(out.data, static_cast<const unsigned char*>(x.data) + base * static_cast<i64>(es),
                   n * static_cast<i64>(es), stream, kernel);
      return;
    }
    plan_copy(x.data, out.data, n, es, base, p, nullptr, in_elems, stream, kernel);
    return;
  }
  // Units of k elements along the last dim when it reads contiguously and its boundaries are
  // multiples of k (a FILL value would have to be repeated: only zero is widened).
  const int last = r - 1;
  const int w = unit_bytes(es, {x.data, out.data}, [&](i64 k) {
    return fill == nullptr && step[last] == 1 && out.dims[last] % k == 0 && x.dims[last] % k == 0 &&
           start[last] % k == 0 && (inside[last] || mode == SampleMode::kFILL);
  });
  const i64 k = w / static_cast<i64>(es);
  const i64 units = n / k;
  const bool small = units < kSmall && in_elems < kSmall;
  by_width(w, kernel, [&](auto e) {
    using E = decltype(e);
    by_index(small, [&](auto ix) {
      using I = decltype(ix);
      SampleArgs<I> a;
      a.rank = r;
      for (int d = 0; d < r; ++d) {
        const bool l = d == last;
        a.dim[d] = Divider<I>(l ? out.dims[d] / k : out.dims[d]);
        a.in_stride[d] = static_cast<I>(l ? 1 : st[d] / k);
        a.start[d] = l ? start[d] / k : start[d];
        a.step[d] = step[d];
        a.in_dim[d] = l ? x.dims[d] / k : x.dims[d];
        a.mode[d] = inside[d] ? -1 : static_cast<int>(mode);
      }
      sample_kernel<E, I><<<blocks_for(units), kThreads, 0, stream>>>(
          static_cast<const E*>(x.data), static_cast<E*>(out.data), static_cast<I>(units), a,
          static_cast<const E*>(fill));
    });
  });
  check_launch(kernel);
}

// ---- gather --------------------------------------------------------------------------------

template <class I>
__device__ __forceinline__ i64 load_index(const void* p, bool idx64, I pos) {
  return idx64 ? static_cast<i64>(static_cast<const std::int64_t*>(p)[pos])
               : static_cast<i64>(static_cast<const std::int32_t*>(p)[pos]);
}

// DEFAULT: output [outer, nidx, inner] = data[o, index[pos(o, j)], e].
template <class I>
struct GatherDefaultArgs {
  Divider<I> inner;   // units per gathered slab
  Divider<I> nidx;    // indices per batch
  Divider<I> outer2;  // outer indices per batch (num_elementwise_dims 1)
  i64 dim = 0;        // data's size along the axis
  bool batched = false, idx64 = false;
};

template <class E, class I>
__global__ void __launch_bounds__(kThreads) gather_default_kernel(const E* __restrict__ x, const void* __restrict__ indices,
                                                                  E* __restrict__ y, I n, GatherDefaultArgs<I> a) {
  GRID_STRIDE_LOOP(I, i, n) {
    I o = i;
    const I e = take(o, a.inner);
    const I j = take(o, a.nidx);
    const I pos = a.batched ? a.outer2.div(o) * a.nidx.d + j : j;
    i64 v = load_index(indices, a.idx64, pos);
    if (v < -a.dim || v >= a.dim) {
      y[i] = E{};
      continue;
    }
    if (v < 0) v += a.dim;
    y[i] = x[(o * static_cast<I>(a.dim) + static_cast<I>(v)) * a.inner.d + e];
  }
}

// ELEMENT: output (= indices) element i reads data at its own position with the axis index
// replaced by index[i] (`pos`: the position's offset without the axis).
template <class I>
struct GatherElementArgs {
  Plan<I> pos;
  I axis_stride = 0;
  i64 dim = 0;
  bool idx64 = false;
};

template <class E, class I>
__global__ void __launch_bounds__(kThreads) gather_element_kernel(const E* __restrict__ x, const void* __restrict__ indices,
                                                                  E* __restrict__ y, I n, GatherElementArgs<I> a) {
  GRID_STRIDE_LOOP(I, i, n) {
    i64 v = load_index(indices, a.idx64, i);
    if (v < -a.dim || v >= a.dim) {
      y[i] = E{};
      continue;
    }
    if (v < 0) v += a.dim;
    y[i] = x[plan_offset(a.pos, i) + static_cast<I>(v) * a.axis_stride];
  }
}

// ND: output row t (of `slice` units) copies the data slice that the index tuple t (`last`
// indices) selects in the batch of t.
template <class I>
struct GatherNdArgs {
  Divider<I> slice, per_batch;
  I batch_stride = 0;
  int last = 0;
  i64 dim[kMaxRank] = {};  // sizes of the indexed data dims
  I stride[kMaxRank] = {};  // their strides, in units
  bool idx64 = false;
};

template <class E, class I>
__global__ void __launch_bounds__(kThreads) gather_nd_kernel(const E* __restrict__ x, const void* __restrict__ indices,
                                                             E* __restrict__ y, I n, GatherNdArgs<I> a) {
  GRID_STRIDE_LOOP(I, i, n) {
    I t = i;
    const I e = take(t, a.slice);
    I off = a.per_batch.div(t) * a.batch_stride;
    bool ok = true;
    for (int m = 0; m < a.last; ++m) {
      i64 v = load_index(indices, a.idx64, t * static_cast<I>(a.last) + static_cast<I>(m));
      const i64 dim = a.dim[m];
      if (v < -dim || v >= dim) {
        ok = false;
        break;
      }
      if (v < 0) v += dim;
      off += static_cast<I>(v) * a.stride[m];
    }
    y[i] = ok ? x[off + e] : E{};
  }
}

// ---- resize --------------------------------------------------------------------------------

using RCT = ResizeCoordinateTransformation;

// IEEE double operations that are never contracted into an FMA (device) or on a host build
// without FMA (the CPU backend's arithmetic).
__host__ __device__ __forceinline__ double dadd(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
__host__ __device__ __forceinline__ double dsub(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
__host__ __device__ __forceinline__ double dmul(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
__host__ __device__ __forceinline__ double ddiv(double a, double b) {
#ifdef __CUDA_ARCH__
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}

// Per-dim geometry of a resize (the parameters that resize_coordinate needs).
struct ResizeDims {
  int rank = 0;
  i64 in[kMaxRank] = {}, out[kMaxRank] = {}, stride[kMaxRank] = {};
  double scale[kMaxRank] = {};  // given scales (when `given`)
  // 0: the dim maps output index o to input index o (no arithmetic); else nearest: 1,
  // linear/cubic: taps per output index (1 when every sample is integral, else 2 or 4).
  int taps[kMaxRank] = {};
  int rct = 0;       // ResizeCoordinateTransformation (validated)
  int rounding = 0;  // ResizeRoundMode (validated when nearest)
  bool upper = false, given = false, linear = false;
  double cubic = 0.0;  // cubic coefficient
};

// The input coordinate that output index o of dim d samples (the CPU's resize_coordinate).
__host__ __device__ inline double resize_coordinate(const ResizeDims& a, int d, i64 o) {
  const i64 in = a.in[d], out = a.out[d];
  if (out == 1 && a.upper) return 0.0;
  const double x = static_cast<double>(o);
  switch (static_cast<RCT>(a.rct)) {
    case RCT::kALIGN_CORNERS:
      return out == 1 ? 0.0 : ddiv(dmul(x, static_cast<double>(in - 1)), static_cast<double>(out - 1));
    case RCT::kASYMMETRIC:
      return a.given ? ddiv(x, a.scale[d]) : ddiv(dmul(x, static_cast<double>(in)), static_cast<double>(out));
    case RCT::kHALF_PIXEL:
    default:  // validated on the host
      return a.given ? dsub(ddiv(dadd(x, 0.5), a.scale[d]), 0.5)
                     : dsub(ddiv(dmul(dadd(x, 0.5), static_cast<double>(in)), static_cast<double>(out)), 0.5);
  }
}

// The CPU's nearest_index.
__host__ __device__ inline i64 nearest_index(int mode, double x, i64 in) {
  double r;
  switch (static_cast<ResizeRoundMode>(mode)) {
    case ResizeRoundMode::kHALF_UP: r = floor(dadd(x, 0.5)); break;
    case ResizeRoundMode::kHALF_DOWN: r = ceil(dsub(x, 0.5)); break;
    case ResizeRoundMode::kFLOOR: r = floor(x); break;
    default: r = ceil(x); break;  // kCEIL (validated on the host)
  }
  if (!(r >= 0.0)) return 0;  // also NaN
  if (r >= static_cast<double>(in - 1)) return in - 1;
  return static_cast<i64>(r);
}

// A linear sample coordinate is clamped into the input (std::clamp: NaN stays NaN).
__host__ __device__ inline double clamp_coordinate(double v, i64 in) {
  const double hi = static_cast<double>(in - 1);
  return v < 0.0 ? 0.0 : hi < v ? hi : v;
}

// The CPU's cubic_weight, in its order of operations.
__device__ inline double cubic_weight(double d, double a) {
  d = fabs(d);
  if (d <= 1.0) return dadd(dmul(dmul(dsub(dmul(dadd(a, 2.0), d), dadd(a, 3.0)), d), d), 1.0);
  if (d < 2.0) return dsub(dmul(dadd(dmul(dsub(dmul(a, d), dmul(5.0, a)), d), dmul(8.0, a)), d), dmul(4.0, a));
  return 0.0;
}

// Taps (input offset, weight) of output index o of dim d (the CPU's resize_taps).
__device__ inline void resize_taps(const ResizeDims& a, int d, i64 o, i64* off, float* w) {
  const i64 in = a.in[d], stride = a.stride[d];
  if (a.taps[d] == 0) {  // the identity
    off[0] = o * stride;
    w[0] = 1.f;
    return;
  }
  double v = resize_coordinate(a, d, o);
  if (a.linear) v = clamp_coordinate(v, in);
  if (a.taps[d] == 1) {
    off[0] = static_cast<i64>(v) * stride;
    w[0] = 1.f;
    return;
  }
  const double f = floor(v);
  const double frac = dsub(v, f);
  const i64 i0 = static_cast<i64>(f);
  auto clampi = [in](i64 i) { return i < 0 ? i64{0} : i > in - 1 ? in - 1 : i; };
  if (a.taps[d] == 2) {
    off[0] = clampi(i0) * stride;
    off[1] = clampi(i0 + 1) * stride;
    w[0] = __double2float_rn(dsub(1.0, frac));
    w[1] = __double2float_rn(frac);
  } else {
    for (int k = -1; k <= 2; ++k) {
      off[k + 1] = clampi(i0 + k) * stride;
      w[k + 1] = __double2float_rn(cubic_weight(dsub(frac, static_cast<double>(k)), a.cubic));
    }
  }
}

template <class I>
struct OutDims {
  Divider<I> d[kMaxRank];
};

// Splits linear index i into the output index of every dim.
template <class I>
__device__ __forceinline__ void split_index(I i, int rank, const OutDims<I>& od, i64* o) {
#pragma unroll
  for (int k = kMaxRank - 1; k >= 0; --k)
    if (k < rank) o[k] = static_cast<i64>(k > 0 ? take(i, od.d[k]) : i);
}

template <class E, class I>
__global__ void __launch_bounds__(kThreads)
    resize_nearest_kernel(const E* __restrict__ x, E* __restrict__ y, I n, ResizeDims a, OutDims<I> od) {
  GRID_STRIDE_LOOP(I, i, n) {
    i64 o[kMaxRank];
    split_index(i, a.rank, od, o);
    i64 off = 0;
    for (int d = 0; d < a.rank; ++d)
      off += (a.taps[d] == 0 ? o[d] : nearest_index(a.rounding, resize_coordinate(a, d, o[d]), a.in[d])) * a.stride[d];
    y[i] = x[off];
  }
}

// Linear/cubic (the CPU's resize_interp): acc = sum over the combinations c of the outer dims
// with several taps (in order, the last of them fastest) of w_c * part_c, w_c the product of
// their weights (from 1.f, in dim order), part_c = sum over the KL taps of the last dim of
// w_k * x; every step rounded to float as the CPU rounds it.
template <class Tag, class I, int KL>
__global__ void __launch_bounds__(kThreads) resize_interp_kernel(const typename Tag::T* __restrict__ x,
                                                                 typename Tag::T* __restrict__ y, I n, ResizeDims a,
                                                                 OutDims<I> od) {
  GRID_STRIDE_LOOP(I, i, n) {
    i64 o[kMaxRank];
    split_index(i, a.rank, od, o);
    const int last = a.rank - 1;
    i64 base = 0;
    int nm = 0;
    int mk[kMaxRank];           // taps of each multi-tap outer dim
    i64 moff[kMaxRank - 1][4];  // their offsets and weights
    float mw[kMaxRank - 1][4];
    i64 combos = 1;
    for (int d = 0; d < last; ++d) {
      if (a.taps[d] <= 1) {
        i64 off;
        float w;
        resize_taps(a, d, o[d], &off, &w);
        base += off;
      } else {
        resize_taps(a, d, o[d], moff[nm], mw[nm]);
        mk[nm] = a.taps[d];
        combos *= a.taps[d];
        ++nm;
      }
    }
    i64 loff[4];
    float lw[4];
    resize_taps(a, last, o[last], loff, lw);
    int tix[kMaxRank] = {};
    float acc = 0.f;
    for (i64 c = 0; c < combos; ++c) {
      i64 off = base;
      float w = 1.f;
      for (int m = 0; m < nm; ++m) {
        off += moff[m][tix[m]];
        w = __fmul_rn(w, mw[m][tix[m]]);
      }
      float part = 0.f;
#pragma unroll
      for (int k = 0; k < KL; ++k) part = __fadd_rn(part, __fmul_rn(lw[k], Tag::load(x[off + loff[k]])));
      acc = __fadd_rn(acc, __fmul_rn(w, part));
      for (int m = nm - 1; m >= 0; --m) {
        if (++tix[m] < mk[m]) break;
        tix[m] = 0;
      }
    }
    y[i] = Tag::store(acc);
  }
}

// ---- pooling -------------------------------------------------------------------------------

// Normalized to 3 spatial dims (d, h, w), as the CPU's Geo.
struct PoolArgs {
  i64 in[3] = {}, k[3] = {}, s[3] = {}, pre[3] = {};
  i64 lim[3] = {};  // where the padded input ends (explicit modes: in + post)
  i64 in_sp = 1;    // input elements per (n, c)
  int type = 0;     // PoolingType
  bool exclude = true;  // average_count_excludes_padding
  double blend = 0.0;
};

// Window of output index o along dim i: [lo, hi) inside the input, `padded` its extent within
// the padded input.
__device__ __forceinline__ void pool_window(const PoolArgs& a, int i, i64 o, i64& lo, i64& hi, i64& padded) {
  const i64 s = o * a.s[i] - a.pre[i];
  lo = s > 0 ? s : 0;
  hi = s + a.k[i] < a.in[i] ? s + a.k[i] : a.in[i];
  padded = (s + a.k[i] < a.lim[i] ? s + a.k[i] : a.lim[i]) - s;
}

// One window's running maximum (a NaN sticks) and double sum, in the taps' order, and the
// pooled value from them, rounded once to float (the CPU's arithmetic); both kernels use it.
struct PoolAcc {
  float mx = -INFINITY;
  double sum = 0.0;
  __device__ __forceinline__ void add(float v, bool want_max, bool want_avg) {
    if (want_max && (v > mx || isnan(v))) mx = isnan(mx) ? mx : v;
    if (want_avg) sum = dadd(sum, static_cast<double>(v));
  }
  // `count`: the window's taps inside the input; `padded`: its extent in the padded input.
  __device__ __forceinline__ float value(int type, bool exclude, double blend, double count, double padded) const {
    if (type == static_cast<int>(PoolingType::kMAX)) return mx;
    const double avg = ddiv(sum, exclude ? count : padded);
    const double r = type == static_cast<int>(PoolingType::kAVERAGE)
                         ? avg
                         : dadd(dmul(blend, static_cast<double>(mx)), dmul(dsub(1.0, blend), avg));
    return __double2float_rn(r);
  }
};

template <class Tag, class I>
__global__ void __launch_bounds__(kThreads)
    pool_kernel(const typename Tag::T* __restrict__ x, typename Tag::T* __restrict__ y, I n, Divider<I> OW,
                Divider<I> OH, Divider<I> OD, PoolArgs a) {
  const bool want_max = a.type != static_cast<int>(PoolingType::kAVERAGE);
  const bool want_avg = a.type != static_cast<int>(PoolingType::kMAX);
  GRID_STRIDE_LOOP(I, i, n) {
    I r = i;
    const i64 ow = static_cast<i64>(take(r, OW));
    const i64 oh = static_cast<i64>(take(r, OH));
    const i64 od = static_cast<i64>(take(r, OD));
    const i64 nc = static_cast<i64>(r);
    i64 d0, d1, pd, h0, h1, ph, w0, w1, pw;
    pool_window(a, 0, od, d0, d1, pd);
    pool_window(a, 1, oh, h0, h1, ph);
    pool_window(a, 2, ow, w0, w1, pw);
    const i64 count = (d1 > d0 ? d1 - d0 : 0) * (h1 > h0 ? h1 - h0 : 0) * (w1 > w0 ? w1 - w0 : 0);
    if (count == 0) {  // a window entirely in (or past) the padding
      y[i] = Tag::store(0.f);
      continue;
    }
    const typename Tag::T* xc = x + nc * a.in_sp;
    PoolAcc acc;
    for (i64 id = d0; id < d1; ++id) {
      for (i64 ih = h0; ih < h1; ++ih) {
        const typename Tag::T* xrow = xc + (id * a.in[1] + ih) * a.in[2];
        for (i64 iw = w0; iw < w1; ++iw) acc.add(Tag::load(xrow[iw]), want_max, want_avg);
      }
    }
    y[i] = Tag::store(acc.value(a.type, a.exclude, a.blend, static_cast<double>(count), static_cast<double>(pd * ph * pw)));
  }
}

// Calls tap(ih, iw) for the taps of a 2-D window whose first tap is (sh, sw) that lie in
// [h0, h1) x [w0, w1), in row-major order; unrolled where the window's size KH x KW is known at
// compile time (KH = KW = 0: the loops run over the clipped ranges).
template <int KH, int KW, class F>
__device__ __forceinline__ void for_each_tap_2d(int sh, int sw, int h0, int h1, int w0, int w1, F&& tap) {
  if constexpr (KH > 0 && KW > 0) {
#pragma unroll
    for (int dh = 0; dh < KH; ++dh) {
      const int ih = sh + dh;
      if (ih < h0 || ih >= h1) continue;
#pragma unroll
      for (int dw = 0; dw < KW; ++dw) {
        const int iw = sw + dw;
        if (iw >= w0 && iw < w1) tap(ih, iw);
      }
    }
  } else {
    for (int ih = h0; ih < h1; ++ih)
      for (int iw = w0; iw < w1; ++iw) tap(ih, iw);
  }
}

// Two spatial dims (no depth) with every input offset below 2^31: the same window, order and
// arithmetic as pool_kernel in int coordinates, the window's size known at compile time for the
// common 2 x 2 and 3 x 3 (KH = KW = 0: from the arguments). Taps outside [h0, h1) x [w0, w1) are
// skipped, so the in-window taps are visited in pool_kernel's order.
struct Pool2dArgs {
  int in_h = 0, in_w = 0, k_h = 0, k_w = 0, s_h = 0, s_w = 0, pre_h = 0, pre_w = 0, lim_h = 0, lim_w = 0;
  int type = 0;
  bool exclude = true;
  double blend = 0.0;
};

template <class Tag, int KH, int KW>
__global__ void __launch_bounds__(kThreads)
    pool2d_kernel(const typename Tag::T* __restrict__ x, typename Tag::T* __restrict__ y, u32 n, Divider<u32> OW,
                  Divider<u32> OH, Pool2dArgs a) {
  const bool want_max = a.type != static_cast<int>(PoolingType::kAVERAGE);
  const bool want_avg = a.type != static_cast<int>(PoolingType::kMAX);
  const int kh = KH > 0 ? KH : a.k_h, kw = KW > 0 ? KW : a.k_w;
  GRID_STRIDE_LOOP(u32, i, n) {
    u32 r = i;
    const int ow = static_cast<int>(take(r, OW));
    const int oh = static_cast<int>(take(r, OH));
    const int sh = oh * a.s_h - a.pre_h, sw = ow * a.s_w - a.pre_w;
    const int h0 = sh > 0 ? sh : 0, h1 = sh + kh < a.in_h ? sh + kh : a.in_h;
    const int w0 = sw > 0 ? sw : 0, w1 = sw + kw < a.in_w ? sw + kw : a.in_w;
    const int count = (h1 > h0 ? h1 - h0 : 0) * (w1 > w0 ? w1 - w0 : 0);
    if (count == 0) {
      y[i] = Tag::store(0.f);
      continue;
    }
    const typename Tag::T* xc = x + r * static_cast<u32>(a.in_h * a.in_w);
    PoolAcc acc;
    for_each_tap_2d<KH, KW>(sh, sw, h0, h1, w0, w1,
                            [&](int ih, int iw) { acc.add(Tag::load(xc[ih * a.in_w + iw]), want_max, want_avg); });
    const int ph = (sh + kh < a.lim_h ? sh + kh : a.lim_h) - sh, pw = (sw + kw < a.lim_w ? sw + kw : a.lim_w) - sw;
    y[i] = Tag::store(acc.value(a.type, a.exclude, a.blend, static_cast<double>(count),
                                static_cast<double>(ph) * static_cast<double>(pw)));
  }
}

// Pooling where x or y (or both) is stored channels-last: [N, spatial..., C] instead of
// [N, C, spatial...] (layouts.h). Each thread pools V consecutive channels of one output
// position: V = 16 bytes of elements where x is channels-last and C and the pointers allow it
// (one 16-byte load per tap), else 1. The windows, the taps' order and PoolAcc's arithmetic are
// pool_kernel's, so every value is bit-identical to the packed kernels'. Threads run through the
// output in its stored order: channel groups fastest for a channels-last y, positions fastest for
// a packed one, so that neighbouring threads store neighbouring elements.
struct PoolLayoutArgs {
  PoolArgs a;
  i64 xs[5] = {}, ys[5] = {};  // strides in elements along n, c, d, h, w
};

template <class Tag, class I, int V, bool kOutChannelsLast>
__global__ void __launch_bounds__(kThreads)
    pool_layout_kernel(const typename Tag::T* __restrict__ x, typename Tag::T* __restrict__ y, I n, Divider<I> G,
                       Divider<I> OW, Divider<I> OH, Divider<I> OD, PoolLayoutArgs c) {
  using T = typename Tag::T;
  static_assert(V == 1 || V * sizeof(T) == 16, "one element or 16 bytes per tap");
  const PoolArgs& a = c.a;
  const bool want_max = a.type != static_cast<int>(PoolingType::kAVERAGE);
  const bool want_avg = a.type != static_cast<int>(PoolingType::kMAX);
  GRID_STRIDE_LOOP(I, i, n) {
    I r = i;
    i64 g, ow, oh, od;
    if constexpr (kOutChannelsLast) {
      g = static_cast<i64>(take(r, G));
      ow = static_cast<i64>(take(r, OW));
      oh = static_cast<i64>(take(r, OH));
      od = static_cast<i64>(take(r, OD));
    } else {
      ow = static_cast<i64>(take(r, OW));
      oh = static_cast<i64>(take(r, OH));
      od = static_cast<i64>(take(r, OD));
      g = static_cast<i64>(take(r, G));
    }
    const i64 b = static_cast<i64>(r), ch = g * V;
    i64 d0, d1, pd, h0, h1, ph, w0, w1, pw;
    pool_window(a, 0, od, d0, d1, pd);
    pool_window(a, 1, oh, h0, h1, ph);
    pool_window(a, 2, ow, w0, w1, pw);
    const i64 count = (d1 > d0 ? d1 - d0 : 0) * (h1 > h0 ? h1 - h0 : 0) * (w1 > w0 ? w1 - w0 : 0);
    float v[V];
    if (count == 0) {  // a window entirely in (or past) the padding
#pragma unroll
      for (int k = 0; k < V; ++k) v[k] = 0.f;
    } else {
      PoolAcc acc[V];
      const T* xc = x + b * c.xs[0] + ch * c.xs[1];
      for (i64 id = d0; id < d1; ++id) {
        for (i64 ih = h0; ih < h1; ++ih) {
          const T* xrow = xc + id * c.xs[2] + ih * c.xs[3];
          for (i64 iw = w0; iw < w1; ++iw) {
            if constexpr (V > 1) {
              const uint4 u = *reinterpret_cast<const uint4*>(xrow + iw * c.xs[4]);
              const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
              for (int k = 0; k < V; ++k) acc[k].add(Tag::load(e[k]), want_max, want_avg);
            } else {
              acc[0].add(Tag::load(xrow[iw * c.xs[4]]), want_max, want_avg);
            }
          }
        }
      }
#pragma unroll
      for (int k = 0; k < V; ++k)
        v[k] = acc[k].value(a.type, a.exclude, a.blend, static_cast<double>(count), static_cast<double>(pd * ph * pw));
    }
    T* yo = y + b * c.ys[0] + ch * c.ys[1] + od * c.ys[2] + oh * c.ys[3] + ow * c.ys[4];
    if constexpr (kOutChannelsLast && V > 1) {
      uint4 u;
      T* e = reinterpret_cast<T*>(&u);
#pragma unroll
      for (int k = 0; k < V; ++k) e[k] = Tag::store(v[k]);
      *reinterpret_cast<uint4*>(yo) = u;
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) yo[k * c.ys[1]] = Tag::store(v[k]);
    }
  }
}

// The common case of pool_layout_kernel: two spatial dims, every offset below 2^31, x
// channels-last with 16-byte taps, float16 or bfloat16 (what convolutions store channels-last).
// pool2d_kernel's int window arithmetic and taps (unrolled for 2 x 2 and 3 x 3; KH = KW = 0:
// from the arguments); for a max pool (kMaxOnly) the average's sums are compiled out.
template <class Tag, int KH, int KW, bool kMaxOnly, bool kOutChannelsLast>
__global__ void __launch_bounds__(kThreads)
    pool2d_channels_last_kernel(const typename Tag::T* __restrict__ x, typename Tag::T* __restrict__ y, u32 n,
                                Divider<u32> G, Divider<u32> OW, Divider<u32> OH, Pool2dArgs a, int channels) {
  using T = typename Tag::T;
  constexpr int V = static_cast<int>(16 / sizeof(T));
  const bool want_max = kMaxOnly || a.type != static_cast<int>(PoolingType::kAVERAGE);
  const bool want_avg = !kMaxOnly && a.type != static_cast<int>(PoolingType::kMAX);
  const int kh = KH > 0 ? KH : a.k_h, kw = KW > 0 ? KW : a.k_w;
  const int oh_n = static_cast<int>(OH.d), ow_n = static_cast<int>(OW.d);
  GRID_STRIDE_LOOP(u32, i, n) {
    u32 r = i;
    int g, ow, oh;
    if constexpr (kOutChannelsLast) {
      g = static_cast<int>(take(r, G));
      ow = static_cast<int>(take(r, OW));
      oh = static_cast<int>(take(r, OH));
    } else {
      ow = static_cast<int>(take(r, OW));
      oh = static_cast<int>(take(r, OH));
      g = static_cast<int>(take(r, G));
    }
    const u32 b = r;
    const int ch = g * V;
    const int sh = oh * a.s_h - a.pre_h, sw = ow * a.s_w - a.pre_w;
    const int h0 = sh > 0 ? sh : 0, h1 = sh + kh < a.in_h ? sh + kh : a.in_h;
    const int w0 = sw > 0 ? sw : 0, w1 = sw + kw < a.in_w ? sw + kw : a.in_w;
    const int count = (h1 > h0 ? h1 - h0 : 0) * (w1 > w0 ? w1 - w0 : 0);
    float v[V];
    if (count == 0) {
#pragma unroll
      for (int k = 0; k < V; ++k) v[k] = 0.f;
    } else {
      PoolAcc acc[V];
      const T* xb = x + (static_cast<u32>(b * a.in_h) * static_cast<u32>(a.in_w)) * static_cast<u32>(channels) + static_cast<u32>(ch);
      auto tap = [&](int ih, int iw) {
        const uint4 u = *reinterpret_cast<const uint4*>(xb + static_cast<u32>(ih * a.in_w + iw) * static_cast<u32>(channels));
        const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
        for (int k = 0; k < V; ++k) acc[k].add(Tag::load(e[k]), want_max, want_avg);
      };
      for_each_tap_2d<KH, KW>(sh, sw, h0, h1, w0, w1, tap);
      const int ph = (sh + kh < a.lim_h ? sh + kh : a.lim_h) - sh, pw = (sw + kw < a.lim_w ? sw + kw : a.lim_w) - sw;
#pragma unroll
      for (int k = 0; k < V; ++k)
        v[k] = acc[k].value(a.type, a.exclude, a.blend, static_cast<double>(count),
                            static_cast<double>(ph) * static_cast<double>(pw));
    }
    if constexpr (kOutChannelsLast) {
      uint4 u;
      T* e = reinterpret_cast<T*>(&u);
#pragma unroll
      for (int k = 0; k < V; ++k) e[k] = Tag::store(v[k]);
      *reinterpret_cast<uint4*>(y + (static_cast<u32>(b * oh_n + oh) * static_cast<u32>(ow_n) + static_cast<u32>(ow)) *
                                        static_cast<u32>(channels) + static_cast<u32>(ch)) = u;
    } else {
      const u32 plane = static_cast<u32>(oh_n) * static_cast<u32>(ow_n);
      T* yo = y + (b * static_cast<u32>(channels) + static_cast<u32>(ch)) * plane + static_cast<u32>(oh * ow_n + ow);
#pragma unroll
      for (int k = 0; k < V; ++k) yo[k * plane] = Tag::store(v[k]);
    }
  }
}

}  // namespace

// ---- shuffle -------------------------------------------------------------------------------

void shuffle(const ShuffleParams& p, const TensorRef& x, const TensorRef& out, cudaStream_t stream) {
  const i64 n = checked_volume(x, "shuffle", "the input");
  if (checked_volume(out, "shuffle", "the output") != n || out.type != x.type)
    fail("shuffle: the output " + tn(out.type) + out.dims.str() + " differs in type or volume from the input " + tn(x.type) +
         x.dims.str());
  const int r1 = x.dims.rank(), r2 = out.dims.rank();
  if (!is_permutation(p.first_transpose, r1))
    fail("shuffle: first_transpose " + perm_text(p.first_transpose, r1) + " is not a permutation");
  if (!is_permutation(p.second_transpose, r2))
    fail("shuffle: second_transpose " + perm_text(p.second_transpose, r2) + " is not a permutation");
  // The reshaped tensor's dims follow from the output's: out.dims[j] = reshaped[second[j]].
  Dims reshaped = out.dims;
  for (int j = 0; j < r2; ++j) reshaped[p.second_transpose.order[static_cast<std::size_t>(j)]] = out.dims[j];
  if (!p.reshape_dims) {
    Dims first = x.dims;
    for (int i = 0; i < r1; ++i) first[i] = x.dims[p.first_transpose.order[static_cast<std::size_t>(i)]];
    if (!(first == reshaped))
      fail("shuffle: the output dims " + out.dims.str() + " do not follow from the input " + x.dims.str() +
           " and the transposes");
  }
  if (n == 0) return;
  const std::size_t es = element_size(x.type);
  // Output index -> (second transpose) linear index into the reshaped tensor, which is the
  // first-transposed tensor's linear index -> (first transpose) offset into x.
  const HostPlan second = transpose_plan(reshaped, p.second_transpose);
  const HostPlan first = transpose_plan(x.dims, p.first_transpose);
  const bool id1 = is_identity(first), id2 = is_identity(second);
  if (id1 && id2) {
    if (x.data != out.data) memcpy_async(out.data, x.data, n * static_cast<i64>(es), stream, "shuffle");
    return;
  }
  if (id1) plan_copy(x.data, out.data, n, es, 0, second, nullptr, n, stream, "shuffle");
  else if (id2) plan_copy(x.data, out.data, n, es, 0, first, nullptr, n, stream, "shuffle");
  else plan_copy(x.data, out.data, n, es, 0, first, &second, n, stream, "shuffle");
}

// ---- concatenation -------------------------------------------------------------------------

void concatenation(int axis, std::span<const TensorRef> inputs, const TensorRef& out, cudaStream_t stream) {
  const i64 n = checked_volume(out, "concatenation", "the output");
  if (inputs.empty()) fail("concatenation: needs at least one input");
  const int rank = out.dims.rank();
  if (axis < 0 || axis >= rank)
    fail("concatenation: axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  i64 total = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const TensorRef& t = inputs[i];
    const std::string name = "input " + std::to_string(i);
    checked_volume(t, "concatenation", name.c_str());
    if (t.type != out.type) fail("concatenation: " + name + " has type " + tn(t.type) + "; the output is " + tn(out.type));
    if (t.dims.rank() != rank)
      fail("concatenation: " + name + " has dims " + t.dims.str() + "; the output has " + out.dims.str());
    for (int d = 0; d < rank; ++d)
      if (d != axis && t.dims[d] != out.dims[d])
        fail("concatenation: " + name + " has dims " + t.dims.str() + "; dimension " + std::to_string(d) +
             " differs from the output " + out.dims.str() + " (only axis " + std::to_string(axis) + " may differ)");
    total += t.dims[axis];
  }
  if (total != out.dims[axis])
    fail("concatenation: the inputs add up to " + num(total) + " along axis " + std::to_string(axis) + "; the output has " +
         out.dims.str());
  if (n == 0) return;
  const std::size_t es = element_size(out.type);
  const i64 outer = prod(out.dims, 0, axis);
  const i64 after = prod(out.dims, axis + 1, rank);  // elements per index of the axis
  const i64 row = out.dims[axis] * after;            // output elements per outer index
  auto* dst = static_cast<unsigned char*>(out.data);
  i64 at = 0;  // the input's offset within an output row, in elements
  for (const TensorRef& t : inputs) {
    const i64 cols = t.dims[axis] * after;  // input elements per outer index
    if (cols == 0) continue;
    if (outer == 1) {
      memcpy_async(dst + at * static_cast<i64>(es), t.data, cols * static_cast<i64>(es), stream, "concatenation");
    } else {
      const int w = unit_bytes(es, {t.data, out.data}, [&](i64 k) { return cols % k == 0 && row % k == 0 && at % k == 0; });
      const i64 k = w / static_cast<i64>(es);
      const i64 units = outer * cols / k;
      by_width(w, "concatenation", [&](auto e) {
        using E = decltype(e);
        by_index(n / k < kSmall, [&](auto ix) {
          using I = decltype(ix);
          concat_kernel<E, I><<<blocks_for(units), kThreads, 0, stream>>>(
              static_cast<const E*>(t.data), static_cast<E*>(out.data), static_cast<I>(units), Divider<I>(cols / k),
              static_cast<I>(row / k), static_cast<I>(at / k));
        });
      });
      check_launch("concatenation");
    }
    at += cols;
  }
}

// ---- slice ---------------------------------------------------------------------------------

void slice(const SliceParams& p, const TensorRef& x, const TensorRef* fill, const TensorRef& out, cudaStream_t stream) {
  checked_volume(x, "slice", "the input");
  const i64 n = checked_volume(out, "slice", "the output");
  const int r = x.dims.rank();
  if (p.start.rank() != r || p.size.rank() != r || p.stride.rank() != r)
    fail("slice: start " + p.start.str() + ", size " + p.size.str() + " and stride " + p.stride.str() +
         " must each have the input's rank " + std::to_string(r));
  if (out.type != x.type || !(out.dims == p.size))
    fail("slice: the output is " + desc(out) + "; expected " + tn(x.type) + p.size.str());
  const void* fill_value = nullptr;
  if (fill != nullptr) {
    if (p.mode != SampleMode::kFILL) fail("slice: a fill value is only used by mode FILL");
    if (fill->type != x.type || checked_volume(*fill, "slice", "the fill value") != 1)
      fail("slice: the fill value is " + desc(*fill) + "; it must be one element of " + tn(x.type));
    fill_value = fill->data;
  }
  if (p.mode != SampleMode::kSTRICT_BOUNDS && p.mode != SampleMode::kWRAP && p.mode != SampleMode::kCLAMP &&
      p.mode != SampleMode::kFILL && p.mode != SampleMode::kREFLECT)
    fail("slice: unknown mode " + std::to_string(static_cast<int>(p.mode)));
  if (n == 0) return;
  // What the CPU refuses while building its tables (dims in order, the first bad index of each).
  i64 start[kMaxRank], step[kMaxRank];
  for (int d = 0; d < r; ++d) {
    start[d] = p.start[d];
    step[d] = p.stride[d];
    const i64 dim = x.dims[d];
    const i64 i = first_outside(start[d], step[d], p.size[d], dim);
    if (i < 0) continue;
    if (p.mode == SampleMode::kSTRICT_BOUNDS)
      fail("slice: dimension " + std::to_string(d) + " reads index " + num(start[d] + i * step[d]) +
           " of an input of size " + num(dim) + " in mode STRICT_BOUNDS");
    if (p.mode != SampleMode::kFILL && dim == 0)
      fail("slice: dimension " + std::to_string(d) + " of the input is empty; only FILL can read from it");
  }
  sample_copy(x, out, start, step, p.mode, fill_value, stream, "slice");
}

// ---- padding -------------------------------------------------------------------------------

void padding(const PaddingParams& p, const TensorRef& x, const TensorRef& out, cudaStream_t stream) {
  checked_volume(x, "padding", "the input");
  const i64 n = checked_volume(out, "padding", "the output");
  const int r = x.dims.rank(), np = p.pre_padding.rank();
  if (p.post_padding.rank() != np)
    fail("padding: pre_padding " + p.pre_padding.str() + " and post_padding " + p.post_padding.str() + " differ in rank");
  if (np > r) fail("padding: padding of rank " + std::to_string(np) + " exceeds the input's rank " + std::to_string(r));
  Dims expected = x.dims;
  for (int i = 0; i < np; ++i) {
    const int d = r - np + i;
    expected[d] = x.dims[d] + p.pre_padding[i] + p.post_padding[i];
    if (expected[d] < 0)
      fail("padding: " + p.pre_padding.str() + "/" + p.post_padding.str() + " crops dimension " + std::to_string(d) +
           " of " + x.dims.str() + " below zero");
  }
  if (out.type != x.type || !(out.dims == expected))
    fail("padding: the output is " + desc(out) + "; expected " + tn(x.type) + expected.str());
  if (n == 0) return;
  // A FILL slice with zero: output index o of dim d reads input index o - pre.
  i64 start[kMaxRank], step[kMaxRank];
  for (int d = 0; d < r; ++d) {
    start[d] = d >= r - np ? -p.pre_padding[d - (r - np)] : 0;
    step[d] = 1;
  }
  sample_copy(x, out, start, step, SampleMode::kFILL, nullptr, stream, "padding");
}

// ---- gather --------------------------------------------------------------------------------

void gather(const GatherParams& p, const TensorRef& data, const TensorRef& indices, const TensorRef& out,
            cudaStream_t stream) {
  checked_volume(data, "gather", "the data");
  const i64 ni = checked_volume(indices, "gather", "the indices");
  const i64 n = checked_volume(out, "gather", "the output");
  if (indices.type != DataType::kINT32 && indices.type != DataType::kINT64)
    fail("gather: the indices have type " + tn(indices.type) + "; indices are int32 or int64");
  if (out.type != data.type) fail("gather: the output has type " + tn(out.type) + "; the data has " + tn(data.type));
  const Dims& D = data.dims;
  const Dims& Ix = indices.dims;
  const int r = D.rank(), q = Ix.rank();
  i64 ds[kMaxRank];
  strides_of(D, ds);
  std::vector<i64> od;
  const std::size_t es = element_size(data.type);
  const bool idx64 = indices.type == DataType::kINT64;
  const i64 data_elems = D.volume();
  auto check_out = [&](const char* mode) {
    const Dims e{std::span<const i64>(od)};
    if (!(out.dims == e))
      fail("gather: the output has dims " + out.dims.str() + "; mode " + mode + " with data " + D.str() + " and indices " +
           Ix.str() + " gives " + e.str());
  };
  auto resolve_axis = [&]() {
    const int a = p.axis < 0 ? p.axis + r : p.axis;
    if (a < 0 || a >= r) fail("gather: axis " + std::to_string(p.axis) + " is out of range for data " + D.str());
    return a;
  };

  switch (p.mode) {
    case GatherMode::kDEFAULT: {
      const int axis = resolve_axis();
      const int nb = p.num_elementwise_dims;
      if (nb < 0 || nb > 1) fail("gather: num_elementwise_dims " + std::to_string(nb) + " must be 0 or 1 in mode DEFAULT");
      if (nb == 1 && (q < 1 || axis < 1)) fail("gather: num_elementwise_dims 1 needs indices of rank >= 1 and axis >= 1");
      if (nb == 1 && Ix[0] != D[0])
        fail("gather: with num_elementwise_dims 1 the indices " + Ix.str() + " and the data " + D.str() +
             " must share dimension 0");
      for (int i = 0; i < axis; ++i) od.push_back(D[i]);
      for (int i = nb; i < q; ++i) od.push_back(Ix[i]);
      for (int i = axis + 1; i < r; ++i) od.push_back(D[i]);
      check_out("DEFAULT");
      if (n == 0) return;
      const i64 outer = prod(D, 0, axis), dim = D[axis], inner = prod(D, axis + 1, r);
      const i64 nidx = prod(Ix, nb, q);
      const i64 outer2 = nb == 1 ? outer / D[0] : outer;  // outer indices per batch
      const int w = unit_bytes(es, {data.data, out.data}, [&](i64 k) { return inner % k == 0; });
      const i64 k = w / static_cast<i64>(es);
      const i64 units = n / k;
      const bool small = units < kSmall && data_elems < kSmall && ni < kSmall;
      by_width(w, "gather", [&](auto e) {
        using E = decltype(e);
        by_index(small, [&](auto ix) {
          using I = decltype(ix);
          GatherDefaultArgs<I> a;
          a.inner = Divider<I>(inner / k);
          a.nidx = Divider<I>(nidx);
          a.outer2 = Divider<I>(outer2);
          a.dim = dim;
          a.batched = nb == 1;
          a.idx64 = idx64;
          gather_default_kernel<E, I><<<blocks_for(units), kThreads, 0, stream>>>(
              static_cast<const E*>(data.data), indices.data, static_cast<E*>(out.data), static_cast<I>(units), a);
        });
      });
      check_launch("gather");
      return;
    }
    case GatherMode::kELEMENT: {
      const int axis = resolve_axis();
      if (q != r) fail("gather: the indices " + Ix.str() + " must have the data's rank in mode ELEMENT (data " + D.str() + ")");
      for (int i = 0; i < r; ++i)
        if (i != axis && Ix[i] > D[i])
          fail("gather: the indices " + Ix.str() + " exceed the data " + D.str() + " in dimension " + std::to_string(i));
      od = Ix.vec();
      check_out("ELEMENT");
      if (n == 0) return;
      HostPlan pos;  // the indices' dims over the data's strides, the axis left out
      for (int i = 0; i < r; ++i) push_dim(pos, Ix[i], i == axis ? 0 : ds[i]);
      finish(pos);
      const bool small = n < kSmall && data_elems < kSmall;
      by_width(static_cast<int>(es), "gather", [&](auto e) {
        using E = decltype(e);
        by_index(small, [&](auto ix) {
          using I = decltype(ix);
          GatherElementArgs<I> a;
          a.pos = device_plan<I>(pos);
          a.axis_stride = static_cast<I>(ds[axis]);
          a.dim = D[axis];
          a.idx64 = idx64;
          gather_element_kernel<E, I><<<blocks_for(n), kThreads, 0, stream>>>(
              static_cast<const E*>(data.data), indices.data, static_cast<E*>(out.data), static_cast<I>(n), a);
        });
      });
      check_launch("gather");
      return;
    }
    case GatherMode::kND: {
      const int nb = p.num_elementwise_dims;
      if (q < 1) fail("gather: the indices must have rank >= 1 in mode ND");
      const i64 last = Ix[q - 1];
      if (nb < 0 || nb >= q || nb + last > r)
        fail("gather: indices " + Ix.str() + " with num_elementwise_dims " + std::to_string(nb) + " do not fit data " + D.str());
      for (int i = 0; i < nb; ++i)
        if (Ix[i] != D[i])
          fail("gather: batch dimension " + std::to_string(i) + " differs between data " + D.str() + " and indices " + Ix.str());
      for (int i = 0; i < q - 1; ++i) od.push_back(Ix[i]);
      const int after = nb + static_cast<int>(last);
      for (int i = after; i < r; ++i) od.push_back(D[i]);
      check_out("ND");
      if (n == 0) return;
      const i64 per_batch = prod(Ix, nb, q - 1);
      const i64 batch_stride = prod(D, nb, r);
      const i64 slice_elems = prod(D, after, r);
      const int w = unit_bytes(es, {data.data, out.data}, [&](i64 k) { return slice_elems % k == 0; });
      const i64 k = w / static_cast<i64>(es);
      const i64 units = n / k;
      const bool small = units < kSmall && data_elems < kSmall && ni < kSmall;
      by_width(w, "gather", [&](auto e) {
        using E = decltype(e);
        by_index(small, [&](auto ix) {
          using I = decltype(ix);
          GatherNdArgs<I> a;
          a.slice = Divider<I>(slice_elems / k);
          a.per_batch = Divider<I>(std::max<i64>(1, per_batch));
          a.batch_stride = static_cast<I>(batch_stride / k);
          a.last = static_cast<int>(last);
          for (int m = 0; m < a.last; ++m) {
            a.dim[m] = D[nb + m];
            a.stride[m] = static_cast<I>(ds[nb + m] / k);
          }
          a.idx64 = idx64;
          gather_nd_kernel<E, I><<<blocks_for(units), kThreads, 0, stream>>>(
              static_cast<const E*>(data.data), indices.data, static_cast<E*>(out.data), static_cast<I>(units), a);
        });
      });
      check_launch("gather");
      return;
    }
    default: fail("gather: unknown mode " + std::to_string(static_cast<int>(p.mode)));
  }
}

// ---- resize --------------------------------------------------------------------------------

void resize(const ResizeParams& p, const TensorRef& x, const TensorRef& out, cudaStream_t stream) {
  checked_volume(x, "resize", "the input");
  const i64 n = checked_volume(out, "resize", "the output");
  const int r = x.dims.rank();
  if (p.output_dims && !p.scales.empty()) fail("resize: set either output dims or scales, not both");
  Dims expected = x.dims;
  if (p.output_dims) {
    expected = *p.output_dims;
  } else {
    if (static_cast<int>(p.scales.size()) != r)
      fail("resize: " + std::to_string(p.scales.size()) + " scales for an input of rank " + std::to_string(r));
    for (int d = 0; d < r; ++d) {
      const float s = p.scales[static_cast<std::size_t>(d)];
      if (!(s > 0.f)) fail("resize: scales must be > 0");
      expected[d] = static_cast<i64>(std::floor(static_cast<double>(x.dims[d]) * s));
    }
  }
  if (out.type != x.type || !(out.dims == expected))
    fail("resize: the output is " + desc(out) + "; expected " + tn(x.type) + expected.str());
  if (p.mode != InterpolationMode::kNEAREST && p.mode != InterpolationMode::kLINEAR && p.mode != InterpolationMode::kCUBIC)
    fail("resize: unknown interpolation mode " + std::to_string(static_cast<int>(p.mode)));
  if (p.mode != InterpolationMode::kNEAREST && !is_float_type(x.type))
    fail("resize: linear and cubic resize take float32, float16 or bfloat16, not " + tn(x.type));
  if (n == 0) return;
  for (int d = 0; d < r; ++d)
    if (x.dims[d] == 0) fail("resize: dimension " + std::to_string(d) + " of the input " + x.dims.str() + " is empty");
  const bool nearest = p.mode == InterpolationMode::kNEAREST;
  const bool upper = p.selector_for_single_pixel == ResizeSelector::kUPPER;
  // What the CPU refuses when it computes the first coordinate of each dim.
  const bool rct_ok = p.coordinate_transformation == RCT::kALIGN_CORNERS ||
                      p.coordinate_transformation == RCT::kASYMMETRIC || p.coordinate_transformation == RCT::kHALF_PIXEL;
  const int rounding = static_cast<int>(p.nearest_rounding);
  for (int d = 0; d < r; ++d) {
    if (!rct_ok && !(out.dims[d] == 1 && upper))
      fail("resize: unknown coordinate transformation " + std::to_string(static_cast<int>(p.coordinate_transformation)));
    if (nearest && (rounding < 0 || rounding > static_cast<int>(ResizeRoundMode::kCEIL)))
      fail("resize: unknown nearest rounding " + std::to_string(rounding));
  }
  const std::size_t es = element_size(x.type);
  if (r == 0) {  // one element
    memcpy_async(out.data, x.data, static_cast<i64>(es), stream, "resize");
    return;
  }
  ResizeDims a;
  a.rank = r;
  a.rct = static_cast<int>(p.coordinate_transformation);
  a.rounding = rounding;
  a.upper = upper;
  a.given = !p.scales.empty();
  a.linear = p.mode == InterpolationMode::kLINEAR;
  a.cubic = static_cast<double>(p.cubic_coeff);
  strides_of(x.dims, a.stride);
  for (int d = 0; d < r; ++d) {
    a.in[d] = x.dims[d];
    a.out[d] = out.dims[d];
    a.scale[d] = a.given ? static_cast<double>(p.scales[static_cast<std::size_t>(d)]) : 0.0;
  }
  // Per dim, on the host with the device's arithmetic: dims that map every o to input index o
  // (taps 0: no arithmetic on the device), and linear/cubic dims whose every sample sits on an
  // input element (one tap, as the CPU's resize_taps decides).
  for (int d = 0; d < r; ++d) {
    const i64 in = a.in[d], on = a.out[d];
    bool identity = true, integral = true;
    for (i64 o = 0; o < on && (nearest ? identity : integral); ++o) {
      if (nearest) {
        identity = nearest_index(a.rounding, resize_coordinate(a, d, o), in) == o;
      } else {
        double v = resize_coordinate(a, d, o);
        if (a.linear) v = clamp_coordinate(v, in);
        integral = std::floor(v) == v && v >= 0.0 && v <= static_cast<double>(in - 1);
        identity = identity && v == static_cast<double>(o);
      }
    }
    if (nearest) a.taps[d] = identity ? 0 : 1;
    else a.taps[d] = integral ? (identity ? 0 : 1) : a.linear ? 2 : 4;
  }
  const bool small = n < kSmall;
  if (nearest) {
    by_width(static_cast<int>(es), "resize", [&](auto e) {
      using E = decltype(e);
      by_index(small, [&](auto ix) {
        using I = decltype(ix);
        OutDims<I> od;
        for (int d = 0; d < r; ++d) od.d[d] = Divider<I>(a.out[d]);
        resize_nearest_kernel<E, I><<<blocks_for(n), kThreads, 0, stream>>>(
            static_cast<const E*>(x.data), static_cast<E*>(out.data), static_cast<I>(n), a, od);
      });
    });
    check_launch("resize");
    return;
  }
  by_float(x.type, [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::T;
    by_index(small, [&](auto ix) {
      using I = decltype(ix);
      OutDims<I> od;
      for (int d = 0; d < r; ++d) od.d[d] = Divider<I>(a.out[d]);
      const auto* xs = static_cast<const T*>(x.data);
      auto* ys = static_cast<T*>(out.data);
      const unsigned blocks = blocks_for(n);
      switch (a.taps[r - 1]) {
        case 0:
        case 1: resize_interp_kernel<Tag, I, 1><<<blocks, kThreads, 0, stream>>>(xs, ys, static_cast<I>(n), a, od); break;
        case 2: resize_interp_kernel<Tag, I, 2><<<blocks, kThreads, 0, stream>>>(xs, ys, static_cast<I>(n), a, od); break;
        default: resize_interp_kernel<Tag, I, 4><<<blocks, kThreads, 0, stream>>>(xs, ys, static_cast<I>(n), a, od); break;
      }
    });
  });
  check_launch("resize");
}

// ---- pooling -------------------------------------------------------------------------------

namespace {

// Strides in elements along n, c, d, h, w of a tensor of n images, c channels and spatial dims
// sp (normalized to 3), packed or channels-last.
void layout_strides(i64 c, const i64* sp, bool channels_last, i64* st) {
  const i64 plane = sp[0] * sp[1] * sp[2];
  st[0] = c * plane;
  st[1] = channels_last ? 1 : plane;
  const i64 unit = channels_last ? c : 1;  // between neighbouring positions
  st[4] = unit;
  st[3] = unit * sp[2];
  st[2] = unit * sp[1] * sp[2];
}

// pooling() where x or out is stored channels-last (pool_layout_kernel).
// `flat`: the same geometry in int (two spatial dims whose offsets fit), or null.
void pool_layouts(const PoolArgs& a, const i64* out_sp, const Pool2dArgs* flat, const TensorRef& x, const TensorRef& out,
                  bool x_cl, bool out_cl, cudaStream_t stream) {
  PoolLayoutArgs c;
  c.a = a;
  const i64 channels = x.dims[1];
  layout_strides(channels, a.in, x_cl, c.xs);
  layout_strides(channels, out_sp, out_cl, c.ys);
  const int es = static_cast<int>(element_size(x.type));
  const int wide = 16 / es;
  auto aligned16 = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  const bool vector = x_cl && channels % wide == 0 && aligned16(x.data) && (!out_cl || aligned16(out.data));
  const i64 groups = vector ? channels / wide : channels;
  const i64 threads = x.dims[0] * groups * out_sp[0] * out_sp[1] * out_sp[2];
  if (flat && vector && x.type != DataType::kFLOAT) {
    const bool max_only = a.type == static_cast<int>(PoolingType::kMAX);
    const auto n = static_cast<u32>(threads);
    const int c32 = static_cast<int>(channels);
    auto pick = [&](auto tag, auto kh, auto kw) {
      using Tag = decltype(tag);
      using T = typename Tag::T;
      constexpr int KH = decltype(kh)::value, KW = decltype(kw)::value;
      auto launch = [&](auto kernel) {
        kernel<<<blocks_for(threads), kThreads, 0, stream>>>(static_cast<const T*>(x.data), static_cast<T*>(out.data), n,
                                                             Divider<u32>(groups), Divider<u32>(out_sp[2]),
                                                             Divider<u32>(out_sp[1]), *flat, c32);
      };
      if (max_only && out_cl) launch(pool2d_channels_last_kernel<Tag, KH, KW, true, true>);
      else if (max_only) launch(pool2d_channels_last_kernel<Tag, KH, KW, true, false>);
      else if (out_cl) launch(pool2d_channels_last_kernel<Tag, KH, KW, false, true>);
      else launch(pool2d_channels_last_kernel<Tag, KH, KW, false, false>);
    };
    auto by_window = [&](auto tag) {
      if (flat->k_h == 3 && flat->k_w == 3) pick(tag, std::integral_constant<int, 3>{}, std::integral_constant<int, 3>{});
      else if (flat->k_h == 2 && flat->k_w == 2) pick(tag, std::integral_constant<int, 2>{}, std::integral_constant<int, 2>{});
      else pick(tag, std::integral_constant<int, 0>{}, std::integral_constant<int, 0>{});
    };
    if (x.type == DataType::kHALF) by_window(dev::F16{});
    else by_window(dev::BF16{});
    check_launch("pooling");
    return;
  }
  const bool small = x.dims.volume() < kSmall && out.dims.volume() < kSmall;
  by_float(x.type, [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::T;
    constexpr int W = static_cast<int>(16 / sizeof(T));
    by_index(small, [&](auto ix) {
      using I = decltype(ix);
      auto launch = [&](auto kernel) {
        kernel<<<blocks_for(threads), kThreads, 0, stream>>>(static_cast<const T*>(x.data), static_cast<T*>(out.data),
                                                             static_cast<I>(threads), Divider<I>(groups),
                                                             Divider<I>(out_sp[2]), Divider<I>(out_sp[1]),
                                                             Divider<I>(out_sp[0]), c);
      };
      if (vector && out_cl) launch(pool_layout_kernel<Tag, I, W, true>);
      else if (vector) launch(pool_layout_kernel<Tag, I, W, false>);
      else if (out_cl) launch(pool_layout_kernel<Tag, I, 1, true>);
      else launch(pool_layout_kernel<Tag, I, 1, false>);
    });
  });
  check_launch("pooling");
}

}  // namespace

void pooling(const PoolingParams& p, const TensorRef& x, const TensorRef& out, cudaStream_t stream, bool x_channels_last,
             bool out_channels_last) {
  checked_volume(x, "pooling", "input 0");
  const i64 n = checked_volume(out, "pooling", "the output");
  if (!is_float_type(x.type))
    fail("pooling: input 0 has type " + tn(x.type) + "; it takes float32, float16 or bfloat16");
  if (x.dims.rank() < 3 || x.dims.rank() != p.window.rank() + 2)
    fail("pooling: input dims " + x.dims.str() + " do not match window " + p.window.str());
  if (p.type != PoolingType::kMAX && p.type != PoolingType::kAVERAGE && p.type != PoolingType::kMAX_AVERAGE_BLEND)
    fail("pooling: unknown pooling type " + std::to_string(static_cast<int>(p.type)));
  // The output against the layer's shape rules (graph inference), as the CPU checks it.
  {
    std::vector<graph::TensorDesc> res;
    try {
      const std::vector<graph::TensorDesc> in{{x.type, x.dims}};
      const std::vector<graph::InputFacts> facts(in.size(), graph::InputFacts{true, std::nullopt});
      res = graph::infer(LayerParams{p}, in, facts);
    } catch (const InvalidArgument& e) {
      fail(std::string("pooling: ") + e.what());
    }
    if (res.size() != 1 || res[0].type != out.type || !(res[0].dims == out.dims))
      fail("pooling: the output is " + tn(out.type) + out.dims.str() + "; expected " +
           (res.empty() ? std::string("?") : tn(res[0].type) + res[0].dims.str()));
  }
  if (n == 0) return;
  // Geometry normalized to 3 spatial dims (missing leading ones: size 1, window 1, stride 1).
  const int ns = p.window.rank(), off = 3 - ns;
  const Dims eff = graph::window_pre_padding(x.dims, p.window, p.stride, p.pre_padding, p.post_padding, Dims{},
                                             p.padding_mode, false);
  const bool same = p.padding_mode == PaddingMode::kSAME_UPPER || p.padding_mode == PaddingMode::kSAME_LOWER;
  PoolArgs a;
  i64 out_sp[3];
  for (int i = 0; i < 3; ++i) {
    if (i < off) {
      a.in[i] = a.k[i] = a.s[i] = 1;
      a.pre[i] = 0;
      a.lim[i] = same ? INT64_MAX / 4 : 1;
      out_sp[i] = 1;
      continue;
    }
    const int j = i - off;
    a.in[i] = x.dims[2 + j];
    a.k[i] = p.window[j];
    a.s[i] = p.stride.rank() == 0 ? 1 : p.stride[j];
    a.pre[i] = eff[j];
    const i64 post = p.post_padding.rank() == 0 ? 0 : p.post_padding[j];
    // The padded input ends at in + post (explicit modes; EXPLICIT_ROUND_UP windows may reach
    // past it and are clipped there). SAME windows never reach past their computed padding.
    a.lim[i] = same ? INT64_MAX / 4 : a.in[i] + post;
    out_sp[i] = out.dims[2 + j];
  }
  a.in_sp = a.in[0] * a.in[1] * a.in[2];
  a.type = static_cast<int>(p.type);
  a.exclude = p.average_count_excludes_padding;
  a.blend = p.type == PoolingType::kMAX_AVERAGE_BLEND ? static_cast<double>(p.blend_factor) : 0.0;
  // 2-D windows over an input whose offsets, coordinates and products of them fit in int.
  const i64 in_volume = x.dims.volume();
  const bool flat = a.in[0] == 1 && a.k[0] == 1 && out_sp[0] == 1;
  bool fits = flat && in_volume < kSmall && n < kSmall;
  for (int i = 1; i < 3 && fits; ++i)
    fits = a.in[i] < (i64{1} << 20) && a.k[i] < (i64{1} << 20) && a.s[i] < (i64{1} << 20) &&
           a.pre[i] < (i64{1} << 20) && a.pre[i] > -(i64{1} << 20) && out_sp[i] * a.s[i] < (i64{1} << 29);
  Pool2dArgs b;
  if (fits) {
    b.in_h = static_cast<int>(a.in[1]), b.in_w = static_cast<int>(a.in[2]);
    b.k_h = static_cast<int>(a.k[1]), b.k_w = static_cast<int>(a.k[2]);
    b.s_h = static_cast<int>(a.s[1]), b.s_w = static_cast<int>(a.s[2]);
    b.pre_h = static_cast<int>(a.pre[1]), b.pre_w = static_cast<int>(a.pre[2]);
    constexpr i64 kFar = i64{1} << 30;  // beyond any window: a SAME mode's unbounded padding
    b.lim_h = static_cast<int>(std::min(a.lim[1], kFar)), b.lim_w = static_cast<int>(std::min(a.lim[2], kFar));
    b.type = a.type;
    b.exclude = a.exclude;
    b.blend = a.blend;
  }
  if (x_channels_last || out_channels_last) {
    pool_layouts(a, out_sp, fits ? &b : nullptr, x, out, x_channels_last, out_channels_last, stream);
    return;
  }
  const bool small = n < kSmall;
  if (fits) {
    by_float(x.type, [&](auto tag) {
      using Tag = decltype(tag);
      using T = typename Tag::T;
      auto launch = [&](auto kernel) {
        kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x.data), static_cast<T*>(out.data),
                                                       static_cast<u32>(n), Divider<u32>(out_sp[2]),
                                                       Divider<u32>(out_sp[1]), b);
      };
      if (b.k_h == 3 && b.k_w == 3) launch(pool2d_kernel<Tag, 3, 3>);
      else if (b.k_h == 2 && b.k_w == 2) launch(pool2d_kernel<Tag, 2, 2>);
      else launch(pool2d_kernel<Tag, 0, 0>);
    });
    check_launch("pooling");
    return;
  }
  by_float(x.type, [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::T;
    by_index(small, [&](auto ix) {
      using I = decltype(ix);
      pool_kernel<Tag, I><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x.data), static_cast<T*>(out.data),
                                                                  static_cast<I>(n), Divider<I>(out_sp[2]),
                                                                  Divider<I>(out_sp[1]), Divider<I>(out_sp[0]), a);
    });
  });
  check_launch("pooling");
}

}  // namespace tensoracle::cuda
