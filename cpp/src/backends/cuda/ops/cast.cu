// The CUDA backend's cast (kernels.h), bit-exact with the CPU's (backends/cpu/ops/cast.cpp):
// float to integer truncates and saturates (NaN gives 0); to bool: != 0.
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "backends/common/pointwise_checks.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/op_kernel.h"
#include "backends/cuda/pointwise_util.cuh"

namespace tensoracle::cuda {

namespace {

using namespace pointwise;  // pointwise_util.cuh

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

}  // namespace

void cast(const TensorRef& x, const TensorRef& out, cudaStream_t stream) {
  const i64 n = backends::common::check_cast(dev::kFail, x, out);
  using backends::common::with_cast_type;  // the type tables, over this backend's tags
  with_cast_type<F32, F16, BF16, SrcInt, SrcBool>(dev::kFail, x.type, false, [&](auto s) {
    with_cast_type<DstF32, DstNarrow<F16>, DstNarrow<BF16>, DstInt, DstBool>(dev::kFail, out.type, true, [&](auto d) {
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

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kCastKernel = {LayerType::kCAST, nullptr, nullptr, [](const OpCall& c) {
      cast(ref(c.in[0]), ref(c.out), c.stream);
    }};

}  // namespace ops

}  // namespace tensoracle::cuda
