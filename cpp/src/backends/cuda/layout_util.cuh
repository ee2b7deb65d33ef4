// Internal to the CUDA backend: what its data-movement kernels share (ops/concatenation.cu,
// gather, padding, pooling, resize, shuffle, slice): launch helpers by element width, float type
// and index type, division by launch-time constants, plans from an output linear index to an
// input offset (plan_copy, tiled transposes), the sampling copy of slice and padding, and the
// rounded double arithmetic resize and pooling share. Defined in layout_util.cu where not
// templates or inline.
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
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"

namespace tensoracle::cuda::layout {

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

using dev::is_float_type;

// Row-major strides, in elements; the product of d[from, to) (backends/common/checks.h).
using backends::common::prod;
using backends::common::strides_of;

void memcpy_async(void* dst, const void* src, i64 bytes, cudaStream_t stream, const char* kernel);

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
void push_dim(HostPlan& p, i64 n, i64 stride);

// After the last push_dim: a plan of one element gets one dim of size 1 (rank >= 1 always).
void finish(HostPlan& p);

// Reads its input in order: one contiguous dim.
bool is_identity(const HostPlan& p);

// Whether the plan can move units of k elements: contiguous innermost dim of a multiple of k
// elements, every other stride a multiple of k.
bool widenable(const HostPlan& p, i64 k);

void widen(HostPlan& p, i64 k);

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

// Launches tiled_transpose_kernel when the (unwidened) plan suits it: its innermost dim is
// strided in the input, some other dim has input stride 1, and both hold at least a quarter
// tile. Returns false (nothing launched) otherwise.
bool tiled_transpose(const void* x, void* y, std::size_t es, i64 base, const HostPlan& p, cudaStream_t stream,
                     const char* kernel);

// Launches plan_copy_kernel over n elements of `es` bytes: `outer` (and `inner` when two) are
// widened together when they allow it. `in_elems` bounds the input offsets. A single plan that
// cannot be widened goes through tiled_transpose when it suits it.
void plan_copy(const void* x, void* y, i64 n, std::size_t es, i64 base, HostPlan outer, const HostPlan* inner,
               i64 in_elems, cudaStream_t stream, const char* kernel);

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

// The first i in [0, size) whose index start + i * step lies outside [0, dim), or -1.
i64 first_outside(i64 start, i64 step, i64 size, i64 dim);

// out[o] = x[start + o * step] per dim, under `mode` where that leaves the input (the caller has
// refused what the CPU refuses: STRICT_BOUNDS out of range, an empty dim outside FILL). `fill`
// (device, one element; null: zero) is FILL's value.
void sample_copy(const TensorRef& x, const TensorRef& out, const i64* start, const i64* step, SampleMode mode,
                 const void* fill, cudaStream_t stream, const char* kernel);

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

}  // namespace tensoracle::cuda::layout
