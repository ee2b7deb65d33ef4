// The host-side checks of the pointwise layers both backends share (pointwise_checks.h).
#include "backends/common/pointwise_checks.h"

#include <string>

namespace tensoracle::backends::common {

void elementwise_unsupported(const Fail& fail, ElementWiseOperation op, DataType t) {
  fail(std::string("elementwise: ") + elementwise_name(op) + " does not take " + tn(t));
}

BroadcastPlan<2> check_elementwise(const Fail& fail, ElementWiseOperation op, const TensorRef& a, const TensorRef& b,
                                   const TensorRef& out, i64& n) {
  using E = ElementWiseOperation;
  checked_volume(fail, a, "elementwise", "input 0");
  checked_volume(fail, b, "elementwise", "input 1");
  n = checked_volume(fail, out, "elementwise", "the output");
  if (a.type != b.type) fail("elementwise: inputs have types " + tn(a.type) + " and " + tn(b.type) + "; they must match");
  const bool compare = op == E::kEQUAL || op == E::kGREATER || op == E::kLESS;
  const DataType want = compare ? DataType::kBOOL : a.type;
  if (out.type != want)
    fail(std::string("elementwise: ") + elementwise_name(op) + " of " + tn(a.type) + " gives " + tn(want) + ", not " +
         tn(out.type));
  const Dims* const ins[2] = {&a.dims, &b.dims};
  if (!broadcasts(ins, out.dims))
    fail("elementwise: inputs " + a.dims.str() + " and " + b.dims.str() + " do not broadcast to the output " +
         out.dims.str());
  return broadcast_plan(ins, out.dims);
}

i64 check_select(const Fail& fail, const TensorRef& condition, const TensorRef& then_input, const TensorRef& else_input,
                 const TensorRef& out) {
  checked_volume(fail, condition, "select", "the condition");
  checked_volume(fail, then_input, "select", "input 1 (then)");
  checked_volume(fail, else_input, "select", "input 2 (else)");
  const i64 n = checked_volume(fail, out, "select", "the output");
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
  return n;
}

void unary_unsupported(const Fail& fail, UnaryOperation op, DataType t) {
  fail(std::string("unary: ") + unary_name(op) + " does not take " + tn(t));
}

i64 check_unary(const Fail& fail, UnaryOperation op, const TensorRef& x, const TensorRef& out) {
  using U = UnaryOperation;
  const i64 n = checked_volume(fail, x, "unary", "the input");
  const i64 no = checked_volume(fail, out, "unary", "the output");
  const int code = static_cast<int>(op);
  if (code < 0 || code > static_cast<int>(U::kISNAN)) fail("unary: unknown operation " + std::to_string(code));
  const bool to_bool = op == U::kISINF || op == U::kISNAN;
  const DataType want = to_bool ? DataType::kBOOL : x.type;
  if (no != n || out.type != want)
    fail(std::string("unary: ") + unary_name(op) + " of " + desc(x) + " gives " + tn(want) + x.dims.str() + ", not " +
         desc(out));
  return n;
}

i64 check_cast(const Fail& fail, const TensorRef& x, const TensorRef& out) {
  const i64 n = checked_volume(fail, x, "cast", "the input");
  if (checked_volume(fail, out, "cast", "the output") != n)
    fail("cast: the output dims " + out.dims.str() + " differ from the input's " + x.dims.str());
  if (n > 0 && x.data == out.data && element_size(x.type) != element_size(out.type))
    fail("cast: in place needs types of one size, not " + tn(x.type) + " and " + tn(out.type));
  return n;
}

namespace {

QuantizeChannels channels_of(const Fail& fail, const Dims& d, i64 scale_count, int axis, const char* kernel) {
  QuantizeChannels c;
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

}  // namespace

QuantizeShape check_quantize(const Fail& fail, bool quantize, const TensorRef& x, const TensorRef& scale, int axis,
                             const TensorRef& out) {
  const char* kernel = quantize ? "quantize" : "dequantize";
  const std::string k = kernel;
  QuantizeShape s;
  s.n = checked_volume(fail, x, kernel, "the input");
  s.ns = checked_volume(fail, scale, kernel, "the scale");
  if (checked_volume(fail, out, kernel, "the output") != s.n)
    fail(k + ": the output dims " + out.dims.str() + " differ from the input's " + x.dims.str());
  const DataType q = quantize ? out.type : x.type;
  if (q != DataType::kINT8 && q != DataType::kFP8)
    fail(k + (quantize ? ": the output type " : ": the input type ") + tn(q) + " is not int8 or fp8");
  if (s.ns < 1) fail(k + ": the scale is empty");
  s.channels = channels_of(fail, x.dims, s.ns, axis, kernel);
  return s;
}

ScaleShape check_scale(const Fail& fail, const ScaleParams& p, const TensorRef& x, const TensorRef& shift,
                       const TensorRef& scale, const TensorRef& power, const TensorRef& out) {
  ScaleShape s;
  s.n = checked_volume(fail, x, "scale", "the input");
  checked_volume(fail, out, "scale", "the output");
  check_float(fail, x, "scale", "the input");
  if (out.type != x.type || !(out.dims == x.dims)) fail("scale: the output " + desc(out) + " differs from the input " + desc(x));
  const Dims& d = x.dims;
  const int r = d.rank();
  if (p.mode == ScaleMode::kCHANNEL || p.mode == ScaleMode::kELEMENTWISE) {
    const int axis = p.channel_axis < 0 ? p.channel_axis + r : p.channel_axis;
    if (axis < 0 || axis >= r) fail("scale: channel_axis " + num(p.channel_axis) + " is out of range for " + d.str());
    if (p.mode == ScaleMode::kCHANNEL) {
      s.count = d[axis];
      s.inner = prod(d, axis + 1, r);
    } else {
      s.count = prod(d, axis, r);
    }
  } else if (p.mode != ScaleMode::kUNIFORM) {
    fail("scale: unknown mode " + num(static_cast<int>(p.mode)));
  }
  const TensorRef* w[3] = {&shift, &scale, &power};
  const char* names[3] = {"the shift", "the scale", "the power"};
  for (int i = 0; i < 3; ++i) {
    const i64 c = checked_volume(fail, *w[i], "scale", names[i]);
    if (w[i]->type != DataType::kFLOAT) fail(std::string("scale: ") + names[i] + " has type " + tn(w[i]->type) + ", not float32");
    if (c != 1 && c != s.count)
      fail(std::string("scale: ") + names[i] + " has " + num(c) + " coefficients; the input " + d.str() + " needs " +
           num(s.count) + " or one");
    s.single[i] = c == 1;
  }
  if (s.count == 0) s.count = 1;  // an empty input: no element reads a coefficient
  if (s.inner == 0) s.inner = 1;
  return s;
}

BroadcastPlan<2> check_parametric_relu(const Fail& fail, const TensorRef& x, const TensorRef& slope, const TensorRef& out,
                                       i64& n) {
  n = checked_volume(fail, x, "parametric_relu", "the input");
  checked_volume(fail, slope, "parametric_relu", "the slope");
  checked_volume(fail, out, "parametric_relu", "the output");
  check_float(fail, x, "parametric_relu", "the input");
  if (slope.type != x.type) fail("parametric_relu: the slope " + desc(slope) + " must have the input's type " + tn(x.type));
  if (out.type != x.type || !(out.dims == x.dims))
    fail("parametric_relu: the output " + desc(out) + " differs from the input " + desc(x));
  const Dims* const ins[2] = {&x.dims, &slope.dims};
  if (!broadcasts(ins, out.dims)) fail("parametric_relu: the slope " + slope.dims.str() + " does not broadcast to " + x.dims.str());
  return broadcast_plan(ins, out.dims);
}

}  // namespace tensoracle::backends::common
