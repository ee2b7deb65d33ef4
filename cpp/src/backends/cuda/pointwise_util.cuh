// Internal to the CUDA backend: what its pointwise kernels share (ops/activation.cu, cast,
// elementwise, quantize, select, unary, matrix_multiply; channels_last.cu): integer and bool
// storage tags, launch geometry, broadcast plans, the map over every element and the activation
// functors. Every kernel loads each stored value as its compute type (float for the float types,
// the integer itself for int32/int64, bool for bool), applies the operation and rounds the
// result to the output type once, when stored. Broadcasting operands (elementwise, select) are
// walked through a host-side plan that drops size-1 dims and merges dims across which every
// operand stays contiguous, so equal shapes and scalars become one dim (no index math) and a
// bias row two. Operations that are exact on the CPU (integer arithmetic, comparisons, min/max,
// division, square root, casts, rounding, quantize) are bit-exact here: they use the IEEE
// round-to-nearest intrinsics (__fdiv_rn, __fsqrt_rn, ...) and never a contracted multiply-add;
// transcendentals use CUDA's float math functions and may differ from the CPU by a few ulp.
// Host-side checks throw InvalidArgument("[cuda] <kernel>: ...") as the CPU kernels throw
// InvalidArgument("[cpu] ..."), before anything is launched; all work is asynchronous on the
// given stream.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "backends/common/broadcast.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"

namespace tensoracle::cuda::pointwise {

using dev::BF16;
using dev::F16;
using dev::F32;
using dev::FP8;
using dev::i64;
using dev::checked_volume;
using dev::desc;
using dev::fail;
using dev::tn;
using dev::kThreads;
using dev::blocks_for;
using dev::check_launch;
using dev::allow_dependent_launch;
using A = ActivationType;

// ---- storage tags beyond device_util's float ones ----------------------------------------

// int32/int64 (and int8/uint8 where an op takes them): the integer itself.
template <class I>
struct IntT {
  using T = I;
  __device__ static I load(T v) { return v; }
  __device__ static T store(I v) { return v; }
};
// bool: one byte; any non-zero byte reads as true, stores write 0 or 1.
struct BoolT {
  using T = std::uint8_t;
  __device__ static bool load(T v) { return v != 0; }
  __device__ static T store(bool b) { return b ? 1 : 0; }
};

// ---- launch geometry ---------------------------------------------------------------------

// The first index and the step of a grid-stride loop.
__device__ inline i64 first_index() { return blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; }
__device__ inline i64 grid_step() { return static_cast<i64>(gridDim.x) * blockDim.x; }

// q = a / b and r = a % b for a >= 0, b > 0; in 32 bits when both fit (64-bit division is
// emulated on the GPU and several times slower).
__device__ inline void divmod(i64 a, i64 b, i64& q, i64& r) {
  if (((a | b) >> 32) == 0) {
    const auto q32 = static_cast<std::uint32_t>(a) / static_cast<std::uint32_t>(b);
    q = q32;
    r = a - static_cast<i64>(q32) * b;
  } else {
    q = a / b;
    r = a - q * b;
  }
}

// ---- broadcast plans ---------------------------------------------------------------------

// K operands' element strides (0 on broadcast dims) over the output's dims, merged where every
// operand stays contiguous (backends/common/broadcast.h, the CPU's too). Always rank >= 1.
template <int K>
using Plan = backends::common::BroadcastPlan<K>;

// `ins` must have out's rank and broadcast to it (checked by the caller).
template <int K>
Plan<K> make_plan(const Dims* const (&ins)[K], const Dims& out) {
  return backends::common::broadcast_plan(ins, out);
}

// The K operands' offsets of the `linear`-th output element (rank >= 2 plans; the outermost
// dim needs no division since linear < volume).
template <int K>
__device__ inline void plan_offsets(i64 linear, const Plan<K>& p, i64 (&off)[K]) {
  for (int k = 0; k < K; ++k) off[k] = 0;
  for (int i = p.rank - 1; i > 0; --i) {
    i64 q, r;
    divmod(linear, p.d[i], q, r);
    for (int k = 0; k < K; ++k) off[k] += r * p.s[k][i];
    linear = q;
  }
  for (int k = 0; k < K; ++k) off[k] += linear * p.s[k][0];
}

// ---- a map over every element ------------------------------------------------------------

// A functor with a bind() member is bound once per thread (reading a scale from the device, a
// reciprocal) and the result applied to each element; other functors apply as they are.
template <class F>
__device__ inline auto bound(const F& f) {
  if constexpr (requires { f.bind(); }) return f.bind();
  else return f;
}

// o[i] = f(x[i]) on stored values; o may alias x (each thread reads its element first).
template <class TI, class TO, class F>
__global__ void map_kernel(const TI* x, TO* o, i64 n, F f) {
  allow_dependent_launch();  // (the fp8 GEMM after a quantize loads its weights meanwhile)
  const auto g = bound(f);
  for (i64 i = first_index(); i < n; i += grid_step()) o[i] = g(x[i]);
}

// f on compute values: In::load, f, Out::store.
template <class In, class Out, class F>
struct Lifted {
  F f;
  __device__ typename Out::T operator()(typename In::T v) const { return Out::store(f(In::load(v))); }
};

// V elements of T as one aligned load or store (16 bytes for the 2- and 4-byte types).
template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// map_kernel over packs of V elements: o[i] = f(x[i]) for n = V * packs elements.
template <int V, class TI, class TO, class F>
__global__ void map_pack_kernel(const Pack<TI, V>* x, Pack<TO, V>* o, i64 packs, F f) {
  allow_dependent_launch();
  const auto g = bound(f);
  for (i64 i = first_index(); i < packs; i += grid_step()) {
    const Pack<TI, V> a = x[i];
    Pack<TO, V> b;
#pragma unroll
    for (int k = 0; k < V; ++k) b.v[k] = g(a.v[k]);
    o[i] = b;
  }
}

// o[i] = f(x[i]); 16-byte loads where both buffers allow (aligned, a whole number of packs).
template <class TI, class TO, class F>
void map(const TI* x, TO* o, i64 n, F f, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(TI) < 2 ? 2 : 16 / sizeof(TI) > 8 ? 8 : static_cast<int>(16 / sizeof(TI));
  const auto aligned = [](const void* p, std::size_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; };
  if (n % V == 0 && aligned(x, sizeof(Pack<TI, V>)) && aligned(o, sizeof(Pack<TO, V>))) {
    map_pack_kernel<V><<<blocks_for(n / V), kThreads, 0, stream>>>(reinterpret_cast<const Pack<TI, V>*>(x),
                                                                   reinterpret_cast<Pack<TO, V>*>(o), n / V, f);
  } else {
    map_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, o, n, f);
  }
}

