// Tests of the CPU backend's window kernels (backends/cpu/kernels.h: convolution,
// deconvolution, pooling) against direct nested-loop references written here, accumulated in
// double on the same (rounded) inputs. Output sizes and SAME padding are computed here from
// TensorRT's rules, independently of graph/ops/.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backends/cpu/kernels.h"
#include "core/numeric.h"
#include "tensoracle/errors.h"

namespace {

using namespace tensoracle;
using cpu::TensorRef;
using i64 = std::int64_t;
using PM = PaddingMode;
using PT = PoolingType;

constexpr DataType kF32 = DataType::kFLOAT, kF16 = DataType::kHALF, kBF16 = DataType::kBF16;

Dims dims_of(const std::vector<i64>& v) { return Dims(std::span<const i64>(v)); }

// The spacing of t's values at |v|.
double ulp_of(DataType t, double v) {
  const double a = std::fabs(v);
  int mant = 23, emin = -126;
  if (t == kF16) mant = 10, emin = -14;
  if (t == kBF16) mant = 7;
  const int e = a > 0 ? std::ilogb(a) : emin;
  return std::ldexp(1.0, std::max(e, emin) - mant);
}

// Canary words after a buffer's end: a kernel that writes past it changes them.
constexpr std::size_t kGuardWords = 64;
constexpr std::uint32_t kCanary = 0xDEADBEEFu;

bool guard_intact(const std::uint32_t* end) {
  for (std::size_t i = 0; i < kGuardWords; ++i)
    if (end[i] != kCanary) return false;
  return true;
}

// A float32/float16/bfloat16 tensor: its bytes (then a guard) and the exact values they hold.
struct Tensor {
  DataType type = kF32;
  Dims dims;
  std::vector<std::uint32_t> words;  // storage (4-byte aligned), then kGuardWords canaries

