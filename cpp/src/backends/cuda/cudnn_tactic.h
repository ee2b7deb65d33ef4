// Internal to the CUDA backend, and free of CUDA so that the CPU tests and a fuzz target can
// check it: a cuDNN convolution problem, and how its tactic (graph::CudnnConvConfig, kernel
// cuda.convolution.cudnn) reads as the backend's CudnnTactic and back. The plan's reader
// (graph/tactic.h) checks a tactic's structure; from_tactic adds what only the backend knows
// (the direct kernel runs the problem). Whether the problem is the node's is checked at run
// time (same_cudnn_problem; another problem runs the backend's own convolution).
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "graph/tactic.h"
#include "tensoracle/types.h"

namespace tensoracle::cuda {

// The problem, in cuDNN's terms (graph/tactic.h, which a tactic stores).
using CudnnConvShape = graph::ConvProblem;

// True when `a` and `b` are one problem: equal but for padding after, where each post leaves
// the output size and the input positions the windows read unchanged (the builder writes the
// post symmetric to the pre where that holds, engines built before that change the least post
// the last window needs; both run the same plan). Safe on any field sizes.
inline bool same_cudnn_problem(const CudnnConvShape& a, const CudnnConvShape& b) {
  const std::size_t n = a.pre.size();
  if (a.post.size() != n || b.post.size() != n || a.x.size() != n + 2 || a.w.size() != n + 2 ||
      a.y.size() != n + 2 || a.stride.size() != n || a.dilation.size() != n)
    return false;
  CudnnConvShape c = b;
  c.post = a.post;
  if (!(c == a)) return false;
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t in = a.x[i + 2], k = a.w[i + 2], out = a.y[i + 2], s = a.stride[i], d = a.dilation[i];
    if (in < 1 || k < 1 || out < 1 || s < 1 || d < 1 || a.pre[i] < 0 || in > (std::int64_t{1} << 40) ||
        k > (std::int64_t{1} << 20) || d > (std::int64_t{1} << 20) || out > (std::int64_t{1} << 40) ||
        s > (std::int64_t{1} << 20) || a.pre[i] > (std::int64_t{1} << 40))
      return false;
    const std::int64_t span = (k - 1) * d + 1, least = (out - 1) * s + span - in - a.pre[i];
    for (std::int64_t post : {a.post[i], b.post[i]})
      if (post < 0 || post > (std::int64_t{1} << 40) || post < least || in + a.pre[i] + post < span ||
          (in + a.pre[i] + post - span) / s + 1 != out)
        return false;
  }
  return true;
}

// The configuration that runs the backend's direct kernel (ops/convolution.cu) instead of a
// cuDNN engine.
inline constexpr std::string_view kDirectConfig = "direct";

// Shared memory the direct kernel needs for `s` (ops/convolution.cu's layout: the block's 64
// kernels in fragment order, their bias, the tap table, two input tiles of 128 output
// positions' windows).
inline std::size_t direct_conv_shared_bytes(const CudnnConvShape& s) {
  const std::int64_t taps = s.w[2] * s.w[3], kb = (taps + 3) / 4, tile_w = 127 * s.stride[1] + s.w[3];
  return static_cast<std::size_t>(kb * 2048 + 256 + kb * 16 + 2 * s.w[2] * tile_w * 8);
}

