// Type and shape inference for the layers beyond the core set: unary, reduce, softmax,
// concatenation, slice, gather, select, padding, convolution, deconvolution, pooling,
// normalization, resize, einsum. Messages name the parameter or input, never the layer (the
// caller adds it).
#include <algorithm>
#include <bit>
#include <cmath>
#include <map>

#include "graph/ops.h"
#include "plugin/instance.h"
#include "tensoracle/errors.h"

namespace tensoracle::graph {

namespace {

[[noreturn]] void invalid(const std::string& msg) { throw InvalidArgument(msg); }
std::string tname(DataType t) { return std::string(type_name(t)); }
bool is_float(DataType t) { return t == DataType::kFLOAT || t == DataType::kHALF || t == DataType::kBF16; }
bool is_int(DataType t) { return t == DataType::kINT32 || t == DataType::kINT64; }

void require_float(const TensorDesc& d, int index, const char* what) {
  if (!is_float(d.type))
    invalid("input " + std::to_string(index) + " has type " + tname(d.type) + "; " + what +
            " takes float32, float16 or bfloat16");
}

void check_axes(std::uint32_t axes, int rank, const char* what) {
  if (rank < 32 && (axes >> rank) != 0)
    invalid(std::string(what) + " mask " + std::to_string(axes) + " names a dimension beyond rank " + std::to_string(rank));
}

std::int64_t div_floor(std::int64_t a, std::int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
std::int64_t div_ceil(std::int64_t a, std::int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

// Spatial parameters shared by convolution, deconvolution and pooling: defaults filled in and
// checked. `dims` is the number of spatial dimensions.
struct Spatial {
  Dims kernel, stride, pre, post, dilation;
};

Spatial spatial(const Dims& kernel, const Dims& stride, const Dims& pre, const Dims& post, const Dims& dilation,
                const char* kernel_name) {
  int n = kernel.rank();
  if (n < 1 || n > 3) invalid(std::string(kernel_name) + " " + kernel.str() + " must have 1, 2 or 3 dimensions");
  auto fill = [&](const Dims& d, std::int64_t v, const char* name, std::int64_t min) {
    Dims out = d;
    if (d.rank() == 0) {
      std::vector<std::int64_t> ones(static_cast<std::size_t>(n), v);
      out = Dims(std::span<const std::int64_t>(ones));
    }
    if (out.rank() != n)
      invalid(std::string(name) + " " + d.str() + " has rank " + std::to_string(d.rank()) + "; " + kernel_name +
              " has rank " + std::to_string(n));
    for (auto x : out)
      if (x < min) invalid(std::string(name) + " " + out.str() + " must be >= " + std::to_string(min));
    return out;
  };
  Spatial s;
  s.kernel = fill(kernel, 1, kernel_name, 1);
  s.stride = fill(stride, 1, "stride", 1);
  s.pre = fill(pre, 0, "pre_padding", 0);
  s.post = fill(post, 0, "post_padding", 0);
  s.dilation = fill(dilation, 1, "dilation", 1);
  return s;
}

// Output size of a window sliding over `in` (TensorRT's rules for each padding mode).
std::int64_t window_out(std::int64_t in, std::int64_t k, std::int64_t stride, std::int64_t dil, std::int64_t pre,
                        std::int64_t post, PaddingMode mode) {
  if (in < 0) return -1;
  std::int64_t span = dil * (k - 1) + 1;
  switch (mode) {
    case PaddingMode::kSAME_UPPER:
    case PaddingMode::kSAME_LOWER: return div_ceil(in, stride);
    case PaddingMode::kEXPLICIT_ROUND_UP: return div_ceil(in + pre + post - span, stride) + 1;
    default: return div_floor(in + pre + post - span, stride) + 1;
  }
}

TensorDesc infer_window(const TensorDesc& x, const Spatial& s, PaddingMode mode, std::int64_t channels_out,
                        const char* what, bool full) {
  int n = s.kernel.rank();
  if (x.dims.rank() != n + 2)
    invalid("input 0 has dims " + x.dims.str() + "; a " + std::to_string(n) + "-D " + what + " takes rank " +
            std::to_string(n + 2) + " (N, C, spatial...)");
  Dims out = x.dims;
  if (channels_out >= 0) out[1] = channels_out;
  for (int i = 0; i < n; ++i) {
    std::int64_t o = window_out(x.dims[2 + i], s.kernel[i], s.stride[i], s.dilation[i], s.pre[i], s.post[i], mode);
    if (x.dims[2 + i] >= 0 && o < 1) {
      // Padding, stride or dilation may still be set: checked when the network is built.
      if (!full) o = -1;
      else
        invalid("spatial dimension " + std::to_string(i) + " of input " + x.dims.str() + " is too small for window " +
                s.kernel.str() + " with this padding and dilation");
    }
    out[2 + i] = o;
  }
  return {x.type, out};
}

}  // namespace

Dims window_pre_padding(const Dims& x, const Dims& kernel, const Dims& stride, const Dims& pre, const Dims& post,
                        const Dims& dilation, PaddingMode mode, bool transposed) {
  Spatial s = spatial(kernel, stride, pre, post, dilation, "kernel_size");
  Dims out = s.pre;
  if (mode != PaddingMode::kSAME_UPPER && mode != PaddingMode::kSAME_LOWER) return out;
  for (int i = 0; i < s.kernel.rank(); ++i) {
    std::int64_t in = x[2 + i], span = s.dilation[i] * (s.kernel[i] - 1) + 1, total;
    if (transposed) total = std::max<std::int64_t>(0, (in - 1) * s.stride[i] + span - in * s.stride[i]);
    else total = std::max<std::int64_t>(0, (div_ceil(in, s.stride[i]) - 1) * s.stride[i] + span - in);
    out[i] = mode == PaddingMode::kSAME_UPPER ? total / 2 : total - total / 2;
  }
  return out;
}

std::vector<TensorDesc> infer_more(const UnaryParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  using U = UnaryOperation;
  DataType t = in[0].type;
  switch (p.op) {
    case U::kNOT:
      if (t != DataType::kBOOL) invalid("input 0 has type " + tname(t) + "; NOT takes bool");
      return {in[0]};
    case U::kABS: case U::kNEG: case U::kSIGN:
      if (!is_float(t) && !is_int(t)) invalid("input 0 has type " + tname(t) + "; ABS, NEG and SIGN take float or int32/int64");
      return {in[0]};
    case U::kISINF: case U::kISNAN:
      require_float(in[0], 0, "ISINF/ISNAN");
      return {{DataType::kBOOL, in[0].dims}};
    default:
      if (static_cast<int>(p.op) < 0 || static_cast<int>(p.op) > static_cast<int>(U::kISNAN))
        invalid("unknown unary operation " + std::to_string(static_cast<int>(p.op)));
      require_float(in[0], 0, "this unary operation");
      return {in[0]};
  }
}

std::vector<TensorDesc> infer_more(const ReduceParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  DataType t = in[0].type;
  if (!is_float(t) && !(is_int(t) && p.op != ReduceOperation::kAVG))
    invalid("input 0 has type " + tname(t) + "; reduce takes float32, float16, bfloat16 (and int32/int64 except AVG)");
  int rank = in[0].dims.rank();
  check_axes(p.axes, rank, "axes");
  std::vector<std::int64_t> out;
  for (int i = 0; i < rank; ++i) {
    bool reduced = (p.axes >> i) & 1u;
    if (!reduced) out.push_back(in[0].dims[i]);
    else if (p.keep_dims) out.push_back(1);
  }
  return {{t, Dims(std::span<const std::int64_t>(out))}};
}

int default_axis(int rank) { return std::max(0, rank - 3); }

std::vector<TensorDesc> infer_more(const SoftmaxParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  require_float(in[0], 0, "softmax");
  int rank = in[0].dims.rank();
  if (rank == 0) invalid("input 0 is a scalar; softmax needs rank >= 1");
  check_axes(p.axes, rank, "axes");
  if (p.axes != 0 && (p.axes & (p.axes - 1)) != 0)
    invalid("axes mask " + std::to_string(p.axes) + " names more than one dimension; softmax takes one");
  return {in[0]};
}

int softmax_axis(const SoftmaxParams& p, int rank) {
  if (p.axes == 0) return default_axis(rank);
  int a = 0;
  while (!((p.axes >> a) & 1u)) ++a;
  return a;
}

int concat_axis(const ConcatenationParams& p, int rank) {
  if (p.axis == -1000) return default_axis(rank);
  return p.axis < 0 ? p.axis + rank : p.axis;
}

std::vector<TensorDesc> infer_more(const ConcatenationParams& p, std::span<const TensorDesc> in,
                                   std::span<const InputFacts>, bool full) {
  if (in.empty()) invalid("concatenation needs at least one input");
  int rank = in[0].dims.rank();
  if (rank == 0) invalid("input 0 is a scalar; concatenation needs rank >= 1");
  int axis = concat_axis(p, rank);
  if (axis < 0 || axis >= rank) invalid("axis " + std::to_string(p.axis) + " is out of range for rank " + std::to_string(rank));
  Dims out = in[0].dims;
  for (std::size_t i = 1; i < in.size(); ++i) {
    if (in[i].type != in[0].type)
      invalid("input " + std::to_string(i) + " has type " + tname(in[i].type) + " but input 0 has type " + tname(in[0].type));
    if (in[i].dims.rank() != rank)
      invalid("input " + std::to_string(i) + " has dims " + in[i].dims.str() + ", of another rank than input 0 " + in[0].dims.str());
    for (int d = 0; d < rank; ++d) {
      if (d == axis) {
        out[d] = (out[d] < 0 || in[i].dims[d] < 0) ? -1 : out[d] + in[i].dims[d];
      } else if (out[d] >= 0 && in[i].dims[d] >= 0 && out[d] != in[i].dims[d]) {
        if (!full) {  // the axis may still be set: checked when the network is built
          out[d] = -1;
          continue;
        }
        invalid("input " + std::to_string(i) + " has dims " + in[i].dims.str() + "; dimension " + std::to_string(d) +
                " differs from input 0 " + in[0].dims.str() + " (only axis " + std::to_string(axis) + " may differ)");
      } else if (out[d] < 0) {
        out[d] = in[i].dims[d];
      }
    }
  }
  return {{in[0].type, out}};
}

std::vector<TensorDesc> infer_more(const SliceParams& given, std::span<const TensorDesc> in, std::span<const InputFacts> facts,
                                   bool full) {
  const Dims& x = in[0].dims;
  int rank = x.rank();
  if (given.tensor_inputs > 0xF) invalid("unknown slice inputs " + std::to_string(given.tensor_inputs));
  if (in.size() != static_cast<std::size_t>(1 + std::popcount(static_cast<unsigned>(given.tensor_inputs))))
    invalid("the slice has " + std::to_string(in.size()) + " inputs but its parameters name " +
            std::to_string(1 + std::popcount(static_cast<unsigned>(given.tensor_inputs))));
  // Start, size and stride from shape tensors: their values when known, else unknown dims.
  SliceParams p = given;
  bool known = true;
  const char* names[] = {"", "start", "size", "stride"};
  for (int index : {kSliceStart, kSliceSize, kSliceStride}) {
    int pos = slice_input_position(p, index);
    if (pos < 0) continue;
    const TensorDesc& t = in[static_cast<std::size_t>(pos)];
    if (!is_int(t.type) || t.dims.rank() != 1 || t.dims[0] != rank)
      invalid("input " + std::to_string(index) + " (" + names[index] + ") is " + tname(t.type) + t.dims.str() +
              "; it must be a 1-D int32 or int64 shape tensor with one value per input dimension (" + std::to_string(rank) + ")");
    const auto& values = facts[static_cast<std::size_t>(pos)].values;
    if (!values) {
      known = false;
      continue;
    }
    const Dims d{std::span<const std::int64_t>(*values)};
    (index == kSliceStart ? p.start : index == kSliceSize ? p.size : p.stride) = d;
  }
  if (!known) {
    int size_pos = slice_input_position(p, kSliceSize);
    if (size_pos >= 0 && !facts[static_cast<std::size_t>(size_pos)].values) {
      std::vector<std::int64_t> unknown(static_cast<std::size_t>(rank), -1);
      return {{in[0].type, Dims(std::span<const std::int64_t>(unknown))}};
    }
    if (p.size.rank() != rank) invalid("size " + p.size.str() + " must have the input's rank " + std::to_string(rank));
    return {{in[0].type, p.size}};  // start or stride known at run time only: checked then
  }
  for (const auto* d : {&p.start, &p.size, &p.stride})
    if (d->rank() != rank)
      invalid("start " + p.start.str() + ", size " + p.size.str() + " and stride " + p.stride.str() +
              " must each have the input's rank " + std::to_string(rank));
  for (int i = 0; i < rank; ++i) {
    if (p.size[i] < 0) invalid("size " + p.size.str() + " has a negative dimension");
    if (p.stride[i] == 0 && p.size[i] > 1) invalid("stride " + p.stride.str() + " is 0 in dimension " + std::to_string(i));
    // Bounds wait for the build: the mode may still be set (TensorRT's order).
    if (full && p.mode == SampleMode::kSTRICT_BOUNDS && x[i] >= 0 && p.size[i] > 0) {
      std::int64_t first = p.start[i], last = p.start[i] + (p.size[i] - 1) * p.stride[i];
      if (std::min(first, last) < 0 || std::max(first, last) >= x[i])
        invalid("dimension " + std::to_string(i) + " reads indices " + std::to_string(first) + ".." + std::to_string(last) +
                " of an input of size " + std::to_string(x[i]) + "; use mode WRAP, CLAMP, FILL or REFLECT to read outside");
    }
    if (full && p.mode != SampleMode::kSTRICT_BOUNDS && p.mode != SampleMode::kFILL && x[i] == 0 && p.size[i] > 0)
      invalid("dimension " + std::to_string(i) + " of the input is empty; only FILL can read from it");
  }
  if (int pos = slice_input_position(p, kSliceFill); pos >= 0) {
    const TensorDesc& f = in[static_cast<std::size_t>(pos)];
    if (full && p.mode != SampleMode::kFILL) invalid("input 4 (fill value) is only used by mode FILL");
    if (f.type != in[0].type) invalid("input 4 (fill value) has type " + tname(f.type) + "; it must be " + tname(in[0].type));
    if (f.dims.volume() != 1 && f.dims.all_known()) invalid("input 4 (fill value) " + f.dims.str() + " must hold one element");
  }
  return {{in[0].type, p.size}};
}

std::vector<TensorDesc> infer_more(const GatherParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  const Dims& d = in[0].dims;
  const Dims& idx = in[1].dims;
  if (!is_int(in[1].type)) invalid("input 1 (indices) has type " + tname(in[1].type) + "; indices are int32 or int64");
  int rank = d.rank();
  std::vector<std::int64_t> out;
  switch (p.mode) {
    case GatherMode::kDEFAULT: {
      if (rank == 0) invalid("input 0 (data) is a scalar; gather needs rank >= 1");
      int axis = p.axis < 0 ? p.axis + rank : p.axis;
      if (axis < 0 || axis >= rank) invalid("axis " + std::to_string(p.axis) + " is out of range for rank " + std::to_string(rank));
      if (p.num_elementwise_dims > 1) invalid("num_elementwise_dims must be 0 or 1 in mode DEFAULT");
      int nb = p.num_elementwise_dims;
      if (nb == 1 && (idx.rank() < 1 || axis < 1)) invalid("num_elementwise_dims 1 needs indices of rank >= 1 and axis >= 1");
      if (nb == 1 && idx[0] >= 0 && d[0] >= 0 && idx[0] != d[0])
        invalid("num_elementwise_dims 1: dimension 0 of data " + d.str() + " and indices " + idx.str() + " must match");
      for (int i = 0; i < axis; ++i) out.push_back(d[i]);
      for (int i = nb; i < idx.rank(); ++i) out.push_back(idx[i]);
      for (int i = axis + 1; i < rank; ++i) out.push_back(d[i]);
      break;
    }
    case GatherMode::kELEMENT: {
      int axis = p.axis < 0 ? p.axis + rank : p.axis;
      if (axis < 0 || axis >= rank) invalid("axis " + std::to_string(p.axis) + " is out of range for rank " + std::to_string(rank));
      if (idx.rank() != rank)
        invalid("input 1 (indices) has dims " + idx.str() + "; mode ELEMENT needs the data's rank " + std::to_string(rank));
      for (int i = 0; i < rank; ++i)
        if (i != axis && idx[i] >= 0 && d[i] >= 0 && idx[i] > d[i])
          invalid("input 1 (indices) dims " + idx.str() + " exceed the data's " + d.str() + " in dimension " + std::to_string(i));
      out = idx.vec();
      break;
    }
    case GatherMode::kND: {
      int nb = p.num_elementwise_dims;
      if (idx.rank() < 1) invalid("input 1 (indices) must have rank >= 1 in mode ND");
      std::int64_t last = idx[idx.rank() - 1];
      if (last < 0) invalid("input 1 (indices): its last dimension must be static in mode ND");
      if (nb < 0 || nb >= idx.rank() || nb + last > rank)
        invalid("indices " + idx.str() + " with num_elementwise_dims " + std::to_string(nb) + " do not fit data " + d.str());
      for (int i = 0; i < nb; ++i)
        if (idx[i] >= 0 && d[i] >= 0 && idx[i] != d[i])
          invalid("batch dimension " + std::to_string(i) + " differs between data " + d.str() + " and indices " + idx.str());
      for (int i = 0; i < idx.rank() - 1; ++i) out.push_back(idx[i]);
      for (int i = nb + static_cast<int>(last); i < rank; ++i) out.push_back(d[i]);
      break;
    }
    default: invalid("unknown gather mode " + std::to_string(static_cast<int>(p.mode)));
  }
  if (out.size() > static_cast<std::size_t>(Dims::kMaxRank)) invalid("the output would have rank above 8");
  return {{in[0].type, Dims(std::span<const std::int64_t>(out))}};
}

// TensorRT's limit on k (and on the reduced dimension's size for k's sake).
constexpr std::int32_t kMaxTopK = 3840;

std::vector<TensorDesc> infer_more(const TopKParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool full) {
  const DataType t = in[0].type;
  if (!is_float(t) && t != DataType::kINT32 && t != DataType::kINT64)
    invalid("input 0 has type " + tname(t) + "; topk takes float32, float16, bfloat16, int32 or int64");
  if (p.op != TopKOperation::kMAX && p.op != TopKOperation::kMIN)
    invalid("unknown topk operation " + std::to_string(static_cast<int>(p.op)));
  const int rank = in[0].dims.rank();
  if (rank < 1) invalid("input 0 is a scalar; topk needs rank >= 1");
  if (p.axes == 0 || (p.axes & (p.axes - 1)) != 0 || p.axes >= (1u << rank))
    invalid("axes " + std::to_string(p.axes) + " must set exactly one bit below the input's rank " + std::to_string(rank));
  const int axis = std::countr_zero(p.axes);
  if (p.k < 1 || p.k > kMaxTopK) invalid("k " + std::to_string(p.k) + " must be in [1, " + std::to_string(kMaxTopK) + "]");
  const std::int64_t n = in[0].dims[axis];
  if (full && n >= 0 && p.k > n)
    invalid("k " + std::to_string(p.k) + " is larger than dimension " + std::to_string(axis) + " of input 0 " + in[0].dims.str());
  if (p.output < -1 || p.output > 1) invalid("output " + std::to_string(p.output) + " must be -1, 0 or 1");
  Dims d = in[0].dims;
  d[axis] = p.k;
  TensorDesc values{t, d}, indices{DataType::kINT32, d};
  if (p.output == 0) return {values};
  if (p.output == 1) return {indices};
  return {values, indices};
}

std::vector<TensorDesc> infer_more(const ShapeParams&, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  return {{DataType::kINT64, Dims{in[0].dims.rank()}}};
}

std::vector<TensorDesc> infer_more(const SelectParams&, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  if (in[0].type != DataType::kBOOL) invalid("input 0 (condition) has type " + tname(in[0].type) + "; it must be bool");
  if (in[1].type != in[2].type)
    invalid("input 1 has type " + tname(in[1].type) + " but input 2 has type " + tname(in[2].type) + "; they must match");
  Dims d = broadcast_dims(broadcast_dims(in[0].dims, in[1].dims), in[2].dims);
  return {{in[1].type, d}};
}

std::vector<TensorDesc> infer_more(const PaddingParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  const Dims& x = in[0].dims;
  int n = p.pre_padding.rank();
  if (p.post_padding.rank() != n)
    invalid("pre_padding " + p.pre_padding.str() + " and post_padding " + p.post_padding.str() + " differ in rank");
  if (n > x.rank()) invalid("padding of rank " + std::to_string(n) + " exceeds the input's rank " + std::to_string(x.rank()));
  Dims out = x;
  for (int i = 0; i < n; ++i) {
    int d = x.rank() - n + i;
    if (x[d] < 0) continue;
    std::int64_t v = x[d] + p.pre_padding[i] + p.post_padding[i];
    if (v < 0) invalid("padding " + p.pre_padding.str() + "/" + p.post_padding.str() + " crops dimension " +
                       std::to_string(d) + " of " + x.str() + " below zero");
    out[d] = v;
  }
  return {{in[0].type, out}};
}

namespace {
void check_conv_weights(const TensorDesc& x, std::span<const TensorDesc> in, std::span<const InputFacts> facts,
                        std::int64_t kernel_rows, std::int64_t kernel_cols_times_groups, const Spatial& s,
                        std::int32_t groups, std::int32_t maps, const char* what, bool full) {
  require_float(x, 0, what);
  if (in.size() < 2) invalid("input 1 (kernel) is missing");
  if (in[1].type != x.type) invalid("input 1 (kernel) has type " + tname(in[1].type) + "; it must match input 0's " + tname(x.type));
  if (groups < 1) invalid("num_groups " + std::to_string(groups) + " must be >= 1");
  if (maps < 1) invalid("num_output_maps " + std::to_string(maps) + " must be >= 1");
  std::int64_t c = x.dims[1];
  // Group counts and kernel volumes wait for the build: num_groups may still be set.
  if (!full) return;
  if (c >= 0 && c % groups != 0) invalid("input channels " + std::to_string(c) + " are not divisible by num_groups " + std::to_string(groups));
  if (maps % groups != 0) invalid("num_output_maps " + std::to_string(maps) + " is not divisible by num_groups " + std::to_string(groups));
  std::vector<std::int64_t> want{kernel_rows, kernel_cols_times_groups};
  for (auto k : s.kernel) want.push_back(k);
  Dims wd{std::span<const std::int64_t>(want)};
  if (in[1].dims.volume() >= 0 && wd.volume() >= 0 && in[1].dims.volume() != wd.volume())
    invalid("input 1 (kernel) has " + std::to_string(in[1].dims.volume()) + " values; " + std::string(what) + " needs " +
            wd.str() + " = " + std::to_string(wd.volume()));
  if (in.size() > 2) {
    if (in[2].type != x.type) invalid("input 2 (bias) has type " + tname(in[2].type) + "; it must be " + tname(x.type));
    if (in[2].dims.volume() != maps)
      invalid("input 2 (bias) has " + std::to_string(in[2].dims.volume()) + " values; it needs num_output_maps = " + std::to_string(maps));
  }
  (void)facts;
}
}  // namespace

std::vector<TensorDesc> infer_more(const ConvolutionParams& p, std::span<const TensorDesc> in, std::span<const InputFacts> facts, bool full) {
  Spatial s = spatial(p.kernel_size, p.stride, p.pre_padding, p.post_padding, p.dilation, "kernel_size");
  if (in[0].dims.rank() != s.kernel.rank() + 2)
    invalid("input 0 has dims " + in[0].dims.str() + "; a " + std::to_string(s.kernel.rank()) + "-D convolution takes rank " +
            std::to_string(s.kernel.rank() + 2) + " (N, C, spatial...)");
  std::int64_t c = in[0].dims[1];
  check_conv_weights(in[0], in, facts, p.num_output_maps, c < 0 ? -1 : c / std::max(1, p.num_groups), s, p.num_groups,
                     p.num_output_maps, "convolution", full);
  return {infer_window(in[0], s, p.padding_mode, p.num_output_maps, "convolution", full)};
}

std::vector<TensorDesc> infer_more(const DeconvolutionParams& p, std::span<const TensorDesc> in,
                                   std::span<const InputFacts> facts, bool full) {
  Spatial s = spatial(p.kernel_size, p.stride, p.pre_padding, p.post_padding, p.dilation, "kernel_size");
  int n = s.kernel.rank();
  const Dims& x = in[0].dims;
  if (x.rank() != n + 2)
    invalid("input 0 has dims " + x.str() + "; a " + std::to_string(n) + "-D deconvolution takes rank " + std::to_string(n + 2));
  check_conv_weights(in[0], in, facts, x[1], p.num_output_maps / std::max(1, p.num_groups), s, p.num_groups,
                     p.num_output_maps, "deconvolution", full);
  Dims out = x;
  out[1] = p.num_output_maps;
  for (int i = 0; i < n; ++i) {
    std::int64_t v = x[2 + i];
    if (v < 0) continue;
    if (p.padding_mode == PaddingMode::kSAME_UPPER || p.padding_mode == PaddingMode::kSAME_LOWER) {
      out[2 + i] = v * s.stride[i];
    } else {
      out[2 + i] = (v - 1) * s.stride[i] + s.dilation[i] * (s.kernel[i] - 1) + 1 - s.pre[i] - s.post[i];
    }
    if (out[2 + i] < 1) {
      if (!full) out[2 + i] = -1;  // padding may still change: checked when the network is built
      else invalid("padding " + s.pre.str() + "/" + s.post.str() + " leaves no output in spatial dimension " + std::to_string(i));
    }
  }
  return {{in[0].type, out}};
}

std::vector<TensorDesc> infer_more(const PoolingParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool full) {
  require_float(in[0], 0, "pooling");
  Spatial s = spatial(p.window, p.stride, p.pre_padding, p.post_padding, Dims{}, "window");
  if (p.blend_factor < 0.f || p.blend_factor > 1.f) invalid("blend_factor " + std::to_string(p.blend_factor) + " is outside [0, 1]");
  for (int i = 0; i < s.kernel.rank(); ++i)
    if (s.pre[i] >= s.kernel[i] || s.post[i] >= s.kernel[i])
      invalid("padding " + s.pre.str() + "/" + s.post.str() + " must be smaller than the window " + s.kernel.str());
  return {infer_window(in[0], s, p.padding_mode, -1, "pooling", full)};
}

std::vector<TensorDesc> infer_more(const NormalizationParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  require_float(in[0], 0, "normalization");
  int rank = in[0].dims.rank();
  check_axes(p.axes, rank, "axes");
  if (p.axes == 0) invalid("axes is 0: name the dimensions to normalize over");
  if (!(p.epsilon >= 0.f)) invalid("epsilon " + std::to_string(p.epsilon) + " must be >= 0");
  if (p.num_groups < 1) invalid("num_groups " + std::to_string(p.num_groups) + " must be >= 1");
  if (p.num_groups > 1) {
    if (rank < 2) invalid("num_groups > 1 needs a channel dimension (rank >= 2)");
    if (in[0].dims[1] >= 0 && in[0].dims[1] % p.num_groups != 0)
      invalid("channels " + std::to_string(in[0].dims[1]) + " are not divisible by num_groups " + std::to_string(p.num_groups));
    if (p.axes & 2u) invalid("with num_groups > 1 the channel dimension (1) is grouped, not in axes");
  }
  for (int i : {1, 2}) {
    if (in[static_cast<std::size_t>(i)].type != in[0].type)
      invalid("input " + std::to_string(i) + (i == 1 ? " (scale)" : " (bias)") + " has type " +
              tname(in[static_cast<std::size_t>(i)].type) + "; it must be " + tname(in[0].type));
    // Each dim of scale/bias is 1 or x's (a dynamic dim of x matches any size, checked at run time).
    const Dims& x = in[0].dims;
    const Dims& sb = in[static_cast<std::size_t>(i)].dims;
    bool ok = sb.rank() == x.rank();
    for (int d = 0; ok && d < x.rank(); ++d) ok = sb[d] == 1 || x[d] < 0 || sb[d] < 0 || sb[d] == x[d];
    if (!ok)
      invalid("input " + std::to_string(i) + (i == 1 ? " (scale)" : " (bias)") + " has dims " + sb.str() +
              ", which do not broadcast into input 0 " + x.str());
  }
  return {in[0]};
}

std::vector<TensorDesc> infer_more(const ResizeParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  const Dims& x = in[0].dims;
  if (p.mode != InterpolationMode::kNEAREST) require_float(in[0], 0, "linear and cubic resize");
  if (p.output_dims && !p.scales.empty()) invalid("set either output dims or scales, not both");
  if (p.output_dims) {
    if (p.output_dims->rank() != x.rank()) invalid("output dims " + p.output_dims->str() + " must have the input's rank");
    for (auto d : *p.output_dims)
      if (d < 0) invalid("output dims " + p.output_dims->str() + " must be >= 0");
    return {{in[0].type, *p.output_dims}};
  }
  if (p.scales.empty()) invalid("neither output dims nor scales are set");
  if (static_cast<int>(p.scales.size()) != x.rank())
    invalid(std::to_string(p.scales.size()) + " scales for an input of rank " + std::to_string(x.rank()));
  Dims out = x;
  for (int i = 0; i < x.rank(); ++i) {
    if (!(p.scales[static_cast<std::size_t>(i)] > 0.f)) invalid("scales must be > 0");
    if (x[i] >= 0) out[i] = static_cast<std::int64_t>(std::floor(static_cast<double>(x[i]) * p.scales[static_cast<std::size_t>(i)]));
  }
  return {{in[0].type, out}};
}

// ---- einsum ------------------------------------------------------------------------------

EinsumSpec parse_einsum(const std::string& eq, std::size_t inputs) {
  EinsumSpec s;
  auto arrow = eq.find("->");
  if (arrow == std::string::npos) invalid("equation '" + eq + "' needs an explicit output ('->')");
  std::string lhs = eq.substr(0, arrow), rhs = eq.substr(arrow + 2);
  auto strip = [](std::string t) {
    t.erase(std::remove(t.begin(), t.end(), ' '), t.end());
    return t;
  };
  lhs = strip(lhs);
  s.output = strip(rhs);
  std::size_t start = 0;
  while (true) {
    auto comma = lhs.find(',', start);
    s.operands.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (s.operands.size() != inputs)
    invalid("equation '" + eq + "' has " + std::to_string(s.operands.size()) + " operands but the layer has " +
            std::to_string(inputs) + " inputs");
  if (inputs < 1 || inputs > 2) invalid("einsum takes one or two inputs");
  for (const auto& t : s.operands)
    for (char c : t)
      if (c < 'a' || c > 'z') invalid("equation '" + eq + "': only lower-case letters are supported (no '...')");
  for (char c : s.output) {
    if (c < 'a' || c > 'z') invalid("equation '" + eq + "': only lower-case letters are supported");
    if (std::count(s.output.begin(), s.output.end(), c) > 1) invalid("equation '" + eq + "': output repeats '" + std::string(1, c) + "'");
    bool found = false;
    for (const auto& t : s.operands) found = found || t.find(c) != std::string::npos;
    if (!found) invalid("equation '" + eq + "': output letter '" + std::string(1, c) + "' appears in no input");
  }
  return s;
}

std::vector<TensorDesc> infer_more(const EinsumParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  EinsumSpec s = parse_einsum(p.equation, in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    require_float(in[i], static_cast<int>(i), "einsum");
    if (in[i].type != in[0].type) invalid("input " + std::to_string(i) + " has type " + tname(in[i].type) + "; einsum needs one type");
    if (static_cast<int>(s.operands[i].size()) != in[i].dims.rank())
      invalid("operand '" + s.operands[i] + "' has " + std::to_string(s.operands[i].size()) + " letters but input " +
              std::to_string(i) + " has dims " + in[i].dims.str());
  }
  std::map<char, std::int64_t> size;
  for (std::size_t i = 0; i < in.size(); ++i)
    for (std::size_t k = 0; k < s.operands[i].size(); ++k) {
      char c = s.operands[i][k];
      std::int64_t d = in[i].dims[static_cast<int>(k)];
      auto it = size.find(c);
      if (it == size.end() || it->second < 0) size[c] = d;
      else if (d >= 0 && it->second != d)
        invalid("letter '" + std::string(1, c) + "' has size " + std::to_string(it->second) + " and " + std::to_string(d));
    }
  std::vector<std::int64_t> out;
  for (char c : s.output) out.push_back(size[c]);
  return {{in[0].type, Dims(std::span<const std::int64_t>(out))}};
}

// A plugin layer: the plugin says. Every output in a network (output -1), one in the builder.
std::vector<TensorDesc> infer_more(const PluginParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  if (!p.plugin)
    invalid("plugin creator '" + (p.plugin_namespace.empty() ? "" : p.plugin_namespace + "::") + p.name + "/" + p.version +
            "' is not loaded; pass the plugin library that provides it in plugins=");
  if (p.output < -1 || p.output >= p.plugin->num_outputs())
    invalid("output " + std::to_string(p.output) + " is not -1 or one of the plugin's " +
            std::to_string(p.plugin->num_outputs()) + " outputs");
  std::vector<PluginTensorDesc> pin;
  for (const auto& d : in) pin.push_back({d.type, d.dims});
  auto pout = p.plugin->output_descs(pin);
  std::vector<TensorDesc> out;
  for (const auto& d : pout) out.push_back({d.type, d.dims});
  if (p.output >= 0) return {out[static_cast<std::size_t>(p.output)]};
  return out;
}

}  // namespace tensoracle::graph
