// ONNX's neural-network operators (convolutions, pooling, normalizations, quantization) as
// tensoracle layers.
#include <climits>
#include <cmath>
#include <cstring>

#include "onnx/importer.h"

namespace tensoracle::onnx {

namespace {

using E = ElementWiseOperation;

// A 1-D per-channel tensor [C] as [1, C, 1, ...] for an input of `rank`.
Tensor* channel_shaped(Importer& im, Tensor* v, int rank) {
  if (v->dims().rank() != 1) return v;
  std::vector<std::int64_t> d(static_cast<std::size_t>(rank), 1);
  d[1] = v->dims()[0];
  return im.reshape(v, dims_of(d));
}

// The window geometry of Conv, ConvTranspose and the pools: kernel, strides, dilations, pads
// and auto_pad.
struct Window {
  std::vector<std::int64_t> kernel, strides, dilations, pre, post;
  PaddingMode mode = PaddingMode::kEXPLICIT_ROUND_DOWN;
};

Window window(NodeContext& c, const Dims& x, std::vector<std::int64_t> kernel) {
  const int n = x.rank() - 2;
  if (n < 1 || n > 3)
    fail(OnnxErrorCode::kUNSUPPORTED_NODE_SHAPE, "input of rank " + std::to_string(x.rank()) + "; 1-D to 3-D windows are supported");
  Window w;
  if (kernel.empty()) kernel = c.attr_ints("kernel_shape");
  if (static_cast<int>(kernel.size()) != n)
    fail(OnnxErrorCode::kINVALID_NODE, "kernel_shape has " + std::to_string(kernel.size()) + " dims for " + std::to_string(n) + " spatial dims");
  w.kernel = kernel;
  w.strides = c.attr_ints("strides", std::vector<std::int64_t>(static_cast<std::size_t>(n), 1));
  w.dilations = c.attr_ints("dilations", std::vector<std::int64_t>(static_cast<std::size_t>(n), 1));
  auto pads = c.attr_ints("pads", std::vector<std::int64_t>(static_cast<std::size_t>(2 * n), 0));
  if (static_cast<int>(w.strides.size()) != n || static_cast<int>(w.dilations.size()) != n || static_cast<int>(pads.size()) != 2 * n)
    fail(OnnxErrorCode::kINVALID_NODE, "strides, dilations or pads do not match the " + std::to_string(n) + " spatial dims");
  w.pre.assign(pads.begin(), pads.begin() + n);
  w.post.assign(pads.begin() + n, pads.end());
  const auto auto_pad = c.attr_string("auto_pad", "NOTSET");
  if (auto_pad == "SAME_UPPER") w.mode = PaddingMode::kSAME_UPPER;
  else if (auto_pad == "SAME_LOWER") w.mode = PaddingMode::kSAME_LOWER;
  else if (auto_pad == "VALID") w.pre.assign(static_cast<std::size_t>(n), 0), w.post.assign(static_cast<std::size_t>(n), 0);
  else if (auto_pad != "NOTSET") fail(OnnxErrorCode::kUNSUPPORTED_NODE_ATTR, "auto_pad '" + auto_pad + "'");
  return w;
}

template <typename P>
void apply(P& p, const Window& w) {
  p.stride = dims_of(w.strides);
  p.pre_padding = dims_of(w.pre);
  p.post_padding = dims_of(w.post);
  p.dilation = dims_of(w.dilations);
  p.padding_mode = w.mode;
}

Weights known_weights(NodeContext& c, int i, const char* what, Dims* dims = nullptr) {
  auto k = c.known_input(i, what);
  if (dims) *dims = k.dims;
  return k.weights;
}

void conv(NodeContext& c) {
  Tensor* x = c.input(0);
  Dims wd;
  Weights w = known_weights(c, 1, "weights", &wd);
  if (wd.rank() != x->dims().rank())
    fail(OnnxErrorCode::kINVALID_NODE, "weights " + wd.str() + " do not match input " + x->dims().str());
  std::vector<std::int64_t> kernel(wd.begin() + 2, wd.end());
  Window win = window(c, x->dims(), c.attr_ints("kernel_shape", kernel));
  Weights bias;
  if (c.has_input(2)) bias = known_weights(c, 2, "bias");
  if (w.type() != x->type()) fail(OnnxErrorCode::kUNSUPPORTED_NODE_DATATYPE, "weights of another type than the input");
  auto* l = c.net().add_convolution_nd(x, static_cast<std::int32_t>(wd[0]), dims_of(win.kernel), w, bias);
  auto p = l->get();
  apply(p, win);
  p.num_groups = static_cast<std::int32_t>(c.attr_int("group", 1));
  l->set(p);
  c.output(0, l->get_output(0));
}

void conv_transpose(NodeContext& c) {
  auto& im = c.im();
  Tensor* x = c.input(0);
  Dims wd;
  Weights w = known_weights(c, 1, "weights", &wd);
  if (wd.rank() != x->dims().rank())
    fail(OnnxErrorCode::kINVALID_NODE, "weights " + wd.str() + " do not match input " + x->dims().str());
  const int n = wd.rank() - 2;
  std::vector<std::int64_t> kernel(wd.begin() + 2, wd.end());
  Window win = window(c, x->dims(), c.attr_ints("kernel_shape", kernel));
  const std::int64_t groups = c.attr_int("group", 1);
  auto out_pad = c.attr_ints("output_padding", std::vector<std::int64_t>(static_cast<std::size_t>(n), 0));
  auto out_shape = c.attr_ints("output_shape");
  if (static_cast<int>(out_pad.size()) != n) fail(OnnxErrorCode::kINVALID_NODE, "output_padding does not match the spatial dims");
  for (auto v : out_pad)
    if (v < 0 || v > (1 << 30)) fail(OnnxErrorCode::kINVALID_NODE, "output_padding " + std::to_string(v) + " is outside [0, 2^30]");
  if (groups < 1 || groups > (1 << 30)) fail(OnnxErrorCode::kINVALID_NODE, "group " + std::to_string(groups));
  // Resolve SAME and output_shape into explicit pads (needs the spatial dims).
  const bool same = win.mode != PaddingMode::kEXPLICIT_ROUND_DOWN;
  if (same || !out_shape.empty()) {
    for (int i = 0; i < n; ++i) {
      const auto in = x->dims()[2 + i];
      if (in < 0) fail(OnnxErrorCode::kUNSUPPORTED_NODE_DYNAMIC, "ConvTranspose with SAME padding or output_shape needs known spatial dims");
      const auto s = win.strides[static_cast<std::size_t>(i)], d = win.dilations[static_cast<std::size_t>(i)], k = win.kernel[static_cast<std::size_t>(i)];
      if (out_shape.size() != 0 && out_shape.size() < static_cast<std::size_t>(n))
        fail(OnnxErrorCode::kINVALID_NODE, "output_shape has fewer entries than spatial dims");
      std::int64_t target = same ? checked_mul(in, s, "the output size")
                                 : out_shape[out_shape.size() - static_cast<std::size_t>(n) + static_cast<std::size_t>(i)];
      const std::int64_t span = checked_add(checked_mul(k - 1, d, "the kernel span"), 1, "the kernel span");
      const std::int64_t total = checked_add(checked_add(checked_mul(s, in - 1, "the output size"), out_pad[static_cast<std::size_t>(i)], "the output size"),
                                             span - target, "the output size");
      if (total < 0) {
        // The output is larger than the full result: pads become output padding.
        win.pre[static_cast<std::size_t>(i)] = 0;
        win.post[static_cast<std::size_t>(i)] = 0;
        out_pad[static_cast<std::size_t>(i)] = checked_add(out_pad[static_cast<std::size_t>(i)], checked_mul(total, -1, "the output padding"), "the output padding");
        continue;
      }
      const bool upper = win.mode == PaddingMode::kSAME_UPPER || (!same && c.attr_string("auto_pad", "NOTSET") == "SAME_UPPER");
      win.pre[static_cast<std::size_t>(i)] = upper ? total / 2 : total - total / 2;
      win.post[static_cast<std::size_t>(i)] = total - win.pre[static_cast<std::size_t>(i)];
    }
    win.mode = PaddingMode::kEXPLICIT_ROUND_DOWN;
  }
  // output_padding: fewer pads at the end, or zeros appended (bias then added after).
  std::vector<std::int64_t> extra(static_cast<std::size_t>(n), 0);
  for (int i = 0; i < n; ++i) {
    auto& post = win.post[static_cast<std::size_t>(i)];
    const auto op = out_pad[static_cast<std::size_t>(i)];
    if (post >= op) post -= op;
    else { extra[static_cast<std::size_t>(i)] = checked_add(op, checked_mul(post, -1, "a pad"), "the output padding"); post = 0; }
  }
  const bool append = std::any_of(extra.begin(), extra.end(), [](auto v) { return v > 0; });
  Weights bias;
  Tensor* bias_tensor = nullptr;
  if (c.has_input(2)) {
    bias = known_weights(c, 2, "bias");
    if (append) { bias_tensor = c.input(2); bias = Weights(); }
  }
  const auto maps = checked_mul(wd[1], groups, "the output channels");
  if (maps > INT32_MAX) fail(OnnxErrorCode::kINVALID_NODE, "the output channels do not fit int32");
  auto* l = c.net().add_deconvolution_nd(x, static_cast<std::int32_t>(maps), dims_of(win.kernel), w, bias);
  auto p = l->get();
  apply(p, win);
  p.num_groups = static_cast<std::int32_t>(groups);
  l->set(p);
  Tensor* y = l->get_output(0);
  if (append) {
    const int r = y->dims().rank();
    std::vector<std::int64_t> st(static_cast<std::size_t>(r), 0), one(static_cast<std::size_t>(r), 1), sz(y->dims().begin(), y->dims().end());
    for (int i = 0; i < n; ++i)
      sz[static_cast<std::size_t>(2 + i)] = checked_add(sz[static_cast<std::size_t>(2 + i)], extra[static_cast<std::size_t>(i)], "the output size");
    if (!dims_of(sz).all_known()) fail(OnnxErrorCode::kUNSUPPORTED_NODE_DYNAMIC, "output_padding with unknown dims");
    auto* s = c.net().add_slice(y, dims_of(st), dims_of(sz), dims_of(one));
    s->set(SliceParams{s->get().start, s->get().size, s->get().stride, SampleMode::kFILL, 0});
    y = s->get_output(0);
    if (bias_tensor) y = im.elementwise(y, channel_shaped(im, bias_tensor, r), E::kSUM);
  }
  c.output(0, y);
}

Converter pool(PoolingType type) {
  return [type](NodeContext& c) {
    Tensor* x = c.input(0);
    Window win = window(c, x->dims(), {});
    if (c.wants_output(1)) fail(OnnxErrorCode::kUNSUPPORTED_NODE, "MaxPool's Indices output is not supported");
    for (auto d : win.dilations)
      if (d != 1) fail(OnnxErrorCode::kUNSUPPORTED_NODE_ATTR, "dilations other than 1 in pooling");
    if (c.attr_int("storage_order", 0) != 0) fail(OnnxErrorCode::kUNSUPPORTED_NODE_ATTR, "storage_order 1");
    const bool ceil = c.attr_int("ceil_mode", 0) != 0;
    const int n = static_cast<int>(win.kernel.size());
    if (ceil && win.mode == PaddingMode::kEXPLICIT_ROUND_DOWN) {
      // ONNX rounds up but drops a last window that would start in the end padding: as extra
      // end padding with rounding down, where the dims are known.
      bool known = true;
      for (int i = 0; i < n; ++i) known = known && x->dims()[2 + i] >= 0;
      if (!known) {
        win.mode = PaddingMode::kEXPLICIT_ROUND_UP;
      } else {
        for (int i = 0; i < n; ++i) {
          const auto in = x->dims()[2 + i];
          const auto s = win.strides[static_cast<std::size_t>(i)];
          const auto span = checked_add(checked_mul(win.kernel[static_cast<std::size_t>(i)] - 1, win.dilations[static_cast<std::size_t>(i)], "the window span"), 1, "the window span");
          const auto pre = win.pre[static_cast<std::size_t>(i)], post = win.post[static_cast<std::size_t>(i)];
          if (s <= 0 || pre < 0 || post < 0) continue;  // the pooling layer refuses them
          const auto extent = checked_add(checked_add(in, pre, "the padded size"), post - span, "the padded size");
          if (extent < 0) continue;
          std::int64_t out = extent / s + (extent % s != 0) + 1;
          const auto start_limit = checked_add(in, pre, "the padded size");
          if (checked_mul(out - 1, s, "the output size") >= start_limit) --out;
          const auto need = checked_add(checked_mul(out - 1, s, "the output size"), span - start_limit, "the padding");
          if (need > post) win.post[static_cast<std::size_t>(i)] = need;
        }
      }
    }
    auto* l = c.net().add_pooling_nd(x, type, dims_of(win.kernel));
    auto p = l->get();
    p.stride = dims_of(win.strides);
    p.pre_padding = dims_of(win.pre);
    p.post_padding = dims_of(win.post);
    p.padding_mode = win.mode;
    p.average_count_excludes_padding = c.attr_int("count_include_pad", 0) == 0;
    l->set(p);
    c.output(0, l->get_output(0));
  };
}

Converter global_pool(ReduceOperation op) {
  return [op](NodeContext& c) {
    Tensor* x = c.input(0);
    const int r = x->dims().rank();
    if (r < 3) fail(OnnxErrorCode::kINVALID_NODE, "input of rank " + std::to_string(r) + "; [N, C, spatial...] expected");
    std::uint32_t mask = 0;
    for (int i = 2; i < r; ++i) mask |= 1u << i;
    c.output(0, c.net().add_reduce(x, op, mask, true)->get_output(0));
  };
}

// y = x * a + b with a = scale / sqrt(var + eps), b = bias - mean * a, per channel.
void lrn(NodeContext& c) {
  const std::int64_t size = c.attr_int("size", 0);
  if (size < 1 || size > 1024) fail(OnnxErrorCode::kINVALID_NODE, "size " + std::to_string(size) + " is outside 1..1024");
  auto* layer = c.net().add_lrn(c.input(0), static_cast<std::int32_t>(size), c.attr_float("alpha", 1e-4f),
                                c.attr_float("beta", 0.75f), c.attr_float("bias", 1.f));
  c.output(0, layer->get_output(0));
}

void batch_norm(NodeContext& c) {
  auto& im = c.im();
  if (c.attr_int("training_mode", 0) != 0 || c.wants_output(1) || c.wants_output(2))
    fail(OnnxErrorCode::kUNSUPPORTED_NODE_ATTR, "training mode (running statistics outputs) is not supported");
  Tensor* x = c.input(0);
  const int r = x->dims().rank();
  if (r < 2) fail(OnnxErrorCode::kINVALID_NODE, "input of rank " + std::to_string(r));
  const float eps = c.attr_float("epsilon", 1e-5f);
  auto scale = c.input_value(1), bias = c.input_value(2), mean = c.input_value(3), var = c.input_value(4);
  if (scale && bias && mean && var) {
    auto s = scale->floats(), b = bias->floats(), m = mean->floats(), v = var->floats();
    const auto n = s.size();
    if (b.size() != n || m.size() != n || v.size() != n) fail(OnnxErrorCode::kINVALID_NODE, "scale, B, mean and var differ in size");
    std::vector<float> a(n), shift(n);
    for (std::size_t i = 0; i < n; ++i) {
      a[i] = static_cast<float>(s[i] / std::sqrt(v[i] + static_cast<double>(eps)));
      shift[i] = static_cast<float>(b[i] - m[i] * a[i]);
    }
    std::vector<std::int64_t> d(static_cast<std::size_t>(r), 1);
    d[1] = static_cast<std::int64_t>(n);
    Tensor* at = im.cast(im.constant(dims_of(d), Weights::copy_of(DataType::kFLOAT, a.data(), static_cast<std::int64_t>(n))), x->type());
    Tensor* bt = im.cast(im.constant(dims_of(d), Weights::copy_of(DataType::kFLOAT, shift.data(), static_cast<std::int64_t>(n))), x->type());
    return c.output(0, im.elementwise(im.elementwise(x, at, E::kPROD), bt, E::kSUM));
  }
  // Statistics known only at run time: the same formula as layers.
  Tensor* s = channel_shaped(im, c.input(1), r);
  Tensor* b = channel_shaped(im, c.input(2), r);
  Tensor* m = channel_shaped(im, c.input(3), r);
  Tensor* v = channel_shaped(im, c.input(4), r);
  Tensor* denom = im.unary(im.elementwise(v, im.scalar(v->type(), eps, r), E::kSUM), UnaryOperation::kSQRT);
  Tensor* y = im.elementwise(im.elementwise(x, m, E::kSUB), im.elementwise(s, denom, E::kDIV), E::kPROD);
  c.output(0, im.elementwise(y, b, E::kSUM));
}

// A normalization layer with scale and bias broadcast to x (bias zeros when absent).
Tensor* normalize(NodeContext& c, Tensor* x, Tensor* scale, Tensor* bias, std::uint32_t axes, float eps, int groups) {
  auto& im = c.im();
  const int r = x->dims().rank();
  if (!bias) bias = im.scalar(x->type(), 0, r);
  scale = im.prepend_ones(scale, r - scale->dims().rank());
  bias = im.prepend_ones(bias, r - bias->dims().rank());
  auto* l = c.net().add_normalization(x, scale, bias, axes);
  l->set(NormalizationParams{axes, eps, groups});
  return l->get_output(0);
}

void instance_norm(NodeContext& c) {
  auto& im = c.im();
  Tensor* x = c.input(0);
  const int r = x->dims().rank();
  if (r < 3) fail(OnnxErrorCode::kINVALID_NODE, "input of rank " + std::to_string(r));
  std::uint32_t axes = 0;
  for (int i = 2; i < r; ++i) axes |= 1u << i;
  c.output(0, normalize(c, x, channel_shaped(im, c.input(1), r), channel_shaped(im, c.input(2), r), axes,
                        c.attr_float("epsilon", 1e-5f), 1));
}

void layer_norm(NodeContext& c) {
  auto& im = c.im();
  Tensor* x = c.input(0);
  const int r = x->dims().rank();
  const int axis = c.axis(c.attr_int("axis", -1), r);
  const float eps = c.attr_float("epsilon", 1e-5f);
  std::uint32_t axes = 0;
  for (int i = axis; i < r; ++i) axes |= 1u << i;
  c.output(0, normalize(c, x, c.input(1), c.has_input(2) ? c.input(2) : nullptr, axes, eps, 1));
  if (c.wants_output(1) || c.wants_output(2)) {
    // The statistics, computed again as layers in the stash type (float32 by default).
    const auto stash = data_type_of(static_cast<std::int32_t>(c.attr_int("stash_type", 1)));
    if (!stash || !is_floating(*stash)) fail(OnnxErrorCode::kUNSUPPORTED_NODE_ATTR, "stash_type");
    Tensor* xs = im.cast(x, *stash);
    Tensor* mean = c.net().add_reduce(xs, ReduceOperation::kAVG, axes, true)->get_output(0);
    Tensor* d = im.elementwise(xs, mean, E::kSUB);
    Tensor* var = c.net().add_reduce(c.net().add_elementwise(d, d, E::kPROD)->get_output(0), ReduceOperation::kAVG, axes, true)->get_output(0);
    Tensor* inv = im.unary(im.unary(im.elementwise(var, im.scalar(*stash, eps, r), E::kSUM), UnaryOperation::kSQRT), UnaryOperation::kRECIP);
    c.output(1, mean);
    c.output(2, inv);
  }
}

// y = x / sqrt(mean(x^2 over the axes) + epsilon) * scale
void rms_norm(NodeContext& c) {
  auto& im = c.im();
  Tensor* x = c.input(0);
  const int r = x->dims().rank();
  const int axis = c.axis(c.attr_int("axis", -1), r);
  std::uint32_t axes = 0;
  for (int i = axis; i < r; ++i) axes |= 1u << i;
  const auto stash = data_type_of(static_cast<std::int32_t>(c.attr_int("stash_type", 1)));
  if (!stash || !is_floating(*stash)) fail(OnnxErrorCode::kUNSUPPORTED_NODE_ATTR, "stash_type");
  Tensor* xs = im.cast(x, *stash);
  Tensor* ms = c.net().add_reduce(c.net().add_elementwise(xs, xs, E::kPROD)->get_output(0), ReduceOperation::kAVG, axes, true)->get_output(0);
  Tensor* rms = im.unary(im.elementwise(ms, im.scalar(*stash, c.attr_float("epsilon", 1e-5f), r), E::kSUM), UnaryOperation::kSQRT);
  Tensor* y = im.cast(im.elementwise(xs, rms, E::kDIV), x->type());
  Tensor* scale = c.input(1);
  c.output(0, im.elementwise(y, im.prepend_ones(scale, r - scale->dims().rank()), E::kPROD));
}

// Attention (opset 23): Q [B, Nq, S, H] or [B, S, Nq * H], K and V likewise with Nkv heads, an
// optional boolean or additive mask broadcast to [B, Nq, S, Skv], causal masking. Past key and
// value, softcap and the extra outputs are refused.
void attention(NodeContext& c) {
  auto& im = c.im();
  for (int i = 4; i < c.num_inputs(); ++i)
    if (c.has_input(i)) fail(OnnxErrorCode::kUNSUPPORTED_NODE_INPUT, "input " + std::to_string(i) + " (past key / value, or sequence lengths)");
  for (int o = 1; o < c.num_outputs(); ++o)
    if (c.wants_output(o)) fail(OnnxErrorCode::kUNSUPPORTED_NODE, "output " + std::to_string(o) + " (present key / value, or the scores)");
  if (c.attr_float("softcap", 0.f) != 0.f) fail(OnnxErrorCode::kUNSUPPORTED_NODE_ATTR, "softcap");
  Tensor* q = c.input(0);
  Tensor* k = c.input(1);
  Tensor* v = c.input(2);
  const bool three_d = q->dims().rank() == 3;
  auto heads = [&](Tensor* t, const char* attr) {
    if (t->dims().rank() == 4) return t;
    if (t->dims().rank() != 3) fail(OnnxErrorCode::kINVALID_NODE, "inputs of rank 3 or 4 expected");
    const auto n = c.attr_int(attr, 0);
    if (n <= 0 || t->dims()[2] < 0 || t->dims()[2] % n != 0)
      fail(OnnxErrorCode::kINVALID_NODE, std::string(attr) + " must divide the hidden size of 3-D inputs");
    return im.transpose(im.reshape(t, Dims{0, 0, n, t->dims()[2] / n}, true), {0, 2, 1, 3});
  };
  q = heads(q, "q_num_heads");
  k = heads(k, "kv_num_heads");
  v = heads(v, "kv_num_heads");
  const auto h = q->dims()[3];
  if (h <= 0) fail(OnnxErrorCode::kUNSUPPORTED_NODE_SHAPE, "the head size must be known");
  const bool causal = c.attr_int("is_causal", 0) != 0;
  const std::int64_t left = c.attr_int("left_window_size", -1), right = c.attr_int("right_window_size", -1);
  const bool window = left >= 0 || right >= 0;
  Tensor* mask = c.has_input(3) ? c.input(3) : nullptr;
  if (mask) mask = im.prepend_ones(mask, 4 - mask->dims().rank());
  if ((causal && mask) || window) {
    // Causal masking with a given mask, or a window around the diagonal: one boolean band
    // [1, 1, S, Skv] (query i keeps key j when i - left <= j <= i + right; causal: j <= i),
    // joined with the given mask.
    const auto s = q->dims()[2], skv = k->dims()[2];
    if (s < 0 || skv < 0) fail(OnnxErrorCode::kUNSUPPORTED_NODE_DYNAMIC, "a mask with is_causal, or a window, needs known sequence lengths");
    if (checked_mul(s, skv, "the mask's size") > (std::int64_t{1} << 28))
      fail(OnnxErrorCode::kUNSUPPORTED_NODE_SHAPE, "a causal or window mask of " + std::to_string(s) + " x " + std::to_string(skv));
    const std::int64_t lo = std::min(left, skv), hi = std::min(right, skv);
    std::vector<std::uint8_t> keep(static_cast<std::size_t>(s * skv));
    for (std::int64_t i = 0; i < s; ++i)
      for (std::int64_t j = 0; j < skv; ++j)
        keep[static_cast<std::size_t>(i * skv + j)] =
            (!causal || j <= i) && (lo < 0 || j >= i - lo) && (hi < 0 || j <= i + hi);
    Tensor* band = im.constant(Dims{1, 1, s, skv}, Weights::copy_of(DataType::kBOOL, keep.data(), s * skv));
    if (!mask) mask = band;
    else if (mask->type() == DataType::kBOOL) mask = c.net().add_elementwise(mask, band, E::kAND)->get_output(0);
    else mask = c.net().add_select(band, mask, im.scalar(mask->type(), -INFINITY, 4))->get_output(0);
  }
  auto* a = c.net().add_attention(q, k, v, AttentionNormalizationOp::kSOFTMAX, causal && !mask);
  auto p = a->get();
  p.scale = c.has_attr("scale") ? c.attr_float("scale", 1.f) : static_cast<float>(1.0 / std::sqrt(static_cast<double>(h)));
  a->set(p);
  if (mask) c.net().set_layer_input(a, 3, mask);
  Tensor* y = a->get_output(0);
  if (three_d) {
    y = im.transpose(y, {0, 2, 1, 3});
    const auto hv = y->dims()[3], n = y->dims()[2];
    y = im.reshape(y, Dims{0, 0, checked_mul(n, hv, "the hidden size")}, true);
  }
  c.output(0, y);
}

void group_norm(NodeContext& c) {
  auto& im = c.im();
  Tensor* x = c.input(0);
  const int r = x->dims().rank();
  if (r < 3) fail(OnnxErrorCode::kINVALID_NODE, "input of rank " + std::to_string(r));
  const auto groups = c.attr_int("num_groups", 0);
  if (groups < 1) fail(OnnxErrorCode::kINVALID_NODE, "num_groups " + std::to_string(groups));
  const auto channels = x->dims()[1];
  Tensor* scale = c.input(1);
  Tensor* bias = c.input(2);
  if (scale->dims().rank() == 1 && scale->dims()[0] == groups && channels != groups) {
    // Opset 18: one scale and bias per group, repeated over the group's channels.
    if (channels < 0) fail(OnnxErrorCode::kUNSUPPORTED_NODE_DYNAMIC, "per-group scale with an unknown channel count");
    auto per_channel = [&](Tensor* v) {
      Tensor* g = im.reshape(v, Dims{groups, 1});
      g = im.broadcast_to(g, Dims{groups, channels / groups});
      return im.reshape(g, Dims{channels});
    };
    scale = per_channel(scale);
    bias = per_channel(bias);
  }
  std::uint32_t axes = 0;
  for (int i = 2; i < r; ++i) axes |= 1u << i;
  c.output(0, normalize(c, x, channel_shaped(im, scale, r), channel_shaped(im, bias, r), axes, c.attr_float("epsilon", 1e-5f),
                        static_cast<int>(groups)));
}

void lp_norm(NodeContext& c) {
  auto& im = c.im();
  Tensor* x = c.input(0);
  const int r = x->dims().rank();
  const int axis = c.axis(c.attr_int("axis", -1), r);
  const auto p = c.attr_int("p", 2);
  if (p != 1 && p != 2) fail(OnnxErrorCode::kUNSUPPORTED_NODE_ATTR, "p = " + std::to_string(p));
  Tensor* m = p == 1 ? im.unary(x, UnaryOperation::kABS) : c.net().add_elementwise(x, x, E::kPROD)->get_output(0);
  Tensor* n = c.net().add_reduce(m, ReduceOperation::kSUM, 1u << axis, true)->get_output(0);
  if (p == 2) n = im.unary(n, UnaryOperation::kSQRT);
  // A zero norm divides zeros: 0, not NaN (ONNX's reference).
  n = im.elementwise(n, im.scalar(n->type(), 1e-30, r), E::kMAX);
  c.output(0, im.elementwise(x, n, E::kDIV));
}

// Zero points must be zero: tensoracle's quantization is symmetric.
void require_zero_point(NodeContext& c, int i) {
  if (!c.has_input(i)) return;
  auto zp = c.known_input(i, "zero point");
  for (auto v : zp.floats())
    if (v != 0) fail(OnnxErrorCode::kUNSUPPORTED_NODE_INPUT, "a non-zero zero point (tensoracle quantizes symmetrically)");
}

void quantize_linear(NodeContext& c) {
  Tensor* x = c.input(0);
  if (c.attr_int("block_size", 0) != 0) fail(OnnxErrorCode::kUNSUPPORTED_NODE_ATTR, "block_size (blocked quantization)");
  DataType to = DataType::kUINT8;
  if (c.has_input(2)) to = c.input(2)->type();
  else if (c.has_attr("output_dtype")) {
    auto t = data_type_of(static_cast<std::int32_t>(c.attr_int("output_dtype", 2)));
    to = t ? *t : DataType::kUINT8;
  }
  if (to != DataType::kINT8 && to != DataType::kFP8)
    fail(OnnxErrorCode::kUNSUPPORTED_NODE_DATATYPE, "quantization to " + std::string(type_name(to)) + "; int8 and float8e4m3fn are supported");
  require_zero_point(c, 2);
  Tensor* scale = c.input(1);
  if (scale->dims().volume() == 1 && scale->dims().rank() > 0) scale = c.im().reshape(scale, Dims{});
  if (scale->type() != x->type()) scale = c.im().cast(scale, x->type());
  auto* q = c.net().add_quantize(x, scale, to);
  q->set_axis(c.axis(c.attr_int("axis", 1), std::max(x->dims().rank(), 1)));
  c.output(0, q->get_output(0));
}

void dequantize_linear(NodeContext& c) {
  Tensor* x = c.input(0);
  if (c.attr_int("block_size", 0) != 0) fail(OnnxErrorCode::kUNSUPPORTED_NODE_ATTR, "block_size (blocked quantization)");
  if (x->type() != DataType::kINT8 && x->type() != DataType::kFP8)
    fail(OnnxErrorCode::kUNSUPPORTED_NODE_DATATYPE, "dequantization of " + std::string(type_name(x->type())) + "; int8 and float8e4m3fn are supported");
  require_zero_point(c, 2);
  Tensor* scale = c.input(1);
  if (scale->dims().volume() == 1 && scale->dims().rank() > 0) scale = c.im().reshape(scale, Dims{});
  auto* dq = c.net().add_dequantize(x, scale, scale->type());
  dq->set_axis(c.axis(c.attr_int("axis", 1), std::max(x->dims().rank(), 1)));
  c.output(0, dq->get_output(0));
}

}  // namespace

void add_nn_ops(ConverterTable& t) {
  t["Conv"] = conv;
  t["LRN"] = lrn;
  t["ConvTranspose"] = conv_transpose;
  t["MaxPool"] = pool(PoolingType::kMAX);
  t["AveragePool"] = pool(PoolingType::kAVERAGE);
  t["GlobalAveragePool"] = global_pool(ReduceOperation::kAVG);
  t["GlobalMaxPool"] = global_pool(ReduceOperation::kMAX);
  t["BatchNormalization"] = batch_norm;
  t["InstanceNormalization"] = instance_norm;
  t["LayerNormalization"] = layer_norm;
  t["RMSNormalization"] = rms_norm;
  t["Attention"] = attention;
  t["GroupNormalization"] = group_norm;
  t["LpNormalization"] = lp_norm;
  t["QuantizeLinear"] = quantize_linear;
  t["DequantizeLinear"] = dequantize_linear;
}

}  // namespace tensoracle::onnx
