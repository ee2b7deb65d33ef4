// The CPU backend's unary (kernels.h): all 25 operations, float types computed in float32 and
// rounded once when stored.
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "backends/common/pointwise_checks.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/op_kernel.h"
#include "backends/cpu/kernels_util.h"
#include "backends/cpu/reduce_util.h"

namespace tensoracle::cpu {

namespace {

using namespace reduction;  // reduce_util.h
using U = UnaryOperation;

// ---- unary ------------------------------------------------------------------------------

constexpr i64 kUnaryParallelMin = 16 * 1024;

template <class In, class Out, class F>
void map_each(const TensorRef& x, const TensorRef& out, i64 n, F f) {
  const auto* in = static_cast<const typename In::T*>(x.data);
  auto* o = static_cast<typename Out::T*>(out.data);
  detail::parallel_ranges(
      n,
      [&](i64 b, i64 e) {
        TA_SIMD
        for (i64 i = b; i < e; ++i) o[i] = Out::store(f(In::load(in[i])));
      },
      kUnaryParallelMin);
}

// Round half to even, whatever the floating-point rounding mode.
inline float round_half_even(float v) noexcept {
  const float r = std::round(v);  // half away from zero
  if (std::fabs(v - std::trunc(v)) == 0.5f) return 2.0f * std::round(v * 0.5f);
  return r;
}

using backends::common::unary_name;

template <class FT>
void unary_float(U op, const TensorRef& x, const TensorRef& out, i64 n) {
  auto run = [&](auto f) { map_each<FT, FT>(x, out, n, f); };
  switch (op) {
    case U::kEXP: run([](float v) { return std::exp(v); }); break;
    case U::kLOG: run([](float v) { return std::log(v); }); break;
    case U::kSQRT: run([](float v) { return std::sqrt(v); }); break;
    case U::kRECIP: run([](float v) { return 1.0f / v; }); break;
    case U::kABS: run([](float v) { return std::fabs(v); }); break;
    case U::kNEG: run([](float v) { return -v; }); break;
    case U::kSIN: run([](float v) { return std::sin(v); }); break;
    case U::kCOS: run([](float v) { return std::cos(v); }); break;
    case U::kTAN: run([](float v) { return std::tan(v); }); break;
    case U::kSINH: run([](float v) { return std::sinh(v); }); break;
    case U::kCOSH: run([](float v) { return std::cosh(v); }); break;
    case U::kASIN: run([](float v) { return std::asin(v); }); break;
    case U::kACOS: run([](float v) { return std::acos(v); }); break;
    case U::kATAN: run([](float v) { return std::atan(v); }); break;
    case U::kASINH: run([](float v) { return std::asinh(v); }); break;
    case U::kACOSH: run([](float v) { return std::acosh(v); }); break;
    case U::kATANH: run([](float v) { return std::atanh(v); }); break;
    case U::kCEIL: run([](float v) { return std::ceil(v); }); break;
    case U::kFLOOR: run([](float v) { return std::floor(v); }); break;
    case U::kERF: run([](float v) { return detail::erf_float(v); }); break;
    case U::kROUND: run([](float v) { return round_half_even(v); }); break;
    // 1, -1, or the input itself for zeros and NaN.
    case U::kSIGN: run([](float v) { return v > 0.0f ? 1.0f : v < 0.0f ? -1.0f : v; }); break;
    case U::kISINF: map_each<FT, Bool>(x, out, n, [](float v) { return std::isinf(v); }); break;
    case U::kISNAN: map_each<FT, Bool>(x, out, n, [](float v) { return v != v; }); break;
    default: backends::common::unary_unsupported(detail::kFail, op, x.type);
  }
}

template <class I>
void unary_int(U op, const TensorRef& x, const TensorRef& out, i64 n) {
  using UI = std::make_unsigned_t<I>;
  using T = Int<I>;
  switch (op) {  // two's complement: ABS and NEG of the lowest value wrap to itself
    case U::kABS: map_each<T, T>(x, out, n, [](I v) { return v < 0 ? static_cast<I>(UI{0} - static_cast<UI>(v)) : v; }); break;
    case U::kNEG: map_each<T, T>(x, out, n, [](I v) { return static_cast<I>(UI{0} - static_cast<UI>(v)); }); break;
    case U::kSIGN: map_each<T, T>(x, out, n, [](I v) { return static_cast<I>((v > 0) - (v < 0)); }); break;
    default: backends::common::unary_unsupported(detail::kFail, op, x.type);
  }
}

}  // namespace

void unary(UnaryOperation op, const TensorRef& x, const TensorRef& out) {
  const i64 n = backends::common::check_unary(detail::kFail, op, x, out);
  switch (x.type) {
    case DataType::kFLOAT: unary_float<F32>(op, x, out, n); break;
    case DataType::kHALF: unary_float<F16>(op, x, out, n); break;
    case DataType::kBF16: unary_float<BF16>(op, x, out, n); break;
    case DataType::kINT32: unary_int<std::int32_t>(op, x, out, n); break;
    case DataType::kINT64: unary_int<std::int64_t>(op, x, out, n); break;
    case DataType::kBOOL:
      if (op != U::kNOT) fail(std::string("unary: ") + unary_name(op) + " does not take bool");
      map_each<Bool, Bool>(x, out, n, [](bool v) { return !v; });
      break;
    default: backends::common::unary_unsupported(detail::kFail, op, x.type);
  }
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kUnaryKernel = {
    LayerType::kUNARY, nullptr, nullptr,
    [](const OpCall& c) { unary(std::get<UnaryParams>(c.node.params).op, ref(c.in[0]), ref(c.out)); }};

}  // namespace ops

}  // namespace tensoracle::cpu
