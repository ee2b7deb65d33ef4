// Internal to the op units of the window layers (convolution, deconvolution, pooling): their
// spatial parameters with defaults filled in and checked, the output size of a sliding window,
// the kernel and bias checks of convolution and deconvolution (window.cpp), and the JSON form
// of their parameters.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include "graph/ops/common.h"

namespace tensoracle::graph::ops {

constexpr std::array<std::string_view, 4> kPadMode = {"EXPLICIT_ROUND_DOWN", "EXPLICIT_ROUND_UP", "SAME_UPPER", "SAME_LOWER"};

std::int64_t div_floor(std::int64_t a, std::int64_t b);
std::int64_t div_ceil(std::int64_t a, std::int64_t b);

// Spatial parameters shared by convolution, deconvolution and pooling: defaults filled in and
// checked, each at most kMaxWindowParam. `dims` is the number of spatial dimensions.
inline constexpr std::int64_t kMaxWindowParam = 0x7fffffff;
struct Spatial {
  Dims kernel, stride, pre, post, dilation;
};

Spatial spatial(const Dims& kernel, const Dims& stride, const Dims& pre, const Dims& post, const Dims& dilation,
                const char* kernel_name);

// Output size of a window sliding over `in` (TensorRT's rules for each padding mode).
std::int64_t window_out(std::int64_t in, std::int64_t k, std::int64_t stride, std::int64_t dil, std::int64_t pre,
                        std::int64_t post, PaddingMode mode);

TensorDesc infer_window(const TensorDesc& x, const Spatial& s, PaddingMode mode, std::int64_t channels_out,
                        const char* what, bool full);

void check_conv_weights(const TensorDesc& x, std::span<const TensorDesc> in, std::span<const InputFacts> facts,
                        std::int64_t kernel_rows, std::int64_t kernel_cols_times_groups, const Spatial& s,
                        std::int32_t groups, std::int32_t maps, const char* what, bool full);

// The JSON form of convolution's and deconvolution's parameters (the same fields).
template <typename P>
json conv_params_to_json(const P& p) {
  return {{"num_output_maps", p.num_output_maps}, {"kernel_size", dims_json(p.kernel_size)},
          {"stride", dims_json(p.stride)}, {"pre_padding", dims_json(p.pre_padding)},
          {"post_padding", dims_json(p.post_padding)}, {"dilation", dims_json(p.dilation)},
          {"num_groups", p.num_groups}, {"padding_mode", enum_name(kPadMode, p.padding_mode)}};
}

template <typename P>
P conv_params_from_json(const json& j) {
  P p;
  p.num_output_maps = j.at("num_output_maps").get<std::int32_t>();
  p.kernel_size = dims_of(j.at("kernel_size"));
  p.stride = dims_of(j.at("stride"));
  p.pre_padding = dims_of(j.at("pre_padding"));
  p.post_padding = dims_of(j.at("post_padding"));
  p.dilation = dims_of(j.at("dilation"));
  p.num_groups = j.at("num_groups").get<std::int32_t>();
  p.padding_mode = enum_value<PaddingMode>(kPadMode, j.at("padding_mode"));
  return p;
}

}  // namespace tensoracle::graph::ops