// Whether the direct kernel runs problem `s`: float16/bfloat16, 2 spatial dims, x's (at most 4)
// channels padded to 4 channels-last, no groups, a multiple of 64 output channels, dilation 1,
// windows of at most 32 x 32 and strides of at most 16 (its shared memory then stays below
// 200 KiB), positions and offsets in int.
inline bool direct_conv_supported(const CudnnConvShape& s) {
  if (s.type != DataType::kHALF && s.type != DataType::kBF16) return false;
  if (s.x.size() != 4 || s.w.size() != 4 || s.y.size() != 4 || s.stride.size() != 2 || s.dilation.size() != 2 ||
      s.pre.size() != 2)
    return false;
  if (s.channels_last != 4 || s.accumulate || s.w[1] != s.x[1] || s.x[1] > 4 || s.y[1] % 64 != 0 || s.y[1] != s.w[0])
    return false;
  for (int i = 0; i < 2; ++i)
    if (s.dilation[i] != 1 || s.stride[i] < 1 || s.stride[i] > 16 || s.w[2 + i] < 1 || s.w[2 + i] > 32 || s.pre[i] < 0 ||
        s.pre[i] > 32)
      return false;
  if (s.y[0] != s.x[0]) return false;
  // Products of factors in [1, 2^24) below 2^31, multiplied one at a time (no overflow: each
  // partial product is below 2^31 before the next factor).
  auto below_int = [](std::initializer_list<std::int64_t> factors) {
    std::int64_t p = 1;
    for (std::int64_t f : factors) {
      if (f < 1 || f >= (std::int64_t{1} << 24)) return false;
      p *= f;
      if (p >= (std::int64_t{1} << 31)) return false;
    }
    return true;
  };
  if (!below_int({s.x[0], 4, s.x[2], s.x[3]}) || !below_int({s.y[0], s.y[1], s.y[2], s.y[3]}) ||
      !below_int({s.y[0], s.y[2], (s.y[3] + 127) / 128}))
    return false;
  return direct_conv_shared_bytes(s) <= 200 * 1024;
}

struct CudnnTactic {
  CudnnConvShape shape;
  // "<engine global index>[,<knob type>=<value>]...", as CudnnConv's candidates give it, or
  // kDirectConfig.
  std::string config;
  std::size_t workspace = 0;   // bytes reserved at build time
};

namespace detail {

// A whole decimal as std::to_string writes it (optionally negative; no leading zeros, no "-0"),
// nothing else.
template <class T>
bool whole_number(std::string_view s, T& out) {
  const std::string_view digits = s.substr(s.starts_with('-') ? 1 : 0);
  if (digits.empty() || (digits[0] == '0' && s.size() > 1)) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace detail

// "<engine global index>[,<knob type>=<value>]..." into its parts; false when malformed.
inline bool parse_cudnn_config(std::string_view text, std::int64_t& global,
                               std::vector<std::pair<int, std::int64_t>>& knobs) {
  knobs.clear();
  bool first = true;
  while (true) {
    const auto comma = text.find(',');
    const std::string_view part = text.substr(0, comma);
    if (first) {
      if (!detail::whole_number(part, global) || global < 0) return false;
      first = false;
    } else {
      const auto eq = part.find('=');
      int type = 0;
      std::int64_t value = 0;
      if (eq == std::string_view::npos || !detail::whole_number(part.substr(0, eq), type) || type < 0 ||
          !detail::whole_number(part.substr(eq + 1), value) || knobs.size() == 64)
        return false;
      knobs.emplace_back(type, value);
    }
    if (comma == std::string_view::npos) return true;
    text.remove_prefix(comma + 1);
  }
}

inline graph::Tactic to_tactic(const CudnnTactic& t) {
  graph::CudnnConvConfig c;
  c.problem = t.shape;
  if (t.config != kDirectConfig) {
    std::int64_t global = 0;
    if (!parse_cudnn_config(t.config, global, c.knobs)) return graph::Tactic();  // not cuDNN's: none
    c.engine = global;
  }
  c.workspace = t.workspace;
  return graph::Tactic(std::move(c));
}

// The backend's reading of a cuDNN convolution's tactic; false when it is another kernel's, or
// the direct kernel's for a problem that kernel does not run.
inline bool from_tactic(const graph::Tactic& tactic, CudnnTactic& out) {
  const auto* c = std::get_if<graph::CudnnConvConfig>(&tactic.config);
  if (c == nullptr) return false;
  CudnnTactic t;
  t.shape = c->problem;
  if (c->engine) {
    t.config = std::to_string(*c->engine);
    for (const auto& [type, value] : c->knobs) t.config += "," + std::to_string(type) + "=" + std::to_string(value);
  } else {
    if (!direct_conv_supported(t.shape)) return false;
    t.config = std::string(kDirectConfig);
  }
  t.workspace = static_cast<std::size_t>(c->workspace);
  out = std::move(t);
  return true;
}

}  // namespace tensoracle::cuda
