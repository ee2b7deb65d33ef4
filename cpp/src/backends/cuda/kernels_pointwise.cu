// The CUDA backend's pointwise kernels: elementwise, activation, cast, unary, quantize,
// dequantize, select and copy (kernels.h), with exactly the semantics of the CPU kernels
// (backends/cpu/kernels_pointwise.cpp, kernels_reduce.cpp for unary, kernels_index.cpp for
// select). Every kernel loads each stored value as its compute type (float for the float types,
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
#include <algorithm>
#include <cstdint>
#include <initializer_list>
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
using E = ElementWiseOperation;
using U = UnaryOperation;
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
// int8 as a quantized type: stores round half to even and saturate to [-128, 127]; NaN gives 0
// (the CPU's QI8). rintf rounds to nearest even (the GPU has no other rounding mode).
struct QI8 {
  using T = std::int8_t;
  __device__ static float load(T v) { return static_cast<float>(v); }
  __device__ static T store(float x) {
    const float r = rintf(x);
    if (!(r == r)) return 0;
    return r >= 127.f ? T{127} : r <= -128.f ? T{-128} : static_cast<T>(r);
  }
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

// K operands' element strides (0 on broadcast dims) over the output's dims, after dropping
// size-1 dims and merging adjacent dims across which every operand stays contiguous (the CPU's
// BroadcastPlan). Equal shapes collapse to one dim with strides 1, a scalar operand to stride
// 0, a bias row to dims (rows, n) with strides (n, 1) and (0, 1). Always rank >= 1.
template <int K>
struct Plan {
  int rank = 0;
  i64 d[Dims::kMaxRank] = {};
  i64 s[K][Dims::kMaxRank] = {};
};

// `ins` must have out's rank and broadcast to it (checked by the caller).
template <int K>
Plan<K> make_plan(const Dims* const (&ins)[K], const Dims& out) {
  dev::Strides st[K];
  for (int k = 0; k < K; ++k) st[k] = dev::broadcast_strides(*ins[k], out);
  Plan<K> p;
  for (int i = 0; i < out.rank(); ++i) {
    const i64 n = out[i];
    if (n == 1) continue;
    const int last = p.rank - 1;
    bool merge = last >= 0;
    for (int k = 0; k < K && merge; ++k) merge = p.s[k][last] == st[k].s[i] * n;
    if (merge) {  // the previous dim and this one walk every operand as one
      p.d[last] *= n;
      for (int k = 0; k < K; ++k) p.s[k][last] = st[k].s[i];
    } else {
      p.d[p.rank] = n;
      for (int k = 0; k < K; ++k) p.s[k][p.rank] = st[k].s[i];
      ++p.rank;
    }
  }
  if (p.rank == 0) {  // every dim is 1: one element
    p.rank = 1;
    p.d[0] = 1;
  }
  return p;
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

// Checks that each input has out's rank and broadcasts to it (each dim equal or 1).
template <int K>
bool broadcasts(const Dims* const (&ins)[K], const Dims& out) {
  for (int k = 0; k < K; ++k) {
    if (ins[k]->rank() != out.rank()) return false;
    for (int i = 0; i < out.rank(); ++i)
      if ((*ins[k])[i] != out[i] && (*ins[k])[i] != 1) return false;
  }
  return true;
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

// ---- elementwise ------------------------------------------------------------------------

// The operation on compute values V (float, an integer type, or bool). Integers wrap through
// the unsigned type; DIV truncates, FLOOR_DIV rounds toward negative infinity, a zero divisor
// gives 0 and MIN / -1 wraps to MIN. Float MAX and MIN propagate NaN (x + y is NaN when either
// is), unlike fmaxf/fminf; ties between -0 and +0 give x, as on the CPU.
template <E op>
struct Binary {
  template <class V>
  __device__ auto operator()(V x, V y) const {
    constexpr bool kInt = std::is_integral_v<V> && !std::is_same_v<V, bool>;
    using UV = std::make_unsigned_t<std::conditional_t<kInt, V, int>>;
    if constexpr (op == E::kEQUAL) return x == y;
    else if constexpr (op == E::kGREATER) return x > y;
    else if constexpr (op == E::kLESS) return x < y;
    else if constexpr (op == E::kAND) return x && y;
    else if constexpr (op == E::kOR) return x || y;
    else if constexpr (op == E::kXOR) return x != y;
    else if constexpr (kInt) {
      if constexpr (op == E::kSUM) return static_cast<V>(static_cast<UV>(x) + static_cast<UV>(y));
      else if constexpr (op == E::kSUB) return static_cast<V>(static_cast<UV>(x) - static_cast<UV>(y));
      else if constexpr (op == E::kPROD) return static_cast<V>(static_cast<UV>(x) * static_cast<UV>(y));
      else if constexpr (op == E::kMAX) return x < y ? y : x;
      else if constexpr (op == E::kMIN) return y < x ? y : x;
      else if constexpr (op == E::kDIV) {
        if (y == 0) return V{0};
        if (y == -1) return static_cast<V>(UV{0} - static_cast<UV>(x));
        return static_cast<V>(x / y);
      } else {
        static_assert(op == E::kFLOOR_DIV);
        if (y == 0) return V{0};
        if (y == -1) return static_cast<V>(UV{0} - static_cast<UV>(x));
        V q = static_cast<V>(x / y);
        if (x % y != 0 && ((x < 0) != (y < 0))) --q;
        return q;
      }
    } else {  // float
      if constexpr (op == E::kSUM) return x + y;
      else if constexpr (op == E::kSUB) return x - y;
      else if constexpr (op == E::kPROD) return x * y;
      else if constexpr (op == E::kDIV) return __fdiv_rn(x, y);
      else if constexpr (op == E::kPOW) return powf(x, y);
      else if constexpr (op == E::kFLOOR_DIV) return floorf(__fdiv_rn(x, y));
      else if constexpr (op == E::kMAX) return (x != x || y != y) ? x + y : (x < y ? y : x);
      else {
        static_assert(op == E::kMIN);
        return (x != x || y != y) ? x + y : (y < x ? y : x);
      }
    }
  }
};

// o[i] = Out::store(op(a, b)) over the plan: one dim (equal shapes, a scalar operand) without
// index math, more through plan_offsets. o may alias a or b where that operand has out's dims.
template <class In, class Out, class Op>
__global__ void binary_kernel(const typename In::T* a, const typename In::T* b, typename Out::T* o, i64 n,
                              Plan<2> p) {
  const Op op;
  if (p.rank == 1) {
    const i64 sa = p.s[0][0], sb = p.s[1][0];
    for (i64 i = first_index(); i < n; i += grid_step())
      o[i] = Out::store(op(In::load(a[i * sa]), In::load(b[i * sb])));
  } else {
    for (i64 i = first_index(); i < n; i += grid_step()) {
      i64 off[2];
      plan_offsets(i, p, off);
      o[i] = Out::store(op(In::load(a[off[0]]), In::load(b[off[1]])));
    }
  }
}

// binary_kernel over packs of V consecutive outputs along the plan's innermost dim, whose
// length is a multiple of V and along which each operand is contiguous (stride 1: one 16-byte
// load) or broadcast (stride 0: one element for the pack). Same values as binary_kernel.
template <class Tag, class Op, int V>
__global__ void binary_pack_kernel(const typename Tag::T* a, const typename Tag::T* b, typename Tag::T* o, i64 n,
                                   Plan<2> p) {
  using T = typename Tag::T;
  const Op op;
  const int last = p.rank - 1;
  const bool va = p.s[0][last] != 0, vb = p.s[1][last] != 0;
  for (i64 i = first_index() * V; i < n; i += grid_step() * V) {
    i64 off[2];
    if (p.rank == 1) {
      off[0] = i * p.s[0][0];
      off[1] = i * p.s[1][0];
    } else {
      plan_offsets(i, p, off);
    }
    Pack<T, V> x, y, z;
    if (va) {
      x = *reinterpret_cast<const Pack<T, V>*>(a + off[0]);
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) x.v[k] = a[off[0]];
    }
    if (vb) {
      y = *reinterpret_cast<const Pack<T, V>*>(b + off[1]);
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) y.v[k] = b[off[1]];
    }
#pragma unroll
    for (int k = 0; k < V; ++k) z.v[k] = Tag::store(op(Tag::load(x.v[k]), Tag::load(y.v[k])));
    *reinterpret_cast<Pack<T, V>*>(o + i) = z;
  }
}

struct BinaryArgs {
  const void* a;
  const void* b;
  void* out;
  i64 n;
  Plan<2> plan;
  cudaStream_t stream;
};

// Whether binary_pack_kernel<V> takes these buffers: float operands and output of one type,
// the innermost dim a multiple of V along which each operand has stride 0 or 1, and every
// buffer 16-byte aligned (a contiguous operand's outer strides are then multiples of V too).
template <int V>
bool packable(const BinaryArgs& r, std::size_t pack_bytes) {
  const auto& p = r.plan;
  const int last = p.rank - 1;
  const auto aligned = [&](const void* q) { return reinterpret_cast<std::uintptr_t>(q) % pack_bytes == 0; };
  if (p.d[last] % V != 0 || !aligned(r.out)) return false;
  for (int k = 0; k < 2; ++k) {
    const i64 st = p.s[k][last];
    if (st != 0 && st != 1) return false;
    if (st == 1 && !aligned(k == 0 ? r.a : r.b)) return false;
  }
  return true;
}

template <class In, class Out, class Op>
void launch_binary_op(const BinaryArgs& r) {
  if constexpr (std::is_same_v<In, Out> && (std::is_same_v<In, F32> || std::is_same_v<In, F16> || std::is_same_v<In, BF16>)) {
    using T = typename In::T;
    constexpr int V = 16 / sizeof(T);
    if (packable<V>(r, sizeof(Pack<T, V>))) {
      binary_pack_kernel<In, Op, V><<<blocks_for(r.n / V), kThreads, 0, r.stream>>>(
          static_cast<const T*>(r.a), static_cast<const T*>(r.b), static_cast<T*>(r.out), r.n, r.plan);
      check_launch("elementwise");
      return;
    }
  }
  binary_kernel<In, Out, Op><<<blocks_for(r.n), kThreads, 0, r.stream>>>(
      static_cast<const typename In::T*>(r.a), static_cast<const typename In::T*>(r.b),
      static_cast<typename Out::T*>(r.out), r.n, r.plan);
  check_launch("elementwise");
}

template <class In, class Out, E op>
void launch_binary(const BinaryArgs& r) {
  launch_binary_op<In, Out, Binary<op>>(r);
}

const char* op_name(E op) {
  switch (op) {
    case E::kSUM: return "SUM";
    case E::kPROD: return "PROD";
    case E::kMAX: return "MAX";
    case E::kMIN: return "MIN";
    case E::kSUB: return "SUB";
    case E::kDIV: return "DIV";
    case E::kPOW: return "POW";
    case E::kFLOOR_DIV: return "FLOOR_DIV";
    case E::kAND: return "AND";
    case E::kOR: return "OR";
    case E::kXOR: return "XOR";
    case E::kEQUAL: return "EQUAL";
    case E::kGREATER: return "GREATER";
    case E::kLESS: return "LESS";
  }
  return "an unknown operation";
}

[[noreturn]] void unsupported_op(E op, DataType t) {
  fail(std::string("elementwise: ") + op_name(op) + " does not take " + tn(t));
}

template <class FT>
void elementwise_float(E op, DataType t, const BinaryArgs& r) {
  switch (op) {
    case E::kSUM: launch_binary<FT, FT, E::kSUM>(r); break;
    case E::kPROD: launch_binary<FT, FT, E::kPROD>(r); break;
    case E::kSUB: launch_binary<FT, FT, E::kSUB>(r); break;
    case E::kDIV: launch_binary<FT, FT, E::kDIV>(r); break;
    case E::kPOW: launch_binary<FT, FT, E::kPOW>(r); break;
    case E::kFLOOR_DIV: launch_binary<FT, FT, E::kFLOOR_DIV>(r); break;
    case E::kMAX: launch_binary<FT, FT, E::kMAX>(r); break;
    case E::kMIN: launch_binary<FT, FT, E::kMIN>(r); break;
    case E::kEQUAL: launch_binary<FT, BoolT, E::kEQUAL>(r); break;
    case E::kGREATER: launch_binary<FT, BoolT, E::kGREATER>(r); break;
    case E::kLESS: launch_binary<FT, BoolT, E::kLESS>(r); break;
    default: unsupported_op(op, t);
  }
}

template <class I>
void elementwise_int(E op, DataType t, const BinaryArgs& r) {
  using T = IntT<I>;
  switch (op) {
    case E::kSUM: launch_binary<T, T, E::kSUM>(r); break;
    case E::kSUB: launch_binary<T, T, E::kSUB>(r); break;
    case E::kPROD: launch_binary<T, T, E::kPROD>(r); break;
    case E::kMAX: launch_binary<T, T, E::kMAX>(r); break;
    case E::kMIN: launch_binary<T, T, E::kMIN>(r); break;
    case E::kDIV: launch_binary<T, T, E::kDIV>(r); break;
    case E::kFLOOR_DIV: launch_binary<T, T, E::kFLOOR_DIV>(r); break;
    case E::kEQUAL: launch_binary<T, BoolT, E::kEQUAL>(r); break;
    case E::kGREATER: launch_binary<T, BoolT, E::kGREATER>(r); break;
    case E::kLESS: launch_binary<T, BoolT, E::kLESS>(r); break;
    default: unsupported_op(op, t);
  }
}

void elementwise_bool(E op, DataType t, const BinaryArgs& r) {
  switch (op) {
    case E::kAND: launch_binary<BoolT, BoolT, E::kAND>(r); break;
    case E::kOR: launch_binary<BoolT, BoolT, E::kOR>(r); break;
    case E::kXOR: launch_binary<BoolT, BoolT, E::kXOR>(r); break;
    case E::kEQUAL: launch_binary<BoolT, BoolT, E::kEQUAL>(r); break;
    default: unsupported_op(op, t);
  }
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

// A sum rounded to the type, then ReLU: a residual add and the activation after it in one
// pass, with the values of the two layers (ReLU of a rounded value is exact).
template <class Tag>
struct SumRelu {
  __device__ float operator()(float x, float y) const {
    return Activation<A::kRELU>{0.f, 0.f}(Tag::load(Tag::store(x + y)));
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

template <class FT>
void activation_typed(const ActivationParams& p, const TensorRef& x, const TensorRef& out, i64 n,
                      cudaStream_t stream) {
  with_activation(p.type, [&](auto type) {
    launch_map<FT, FT>(x.data, out.data, n, Activation<decltype(type)::value>{p.alpha, p.beta}, stream, "activation");
  });
}

// ---- unary ------------------------------------------------------------------------------

// The float operations, chosen at run time (one kernel per type keeps the instantiations few;
// the branch is uniform across the grid). ROUND: rintf rounds half to even, as the CPU's
// round_half_even; SIGN gives the input itself for zeros and NaN; SQRT and RECIP are the
// correctly rounded ones, as on the CPU.
struct UnaryFloat {
  U op;
  __device__ float operator()(float v) const {
    switch (op) {
      case U::kEXP: return expf(v);
      case U::kLOG: return logf(v);
      case U::kSQRT: return __fsqrt_rn(v);
      case U::kRECIP: return __frcp_rn(v);
      case U::kABS: return fabsf(v);
      case U::kNEG: return -v;
      case U::kSIN: return sinf(v);
      case U::kCOS: return cosf(v);
      case U::kTAN: return tanf(v);
      case U::kSINH: return sinhf(v);
      case U::kCOSH: return coshf(v);
      case U::kASIN: return asinf(v);
      case U::kACOS: return acosf(v);
      case U::kATAN: return atanf(v);
      case U::kASINH: return asinhf(v);
      case U::kACOSH: return acoshf(v);
      case U::kATANH: return atanhf(v);
      case U::kCEIL: return ceilf(v);
      case U::kFLOOR: return floorf(v);
      case U::kERF: return erff(v);
      case U::kROUND: return rintf(v);
      default: return v > 0.f ? 1.f : v < 0.f ? -1.f : v;  // kSIGN (the host admits no other)
    }
  }
};
// ISINF / ISNAN of a float, to bool.
struct UnaryFloatTest {
  bool inf;  // ISINF (else ISNAN)
  __device__ bool operator()(float v) const { return inf ? fabsf(v) == __int_as_float(0x7F800000) : v != v; }
};
// ABS, NEG and SIGN of an integer; two's complement: ABS and NEG of the lowest value wrap to
// itself.
template <class I>
struct UnaryInt {
  U op;
  __device__ I operator()(I v) const {
    using UI = std::make_unsigned_t<I>;
    switch (op) {
      case U::kABS: return v < 0 ? static_cast<I>(UI{0} - static_cast<UI>(v)) : v;
      case U::kNEG: return static_cast<I>(UI{0} - static_cast<UI>(v));
      default: return static_cast<I>((v > 0) - (v < 0));  // kSIGN
    }
  }
};
struct LogicalNot {
  __device__ bool operator()(bool v) const { return !v; }
};

const char* unary_name(U op) {
  static const char* const names[] = {"EXP",   "LOG",   "SQRT",  "RECIP", "ABS",   "NEG", "SIN",  "COS",   "TAN",
                                      "SINH",  "COSH",  "ASIN",  "ACOS",  "ATAN",  "ASINH", "ACOSH", "ATANH",
                                      "CEIL",  "FLOOR", "ERF",   "NOT",   "SIGN",  "ROUND", "ISINF", "ISNAN"};
  const int i = static_cast<int>(op);
  return i >= 0 && i < 25 ? names[i] : "an unknown operation";
}

[[noreturn]] void unary_unsupported(U op, DataType t) {
  fail(std::string("unary: ") + unary_name(op) + " does not take " + tn(t));
}

template <class FT>
void unary_float(U op, const TensorRef& x, const TensorRef& out, i64 n, cudaStream_t stream) {
  if (op == U::kNOT) unary_unsupported(op, x.type);
  if (n == 0) return;
  if (op == U::kISINF || op == U::kISNAN)
    launch_map<FT, BoolT>(x.data, out.data, n, UnaryFloatTest{op == U::kISINF}, stream, "unary");
  else
    launch_map<FT, FT>(x.data, out.data, n, UnaryFloat{op}, stream, "unary");
}

template <class I>
void unary_int(U op, const TensorRef& x, const TensorRef& out, i64 n, cudaStream_t stream) {
  if (op != U::kABS && op != U::kNEG && op != U::kSIGN) unary_unsupported(op, x.type);
  if (n == 0) return;
  launch_map<IntT<I>, IntT<I>>(x.data, out.data, n, UnaryInt<I>{op}, stream, "unary");
}

// ---- cast -------------------------------------------------------------------------------

// Sources load as float (the float tags F32/F16/BF16) or int64 (integers and bool, exactly).
template <class I>
struct SrcInt {
  using T = I;
  __device__ static i64 load(T v) { return static_cast<i64>(v); }
};
struct SrcBool {
  using T = std::uint8_t;
  __device__ static i64 load(T v) { return v != 0 ? 1 : 0; }
};

// An integer type's range, and max + 1 and min as floats (exact powers of two).
template <class I>
struct IntRange;
template <>
struct IntRange<std::int8_t> {
  static constexpr std::int8_t kMin = -128, kMax = 127;
  static constexpr float kHi = 128.f, kLo = -128.f;
};
template <>
struct IntRange<std::uint8_t> {
  static constexpr std::uint8_t kMin = 0, kMax = 255;
  static constexpr float kHi = 256.f, kLo = 0.f;
};
template <>
struct IntRange<std::int32_t> {
  static constexpr std::int32_t kMin = INT32_MIN, kMax = INT32_MAX;
  static constexpr float kHi = 2147483648.f, kLo = -2147483648.f;
};
template <>
struct IntRange<std::int64_t> {
  static constexpr std::int64_t kMin = INT64_MIN, kMax = INT64_MAX;
  static constexpr float kHi = 9223372036854775808.f, kLo = -9223372036854775808.f;
};

// float to integer: truncate toward zero, saturate to the range, NaN gives 0 (the CPU's
// float_to_int).
template <class I>
__device__ inline I float_to_int(float x) {
  using R = IntRange<I>;
  if (x != x) return 0;
  if (x >= R::kHi) return R::kMax;
  if (x <= R::kLo) return R::kMin;
  return static_cast<I>(x);
}

// |v| rounded to 24 significant bits with the dropped bits ORed into the last one (round to
// odd), with v's sign. Rounding that float to float16 or bfloat16 then equals rounding v once,
// to nearest even (the CPU's int_to_float_round_odd).
__device__ inline float int_to_float_round_odd(i64 v) {
  const std::uint64_t u = v < 0 ? std::uint64_t{0} - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
  const int w = 64 - __clzll(static_cast<long long>(u));
  float m;
  if (w <= 24) {
    m = static_cast<float>(u);  // exact
  } else {
    const int s = w - 24;
    std::uint64_t t = u >> s;
    if (u & ((std::uint64_t{1} << s) - 1)) t |= 1;
    m = static_cast<float>(t) * __int_as_float((127 + s) << 23);  // t * 2^s, exact
  }
  return v < 0 ? -m : m;
}

// Destinations convert from float or from int64.
template <class I>
struct DstInt {
  using T = I;
  __device__ static T from(float x) { return float_to_int<I>(x); }
  __device__ static T from(i64 v) { return static_cast<T>(v); }  // wraps (two's complement)
};
struct DstBool {
  using T = std::uint8_t;
  __device__ static T from(float x) { return x != 0.f ? 1 : 0; }  // NaN != 0: true
  __device__ static T from(i64 v) { return v != 0 ? 1 : 0; }
};
struct DstF32 {
  using T = float;
  __device__ static T from(float x) { return x; }
  __device__ static T from(i64 v) { return static_cast<float>(v); }  // round to nearest even
};
template <class FT>
struct DstNarrow {
  using T = typename FT::T;
  __device__ static T from(float x) { return FT::store(x); }
  __device__ static T from(i64 v) { return FT::store(int_to_float_round_odd(v)); }
};

template <class S, class D>
struct Convert {
  __device__ typename D::T operator()(typename S::T v) const { return D::from(S::load(v)); }
};

template <class F>
void with_cast_source(DataType t, F&& f) {
  switch (t) {
    case DataType::kFLOAT: f(F32{}); return;
    case DataType::kHALF: f(F16{}); return;
    case DataType::kBF16: f(BF16{}); return;
    case DataType::kINT8: f(SrcInt<std::int8_t>{}); return;
    case DataType::kINT32: f(SrcInt<std::int32_t>{}); return;
    case DataType::kINT64: f(SrcInt<std::int64_t>{}); return;
    case DataType::kUINT8: f(SrcInt<std::uint8_t>{}); return;
    case DataType::kBOOL: f(SrcBool{}); return;
    default: fail("cast: cannot cast from " + tn(t) + " (fp8 leaves through dequantize)");
  }
}

template <class F>
void with_cast_dest(DataType t, F&& f) {
  switch (t) {
    case DataType::kFLOAT: f(DstF32{}); return;
    case DataType::kHALF: f(DstNarrow<F16>{}); return;
    case DataType::kBF16: f(DstNarrow<BF16>{}); return;
    case DataType::kINT8: f(DstInt<std::int8_t>{}); return;
    case DataType::kINT32: f(DstInt<std::int32_t>{}); return;
    case DataType::kINT64: f(DstInt<std::int64_t>{}); return;
    case DataType::kUINT8: f(DstInt<std::uint8_t>{}); return;
    case DataType::kBOOL: f(DstBool{}); return;
    default: fail("cast: cannot cast to " + tn(t) + " (fp8 comes from quantize)");
  }
}

// The source and destination tags of one type: the cast is a copy (no kernel).
template <class S, class D>
constexpr bool kSameType =
    (std::is_same_v<S, F32> && std::is_same_v<D, DstF32>) ||
    (std::is_same_v<S, F16> && std::is_same_v<D, DstNarrow<F16>>) ||
    (std::is_same_v<S, BF16> && std::is_same_v<D, DstNarrow<BF16>>) ||
    (std::is_same_v<S, SrcBool> && std::is_same_v<D, DstBool>) ||
    (std::is_same_v<S, SrcInt<std::int8_t>> && std::is_same_v<D, DstInt<std::int8_t>>) ||
    (std::is_same_v<S, SrcInt<std::int32_t>> && std::is_same_v<D, DstInt<std::int32_t>>) ||
    (std::is_same_v<S, SrcInt<std::int64_t>> && std::is_same_v<D, DstInt<std::int64_t>>) ||
    (std::is_same_v<S, SrcInt<std::uint8_t>> && std::is_same_v<D, DstInt<std::uint8_t>>);

// ---- quantize / dequantize --------------------------------------------------------------

// Per-tensor (one scale) or per-channel along `axis`: element i uses scale[(i / inner) % channels].
struct Channels {
  i64 channels = 1;
  i64 inner = 1;
};

Channels channels_of(const Dims& d, i64 scale_count, int axis, const char* kernel) {
  Channels c;
  if (scale_count == 1) {
    c.inner = d.volume() > 1 ? d.volume() : 1;
    return c;
  }
  if (axis < 0 || axis >= d.rank())
    fail(std::string(kernel) + ": axis " + std::to_string(axis) + " is out of range for dims " + d.str());
  if (d[axis] != scale_count)
    fail(std::string(kernel) + ": the scale has " + std::to_string(scale_count) + " elements but axis " +
         std::to_string(axis) + " of " + d.str() + " has " + std::to_string(d[axis]));
  c.channels = scale_count;
  for (int k = axis + 1; k < d.rank(); ++k) c.inner *= d[k];
  return c;
}

// A scale's element i as float; the scale is float32, float16 or bfloat16 (checked on the host).
__device__ inline float load_scale(const void* s, i64 i, DataType t) {
  switch (t) {
    case DataType::kHALF: return F16::load(static_cast<const F16::T*>(s)[i]);
    case DataType::kBF16: return BF16::load(static_cast<const BF16::T*>(s)[i]);
    default: return F32::load(static_cast<const F32::T*>(s)[i]);
  }
}

// Per channel: o[i] = Out::store(In::load(x[i]) / scale) (quantize) or * scale (dequantize),
// the scale of element i's channel. The division is the correctly rounded one, as on the CPU.
template <class In, class Out, bool kQuantize>
__global__ void scaled_kernel(const typename In::T* x, typename Out::T* o, i64 n, const void* scale,
                              DataType scale_type, Channels c) {
  auto apply = [](float v, float sc) { return kQuantize ? __fdiv_rn(v, sc) : v * sc; };
  for (i64 i = first_index(); i < n; i += grid_step()) {
    i64 row, col, q, ch;
    divmod(i, c.inner, row, col);
    divmod(row, c.channels, q, ch);
    o[i] = Out::store(apply(In::load(x[i]), load_scale(scale, ch, scale_type)));
  }
}

// y / s rounded correctly (as __fdiv_rn) for a divisor fixed per thread: the reciprocal is
// computed once, and each quotient y * (1/s) gets two residual corrections (the FMA sequence of
// the hardware's own division; with 1/s correctly rounded, Markstein's theorem makes the result
// the correctly rounded quotient). Operands of magnitude outside [2^-40, 2^40], zeros, infinities
// and NaNs (where a residual could underflow, or a sign of zero be lost) take __fdiv_rn.
struct Divider {
  float s = 1.f, r = 1.f;
  bool fast = false;
  __device__ static bool moderate(float v) {
    const float a = fabsf(v);
    return a >= 0x1p-40f && a <= 0x1p40f;
  }
  __device__ explicit Divider(float divisor) {
    s = divisor;
    r = __fdiv_rn(1.f, divisor);
    fast = moderate(divisor);
  }
  __device__ float operator()(float y) const {
    if (!fast || !moderate(y)) return __fdiv_rn(y, s);
    float q = __fmul_rn(y, r);
    q = __fmaf_rn(__fmaf_rn(-s, q, y), r, q);
    return __fmaf_rn(__fmaf_rn(-s, q, y), r, q);
  }
};

// One scale for every element (read from the device, so no host synchronization): read once
// per thread (bind), as a Divider when quantizing.
template <class In, class Out, bool kQuantize>
struct PerTensorScaled {
  const void* scale;
  DataType scale_type;
  struct Bound {
    float sc;
    Divider div;
    __device__ typename Out::T operator()(typename In::T v) const {
      return Out::store(kQuantize ? div(In::load(v)) : In::load(v) * sc);
    }
  };
  __device__ Bound bind() const {
    const float sc = load_scale(scale, 0, scale_type);
    return Bound{sc, Divider(sc)};
  }
};

template <class In, class Out, bool kQuantize>
void launch_scaled(const TensorRef& x, const TensorRef& scale, const TensorRef& out, i64 n, const Channels& c,
                   cudaStream_t stream, const char* kernel) {
  if (c.channels == 1) {
    map(static_cast<const typename In::T*>(x.data), static_cast<typename Out::T*>(out.data), n,
        PerTensorScaled<In, Out, kQuantize>{scale.data, scale.type}, stream);
    check_launch(kernel);
    return;
  }
  scaled_kernel<In, Out, kQuantize><<<blocks_for(n), kThreads, 0, stream>>>(
      static_cast<const typename In::T*>(x.data), static_cast<typename Out::T*>(out.data), n, scale.data,
      scale.type, c);
  check_launch(kernel);
}

// The scale must be float32 or the values' float type.
void check_scale_type(const TensorRef& scale, DataType value_type, const char* kernel) {
  if (scale.type != DataType::kFLOAT && scale.type != value_type)
    fail(std::string(kernel) + ": the scale has type " + tn(scale.type) + "; it must be float32 or " + tn(value_type));
}

// o[i] = Out::store(float(acc[i]) * (scale_a * scale_b)): an int8 GEMM's int32 sums, scaled.
// With a bias row (`columns` values), o[i] = Out::store(Out::load(o[i]) + bias[i % columns]).
template <class Out>
__global__ void scale_accumulator_kernel(const std::int32_t* acc, typename Out::T* o, i64 n, const float* scale_a,
                                         const float* scale_b, const typename Out::T* bias, i64 columns) {
  const float sc = __fmul_rn(*scale_a, *scale_b);
  for (i64 i = first_index(); i < n; i += grid_step()) {
    typename Out::T y = Out::store(__fmul_rn(static_cast<float>(acc[i]), sc));
    if (bias) {
      i64 row, col;
      divmod(i, columns, row, col);
      y = Out::store(__fadd_rn(Out::load(y), Out::load(bias[col])));
    }
    o[i] = y;
  }
}

// ---- select -----------------------------------------------------------------------------

// o = cond ? a : b on raw elements of T (1, 2, 4 or 8 bytes); any non-zero condition byte is true.
template <class T>
__global__ void select_kernel(const std::uint8_t* cond, const T* a, const T* b, T* o, i64 n, Plan<3> p) {
  if (p.rank == 1) {
    const i64 sc = p.s[0][0], sa = p.s[1][0], sb = p.s[2][0];
    for (i64 i = first_index(); i < n; i += grid_step()) o[i] = cond[i * sc] ? a[i * sa] : b[i * sb];
  } else {
    for (i64 i = first_index(); i < n; i += grid_step()) {
      i64 off[3];
      plan_offsets(i, p, off);
      o[i] = cond[off[0]] ? a[off[1]] : b[off[2]];
    }
  }
}

template <class T>
void launch_select(const TensorRef& c, const TensorRef& a, const TensorRef& b, const TensorRef& out, i64 n,
                   const Plan<3>& p, cudaStream_t stream) {
  select_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const std::uint8_t*>(c.data),
                                                          static_cast<const T*>(a.data), static_cast<const T*>(b.data),
                                                          static_cast<T*>(out.data), n, p);
  check_launch("select");
}

}  // namespace

// ---- entry points -----------------------------------------------------------------------

namespace {

// elementwise()'s checks; false for an empty output (nothing to launch).
bool binary_args(E op, const TensorRef& a, const TensorRef& b, const TensorRef& out, cudaStream_t stream,
                 BinaryArgs& r) {
  checked_volume(a, "elementwise", "input 0");
  checked_volume(b, "elementwise", "input 1");
  const i64 n = checked_volume(out, "elementwise", "the output");
  if (a.type != b.type) fail("elementwise: inputs have types " + tn(a.type) + " and " + tn(b.type) + "; they must match");
  const bool compare = op == E::kEQUAL || op == E::kGREATER || op == E::kLESS;
  const DataType want = compare ? DataType::kBOOL : a.type;
  if (out.type != want)
    fail(std::string("elementwise: ") + op_name(op) + " of " + tn(a.type) + " gives " + tn(want) + ", not " +
         tn(out.type));
  const Dims* const ins[2] = {&a.dims, &b.dims};
  if (!broadcasts(ins, out.dims))
    fail("elementwise: inputs " + a.dims.str() + " and " + b.dims.str() + " do not broadcast to the output " +
         out.dims.str());
  if (n == 0) return false;
  r = {a.data, b.data, out.data, n, make_plan(ins, out.dims), stream};
  return true;
}

}  // namespace

void elementwise(ElementWiseOperation op, const TensorRef& a, const TensorRef& b, const TensorRef& out,
                 cudaStream_t stream) {
  // As on the CPU, an empty output returns before the (op, type) dispatch; the dispatch
  // refuses an operation the type does not take before launching anything.
  BinaryArgs r;
  if (!binary_args(op, a, b, out, stream, r)) return;
  switch (a.type) {
    case DataType::kFLOAT: elementwise_float<F32>(op, a.type, r); break;
    case DataType::kHALF: elementwise_float<F16>(op, a.type, r); break;
    case DataType::kBF16: elementwise_float<BF16>(op, a.type, r); break;
    case DataType::kINT32: elementwise_int<std::int32_t>(op, a.type, r); break;
    case DataType::kINT64: elementwise_int<std::int64_t>(op, a.type, r); break;
    case DataType::kBOOL: elementwise_bool(op, a.type, r); break;
    default: unsupported_op(op, a.type);
  }
}

void sum_relu(const TensorRef& a, const TensorRef& b, const TensorRef& out, cudaStream_t stream) {
  BinaryArgs r;
  if (!binary_args(E::kSUM, a, b, out, stream, r)) return;
  const bool ok = dev::with_float(a.type, [&](auto tag) {
    using Tag = decltype(tag);
    launch_binary_op<Tag, Tag, SumRelu<Tag>>(r);
  });
  if (!ok) fail("sum_relu takes float32, float16 or bfloat16, not " + tn(a.type));
}

void activation(const ActivationParams& p, const TensorRef& x, const TensorRef& out, cudaStream_t stream) {
  const i64 n = checked_volume(x, "activation", "the input");
  if (checked_volume(out, "activation", "the output") != n || out.type != x.type)
    fail("activation: the output " + desc(out) + " differs from the input " + desc(x));
  const bool ok = dev::with_float(x.type, [&](auto tag) {
    if (n > 0) activation_typed<decltype(tag)>(p, x, out, n, stream);
  });
  if (!ok) fail("activation takes float32, float16 or bfloat16, not " + tn(x.type));
}

void cast(const TensorRef& x, const TensorRef& out, cudaStream_t stream) {
  const i64 n = checked_volume(x, "cast", "the input");
  if (checked_volume(out, "cast", "the output") != n)
    fail("cast: the output dims " + out.dims.str() + " differ from the input's " + x.dims.str());
  if (n > 0 && x.data == out.data && element_size(x.type) != element_size(out.type))
    fail("cast: in place needs types of one size, not " + tn(x.type) + " and " + tn(out.type));
  with_cast_source(x.type, [&](auto s) {
    with_cast_dest(out.type, [&](auto d) {
      using S = decltype(s);
      using D = decltype(d);
      if (n == 0) return;
      if constexpr (kSameType<S, D>) {
        if (x.data != out.data)
          dev::check(cudaMemcpyAsync(out.data, x.data, static_cast<std::size_t>(n) * element_size(x.type),
                                     cudaMemcpyDeviceToDevice, stream),
                     "cast");
      } else {
        // In place (types of one size) is safe: each thread reads its element before writing it.
        map(static_cast<const typename S::T*>(x.data), static_cast<typename D::T*>(out.data), n, Convert<S, D>{}, stream);
        check_launch("cast");
      }
    });
  });
}

void unary(UnaryOperation op, const TensorRef& x, const TensorRef& out, cudaStream_t stream) {
  const i64 n = checked_volume(x, "unary", "the input");
  const i64 no = checked_volume(out, "unary", "the output");
  const int code = static_cast<int>(op);
  if (code < 0 || code > static_cast<int>(U::kISNAN)) fail("unary: unknown operation " + std::to_string(code));
  const bool to_bool = op == U::kISINF || op == U::kISNAN;
  const DataType want = to_bool ? DataType::kBOOL : x.type;
  if (no != n || out.type != want)
    fail(std::string("unary: ") + unary_name(op) + " of " + desc(x) + " gives " + tn(want) + x.dims.str() + ", not " +
         desc(out));
  switch (x.type) {
    case DataType::kFLOAT: unary_float<F32>(op, x, out, n, stream); break;
    case DataType::kHALF: unary_float<F16>(op, x, out, n, stream); break;
    case DataType::kBF16: unary_float<BF16>(op, x, out, n, stream); break;
    case DataType::kINT32: unary_int<std::int32_t>(op, x, out, n, stream); break;
    case DataType::kINT64: unary_int<std::int64_t>(op, x, out, n, stream); break;
    case DataType::kBOOL:
      if (op != U::kNOT) fail(std::string("unary: ") + unary_name(op) + " does not take bool");
      if (n > 0) launch_map<BoolT, BoolT>(x.data, out.data, n, LogicalNot{}, stream, "unary");
      break;
    default: unary_unsupported(op, x.type);
  }
}

void quantize(const TensorRef& x, const TensorRef& scale, int axis, const TensorRef& out, cudaStream_t stream) {
  const i64 n = checked_volume(x, "quantize", "the input");
  const i64 ns = checked_volume(scale, "quantize", "the scale");
  if (checked_volume(out, "quantize", "the output") != n)
    fail("quantize: the output dims " + out.dims.str() + " differ from the input's " + x.dims.str());
  if (out.type != DataType::kINT8 && out.type != DataType::kFP8)
    fail("quantize: the output type " + tn(out.type) + " is not int8 or fp8");
  if (ns < 1) fail("quantize: the scale is empty");
  const Channels c = channels_of(x.dims, ns, axis, "quantize");
  const bool ok = dev::with_float(x.type, [&](auto tag) {
    using In = decltype(tag);
    check_scale_type(scale, x.type, "quantize");
    if (n == 0) return;
    if (out.type == DataType::kINT8) launch_scaled<In, QI8, true>(x, scale, out, n, c, stream, "quantize");
    else launch_scaled<In, FP8, true>(x, scale, out, n, c, stream, "quantize");
  });
  if (!ok) fail("quantize takes float32, float16 or bfloat16, not " + tn(x.type));
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

template <class Tag, class Op, int kVec>
__global__ void __launch_bounds__(kThreads)
    plane_bias_kernel(typename Tag::T* __restrict__ y, const typename Tag::T* __restrict__ bias, i64 planes, i64 P, i64 C,
                      Op op) {
  using T = typename Tag::T;
  for (i64 plane = blockIdx.x; plane < planes; plane += gridDim.x) {
    const float b = bias ? Tag::load(bias[plane % C]) : 0.f;
    T* row = y + plane * P;
    if constexpr (kVec > 1) {
      auto* rv = reinterpret_cast<uint4*>(row);
      for (i64 i = threadIdx.x; i < P / kVec; i += blockDim.x) {
        uint4 v = rv[i];
        T* e = reinterpret_cast<T*>(&v);
#pragma unroll
        for (int k = 0; k < kVec; ++k) e[k] = op(e[k], b);
        rv[i] = v;
      }
    } else {
      for (i64 i = threadIdx.x; i < P; i += blockDim.x) row[i] = op(row[i], b);
    }
  }
}

// quantize(activation(x)) with the activation's result rounded to x's type in between, as the
// two layers give when the intermediate is stored.
template <class FT, class Out, A type>
struct ActivationQuantized {
  Activation<type> act;
  const void* scale;
  DataType scale_type;
  struct Bound {
    Activation<type> act;
    Divider div;
    __device__ typename Out::T operator()(typename FT::T v) const {
      return Out::store(div(FT::load(FT::store(act(FT::load(v))))));
    }
  };
  __device__ Bound bind() const { return Bound{act, Divider(load_scale(scale, 0, scale_type))}; }
};

void activation_quantize(const ActivationParams& p, const TensorRef& x, const TensorRef& scale, const TensorRef& out,
                         cudaStream_t stream) {
  const i64 n = checked_volume(x, "activation_quantize", "the input");
  if (checked_volume(scale, "activation_quantize", "the scale") != 1)
    fail("activation_quantize: the scale " + desc(scale) + " must have one element");
  if (checked_volume(out, "activation_quantize", "the output") != n)
    fail("activation_quantize: the output dims " + out.dims.str() + " differ from the input's " + x.dims.str());
  if (out.type != DataType::kINT8 && out.type != DataType::kFP8)
    fail("activation_quantize: the output type " + tn(out.type) + " is not int8 or fp8");
  const bool ok = dev::with_float(x.type, [&](auto tag) {
    using FT = decltype(tag);
    check_scale_type(scale, x.type, "activation_quantize");
    if (n == 0) return;
    with_activation(p.type, [&](auto type) {
      constexpr A kType = decltype(type)::value;
      const Activation<kType> act{p.alpha, p.beta};
      const auto* in = static_cast<const typename FT::T*>(x.data);
      if (out.type == DataType::kINT8)
        map(in, static_cast<QI8::T*>(out.data), n, ActivationQuantized<FT, QI8, kType>{act, scale.data, scale.type}, stream);
      else
        map(in, static_cast<FP8::T*>(out.data), n, ActivationQuantized<FT, FP8, kType>{act, scale.data, scale.type}, stream);
      check_launch("activation_quantize");
    });
  });
  if (!ok) fail("activation_quantize takes float32, float16 or bfloat16, not " + tn(x.type));
}

void bias_activation(const TensorRef& y, const void* bias, const ActivationParams* act, cudaStream_t stream) {
  const i64 n = checked_volume(y, "bias_activation", "the tensor");
  if (y.dims.rank() < 2) fail("bias_activation: the tensor " + desc(y) + " has no channel dim");
  const i64 C = y.dims[1], planes = y.dims[0] * C;
  if (n == 0 || (bias == nullptr && act == nullptr)) return;
  const i64 P = n / planes;
  const bool ok = dev::with_float(y.type, [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::T;
    constexpr int kVec = 16 / sizeof(T);
    const bool vec = P % kVec == 0 && reinterpret_cast<std::uintptr_t>(y.data) % 16 == 0;
    const unsigned grid = static_cast<unsigned>(std::min<i64>(planes, 65535 * 8));
    auto* data = static_cast<T*>(y.data);
    const auto* b = static_cast<const T*>(bias);
    with_activation(act ? act->type : A::kRELU, [&](auto type) {
      const BiasActivation<Tag, decltype(type)::value> op{{act ? act->alpha : 0.f, act ? act->beta : 0.f}, bias != nullptr,
                                                          act != nullptr};
      if (vec) plane_bias_kernel<Tag, decltype(op), kVec><<<grid, kThreads, 0, stream>>>(data, b, planes, P, C, op);
      else plane_bias_kernel<Tag, decltype(op), 1><<<grid, kThreads, 0, stream>>>(data, b, planes, P, C, op);
    });
    check_launch("bias_activation");
  });
  if (!ok) fail("bias_activation takes float32, float16 or bfloat16, not " + tn(y.type));
}

// ---- channels-last copies around cuDNN ----------------------------------------------------

// Per batch b: in [rows][cols] into out [cols][out_rows] (out_rows >= rows), out[b][c][r] =
// op(in[b][r][c], c) for r < rows and zero beyond. 64 x 64 tiles through shared memory, so that
// both sides are read and written along rows, in vectors of V elements (V divides cols and
// out_rows; the callers' pointers are 256-byte aligned): a transpose is memory-latency bound,
// and 16-byte accesses keep 8 times the bytes of 2-byte ones in flight. A block walks tiles
// (batch-major).
constexpr int kTile = 64;

template <class Tag, int V, class Op>
__global__ void __launch_bounds__(kThreads)
    tile_transpose_kernel(const typename Tag::T* __restrict__ in, typename Tag::T* __restrict__ out, i64 batch,
                          i64 rows, i64 cols, i64 out_rows, Op op) {
  using T = typename Tag::T;
  using P = Pack<T, V>;
  constexpr int kVecs = kTile / V;  // vectors per tile row
  __shared__ T tile[kTile][kTile + 2];
  const i64 tiles_r = (out_rows + kTile - 1) / kTile, tiles_c = (cols + kTile - 1) / kTile, per = tiles_r * tiles_c;
  for (i64 t = blockIdx.x; t < batch * per; t += gridDim.x) {
    const i64 b = t / per, rest = t - b * per, r0 = rest / tiles_c * kTile, c0 = rest % tiles_c * kTile;
    const T* ib = in + b * rows * cols;
    T* ob = out + b * cols * out_rows;
    for (int i = threadIdx.x; i < kTile * kVecs; i += kThreads) {
      const int r = i / kVecs, c = i % kVecs * V;
      if (r0 + r < rows && c0 + c < cols) {
        const P p = *reinterpret_cast<const P*>(ib + (r0 + r) * cols + c0 + c);
#pragma unroll
        for (int k = 0; k < V; ++k) tile[r][c + k] = p.v[k];
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kTile * kVecs; i += kThreads) {
      const int c = i / kVecs, r = i % kVecs * V;
      if (c0 + c >= cols || r0 + r >= out_rows) continue;
      P p;
#pragma unroll
      for (int k = 0; k < V; ++k) p.v[k] = r0 + r + k < rows ? op(tile[r + k][c], c0 + c) : Tag::store(0.f);
      *reinterpret_cast<P*>(ob + (c0 + c) * out_rows + r0 + r) = p;
    }
    __syncthreads();
  }
}

// The same for out_rows = L (4 or 8, what the builder pads a few channels to) and V | cols,
// where a 64-row tile would be mostly padding: one thread per V columns, reading a V-vector of
// each row and writing V vectors of L (V * L contiguous).
template <class Tag, int V, int L>
__global__ void few_rows_vector_kernel(const typename Tag::T* __restrict__ in, typename Tag::T* __restrict__ out,
                                       i64 batch, i64 rows, i64 cols) {
  using T = typename Tag::T;
  const i64 groups = cols / V;
  for (i64 i = first_index(); i < batch * groups; i += grid_step()) {
    i64 b, g;
    divmod(i, groups, b, g);
    const T* ib = in + b * rows * cols + g * V;
    Pack<T, V> row[L];
#pragma unroll
    for (int r = 0; r < L; ++r)
      if (r < rows) row[r] = *reinterpret_cast<const Pack<T, V>*>(ib + r * cols);
    auto* ob = reinterpret_cast<Pack<T, L>*>(out + (b * cols + g * V) * L);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      Pack<T, L> o;
#pragma unroll
      for (int r = 0; r < L; ++r) o.v[r] = r < rows ? row[r].v[k] : Tag::store(0.f);
      ob[k] = o;
    }
  }
}

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

// bias_activation over a channels-last y (element i has channel i % C): V-element vectors (V
// divides C, so a vector stays within one position's channels).
template <class Tag, class Op, int V>
__global__ void __launch_bounds__(kThreads)
    channel_last_bias_kernel(typename Tag::T* __restrict__ y, const typename Tag::T* __restrict__ bias, i64 packs,
                             i64 C, Op op) {
  using P = Pack<typename Tag::T, V>;
  for (i64 i = first_index(); i < packs; i += grid_step()) {
    P p = reinterpret_cast<P*>(y)[i];
    const i64 c0 = (i * V) % C;
#pragma unroll
    for (int k = 0; k < V; ++k) p.v[k] = op(p.v[k], bias ? Tag::load(bias[c0 + k]) : 0.f);
    reinterpret_cast<P*>(y)[i] = p;
  }
}

void bias_activation_channels_last(const TensorRef& y, const void* bias, const ActivationParams* act,
                                   cudaStream_t stream) {
  const i64 n = checked_volume(y, "bias_activation_channels_last", "the tensor");
  if (y.dims.rank() < 2) fail("bias_activation_channels_last: the tensor " + desc(y) + " has no channel dim");
  const i64 C = y.dims[1];
  if (n == 0 || (bias == nullptr && act == nullptr)) return;
  const bool ok = dev::with_float(y.type, [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::T;
    const bool aligned = reinterpret_cast<std::uintptr_t>(y.data) % 16 == 0;
    auto* data = static_cast<T*>(y.data);
    const auto* b = static_cast<const T*>(bias);
    with_activation(act ? act->type : A::kRELU, [&](auto type) {
      const BiasActivation<Tag, decltype(type)::value> op{{act ? act->alpha : 0.f, act ? act->beta : 0.f}, bias != nullptr,
                                                          act != nullptr};
      by_width<T>(aligned ? vector_width<T>({C}) : 1, [&](auto v) {
        constexpr int V = decltype(v)::value;
        channel_last_bias_kernel<Tag, decltype(op), V><<<blocks_for(n / V), kThreads, 0, stream>>>(data, b, n / V, C, op);
      });
    });
    check_launch("bias_activation_channels_last");
  });
  if (!ok) fail("bias_activation_channels_last takes float32, float16 or bfloat16, not " + tn(y.type));
}

template <class Tag, class Op>
void launch_transpose(const void* in, void* out, i64 batch, i64 rows, i64 cols, i64 out_rows, Op op,
                      cudaStream_t stream) {
  using T = typename Tag::T;
  const i64 tiles = batch * ((out_rows + kTile - 1) / kTile) * ((cols + kTile - 1) / kTile);
  by_width<T>(vector_width<T>({cols, out_rows}), [&](auto v) {
    const auto grid = static_cast<unsigned>(std::min<i64>(tiles, i64{1} << 20));
    tile_transpose_kernel<Tag, decltype(v)::value><<<grid, kThreads, 0, stream>>>(
        static_cast<const T*>(in), static_cast<T*>(out), batch, rows, cols, out_rows, op);
  });
}

template <class Tag>
struct Same {
  __device__ typename Tag::T operator()(typename Tag::T v, i64) const { return v; }
};
template <class Tag, class Op>
struct PerChannel {  // op(v, bias[channel])
  Op op;
  const typename Tag::T* bias;
  __device__ typename Tag::T operator()(typename Tag::T v, i64 c) const {
    return op(v, bias ? Tag::load(bias[c]) : 0.f);
  }
};

void to_channels_last(const TensorRef& x, std::int64_t channels, void* out, cudaStream_t stream) {
  const i64 n = checked_volume(x, "to_channels_last", "the tensor");
  if (x.dims.rank() < 2) fail("to_channels_last: the tensor " + desc(x) + " has no channel dim");
  const i64 N = x.dims[0], C = x.dims[1];
  if (channels < C) fail("to_channels_last: " + std::to_string(channels) + " channels cannot hold " + desc(x) + "'s");
  if (n == 0) return;
  const i64 S = n / (N * C);
  const bool ok = dev::with_float(x.type, [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::T;
    // Two columns per thread: a warp's stores then cover whole 32-byte sectors (wider vectors
    // read better but scatter the stores; 8 columns were slower than one on the H200).
    constexpr int V = 2;
    auto few = [&](auto l) {
      few_rows_vector_kernel<Tag, V, decltype(l)::value><<<blocks_for(N * S / V), kThreads, 0, stream>>>(
          static_cast<const T*>(x.data), static_cast<T*>(out), N, C, S);
    };
    if (channels == 4 && S % V == 0) few(std::integral_constant<int, 4>{});
    else if (channels == 8 && S % V == 0) few(std::integral_constant<int, 8>{});
    else launch_transpose<Tag>(x.data, out, N, C, S, channels, Same<Tag>{}, stream);
    check_launch("to_channels_last");
  });
  if (!ok) fail("to_channels_last takes float32, float16 or bfloat16, not " + tn(x.type));
}

void from_channels_last(const void* in, const TensorRef& y, const void* bias, const ActivationParams* act,
                        cudaStream_t stream) {
  const i64 n = checked_volume(y, "from_channels_last", "the tensor");
  if (y.dims.rank() < 2) fail("from_channels_last: the tensor " + desc(y) + " has no channel dim");
  if (n == 0) return;
  const i64 N = y.dims[0], K = y.dims[1], S = n / (N * K);
  const bool ok = dev::with_float(y.type, [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::T;
    with_activation(act ? act->type : A::kRELU, [&](auto type) {
      const BiasActivation<Tag, decltype(type)::value> op{{act ? act->alpha : 0.f, act ? act->beta : 0.f}, bias != nullptr,
                                                          act != nullptr};
      launch_transpose<Tag>(in, y.data, N, S, K, S, PerChannel<Tag, decltype(op)>{op, static_cast<const T*>(bias)},
                            stream);
    });
    check_launch("from_channels_last");
  });
  if (!ok) fail("from_channels_last takes float32, float16 or bfloat16, not " + tn(y.type));
}

void dequantize(const TensorRef& x, const TensorRef& scale, int axis, const TensorRef& out, cudaStream_t stream) {
  const i64 n = checked_volume(x, "dequantize", "the input");
  const i64 ns = checked_volume(scale, "dequantize", "the scale");
  if (checked_volume(out, "dequantize", "the output") != n)
    fail("dequantize: the output dims " + out.dims.str() + " differ from the input's " + x.dims.str());
  if (x.type != DataType::kINT8 && x.type != DataType::kFP8)
    fail("dequantize: the input type " + tn(x.type) + " is not int8 or fp8");
  if (ns < 1) fail("dequantize: the scale is empty");
  const Channels c = channels_of(x.dims, ns, axis, "dequantize");
  const bool ok = dev::with_float(out.type, [&](auto tag) {
    using Out = decltype(tag);
    check_scale_type(scale, out.type, "dequantize");
    if (n == 0) return;
    if (x.type == DataType::kINT8) launch_scaled<QI8, Out, false>(x, scale, out, n, c, stream, "dequantize");
    else launch_scaled<FP8, Out, false>(x, scale, out, n, c, stream, "dequantize");
  });
  if (!ok) fail("dequantize (output) takes float32, float16 or bfloat16, not " + tn(out.type));
}

void scale_accumulator(const TensorRef& acc, const void* scale_a, const void* scale_b, const void* bias,
                       const TensorRef& out, cudaStream_t stream) {
  const i64 n = checked_volume(acc, "scale_accumulator", "the sums");
  if (checked_volume(out, "scale_accumulator", "the output") != n || acc.type != DataType::kINT32)
    fail("scale_accumulator: sums " + desc(acc) + " and output " + desc(out) + " must be int32 and of equal volume");
  const i64 columns = out.dims.rank() > 0 ? out.dims[out.dims.rank() - 1] : 1;
  if (bias && columns < 1) fail("scale_accumulator: a bias row for output " + desc(out) + " without columns");
  const bool ok = dev::with_float(out.type, [&](auto tag) {
    using Out = decltype(tag);
    if (n == 0) return;
    scale_accumulator_kernel<Out><<<blocks_for(n), kThreads, 0, stream>>>(
        static_cast<const std::int32_t*>(acc.data), static_cast<typename Out::T*>(out.data), n,
        static_cast<const float*>(scale_a), static_cast<const float*>(scale_b),
        static_cast<const typename Out::T*>(bias), columns);
    check_launch("scale_accumulator");
  });
  if (!ok) fail("scale_accumulator: the output must be float32, float16 or bfloat16, not " + tn(out.type));
}

void select(const TensorRef& condition, const TensorRef& then_input, const TensorRef& else_input, const TensorRef& out,
            cudaStream_t stream) {
  checked_volume(condition, "select", "the condition");
  checked_volume(then_input, "select", "input 1 (then)");
  checked_volume(else_input, "select", "input 2 (else)");
  const i64 n = checked_volume(out, "select", "the output");
  if (condition.type != DataType::kBOOL) fail("select: the condition has type " + tn(condition.type) + "; it must be bool");
  if (then_input.type != out.type || else_input.type != out.type)
    fail("select: inputs " + desc(then_input) + " and " + desc(else_input) + " must have the output's type " +
         tn(out.type));
  const TensorRef* refs[3] = {&condition, &then_input, &else_input};
  for (int i = 0; i < 3; ++i) {
    const Dims& d = refs[i]->dims;
    if (d.rank() != out.dims.rank())
      fail("select: input " + std::to_string(i) + " has dims " + d.str() + "; the output has " + out.dims.str());
    for (int k = 0; k < d.rank(); ++k)
      if (d[k] != out.dims[k] && d[k] != 1)
        fail("select: input " + std::to_string(i) + " dims " + d.str() + " do not broadcast to the output " +
             out.dims.str());
  }
  if (n == 0) return;
  const Dims* const ins[3] = {&condition.dims, &then_input.dims, &else_input.dims};
  const Plan<3> p = make_plan(ins, out.dims);
  switch (element_size(out.type)) {
    case 1: launch_select<std::uint8_t>(condition, then_input, else_input, out, n, p, stream); break;
    case 2: launch_select<std::uint16_t>(condition, then_input, else_input, out, n, p, stream); break;
    case 4: launch_select<std::uint32_t>(condition, then_input, else_input, out, n, p, stream); break;
    case 8: launch_select<std::uint64_t>(condition, then_input, else_input, out, n, p, stream); break;
    default: fail("select: unsupported element size " + std::to_string(element_size(out.type)));
  }
}

void copy(const TensorRef& x, const TensorRef& out, cudaStream_t stream) {
  const i64 n = checked_volume(x, "copy", "input");
  const i64 m = checked_volume(out, "copy", "output");
  if (x.type != out.type || n != m)
    fail("copy: input " + desc(x) + " and output " + desc(out) + " differ in type or volume");
  if (n == 0 || x.data == out.data) return;
  dev::check(cudaMemcpyAsync(out.data, x.data, static_cast<std::size_t>(n) * element_size(x.type),
                             cudaMemcpyDeviceToDevice, stream),
             "copy");
}

}  // namespace tensoracle::cuda