  Tensor(DataType t, Dims d) : type(t), dims(d), words(data_words() + kGuardWords, 0) {
    std::fill(words.begin() + static_cast<std::ptrdiff_t>(data_words()), words.end(), kCanary);
  }
  std::size_t data_words() const {
    return static_cast<std::size_t>((std::max<i64>(0, dims.volume()) * element_size(type) + 3) / 4);
  }
  bool intact() const { return guard_intact(words.data() + data_words()); }
  i64 size() const { return dims.volume(); }
  void* data() { return words.data(); }
  TensorRef ref() { return TensorRef{data(), type, dims}; }
  double get(i64 i) const {
    if (type == kF32) return reinterpret_cast<const float*>(words.data())[i];
    const std::uint16_t h = reinterpret_cast<const std::uint16_t*>(words.data())[i];
    return type == kF16 ? core::half_to_float(h) : core::bf16_to_float(h);
  }
  void set(i64 i, double v) {
    const float f = static_cast<float>(v);
    if (type == kF32) reinterpret_cast<float*>(words.data())[i] = f;
    else reinterpret_cast<std::uint16_t*>(words.data())[i] = type == kF16 ? core::float_to_half(f) : core::float_to_bf16(f);
  }
  std::vector<double> values() const {
    std::vector<double> v(static_cast<std::size_t>(size()));
    for (i64 i = 0; i < size(); ++i) v[i] = get(i);
    return v;
  }
};

Tensor random_tensor(DataType t, const std::vector<i64>& d, std::mt19937& rng, double lo = -1.0, double hi = 1.0) {
  Tensor x(t, dims_of(d));
  std::uniform_real_distribution<double> u(lo, hi);
  for (i64 i = 0; i < x.size(); ++i) x.set(i, u(rng));
  return x;
}

// ---- geometry (TensorRT's rules, written out here) ---------------------------------------------

struct Spec {
  std::vector<i64> x{};  // N, C, spatial...
  i64 maps = 1;          // output maps (convolution/deconvolution)
  // Empty: the defaults (stride and dilation 1, padding 0).
  std::vector<i64> k{}, s{}, pre{}, post{}, d{};
  int groups = 1;
  PM mode = PM::kEXPLICIT_ROUND_DOWN;
  bool bias = true;
  std::string name{};
};

int nsp(const Spec& s) { return static_cast<int>(s.k.size()); }
i64 at_or(const std::vector<i64>& v, int i, i64 def) { return v.empty() ? def : v[static_cast<std::size_t>(i)]; }
bool is_same_mode(PM m) { return m == PM::kSAME_UPPER || m == PM::kSAME_LOWER; }

i64 floor_div(i64 a, i64 b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
i64 ceil_div(i64 a, i64 b) { return -floor_div(-a, b); }

// Per spatial dim: output size and effective pre padding.
struct Axis {
  i64 in, out, k, s, d, pre, post;
};

std::vector<Axis> forward_axes(const Spec& sp) {
  std::vector<Axis> ax;
  for (int i = 0; i < nsp(sp); ++i) {
    Axis a{sp.x[2 + i], 0, sp.k[i], at_or(sp.s, i, 1), at_or(sp.d, i, 1), at_or(sp.pre, i, 0), at_or(sp.post, i, 0)};
    const i64 span = a.d * (a.k - 1) + 1;
    if (is_same_mode(sp.mode)) {
      a.out = ceil_div(a.in, a.s);
      const i64 total = std::max<i64>(0, (a.out - 1) * a.s + span - a.in);
      a.pre = sp.mode == PM::kSAME_UPPER ? total / 2 : (total + 1) / 2;
      a.post = total - a.pre;
    } else if (sp.mode == PM::kEXPLICIT_ROUND_UP) {
      a.out = ceil_div(a.in + a.pre + a.post - span, a.s) + 1;
    } else {
      a.out = floor_div(a.in + a.pre + a.post - span, a.s) + 1;
    }
    ax.push_back(a);
  }
  return ax;
}

std::vector<Axis> transposed_axes(const Spec& sp) {
  std::vector<Axis> ax;
  for (int i = 0; i < nsp(sp); ++i) {
    Axis a{sp.x[2 + i], 0, sp.k[i], at_or(sp.s, i, 1), at_or(sp.d, i, 1), at_or(sp.pre, i, 0), at_or(sp.post, i, 0)};
    const i64 span = a.d * (a.k - 1) + 1;
    if (is_same_mode(sp.mode)) {
      a.out = a.in * a.s;
      const i64 total = std::max<i64>(0, span - a.s);  // full output (in-1)*s + span, cropped to in*s
      a.pre = sp.mode == PM::kSAME_UPPER ? total / 2 : (total + 1) / 2;
      a.post = total - a.pre;
    } else {
      a.out = (a.in - 1) * a.s + span - a.pre - a.post;
    }
    ax.push_back(a);
  }
  return ax;
}

// Normalized to 3 spatial dims (leading dims of size 1).
std::array<Axis, 3> as3(const std::vector<Axis>& ax) {
  std::array<Axis, 3> r;
  const int off = 3 - static_cast<int>(ax.size());
  for (int i = 0; i < 3; ++i) r[i] = i < off ? Axis{1, 1, 1, 1, 1, 0, 0} : ax[i - off];
  return r;
}

std::vector<i64> out_shape(const Spec& sp, i64 channels, const std::vector<Axis>& ax) {
  std::vector<i64> o{sp.x[0], channels};
  for (const auto& a : ax) o.push_back(a.out);
  return o;
}

template <class P>
void fill_window_params(P& p, const Spec& sp) {
  p.kernel_size = dims_of(sp.k);
  if (!sp.s.empty()) p.stride = dims_of(sp.s);
  if (!sp.pre.empty()) p.pre_padding = dims_of(sp.pre);
  if (!sp.post.empty()) p.post_padding = dims_of(sp.post);
  if (!sp.d.empty()) p.dilation = dims_of(sp.d);
  p.num_groups = sp.groups;
  p.padding_mode = sp.mode;
  p.num_output_maps = static_cast<std::int32_t>(sp.maps);
}

i64 kvol_of(const Spec& sp) {
  i64 v = 1;
  for (auto k : sp.k) v *= k;
  return v;
}

// ---- references ----------------------------------------------------------------------------

struct Ref {
  std::vector<double> value;  // exact (double) result on the given inputs
  std::vector<double> scale;  // sum of |terms|: bounds the float32 accumulation error
};

Ref conv_ref(const Spec& sp, const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>* b) {
  const auto A = as3(forward_axes(sp));
  const i64 N = sp.x[0], C = sp.x[1], K = sp.maps, G = sp.groups, Cg = C / G, Kg = K / G;
  const i64 kv = A[0].k * A[1].k * A[2].k, isp = A[0].in * A[1].in * A[2].in;
  Ref r;
  for (i64 n = 0; n < N; ++n)
    for (i64 k = 0; k < K; ++k)
      for (i64 od = 0; od < A[0].out; ++od)
        for (i64 oh = 0; oh < A[1].out; ++oh)
          for (i64 ow = 0; ow < A[2].out; ++ow) {
            double acc = b ? (*b)[k] : 0.0, sc = std::fabs(acc);
            const i64 g = k / Kg;
            for (i64 c = 0; c < Cg; ++c)
              for (i64 kd = 0; kd < A[0].k; ++kd)
                for (i64 kh = 0; kh < A[1].k; ++kh)
                  for (i64 kw = 0; kw < A[2].k; ++kw) {
                    const i64 id = od * A[0].s - A[0].pre + kd * A[0].d;
                    const i64 ih = oh * A[1].s - A[1].pre + kh * A[1].d;
                    const i64 iw = ow * A[2].s - A[2].pre + kw * A[2].d;
                    if (id < 0 || id >= A[0].in || ih < 0 || ih >= A[1].in || iw < 0 || iw >= A[2].in) continue;
                    const double t = x[((n * C + g * Cg + c) * isp) + (id * A[1].in + ih) * A[2].in + iw] *
                                     w[((k * Cg + c) * kv) + (kd * A[1].k + kh) * A[2].k + kw];
                    acc += t;
                    sc += std::fabs(t);
                  }
            r.value.push_back(acc);
            r.scale.push_back(sc);
          }
  return r;
}

// Scatter form: every input element adds kernel-weighted copies into the output.
Ref deconv_ref(const Spec& sp, const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>* b) {
  const auto A = as3(transposed_axes(sp));
  const i64 N = sp.x[0], C = sp.x[1], K = sp.maps, G = sp.groups, Cg = C / G, Kg = K / G;
  const i64 kv = A[0].k * A[1].k * A[2].k, osp = A[0].out * A[1].out * A[2].out;
  Ref r;
  r.value.assign(static_cast<std::size_t>(N * K * osp), 0.0);
  r.scale.assign(r.value.size(), 0.0);
  for (i64 n = 0; n < N; ++n)
    for (i64 k = 0; k < K; ++k)
      for (i64 o = 0; o < osp; ++o) {
        r.value[(n * K + k) * osp + o] = b ? (*b)[k] : 0.0;
        r.scale[(n * K + k) * osp + o] = b ? std::fabs((*b)[k]) : 0.0;
      }
  i64 xi = 0;
  for (i64 n = 0; n < N; ++n)
    for (i64 c = 0; c < C; ++c)
      for (i64 id = 0; id < A[0].in; ++id)
        for (i64 ih = 0; ih < A[1].in; ++ih)
          for (i64 iw = 0; iw < A[2].in; ++iw, ++xi) {
            const i64 g = c / Cg;
            for (i64 kk = 0; kk < Kg; ++kk)
              for (i64 kd = 0; kd < A[0].k; ++kd)
                for (i64 kh = 0; kh < A[1].k; ++kh)
                  for (i64 kw = 0; kw < A[2].k; ++kw) {
                    const i64 od = id * A[0].s - A[0].pre + kd * A[0].d;
                    const i64 oh = ih * A[1].s - A[1].pre + kh * A[1].d;
                    const i64 ow = iw * A[2].s - A[2].pre + kw * A[2].d;
                    if (od < 0 || od >= A[0].out || oh < 0 || oh >= A[1].out || ow < 0 || ow >= A[2].out) continue;
                    const double t = x[xi] * w[((c * Kg + kk) * kv) + (kd * A[1].k + kh) * A[2].k + kw];
                    const i64 oi = (n * K + g * Kg + kk) * osp + (od * A[1].out + oh) * A[2].out + ow;
                    r.value[oi] += t;
                    r.scale[oi] += std::fabs(t);
                  }
          }
  return r;
}

struct PoolSpec {
  std::vector<i64> x{};
  std::vector<i64> window{}, s{}, pre{}, post{};
  PM mode = PM::kEXPLICIT_ROUND_DOWN;
  PT type = PT::kMAX;
  bool excludes_padding = true;
  float blend = 0.f;
};

Spec as_spec(const PoolSpec& p) {
  Spec s;
  s.x = p.x;
  s.k = p.window;
  s.s = p.s;
  s.pre = p.pre;
  s.post = p.post;
  s.mode = p.mode;
  return s;
}

// Windows clipped to the padded input [-pre, in + post); averages divide by the in-bounds
// count or by the clipped window; a window with no input element gives 0.
std::vector<double> pool_ref(const PoolSpec& p, const std::vector<double>& x) {
  const Spec sp = as_spec(p);
  const auto A = as3(forward_axes(sp));
  const i64 NC = p.x[0] * p.x[1], isp = A[0].in * A[1].in * A[2].in;
  std::vector<double> out;
  for (i64 nc = 0; nc < NC; ++nc)
    for (i64 od = 0; od < A[0].out; ++od)
      for (i64 oh = 0; oh < A[1].out; ++oh)
        for (i64 ow = 0; ow < A[2].out; ++ow) {
          const i64 o[3] = {od, oh, ow};
          i64 lo[3], hi[3], padded = 1;
          for (int i = 0; i < 3; ++i) {
            const i64 st = o[i] * A[i].s - A[i].pre;
            const i64 end = is_same_mode(p.mode) ? st + A[i].k : std::min(st + A[i].k, A[i].in + A[i].post);
            padded *= end - st;
            lo[i] = std::max<i64>(st, 0);
            hi[i] = std::min(st + A[i].k, A[i].in);
          }
          double mx = -std::numeric_limits<double>::infinity(), sum = 0;
          i64 count = 0;
          for (i64 d = lo[0]; d < hi[0]; ++d)
            for (i64 h = lo[1]; h < hi[1]; ++h)
              for (i64 w = lo[2]; w < hi[2]; ++w) {
                const double v = x[nc * isp + (d * A[1].in + h) * A[2].in + w];
                mx = std::isnan(v) || std::isnan(mx) ? std::numeric_limits<double>::quiet_NaN() : std::max(mx, v);
                sum += v;
                ++count;
              }
          if (count == 0) {
            out.push_back(0.0);
            continue;
          }
          const double avg = sum / static_cast<double>(p.excludes_padding ? count : padded);
          if (p.type == PT::kMAX) out.push_back(mx);
          else if (p.type == PT::kAVERAGE) out.push_back(avg);
          else out.push_back(static_cast<double>(p.blend) * mx + (1.0 - static_cast<double>(p.blend)) * avg);
        }
  return out;
}

// ---- comparison -------------------------------------------------------------------------------

// |got - want| <= ulps * ulp(type, want) + rel * scale (the float32 accumulation's error).
void expect_close(const Tensor& got, const Ref& ref, double ulps, double rel, const std::string& what) {
  ASSERT_EQ(got.size(), static_cast<i64>(ref.value.size())) << what;
  int bad = 0;
  double worst = 0;
  for (i64 i = 0; i < got.size(); ++i) {
    const double g = got.get(i), w = ref.value[i];
    const double tol = ulps * ulp_of(got.type, w) + rel * ref.scale[i];
    const double err = std::fabs(g - w);
    worst = std::max(worst, tol > 0 ? err / tol : err);
    if (!(err <= tol) && !(std::isnan(g) && std::isnan(w))) {
      if (++bad <= 6) ADD_FAILURE() << what << ": at " << i << " got " << g << ", want " << w << " (tol " << tol << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements off";
}

// ---- runners ----------------------------------------------------------------------------------

// A workspace of the bytes a kernel asked for (NaN-filled), then a guard.
struct Workspace {
  std::vector<std::uint32_t> words;
  std::size_t n;
  explicit Workspace(std::size_t bytes) : words((bytes + 3) / 4 + kGuardWords, 0x7FC00000u), n((bytes + 3) / 4) {
    std::fill(words.begin() + static_cast<std::ptrdiff_t>(n), words.end(), kCanary);
  }
  void* data() { return n ? words.data() : nullptr; }
  bool intact() const { return guard_intact(words.data() + n); }
};

struct Outcome {
  Tensor out;
  Ref ref;
};

Outcome run_conv(const Spec& sp, DataType t, unsigned seed) {
  std::mt19937 rng(seed);
  const i64 Cg = sp.x[1] / sp.groups;
  Tensor x = random_tensor(t, sp.x, rng);
  Tensor w = random_tensor(t, {sp.maps * Cg * kvol_of(sp)}, rng);
  Tensor b = random_tensor(t, {sp.maps}, rng);
  ConvolutionParams p;
  fill_window_params(p, sp);
  Tensor out(t, dims_of(out_shape(sp, sp.maps, forward_axes(sp))));
  const std::size_t ws_bytes = cpu::convolution_workspace_bytes(p, TensorRef{nullptr, t, x.dims}, TensorRef{nullptr, t, out.dims});
  Workspace ws(ws_bytes);
  TensorRef bref = b.ref();
  cpu::convolution(p, x.ref(), w.ref(), sp.bias ? &bref : nullptr, out.ref(), ws.data());
  EXPECT_TRUE(out.intact()) << "conv " << sp.name << " wrote past its output";
  EXPECT_TRUE(ws.intact()) << "conv " << sp.name << " wrote past its workspace";
  const std::vector<double> bv = b.values();
  return {out, conv_ref(sp, x.values(), w.values(), sp.bias ? &bv : nullptr)};
}

Outcome run_deconv(const Spec& sp, DataType t, unsigned seed) {
  std::mt19937 rng(seed);
  const i64 Kg = sp.maps / sp.groups;
  Tensor x = random_tensor(t, sp.x, rng);
  Tensor w = random_tensor(t, {sp.x[1] * Kg * kvol_of(sp)}, rng);
  Tensor b = random_tensor(t, {sp.maps}, rng);
  DeconvolutionParams p;
  fill_window_params(p, sp);
  Tensor out(t, dims_of(out_shape(sp, sp.maps, transposed_axes(sp))));
  const std::size_t ws_bytes =
      cpu::deconvolution_workspace_bytes(p, TensorRef{nullptr, t, x.dims}, TensorRef{nullptr, t, out.dims});
  Workspace ws(ws_bytes);
  TensorRef bref = b.ref();
  cpu::deconvolution(p, x.ref(), w.ref(), sp.bias ? &bref : nullptr, out.ref(), ws.data());
  EXPECT_TRUE(out.intact()) << "deconv " << sp.name << " wrote past its output";
  EXPECT_TRUE(ws.intact()) << "deconv " << sp.name << " wrote past its workspace";
  const std::vector<double> bv = b.values();
  return {out, deconv_ref(sp, x.values(), w.values(), sp.bias ? &bv : nullptr)};
}

// float32: 1 ulp + 1e-5 of the magnitudes summed; float16/bfloat16: 1 ulp of the output type
// (one rounding of a float32 result) + the same float32 slack.
double ulps_for(DataType) { return 1.0; }
constexpr double kRel = 1e-5;

const char* type_str(DataType t) { return t == kF32 ? "f32" : t == kF16 ? "f16" : "bf16"; }

void check_conv(const Spec& sp, DataType t, unsigned seed = 1) {
  Outcome r = run_conv(sp, t, seed);
  expect_close(r.out, r.ref, ulps_for(t), kRel, "conv " + sp.name + " " + type_str(t));
}

void check_deconv(const Spec& sp, DataType t, unsigned seed = 2) {
  Outcome r = run_deconv(sp, t, seed);
  expect_close(r.out, r.ref, ulps_for(t), kRel, "deconv " + sp.name + " " + type_str(t));
}

Tensor run_pool(const PoolSpec& ps, DataType t, const Tensor& x) {
  PoolingParams p;
  p.type = ps.type;
  p.window = dims_of(ps.window);
  if (!ps.s.empty()) p.stride = dims_of(ps.s);
  if (!ps.pre.empty()) p.pre_padding = dims_of(ps.pre);
  if (!ps.post.empty()) p.post_padding = dims_of(ps.post);
  p.padding_mode = ps.mode;
  p.average_count_excludes_padding = ps.excludes_padding;
  p.blend_factor = ps.blend;
  const Spec sp = as_spec(ps);
  Tensor out(t, dims_of(out_shape(sp, ps.x[1], forward_axes(sp))));
  Tensor xx = x;
  cpu::pooling(p, xx.ref(), out.ref());
  EXPECT_TRUE(out.intact()) << "pooling wrote past its output";
  return out;
}

void check_pool(const PoolSpec& ps, DataType t, const std::string& name, unsigned seed = 3) {
  std::mt19937 rng(seed);
  Tensor x = random_tensor(t, ps.x, rng, -2.0, 2.0);
  Tensor out = run_pool(ps, t, x);
  Ref ref;
  ref.value = pool_ref(ps, x.values());
  ref.scale.assign(ref.value.size(), 0.0);
  // Max is exact; an average is one rounding of a double sum (float32 for the narrow types
  // first): 1 ulp of the output type.
  expect_close(out, ref, ps.type == PT::kMAX ? 0.0 : 1.0, 0.0, "pool " + name + " " + type_str(t));
}

const std::vector<DataType> kTypes{kF32, kF16, kBF16};

// ---- convolution -------------------------------------------------------------------------------

std::vector<Spec> conv_cases() {
  std::vector<Spec> v;
  auto add = [&](Spec s) { v.push_back(std::move(s)); };
  add({.x = {2, 3, 7, 6}, .maps = 4, .k = {3, 3}, .pre = {1, 1}, .post = {1, 1}, .name = "3x3_pad1_bias"});
  add({.x = {1, 3, 9, 8}, .maps = 5, .k = {3, 2}, .s = {2, 3}, .pre = {1, 0}, .post = {2, 1}, .d = {2, 1}, .bias = false,
       .name = "stride_dilation_asymmetric_nobias"});
  add({.x = {1, 2, 9, 10}, .maps = 3, .k = {4, 3}, .s = {2, 2}, .mode = PM::kSAME_UPPER, .name = "same_upper"});
  add({.x = {1, 2, 9, 10}, .maps = 3, .k = {4, 3}, .s = {2, 2}, .mode = PM::kSAME_LOWER, .name = "same_lower"});
  add({.x = {1, 2, 7, 8}, .maps = 3, .k = {2, 2}, .s = {1, 1}, .d = {2, 3}, .mode = PM::kSAME_UPPER,
       .name = "same_upper_dilated"});
  add({.x = {1, 2, 8, 7}, .maps = 2, .k = {3, 3}, .s = {3, 2}, .pre = {1, 0}, .post = {0, 1},
       .mode = PM::kEXPLICIT_ROUND_UP, .name = "round_up"});
  add({.x = {2, 4, 6, 5}, .maps = 6, .k = {3, 3}, .pre = {1, 1}, .post = {1, 1}, .groups = 2, .name = "groups2"});
  add({.x = {2, 5, 9, 9}, .maps = 5, .k = {3, 3}, .s = {2, 2}, .pre = {1, 1}, .post = {1, 1}, .groups = 5,
       .name = "depthwise_s2"});
  add({.x = {1, 3, 6, 300}, .maps = 6, .k = {3, 5}, .s = {1, 1}, .pre = {2, 2}, .post = {0, 3}, .d = {1, 2}, .groups = 3,
       .name = "depthwise_multiplier2_wide_rows"});
  add({.x = {1, 4, 7, 9}, .maps = 4, .k = {3, 3}, .s = {2, 3}, .d = {2, 1}, .groups = 4, .mode = PM::kSAME_LOWER,
       .bias = false, .name = "depthwise_same_lower_nobias"});
  add({.x = {2, 6, 5, 7}, .maps = 4, .k = {1, 1}, .name = "1x1_direct_gemm"});
  add({.x = {2, 6, 5, 7}, .maps = 4, .k = {1, 1}, .groups = 2, .bias = false, .name = "1x1_grouped"});
  add({.x = {1, 6, 9, 7}, .maps = 4, .k = {1, 1}, .s = {2, 2}, .name = "1x1_stride2"});
  add({.x = {1, 6, 5, 5}, .maps = 3, .k = {1, 1}, .pre = {1, 0}, .post = {0, 1}, .name = "1x1_padded"});
  add({.x = {2, 3, 17}, .maps = 4, .k = {5}, .s = {2}, .pre = {2}, .post = {1}, .d = {2}, .name = "1d"});
  add({.x = {1, 4, 5, 6, 7}, .maps = 4, .k = {3, 2, 3}, .s = {2, 1, 2}, .pre = {1, 0, 1}, .post = {0, 1, 1},
       .d = {1, 2, 1}, .groups = 2, .name = "3d_groups"});
  add({.x = {1, 3, 5, 6, 7}, .maps = 3, .k = {3, 3, 3}, .s = {1, 2, 1}, .groups = 3, .mode = PM::kSAME_UPPER,
       .name = "3d_depthwise_same"});
  add({.x = {1, 2, 3, 4}, .maps = 2, .k = {5, 5}, .pre = {2, 2}, .post = {2, 2}, .name = "kernel_larger_than_input"});
  return v;
}

TEST(CpuConv, ConvolutionCasesFloat32) {
  for (const auto& c : conv_cases()) check_conv(c, kF32);
}

TEST(CpuConv, ConvolutionCasesFloat16) {
  for (const auto& c : conv_cases()) check_conv(c, kF16);
}

TEST(CpuConv, ConvolutionCasesBfloat16) {
  for (const auto& c : conv_cases()) check_conv(c, kBF16);
}

// The column buffer is tiled (1 MiB per thread): 64 * 9 rows x 10000 positions spans 22
// tiles, most starting inside an output row.
TEST(CpuConv, ConvolutionTiledColumns) {
  Spec s{.x = {1, 64, 100, 100}, .maps = 8, .k = {3, 3}, .pre = {1, 1}, .post = {1, 1}, .name = "tiled"};
  check_conv(s, kF32);
  check_conv(s, kF16);
}

// Small outputs share one GEMM across images (here 3 images of 600 positions, then 2).
TEST(CpuConv, ConvolutionImagesShareGemms) {
  Spec s{.x = {5, 3, 20, 30}, .maps = 5, .k = {3, 3}, .pre = {1, 1}, .post = {1, 1}, .name = "merged"};
  for (DataType t : kTypes) check_conv(s, t);
  Spec grouped{.x = {5, 4, 7, 7}, .maps = 6, .k = {3, 3}, .s = {2, 2}, .groups = 2, .bias = false, .name = "merged_groups"};
  for (DataType t : kTypes) check_conv(grouped, t);
}

TEST(CpuConv, ConvolutionThreadCountsAgree) {
  Spec s{.x = {2, 16, 40, 40}, .maps = 16, .k = {3, 3}, .pre = {1, 1}, .post = {1, 1}, .name = "threads"};
  cpu::set_num_threads(1);
  Outcome one = run_conv(s, kF32, 7);
  cpu::set_num_threads(2);
  Outcome two = run_conv(s, kF32, 7);
  cpu::set_num_threads(0);
  expect_close(one.out, one.ref, 1.0, kRel, "1 thread");
  expect_close(two.out, two.ref, 1.0, kRel, "2 threads");
}

TEST(CpuConv, WorkspaceSizes) {
  auto bytes = [](const Spec& sp, DataType t) {
    ConvolutionParams p;
    fill_window_params(p, sp);
    return cpu::convolution_workspace_bytes(p, TensorRef{nullptr, t, dims_of(sp.x)},
                                            TensorRef{nullptr, t, dims_of(out_shape(sp, sp.maps, forward_axes(sp)))});
  };
  Spec pw{.x = {2, 6, 5, 7}, .maps = 4, .k = {1, 1}};
  EXPECT_EQ(bytes(pw, kF32), 0u);  // a plain GEMM on the input
  EXPECT_GT(bytes(pw, kF16), 0u);  // widened operands
  Spec dw{.x = {1, 8, 9, 9}, .maps = 8, .k = {3, 3}, .groups = 8};
  EXPECT_EQ(bytes(dw, kF32), 0u);  // direct loops
  EXPECT_EQ(bytes(dw, kBF16), 0u);
  Spec c3{.x = {1, 8, 10, 10}, .maps = 16, .k = {3, 3}};
  EXPECT_EQ(bytes(c3, kF32), 8u * 9 * 8 * 8 * sizeof(float));  // one column matrix of one image
  Spec c3n{.x = {4, 8, 10, 10}, .maps = 16, .k = {3, 3}};
  EXPECT_GE(bytes(c3n, kF32), 8u * 9 * 8 * 8 * sizeof(float));
  // Large inputs: the buffers stay bounded: 16 threads' tiles of 1 MiB or 256 columns, and
  // their GEMM results.
  Spec big{.x = {1, 256, 224, 224}, .maps = 64, .k = {3, 3}, .pre = {1, 1}, .post = {1, 1}};
  EXPECT_LE(bytes(big, kF32), 16 * (256 * 9 + 64) * 256 * sizeof(float));
}

// The builder sizes the workspace at the profile's largest shapes and runs at smaller ones: a
// smaller batch or image never needs more (around the size where images start sharing GEMMs
// too), and a run at the smaller shape inside the larger shape's workspace stays inside it.
TEST(CpuConv, WorkspaceGrowsWithShapes) {
  struct Layer {
    std::vector<i64> k;
    i64 c, maps;
    int groups;
  };
  const std::vector<Layer> layers{{{3, 3}, 8, 16, 1},  {{1, 1}, 64, 32, 1}, {{3, 3}, 8, 8, 8},
                                  {{5, 5}, 4, 6, 2},  {{3, 3}, 128, 16, 1}, {{3, 3}, 512, 8, 2}};
  for (const auto& l : layers)
    for (DataType t : kTypes) {
      auto bytes = [&](i64 n, i64 h, i64 w) {
        Spec sp{.x = {n, l.c, h, w}, .maps = l.maps, .k = l.k, .pre = {1, 1}, .post = {1, 1}, .groups = l.groups};
        ConvolutionParams p;
        fill_window_params(p, sp);
        const auto fout = out_shape(sp, sp.maps, forward_axes(sp));
        std::size_t conv = 0;
        if (*std::min_element(fout.begin() + 2, fout.end()) >= 1)  // else the window does not fit
          conv = cpu::convolution_workspace_bytes(p, TensorRef{nullptr, t, dims_of(sp.x)},
                                                  TensorRef{nullptr, t, dims_of(fout)});
        DeconvolutionParams q;
        fill_window_params(q, sp);
        const auto tout = out_shape(sp, sp.maps, transposed_axes(sp));
        std::size_t deconv = 0;
        if (*std::min_element(tout.begin() + 2, tout.end()) >= 1)  // else the padding leaves no output
          deconv = cpu::deconvolution_workspace_bytes(q, TensorRef{nullptr, t, dims_of(sp.x)},
                                                      TensorRef{nullptr, t, dims_of(tout)});
        return std::pair{conv, deconv};
      };
      const std::vector<i64> ns{1, 2, 3, 5, 8}, hs{2, 5, 7, 14, 20, 31, 32, 33, 34, 60}, ws{2, 5, 7, 14, 31, 32, 33, 34, 40};
      for (std::size_t a = 0; a < ns.size(); ++a)
        for (std::size_t b = 0; b < hs.size(); ++b)
          for (std::size_t c = 0; c < ws.size(); ++c) {
            const auto here = bytes(ns[a], hs[b], ws[c]);
            for (auto [n, h, w] : {std::tuple{a + 1, b, c}, std::tuple{a, b + 1, c}, std::tuple{a, b, c + 1}}) {
              if (n >= ns.size() || h >= hs.size() || w >= ws.size()) continue;
              const auto bigger = bytes(ns[n], hs[h], ws[w]);
              EXPECT_LE(here.first, bigger.first) << "conv k=" << l.k[0] << " " << ns[a] << "x" << hs[b] << "x" << ws[c];
              EXPECT_LE(here.second, bigger.second) << "deconv k=" << l.k[0] << " " << ns[a] << "x" << hs[b] << "x" << ws[c];
            }
          }
    }
}

TEST(CpuConv, RejectsBadShapesAndMissingWorkspace) {
  std::mt19937 rng(5);
  Tensor x = random_tensor(kF32, {1, 2, 5, 5}, rng);
  Tensor w = random_tensor(kF32, {3 * 2 * 9}, rng);
  ConvolutionParams p;
  p.num_output_maps = 3;
  p.kernel_size = Dims{3, 3};
  Tensor out(kF32, Dims{1, 3, 3, 3});
  std::vector<float> ws(cpu::convolution_workspace_bytes(p, x.ref(), out.ref()) / 4);
  cpu::convolution(p, x.ref(), w.ref(), nullptr, out.ref(), ws.data());
  Tensor wrong(kF32, Dims{1, 3, 4, 3});
  EXPECT_THROW(cpu::convolution(p, x.ref(), w.ref(), nullptr, wrong.ref(), ws.data()), InvalidArgument);
  EXPECT_THROW(cpu::convolution(p, x.ref(), w.ref(), nullptr, out.ref(), nullptr), InvalidArgument);
  Tensor short_w = random_tensor(kF32, {3 * 2 * 9 - 1}, rng);
  EXPECT_THROW(cpu::convolution(p, x.ref(), short_w.ref(), nullptr, out.ref(), ws.data()), InvalidArgument);
  Tensor bias = random_tensor(kF32, {2}, rng);
  TensorRef bref = bias.ref();
  EXPECT_THROW(cpu::convolution(p, x.ref(), w.ref(), &bref, out.ref(), ws.data()), InvalidArgument);
  Tensor w16 = random_tensor(kF16, {3 * 2 * 9}, rng);
  EXPECT_THROW(cpu::convolution(p, x.ref(), w16.ref(), nullptr, out.ref(), ws.data()), InvalidArgument);
  p.num_groups = 4;  // 2 channels are not divisible by 4 groups
  EXPECT_THROW(cpu::convolution_workspace_bytes(p, x.ref(), out.ref()), InvalidArgument);
}

// ---- deconvolution ---------------------------------------------------------------------------

std::vector<Spec> deconv_cases() {
  std::vector<Spec> v;
  auto add = [&](Spec s) { v.push_back(std::move(s)); };
  add({.x = {2, 3, 4, 5}, .maps = 4, .k = {3, 3}, .s = {2, 2}, .pre = {1, 1}, .post = {1, 1}, .name = "s2_pad1_bias"});
  add({.x = {1, 2, 5, 4}, .maps = 3, .k = {3, 2}, .s = {2, 3}, .pre = {2, 0}, .post = {0, 1}, .d = {2, 2}, .bias = false,
       .name = "dilation_asymmetric_nobias"});
  add({.x = {1, 2, 5, 6}, .maps = 3, .k = {4, 5}, .s = {2, 2}, .mode = PM::kSAME_UPPER, .name = "same_upper"});
  add({.x = {1, 2, 5, 6}, .maps = 3, .k = {4, 5}, .s = {2, 2}, .mode = PM::kSAME_LOWER, .name = "same_lower"});
  add({.x = {1, 2, 4, 5}, .maps = 2, .k = {2, 1}, .s = {3, 2}, .mode = PM::kSAME_UPPER, .name = "same_span_below_stride"});
  add({.x = {2, 4, 5, 5}, .maps = 6, .k = {3, 3}, .s = {2, 1}, .pre = {1, 1}, .post = {0, 1}, .groups = 2,
       .name = "groups2"});
  add({.x = {1, 4, 6, 6}, .maps = 4, .k = {4, 4}, .s = {2, 2}, .pre = {1, 1}, .post = {1, 1}, .groups = 4,
       .name = "depthwise"});
  add({.x = {2, 6, 5, 7}, .maps = 4, .k = {1, 1}, .name = "1x1_direct_gemm"});
  add({.x = {1, 4, 3, 4}, .maps = 6, .k = {1, 1}, .s = {2, 2}, .groups = 2, .name = "1x1_stride2_grouped"});
  add({.x = {2, 3, 7}, .maps = 2, .k = {4}, .s = {3}, .pre = {1}, .post = {2}, .d = {2}, .name = "1d"});
  add({.x = {1, 4, 3, 4, 3}, .maps = 4, .k = {2, 3, 3}, .s = {2, 1, 2}, .pre = {0, 1, 1}, .post = {1, 0, 1},
       .d = {1, 1, 2}, .groups = 2, .name = "3d_groups"});
  add({.x = {1, 2, 3, 3, 4}, .maps = 3, .k = {3, 3, 3}, .s = {2, 2, 1}, .mode = PM::kSAME_LOWER, .name = "3d_same"});
  return v;
}

TEST(CpuConv, DeconvolutionCasesFloat32) {
  for (const auto& c : deconv_cases()) check_deconv(c, kF32);
}

TEST(CpuConv, DeconvolutionCasesFloat16) {
  for (const auto& c : deconv_cases()) check_deconv(c, kF16);
}

TEST(CpuConv, DeconvolutionCasesBfloat16) {
  for (const auto& c : deconv_cases()) check_deconv(c, kBF16);
}

// 64 maps x 4x4 kernel = 1024 GEMM rows: tiles of 256 input positions, most starting inside
// an input row.
TEST(CpuConv, DeconvolutionTiledColumns) {
  Spec s{.x = {1, 2, 70, 70}, .maps = 64, .k = {4, 4}, .s = {2, 2}, .pre = {1, 1}, .post = {1, 1}, .name = "tiled"};
  check_deconv(s, kF32);
  check_deconv(s, kBF16);
}

TEST(CpuConv, DeconvolutionRejectsWrongOutput) {
  std::mt19937 rng(6);
  Tensor x = random_tensor(kF32, {1, 2, 4, 4}, rng);
  Tensor w = random_tensor(kF32, {2 * 3 * 9}, rng);
  DeconvolutionParams p;
  p.num_output_maps = 3;
  p.kernel_size = Dims{3, 3};
  p.stride = Dims{2, 2};
  Tensor out(kF32, Dims{1, 3, 9, 9});
  std::vector<float> ws(cpu::deconvolution_workspace_bytes(p, x.ref(), out.ref()) / 4 + 1);
  EXPECT_NO_THROW(cpu::deconvolution(p, x.ref(), w.ref(), nullptr, out.ref(), ws.data()));
  Tensor wrong(kF32, Dims{1, 3, 8, 9});
  EXPECT_THROW(cpu::deconvolution(p, x.ref(), w.ref(), nullptr, wrong.ref(), ws.data()), InvalidArgument);
  EXPECT_THROW(cpu::deconvolution(p, x.ref(), w.ref(), nullptr, out.ref(), nullptr), InvalidArgument);
}

// ---- pooling ------------------------------------------------------------------------------------

struct PoolCase {
  std::string name;
  PoolSpec spec;
};

std::vector<PoolCase> pool_cases() {
  std::vector<PoolCase> v;
  const std::vector<std::pair<std::string, PoolSpec>> shapes = {
      {"2x2_s2", {.x = {2, 3, 8, 7}, .window = {2, 2}, .s = {2, 2}}},
      {"3x3_s2_pad1", {.x = {1, 2, 9, 8}, .window = {3, 3}, .s = {2, 2}, .pre = {1, 1}, .post = {1, 1}}},
      {"asymmetric_pad", {.x = {1, 2, 7, 9}, .window = {3, 4}, .s = {1, 2}, .pre = {2, 0}, .post = {0, 3}}},
      {"round_up_clipped",
       {.x = {1, 2, 8, 7}, .window = {3, 3}, .s = {2, 2}, .pre = {1, 0}, .post = {1, 1}, .mode = PM::kEXPLICIT_ROUND_UP}},
      {"same_upper", {.x = {1, 2, 7, 8}, .window = {4, 3}, .s = {2, 3}, .mode = PM::kSAME_UPPER}},
      {"same_lower", {.x = {1, 2, 7, 8}, .window = {4, 3}, .s = {2, 3}, .mode = PM::kSAME_LOWER}},
      {"1d", {.x = {2, 3, 11}, .window = {3}, .s = {2}, .pre = {1}, .post = {2}}},
      {"3d", {.x = {1, 2, 5, 6, 7}, .window = {2, 3, 2}, .s = {2, 1, 2}, .pre = {1, 1, 0}, .post = {0, 1, 1}}},
      {"3d_round_up", {.x = {1, 2, 5, 6, 7}, .window = {2, 2, 3}, .s = {2, 2, 2}, .mode = PM::kEXPLICIT_ROUND_UP}},
  };
  for (const auto& [n, s] : shapes) {
    PoolSpec m = s;
    m.type = PT::kMAX;
    v.push_back({n + "_max", m});
    for (bool excl : {true, false}) {
      PoolSpec a = s;
      a.type = PT::kAVERAGE;
      a.excludes_padding = excl;
      v.push_back({n + (excl ? "_avg_excl" : "_avg_incl"), a});
    }
    PoolSpec b = s;
    b.type = PT::kMAX_AVERAGE_BLEND;
    b.blend = 0.25f;
    b.excludes_padding = false;
    v.push_back({n + "_blend", b});
  }
  return v;
}

TEST(CpuConvPool, EveryCaseEveryType) {
  for (DataType t : kTypes)
    for (const auto& c : pool_cases()) check_pool(c.spec, t, c.name);
}

TEST(CpuConvPool, AverageCountsPaddingOrNot) {
  // 1-D, 3 ones, window 3, padding 1 each side: the edge windows hold 2 inputs.
  Tensor x(kF32, Dims{1, 1, 3});
  for (int i = 0; i < 3; ++i) x.set(i, 1.0);
  PoolSpec p{.x = {1, 1, 3}, .window = {3}, .s = {1}, .pre = {1}, .post = {1}, .type = PT::kAVERAGE};
  Tensor excl = run_pool(p, kF32, x);
  EXPECT_EQ(excl.values(), (std::vector<double>{1.0, 1.0, 1.0}));
  p.excludes_padding = false;
  Tensor incl = run_pool(p, kF32, x);
  EXPECT_FLOAT_EQ(incl.get(0), 2.0 / 3.0);
  EXPECT_FLOAT_EQ(incl.get(1), 1.0);
  EXPECT_FLOAT_EQ(incl.get(2), 2.0 / 3.0);
}

TEST(CpuConvPool, RoundUpClipsWindowsAtThePaddedEnd) {
  // in 6, window 3, stride 2, no padding: ROUND_UP gives 3 windows, the last [4, 7) reaches
  // past the input and is clipped to [4, 6): its average divides by 2 either way.
  Tensor x6(kF32, Dims{1, 1, 6});
  for (int i = 0; i < 6; ++i) x6.set(i, i + 1.0);
  PoolSpec p{.x = {1, 1, 6}, .window = {3}, .s = {2}, .mode = PM::kEXPLICIT_ROUND_UP, .type = PT::kAVERAGE,
             .excludes_padding = false};
  Tensor out = run_pool(p, kF32, x6);
  EXPECT_EQ(out.values(), (std::vector<double>{2.0, 4.0, 5.5}));
  Tensor x(kF32, Dims{1, 1, 5});
  for (int i = 0; i < 5; ++i) x.set(i, i + 1.0);
  // A window that starts past the input (in 5, window 2, stride 3, post 1: windows at 0, 3, 6)
  // holds no element: it gives 0.
  PoolSpec q{.x = {1, 1, 5}, .window = {2}, .s = {3}, .pre = {0}, .post = {1}, .mode = PM::kEXPLICIT_ROUND_UP};
  Tensor m = run_pool(q, kF32, x);
  EXPECT_EQ(m.values(), (std::vector<double>{2.0, 5.0, 0.0}));
}

TEST(CpuConvPool, MaxPropagatesNaNAndIgnoresPadding) {
  Tensor x(kF32, Dims{1, 1, 4});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> v{-3.0, nan, -1.0, -2.0};
  for (int i = 0; i < 4; ++i) x.set(i, v[i]);
  PoolSpec p{.x = {1, 1, 4}, .window = {2}, .s = {1}, .pre = {1}, .post = {1}};
  Tensor out = run_pool(p, kF32, x);
  ASSERT_EQ(out.size(), 5);
  EXPECT_EQ(out.get(0), -3.0);  // padding is not a zero for max
  EXPECT_TRUE(std::isnan(out.get(1)));
  EXPECT_TRUE(std::isnan(out.get(2)));
  EXPECT_EQ(out.get(3), -1.0);
  EXPECT_EQ(out.get(4), -2.0);
}

// A 2-D max pool runs tap by tap over whole output rows; it keeps the window-by-window
// semantics: the first of equal values (-0 before +0), -inf windows, and a NaN row (recomputed
// window by window) giving NaN only where a window holds the NaN.
TEST(CpuConvPool, MaxRowsKeepTheFirstOfEqualValuesAndNaN) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (DataType t : kTypes) {
    Tensor x(t, Dims{1, 1, 4, 4});
    const std::vector<double> v{-0.0, 0.0, -inf, -inf,  // row 0
                                0.0, -0.0, -inf, -inf,  // row 1
                                0.0, -0.0, 7.0, nan,    // row 2
                                -0.0, 0.0, 1.0, 2.0};   // row 3
    for (int i = 0; i < 16; ++i) x.set(i, v[static_cast<std::size_t>(i)]);
    PoolSpec p{.x = {1, 1, 4, 4}, .window = {2, 2}, .s = {2, 2}};
    Tensor out = run_pool(p, t, x);
    ASSERT_EQ(out.size(), 4) << type_str(t);
    EXPECT_EQ(out.get(0), 0.0) << type_str(t);
    EXPECT_TRUE(std::signbit(out.get(0))) << type_str(t) << ": the first zero of the window is -0";
    EXPECT_EQ(out.get(1), -inf) << type_str(t);
    EXPECT_EQ(out.get(2), 0.0) << type_str(t);
    EXPECT_FALSE(std::signbit(out.get(2))) << type_str(t) << ": the first zero of the window is +0";
    EXPECT_TRUE(std::isnan(out.get(3))) << type_str(t);
    // Padded windows (3 x 3, stride (2, 3)): in w the first holds column 0, the second 1-3.
    PoolSpec q{.x = {1, 1, 4, 4}, .window = {3, 3}, .s = {2, 3}, .pre = {1, 2}, .post = {1, 2}};
    Tensor padded = run_pool(q, t, x);
    ASSERT_EQ(padded.size(), 4) << type_str(t);
    EXPECT_EQ(padded.get(0), 0.0) << type_str(t);    // rows 0-1, column 0: -0, +0 -> -0
    EXPECT_TRUE(std::signbit(padded.get(0))) << type_str(t);
    EXPECT_EQ(padded.get(1), 0.0) << type_str(t);    // rows 0-1, columns 1-3: +0 first
    EXPECT_FALSE(std::signbit(padded.get(1))) << type_str(t);
    EXPECT_EQ(padded.get(2), 0.0) << type_str(t);    // rows 1-3, column 0: +0 first
    EXPECT_FALSE(std::signbit(padded.get(2))) << type_str(t);
    EXPECT_TRUE(std::isnan(padded.get(3))) << type_str(t);  // rows 1-3, columns 2-3 hold the NaN
  }
}

// The channels-last kernel gives every element the packed kernel's value bit for bit (same taps
// in the same order, the same NaN / first-of-equal rule, the same double sums): every case and
// type on random data, and on data full of ties, signed zeros, -inf and NaNs; one channel and
// many (vector loops and their remainders). On a CPU with AVX-512 the float32 max pools run twice:
// compiled for it (the default) and as baseline code (TENSORACLE_POOL_NO_AVX512=1).
TEST(CpuConvPool, ChannelsLastMatchesThePackedKernelBitForBit) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#else
  const bool avx512 = false;
#endif
  if (!avx512) std::cout << "[   NOTE   ] no AVX-512 here: only the baseline channels-last kernel runs\n";
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  // Each element's value bit for bit (as an exact double: signed zeros apart), a NaN by its sign
  // where the maximum decides it (the first NaN of a window is kept); an average's NaN as NaN
  // (the sign of a sum of NaNs of both signs is the compiler's operand order, in either kernel).
  auto bits = [](const Tensor& t, bool averaged) {
    std::vector<std::uint64_t> v(static_cast<std::size_t>(t.size()));
    for (i64 i = 0; i < t.size(); ++i) {
      const double x = t.get(i);
      v[static_cast<std::size_t>(i)] = x != x ? (averaged ? 1 : std::signbit(x) ? 2 : 3) : std::bit_cast<std::uint64_t>(x);
    }
    return v;
  };
  // [N, C, S...] <-> [N, S..., C]: element (n, c, s) at (n * S + s) * C + c.
  auto to_cl = [](const Tensor& x, bool back) {
    Tensor y(x.type, x.dims);
    const i64 N = x.dims[0], C = x.dims[1], S = x.dims.volume() / std::max<i64>(1, N * C);
    for (i64 n = 0; n < N; ++n)
      for (i64 c = 0; c < C; ++c)
        for (i64 sp = 0; sp < S; ++sp) {
          const i64 packed = (n * C + c) * S + sp, cl = (n * S + sp) * C + c;
          y.set(back ? packed : cl, x.get(back ? cl : packed));
        }
    return y;
  };
  struct Baseline {
    explicit Baseline(bool on) {
      if (on) setenv("TENSORACLE_POOL_NO_AVX512", "1", 1);
    }
    ~Baseline() { unsetenv("TENSORACLE_POOL_NO_AVX512"); }
  };
  for (bool baseline : {false, true})
    for (DataType t : kTypes)
      for (const auto& base : pool_cases())
        for (i64 channels : {i64{1}, i64{19}, i64{64}})
          for (int data = 0; data < 2; ++data) {
            if (baseline && (!avx512 || t != kF32 || base.spec.type != PoolingType::kMAX)) continue;
            const Baseline env(baseline);
            PoolCase c = base;
            c.spec.x[1] = channels;
            std::mt19937 rng(11);
            Tensor x = random_tensor(t, c.spec.x, rng, -2.0, 2.0);
            if (data == 1) {
              // (NaNs of both signs: the first NaN of a window is the one kept)
              const double specials[] = {0.0, -0.0, 1.0, 1.0, -inf, nan, 2.0, -0.0, -nan};
              for (i64 i = 0; i < x.size(); ++i) x.set(i, specials[static_cast<std::size_t>(rng() % 9)]);
            }
            const Tensor packed = run_pool(c.spec, t, x);
            PoolingParams p;
            p.type = c.spec.type;
            p.window = dims_of(c.spec.window);
            if (!c.spec.s.empty()) p.stride = dims_of(c.spec.s);
            if (!c.spec.pre.empty()) p.pre_padding = dims_of(c.spec.pre);
            if (!c.spec.post.empty()) p.post_padding = dims_of(c.spec.post);
            p.padding_mode = c.spec.mode;
            p.average_count_excludes_padding = c.spec.excludes_padding;
            p.blend_factor = c.spec.blend;
            Tensor xcl = to_cl(x, false);
            Tensor ocl(t, packed.dims);
            cpu::pooling_channels_last(p, xcl.ref(), ocl.ref());
            ASSERT_TRUE(ocl.intact()) << c.name;
            const bool averaged = c.spec.type != PoolingType::kMAX;
            EXPECT_EQ(bits(to_cl(ocl, true), averaged), bits(packed, averaged))
                << c.name << " " << type_str(t) << ", " << channels << " channels, " << (data ? "special" : "random")
                << " data" << (baseline ? ", baseline code" : "");
          }
}

TEST(CpuConvPool, RejectsWrongOutput) {
  Tensor x(kF32, Dims{1, 1, 6, 6});
  PoolingParams p;
  p.window = Dims{2, 2};
  p.stride = Dims{2, 2};
  Tensor ok(kF32, Dims{1, 1, 3, 3});
  EXPECT_NO_THROW(cpu::pooling(p, x.ref(), ok.ref()));
  Tensor bad(kF32, Dims{1, 1, 3, 2});
  EXPECT_THROW(cpu::pooling(p, x.ref(), bad.ref()), InvalidArgument);
  Tensor bad_type(kF16, Dims{1, 1, 3, 3});
  EXPECT_THROW(cpu::pooling(p, x.ref(), bad_type.ref()), InvalidArgument);
}

}  // namespace
