// The CPU backend's elementwise (kernels.h): out = a OP b with broadcasting; each stored value is
// converted to its compute type, the result rounded to the output type once, when stored.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "backends/common/pointwise_checks.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/op_kernel.h"
#include "backends/cpu/kernels_util.h"

namespace tensoracle::cpu {

namespace {

using i64 = std::int64_t;
using namespace detail;  // kernels_util.h: fail, tn, the storage tags, with_float
using E = ElementWiseOperation;

// ---- elementwise ------------------------------------------------------------------------

// Both operands' strides over the output's dims (backends/common/broadcast.h): s[0] a's, s[1] b's.
using BroadcastPlan = backends::common::BroadcastPlan<2>;

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
  const i64* const sa = p.s[0];
  const i64* const sb = p.s[1];
  const i64 inner = p.d[m - 1], ia = sa[m - 1], ib = sb[m - 1];
  detail::parallel_ranges(n, [&](i64 begin, i64 end) {
    i64 idx[Dims::kMaxRank];
    i64 oa = 0, ob = 0, rem = begin;
    for (int k = m - 1; k >= 0; --k) {
      idx[k] = rem % p.d[k];
      rem /= p.d[k];
      oa += idx[k] * sa[k];
      ob += idx[k] * sb[k];
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
        oa += sa[k];
        ob += sb[k];
        if (idx[k] < p.d[k]) break;
        oa -= idx[k] * sa[k];
        ob -= idx[k] * sb[k];
        idx[k] = 0;
      }
    }
  });
}

[[noreturn]] void unsupported_op(E op, DataType t) { backends::common::elementwise_unsupported(detail::kFail, op, t); }

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

}  // namespace

void elementwise(ElementWiseOperation op, const TensorRef& a, const TensorRef& b, const TensorRef& out) {
  i64 n = 0;
  const BroadcastPlan plan = backends::common::check_elementwise(detail::kFail, op, a, b, out, n);
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

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kElementwiseKernel = {
    LayerType::kELEMENTWISE, nullptr, nullptr, [](const OpCall& c) {
      elementwise(std::get<ElementWiseParams>(c.node.params).op, ref(c.in[0]), ref(c.in[1]), ref(c.out));
    }};

}  // namespace ops

}  // namespace tensoracle::cpu