template <class In, class Out, class F>
void launch_map(const void* x, void* out, i64 n, F f, cudaStream_t stream, const char* kernel) {
  map(static_cast<const typename In::T*>(x), static_cast<typename Out::T*>(out), n, Lifted<In, Out, F>{f}, stream);
  check_launch(kernel);
}

// ---- activation -------------------------------------------------------------------------

// TensorRT's formulas, in float, written as the CPU writes them (activation_typed). NaN in
// gives NaN out for every activation. Products that feed a sum use __fmul_rn/__fadd_rn so
// that nvcc does not contract them into a fused multiply-add the CPU does not do (exact for
// HARD_SIGMOID; closer for the transcendental ones).
template <A type>
struct Activation {
  float al, be;
  __device__ float operator()(float v) const {
    if constexpr (type == A::kRELU) return (v > 0.f || v != v) ? v : 0.f;
    else if constexpr (type == A::kSIGMOID) return __fdiv_rn(1.f, 1.f + expf(-v));
    else if constexpr (type == A::kTANH) return tanhf(v);
    else if constexpr (type == A::kLEAKY_RELU) return v >= 0.f ? v : al * v;
    else if constexpr (type == A::kELU) return v >= 0.f ? v : al * expm1f(v);
    else if constexpr (type == A::kSELU) return be * (v > 0.f ? v : al * expm1f(v));
    else if constexpr (type == A::kSOFTSIGN) return __fdiv_rn(v, 1.f + fabsf(v));
    else if constexpr (type == A::kSOFTPLUS) {
      // alpha * log(exp(t) + 1) with t = beta * x, as log1p(exp(-|t|)) + max(t, 0): no overflow.
      const float t = __fmul_rn(be, v);
      return al * __fadd_rn(log1pf(expf(-fabsf(t))), t < 0.f ? 0.f : t);
    } else if constexpr (type == A::kCLIP) {  // max(alpha, min(beta, x)), also when alpha > beta
      const float m = v > be ? be : v;
      return m < al ? al : m;
    } else if constexpr (type == A::kHARD_SIGMOID) {
      const float t = __fadd_rn(__fmul_rn(al, v), be);
      const float m = t > 1.f ? 1.f : t;
      return m < 0.f ? 0.f : m;
    } else if constexpr (type == A::kSCALED_TANH) return al * tanhf(be * v);
    else if constexpr (type == A::kTHRESHOLDED_RELU) return (v > al || v != v) ? v : 0.f;
    else if constexpr (type == A::kGELU_ERF) return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
    else {
      static_assert(type == A::kGELU_TANH);
      const float cube = __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, v), v), v);
      const float u = __fmul_rn(0.79788456080286536f, __fadd_rn(v, cube));  // sqrt(2/pi)
      return 0.5f * v * (1.f + tanhf(u));
    }
  }
};

