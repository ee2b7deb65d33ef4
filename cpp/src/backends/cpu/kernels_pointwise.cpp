// The CPU backend's pointwise kernels: elementwise, activation, cast, quantize, dequantize.
//
// Every kernel converts each stored value to its compute type (float for the float types,
// the integer itself for int32/int64, bool for bool), applies the operation, and rounds the
// result to the output type once, when stored (kernels.h states the shared semantics).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_util.h"
#include "core/numeric.h"
#include "tensoracle/errors.h"

namespace tensoracle::cpu {

namespace {

using i64 = std::int64_t;
using detail::fail;
using detail::BF16;
using detail::Bool;
using detail::F16;
using detail::F32;
using detail::Int;
using detail::with_float;
using E = ElementWiseOperation;

// Vectorizes a contiguous loop even where the build's optimization level would not (GCC's
// -O2 cost model) and without alias checks. Safe here: an output may alias an input only
// exactly (same element index), which a vector loop handles like a scalar one.
#ifdef _OPENMP
#define TENSORACLE_SIMD _Pragma("omp simd")
#else
#define TENSORACLE_SIMD
#endif

std::string tn(DataType t) { return std::string(type_name(t)); }

// ---- storage tags: T is the stored type, load() gives the compute value, store() rounds it --

// fp8 e4m3fn; stores saturate to ±448 (quantize's rule), NaN stays NaN.
struct FP8 {
  using T = std::uint8_t;
  static float load(T v) noexcept { return core::fp8_e4m3_to_float(v); }
  static T store(float x) noexcept { return core::float_to_fp8_e4m3(x, /*saturate=*/true); }
};
// int8 as a quantized type: stores round half to even and saturate; NaN gives 0.
struct QI8 {
  using T = std::int8_t;
  static float load(T v) noexcept { return static_cast<float>(v); }
  static T store(float x) noexcept {
    float r = std::nearbyint(x);  // the default rounding mode: to nearest, ties to even
    if (!(r == r)) return 0;
    return r >= 127.f ? T{127} : r <= -128.f ? T{-128} : static_cast<T>(r);
  }
};
// ---- elementwise ------------------------------------------------------------------------

// Both operands' strides (in elements; 0 on broadcast dims) over the output's dims, after
// dropping size-1 dims and merging adjacent dims across which both operands stay contiguous.
// Equal shapes collapse to one dim with strides (1, 1), a scalar operand to stride 0, a bias
// row to dims (rows, n) with strides (n, 1) and (0, 1), a column to (rows, n), (1, 0).
struct BroadcastPlan {
  int rank = 0;
  i64 dims[Dims::kMaxRank] = {};
  i64 sa[Dims::kMaxRank] = {};
  i64 sb[Dims::kMaxRank] = {};
};


BroadcastPlan plan_broadcast(const Dims& a, const Dims& b, const Dims& out) {
  const int r = out.rank();
  auto mismatch = [&] {
    fail("elementwise: inputs " + a.str() + " and " + b.str() + " do not broadcast to the output " + out.str());
  };
  if (a.rank() != r || b.rank() != r) mismatch();
  i64 stride_a[Dims::kMaxRank], stride_b[Dims::kMaxRank];
  i64 ca = 1, cb = 1;
  for (int i = r - 1; i >= 0; --i) {
    if ((a[i] != out[i] && a[i] != 1) || (b[i] != out[i] && b[i] != 1)) mismatch();
    stride_a[i] = a[i] == 1 ? 0 : ca;
    stride_b[i] = b[i] == 1 ? 0 : cb;
    ca *= a[i];
    cb *= b[i];
  }
  BroadcastPlan p;
  for (int i = 0; i < r; ++i) {
    const i64 n = out[i];
    if (n == 1) continue;
    const int last = p.rank - 1;
    if (last >= 0 && p.sa[last] == stride_a[i] * n && p.sb[last] == stride_b[i] * n) {
      p.dims[last] *= n;  // the previous dim and this one walk both operands as one
      p.sa[last] = stride_a[i];
      p.sb[last] = stride_b[i];
    } else {
      p.dims[p.rank] = n;
      p.sa[p.rank] = stride_a[i];
      p.sb[p.rank] = stride_b[i];
      ++p.rank;
    }
  }
  if (p.rank == 0) {  // every dim is 1: one element
    p.rank = 1;
    p.dims[0] = 1;
  }
  return p;
}

// o[0, len) = a OP b, where each operand advances by its stride (0 or 1) per element.
// o may alias a or b only where that operand's stride is 1 (same dims as the output).
template <class In, class Out, class Op>
inline void binary_span(const typename In::T* a, i64 ia, const typename In::T* b, i64 ib, typename Out::T* o,
                        i64 len, const Op& op) {
  if (ia == 1 && ib == 1) {
    TENSORACLE_SIMD
    for (i64 i = 0; i < len; ++i) o[i] = Out::store(op(In::load(a[i]), In::load(b[i])));
  } else if (ia == 1) {
    const auto y = In::load(*b);
    TENSORACLE_SIMD
    for (i64 i = 0; i < len; ++i) o[i] = Out::store(op(In::load(a[i]), y));
  } else if (ib == 1) {
    const auto x = In::load(*a);
    TENSORACLE_SIMD
    for (i64 i = 0; i < len; ++i) o[i] = Out::store(op(x, In::load(b[i])));
  } else {
    const auto v = Out::store(op(In::load(*a), In::load(*b)));
    std::fill_n(o, len, v);
  }
}

// out (contiguous, n elements) = a OP b over the plan. Each thread takes a contiguous range of
// the output and walks it row by row (a row: the plan's last dim) with an odometer.
template <class In, class Out, class Op>
void run_binary(const BroadcastPlan& p, const void* av, const void* bv, void* ov, i64 n, Op op) {
  const auto* a = static_cast<const typename In::T*>(av);
  const auto* b = static_cast<const typename In::T*>(bv);
  auto* o = static_cast<typename Out::T*>(ov);
  const int m = p.rank;
  const i64 inner = p.dims[m - 1], ia = p.sa[m - 1], ib = p.sb[m - 1];
  detail::parallel_ranges(n, [&](i64 begin, i64 end) {
    i64 idx[Dims::kMaxRank];
    i64 oa = 0, ob = 0, rem = begin;
    for (int k = m - 1; k >= 0; --k) {
      idx[k] = rem % p.dims[k];
      rem /= p.dims[k];
      oa += idx[k] * p.sa[k];
      ob += idx[k] * p.sb[k];
    }
    i64 pos = begin;
    while (true) {
      const i64 len = std::min(inner - idx[m - 1], end - pos);
      binary_span<In, Out>(a + oa, ia, b + ob, ib, o + pos, len, op);
      pos += len;
      if (pos >= end) break;
      // The row is done: back to its start, then carry into the outer dims.
      oa -= idx[m - 1] * ia;
      ob -= idx[m - 1] * ib;
      idx[m - 1] = 0;
      for (int k = m - 2; k >= 0; --k) {
        ++idx[k];
        oa += p.sa[k];
        ob += p.sb[k];
        if (idx[k] < p.dims[k]) break;
        oa -= idx[k] * p.sa[k];
        ob -= idx[k] * p.sb[k];
        idx[k] = 0;
      }
    }
  });
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

struct BinaryArgs {
  const BroadcastPlan& plan;
  const TensorRef& a;
  const TensorRef& b;
  const TensorRef& out;
  i64 n;
  template <class In, class Out, class Op>
  void run(Op op) const {
    run_binary<In, Out>(plan, a.data, b.data, out.data, n, op);
  }
};

// Float MAX and MIN propagate NaN: when either operand is NaN the result is NaN (unlike
// IEEE fmax/fmin and CUDA's fmaxf, which return the other operand).
template <class FT>
void elementwise_float(E op, const BinaryArgs& r) {
  switch (op) {
    case E::kSUM: r.run<FT, FT>([](float x, float y) { return x + y; }); break;
    case E::kPROD: r.run<FT, FT>([](float x, float y) { return x * y; }); break;
    case E::kSUB: r.run<FT, FT>([](float x, float y) { return x - y; }); break;
    case E::kDIV: r.run<FT, FT>([](float x, float y) { return x / y; }); break;
    case E::kPOW: r.run<FT, FT>([](float x, float y) { return std::pow(x, y); }); break;
    case E::kFLOOR_DIV: r.run<FT, FT>([](float x, float y) { return std::floor(x / y); }); break;
    case E::kMAX:
      r.run<FT, FT>([](float x, float y) { return (x != x || y != y) ? x + y : (x < y ? y : x); });
      break;
    case E::kMIN:
      r.run<FT, FT>([](float x, float y) { return (x != x || y != y) ? x + y : (y < x ? y : x); });
      break;
    case E::kEQUAL: r.run<FT, Bool>([](float x, float y) { return x == y; }); break;
    case E::kGREATER: r.run<FT, Bool>([](float x, float y) { return x > y; }); break;
    case E::kLESS: r.run<FT, Bool>([](float x, float y) { return x < y; }); break;
    default: unsupported_op(op, r.a.type);
  }
}

// Two's complement wraparound through the unsigned type; DIV truncates, FLOOR_DIV rounds
// toward negative infinity; a zero divisor gives 0; MIN / -1 wraps to MIN.
template <class I>
void elementwise_int(E op, const BinaryArgs& r) {
  using U = std::make_unsigned_t<I>;
  using T = Int<I>;
  switch (op) {
    case E::kSUM: r.run<T, T>([](I x, I y) { return static_cast<I>(static_cast<U>(x) + static_cast<U>(y)); }); break;
    case E::kSUB: r.run<T, T>([](I x, I y) { return static_cast<I>(static_cast<U>(x) - static_cast<U>(y)); }); break;
    case E::kPROD: r.run<T, T>([](I x, I y) { return static_cast<I>(static_cast<U>(x) * static_cast<U>(y)); }); break;
    case E::kMAX: r.run<T, T>([](I x, I y) { return x < y ? y : x; }); break;
    case E::kMIN: r.run<T, T>([](I x, I y) { return y < x ? y : x; }); break;
    case E::kDIV:
      r.run<T, T>([](I x, I y) -> I {
        if (y == 0) return 0;
        if (y == -1) return static_cast<I>(U{0} - static_cast<U>(x));
        return static_cast<I>(x / y);
      });
      break;
    case E::kFLOOR_DIV:
      r.run<T, T>([](I x, I y) -> I {
        if (y == 0) return 0;
        if (y == -1) return static_cast<I>(U{0} - static_cast<U>(x));
        I q = static_cast<I>(x / y);
        if (x % y != 0 && ((x < 0) != (y < 0))) --q;
        return q;
      });
      break;
    case E::kEQUAL: r.run<T, Bool>([](I x, I y) { return x == y; }); break;
    case E::kGREATER: r.run<T, Bool>([](I x, I y) { return x > y; }); break;
    case E::kLESS: r.run<T, Bool>([](I x, I y) { return x < y; }); break;
    default: unsupported_op(op, r.a.type);
  }
}

void elementwise_bool(E op, const BinaryArgs& r) {
  switch (op) {
    case E::kAND: r.run<Bool, Bool>([](bool x, bool y) { return x && y; }); break;
    case E::kOR: r.run<Bool, Bool>([](bool x, bool y) { return x || y; }); break;
    case E::kXOR: r.run<Bool, Bool>([](bool x, bool y) { return x != y; }); break;
    case E::kEQUAL: r.run<Bool, Bool>([](bool x, bool y) { return x == y; }); break;
    default: unsupported_op(op, r.a.type);
  }
}

// ---- activation -------------------------------------------------------------------------

template <class FT, class F>
void run_unary(const TensorRef& x, const TensorRef& out, i64 n, F f) {
  const auto* in = static_cast<const typename FT::T*>(x.data);
  auto* o = static_cast<typename FT::T*>(out.data);
  detail::parallel_ranges(n, [&](i64 b, i64 e) {
    TENSORACLE_SIMD
    for (i64 i = b; i < e; ++i) o[i] = FT::store(f(FT::load(in[i])));
  });
}

// TensorRT's formulas, in float. NaN in gives NaN out for every activation (RELU, CLIP,
// HARD_SIGMOID and THRESHOLDED_RELU included: their comparisons are written so NaN passes).
template <class FT>
void activation_typed(const ActivationParams& p, const TensorRef& x, const TensorRef& out, i64 n) {
  const float al = p.alpha, be = p.beta;
  auto run = [&](auto f) { run_unary<FT>(x, out, n, f); };
  using A = ActivationType;
  switch (p.type) {
    case A::kRELU: run([](float v) { return (v > 0.f || v != v) ? v : 0.f; }); break;
    case A::kSIGMOID: run([](float v) { return 1.f / (1.f + std::exp(-v)); }); break;
    case A::kTANH: run([](float v) { return std::tanh(v); }); break;
    case A::kLEAKY_RELU: run([al](float v) { return v >= 0.f ? v : al * v; }); break;
    case A::kELU: run([al](float v) { return v >= 0.f ? v : al * std::expm1(v); }); break;
    case A::kSELU: run([al, be](float v) { return be * (v > 0.f ? v : al * std::expm1(v)); }); break;
    case A::kSOFTSIGN: run([](float v) { return v / (1.f + std::fabs(v)); }); break;
    case A::kSOFTPLUS:
      // alpha * log(exp(t) + 1) with t = beta * x, as log1p(exp(-|t|)) + max(t, 0): no overflow.
      run([al, be](float v) {
        const float t = be * v;
        return al * (std::log1p(std::exp(-std::fabs(t))) + (t < 0.f ? 0.f : t));
      });
      break;
    case A::kCLIP:  // max(alpha, min(beta, x)), also when alpha > beta (then alpha)
      run([al, be](float v) {
        const float m = v > be ? be : v;
        return m < al ? al : m;
      });
      break;
    case A::kHARD_SIGMOID:
      run([al, be](float v) {
        const float t = al * v + be;
        const float m = t > 1.f ? 1.f : t;
        return m < 0.f ? 0.f : m;
      });
      break;
    case A::kSCALED_TANH: run([al, be](float v) { return al * std::tanh(be * v); }); break;
    case A::kTHRESHOLDED_RELU: run([al](float v) { return (v > al || v != v) ? v : 0.f; }); break;
    case A::kGELU_ERF:
      run([](float v) { return 0.5f * v * (1.f + detail::erf_float(v * 0.70710678118654752f)); });
      break;
    case A::kGELU_TANH:
      run([](float v) {
        const float u = 0.79788456080286536f * (v + 0.044715f * v * v * v);  // sqrt(2/pi)
        return 0.5f * v * (1.f + std::tanh(u));
      });
      break;
    default: fail("activation: unknown activation type " + std::to_string(static_cast<int>(p.type)));
  }
}

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

// ---- quantize / dequantize --------------------------------------------------------------

// Per-tensor (one scale) or per-channel along `axis`: element i uses scale[(i / inner) % channels].
struct Channels {
  i64 channels = 1;
  i64 inner = 1;
};

Channels channels_of(const Dims& d, i64 scale_count, int axis, const char* kernel) {
  Channels c;
  if (scale_count == 1) {
    c.inner = std::max<i64>(1, d.volume());
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

std::vector<float> load_scales(const TensorRef& scale, i64 count, DataType value_type, const char* kernel) {
  if (scale.type != DataType::kFLOAT && scale.type != value_type)
    fail(std::string(kernel) + ": the scale has type " + tn(scale.type) + "; it must be float32 or " + tn(value_type));
  std::vector<float> s(static_cast<std::size_t>(count));
  with_float(scale.type, std::string(kernel) + ": the scale", [&](auto tag) {
    using FT = decltype(tag);
    const auto* p = static_cast<const typename FT::T*>(scale.data);
    for (i64 i = 0; i < count; ++i) s[static_cast<std::size_t>(i)] = FT::load(p[i]);
  });
  return s;
}

// out[i] = Out::store(f(In::load(x[i]), scale of i)).
template <class In, class Out, class F>
void run_scaled(const void* xv, void* ov, i64 n, const Channels& c, const std::vector<float>& s, F f) {
  const auto* in = static_cast<const typename In::T*>(xv);
  auto* o = static_cast<typename Out::T*>(ov);
  detail::parallel_ranges(n, [&](i64 begin, i64 end) {
    i64 i = begin;
    while (i < end) {
      const i64 row = i / c.inner;
      const i64 stop = std::min(end, (row + 1) * c.inner);
      const float sc = s[static_cast<std::size_t>(row % c.channels)];
      TENSORACLE_SIMD
      for (i64 j = i; j < stop; ++j) o[j] = Out::store(f(In::load(in[j]), sc));
      i = stop;
    }
  });
}

}  // namespace

void elementwise(ElementWiseOperation op, const TensorRef& a, const TensorRef& b, const TensorRef& out) {
  detail::checked_volume(a, "elementwise", "input 0");
  detail::checked_volume(b, "elementwise", "input 1");
  const i64 n = detail::checked_volume(out, "elementwise", "the output");
  if (a.type != b.type) fail("elementwise: inputs have types " + tn(a.type) + " and " + tn(b.type) + "; they must match");
  const bool compare = op == E::kEQUAL || op == E::kGREATER || op == E::kLESS;
  const DataType want = compare ? DataType::kBOOL : a.type;
  if (out.type != want)
    fail(std::string("elementwise: ") + op_name(op) + " of " + tn(a.type) + " gives " + tn(want) +
         ", not " + tn(out.type));
  const BroadcastPlan plan = plan_broadcast(a.dims, b.dims, out.dims);
  if (n == 0) return;
  const BinaryArgs r{plan, a, b, out, n};
  switch (a.type) {
    case DataType::kFLOAT: elementwise_float<F32>(op, r); break;
    case DataType::kHALF: elementwise_float<F16>(op, r); break;
    case DataType::kBF16: elementwise_float<BF16>(op, r); break;
    case DataType::kINT32: elementwise_int<std::int32_t>(op, r); break;
    case DataType::kINT64: elementwise_int<std::int64_t>(op, r); break;
    case DataType::kBOOL: elementwise_bool(op, r); break;
    default: unsupported_op(op, a.type);
  }
}

void activation(const ActivationParams& p, const TensorRef& x, const TensorRef& out) {
  const i64 n = detail::checked_volume(x, "activation", "the input");
  if (detail::checked_volume(out, "activation", "the output") != n || out.type != x.type)
    fail("activation: the output " + tn(out.type) + out.dims.str() + " differs from the input " + tn(x.type) +
         x.dims.str());
  with_float(x.type, "activation", [&](auto tag) {
    if (n > 0) activation_typed<decltype(tag)>(p, x, out, n);
  });
}

void cast(const TensorRef& x, const TensorRef& out) {
  const i64 n = detail::checked_volume(x, "cast", "the input");
  if (detail::checked_volume(out, "cast", "the output") != n)
    fail("cast: the output dims " + out.dims.str() + " differ from the input's " + x.dims.str());
  if (n > 0 && x.data == out.data && element_size(x.type) != element_size(out.type))
    fail("cast: in place needs types of one size, not " + tn(x.type) + " and " + tn(out.type));
  with_cast_source(x.type, [&](auto s) {
    with_cast_dest(out.type, [&](auto d) {
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

void quantize(const TensorRef& x, const TensorRef& scale, int axis, const TensorRef& out) {
  const i64 n = detail::checked_volume(x, "quantize", "the input");
  const i64 ns = detail::checked_volume(scale, "quantize", "the scale");
  if (detail::checked_volume(out, "quantize", "the output") != n)
    fail("quantize: the output dims " + out.dims.str() + " differ from the input's " + x.dims.str());
  if (out.type != DataType::kINT8 && out.type != DataType::kFP8)
    fail("quantize: the output type " + tn(out.type) + " is not int8 or fp8");
  if (ns < 1) fail("quantize: the scale is empty");
  const Channels c = channels_of(x.dims, ns, axis, "quantize");
  with_float(x.type, "quantize", [&](auto tag) {
    using In = decltype(tag);
    const std::vector<float> s = load_scales(scale, ns, x.type, "quantize");
    if (n == 0) return;
    auto f = [](float v, float sc) { return v / sc; };
    if (out.type == DataType::kINT8) run_scaled<In, QI8>(x.data, out.data, n, c, s, f);
    else run_scaled<In, FP8>(x.data, out.data, n, c, s, f);
  });
}

void dequantize(const TensorRef& x, const TensorRef& scale, int axis, const TensorRef& out) {
  const i64 n = detail::checked_volume(x, "dequantize", "the input");
  const i64 ns = detail::checked_volume(scale, "dequantize", "the scale");
  if (detail::checked_volume(out, "dequantize", "the output") != n)
    fail("dequantize: the output dims " + out.dims.str() + " differ from the input's " + x.dims.str());
  if (x.type != DataType::kINT8 && x.type != DataType::kFP8)
    fail("dequantize: the input type " + tn(x.type) + " is not int8 or fp8");
  if (ns < 1) fail("dequantize: the scale is empty");
  const Channels c = channels_of(x.dims, ns, axis, "dequantize");
  with_float(out.type, "dequantize (output)", [&](auto tag) {
    using Out = decltype(tag);
    const std::vector<float> s = load_scales(scale, ns, out.type, "dequantize");
    if (n == 0) return;
    auto f = [](float q, float sc) { return q * sc; };
    if (x.type == DataType::kINT8) run_scaled<QI8, Out>(x.data, out.data, n, c, s, f);
    else run_scaled<FP8, Out>(x.data, out.data, n, c, s, f);
  });
}

}  // namespace tensoracle::cpu
