// The CUDA backend's softmax (kernels.h), bit-identical steps to the CPU's
// (backends/cpu/ops/softmax.cpp): exp_nonpositive with every operation rounded on its own,
// the row sum in double.
#include <cstdint>
#include <string>

#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/op_kernel.h"
#include "backends/cuda/reduce_util.cuh"
#include "graph/ops.h"

namespace tensoracle::cuda {

namespace {

using namespace reduction;  // reduce_util.cuh

// ---- softmax -----------------------------------------------------------------------------

// e^z for z <= 0 (and NaN): the CPU's exp_nonpositive (kernels_util.h) step for step,
// every operation rounded on its own (no FMA), so the results are bit-identical. (The CPU
// selects +0 below -104 rather than clamping to -110, to spare x86 its underflow assists; both
// give +0 there. GPUs handle subnormals at full speed.)
__device__ inline float exp_nonpositive(float z) {
  z = z < -110.0f ? -110.0f : z;  // e^-110 is below half the smallest subnormal; NaN passes
  constexpr float kShift = 12582912.0f;  // 1.5 * 2^23
  const float t = __fadd_rn(__fmul_rn(z, 1.44269504088896341f), kShift);
  const float n = __fsub_rn(t, kShift);  // round(z / ln2)
  const std::int32_t ni = __float_as_int(t) - __float_as_int(kShift);
  const float r = __fsub_rn(__fsub_rn(z, __fmul_rn(n, 0.693145751953125f)), __fmul_rn(n, 1.42860682030941723212e-6f));
  float q = 1.0f / 5040.0f;
  q = __fadd_rn(__fmul_rn(q, r), 1.0f / 720.0f);
  q = __fadd_rn(__fmul_rn(q, r), 1.0f / 120.0f);
  q = __fadd_rn(__fmul_rn(q, r), 1.0f / 24.0f);
  q = __fadd_rn(__fmul_rn(q, r), 1.0f / 6.0f);
  q = __fadd_rn(__fmul_rn(q, r), 0.5f);
  q = __fadd_rn(__fmul_rn(q, r), 1.0f);
  q = __fadd_rn(__fmul_rn(q, r), 1.0f);
  const std::int32_t n1 = ni / 2, n2 = ni - n1;  // 2^n1, 2^n2 normal
  const float s1 = __uint_as_float(static_cast<std::uint32_t>(n1 + 127) << 23);
  const float s2 = __uint_as_float(static_cast<std::uint32_t>(n2 + 127) << 23);
  return __fmul_rn(__fmul_rn(q, s1), s2);
}

// Per row: m = max (NaN if any), s = sum of e^(x - m) in double, y = e^(x - m) * (1 / s).
template <class Team, class Tag>
__global__ void __launch_bounds__(kMaxBlock) softmax_kernel(Plan p, const typename Tag::T* __restrict__ x,
                                                            typename Tag::T* __restrict__ out) {
  __shared__ alignas(8) unsigned char scratch_raw[kScratch * 8];
  const i64 units = units_of<Team>(p);
  if constexpr (Team::kCached) {
    if (cached_rows<Team>(p)) {  // the same operations in the same order, each element read once
      const i64 rank = Team::rank(), size = Team::size();
      for (i64 u = Team::first(); u < units; u += Team::step()) {
        i64 o;
        const bool active = output_of<Team>(p, u, o);
        const i64 base = base_of(p, o);
        float v[kCache];
        float m = -INFINITY;
#pragma unroll
        for (int j = 0; j < kCache; ++j) {
          const i64 i = rank + j * size;
          v[j] = active && i < p.rin ? Tag::load(x[base + i]) : -INFINITY;
          m = MaxNan{}(m, v[j]);
        }
        m = Team::reduce(m, MaxNan{}, reinterpret_cast<float*>(scratch_raw));
        double s = 0.0;
#pragma unroll
        for (int j = 0; j < kCache; ++j)
          if (active && rank + j * size < p.rin) {
            v[j] = exp_nonpositive(__fsub_rn(v[j], m));
            s = __dadd_rn(s, static_cast<double>(v[j]));
          }
        s = Team::reduce(s, AddD{}, reinterpret_cast<double*>(scratch_raw));
        const double inv = __ddiv_rn(1.0, s);
#pragma unroll
        for (int j = 0; j < kCache; ++j) {
          const i64 i = rank + j * size;
          if (active && i < p.rin) out[base + i] = store_d<Tag>(__dmul_rn(static_cast<double>(v[j]), inv));
        }
      }
      return;
    }
  }
  for (i64 u = Team::first(); u < units; u += Team::step()) {
    i64 o;
    const bool active = output_of<Team>(p, u, o);
    float m = -INFINITY;
    if (active) for_each_reduced<Team>(p, o, [&](i64 off) { m = MaxNan{}(m, Tag::load(x[off])); });
    m = Team::reduce(m, MaxNan{}, reinterpret_cast<float*>(scratch_raw));
    double s = 0.0;
    if (active)
      for_each_reduced<Team>(p, o, [&](i64 off) {
        s = __dadd_rn(s, static_cast<double>(exp_nonpositive(__fsub_rn(Tag::load(x[off]), m))));
      });
    s = Team::reduce(s, AddD{}, reinterpret_cast<double*>(scratch_raw));
    const double inv = __ddiv_rn(1.0, s);
    if (active)
      for_each_reduced<Team>(p, o, [&](i64 off) {
        const double e = static_cast<double>(exp_nonpositive(__fsub_rn(Tag::load(x[off]), m)));
        out[off] = store_d<Tag>(__dmul_rn(e, inv));
      });
  }
}

}  // namespace

void softmax(int axis, const TensorRef& x, const TensorRef& out, cudaStream_t stream) {
  const i64 n = checked_volume(x, "softmax", "the input");
  checked_volume(out, "softmax", "the output");
  const int rank = x.dims.rank();
  if (axis < 0 || axis >= rank)
    fail("softmax: axis " + std::to_string(axis) + " is out of range for the input " + x.dims.str());
  if (out.type != x.type || !(out.dims == x.dims))
    fail("softmax: the output " + desc(out) + " differs from the input " + desc(x));
  const bool ok = with_float3(x.type, [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::T;
    if (n == 0) return;
    i64 dims[Dims::kMaxRank];
    bool red[Dims::kMaxRank];
    for (int d = 0; d < rank; ++d) {
      dims[d] = x.dims[d];
      red[d] = d == axis;
    }
    const Plan plan = make_plan(rank, dims, red);
    const auto* xp = static_cast<const T*>(x.data);
    auto* op = static_cast<T*>(out.data);
    launch_teams(plan, [&](auto team, dim3 grid, dim3 block) {
      softmax_kernel<decltype(team), Tag><<<grid, block, 0, stream>>>(plan, xp, op);
    });
    dev::check_launch("softmax");
  });
  if (!ok) fail("softmax takes float32, float16 or bfloat16, not " + tn(x.type));
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kSoftmaxKernel = {LayerType::kSOFTMAX, nullptr, nullptr, [](const OpCall& c) {
      softmax(graph::softmax_axis(std::get<SoftmaxParams>(c.node.params), c.in[0].dims.rank()), ref(c.in[0]), ref(c.out),
              c.stream);
    }};

}  // namespace ops

}  // namespace tensoracle::cuda