// Calls f(std::integral_constant<A, type>{}) for the activation type chosen at run time.
template <class F>
void with_activation(A type, F&& f) {
  using std::integral_constant;
  switch (type) {
    case A::kRELU: f(integral_constant<A, A::kRELU>{}); break;
    case A::kSIGMOID: f(integral_constant<A, A::kSIGMOID>{}); break;
    case A::kTANH: f(integral_constant<A, A::kTANH>{}); break;
    case A::kLEAKY_RELU: f(integral_constant<A, A::kLEAKY_RELU>{}); break;
    case A::kELU: f(integral_constant<A, A::kELU>{}); break;
    case A::kSELU: f(integral_constant<A, A::kSELU>{}); break;
    case A::kSOFTSIGN: f(integral_constant<A, A::kSOFTSIGN>{}); break;
    case A::kSOFTPLUS: f(integral_constant<A, A::kSOFTPLUS>{}); break;
    case A::kCLIP: f(integral_constant<A, A::kCLIP>{}); break;
    case A::kHARD_SIGMOID: f(integral_constant<A, A::kHARD_SIGMOID>{}); break;
    case A::kSCALED_TANH: f(integral_constant<A, A::kSCALED_TANH>{}); break;
    case A::kTHRESHOLDED_RELU: f(integral_constant<A, A::kTHRESHOLDED_RELU>{}); break;
    case A::kGELU_ERF: f(integral_constant<A, A::kGELU_ERF>{}); break;
    case A::kGELU_TANH: f(integral_constant<A, A::kGELU_TANH>{}); break;
    default: fail("activation: unknown activation type " + std::to_string(static_cast<int>(type)));
  }
}

// y = activation(y + bias) per plane of P elements (bias[plane % C]), in place: a block walks a
// plane at a time, kVec elements per access when every plane starts 16-byte aligned.
template <class Tag, A type>
struct BiasActivation {
  Activation<type> act;
  bool bias, activate;
  __device__ typename Tag::T operator()(typename Tag::T v, float b) const {
    float t = Tag::load(v);
    if (bias) t = Tag::load(Tag::store(__fadd_rn(t, b)));
    return Tag::store(activate ? act(t) : t);
  }
};

// The widest vector (16, 8, 4 bytes or one element) that divides every one of `lengths`.
template <class T>
int vector_width(std::initializer_list<i64> lengths) {
  for (int v = static_cast<int>(16 / sizeof(T)); v > 1; v /= 2)
    if (std::all_of(lengths.begin(), lengths.end(), [&](i64 n) { return n % v == 0; })) return v;
  return 1;
}

// Calls f(std::integral_constant<int, V>) for V = vector_width's result.
template <class T, class F>
void by_width(int v, F&& f) {
  switch (v) {
    case 8: if constexpr (sizeof(T) == 2) { f(std::integral_constant<int, 8>{}); return; } break;
    case 4: f(std::integral_constant<int, 4>{}); return;
    case 2: f(std::integral_constant<int, 2>{}); return;
    default: break;
  }
  f(std::integral_constant<int, 1>{});
}

}  // namespace tensoracle::cuda::pointwise
