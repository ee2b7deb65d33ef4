// The reduce/normalize view and checks both backends share (reduce_layout.h).
#include "backends/common/reduce_layout.h"

#include <cstddef>
#include <span>
#include <string>

namespace tensoracle::backends::common {

ReduceLayout reduce_layout(int rank, const i64* dims, const bool* reduced) {
  int m = 0;
  i64 size[kMaxGroups];
  bool red[kMaxGroups];
  for (int i = 0; i < rank; ++i) {
    if (dims[i] == 1) continue;
    if (m > 0 && red[m - 1] == reduced[i]) {
      size[m - 1] *= dims[i];
    } else {
      size[m] = dims[i];
      red[m] = reduced[i];
      ++m;
    }
  }
  bool any_reduced = false;
  for (int g = 0; g < m; ++g) any_reduced |= red[g];
  if (!any_reduced) {  // only size-1 dims are reduced: rows of one element
    size[m] = 1;
    red[m] = true;
    ++m;
  }
  ReduceLayout L;
  i64 stride = 1;
  i64 st[kMaxGroups];
  for (int g = m - 1; g >= 0; --g) {
    st[g] = stride;
    stride *= size[g];
  }
  L.inner_reduced = red[m - 1];
  L.inner = size[m - 1];
  for (int g = 0; g < m - 1; ++g) {
    if (red[g]) {
      L.rs[L.nr] = size[g];
      L.rst[L.nr] = st[g];
      L.rcount *= size[g];
      ++L.nr;
    } else {
      L.ks[L.nk] = size[g];
      L.kst[L.nk] = st[g];
      L.kcount *= size[g];
      ++L.nk;
    }
  }
  L.reduced = L.rcount * (L.inner_reduced ? L.inner : 1);
  return L;
}

ReduceShape check_reduce(const Fail& fail, const ReduceParams& p, const TensorRef& x, const TensorRef& out) {
  ReduceShape s;
  s.nx = checked_volume(fail, x, "reduce", "the input");
  s.no = checked_volume(fail, out, "reduce", "the output");
  const int rank = x.dims.rank();
  if (rank < 32 && (p.axes >> rank) != 0)
    fail("reduce: axes mask " + std::to_string(p.axes) + " names a dimension beyond the input's rank " +
         std::to_string(rank));
  if (out.type != x.type) fail("reduce: the output type " + tn(out.type) + " differs from the input's " + tn(x.type));
  i64 want[Dims::kMaxRank];
  i64 dims[Dims::kMaxRank];
  bool red[Dims::kMaxRank];
  int wr = 0;
  for (int i = 0; i < rank; ++i) {
    dims[i] = x.dims[i];
    red[i] = (p.axes >> i) & 1u;
    if (!red[i]) want[wr++] = x.dims[i];
    else if (p.keep_dims) want[wr++] = 1;
  }
  const Dims expected(std::span<const i64>(want, static_cast<std::size_t>(wr)));
  if (!(expected == out.dims))
    fail("reduce: reducing " + x.dims.str() + " over axes mask " + std::to_string(p.axes) +
         (p.keep_dims ? " keeping dims" : "") + " gives " + expected.str() + ", not " + out.dims.str());
  if (s.nx != 0) s.layout = reduce_layout(rank, dims, red);
  return s;
}

i64 check_normalization(const Fail& fail, const NormalizationParams& p, const TensorRef& x, const TensorRef& out) {
  const i64 n = checked_volume(fail, x, "normalization", "the input");
  checked_volume(fail, out, "normalization", "the output");
  const Dims& xd = x.dims;
  const int rank = xd.rank();
  if (out.type != x.type || !(out.dims == xd))
    fail("normalization: the output " + desc(out) + " differs from the input " + desc(x));
  if (rank < 32 && (p.axes >> rank) != 0)
    fail("normalization: axes mask " + std::to_string(p.axes) + " names a dimension beyond the input's rank " +
         std::to_string(rank));
  if (!(p.epsilon >= 0.0f)) fail("normalization: epsilon " + std::to_string(p.epsilon) + " must be >= 0");
  const i64 groups = p.num_groups;
  if (groups < 1) fail("normalization: num_groups " + std::to_string(groups) + " must be >= 1");
  if (groups > 1) {
    if (rank < 2) fail("normalization: num_groups > 1 needs a channel dimension (rank >= 2)");
    if (xd[1] % groups != 0)
      fail("normalization: channels " + std::to_string(xd[1]) + " are not divisible by num_groups " +
           std::to_string(groups));
    if (p.axes & 2u) fail("normalization: with num_groups > 1 the channel dimension (1) is grouped, not in axes");
  }
  return n;
}

i64 check_normalization_operand(const Fail& fail, const TensorRef& t, const Dims& x, const char* name, i64* strides) {
  const i64 n = checked_volume(fail, t, "normalization", name);
  if (t.dims.rank() != x.rank())
    fail(std::string("normalization: ") + name + " " + t.dims.str() + " must have the input's rank (input " +
         x.str() + ")");
  i64 st = 1;
  for (int d = x.rank() - 1; d >= 0; --d) {
    if (t.dims[d] != 1 && t.dims[d] != x[d])
      fail(std::string("normalization: ") + name + " " + t.dims.str() + " does not broadcast into the input " +
           x.str());
    strides[d] = t.dims[d] == 1 ? 0 : st;
    st *= t.dims[d];
  }
  if (!is_float_type(t.type))
    fail(std::string("normalization: ") + name + " takes float32, float16 or bfloat16, not " + tn(t.type));
  return n;
}

namespace {

AxisShape along(const Fail& fail, const char* kernel, int axis_param, const TensorRef& x, const TensorRef& out) {
  AxisShape a;
  a.n = checked_volume(fail, x, kernel, "the input");
  checked_volume(fail, out, kernel, "the output");
  if (out.type != x.type || !(out.dims == x.dims))
    fail(std::string(kernel) + ": the output " + desc(out) + " differs from the input " + desc(x));
  const int r = x.dims.rank();
  const int axis = axis_param < 0 ? axis_param + r : axis_param;
  if (axis < 0 || axis >= r) fail(std::string(kernel) + ": axis " + num(axis_param) + " is out of range for " + x.dims.str());
  a.outer = prod(x.dims, 0, axis);
  a.dim = x.dims[axis];
  a.inner = prod(x.dims, axis + 1, r);
  return a;
}

}  // namespace

AxisShape check_cumulative(const Fail& fail, const CumulativeParams& p, const TensorRef& x, const TensorRef& out) {
  if (p.op != CumulativeOperation::kSUM) fail("cumulative: unknown operation " + num(static_cast<int>(p.op)));
  const DataType t = x.type;
  if (!is_float_type(t) && t != DataType::kINT32 && t != DataType::kINT64)
    fail("cumulative: the input has type " + tn(t) + "; cumulative takes float32, float16, bfloat16, int32 or int64");
  return along(fail, "cumulative", p.axis, x, out);
}

AxisShape check_lrn(const Fail& fail, const LrnParams& p, const TensorRef& x, const TensorRef& out) {
  check_float(fail, x, "lrn", "the input");
  if (x.dims.rank() < 3) fail("lrn: the input " + desc(x) + " must have rank 3 or more");
  if (p.window < 1 || p.window > 1024) fail("lrn: window " + num(p.window) + " is outside 1..1024");
  return along(fail, "lrn", 1, x, out);
}

}  // namespace tensoracle::backends::common
