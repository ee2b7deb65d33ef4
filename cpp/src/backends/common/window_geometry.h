// Internal to the backends: the geometry of the window layers (convolution, deconvolution,
// pooling) both backends plan from (backends/cpu/window_util.h, backends/cuda/window_util.cuh),
// and their host-side shape checks. Every layer is normalized to 3 spatial dims: missing
// leading dims have size 1, window 1, stride 1, dilation 1, padding 0, so one code path
// serves 1-D, 2-D and 3-D; the effective pre padding of every PaddingMode comes from
// graph::window_pre_padding, and each kernel checks its output dims against the layer's shape
// rules (graph::infer). Plain host C++ (checks.h); the CUDA kernels take WindowGeo by value.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "backends/common/checks.h"
#include "graph/ops.h"
#include "tensoracle/errors.h"

namespace tensoracle::backends::common {

constexpr int kWindowSpatial = 3;  // normalized spatial rank

// A window layer's sizes, normalized to 3 spatial dims (d, h, w).
struct WindowGeo {
  i64 N = 0, C = 0, K = 0;  // batch, input channels, output channels
  i64 groups = 1, Cg = 0, Kg = 0;
  i64 in[kWindowSpatial] = {}, out[kWindowSpatial] = {}, k[kWindowSpatial] = {}, s[kWindowSpatial] = {},
      d[kWindowSpatial] = {}, pre[kWindowSpatial] = {}, post[kWindowSpatial] = {};
  i64 in_sp = 1, out_sp = 1, kvol = 1;
  bool same = false;  // SAME_UPPER / SAME_LOWER
};

// d[i], or def for dims of rank 0 (a parameter left unset).
i64 dim_or(const Dims& d, int i, i64 def);

// Geometry of a (de)convolution or pooling on input dims `x` and output dims `out` (already
// checked against the shape rules).
WindowGeo window_geo(const Dims& x, const Dims& out, const Dims& window, const Dims& stride, const Dims& pre,
                     const Dims& post, const Dims& dilation, PaddingMode mode, bool transposed, i64 groups);

// Calls graph inference (the layer's shape rules) and checks `out` against its result; prefixes
// its messages with the kernel's name.
template <class P>
void check_inference(const Fail& fail, const P& p, const char* kernel, const std::vector<graph::TensorDesc>& in,
                     const TensorRef& out) {
  std::vector<graph::TensorDesc> res;
  try {
    const std::vector<graph::InputFacts> facts(in.size(), graph::InputFacts{true, std::nullopt});
    res = graph::infer(LayerParams{p}, in, facts);
  } catch (const InvalidArgument& e) {
    fail(std::string(kernel) + ": " + e.what());
  }
  if (res.size() != 1 || res[0].type != out.type || !(res[0].dims == out.dims))
    fail(std::string(kernel) + ": the output is " + tn(out.type) + out.dims.str() + "; expected " +
         (res.empty() ? std::string("?") : tn(res[0].type) + res[0].dims.str()));
}

// A convolution's (transposed false) or deconvolution's (true) rank and shape-rule checks, then
// its geometry. `kernel` null: sizing only, a kernel of the volume the parameters ask for.
template <class P>
WindowGeo conv_geo(const Fail& fail, const P& p, const TensorRef& x, const TensorRef& out, const graph::TensorDesc* kernel,
                   const graph::TensorDesc* bias, const char* name, bool transposed) {
  if (x.dims.rank() < 3 || x.dims.rank() != p.kernel_size.rank() + 2)
    fail(std::string(name) + ": input dims " + x.dims.str() + " do not match kernel_size " + p.kernel_size.str());
  if (!x.dims.all_known()) fail(std::string(name) + ": input dims " + x.dims.str() + " are not fully known");
  graph::TensorDesc kd;
  if (kernel == nullptr) {
    i64 vol = transposed ? x.dims[1] * (p.num_groups > 0 ? p.num_output_maps / p.num_groups : 0)
                         : p.num_output_maps * (p.num_groups > 0 ? x.dims[1] / p.num_groups : 0);
    for (auto k : p.kernel_size) vol *= k;
    kd = {x.type, Dims{vol}};
    kernel = &kd;
  }
  std::vector<graph::TensorDesc> in{{x.type, x.dims}, *kernel};
  if (bias) in.push_back(*bias);
  check_inference(fail, p, name, in, out);
  return window_geo(x.dims, out.dims, p.kernel_size, p.stride, p.pre_padding, p.post_padding, p.dilation, p.padding_mode,
                    transposed, p.num_groups);
}

// What a convolution or deconvolution checks before it runs: the volumes of its tensors, a
// float input, then conv_geo. Sets n to the output's volume.
template <class P>
WindowGeo check_conv(const Fail& fail, const P& p, const TensorRef& x, const TensorRef& kernel, const TensorRef* bias,
                     const TensorRef& out, const char* name, bool transposed, i64& n) {
  checked_volume(fail, x, name, "input 0");
  checked_volume(fail, kernel, name, "input 1 (kernel)");
  if (bias) checked_volume(fail, *bias, name, "input 2 (bias)");
  n = checked_volume(fail, out, name, "the output");
  check_float(fail, x, name, "input 0");
  const graph::TensorDesc kd{kernel.type, kernel.dims};
  graph::TensorDesc bd;
  if (bias) bd = {bias->type, bias->dims};
  return conv_geo(fail, p, x, out, &kd, bias ? &bd : nullptr, name, transposed);
}

}  // namespace tensoracle::backends::common
