// ONNX's shape, indexing and data-movement operators as tensoracle layers.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/numeric.h"
#include "onnx/importer.h"

namespace tensoracle::onnx {

namespace {

using E = ElementWiseOperation;

Tensor* shape_of(NodeContext& c, Tensor* x) { return c.net().add_shape(x)->get_output(0); }

// x without the axes in `mask` (each of size 1): the kept axes first, then a reshape that
// copies them (0 placeholders), so unknown dims stay unknown.
Tensor* drop_axes(NodeContext& c, Tensor* x, std::uint32_t mask) {
  const Dims& d = x->dims();
  const int r = d.rank();
  std::vector<std::int64_t> out;
  Permutation p;
  int k = 0;
  for (int i = 0; i < r; ++i)
    if (!(mask & (1u << i))) { p.order[static_cast<std::size_t>(k++)] = i; out.push_back(d[i] >= 0 ? d[i] : 0); }
  for (int i = 0; i < r; ++i)
    if (mask & (1u << i)) {
      if (d[i] > 1 || d[i] == 0)
        fail(OnnxErrorCode::kINVALID_NODE, "axis " + std::to_string(i) + " has size " + std::to_string(d[i]) + ", not 1");
      p.order[static_cast<std::size_t>(k++)] = i;
    }
  auto* s = c.net().add_shuffle(x);
  s->set_first_transpose(p);
  s->set_zero_is_placeholder(true);
  s->set_reshape_dims(dims_of(out));
  return s->get_output(0);
}

// x with dims of 1 inserted at the output axes in `mask` (output rank r + popcount).
Tensor* insert_axes(NodeContext& c, Tensor* x, std::uint32_t mask, int out_rank) {
  const Dims& d = x->dims();
  const int r = d.rank();
  // Reshape to [d..., 1 x k] with placeholders, then move each 1 to its place.
  std::vector<std::int64_t> spec;
  for (int i = 0; i < r; ++i) spec.push_back(d[i] == 0 ? 0 : (d[i] > 0 ? d[i] : 0));
  const bool zero_dim = std::any_of(d.begin(), d.end(), [](std::int64_t v) { return v == 0; });
  for (int i = r; i < out_rank; ++i) spec.push_back(1);
  auto* s = c.net().add_shuffle(x);
  s->set_zero_is_placeholder(!zero_dim);
  if (zero_dim) {
    for (int i = 0; i < r; ++i) spec[static_cast<std::size_t>(i)] = d[i];
    if (!d.all_known()) fail(OnnxErrorCode::kUNSUPPORTED_NODE_DYNAMIC, "an empty tensor of unknown dims");
  }
  s->set_reshape_dims(dims_of(spec));
  Permutation p;
  int src = 0, one = r;
  for (int i = 0; i < out_rank; ++i) p.order[static_cast<std::size_t>(i)] = (mask & (1u << i)) ? one++ : src++;
  s->set_second_transpose(p);
  return s->get_output(0);
}

void identity(NodeContext& c) { c.output(0, c.im().identity(c.input(0))); }

void dropout(NodeContext& c) {
  if (c.has_input(2)) {
    auto training = c.input_value(2);
    if (!training || training->ints().empty() || training->ints()[0] != 0)
      fail(OnnxErrorCode::kUNSUPPORTED_NODE_INPUT, "training_mode must be a known false: engines run inference");
  }
  Tensor* x = c.input(0);
  c.output(0, c.im().identity(x));
  if (c.wants_output(1)) {
    if (!x->dims().all_known()) fail(OnnxErrorCode::kUNSUPPORTED_NODE_DYNAMIC, "Dropout's mask output needs known dims");
    c.output(1, c.im().broadcast_to(c.im().scalar(DataType::kBOOL, 1, x->dims().rank()), x->dims()));
  }
}

DataType cast_target(std::int64_t to) {
  auto t = data_type_of(static_cast<std::int32_t>(to));
  if (!t)
    fail(OnnxErrorCode::kUNSUPPORTED_NODE_DATATYPE, "cast to ONNX type " + onnx_type_name(static_cast<std::int32_t>(to)) +
                                                        ", which tensoracle has no type for");
  return *t;
}

// x as `to`. fp8 values enter and leave through quantize / dequantize with a scale of 1, which
// round to nearest even and saturate as ONNX's Cast does with saturate = 1.
Tensor* convert(NodeContext& c, Tensor* x, DataType to) {
  auto& im = c.im();
  if (x->type() == to) return im.identity(x);
  if (to != DataType::kFP8 && x->type() != DataType::kFP8) return im.cast(x, to);
  if (c.attr_int("saturate", 1) == 0)
    fail(OnnxErrorCode::kUNSUPPORTED_NODE_ATTR, "saturate = 0 for float8 (tensoracle's conversions to fp8 saturate)");
  if (to == DataType::kFP8) {
    Tensor* f = is_floating(x->type()) ? x : im.cast(x, DataType::kFLOAT);
    return c.net().add_quantize(f, im.scalar(f->type(), 1, 0), DataType::kFP8)->get_output(0);
  }
  const DataType via = to == DataType::kHALF || to == DataType::kBF16 ? to : DataType::kFLOAT;
  Tensor* y = c.net().add_dequantize(x, im.scalar(via, 1, 0), via)->get_output(0);
  return im.cast(y, to);
}

void cast(NodeContext& c) { c.output(0, convert(c, c.input(0), cast_target(c.attr_int("to", 1)))); }

void cast_like(NodeContext& c) { c.output(0, convert(c, c.input(0), c.input(1)->type())); }

void constant(NodeContext& c) {
  auto& im = c.im();
  if (const auto* t = c.attr_tensor("value")) {
    Known k = read_tensor(*t, im.owner(), "");
    return c.output(0, im.constant(k.dims, k.weights));
  }
  if (c.has_attr("value_float")) {
    float v = c.attr_float("value_float", 0);
    return c.output(0, im.constant(Dims{}, Weights::copy_of(DataType::kFLOAT, &v, 1)));
  }
  if (c.has_attr("value_floats")) {
    auto v = c.attr_floats("value_floats");
    return c.output(0, im.constant(Dims{static_cast<std::int64_t>(v.size())},
                                   Weights::copy_of(DataType::kFLOAT, v.data(), static_cast<std::int64_t>(v.size()))));
  }
  if (c.has_attr("value_int")) {
    std::int64_t v = c.attr_int("value_int", 0);
    return c.output(0, im.constant(Dims{}, Weights::copy_of(DataType::kINT64, &v, 1)));
  }
  if (c.has_attr("value_ints")) return c.output(0, im.constant_i64(c.attr_ints("value_ints")));
  fail(OnnxErrorCode::kUNSUPPORTED_NODE_ATTR, "Constant without a value, value_float(s) or value_int(s) attribute "
                                              "(strings and sparse tensors are not supported)");
}

void constant_of_shape(NodeContext& c) {
  auto& im = c.im();
  Known fill;
  if (const auto* t = c.attr_tensor("value")) {
    fill = read_tensor(*t, im.owner(), "");
    if (fill.weights.count() != 1) fail(OnnxErrorCode::kINVALID_NODE, "value must hold one element");
  } else {
    float zero = 0;
    fill = {Weights::copy_of(DataType::kFLOAT, &zero, 1), Dims{1}};
  }
  auto shape = c.input_value(0);
  if (shape) {
    auto v = shape->ints();
    for (auto d : v)
      if (d < 0) fail(OnnxErrorCode::kINVALID_NODE, "the shape holds a negative dimension " + std::to_string(d));
    const Dims dims = dims_of(v);
    std::vector<std::int64_t> ones(v.size(), 1);
    Tensor* one = im.constant(dims_of(ones), fill.weights);
    if (std::find(v.begin(), v.end(), 0) != v.end()) {
      // An empty result: a constant with no elements.
      return c.output(0, im.constant(dims, Weights::copy_of(fill.weights.type(), fill.weights.values(), 0)));
    }
    return c.output(0, im.broadcast_to(one, dims));
  }
  Tensor* s = c.input(0);
  if (s->dims().rank() != 1 || s->dims()[0] < 0)
    fail(OnnxErrorCode::kUNSUPPORTED_NODE_DYNAMIC, "the shape's length must be known");
  std::vector<std::int64_t> ones(static_cast<std::size_t>(s->dims()[0]), 1);
  c.output(0, im.broadcast_to(im.constant(dims_of(ones), fill.weights), s));
}

void shape(NodeContext& c) {
  auto& im = c.im();
  Tensor* x = c.input(0);
  const int r = x->dims().rank();
  auto clampi = [r](std::int64_t v) { return std::clamp<std::int64_t>(v < 0 ? v + r : v, 0, r); };
  const auto start = clampi(c.attr_int("start", 0)), end = clampi(c.attr_int("end", r));
  const std::int64_t n = std::max<std::int64_t>(0, end - start);
  if (x->dims().all_known() || std::all_of(x->dims().begin() + start, x->dims().begin() + start + n, [](auto d) { return d >= 0; })) {
    std::vector<std::int64_t> v(x->dims().begin() + start, x->dims().begin() + start + n);
    return c.output(0, im.constant_i64(v));
  }
  Tensor* s = shape_of(c, x);
  if (start == 0 && n == r) return c.output(0, s);
  c.output(0, c.net().add_slice(s, Dims{start}, Dims{n}, Dims{1})->get_output(0));
}

void size(NodeContext& c) {
  Tensor* x = c.input(0);
  if (x->dims().all_known()) {
    std::int64_t v = x->dims().volume();
    return c.output(0, c.im().constant(Dims{}, Weights::copy_of(DataType::kINT64, &v, 1)));
  }
  c.output(0, c.net().add_reduce(shape_of(c, x), ReduceOperation::kPROD, 1u, false)->get_output(0));
}

void reshape(NodeContext& c) {
  auto& im = c.im();
  Tensor* x = c.input(0);
  const bool allowzero = c.attr_int("allowzero", 0) != 0;
  std::optional<Known> spec;
  if (c.opset() < 5) spec = Known{};  // attribute form
  if (c.has_input(1)) {
    if (auto k = c.input_value(1)) {
      auto v = k->ints();
      return c.output(0, im.reshape(x, dims_of(v), !allowzero));
    }
    // Unknown entries that are x's own dims in place (Importer::same_dim: read from x or from a
    // tensor x was computed from) become 0 placeholders, one other at most -1: a static
    // reshape, whose known dims later layers can use.
    auto sym = im.symbolic(c.input(1));
    // allowzero only matters for a literal 0 entry.
    const bool zero_entry = sym && std::any_of(sym->begin(), sym->end(), [](const auto& e) { return e.value && *e.value == 0; });
    if (sym && !(allowzero && zero_entry)) {
      std::vector<std::int64_t> spec;
      int inferred = 0;
      bool ok = true;
      for (std::size_t i = 0; i < sym->size() && ok; ++i) {
        const auto& e = (*sym)[i];
        if (e.value) {
          ok = *e.value != 0 || static_cast<int>(i) < x->dims().rank();
          spec.push_back(*e.value);
          if (*e.value == -1) ++inferred;
        } else if (e.of != nullptr && im.same_dim(e.of, e.axis, x, static_cast<int>(i))) {
          spec.push_back(0);
        } else {
          spec.push_back(-1);
          ++inferred;
        }
      }
      if (ok && inferred <= 1) return c.output(0, im.reshape(x, dims_of(spec), true));
    }
    im.require_shape_computable(c.input(1), "the shape");
    auto* s = c.net().add_shuffle(x);
    s->set_zero_is_placeholder(!allowzero);
    c.net().set_layer_input(s, 1, c.input(1));
    Tensor* y = s->get_output(0);
    // The entries known while parsing become known dims of the result: a second reshape that
    // restates them (0 keeps a dim known only at run time; at run time it changes nothing).
    if (sym && !zero_entry && std::any_of(sym->begin(), sym->end(), [](const auto& e) { return e.value && *e.value > 0; })) {
      std::vector<std::int64_t> spec;
      for (const auto& e : *sym) spec.push_back(e.value && *e.value > 0 ? *e.value : 0);
      y = im.reshape(y, dims_of(spec), true);
    }
    return c.output(0, y);
  }
  c.output(0, im.reshape(x, dims_of(c.attr_ints("shape")), true));
}

void flatten(NodeContext& c) {
  auto& im = c.im();
  Tensor* x = c.input(0);
  const Dims& d = x->dims();
  const int r = d.rank();
  std::int64_t a = c.attr_int("axis", 1);
  if (a < -r || a > r) fail(OnnxErrorCode::kINVALID_NODE, "axis " + std::to_string(a) + " is outside [-rank, rank]");
  const int axis = static_cast<int>(a < 0 ? a + r : a);
  std::int64_t rows = 1, cols = 1;
  bool rows_known = true, cols_known = true;
  for (int i = 0; i < r; ++i) {
    if (d[i] < 0) (i < axis ? rows_known : cols_known) = false;
    else (i < axis ? rows : cols) = checked_mul(i < axis ? rows : cols, d[i], "the flattened size");
  }
  if (rows_known && cols_known) return c.output(0, im.reshape(x, Dims{rows, cols}));
  if (cols_known) return c.output(0, im.reshape(x, Dims{-1, cols}));
  if (rows_known) return c.output(0, im.reshape(x, Dims{rows, -1}));
  fail(OnnxErrorCode::kUNSUPPORTED_NODE_DYNAMIC, "Flatten with unknown dims on both sides of the axis");
}

std::vector<std::int64_t> axes_of(NodeContext& c, bool* given) {
  *given = true;
  if (c.has_input(1)) return c.input_ints(1, "axes");
  if (c.has_attr("axes")) return c.attr_ints("axes");
  *given = false;
  return {};
}

void squeeze(NodeContext& c) {
  Tensor* x = c.input(0);
  const Dims& d = x->dims();
  bool given = false;
  auto axes = axes_of(c, &given);
  std::uint32_t mask = 0;
  if (!given) {
    for (int i = 0; i < d.rank(); ++i) {
      if (d[i] < 0) fail(OnnxErrorCode::kUNSUPPORTED_NODE_DYNAMIC, "Squeeze without axes needs known dims");
      if (d[i] == 1) mask |= 1u << i;
    }
  } else {
    mask = c.axes_mask(axes, d.rank());
  }
  c.output(0, drop_axes(c, x, mask));
}

void unsqueeze(NodeContext& c) {
  Tensor* x = c.input(0);
  bool given = false;
  auto axes = axes_of(c, &given);
  const int out_rank = x->dims().rank() + static_cast<int>(axes.size());
  if (out_rank > Dims::kMaxRank) fail(OnnxErrorCode::kUNSUPPORTED_NODE_SHAPE, "the result's rank is above 8");
  c.output(0, insert_axes(c, x, c.axes_mask(axes, out_rank), out_rank));
}

void transpose(NodeContext& c) {
  Tensor* x = c.input(0);
  const int r = x->dims().rank();
  auto perm = c.attr_ints("perm");
  std::vector<int> p;
  if (perm.empty()) {
    for (int i = r - 1; i >= 0; --i) p.push_back(i);
  } else {
    if (static_cast<int>(perm.size()) != r)
      fail(OnnxErrorCode::kINVALID_NODE, "perm has " + std::to_string(perm.size()) + " entries for an input of rank " + std::to_string(r));
    for (auto v : perm) p.push_back(c.axis(v, r, "perm entry"));
  }
  c.output(0, c.im().transpose(x, p));
}

void expand(NodeContext& c) {
  auto& im = c.im();
  Tensor* x = c.input(0);
  auto shape = c.input_value(1);
  if (shape) {
    auto s = shape->ints();
    const int r = std::max(x->dims().rank(), static_cast<int>(s.size()));
    x = im.prepend_ones(x, r - x->dims().rank());
    s.insert(s.begin(), static_cast<std::size_t>(r) - s.size(), 1);
    std::vector<std::int64_t> out(static_cast<std::size_t>(r));
    bool known = true;
    for (int i = 0; i < r; ++i) {
      const auto xd = x->dims()[i], sd = s[static_cast<std::size_t>(i)];
      if (xd < 0 && sd == 1) known = false;
      if (xd >= 0 && sd != 1 && xd != 1 && xd != sd)
        fail(OnnxErrorCode::kINVALID_NODE, "dimension " + std::to_string(i) + " of size " + std::to_string(xd) +
                                               " cannot expand to " + std::to_string(sd));
      out[static_cast<std::size_t>(i)] = sd == 1 ? xd : sd;
    }
    if (known) return c.output(0, im.broadcast_to(x, dims_of(out)));
  }
  // At run time: the larger of the two shapes, dimension by dimension.
  Tensor* s = c.input(1);
  if (s->dims().rank() != 1 || s->dims()[0] < 0) fail(OnnxErrorCode::kUNSUPPORTED_NODE_DYNAMIC, "the shape's length must be known");
  const int r = std::max<int>(x->dims().rank(), static_cast<int>(s->dims()[0]));
  x = im.prepend_ones(x, r - x->dims().rank());
  if (s->dims()[0] < r) {
    std::vector<std::int64_t> ones(static_cast<std::size_t>(r - s->dims()[0]), 1);
    s = c.net().add_concatenation({im.constant_i64(ones), im.cast(s, DataType::kINT64)})->get_output(0);
  }
  Tensor* target = c.net().add_elementwise(shape_of(c, x), im.cast(s, DataType::kINT64), E::kMAX)->get_output(0);
  c.output(0, im.broadcast_to(x, target));
}

void concat(NodeContext& c) {
  std::vector<Tensor*> in;
  for (int i = 0; i < c.num_inputs(); ++i)
    if (c.has_input(i)) in.push_back(c.input(i));
  if (in.empty()) fail(OnnxErrorCode::kINVALID_NODE, "Concat without inputs");
  const int r = in[0]->dims().rank();
  const int axis = c.axis(c.attr_int("axis", 0), r);
  // Inputs empty along the axis add nothing.
  std::vector<Tensor*> kept;
  for (Tensor* t : in)
    if (t->dims().rank() != r || t->dims()[axis] != 0) kept.push_back(t);
  if (kept.empty()) kept.push_back(in[0]);
  auto* l = c.net().add_concatenation(kept);
  l->set(ConcatenationParams{axis});
  c.output(0, l->get_output(0));
}

// x[..., start : start + len, ...] along `axis`.
Tensor* slice_axis(NodeContext& c, Tensor* x, int axis, std::int64_t start, std::int64_t len) {
  auto& im = c.im();
  const Dims& d = x->dims();
  const int r = d.rank();
  std::vector<std::int64_t> st(static_cast<std::size_t>(r), 0), sz(d.begin(), d.end()), one(static_cast<std::size_t>(r), 1);
  st[static_cast<std::size_t>(axis)] = start;
  sz[static_cast<std::size_t>(axis)] = len;
  bool known = std::all_of(sz.begin(), sz.end(), [](auto v) { return v >= 0; });
  auto* s = c.net().add_slice(x, dims_of(st), known ? dims_of(sz) : dims_of(one), dims_of(one));
  if (!known) {
    std::vector<std::int64_t> keep(static_cast<std::size_t>(r), 1), add(static_cast<std::size_t>(r), 0);
    keep[static_cast<std::size_t>(axis)] = 0;
    add[static_cast<std::size_t>(axis)] = len;
    Tensor* size = c.net().add_elementwise(shape_of(c, x), im.constant_i64(keep), E::kPROD)->get_output(0);
    size = c.net().add_elementwise(size, im.constant_i64(add), E::kSUM)->get_output(0);
    c.net().set_layer_input(s, kSliceSize, size);
  }
  return s->get_output(0);
}

void split(NodeContext& c) {
  Tensor* x = c.input(0);
  const int r = x->dims().rank();
  const int axis = c.axis(c.attr_int("axis", 0), r);
  const auto dim = x->dims()[axis];
  std::vector<std::int64_t> parts;
  if (c.has_input(1)) parts = c.input_ints(1, "split");
  else if (c.has_attr("split")) parts = c.attr_ints("split");
  const int n = c.num_outputs();
  if (parts.empty()) {
    if (dim < 0) fail(OnnxErrorCode::kUNSUPPORTED_NODE_DYNAMIC, "Split along an axis of unknown size");
    const std::int64_t outputs = c.has_attr("num_outputs") ? c.attr_int("num_outputs", n) : n;
    if (outputs <= 0) fail(OnnxErrorCode::kINVALID_NODE, "Split into no outputs");
    const std::int64_t each = (dim + outputs - 1) / outputs;
    if (outputs > dim + 1 && outputs > 64) fail(OnnxErrorCode::kINVALID_NODE, "Split into " + std::to_string(outputs) + " outputs");
    for (std::int64_t i = 0, left = dim; i < outputs; ++i, left -= each) parts.push_back(std::clamp<std::int64_t>(left, 0, each));
  }
  if (static_cast<int>(parts.size()) != n)
    fail(OnnxErrorCode::kINVALID_NODE, "split has " + std::to_string(parts.size()) + " parts for " + std::to_string(n) + " outputs");
  std::int64_t start = 0;
  for (int i = 0; i < n; ++i) {
    if (parts[static_cast<std::size_t>(i)] < 0) fail(OnnxErrorCode::kINVALID_NODE, "split holds a negative size");
    c.output(i, slice_axis(c, x, axis, start, parts[static_cast<std::size_t>(i)]));
    start = checked_add(start, parts[static_cast<std::size_t>(i)], "the split sizes");
  }
  if (dim >= 0 && start != dim)
    fail(OnnxErrorCode::kINVALID_NODE, "the parts add up to " + std::to_string(start) + ", not the axis size " + std::to_string(dim));
}

// Slice with bounds known only at run time (ends from a Shape of a dynamic axis, typically):
// ONNX's clamping computed on shape tensors of the input's rank, then one slice reading its
// start and size from them. Axes and steps must be known.
void slice_at_run_time(NodeContext& c, Tensor* x, std::vector<std::int64_t> axes, std::vector<std::int64_t> steps) {
  auto& im = c.im();
  auto& net = c.net();
  const int r = x->dims().rank();
  Tensor* starts = im.cast(c.input(1), DataType::kINT64);
  Tensor* ends = im.cast(c.input(2), DataType::kINT64);
  im.require_shape_computable(starts, "the starts");
  im.require_shape_computable(ends, "the ends");
  if (starts->dims().rank() != 1 || starts->dims()[0] < 0 || starts->dims() != ends->dims())
    fail(OnnxErrorCode::kUNSUPPORTED_NODE_DYNAMIC, "starts and ends must be 1-D of one known length");
  const auto k = starts->dims()[0];
  if (axes.empty())
    for (std::int64_t i = 0; i < k; ++i) axes.push_back(i);
  if (steps.empty()) steps.assign(static_cast<std::size_t>(k), 1);
  if (static_cast<std::int64_t>(axes.size()) != k || static_cast<std::int64_t>(steps.size()) != k)
    fail(OnnxErrorCode::kINVALID_NODE, "starts, ends, axes and steps differ in length");
  // For each axis of x: which entry of starts / ends it takes (k: the default appended last),
  // its step, and 1 where the step is negative.
  std::vector<std::int64_t> pick(static_cast<std::size_t>(r), k), stride(static_cast<std::size_t>(r), 1),
      negative(static_cast<std::size_t>(r), 0), magnitude(static_cast<std::size_t>(r), 1);
  std::uint32_t seen = 0;
  for (std::int64_t i = 0; i < k; ++i) {
    const int a = c.axis(axes[static_cast<std::size_t>(i)], r);
    if (seen & (1u << a)) fail(OnnxErrorCode::kINVALID_NODE, "axis " + std::to_string(a) + " is sliced twice");
    seen |= 1u << a;
    const auto step = steps[static_cast<std::size_t>(i)];
    if (step == 0 || step == INT64_MIN) fail(OnnxErrorCode::kINVALID_NODE, "a step is " + std::to_string(step));
    pick[static_cast<std::size_t>(a)] = i;
    stride[static_cast<std::size_t>(a)] = step;
    negative[static_cast<std::size_t>(a)] = step < 0;
    magnitude[static_cast<std::size_t>(a)] = step < 0 ? -step : step;
  }
  auto ew = [&](Tensor* a, Tensor* b, E op) { return net.add_elementwise(a, b, op)->get_output(0); };
  auto vec = [&](const std::vector<std::int64_t>& v) { return im.constant_i64(v); };
  Tensor* dims = shape_of(c, x);
  Tensor* zero = vec(std::vector<std::int64_t>(static_cast<std::size_t>(r), 0));
  // Per axis: start (default 0) and end (default past the end), negatives counted from the end.
  auto per_axis = [&](Tensor* given, std::int64_t fallback) {
    Tensor* all = net.add_concatenation({given, im.constant_i64({fallback})})->get_output(0);
    Tensor* v = net.add_gather(all, vec(pick), 0)->get_output(0);
    // v + d where v < 0, in integer arithmetic only (the builder computes shape tensors of
    // int32/int64, not bool): the indicator is min(max(-v, 0), 1).
    Tensor* negative_v = ew(ew(ew(zero, v, E::kSUB), zero, E::kMAX), vec(std::vector<std::int64_t>(static_cast<std::size_t>(r), 1)), E::kMIN);
    return ew(v, ew(negative_v, dims, E::kPROD), E::kSUM);
  };
  Tensor* neg = vec(negative);
  Tensor* upper = ew(dims, neg, E::kSUB);  // d, or d - 1 for a negative step
  Tensor* s = ew(ew(per_axis(starts, 0), upper, E::kMIN), zero, E::kMAX);
  Tensor* e = ew(ew(per_axis(ends, INT64_MAX), upper, E::kMIN), im.elementwise(zero, neg, E::kSUB), E::kMAX);
  // size = max(0, ceil((e - s) * sign / |step|))
  std::vector<std::int64_t> sign(static_cast<std::size_t>(r));
  for (int a = 0; a < r; ++a) sign[static_cast<std::size_t>(a)] = negative[static_cast<std::size_t>(a)] ? -1 : 1;
  Tensor* span = ew(ew(e, s, E::kSUB), vec(sign), E::kPROD);
  std::vector<std::int64_t> bias(magnitude);
  for (auto& b : bias) b -= 1;
  Tensor* size = ew(ew(ew(span, vec(bias), E::kSUM), vec(magnitude), E::kFLOOR_DIV), zero, E::kMAX);
  std::vector<std::int64_t> ones(static_cast<std::size_t>(r), 1);
  auto* l = net.add_slice(x, dims_of(std::vector<std::int64_t>(static_cast<std::size_t>(r), 0)), dims_of(ones), dims_of(stride));
  net.set_layer_input(l, kSliceStart, s);
  net.set_layer_input(l, kSliceSize, size);
  c.output(0, l->get_output(0));
}

void slice(NodeContext& c) {
  auto& im = c.im();
  Tensor* x = c.input(0);
  const Dims& d = x->dims();
  const int r = d.rank();
  std::vector<std::int64_t> starts, ends, axes, steps;
  if (c.opset() < 10) {
    starts = c.attr_ints("starts");
    ends = c.attr_ints("ends");
    axes = c.attr_ints("axes");
  } else {
    if (c.has_input(3)) axes = c.input_ints(3, "axes");
    if (c.has_input(4)) steps = c.input_ints(4, "steps");
    auto s = c.input_value(1), e = c.input_value(2);
    bool dims_known = true;
    for (std::size_t i = 0; i < (axes.empty() ? static_cast<std::size_t>(r) : axes.size()); ++i)
      dims_known = dims_known && d[axes.empty() ? static_cast<int>(i) : c.axis(axes[i], r)] >= 0;
    if (!s || !e || !dims_known) return slice_at_run_time(c, x, axes, steps);
    starts = s->ints();
    ends = e->ints();
  }
  if (axes.empty())
    for (std::size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<std::int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    fail(OnnxErrorCode::kINVALID_NODE, "starts, ends, axes and steps differ in length");
  std::vector<std::int64_t> st(static_cast<std::size_t>(r), 0), sz(d.begin(), d.end()), stride(static_cast<std::size_t>(r), 1);
  std::uint32_t seen = 0;
  for (std::size_t i = 0; i < starts.size(); ++i) {
    const int a = c.axis(axes[i], r);
    if (seen & (1u << a)) fail(OnnxErrorCode::kINVALID_NODE, "axis " + std::to_string(a) + " is sliced twice");
    seen |= 1u << a;
    const auto dim = d[a];
    const auto step = steps[i];
    if (step == 0) fail(OnnxErrorCode::kINVALID_NODE, "a step is 0");
    if (dim < 0)
      fail(OnnxErrorCode::kUNSUPPORTED_NODE_DYNAMIC, "Slice along axis " + std::to_string(a) + ", whose size is known only at run time");
    auto norm = [dim](std::int64_t v) { return v < 0 ? (v < -dim ? -1 - dim + dim : v + dim) : v; };
    std::int64_t s = starts[i], e = ends[i];
    s = s < 0 ? std::max<std::int64_t>(s + dim, 0) : s;
    e = e < 0 ? (e < -dim ? -1 : e + dim) : e;
    (void)norm;
    std::int64_t count;
    if (step > 0) {
      s = std::min(s, dim);
      e = std::clamp<std::int64_t>(e, 0, dim);
      count = e > s ? (e - s - 1) / step + 1 : 0;
    } else {
      s = std::min(s, dim - 1);
      e = std::clamp<std::int64_t>(e, -1, dim - 1);
      count = s > e ? (s - e - 1) / checked_mul(step, -1, "a step") + 1 : 0;
    }
    st[static_cast<std::size_t>(a)] = count > 0 ? s : 0;
    sz[static_cast<std::size_t>(a)] = count;
    stride[static_cast<std::size_t>(a)] = count > 0 ? step : 1;
  }
  const bool known = std::all_of(sz.begin(), sz.end(), [](auto v) { return v >= 0; });
  std::vector<std::int64_t> ones(static_cast<std::size_t>(r), 1);
  auto* s = c.net().add_slice(x, dims_of(st), known ? dims_of(sz) : dims_of(ones), dims_of(stride));
  if (!known) {
    std::vector<std::int64_t> keep(static_cast<std::size_t>(r), 1), add(static_cast<std::size_t>(r), 0);
    for (int a = 0; a < r; ++a)
      if (seen & (1u << a)) { keep[static_cast<std::size_t>(a)] = 0; add[static_cast<std::size_t>(a)] = sz[static_cast<std::size_t>(a)]; }
    Tensor* size = c.net().add_elementwise(shape_of(c, x), im.constant_i64(keep), E::kPROD)->get_output(0);
    size = c.net().add_elementwise(size, im.constant_i64(add), E::kSUM)->get_output(0);
    c.net().set_layer_input(s, kSliceSize, size);
  }
  c.output(0, s->get_output(0));
}

// Indices made non-negative along a dimension of size `dim` (ONNX allows -dim..dim-1).
Tensor* wrap_indices(NodeContext& c, Tensor* idx, std::int64_t dim) {
  auto& im = c.im();
  if (dim < 0) return idx;  // a size known only at run time: the gather checks the indices then
  if (auto k = im.value(idx)) {
    auto v = k->ints();
    bool negative = false;
    for (auto& i : v)
      if (i < 0) { i += dim; negative = true; }
    if (!negative) return idx;
    if (k->weights.type() == DataType::kINT32) {
      std::vector<std::int32_t> w(v.begin(), v.end());
      return im.constant(k->dims, Weights::copy_of(DataType::kINT32, w.data(), static_cast<std::int64_t>(w.size())));
    }
    return im.constant(k->dims, Weights::copy_of(DataType::kINT64, v.data(), static_cast<std::int64_t>(v.size())));
  }
  const int r = idx->dims().rank();
  Tensor* zero = im.scalar(idx->type(), 0, r);
  Tensor* negative = c.net().add_elementwise(idx, zero, E::kLESS)->get_output(0);
  Tensor* shifted = c.net().add_elementwise(idx, im.scalar(idx->type(), static_cast<double>(dim), r), E::kSUM)->get_output(0);
  return c.net().add_select(negative, shifted, idx)->get_output(0);
}

void gather(NodeContext& c) {
  Tensor* data = c.input(0);
  const int axis = c.axis(c.attr_int("axis", 0), data->dims().rank());
  Tensor* idx = wrap_indices(c, c.input(1), data->dims()[axis]);
  c.output(0, c.net().add_gather(data, idx, axis)->get_output(0));
}

void gather_elements(NodeContext& c) {
  Tensor* data = c.input(0);
  const int axis = c.axis(c.attr_int("axis", 0), data->dims().rank());
  Tensor* idx = wrap_indices(c, c.input(1), data->dims()[axis]);
  auto* g = c.net().add_gather_v2(data, idx, GatherMode::kELEMENT);
  auto p = g->get();
  p.axis = axis;
  g->set(p);
  c.output(0, g->get_output(0));
}

void gather_nd(NodeContext& c) {
  auto* g = c.net().add_gather_v2(c.input(0), c.input(1), GatherMode::kND);
  auto p = g->get();
  p.num_elementwise_dims = static_cast<std::int32_t>(c.attr_int("batch_dims", 0));
  g->set(p);
  c.output(0, g->get_output(0));
}

void tile(NodeContext& c) {
  Tensor* x = c.input(0);
  auto reps = c.input_ints(1, "repeats");
  const Dims& d = x->dims();
  if (static_cast<int>(reps.size()) != d.rank())
    fail(OnnxErrorCode::kINVALID_NODE, "repeats has " + std::to_string(reps.size()) + " entries for rank " + std::to_string(d.rank()));
  if (!d.all_known()) fail(OnnxErrorCode::kUNSUPPORTED_NODE_DYNAMIC, "Tile needs the input's dims known");
  std::vector<std::int64_t> out;
  for (int i = 0; i < d.rank(); ++i) {
    if (reps[static_cast<std::size_t>(i)] < 0) fail(OnnxErrorCode::kINVALID_NODE, "a repeat count is negative");
    out.push_back(checked_mul(d[i], reps[static_cast<std::size_t>(i)], "the tiled size"));
  }
  if (std::find(out.begin(), out.end(), 0) != out.end()) {
    return c.output(0, c.im().constant(dims_of(out), Weights::copy_of(x->type(), nullptr, 0)));
  }
  std::vector<std::int64_t> zero(out.size(), 0), one(out.size(), 1);
  auto* s = c.net().add_slice(x, dims_of(zero), dims_of(out), dims_of(one));
  s->set(SliceParams{s->get().start, s->get().size, s->get().stride, SampleMode::kWRAP, 0});
  c.output(0, s->get_output(0));
}

// The most elements a Range of run-time bounds may have: it slices a constant 0, 1, 2, ... of
// this length (tensoracle has no fill layer yet).
constexpr std::int64_t kMaxRunTimeRange = 1 << 16;

// Range whose start or limit is known only at run time (a sequence length): integers, a known
// delta; the count is computed on shape tensors and slices a constant iota.
void range_at_run_time(NodeContext& c) {
  auto& im = c.im();
  auto& net = c.net();
  const auto delta = c.known_input(2, "delta").ints().at(0);
  Tensor* start = c.input(0);
  Tensor* limit = c.input(1);
  const DataType t = start->type();
  if (t != DataType::kINT64 && t != DataType::kINT32)
    fail(OnnxErrorCode::kUNSUPPORTED_NODE_DYNAMIC, "Range of run-time bounds of type " + std::string(type_name(t)) +
                                                       " (integers only)");
  if (delta == 0) fail(OnnxErrorCode::kINVALID_NODE, "delta is 0");
  im.require_shape_computable(start, "the start");
  im.require_shape_computable(limit, "the limit");
  auto as_vector = [&](Tensor* v) { return im.reshape(im.cast(v, DataType::kINT64), Dims{1}); };
  Tensor* s = as_vector(start);
  Tensor* l = as_vector(limit);
  auto ew = [&](Tensor* a, Tensor* b, E op) { return net.add_elementwise(a, b, op)->get_output(0); };
  // count = max(0, ceil((limit - start) / delta))
  Tensor* span = ew(ew(l, s, E::kSUB), im.constant_i64({delta > 0 ? delta - 1 : delta + 1}), E::kSUM);
  Tensor* count = ew(ew(span, im.constant_i64({delta}), E::kFLOOR_DIV), im.constant_i64({0}), E::kMAX);
  std::vector<std::int64_t> iota(static_cast<std::size_t>(kMaxRunTimeRange));
  std::iota(iota.begin(), iota.end(), 0);
  auto* sl = net.add_slice(im.constant_i64(iota), Dims{0}, Dims{1}, Dims{1});
  net.set_layer_input(sl, kSliceSize, count);
  Tensor* y = ew(ew(sl->get_output(0), im.constant_i64({delta}), E::kPROD), s, E::kSUM);
  c.output(0, im.cast(y, t));
}

void range(NodeContext& c) {
  if (!c.input_value(0) || !c.input_value(1)) return range_at_run_time(c);
  auto start = c.known_input(0, "start"), limit = c.known_input(1, "limit"), delta = c.known_input(2, "delta");
  const DataType t = start.weights.type();
  const double s = start.floats().at(0), l = limit.floats().at(0), dl = delta.floats().at(0);
  if (dl == 0) fail(OnnxErrorCode::kINVALID_NODE, "delta is 0");
  const double n = std::max(0.0, std::ceil((l - s) / dl));
  if (n > (1 << 24)) fail(OnnxErrorCode::kUNSUPPORTED_NODE_SHAPE, "Range of " + std::to_string(n) + " elements");
  const auto count = static_cast<std::int64_t>(n);
  std::vector<std::byte> buf(static_cast<std::size_t>(count) * element_size(t) + 1);
  for (std::int64_t i = 0; i < count; ++i) {
    auto* p = buf.data() + static_cast<std::size_t>(i) * element_size(t);
    switch (t) {
      case DataType::kFLOAT: {
        const double d = s + static_cast<double>(i) * dl;  // float inputs: out of float's range only past their ends
        float v = d != d ? static_cast<float>(d) : static_cast<float>(std::clamp(d, -3.4028234663852886e38, 3.4028234663852886e38));
        std::memcpy(p, &v, 4);
        break;
      }
      case DataType::kINT32: {
        auto v = static_cast<std::int32_t>(checked_add(start.ints()[0], checked_mul(i, delta.ints()[0], "a range value"), "a range value"));
        std::memcpy(p, &v, 4);
        break;
      }
      case DataType::kINT64: {
        auto v = checked_add(start.ints()[0], checked_mul(i, delta.ints()[0], "a range value"), "a range value");
        std::memcpy(p, &v, 8);
        break;
      }
      default: fail(OnnxErrorCode::kUNSUPPORTED_NODE_DATATYPE, "Range of type " + std::string(type_name(t)));
    }
  }
  c.output(0, c.im().constant(Dims{count}, Weights::copy_of(t, buf.data(), count)));
}

void topk(NodeContext& c) {
  auto& im = c.im();
  Tensor* x = c.input(0);
  const int axis = c.axis(c.attr_int("axis", -1), x->dims().rank());
  std::int64_t k = c.opset() < 10 ? c.attr_int("k", 1) : c.input_ints(1, "k").at(0);
  if (k < 0 || k > INT32_MAX) fail(OnnxErrorCode::kINVALID_NODE, "k = " + std::to_string(k));
  const bool largest = c.attr_int("largest", 1) != 0;
  auto* t = c.net().add_topk(x, largest ? TopKOperation::kMAX : TopKOperation::kMIN, static_cast<std::int32_t>(k), 1u << axis);
  c.output(0, t->get_output(0));
  if (c.wants_output(1)) c.output(1, im.cast(t->get_output(1), DataType::kINT64));
}

// Pad and the like: a slice reading outside the input, in `mode`.
Tensor* pad_slice(NodeContext& c, Tensor* x, const std::vector<std::int64_t>& pre, const std::vector<std::int64_t>& post,
                  SampleMode mode, Tensor* fill) {
  auto& im = c.im();
  const Dims& d = x->dims();
  const int r = d.rank();
  std::vector<std::int64_t> st(static_cast<std::size_t>(r)), sz(static_cast<std::size_t>(r)), one(static_cast<std::size_t>(r), 1);
  bool known = true;
  for (int i = 0; i < r; ++i) {
    st[static_cast<std::size_t>(i)] = checked_mul(pre[static_cast<std::size_t>(i)], -1, "a pad");
    if (d[i] < 0) { known = false; continue; }
    sz[static_cast<std::size_t>(i)] = checked_add(checked_add(d[i], pre[static_cast<std::size_t>(i)], "the padded size"),
                                                  post[static_cast<std::size_t>(i)], "the padded size");
    if (sz[static_cast<std::size_t>(i)] < 0) fail(OnnxErrorCode::kINVALID_NODE, "the pads remove more than axis " + std::to_string(i) + " holds");
  }
  auto* s = c.net().add_slice(x, dims_of(st), known ? dims_of(sz) : dims_of(one), dims_of(one));
  s->set(SliceParams{s->get().start, s->get().size, s->get().stride, mode, 0});
  if (!known) {
    std::vector<std::int64_t> add(static_cast<std::size_t>(r));
    for (int i = 0; i < r; ++i)
      add[static_cast<std::size_t>(i)] = checked_add(pre[static_cast<std::size_t>(i)], post[static_cast<std::size_t>(i)], "the pads");
    c.net().set_layer_input(s, kSliceSize, c.net().add_elementwise(shape_of(c, x), im.constant_i64(add), E::kSUM)->get_output(0));
  }
  if (mode == SampleMode::kFILL && fill) c.net().set_layer_input(s, kSliceFill, fill);
  return s->get_output(0);
}

void pad(NodeContext& c) {
  auto& im = c.im();
  Tensor* x = c.input(0);
  const int r = x->dims().rank();
  std::vector<std::int64_t> pads;
  if (c.opset() < 11) pads = c.has_attr("pads") ? c.attr_ints("pads") : c.attr_ints("paddings");
  else pads = c.input_ints(1, "pads");
  std::vector<std::int64_t> axes;
  if (c.has_input(3)) axes = c.input_ints(3, "axes");
  else for (int i = 0; i < r; ++i) axes.push_back(i);
  if (pads.size() != 2 * axes.size())
    fail(OnnxErrorCode::kINVALID_NODE, "pads has " + std::to_string(pads.size()) + " values for " + std::to_string(axes.size()) + " axes");
  std::vector<std::int64_t> pre(static_cast<std::size_t>(r), 0), post(static_cast<std::size_t>(r), 0);
  for (std::size_t i = 0; i < axes.size(); ++i) {
    const int a = c.axis(axes[i], r);
    pre[static_cast<std::size_t>(a)] = pads[i];
    post[static_cast<std::size_t>(a)] = pads[i + axes.size()];
  }
  const auto mode_name = c.attr_string("mode", "constant");
  SampleMode mode;
  if (mode_name == "constant") mode = SampleMode::kFILL;
  else if (mode_name == "reflect") mode = SampleMode::kREFLECT;
  else if (mode_name == "edge") mode = SampleMode::kCLAMP;
  else if (mode_name == "wrap") mode = SampleMode::kWRAP;
  else fail(OnnxErrorCode::kUNSUPPORTED_NODE_ATTR, "mode '" + mode_name + "'");
  Tensor* fill = nullptr;
  if (mode == SampleMode::kFILL) {
    if (c.opset() < 11) {
      const float v = c.attr_float("value", 0.f);
      if (v != 0.f) fill = im.constant(Dims{}, Weights::copy_of(DataType::kFLOAT, &v, 1)), fill = im.cast(fill, x->type());
    } else if (c.has_input(2)) {
      Tensor* v = c.input(2);
      if (v->dims().volume() != 1) fail(OnnxErrorCode::kINVALID_NODE, "constant_value must hold one element");
      fill = v->dims().rank() == 0 ? v : im.reshape(v, Dims{});
    }
  }
  c.output(0, pad_slice(c, x, pre, post, mode, fill));
}

// DepthToSpace / SpaceToDepth on [N, C, H, W] with known C, H, W: the block size, checked.
std::int64_t block_size(NodeContext& c, const Dims& d) {
  if (d.rank() != 4 || d[1] < 0 || d[2] < 0 || d[3] < 0)
    fail(OnnxErrorCode::kUNSUPPORTED_NODE_SHAPE, "the input must be [N, C, H, W] with known C, H and W");
  const std::int64_t b = c.attr_int("blocksize", 0);
  if (b <= 0 || b > (1 << 20)) fail(OnnxErrorCode::kINVALID_NODE, "blocksize " + std::to_string(b));
  return b;
}

void depth_to_space(NodeContext& c) {
  auto& im = c.im();
  Tensor* x = c.input(0);
  const Dims& d = x->dims();
  const std::int64_t b = block_size(c, d);
  if (d[1] % (b * b) != 0) fail(OnnxErrorCode::kINVALID_NODE, "blocksize " + std::to_string(b) + " does not divide C");
  const std::int64_t C = d[1] / (b * b), H = d[2], W = d[3];
  const bool crd = c.attr_string("mode", "DCR") == "CRD";
  Tensor* y = crd ? im.reshape(x, Dims{0, C, b, b, H, W}, true) : im.reshape(x, Dims{0, b, b, C, H, W}, true);
  y = crd ? im.transpose(y, {0, 1, 4, 2, 5, 3}) : im.transpose(y, {0, 3, 4, 1, 5, 2});
  c.output(0, im.reshape(y, Dims{0, C, checked_mul(H, b, "the height"), checked_mul(W, b, "the width")}, true));
}

void space_to_depth(NodeContext& c) {
  auto& im = c.im();
  Tensor* x = c.input(0);
  const Dims& d = x->dims();
  const std::int64_t b = block_size(c, d);
  if (d[2] % b != 0 || d[3] % b != 0) fail(OnnxErrorCode::kINVALID_NODE, "blocksize " + std::to_string(b) + " does not divide H and W");
  const std::int64_t C = d[1], H = d[2] / b, W = d[3] / b;
  const bool crd = c.attr_string("mode", "DCR") == "CRD";
  Tensor* y = im.reshape(x, Dims{0, C, H, b, W, b}, true);
  y = crd ? im.transpose(y, {0, 1, 3, 5, 2, 4}) : im.transpose(y, {0, 3, 5, 1, 2, 4});
  c.output(0, im.reshape(y, Dims{0, checked_mul(C, b * b, "the channels"), H, W}, true));
}

void trilu(NodeContext& c) {
  auto& im = c.im();
  Tensor* x = c.input(0);
  const Dims& d = x->dims();
  const int r = d.rank();
  if (r < 2 || d[r - 1] < 0 || d[r - 2] < 0) fail(OnnxErrorCode::kUNSUPPORTED_NODE_SHAPE, "Trilu needs the last two dims known");
  const std::int64_t k = c.has_input(1) ? c.input_ints(1, "k").at(0) : 0;
  const bool upper = c.attr_int("upper", 1) != 0;
  const std::int64_t n = d[r - 2], m = d[r - 1];
  if (checked_mul(n, m, "the mask's size") > (std::int64_t{1} << 28))
    fail(OnnxErrorCode::kUNSUPPORTED_NODE_SHAPE, "Trilu over " + std::to_string(n) + " x " + std::to_string(m));
  std::vector<std::uint8_t> keep(static_cast<std::size_t>(n * m));
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < m; ++j) keep[static_cast<std::size_t>(i * m + j)] = upper ? (j - i >= k) : (j - i <= k);
  std::vector<std::int64_t> md(static_cast<std::size_t>(r - 2), 1);
  md.push_back(n);
  md.push_back(m);
  Tensor* mask = im.constant(dims_of(md), Weights::copy_of(DataType::kBOOL, keep.data(), n * m));
  Tensor* zero = im.scalar(x->type(), 0, r);
  c.output(0, c.net().add_select(mask, x, zero)->get_output(0));
}

void one_hot(NodeContext& c) {
  auto& im = c.im();
  Tensor* idx = c.input(0);
  const double depth_value = c.known_input(1, "depth").floats().at(0);
  if (!(depth_value >= 1 && depth_value <= (1 << 24))) fail(OnnxErrorCode::kINVALID_NODE, "depth " + std::to_string(depth_value));
  const auto depth = static_cast<std::int64_t>(depth_value);
  Tensor* values = c.input(2);
  if (values->dims().volume() != 2) fail(OnnxErrorCode::kINVALID_NODE, "values must hold two elements");
  const int r = idx->dims().rank() + 1;
  const int axis = c.axis(c.attr_int("axis", -1), r);
  // equal(indices made non-negative, iota along the axis) selects on / off.
  Tensor* wrapped = wrap_indices(c, im.cast(idx, DataType::kINT64), depth);
  Tensor* expanded = insert_axes(c, wrapped, 1u << axis, r);
  std::vector<std::int64_t> iota(static_cast<std::size_t>(depth));
  std::iota(iota.begin(), iota.end(), 0);
  std::vector<std::int64_t> id(static_cast<std::size_t>(r), 1);
  id[static_cast<std::size_t>(axis)] = depth;
  Tensor* hot = c.net().add_elementwise(expanded, im.constant_i64(iota, dims_of(id)), E::kEQUAL)->get_output(0);
  Tensor* flat = values->dims().rank() == 1 ? values : im.reshape(values, Dims{2});
  std::vector<std::int64_t> ones(static_cast<std::size_t>(r), 1);
  Tensor* off = im.reshape(c.net().add_slice(flat, Dims{0}, Dims{1}, Dims{1})->get_output(0), dims_of(ones));
  Tensor* on = im.reshape(c.net().add_slice(flat, Dims{1}, Dims{1}, Dims{1})->get_output(0), dims_of(ones));
  c.output(0, c.net().add_select(hot, on, off)->get_output(0));
}

// ScatterElements (and opset 9's Scatter) and ScatterND, with their reductions (opsets 16, 18).
ScatterReduction scatter_reduction(NodeContext& c) {
  const std::string r = c.attr_string("reduction", "none");
  if (r == "none") return ScatterReduction::kNONE;
  if (r == "add") return ScatterReduction::kSUM;
  if (r == "mul") return ScatterReduction::kPROD;
  if (r == "max") return ScatterReduction::kMAX;
  if (r == "min") return ScatterReduction::kMIN;
  fail(OnnxErrorCode::kINVALID_NODE, "unknown reduction '" + r + "'");
}

void scatter_as(NodeContext& c, ScatterMode mode) {
  Tensor* data = c.input(0);
  auto* s = c.net().add_scatter(data, c.input(1), c.input(2), mode);
  auto p = s->get();
  if (mode == ScatterMode::kELEMENT) p.axis = c.axis(c.attr_int("axis", 0), data->dims().rank());
  p.reduction = scatter_reduction(c);
  s->set(p);
  c.output(0, s->get_output(0));
}

void scatter_elements(NodeContext& c) { scatter_as(c, ScatterMode::kELEMENT); }

void scatter_nd(NodeContext& c) { scatter_as(c, ScatterMode::kND); }

void cum_sum(NodeContext& c) {
  Tensor* x = c.input(0);
  const auto axis = c.input_ints(1, "axis");
  if (axis.size() != 1) fail(OnnxErrorCode::kINVALID_NODE, "axis must hold one value");
  const int a = c.axis(axis[0], x->dims().rank());
  auto* layer = c.net().add_cumulative(x, c.im().constant_i64({a}, Dims{}), CumulativeOperation::kSUM,
                                       c.attr_int("exclusive", 0) != 0, c.attr_int("reverse", 0) != 0);
  c.output(0, layer->get_output(0));
}

void reverse_sequence(NodeContext& c) {
  Tensor* x = c.input(0);
  const int rank = x->dims().rank();
  auto* layer = c.net().add_reverse_sequence(x, c.input(1));
  layer->set(ReverseSequenceParams{c.axis(c.attr_int("batch_axis", 1), rank), c.axis(c.attr_int("time_axis", 0), rank)});
  c.output(0, layer->get_output(0));
}

}  // namespace

void add_tensor_ops(ConverterTable& t) {
  t["Identity"] = identity;
  t["Dropout"] = dropout;
  t["Cast"] = cast;
  t["CastLike"] = cast_like;
  t["Constant"] = constant;
  t["ConstantOfShape"] = constant_of_shape;
  t["Shape"] = shape;
  t["Size"] = size;
  t["Reshape"] = reshape;
  t["Flatten"] = flatten;
  t["Squeeze"] = squeeze;
  t["Unsqueeze"] = unsqueeze;
  t["Transpose"] = transpose;
  t["Expand"] = expand;
  t["Concat"] = concat;
  t["Split"] = split;
  t["Slice"] = slice;
  t["Gather"] = gather;
  t["GatherElements"] = gather_elements;
  t["GatherND"] = gather_nd;
  t["Tile"] = tile;
  t["Range"] = range;
  t["TopK"] = topk;
  t["Pad"] = pad;
  t["DepthToSpace"] = depth_to_space;
  t["SpaceToDepth"] = space_to_depth;
  t["Trilu"] = trilu;
  t["OneHot"] = one_hot;
  t["Scatter"] = scatter_elements;
  t["ScatterElements"] = scatter_elements;
  t["ScatterND"] = scatter_nd;
  t["CumSum"] = cum_sum;
  t["ReverseSequence"] = reverse_sequence;
}

}  // namespace tensoracle::onnx
