// The window layers' shared rules (graph/ops/window.h), and graph::window_pre_padding.
#include "graph/ops/window.h"

#include <algorithm>
#include <vector>

namespace tensoracle::graph {

namespace ops {

std::int64_t div_floor(std::int64_t a, std::int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
std::int64_t div_ceil(std::int64_t a, std::int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

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
    for (auto x : out) {
      if (x < min) invalid(std::string(name) + " " + out.str() + " must be >= " + std::to_string(min));
      if (x > kMaxWindowParam) invalid(std::string(name) + " " + out.str() + " must be <= " + std::to_string(kMaxWindowParam));
    }
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

std::int64_t window_out(std::int64_t in, std::int64_t k, std::int64_t stride, std::int64_t dil, std::int64_t pre,
                        std::int64_t post, PaddingMode mode) {
  if (in < 0) return -1;
  // The parameters are at most kMaxWindowParam (spatial()): span fits; the padded extent may not.
  const std::int64_t span = dil * (k - 1) + 1;
  const std::int64_t extent = narrow_dim(Wide{in} + pre + post - span, "the padded input");
  switch (mode) {
    case PaddingMode::kSAME_UPPER:
    case PaddingMode::kSAME_LOWER: return div_ceil(in, stride);
    case PaddingMode::kEXPLICIT_ROUND_UP: return div_ceil(extent, stride) + 1;
    default: return div_floor(extent, stride) + 1;
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

}  // namespace ops

using ops::Spatial;

Dims window_pre_padding(const Dims& x, const Dims& kernel, const Dims& stride, const Dims& pre, const Dims& post,
                        const Dims& dilation, PaddingMode mode, bool transposed) {
  Spatial s = ops::spatial(kernel, stride, pre, post, dilation, "kernel_size");
  Dims out = s.pre;
  if (mode != PaddingMode::kSAME_UPPER && mode != PaddingMode::kSAME_LOWER) return out;
  for (int i = 0; i < s.kernel.rank(); ++i) {
    std::int64_t in = x[2 + i], span = s.dilation[i] * (s.kernel[i] - 1) + 1, total;
    // span - stride, or the last window's overshoot: both within the parameters' bounds.
    if (transposed) total = std::max<std::int64_t>(0, span - s.stride[i]);
    else total = std::max<std::int64_t>(0, static_cast<std::int64_t>((ops::Wide{ops::div_ceil(in, s.stride[i])} - 1) * s.stride[i] + span - in));
    out[i] = mode == PaddingMode::kSAME_UPPER ? total / 2 : total - total / 2;
  }
  return out;
}

}  // namespace tensoracle::graph
