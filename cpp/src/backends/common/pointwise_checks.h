// Internal to the backends: the host-side checks of the elementwise, select, unary, cast and
// quantize layers both backends run (backends/cpu/ops/*.cpp, backends/cuda/ops/*.cu), and the
// cast's type tables. Plain host C++ (checks.h).
#pragma once

#include <cstdint>
#include <string>

#include "backends/common/broadcast.h"
#include "backends/common/checks.h"
#include "tensoracle/network.h"

namespace tensoracle::backends::common {

// ---- elementwise, select -------------------------------------------------------------------

// Throws "elementwise: <op> does not take <type>".
[[noreturn]] void elementwise_unsupported(const Fail& fail, ElementWiseOperation op, DataType t);

// An elementwise layer's checks (volumes, types, broadcasting); sets n to the output's volume
// and returns the broadcast walk of a and b.
BroadcastPlan<2> check_elementwise(const Fail& fail, ElementWiseOperation op, const TensorRef& a, const TensorRef& b,
                                   const TensorRef& out, i64& n);

// A select's checks (volumes, types, each input broadcasting to the output); returns the
// output's volume.
i64 check_select(const Fail& fail, const TensorRef& condition, const TensorRef& then_input, const TensorRef& else_input,
                 const TensorRef& out);

// ---- scale, parametric ReLU ---------------------------------------------------------------------

// A scale's checks (ScaleParams). Element e of x reads coefficient (e / inner) % count of an
// operand whose `single[i]` is false (shift, scale, power), coefficient 0 of the others.
struct ScaleShape {
  i64 n = 0;
  i64 inner = 1, count = 1;
  bool single[3] = {true, true, true};
};
ScaleShape check_scale(const Fail& fail, const ScaleParams& p, const TensorRef& x, const TensorRef& shift,
                       const TensorRef& scale, const TensorRef& power, const TensorRef& out);
// A parametric ReLU's checks (the slope broadcasting to x); sets n to the volume and returns
// the broadcast walk of x and the slope.
BroadcastPlan<2> check_parametric_relu(const Fail& fail, const TensorRef& x, const TensorRef& slope, const TensorRef& out,
                                       i64& n);

// ---- unary -----------------------------------------------------------------------------------

// Throws "unary: <op> does not take <type>".
[[noreturn]] void unary_unsupported(const Fail& fail, UnaryOperation op, DataType t);

// A unary layer's checks (volumes, the operation, the output's type and dims); returns the
// input's volume.
i64 check_unary(const Fail& fail, UnaryOperation op, const TensorRef& x, const TensorRef& out);

// ---- cast ------------------------------------------------------------------------------------

// A cast's checks (volumes, in place only between types of one size); returns the volume.
i64 check_cast(const Fail& fail, const TensorRef& x, const TensorRef& out);

// Calls f(Tag{}) with the backend's tag of type t (a cast's source, or its destination: `to`):
// Float, Half, BFloat16 for the float types, Integer<I> for the integers, Boolean for bool.
template <class Float, class Half, class BFloat16, template <class> class Integer, class Boolean, class F>
void with_cast_type(const Fail& fail, DataType t, bool to, F&& f) {
  switch (t) {
    case DataType::kFLOAT: f(Float{}); return;
    case DataType::kHALF: f(Half{}); return;
    case DataType::kBF16: f(BFloat16{}); return;
    case DataType::kINT8: f(Integer<std::int8_t>{}); return;
    case DataType::kINT32: f(Integer<std::int32_t>{}); return;
    case DataType::kINT64: f(Integer<std::int64_t>{}); return;
    case DataType::kUINT8: f(Integer<std::uint8_t>{}); return;
    case DataType::kBOOL: f(Boolean{}); return;
    default:
      fail(to ? "cast: cannot cast to " + tn(t) + " (fp8 comes from quantize)"
              : "cast: cannot cast from " + tn(t) + " (fp8 leaves through dequantize)");
  }
}

// ---- quantize / dequantize -------------------------------------------------------------------

// Per-tensor (one scale) or per-channel along `axis`: element i uses scale[(i / inner) % channels].
struct QuantizeChannels {
  i64 channels = 1;
  i64 inner = 1;
};

// What a quantize (dequantize: quantize false) checks of its tensors, and its channels.
struct QuantizeShape {
  i64 n = 0;   // elements
  i64 ns = 0;  // scales
  QuantizeChannels channels;
};
QuantizeShape check_quantize(const Fail& fail, bool quantize, const TensorRef& x, const TensorRef& scale, int axis,
                             const TensorRef& out);

}  // namespace tensoracle::backends::common
