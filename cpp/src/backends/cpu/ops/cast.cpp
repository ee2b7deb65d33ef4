// The CPU backend's cast (kernels.h): any supported type to any (float to integer truncates and
// saturates, NaN gives 0).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backends/common/pointwise_checks.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/op_kernel.h"
#include "backends/cpu/kernels_util.h"

namespace tensoracle::cpu {

namespace {

using i64 = std::int64_t;
using namespace detail;  // kernels_util.h: fail, tn, the storage tags, with_float

// ---- cast -------------------------------------------------------------------------------

// Sources load as float (float types) or int64 (integers and bool, exactly).
template <class I>
struct SrcInt {
  using T = I;
  static i64 load(T v) noexcept { return static_cast<i64>(v); }
};
struct SrcBool {
  using T = std::uint8_t;
  static i64 load(T v) noexcept { return v != 0 ? 1 : 0; }
};

// float to integer: truncate toward zero, saturate to the range, NaN gives 0.
template <class I>
I float_to_int(float x) noexcept {
  constexpr float hi = static_cast<float>(std::numeric_limits<I>::max() / 2 + 1) * 2.f;  // max + 1, exact
  constexpr float lo = std::is_signed_v<I> ? -hi : 0.f;                                  // min, exact
  if (x != x) return 0;
  if (x >= hi) return std::numeric_limits<I>::max();
  if (x <= lo) return std::numeric_limits<I>::min();
  return static_cast<I>(x);
}

// |v| rounded to 24 significant bits with the dropped bits ORed into the last one (round to
// odd). Rounding that float to half or bfloat16 then equals rounding v once, to nearest even:
// no double-rounding error for integers beyond 2^24.
float int_to_float_round_odd(i64 v) noexcept {
  std::uint64_t u = v < 0 ? std::uint64_t{0} - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
  float m;
  const int w = std::bit_width(u);
  if (w <= 24) {
    m = static_cast<float>(u);
  } else {
    const int s = w - 24;
    std::uint64_t t = u >> s;
    if (u & ((std::uint64_t{1} << s) - 1)) t |= 1;
    m = std::ldexp(static_cast<float>(t), s);
  }
  return v < 0 ? -m : m;
}

// Destinations convert from float or from int64.
template <class I>
struct DstInt {
  using T = I;
  static T from(float x) noexcept { return float_to_int<I>(x); }
  static T from(i64 v) noexcept { return static_cast<T>(v); }  // wraps (two's complement)
};
struct DstBool {
  using T = std::uint8_t;
  static T from(float x) noexcept { return x != 0.f ? 1 : 0; }  // NaN != 0: true
  static T from(i64 v) noexcept { return v != 0 ? 1 : 0; }
};
struct DstF32 {
  using T = float;
  static T from(float x) noexcept { return x; }
  static T from(i64 v) noexcept { return static_cast<float>(v); }  // round to nearest even
};
template <class FT>
struct DstNarrow {
  using T = typename FT::T;
  static T from(float x) noexcept { return FT::store(x); }
  static T from(i64 v) noexcept { return FT::store(int_to_float_round_odd(v)); }
};

template <class S, class D>
void cast_typed(const void* xv, void* ov, i64 n) {
  using ST = typename S::T;
  using DT = typename D::T;
  const auto* in = static_cast<const ST*>(xv);
  auto* out = static_cast<DT*>(ov);
  if constexpr (sizeof(ST) == sizeof(DT)) {
    if (xv == ov) {
      // In place: convert blocks through local buffers, so no element is read after its bytes
      // were overwritten and the bytes are never accessed as two types.
      detail::parallel_ranges(n, [&](i64 b, i64 e) {
        constexpr i64 kBlock = 256;
        ST src[kBlock];
        DT dst[kBlock];
        for (i64 i = b; i < e; i += kBlock) {
          const i64 k = std::min(kBlock, e - i);
          std::memcpy(src, reinterpret_cast<const unsigned char*>(in) + i * sizeof(ST),
                      static_cast<std::size_t>(k) * sizeof(ST));
          for (i64 j = 0; j < k; ++j) dst[j] = D::from(S::load(src[j]));
          std::memcpy(reinterpret_cast<unsigned char*>(out) + i * sizeof(DT), dst,
                      static_cast<std::size_t>(k) * sizeof(DT));
        }
      });
      return;
    }
  }
  detail::parallel_ranges(n, [&](i64 b, i64 e) {
    TENSORACLE_SIMD
    for (i64 i = b; i < e; ++i) out[i] = D::from(S::load(in[i]));
  });
}

}  // namespace

void cast(const TensorRef& x, const TensorRef& out) {
  const i64 n = backends::common::check_cast(detail::kFail, x, out);
  using backends::common::with_cast_type;  // the type tables, over this backend's tags
  with_cast_type<F32, F16, BF16, SrcInt, SrcBool>(detail::kFail, x.type, false, [&](auto s) {
    with_cast_type<DstF32, DstNarrow<F16>, DstNarrow<BF16>, DstInt, DstBool>(detail::kFail, out.type, true, [&](auto d) {
      if (n == 0) return;
      if (x.type == out.type) {
        if (x.data != out.data)
          std::memcpy(out.data, x.data, static_cast<std::size_t>(n) * element_size(x.type));
        return;
      }
      cast_typed<decltype(s), decltype(d)>(x.data, out.data, n);
    });
  });
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kCastKernel = {LayerType::kCAST, nullptr, nullptr,
                                    [](const OpCall& c) { cast(ref(c.in[0]), ref(c.out)); }};

}  // namespace ops

}  // namespace tensoracle::cpu
