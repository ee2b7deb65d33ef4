// The CUDA backend's elementwise (kernels.h), and sum_relu (elementwise(kSUM) then ReLU in one
// pass), with the CPU's semantics (backends/cpu/ops/elementwise.cpp). Broadcasting operands are
// walked through a host-side plan (pointwise_util.cuh); integer arithmetic, comparisons, min/max
// and division are bit-exact (IEEE round-to-nearest intrinsics, no contracted multiply-add).
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "backends/common/pointwise_checks.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/op_kernel.h"
#include "backends/cuda/pointwise_util.cuh"

namespace tensoracle::cuda {

namespace {

using namespace pointwise;  // pointwise_util.cuh
using E = ElementWiseOperation;

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

[[noreturn]] void unsupported_op(E op, DataType t) { backends::common::elementwise_unsupported(dev::kFail, op, t); }

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

// A sum rounded to the type, then ReLU: a residual add and the activation after it in one
// pass, with the values of the two layers (ReLU of a rounded value is exact).
template <class Tag>
struct SumRelu {
  __device__ float operator()(float x, float y) const {
    return Activation<A::kRELU>{0.f, 0.f}(Tag::load(Tag::store(x + y)));
  }
};

// elementwise()'s checks; false for an empty output (nothing to launch).
bool binary_args(E op, const TensorRef& a, const TensorRef& b, const TensorRef& out, cudaStream_t stream,
                 BinaryArgs& r) {
  i64 n = 0;
  const Plan<2> plan = backends::common::check_elementwise(dev::kFail, op, a, b, out, n);
  if (n == 0) return false;
  r = {a.data, b.data, out.data, n, plan, stream};
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

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kElementwiseKernel = {LayerType::kELEMENTWISE, nullptr, nullptr, [](const OpCall& c) {
      elementwise(std::get<ElementWiseParams>(c.node.params).op, ref(c.in[0]), ref(c.in[1]), ref(c.out), c.stream);
    }};

}  // namespace ops

}  // namespace tensoracle::cuda
