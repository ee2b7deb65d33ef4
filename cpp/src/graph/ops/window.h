// Internal to the op units of the window layers (convolution, deconvolution, pooling): their
// spatial parameters with defaults filled in and checked, the output size of a sliding window,
// and the kernel and bias checks of convolution and deconvolution (window.cpp).
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

}  // namespace tensoracle::graph::ops
