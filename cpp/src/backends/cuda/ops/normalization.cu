// The CUDA backend's normalization (kernels.h) with the CPU's semantics
// (backends/cpu/ops/normalization.cpp): per statistics set mean and 1 / sqrt(var + eps) in
// double, then y = (x - mean) * rstd * scale + bias in float, rounded once.
#include <cstdint>
#include <string>

#include "backends/cuda/device_util.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/op_kernel.h"
#include "backends/cuda/reduce_util.cuh"

namespace tensoracle::cuda {

namespace {

using namespace reduction;  // reduce_util.cuh

// A float scale/bias element of any float type (validated on the host).
__device__ inline float load_any_float(const void* p, DataType t, i64 i) {
  switch (t) {
    case DataType::kHALF: return __half2float(static_cast<const __half*>(p)[i]);
    case DataType::kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

// ---- normalization -----------------------------------------------------------------------

// Offsets of the scale and the bias over the input's dims (0 where they broadcast), with
// dims of size 1 dropped and dims merged where both tensors allow it.
struct Bcast {
  int rank = 0;
  i64 d[Dims::kMaxRank] = {}, ss[Dims::kMaxRank] = {}, bs[Dims::kMaxRank] = {};
};

__device__ inline void bcast_offsets(const Bcast& b, i64 lin, i64& so, i64& bo) {
  so = 0;
  bo = 0;
  for (int k = b.rank - 1; k >= 0; --k) {
    const i64 idx = lin % b.d[k];
    lin /= b.d[k];
    so += idx * b.ss[k];
    bo += idx * b.bs[k];
  }
}

// Longest row whose weights norm_kernel stages in shared memory (2 x 8 KiB).
constexpr int kStagedRow = 2048;

struct NormArgs {
  const void* scale;
  const void* bias;
  DataType scale_type, bias_type;
  Bcast bc;
  double inv_count, eps;
  // Scale and bias that vary along each output's contiguous elements only (a LayerNorm's
  // (1, .., H) weights): their offsets are the position in the row times these strides.
  bool row = false;
  i64 row_ss = 0, row_bs = 0;
};

// The scale's and the bias's offsets for element `off`, `in_row` its position in its output's
// elements: without divisions for the common layouts.
__device__ inline void norm_offsets(const NormArgs& a, i64 off, i64 in_row, i64& so, i64& bo) {
  if (a.row) {
    so = in_row * a.row_ss;
    bo = in_row * a.row_bs;
  } else if (a.bc.rank == 1) {
    so = off * a.bc.ss[0];
    bo = off * a.bc.bs[0];
  } else {
    bcast_offsets(a.bc, off, so, bo);
  }
}

// Per statistics set: mean and 1 / sqrt(var + eps) in double (two passes), rounded to float;
// then y = (x - mean) * rstd * scale + bias in float, rounded once to the output.
template <class Team, class Tag>
__global__ void __launch_bounds__(kMaxBlock) norm_kernel(Plan p, NormArgs a, const typename Tag::T* __restrict__ x,
                                                         typename Tag::T* __restrict__ out) {
  __shared__ alignas(8) unsigned char scratch_raw[kScratch * 8];
  double* scratch = reinterpret_cast<double*>(scratch_raw);
  const i64 units = units_of<Team>(p);
  // Row weights (a LayerNorm's scale and bias, the same for every row) staged once per block
  // as floats: each output element then reads them from shared memory, with no type switch
  // and no global load after the statistics.
  __shared__ float staged_w[Team::kColumns ? 1 : 2 * kStagedRow];
  const bool staged = !Team::kColumns && a.row && p.rin <= kStagedRow;
  if (staged) {
    const int threads = static_cast<int>(blockDim.x * blockDim.y);
    for (int i = static_cast<int>(threadIdx.y * blockDim.x + threadIdx.x); i < p.rin; i += threads) {
      staged_w[i] = load_any_float(a.scale, a.scale_type, i * a.row_ss);
      staged_w[kStagedRow + i] = load_any_float(a.bias, a.bias_type, i * a.row_bs);
    }
    __syncthreads();
  }
  // The scale and the bias for element `off`, `in_row` its position in its output's elements:
  // from the stage, from global memory, or whichever applies.
  auto from_stage = [&](i64, i64 in_row, float& sc, float& bi) {
    sc = staged_w[in_row];
    bi = staged_w[kStagedRow + in_row];
  };
  auto from_global = [&](i64 off, i64 in_row, float& sc, float& bi) {
    i64 so, bo;
    norm_offsets(a, off, in_row, so, bo);
    sc = load_any_float(a.scale, a.scale_type, so);
    bi = load_any_float(a.bias, a.bias_type, bo);
  };
  auto weights = [&](i64 off, i64 in_row, float& sc, float& bi) {
    if (staged) from_stage(off, in_row, sc, bi);
    else from_global(off, in_row, sc, bi);
  };
  if constexpr (Team::kCached) {
    if (cached_rows<Team>(p)) {  // the same operations in the same order, each element read once
      const i64 rank = Team::rank(), size = Team::size();
      for (i64 u = Team::first(); u < units; u += Team::step()) {
        i64 o;
        const bool active = output_of<Team>(p, u, o);
        const i64 base = base_of(p, o);
        float v[kCache];
        double sum = 0.0;
#pragma unroll
        for (int j = 0; j < kCache; ++j) {
          const i64 i = rank + j * size;
          v[j] = active && i < p.rin ? Tag::load(x[base + i]) : 0.f;
          if (active && i < p.rin) sum = __dadd_rn(sum, static_cast<double>(v[j]));
        }
        sum = Team::reduce(sum, AddD{}, scratch);
        const double mu = __dmul_rn(sum, a.inv_count);
        double sq = 0.0;
#pragma unroll
        for (int j = 0; j < kCache; ++j)
          if (active && rank + j * size < p.rin) {
            const double d = __dsub_rn(static_cast<double>(v[j]), mu);
            sq = __dadd_rn(sq, __dmul_rn(d, d));
          }
        sq = Team::reduce(sq, AddD{}, scratch);
        const float mean = __double2float_rn(mu);
        const float rstd = __double2float_rn(__ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(__dmul_rn(sq, a.inv_count), a.eps))));
        auto write = [&](auto weights_of) {  // unswitched: the staged loop has no global loads
#pragma unroll
          for (int j = 0; j < kCache; ++j) {
            const i64 i = rank + j * size;
            if (!active || i >= p.rin) continue;
            float sc, bi;
            weights_of(base + i, i, sc, bi);
            out[base + i] = Tag::store(__fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(v[j], mean), rstd), sc), bi));
          }
        };
        if (staged) write(from_stage);
        else write(from_global);
      }
      return;
    }
  }
  for (i64 u = Team::first(); u < units; u += Team::step()) {
    i64 o;
    const bool active = output_of<Team>(p, u, o);
    double sum = 0.0;
    if (active) for_each_reduced<Team>(p, o, [&](i64 off) { sum = __dadd_rn(sum, static_cast<double>(Tag::load(x[off]))); });
    sum = Team::reduce(sum, AddD{}, scratch);
    const double mu = __dmul_rn(sum, a.inv_count);
    double sq = 0.0;
    if (active)
      for_each_reduced<Team>(p, o, [&](i64 off) {
        const double d = __dsub_rn(static_cast<double>(Tag::load(x[off])), mu);
        sq = __dadd_rn(sq, __dmul_rn(d, d));
      });
    sq = Team::reduce(sq, AddD{}, scratch);
    const float mean = __double2float_rn(mu);
    const float rstd = __double2float_rn(__ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(__dmul_rn(sq, a.inv_count), a.eps))));
    const i64 base = a.row ? base_of(p, o) : 0;
    if (active)
      for_each_reduced<Team>(p, o, [&](i64 off) {
        float sc, bi;
        weights(off, off - base, sc, bi);
        const float y = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(Tag::load(x[off]), mean), rstd), sc), bi);
        out[off] = Tag::store(y);
      });
  }
}

}  // namespace

