// The host-side checks of the indexing layers both backends share (index_checks.h).
#include "backends/common/index_checks.h"

#include <bit>
#include <climits>
#include <cmath>
#include <cstddef>
#include <string>
#include <variant>
#include <vector>

namespace tensoracle::backends::common {

GatherShape check_gather(const Fail& fail, const GatherParams& p, const TensorRef& data, const TensorRef& indices,
                         const TensorRef& out) {
  GatherShape g;
  checked_volume(fail, data, "gather", "the data");
  g.ni = checked_volume(fail, indices, "gather", "the indices");
  g.n = checked_volume(fail, out, "gather", "the output");
  if (indices.type != DataType::kINT32 && indices.type != DataType::kINT64)
    fail("gather: the indices have type " + tn(indices.type) + "; indices are int32 or int64");
  if (out.type != data.type) fail("gather: the output has type " + tn(out.type) + "; the data has " + tn(data.type));
  const Dims& D = data.dims;
  const Dims& I = indices.dims;
  const int r = D.rank(), q = I.rank();
  std::vector<i64> od;
  auto check_out = [&](const char* mode) {
    const Dims e{std::span<const i64>(od)};
    if (!(out.dims == e))
      fail("gather: the output has dims " + out.dims.str() + "; mode " + mode + " with data " + D.str() + " and indices " +
           I.str() + " gives " + e.str());
  };
  auto resolve_axis = [&]() {
    const int a = p.axis < 0 ? p.axis + r : p.axis;
    if (a < 0 || a >= r) fail("gather: axis " + std::to_string(p.axis) + " is out of range for data " + D.str());
    return a;
  };
  switch (p.mode) {
    case GatherMode::kDEFAULT: {
      const int axis = resolve_axis();
      const int nb = p.num_elementwise_dims;
      if (nb < 0 || nb > 1) fail("gather: num_elementwise_dims " + std::to_string(nb) + " must be 0 or 1 in mode DEFAULT");
      if (nb == 1 && (q < 1 || axis < 1)) fail("gather: num_elementwise_dims 1 needs indices of rank >= 1 and axis >= 1");
      if (nb == 1 && I[0] != D[0])
        fail("gather: with num_elementwise_dims 1 the indices " + I.str() + " and the data " + D.str() +
             " must share dimension 0");
      for (int i = 0; i < axis; ++i) od.push_back(D[i]);
      for (int i = nb; i < q; ++i) od.push_back(I[i]);
      for (int i = axis + 1; i < r; ++i) od.push_back(D[i]);
      check_out("DEFAULT");
      g.axis = axis;
      g.nb = nb;
      return g;
    }
    case GatherMode::kELEMENT: {
      const int axis = resolve_axis();
      if (q != r) fail("gather: the indices " + I.str() + " must have the data's rank in mode ELEMENT (data " + D.str() + ")");
      for (int i = 0; i < r; ++i)
        if (i != axis && I[i] > D[i])
          fail("gather: the indices " + I.str() + " exceed the data " + D.str() + " in dimension " + std::to_string(i));
      od = I.vec();
      check_out("ELEMENT");
      g.axis = axis;
      return g;
    }
    case GatherMode::kND: {
      const int nb = p.num_elementwise_dims;
      if (q < 1) fail("gather: the indices must have rank >= 1 in mode ND");
      const i64 last = I[q - 1];
      if (nb < 0 || nb >= q || nb + last > r)
        fail("gather: indices " + I.str() + " with num_elementwise_dims " + std::to_string(nb) + " do not fit data " + D.str());
      for (int i = 0; i < nb; ++i)
        if (I[i] != D[i])
          fail("gather: batch dimension " + std::to_string(i) + " differs between data " + D.str() + " and indices " + I.str());
      for (int i = 0; i < q - 1; ++i) od.push_back(I[i]);
      const int after = nb + static_cast<int>(last);
      for (int i = after; i < r; ++i) od.push_back(D[i]);
      check_out("ND");
      g.nb = nb;
      g.last = last;
      g.after = after;
      return g;
    }
    default: fail("gather: unknown mode " + std::to_string(static_cast<int>(p.mode)));
  }
}

i64 check_slice(const Fail& fail, const SliceParams& p, const TensorRef& x, const TensorRef* fill, const TensorRef& out) {
  checked_volume(fail, x, "slice", "the input");
  const i64 n = checked_volume(fail, out, "slice", "the output");
  const int r = x.dims.rank();
  if (p.start.rank() != r || p.size.rank() != r || p.stride.rank() != r)
    fail("slice: start " + p.start.str() + ", size " + p.size.str() + " and stride " + p.stride.str() +
         " must each have the input's rank " + std::to_string(r));
  if (out.type != x.type || !(out.dims == p.size))
    fail("slice: the output is " + desc(out) + "; expected " + tn(x.type) + p.size.str());
  if (fill != nullptr) {
    if (p.mode != SampleMode::kFILL) fail("slice: a fill value is only used by mode FILL");
    if (fill->type != x.type || checked_volume(fail, *fill, "slice", "the fill value") != 1)
      fail("slice: the fill value is " + desc(*fill) + "; it must be one element of " + tn(x.type));
  }
  if (p.mode != SampleMode::kSTRICT_BOUNDS && p.mode != SampleMode::kWRAP && p.mode != SampleMode::kCLAMP &&
      p.mode != SampleMode::kFILL && p.mode != SampleMode::kREFLECT)
    fail("slice: unknown mode " + std::to_string(static_cast<int>(p.mode)));
  return n;
}

i64 check_padding(const Fail& fail, const PaddingParams& p, const TensorRef& x, const TensorRef& out) {
  checked_volume(fail, x, "padding", "the input");
  const i64 n = checked_volume(fail, out, "padding", "the output");
  const int r = x.dims.rank(), np = p.pre_padding.rank();
  if (p.post_padding.rank() != np)
    fail("padding: pre_padding " + p.pre_padding.str() + " and post_padding " + p.post_padding.str() + " differ in rank");
  if (np > r) fail("padding: padding of rank " + std::to_string(np) + " exceeds the input's rank " + std::to_string(r));
  Dims expected = x.dims;
  for (int i = 0; i < np; ++i) {
    const int d = r - np + i;
    expected[d] = x.dims[d] + p.pre_padding[i] + p.post_padding[i];
    if (expected[d] < 0)
      fail("padding: " + p.pre_padding.str() + "/" + p.post_padding.str() + " crops dimension " + std::to_string(d) +
           " of " + x.dims.str() + " below zero");
  }
  if (out.type != x.type || !(out.dims == expected))
    fail("padding: the output is " + desc(out) + "; expected " + tn(x.type) + expected.str());
  return n;
}

i64 check_concatenation(const Fail& fail, int axis, std::span<const TensorRef> inputs, const TensorRef& out) {
  const i64 n = checked_volume(fail, out, "concatenation", "the output");
  if (inputs.empty()) fail("concatenation: needs at least one input");
  const int rank = out.dims.rank();
  if (axis < 0 || axis >= rank)
    fail("concatenation: axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  i64 total = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const TensorRef& t = inputs[i];
    const std::string name = "input " + std::to_string(i);
    checked_volume(fail, t, "concatenation", name.c_str());
    if (t.type != out.type) fail("concatenation: " + name + " has type " + tn(t.type) + "; the output is " + tn(out.type));
    if (t.dims.rank() != rank)
      fail("concatenation: " + name + " has dims " + t.dims.str() + "; the output has " + out.dims.str());
    for (int d = 0; d < rank; ++d)
      if (d != axis && t.dims[d] != out.dims[d])
        fail("concatenation: " + name + " has dims " + t.dims.str() + "; dimension " + std::to_string(d) +
             " differs from the output " + out.dims.str() + " (only axis " + std::to_string(axis) + " may differ)");
    total += t.dims[axis];
  }
  if (total != out.dims[axis])
    fail("concatenation: the inputs add up to " + num(total) + " along axis " + std::to_string(axis) + "; the output has " +
         out.dims.str());
  return n;
}

namespace {

bool is_permutation(const Permutation& p, int rank) {
  bool seen[Dims::kMaxRank] = {};
  for (int i = 0; i < rank; ++i) {
    const int v = p.order[static_cast<std::size_t>(i)];
    if (v < 0 || v >= rank || seen[v]) return false;
    seen[v] = true;
  }
  return true;
}

std::string perm_text(const Permutation& p, int rank) {
  std::string s = "(";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(p.order[static_cast<std::size_t>(i)]);
  return s + ")";
}

}  // namespace

ShuffleShape check_shuffle(const Fail& fail, const ShuffleParams& p, const TensorRef& x, const TensorRef& out) {
  ShuffleShape s;
  s.n = checked_volume(fail, x, "shuffle", "the input");
  if (checked_volume(fail, out, "shuffle", "the output") != s.n || out.type != x.type)
    fail("shuffle: the output " + desc(out) + " differs in type or volume from the input " + desc(x));
  const int r1 = x.dims.rank(), r2 = out.dims.rank();
  if (!is_permutation(p.first_transpose, r1))
    fail("shuffle: first_transpose " + perm_text(p.first_transpose, r1) + " is not a permutation");
  if (!is_permutation(p.second_transpose, r2))
    fail("shuffle: second_transpose " + perm_text(p.second_transpose, r2) + " is not a permutation");
  // The reshaped tensor's dims follow from the output's: out.dims[j] = reshaped[second[j]].
  s.reshaped = out.dims;
  for (int j = 0; j < r2; ++j) s.reshaped[p.second_transpose.order[static_cast<std::size_t>(j)]] = out.dims[j];
  if (!p.reshape_dims) {
    Dims first = x.dims;
    for (int i = 0; i < r1; ++i) first[i] = x.dims[p.first_transpose.order[static_cast<std::size_t>(i)]];
    if (!(first == s.reshaped))
      fail("shuffle: the output dims " + out.dims.str() + " do not follow from the input " + x.dims.str() +
           " and the transposes");
  }
  return s;
}

TopKShape check_topk(const Fail& fail, const TopKParams& p, const TensorRef& x, const TensorRef* values,
                     const TensorRef* indices) {
  TopKShape t;
  checked_volume(fail, x, "topk", "the input");
  if (!values && !indices) fail("topk: no output to write");
  for (const TensorRef* out : {values, indices})
    if (out) t.m = checked_volume(fail, *out, "topk", out == values ? "the values" : "the indices");
  const int r = x.dims.rank();
  if (p.axes == 0 || (p.axes & (p.axes - 1)) != 0 || r < 1 || p.axes >= (1u << r))
    fail("topk: axes " + std::to_string(p.axes) + " must set one bit below the input's rank " + std::to_string(r));
  t.axis = std::countr_zero(p.axes);
  t.n = x.dims[t.axis];
  t.k = p.k;
  Dims expect = x.dims;
  expect[t.axis] = t.k;
  if (t.k < 1 || t.k > t.n) fail("topk: k " + num(t.k) + " is outside [1, " + num(t.n) + "] for input " + desc(x));
  for (const TensorRef* out : {values, indices}) {
    if (!out) continue;
    const DataType out_type = out == values ? x.type : DataType::kINT32;
    if (!(out->dims == expect) || out->type != out_type)
      fail("topk: output " + desc(*out) + " should be " + tn(out_type) + expect.str() + " for input " + desc(x));
  }
  if (t.n > INT32_MAX) fail("topk: dimension " + num(t.n) + " does not fit int32 indices");
  return t;
}

i64 check_resize(const Fail& fail, const ResizeParams& p, const TensorRef& x, const TensorRef& out) {
  checked_volume(fail, x, "resize", "the input");
  const i64 n = checked_volume(fail, out, "resize", "the output");
  const int r = x.dims.rank();
  if (p.output_dims && !p.scales.empty()) fail("resize: set either output dims or scales, not both");
  Dims expected = x.dims;
  if (p.output_dims) {
    expected = *p.output_dims;
  } else {
    if (static_cast<int>(p.scales.size()) != r)
      fail("resize: " + std::to_string(p.scales.size()) + " scales for an input of rank " + std::to_string(r));
    for (int d = 0; d < r; ++d) {
      const float s = p.scales[static_cast<std::size_t>(d)];
      if (!(s > 0.f)) fail("resize: scales must be > 0");
      // One product of doubles, rounded once: no contraction can change it.
      expected[d] = static_cast<i64>(std::floor(static_cast<double>(x.dims[d]) * s));
    }
  }
  if (out.type != x.type || !(out.dims == expected))
    fail("resize: the output is " + desc(out) + "; expected " + tn(x.type) + expected.str());
  if (p.mode != InterpolationMode::kNEAREST && p.mode != InterpolationMode::kLINEAR && p.mode != InterpolationMode::kCUBIC)
    fail("resize: unknown interpolation mode " + std::to_string(static_cast<int>(p.mode)));
  if (p.mode != InterpolationMode::kNEAREST && !is_float_type(x.type))
    fail("resize: linear and cubic resize take float32, float16 or bfloat16, not " + tn(x.type));
  if (n == 0) return n;
  for (int d = 0; d < r; ++d)
    if (x.dims[d] == 0) fail("resize: dimension " + std::to_string(d) + " of the input " + x.dims.str() + " is empty");
  return n;
}

ScatterShape check_scatter(const Fail& fail, const ScatterParams& p, const TensorRef& data, const TensorRef& indices,
                           const TensorRef& updates, const TensorRef& out) {
  ScatterShape s;
  s.n = checked_volume(fail, data, "scatter", "the data");
  const i64 ni = checked_volume(fail, indices, "scatter", "the indices");
  s.nu = checked_volume(fail, updates, "scatter", "the updates");
  checked_volume(fail, out, "scatter", "the output");
  if (indices.type != DataType::kINT32 && indices.type != DataType::kINT64)
    fail("scatter: the indices have type " + tn(indices.type) + "; indices are int32 or int64");
  if (updates.type != data.type || out.type != data.type || !(out.dims == data.dims))
    fail("scatter: the updates " + desc(updates) + " and the output " + desc(out) + " must have the data's type (data " +
         desc(data) + ") and the output its dims");
  if (p.reduction != ScatterReduction::kNONE && !is_float_type(data.type) && data.type != DataType::kINT32 &&
      data.type != DataType::kINT64)
    fail("scatter: a reduction takes float or int32/int64 data, not " + tn(data.type));
  if (static_cast<int>(p.reduction) < 0 || static_cast<int>(p.reduction) > static_cast<int>(ScatterReduction::kMIN))
    fail("scatter: unknown reduction " + num(static_cast<int>(p.reduction)));
  const Dims &D = data.dims, &I = indices.dims, &U = updates.dims;
  const int r = D.rank(), q = I.rank();
  if (p.mode == ScatterMode::kELEMENT) {
    const int axis = p.axis < 0 ? p.axis + r : p.axis;
    if (axis < 0 || axis >= r) fail("scatter: axis " + num(p.axis) + " is out of range for the data " + D.str());
    if (!(I == U) || q != r) fail("scatter: the indices " + I.str() + " and updates " + U.str() + " must have one shape of the data's rank");
    for (int k = 0; k < r; ++k)
      if (k != axis && I[k] > D[k]) fail("scatter: the indices " + I.str() + " exceed the data " + D.str() + " in dim " + num(k));
    s.axis = axis;
    s.lines = U[axis] > 0 ? s.nu / U[axis] : 0;
    s.line_inner = prod(U, axis + 1, r);
    return s;
  }
  if (p.mode != ScatterMode::kND) fail("scatter: unknown mode " + num(static_cast<int>(p.mode)));
  if (q < 1 || I[q - 1] < 1 || I[q - 1] > r)
    fail("scatter: ND indices " + I.str() + " must end in a dim of 1.." + num(r) + " (data " + D.str() + ")");
  s.depth = I[q - 1];
  s.rows = prod(I, 0, q - 1);
  s.slice = prod(D, static_cast<int>(s.depth), r);
  std::vector<i64> want;
  for (int k = 0; k < q - 1; ++k) want.push_back(I[k]);
  for (int k = static_cast<int>(s.depth); k < r; ++k) want.push_back(D[k]);
  if (!(U == Dims{std::span<const i64>(want)}))
    fail("scatter: ND updates " + U.str() + " must be " + Dims{std::span<const i64>(want)}.str() + " (indices " + I.str() +
         ", data " + D.str() + ")");
  (void)ni;
  return s;
}

OneHotShape check_one_hot(const Fail& fail, const OneHotParams& p, const TensorRef& indices, const TensorRef& values,
                          const TensorRef& out) {
  OneHotShape s;
  checked_volume(fail, indices, "one_hot", "the indices");
  const i64 nv = checked_volume(fail, values, "one_hot", "the values");
  s.n = checked_volume(fail, out, "one_hot", "the output");
  if (indices.type != DataType::kINT32 && indices.type != DataType::kINT64)
    fail("one_hot: the indices have type " + tn(indices.type) + "; indices are int32 or int64");
  if (nv != 2 || values.type != out.type) fail("one_hot: the values " + desc(values) + " must be [2] of the output's type " + tn(out.type));
  const Dims& I = indices.dims;
  const int r = I.rank();
  const int axis = p.axis < 0 ? p.axis + r + 1 : p.axis;
  if (axis < 0 || axis > r || p.depth < 1) fail("one_hot: axis " + num(p.axis) + " or depth " + num(p.depth) + " is out of range");
  std::vector<i64> want;
  for (int k = 0; k < axis; ++k) want.push_back(I[k]);
  want.push_back(p.depth);
  for (int k = axis; k < r; ++k) want.push_back(I[k]);
  if (!(out.dims == Dims{std::span<const i64>(want)}))
    fail("one_hot: the output " + desc(out) + " must be " + Dims{std::span<const i64>(want)}.str());
  s.outer = prod(I, 0, axis);
  s.depth = p.depth;
  s.inner = prod(I, axis, r);
  return s;
}

ReverseSequenceShape check_reverse_sequence(const Fail& fail, const ReverseSequenceParams& p, const TensorRef& x,
                                            const TensorRef& lens, const TensorRef& out) {
  ReverseSequenceShape s;
  s.n = checked_volume(fail, x, "reverse_sequence", "the input");
  const i64 nl = checked_volume(fail, lens, "reverse_sequence", "the sequence lengths");
  const int r = x.dims.rank();
  const int b = p.batch_axis < 0 ? p.batch_axis + r : p.batch_axis;
  const int q = p.sequence_axis < 0 ? p.sequence_axis + r : p.sequence_axis;
  if (r < 2 || b < 0 || b >= r || q < 0 || q >= r || b == q)
    fail("reverse_sequence: batch_axis " + num(p.batch_axis) + " and sequence_axis " + num(p.sequence_axis) +
         " must be two dims of the input " + desc(x));
  if (lens.type != DataType::kINT32 && lens.type != DataType::kINT64)
    fail("reverse_sequence: the sequence lengths have type " + tn(lens.type) + "; they are int32 or int64");
  if (lens.dims.rank() != 1 || nl != x.dims[b])
    fail("reverse_sequence: the sequence lengths " + desc(lens) + " must be [" + num(x.dims[b]) + "] (the batch)");
  if (!(out.dims == x.dims) || out.type != x.type) fail("reverse_sequence: the output " + desc(out) + " must be " + desc(x));
  s.batch = x.dims[b];
  s.batch_stride = prod(x.dims, b + 1, r);
  s.seq = x.dims[q];
  s.seq_stride = prod(x.dims, q + 1, r);
  return s;
}

i64 check_squeeze(const Fail& fail, const LayerParams& p, const TensorRef& x, const TensorRef& out) {
  const i64 n = checked_volume(fail, x, "squeeze", "the input");
  const bool squeeze = std::holds_alternative<SqueezeParams>(p);
  const Dims& axes = squeeze ? std::get<SqueezeParams>(p).axes : std::get<UnsqueezeParams>(p).axes;
  const Dims& small = squeeze ? out.dims : x.dims;
  const Dims& big = squeeze ? x.dims : out.dims;
  bool ok = out.type == x.type && big.rank() == small.rank() + axes.rank();
  std::uint32_t mask = 0;
  for (int i = 0; ok && i < axes.rank(); ++i) {
    const i64 a = axes[i] < 0 ? axes[i] + big.rank() : axes[i];
    ok = a >= 0 && a < big.rank() && !(mask >> a & 1u) && big[static_cast<int>(a)] == 1;
    if (ok) mask |= 1u << a;
  }
  for (int k = 0, j = 0; ok && k < big.rank(); ++k)
    if (!(mask >> k & 1u)) ok = big[k] == small[j++];
  if (!ok)
    fail(std::string(squeeze ? "squeeze" : "unsqueeze") + ": the input " + desc(x) + " and the output " + desc(out) +
         " do not differ by dims of size 1 at axes " + axes.str());
  return n;
}

}  // namespace tensoracle::backends::common
