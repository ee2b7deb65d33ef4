// The CPU backend's activation (kernels.h): float types computed in float32, rounded once when
// stored; out may alias x.
#include <cmath>
#include <cstdint>
#include <string>

#include "backends/cpu/kernels.h"
#include "backends/cpu/op_kernel.h"
#include "backends/cpu/kernels_util.h"

namespace tensoracle::cpu {

namespace {

using i64 = std::int64_t;
using namespace detail;  // kernels_util.h: fail, tn, the storage tags, with_float

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

}  // namespace

void activation(const ActivationParams& p, const TensorRef& x, const TensorRef& out) {
  const i64 n = detail::checked_volume(x, "activation", "the input");
  if (detail::checked_volume(out, "activation", "the output") != n || out.type != x.type)
    fail("activation: the output " + tn(out.type) + out.dims.str() + " differs from the input " + tn(x.type) +
         x.dims.str());
  with_float(x.type, "activation", [&](auto tag) {
    if (n > 0) activation_typed<decltype(tag)>(p, x, out, n);
  });
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kActivationKernel = {
    LayerType::kACTIVATION, nullptr, nullptr, [](const OpCall& c) {
      activation(std::get<ActivationParams>(c.node.params), ref(c.in[0]), ref(c.out));
    }};

}  // namespace ops

}  // namespace tensoracle::cpu
