// Internal to the CUDA backend, and free of CUDA so that the CPU tests and a fuzz target can
// check it: how a cuDNN convolution is written into an engine's tactic and read back.
//
//   cuda.convolution.cudnn/t:<type>/x:<dims>/w:<dims>/y:<dims>/s:<stride>/d:<dilation>
//       /p:<padding before>/q:<padding after>/a:<0|1>[/l:<channels>][/o:1]/cfg:<configuration>/ws:<bytes>
//
// dims are 'x'-separated decimals (x, w, y: 4 or 5 of them, >= 1; the spatial fields: 2 or 3,
// stride and dilation >= 1, padding >= 0); the type is DataType's value (float32, float16 or
// bfloat16); a: 1 when cuDNN accumulates onto y (a bias written into y first: engines built
// before 2026-12-03; the builder now writes 0 and adds the bias after cuDNN); l: present when
// cuDNN runs channels-last (NHWC) copies of x, w and y that the backend makes around it, x's and
// w's channels padded with zeros to this count (C <= l < C + 8; groups 1; a:0; since 2026-12-04);
// o:1: the node stores its output value channels-last ([N, spatial..., K]) for the convolutions
// that read it (a:0; since 2026-12-04; see CudnnTactic::out_channels_last); the configuration is cuDNN's engine global index then ",<knob type>=<value>" per knob,
// or "direct": the backend's own tensor-core kernel for inputs of up to 4 channels (an image's
// first layer) runs on the same channels-last copies instead of a cuDNN engine (with l:4, only
// for the problems direct_conv_supported() accepts; since 2026-12-04); ws: the
// workspace the engine reserved for the plan. Engine files are untrusted input: parse_cudnn_tactic accepts exactly what
// format_cudnn_tactic writes and rejects anything else without reading out of bounds.
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

#include "tensoracle/types.h"

namespace tensoracle::cuda {

inline constexpr std::string_view kCudnnTacticPrefix = "cuda.convolution.cudnn/";

// The problem, in cuDNN's terms: x [N, C, spatial...], w [K, C / groups, k...], y [N, K, ...]
// (packed, 2 or 3 spatial dims), per spatial dim stride, dilation and padding before/after.
struct CudnnConvShape {
  DataType type = DataType::kFLOAT;
  std::vector<std::int64_t> x, w, y, stride, dilation, pre, post;
  bool accumulate = false;  // y = conv + y (a bias already in y)
  // 0: cuDNN reads and writes the tensors above in place (packed, channels second). Else cuDNN
  // runs on channels-last copies (the backend transposes x and w into them and y out of its
  // own), x's and w's channels padded with zeros to this count: cuDNN's tensor-core kernels
  // are channels-last, and some (a 7x7 first layer over 4 channels) exist only for padded
  // channels.
  std::int64_t channels_last = 0;
  bool operator==(const CudnnConvShape&) const = default;
};

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
  std::string config;          // "<engine global index>[,<knob type>=<value>]..."
  std::size_t workspace = 0;   // bytes reserved at build time
  // The node's output value is stored channels-last, [N, spatial..., K]: written so by this node
  // (in place by a channels-last plan, else through a packed copy), read so by the convolutions
  // that read it (as data or as an epilogue operand); no other layer may read it.
  bool out_channels_last = false;
};

namespace detail {

inline std::string join_dims(const std::vector<std::int64_t>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "x" : "") + std::to_string(v[i]);
  return s;
}