void normalization(const NormalizationParams& p, const TensorRef& x, const TensorRef& scale, const TensorRef& bias,
                   const TensorRef& out, cudaStream_t stream) {
  const i64 n = backends::common::check_normalization(dev::kFail, p, x, out);
  const Dims& xd = x.dims;
  const int rank = xd.rank();
  const i64 groups = p.num_groups;
  i64 sst[Dims::kMaxRank] = {}, bst[Dims::kMaxRank] = {};
  backends::common::check_normalization_operand(dev::kFail, scale, xd, "the scale", sst);
  backends::common::check_normalization_operand(dev::kFail, bias, xd, "the bias", bst);
  const bool ok = with_float3(x.type, [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::T;
    if (n == 0) return;
    // The view: x's dims, with the channels split into (groups, channels per group) when
    // grouped; the channels per group are normalized over like the masked axes.
    int vr = 0;
    i64 vd[kMaxGroups];
    bool vred[kMaxGroups];
    for (int d = 0; d < rank; ++d) {
      if (groups > 1 && d == 1) {
        vd[vr] = groups, vred[vr] = false, ++vr;
        vd[vr] = xd[1] / groups, vred[vr] = true, ++vr;
      } else {
        vd[vr] = xd[d], vred[vr] = (p.axes >> d) & 1u, ++vr;
      }
    }
    const Plan plan = make_plan(vr, vd, vred);
    NormArgs a{};
    a.scale = scale.data;
    a.bias = bias.data;
    a.scale_type = scale.type;
    a.bias_type = bias.type;
    a.inv_count = 1.0 / static_cast<double>(plan.count);
    a.eps = static_cast<double>(p.epsilon);
    for (int d = 0; d < rank; ++d) {  // x's dims, merged where scale and bias allow
      const i64 s = xd[d];
      if (s == 1) continue;
      Bcast& b = a.bc;
      const int last = b.rank - 1;
      if (last >= 0 && b.ss[last] == sst[d] * s && b.bs[last] == bst[d] * s) {
        b.d[last] *= s;
        b.ss[last] = sst[d];
        b.bs[last] = bst[d];
      } else {
        b.d[b.rank] = s;
        b.ss[b.rank] = sst[d];
        b.bs[b.rank] = bst[d];
        ++b.rank;
      }
    }
    // Rows of contiguous elements (no reduced group but the innermost) whose length is the
    // innermost broadcast group's, the outer groups broadcasting scale and bias.
    const Bcast& b = a.bc;
    if (plan.nr == 0 && plan.kin == 1 && b.rank >= 2 && b.d[b.rank - 1] == plan.rin) {
      a.row = true;
      for (int g = 0; g + 1 < b.rank; ++g) a.row = a.row && b.ss[g] == 0 && b.bs[g] == 0;
      a.row_ss = b.ss[b.rank - 1];
      a.row_bs = b.bs[b.rank - 1];
    }
    const auto* xp = static_cast<const T*>(x.data);
    auto* op = static_cast<T*>(out.data);
    launch_teams(plan, [&](auto team, dim3 grid, dim3 block) {
      norm_kernel<decltype(team), Tag><<<grid, block, 0, stream>>>(plan, a, xp, op);
    });
    dev::check_launch("normalization");
  });
  if (!ok) fail("normalization takes float32, float16 or bfloat16, not " + tn(x.type));
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

extern const OpKernel kNormalizationKernel = {LayerType::kNORMALIZATION, nullptr, nullptr, [](const OpCall& c) {
      normalization(std::get<NormalizationParams>(c.node.params), ref(c.in[0]), ref(c.in[1]), ref(c.in[2]), ref(c.out),
                    c.stream);
    }};

}  // namespace ops

}  // namespace tensoracle::cuda
