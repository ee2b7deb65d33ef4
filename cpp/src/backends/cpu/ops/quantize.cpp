// The CPU backend's quantize and dequantize (kernels.h): per-tensor or per-channel scales; int8
// and fp8 e4m3 stores round half to even and saturate.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/common/pointwise_checks.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/op_kernel.h"
#include "backends/cpu/kernels_util.h"
#include "core/numeric.h"

namespace tensoracle::cpu {

namespace {

using i64 = std::int64_t;
using namespace detail;  // kernels_util.h: fail, tn, the storage tags, with_float

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

// ---- quantize / dequantize --------------------------------------------------------------

// Per-tensor (one scale) or per-channel along `axis`: element i uses scale[(i / inner) % channels].
using Channels = backends::common::QuantizeChannels;

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

void quantize(const TensorRef& x, const TensorRef& scale, int axis, const TensorRef& out) {
  const backends::common::QuantizeShape shape = backends::common::check_quantize(detail::kFail, true, x, scale, axis, out);
  const i64 n = shape.n, ns = shape.ns;
  const Channels c = shape.channels;
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
  const backends::common::QuantizeShape shape = backends::common::check_quantize(detail::kFail, false, x, scale, axis, out);
  const i64 n = shape.n, ns = shape.ns;
  const Channels c = shape.channels;
  with_float(out.type, "dequantize (output)", [&](auto tag) {
    using Out = decltype(tag);
    const std::vector<float> s = load_scales(scale, ns, out.type, "dequantize");
    if (n == 0) return;
    auto f = [](float q, float sc) { return q * sc; };
    if (x.type == DataType::kINT8) run_scaled<QI8, Out>(x.data, out.data, n, c, s, f);
    else run_scaled<FP8, Out>(x.data, out.data, n, c, s, f);
  });
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

namespace {

int norm_axis(int axis, int rank) { return axis < 0 ? axis + rank : axis; }

}  // namespace

extern const OpKernel kQuantizeKernel = {
    LayerType::kQUANTIZE, nullptr, nullptr, [](const OpCall& c) {
      const auto& p = std::get<QuantizeParams>(c.node.params);
      quantize(ref(c.in[0]), ref(c.in[1]), norm_axis(p.axis, c.in[0].dims.rank()), ref(c.out));
    }};

extern const OpKernel kDequantizeKernel = {
    LayerType::kDEQUANTIZE, nullptr, nullptr, [](const OpCall& c) {
      const auto& p = std::get<DequantizeParams>(c.node.params);
      dequantize(ref(c.in[0]), ref(c.in[1]), norm_axis(p.axis, c.in[0].dims.rank()), ref(c.out));
    }};

}  // namespace ops

}  // namespace tensoracle::cpu