// A whole decimal as std::to_string writes it (optionally negative; no leading zeros, no "-0"),
// nothing else.
template <class T>
bool whole_number(std::string_view s, T& out) {
  const std::string_view digits = s.substr(s.starts_with('-') ? 1 : 0);
  if (digits.empty() || (digits[0] == '0' && s.size() > 1)) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

inline bool split_dims(std::string_view s, std::vector<std::int64_t>& out) {
  out.clear();
  while (true) {
    const auto x = s.find('x');
    std::int64_t v = 0;
    if (!whole_number(s.substr(0, x), v) || out.size() == 8) return false;
    out.push_back(v);
    if (x == std::string_view::npos) return true;
    s.remove_prefix(x + 1);
  }
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

inline std::string format_cudnn_tactic(const CudnnTactic& t) {
  using detail::join_dims;
  const CudnnConvShape& s = t.shape;
  return std::string(kCudnnTacticPrefix) + "t:" + std::to_string(static_cast<int>(s.type)) + "/x:" + join_dims(s.x) +
         "/w:" + join_dims(s.w) + "/y:" + join_dims(s.y) + "/s:" + join_dims(s.stride) + "/d:" + join_dims(s.dilation) +
         "/p:" + join_dims(s.pre) + "/q:" + join_dims(s.post) + "/a:" + (s.accumulate ? "1" : "0") +
         (s.channels_last ? "/l:" + std::to_string(s.channels_last) : std::string()) +
         (t.out_channels_last ? "/o:1" : "") + "/cfg:" + t.config +
         "/ws:" + std::to_string(t.workspace);
}

// Exactly format_cudnn_tactic's output (fields in its order); false for anything else.
inline bool parse_cudnn_tactic(std::string_view text, CudnnTactic& out) {
  if (text.substr(0, kCudnnTacticPrefix.size()) != kCudnnTacticPrefix) return false;
  text.remove_prefix(kCudnnTacticPrefix.size());
  CudnnTactic t;
  CudnnConvShape& s = t.shape;
  std::vector<std::int64_t>* dims[] = {nullptr, &s.x, &s.w, &s.y, &s.stride, &s.dilation, &s.pre, &s.post};
  constexpr std::string_view keys[] = {"t:", "x:", "w:", "y:", "s:", "d:", "p:", "q:", "a:", "l:", "o:", "cfg:", "ws:"};
  constexpr std::size_t kLayout = 9, kOutLayout = 10;  // the optional fields
  for (std::size_t k = 0; k < std::size(keys); ++k) {
    if ((k == kLayout || k == kOutLayout) && !text.starts_with(keys[k])) continue;
    if (text.substr(0, keys[k].size()) != keys[k]) return false;
    text.remove_prefix(keys[k].size());
    const bool last = k + 1 == std::size(keys);
    const auto slash = last ? std::string_view::npos : text.find('/');
    if (!last && slash == std::string_view::npos) return false;
    const std::string_view value = text.substr(0, slash);
    if (k == 0) {
      int type = -1;
      if (!detail::whole_number(value, type) ||
          (type != static_cast<int>(DataType::kFLOAT) && type != static_cast<int>(DataType::kHALF) &&
           type != static_cast<int>(DataType::kBF16)))
        return false;
      s.type = static_cast<DataType>(type);
    } else if (k < 8) {
      if (!detail::split_dims(value, *dims[k])) return false;
    } else if (k == 8) {
      if (value != "0" && value != "1") return false;
      s.accumulate = value == "1";
    } else if (k == kLayout) {
      if (!detail::whole_number(value, s.channels_last) || s.channels_last < 1) return false;
    } else if (k == kOutLayout) {
      if (value != "1") return false;
      t.out_channels_last = true;
    } else if (k == 11) {
      std::int64_t global = 0;
      std::vector<std::pair<int, std::int64_t>> knobs;
      if (value != kDirectConfig && !parse_cudnn_config(value, global, knobs)) return false;
      t.config = std::string(value);
    } else if (!detail::whole_number(value, t.workspace)) {
      return false;
    }
    if (!last) text.remove_prefix(slash + 1);
  }
  const std::size_t r = s.x.size();
  if ((r != 4 && r != 5) || s.w.size() != r || s.y.size() != r) return false;
  for (const auto* d : {&s.stride, &s.dilation, &s.pre, &s.post})
    if (d->size() != r - 2) return false;
  for (const auto* d : {&s.x, &s.w, &s.y, &s.stride, &s.dilation})
    for (auto v : *d)
      if (v < 1) return false;
  for (const auto* d : {&s.pre, &s.post})
    for (auto v : *d)
      if (v < 0) return false;
  if (s.channels_last &&
      (s.accumulate || s.w[1] != s.x[1] || s.channels_last < s.x[1] || s.channels_last - s.x[1] >= 8))
    return false;
  if (t.out_channels_last && s.accumulate) return false;
  if (t.config == kDirectConfig && !direct_conv_supported(s)) return false;
  out = std::move(t);
  return true;
}

}  // namespace tensoracle::cuda
