// ONNX's pointwise, matrix and reduction operators as tensoracle layers.
#include <cmath>

#include "onnx/importer.h"

namespace tensoracle::onnx {

namespace {

using E = ElementWiseOperation;
using U = UnaryOperation;
using A = ActivationType;

// Variadic (Sum, Max, Min, Mean) or binary (Add, ...) operators: folded left to right.
Converter binary(E op) {
  return [op](NodeContext& c) {
    if (c.num_inputs() < 1) fail(OnnxErrorCode::kINVALID_NODE, "the operator needs at least one input");
    Tensor* acc = c.input(0);
    if (c.num_inputs() == 1) acc = c.im().identity(acc);
    for (int i = 1; i < c.num_inputs(); ++i) acc = c.im().elementwise(acc, c.input(i), op);
    c.output(0, acc);
  };
}

// a op b negated: GreaterOrEqual = not Less, LessOrEqual = not Greater.
Converter not_of(E op) {
  return [op](NodeContext& c) {
    c.output(0, c.im().unary(c.im().elementwise(c.input(0), c.input(1), op), U::kNOT));
  };
}

Converter unary_op(U op) {
  return [op](NodeContext& c) { c.output(0, c.im().unary(c.input(0), op)); };
}

Converter activation_op(A type, const char* alpha_name, float alpha, const char* beta_name, float beta) {
  return [=](NodeContext& c) {
    const float a = alpha_name ? c.attr_float(alpha_name, alpha) : alpha;
    const float b = beta_name ? c.attr_float(beta_name, beta) : beta;
    c.output(0, c.im().activation(c.input(0), type, a, b));
  };
}

void clip(NodeContext& c) {
  Tensor* x = c.input(0);
  if (c.opset() < 11) {
    c.output(0, c.im().activation(x, A::kCLIP, c.attr_float("min", -INFINITY), c.attr_float("max", INFINITY)));
    return;
  }
  // Bounds as inputs 1 and 2: elementwise max / min (any type, and tensors known only at run time).
  const int r = x->dims().rank();
  if (c.has_input(1)) x = c.net().add_elementwise(x, c.im().prepend_ones(c.input(1), r - c.input(1)->dims().rank()), E::kMAX)->get_output(0);
  if (c.has_input(2)) x = c.net().add_elementwise(x, c.im().prepend_ones(c.input(2), r - c.input(2)->dims().rank()), E::kMIN)->get_output(0);
  if (!c.has_input(1) && !c.has_input(2)) x = c.im().identity(x);
  c.output(0, x);
}

void gelu(NodeContext& c) {
  const auto approx = c.attr_string("approximate", "none");
  if (approx != "none" && approx != "tanh")
    fail(OnnxErrorCode::kUNSUPPORTED_NODE_ATTR, "approximate '" + approx + "' is not 'none' or 'tanh'");
  c.output(0, c.im().activation(c.input(0), approx == "tanh" ? A::kGELU_TANH : A::kGELU_ERF));
}

// x * op(x)
Tensor* times(NodeContext& c, Tensor* x, Tensor* y) { return c.net().add_elementwise(x, y, E::kPROD)->get_output(0); }

void hard_swish(NodeContext& c) {
  Tensor* x = c.input(0);
  c.output(0, times(c, x, c.im().activation(x, A::kHARD_SIGMOID, 1.f / 6.f, 0.5f)));
}

void mish(NodeContext& c) {
  Tensor* x = c.input(0);
  c.output(0, times(c, x, c.im().activation(c.im().activation(x, A::kSOFTPLUS, 1.f, 1.f), A::kTANH)));
}

void swish(NodeContext& c) {
  Tensor* x = c.input(0);
  const float alpha = c.attr_float("alpha", 1.f);
  Tensor* ax = alpha == 1.f ? x : c.im().elementwise(x, c.im().scalar(x->type(), alpha, x->dims().rank()), E::kPROD);
  c.output(0, times(c, x, c.im().activation(ax, A::kSIGMOID)));
}

void celu(NodeContext& c) {
  // max(0, x) + min(0, alpha * (exp(x / alpha) - 1)) = elu(x / alpha) * alpha
  Tensor* x = c.input(0);
  const float alpha = c.attr_float("alpha", 1.f);
  const int r = x->dims().rank();
  Tensor* scaled = c.im().elementwise(x, c.im().scalar(x->type(), 1.0 / alpha, r), E::kPROD);
  c.output(0, c.im().elementwise(c.im().activation(scaled, A::kELU, 1.f), c.im().scalar(x->type(), alpha, r), E::kPROD));
}

void prelu(NodeContext& c) {
  // max(x, 0) + slope * min(x, 0)
  Tensor* x = c.input(0);
  Tensor* zero = c.im().scalar(x->type(), 0, x->dims().rank());
  Tensor* pos = c.im().elementwise(x, zero, E::kMAX);
  Tensor* neg = c.im().elementwise(x, zero, E::kMIN);
  c.output(0, c.im().elementwise(pos, c.im().elementwise(neg, c.input(1), E::kPROD), E::kSUM));
}

void softplus(NodeContext& c) { c.output(0, c.im().activation(c.input(0), A::kSOFTPLUS, 1.f, 1.f)); }

void selu(NodeContext& c) {
  c.output(0, c.im().activation(c.input(0), A::kSELU, c.attr_float("alpha", 1.67326319217681884765625f),
                                c.attr_float("gamma", 1.05070102214813232421875f)));
}

void is_inf(NodeContext& c) {
  Tensor* x = c.input(0);
  const bool pos = c.attr_int("detect_positive", 1) != 0, neg = c.attr_int("detect_negative", 1) != 0;
  Tensor* inf = c.im().unary(x, U::kISINF);
  if (pos && neg) return c.output(0, inf);
  Tensor* zero = c.im().scalar(x->type(), 0, x->dims().rank());
  if (!pos && !neg) return c.output(0, c.net().add_elementwise(inf, c.im().unary(inf, U::kNOT), E::kAND)->get_output(0));
  Tensor* side = c.net().add_elementwise(x, zero, pos ? E::kGREATER : E::kLESS)->get_output(0);
  c.output(0, c.net().add_elementwise(inf, side, E::kAND)->get_output(0));
}

void mod(NodeContext& c) {
  Tensor* a = c.input(0);
  Tensor* b = c.input(1);
  const bool fmod = c.attr_int("fmod", 0) != 0;
  const bool floating = is_floating(a->type());
  auto& im = c.im();
  Tensor* q;
  if (!floating || !fmod) {
    // Integers: truncated (fmod) or floored division; floats without fmod: floored, so the
    // result takes the divisor's sign (numpy.mod).
    q = im.elementwise(a, b, fmod ? E::kDIV : E::kFLOOR_DIV);
  } else {
    // trunc(a / b) = sign(v) * floor(|v|)
    Tensor* v = im.elementwise(a, b, E::kDIV);
    q = im.elementwise(im.unary(v, U::kSIGN), im.unary(im.unary(v, U::kABS), U::kFLOOR), E::kPROD);
  }
  c.output(0, im.elementwise(a, im.elementwise(q, b, E::kPROD), E::kSUB));
}

void where(NodeContext& c) {
  Tensor* cond = c.input(0);
  Tensor* a = c.input(1);
  Tensor* b = c.input(2);
  const int r = std::max({cond->dims().rank(), a->dims().rank(), b->dims().rank()});
  auto& im = c.im();
  cond = im.prepend_ones(cond, r - cond->dims().rank());
  a = im.prepend_ones(a, r - a->dims().rank());
  b = im.prepend_ones(b, r - b->dims().rank());
  c.output(0, c.net().add_select(cond, a, b)->get_output(0));
}

// ---- matrix products ------------------------------------------------------------------------

// numpy.matmul: 1-D operands as vectors, batch dims broadcast after rank alignment.
Tensor* matmul(Importer& im, Tensor* a, Tensor* b) {
  const int ra = a->dims().rank(), rb = b->dims().rank();
  if (ra == 0 || rb == 0) fail(OnnxErrorCode::kINVALID_NODE, "MatMul of a scalar");
  if (ra == 1 && rb == 1)
    return im.net().add_matrix_multiply(a, MatrixOperation::kVECTOR, b, MatrixOperation::kVECTOR)->get_output(0);
  MatrixOperation oa = ra == 1 ? MatrixOperation::kVECTOR : MatrixOperation::kNONE;
  MatrixOperation ob = rb == 1 ? MatrixOperation::kVECTOR : MatrixOperation::kNONE;
  if (ra >= 2 && rb >= 2) im.align_ranks(a, b);
  // A vector against a batch of matrices: the vector's batch dims are ones.
  else if (ra == 1 && rb > 2) a = im.prepend_ones(a, rb - 2);
  else if (rb == 1 && ra > 2) b = im.prepend_ones(b, ra - 2);
  return im.net().add_matrix_multiply(a, oa, b, ob)->get_output(0);
}

void matmul_op(NodeContext& c) { c.output(0, matmul(c.im(), c.input(0), c.input(1))); }

void gemm(NodeContext& c) {
  auto& im = c.im();
  Tensor* a = c.input(0);
  Tensor* b = c.input(1);
  if (a->dims().rank() != 2 || b->dims().rank() != 2)
    fail(OnnxErrorCode::kINVALID_NODE, "Gemm takes rank-2 A and B; they have ranks " + std::to_string(a->dims().rank()) +
                                           " and " + std::to_string(b->dims().rank()));
  const auto ta = c.attr_int("transA", 0) ? MatrixOperation::kTRANSPOSE : MatrixOperation::kNONE;
  const auto tb = c.attr_int("transB", 0) ? MatrixOperation::kTRANSPOSE : MatrixOperation::kNONE;
  const float alpha = c.attr_float("alpha", 1.f), beta = c.attr_float("beta", 1.f);
  Tensor* y = c.net().add_matrix_multiply(a, ta, b, tb)->get_output(0);
  if (alpha != 1.f) y = im.elementwise(y, im.scalar(y->type(), alpha, 2), E::kPROD);
  if (c.has_input(2) && beta != 0.f) {
    Tensor* bias = c.input(2);
    if (beta != 1.f) bias = im.elementwise(bias, im.scalar(bias->type(), beta, bias->dims().rank()), E::kPROD);
    y = im.elementwise(y, bias, E::kSUM);
  }
  c.output(0, y);
}

void einsum(NodeContext& c) {
  std::vector<Tensor*> in;
  for (int i = 0; i < c.num_inputs(); ++i) in.push_back(c.input(i));
  std::string eq = c.attr_string("equation", "");
  std::string compact;
  for (char ch : eq)
    if (ch != ' ') compact += ch;
  c.output(0, c.net().add_einsum(in, compact)->get_output(0));
}

// ---- softmax --------------------------------------------------------------------------------

Tensor* softmax_along(NodeContext& c, Tensor* x, bool log) {
  auto& im = c.im();
  const int r = x->dims().rank();
  const int axis = c.axis(c.attr_int("axis", c.opset() < 13 ? 1 : -1), r);
  Tensor* y;
  if (c.opset() < 13 && axis != r - 1) {
    // Before opset 13: the input as a matrix [prod(dims[:axis]), prod(dims[axis:])].
    if (!x->dims().all_known())
      fail(OnnxErrorCode::kUNSUPPORTED_NODE_DYNAMIC, "Softmax before opset 13 over several axes needs known dims");
    std::int64_t rows = 1, cols = 1;
    for (int i = 0; i < r; ++i) (i < axis ? rows : cols) = checked_mul(i < axis ? rows : cols, x->dims()[i], "the matrix size");
    Tensor* m = im.reshape(x, Dims{rows, cols});
    auto* s = c.net().add_softmax(m);
    s->set(SoftmaxParams{2u});
    y = im.reshape(s->get_output(0), x->dims());
  } else {
    auto* s = c.net().add_softmax(x);
    s->set(SoftmaxParams{1u << axis});
    y = s->get_output(0);
  }
  return log ? im.unary(y, U::kLOG) : y;
}

void softmax(NodeContext& c) { c.output(0, softmax_along(c, c.input(0), false)); }
void log_softmax(NodeContext& c) { c.output(0, softmax_along(c, c.input(0), true)); }

// ---- reductions -----------------------------------------------------------------------------

// The axes of a Reduce* node: input 1 (opset 18+, ReduceSum 13+) or the attribute; none given
// reduces every axis unless noop_with_empty_axes.
struct ReduceAxes {
  std::uint32_t mask = 0;
  bool noop = false;
};

ReduceAxes reduce_axes(NodeContext& c, int rank) {
  std::vector<std::int64_t> axes;
  bool given = false;
  if (c.has_input(1)) {
    axes = c.input_ints(1, "axes");
    given = true;
  } else if (c.has_attr("axes")) {
    axes = c.attr_ints("axes");
    given = true;
  }
  if (!given || axes.empty()) {
    if (c.attr_int("noop_with_empty_axes", 0)) return {0, true};
    return {rank == 0 ? 0u : (rank >= 32 ? ~0u : (1u << rank) - 1), false};
  }
  return {c.axes_mask(axes, rank), false};
}

enum class Pre { kNone, kAbs, kSquare, kExp };
enum class Post { kNone, kSqrt, kLog };

Converter reduce_op(ReduceOperation op, Pre pre = Pre::kNone, Post post = Post::kNone) {
  return [=](NodeContext& c) {
    auto& im = c.im();
    Tensor* x = c.input(0);
    const auto axes = reduce_axes(c, x->dims().rank());
    if (pre == Pre::kAbs) x = im.unary(x, U::kABS);
    if (pre == Pre::kSquare) x = c.net().add_elementwise(x, x, E::kPROD)->get_output(0);
    if (pre == Pre::kExp) x = im.unary(x, U::kEXP);
    Tensor* y;
    if (axes.noop || (axes.mask == 0)) {
      y = im.identity(x);
    } else {
      y = c.net().add_reduce(x, op, axes.mask, c.attr_int("keepdims", 1) != 0)->get_output(0);
    }
    if (post == Post::kSqrt) y = im.unary(y, U::kSQRT);
    if (post == Post::kLog) y = im.unary(y, U::kLOG);
    c.output(0, y);
  };
}

// ArgMax / ArgMin: topk of 1 along the axis; its int32 indices as int64.
Converter arg_op(TopKOperation op) {
  return [op](NodeContext& c) {
    auto& im = c.im();
    Tensor* x = c.input(0);
    const int r = x->dims().rank();
    const int axis = c.axis(c.attr_int("axis", 0), r);
    const bool last = c.attr_int("select_last_index", 0) != 0;
    const auto dim = x->dims()[axis];
    if (last) {
      // The last of equal values: the first along the reversed axis, counted from the end.
      if (dim < 0) fail(OnnxErrorCode::kUNSUPPORTED_NODE_DYNAMIC, "select_last_index along an axis of unknown size");
      std::vector<std::int64_t> st(static_cast<std::size_t>(r), 0), stride(static_cast<std::size_t>(r), 1);
      st[static_cast<std::size_t>(axis)] = dim - 1;
      stride[static_cast<std::size_t>(axis)] = -1;
      x = c.net().add_slice(x, dims_of(st), x->dims(), dims_of(stride))->get_output(0);
    }
    Tensor* idx = c.net().add_topk(x, op, 1, 1u << axis)->get_output(1);
    idx = im.cast(idx, DataType::kINT64);
    if (last) idx = im.elementwise(im.scalar(DataType::kINT64, static_cast<double>(dim - 1), r), idx, E::kSUB);
    if (c.attr_int("keepdims", 1) == 0) {
      std::vector<std::int64_t> d;
      for (int i = 0; i < r; ++i)
        if (i != axis) d.push_back(0);
      auto* s = c.net().add_shuffle(idx);
      // Drop the axis: transpose it last, then reshape away with placeholders.
      Permutation p;
      int k = 0;
      for (int i = 0; i < r; ++i)
        if (i != axis) p.order[static_cast<std::size_t>(k++)] = i;
      p.order[static_cast<std::size_t>(k)] = axis;
      s->set_first_transpose(p);
      s->set_zero_is_placeholder(true);
      s->set_reshape_dims(dims_of(d));
      idx = s->get_output(0);
    }
    c.output(0, idx);
  };
}

}  // namespace

void add_math_ops(ConverterTable& t) {
  t["Add"] = binary(E::kSUM);
  t["Sub"] = binary(E::kSUB);
  t["Mul"] = binary(E::kPROD);
  t["Div"] = binary(E::kDIV);
  t["Pow"] = binary(E::kPOW);
  t["Max"] = binary(E::kMAX);
  t["Min"] = binary(E::kMIN);
  t["Sum"] = binary(E::kSUM);
  t["Mean"] = [](NodeContext& c) {
    Tensor* acc = c.input(0);
    for (int i = 1; i < c.num_inputs(); ++i) acc = c.im().elementwise(acc, c.input(i), E::kSUM);
    c.output(0, c.im().elementwise(acc, c.im().scalar(acc->type(), 1.0 / c.num_inputs(), acc->dims().rank()), E::kPROD));
  };
  t["And"] = binary(E::kAND);
  t["Or"] = binary(E::kOR);
  t["Xor"] = binary(E::kXOR);
  t["Equal"] = binary(E::kEQUAL);
  t["Greater"] = binary(E::kGREATER);
  t["Less"] = binary(E::kLESS);
  t["GreaterOrEqual"] = not_of(E::kLESS);
  t["LessOrEqual"] = not_of(E::kGREATER);
  t["Mod"] = mod;
  t["Where"] = where;

  t["Abs"] = unary_op(U::kABS);
  t["Neg"] = unary_op(U::kNEG);
  t["Exp"] = unary_op(U::kEXP);
  t["Log"] = unary_op(U::kLOG);
  t["Sqrt"] = unary_op(U::kSQRT);
  t["Reciprocal"] = unary_op(U::kRECIP);
  t["Sin"] = unary_op(U::kSIN);
  t["Cos"] = unary_op(U::kCOS);
  t["Tan"] = unary_op(U::kTAN);
  t["Sinh"] = unary_op(U::kSINH);
  t["Cosh"] = unary_op(U::kCOSH);
  t["Asin"] = unary_op(U::kASIN);
  t["Acos"] = unary_op(U::kACOS);
  t["Atan"] = unary_op(U::kATAN);
  t["Asinh"] = unary_op(U::kASINH);
  t["Acosh"] = unary_op(U::kACOSH);
  t["Atanh"] = unary_op(U::kATANH);
  t["Ceil"] = unary_op(U::kCEIL);
  t["Floor"] = unary_op(U::kFLOOR);
  t["Erf"] = unary_op(U::kERF);
  t["Not"] = unary_op(U::kNOT);
  t["Sign"] = unary_op(U::kSIGN);
  t["Round"] = unary_op(U::kROUND);
  t["IsNaN"] = unary_op(U::kISNAN);
  t["IsInf"] = is_inf;

  t["Relu"] = activation_op(A::kRELU, nullptr, 0, nullptr, 0);
  t["Sigmoid"] = activation_op(A::kSIGMOID, nullptr, 0, nullptr, 0);
  t["Tanh"] = activation_op(A::kTANH, nullptr, 0, nullptr, 0);
  t["LeakyRelu"] = activation_op(A::kLEAKY_RELU, "alpha", 0.01f, nullptr, 0);
  t["Elu"] = activation_op(A::kELU, "alpha", 1.f, nullptr, 0);
  t["Selu"] = selu;
  t["Softsign"] = activation_op(A::kSOFTSIGN, nullptr, 0, nullptr, 0);
  t["Softplus"] = softplus;
  t["HardSigmoid"] = activation_op(A::kHARD_SIGMOID, "alpha", 0.2f, "beta", 0.5f);
  t["ThresholdedRelu"] = activation_op(A::kTHRESHOLDED_RELU, "alpha", 1.f, nullptr, 0);
  t["Clip"] = clip;
  t["Gelu"] = gelu;
  t["HardSwish"] = hard_swish;
  t["Mish"] = mish;
  t["Swish"] = swish;
  t["Celu"] = celu;
  t["PRelu"] = prelu;

  t["MatMul"] = matmul_op;
  t["Gemm"] = gemm;
  t["Einsum"] = einsum;
  t["Softmax"] = softmax;
  t["LogSoftmax"] = log_softmax;

  t["ReduceSum"] = reduce_op(ReduceOperation::kSUM);
  t["ReduceMean"] = reduce_op(ReduceOperation::kAVG);
  t["ReduceMax"] = reduce_op(ReduceOperation::kMAX);
  t["ReduceMin"] = reduce_op(ReduceOperation::kMIN);
  t["ReduceProd"] = reduce_op(ReduceOperation::kPROD);
  t["ReduceL1"] = reduce_op(ReduceOperation::kSUM, Pre::kAbs);
  t["ReduceL2"] = reduce_op(ReduceOperation::kSUM, Pre::kSquare, Post::kSqrt);
  t["ReduceSumSquare"] = reduce_op(ReduceOperation::kSUM, Pre::kSquare);
  t["ReduceLogSum"] = reduce_op(ReduceOperation::kSUM, Pre::kNone, Post::kLog);
  t["ReduceLogSumExp"] = reduce_op(ReduceOperation::kSUM, Pre::kExp, Post::kLog);
  t["ArgMax"] = arg_op(TopKOperation::kMAX);
  t["ArgMin"] = arg_op(TopKOperation::kMIN);
}

}  // namespace tensoracle::onnx
