// The CUDA backend's einsum (conv.h: EinsumKernel) with TensorRT's semantics and the plan it
// shares with the CPU (backends/common/einsum_plan.h): a permute-and-reduce kernel, and two inputs as a batched GEMM
// through cuda::Gemm.
//
// Einsum (TensorRT's semantics, the CPU's plan): one input is a permute-and-reduce kernel
//   (double accumulation, as the CPU). Two inputs lower to C[batch, M, N] = A[batch, M, K] x
//   B[batch, K, N] through cuda::Gemm: an operand is read in place when its layout already is
//   [batch, M, K] or [batch, K, M] (resp. B), else permuted (and reduced over the letters only
//   it has, in double) into the workspace; the GEMM result is the output when it has that
//   layout, else permuted into it. The GEMM runs in the input type (float32 accumulation, one
//   rounding) unless an operand was reduced: its float32 sums are then not values of the narrow
//   type, so both operands go to float32 (as the CPU, which always multiplies float32 matrices)
//   and the float32 result is rounded once when permuted into the output.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backends/common/einsum_plan.h"
#include "backends/cuda/conv.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/op_kernel.h"
#include "backends/cuda/window_util.cuh"
#include "graph/ops.h"
#include "tensoracle/errors.h"

namespace tensoracle::cuda {

namespace {

using namespace window;  // window_util.cuh

// ---- einsum kernels ------------------------------------------------------------------------

constexpr int kMaxRank = Dims::kMaxRank;

// dst (contiguous, dims dsize[0..nd)) = the sum over the reduced dims (rsize, rstride) of src
// read with strides sstride per destination dim (the CPU's permute_reduce).
struct PermuteArgs {
  int nd = 0, nr = 0;
  i64 dsize[kMaxRank] = {}, sstride[kMaxRank] = {}, rsize[kMaxRank] = {}, rstride[kMaxRank] = {};
  i64 rn = 1;  // product of rsize
};

__device__ __forceinline__ i64 permute_source(const PermuteArgs& a, i64 e) {
  i64 off = 0;
  for (int k = a.nd - 1; k >= 0; --k) {
    off += (e % a.dsize[k]) * a.sstride[k];
    e /= a.dsize[k];
  }
  return off;
}
__device__ __forceinline__ i64 reduce_offset(const PermuteArgs& a, i64 t) {
  i64 off = 0;
  for (int k = a.nr - 1; k >= 0; --k) {
    off += (t % a.rsize[k]) * a.rstride[k];
    t /= a.rsize[k];
  }
  return off;
}

// One thread per destination element; the reduction (if any) in double, sequentially in the
// CPU's order, rounded to float32 and then to the destination type (as the CPU's v = float(acc)).
template <class Src, class Dst>
__global__ void __launch_bounds__(kThreads)
    permute_reduce_kernel(const typename Src::T* __restrict__ src, typename Dst::T* __restrict__ dst, i64 n, PermuteArgs a) {
  CONV_GRID_LOOP(i64, e, n) {
    const i64 off = permute_source(a, e);
    float v;
    if (a.nr == 0) {
      v = Src::load(src[off]);
    } else {
      double acc = 0.0;
      // Odometer over the reduced dims (row-major), as the CPU.
      i64 ridx[kMaxRank] = {};
      i64 roff = 0;
      for (i64 t = 0; t < a.rn; ++t) {
        acc += static_cast<double>(Src::load(src[off + roff]));
        for (int k = a.nr - 1; k >= 0; --k) {
          roff += a.rstride[k];
          if (++ridx[k] < a.rsize[k]) break;
          roff -= ridx[k] * a.rstride[k];
          ridx[k] = 0;
        }
      }
      v = __double2float_rn(acc);
    }
    dst[e] = Dst::store(v);
  }
}

// Long reductions over few destination elements: one block per element (grid-stride over
// elements), threads split the reduction, partial sums in double combined in a fixed tree.
template <class Src, class Dst>
__global__ void __launch_bounds__(kThreads)
    permute_reduce_block_kernel(const typename Src::T* __restrict__ src, typename Dst::T* __restrict__ dst, i64 n,
                                PermuteArgs a) {
  __shared__ double part[kThreads];
  for (i64 e = blockIdx.x; e < n; e += gridDim.x) {
    const i64 off = permute_source(a, e);
    double acc = 0.0;
    for (i64 t = threadIdx.x; t < a.rn; t += blockDim.x) acc += static_cast<double>(Src::load(src[off + reduce_offset(a, t)]));
    part[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned w = kThreads / 2; w > 0; w /= 2) {
      if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
      __syncthreads();
    }
    if (threadIdx.x == 0) dst[e] = Dst::store(__double2float_rn(part[0]));
    __syncthreads();
  }
}

}  // namespace

// ---- einsum ------------------------------------------------------------------------------------

namespace {

using backends::common::EinsumPlan;

std::size_t round_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// The plan (backends/common/einsum_plan.h): the GEMM runs in the input type (float32
// accumulation, one rounding) unless an operand is reduced, then in float32 throughout.
constexpr auto kGemm = backends::common::EinsumGemm::kInputType;

// Workspace layout of a two-input einsum: cuBLASLt's scratch, then A, B and C as needed.
struct EinsumLayout {
  std::size_t a = 0, b = 0, c = 0, total = 0;  // byte offsets, total size
};

EinsumLayout einsum_layout(const EinsumPlan& p) {
  EinsumLayout l;
  if (p.inputs == 1) return l;
  const std::size_t es = element_size(p.gemm_type);
  l.a = kGemmWorkspaceBytes;
  l.b = l.a + round_up(static_cast<std::size_t>(p.wa) * es);
  l.c = l.b + round_up(static_cast<std::size_t>(p.wb) * es);
  l.total = l.c + round_up(static_cast<std::size_t>(p.wc) * es);
  return l;
}

// dst (gemm layout, contiguous in `dest_letters` order, type dt) = src (type st, read with
// `letter_stride`) summed over `reduce_letters` (the CPU's permute_reduce).
void permute_reduce(const void* src, DataType st, const std::string& dest_letters, const i64* letter_stride,
                    const std::string& reduce_letters, const EinsumPlan& p, void* dst, DataType dt, cudaStream_t stream) {
  if (dest_letters.size() > kMaxRank || reduce_letters.size() > kMaxRank)
    fail("einsum: more than " + std::to_string(kMaxRank) + " letters in one permutation");
  PermuteArgs a;
  a.nd = static_cast<int>(dest_letters.size());
  a.nr = static_cast<int>(reduce_letters.size());
  i64 n = 1;
  for (int k = 0; k < a.nd; ++k) {
    const int c = dest_letters[static_cast<std::size_t>(k)] - 'a';
    a.dsize[k] = p.size[c];
    a.sstride[k] = letter_stride[c];
    n *= a.dsize[k];
  }
  for (int k = 0; k < a.nr; ++k) {
    const int c = reduce_letters[static_cast<std::size_t>(k)] - 'a';
    a.rsize[k] = p.size[c];
    a.rstride[k] = letter_stride[c];
    a.rn *= a.rsize[k];
  }
  if (n == 0) return;
  // Long reductions into few elements: a block per element.
  const bool per_block = a.nr > 0 && a.rn >= 2048 && n <= 65536;
  by_float(st, [&](auto s) {
    by_float(dt, [&](auto d) {
      using Src = decltype(s);
      using Dst = decltype(d);
      const auto* in = static_cast<const typename Src::T*>(src);
      auto* o = static_cast<typename Dst::T*>(dst);
      if (per_block) {
        const unsigned blocks = static_cast<unsigned>(std::min<i64>(n, 65535 * 8));
        permute_reduce_block_kernel<Src, Dst><<<blocks, kThreads, 0, stream>>>(in, o, n, a);
      } else {
        permute_reduce_kernel<Src, Dst><<<blocks_for(n), kThreads, 0, stream>>>(in, o, n, a);
      }
    });
  });
  check_launch("einsum");
}

}  // namespace

EinsumKernel::EinsumKernel(cublasLtHandle_t handle, std::string node_name, EinsumParams p)
    : name_(std::move(node_name)), params_(std::move(p)) {
  using MO = MatrixOperation;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      gemm_[ta][tb] = std::make_unique<Gemm>(handle, name_,
                                             MatrixMultiplyParams{ta ? MO::kTRANSPOSE : MO::kNONE, tb ? MO::kTRANSPOSE : MO::kNONE},
                                             GemmEpilogue::kNONE);
}

EinsumKernel::~EinsumKernel() = default;

std::size_t EinsumKernel::workspace_bytes(std::span<const TensorRef> inputs, const TensorRef& out) const {
  // Sizing only: the buffers need not exist yet (the builder asks before allocating).
  return einsum_layout(backends::common::plan_einsum(dev::kFail, params_, inputs, out, kGemm)).total;
}

void EinsumKernel::run(std::span<const TensorRef> inputs, const TensorRef& out, void* workspace, cudaStream_t stream) const {
  i64 n = 0;
  const EinsumPlan plan = backends::common::check_einsum(dev::kFail, params_, inputs, out, kGemm, n);
  if (n == 0) return;
  const DataType type = out.type;
  if (plan.inputs == 1) {
    permute_reduce(inputs[0].data, type, plan.out, plan.view[0].stride, backends::common::einsum_reduced_letters(plan), plan,
                   out.data, type, stream);
    return;
  }
  const EinsumLayout l = einsum_layout(plan);
  if (l.total > 0 && workspace == nullptr)
    fail("einsum: '" + params_.equation + "' needs a workspace (EinsumKernel::workspace_bytes)");
  auto* ws = static_cast<std::byte*>(workspace);
  const DataType gt = plan.gemm_type;
  const void* A = inputs[0].data;
  const void* Bm = inputs[1].data;
  if (!plan.a_direct) {
    permute_reduce(inputs[0].data, type, plan.batch + plan.mfree + plan.kcon, plan.view[0].stride, plan.sum_a, plan, ws + l.a,
                   gt, stream);
    A = ws + l.a;
  }
  if (!plan.b_direct) {
    permute_reduce(inputs[1].data, type, plan.batch + plan.kcon + plan.nfree, plan.view[1].stride, plan.sum_b, plan, ws + l.b,
                   gt, stream);
    Bm = ws + l.b;
  }
  void* C = plan.c_direct ? out.data : static_cast<void*>(ws + l.c);
  const i64 M = plan.M, N = plan.N, K = plan.K;
  // cuda::Gemm on packed [B, ., .] operands (it clears C itself when K = 0).
  const TensorRef ta{const_cast<void*>(A), gt, plan.a_trans ? Dims{plan.B, K, M} : Dims{plan.B, M, K}};
  const TensorRef tb{const_cast<void*>(Bm), gt, plan.b_trans ? Dims{plan.B, N, K} : Dims{plan.B, K, N}};
  const TensorRef tc{C, gt, Dims{plan.B, M, N}};
  gemm_[plan.a_trans ? 1 : 0][plan.b_trans ? 1 : 0]->run(ta, tb, nullptr, tc, ws, stream);
  if (plan.c_direct) return;
  // C[batch, M, N] into the output's letter order, rounded to its type once.
  i64 cstride[26] = {};
  backends::common::einsum_c_strides(plan, cstride);
  permute_reduce(C, gt, plan.out, cstride, "", plan, out.data, type, stream);
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

namespace {

struct EinsumState final : OpState {
  std::unique_ptr<EinsumKernel> einsum;
};

OpPrepared prepare_einsum(const OpSetup& setup) {
  auto state = std::make_unique<EinsumState>();
  state->einsum = std::make_unique<EinsumKernel>(setup.lt, setup.node.name, std::get<EinsumParams>(setup.node.params));
  OpPrepared r;
  r.state = std::move(state);
  return r;
}

const EinsumKernel& einsum_of(const OpCall& c) { return *static_cast<const EinsumState&>(*c.state).einsum; }

}  // namespace

extern const OpKernel kEinsumKernel = {
    LayerType::kEINSUM, prepare_einsum,
    [](const OpCall& c) { return einsum_of(c).workspace_bytes(input_refs(c), ref(c.out)); },
    [](const OpCall& c) { einsum_of(c).run(input_refs(c), ref(c.out), c.workspace, c.stream); }};

}  // namespace ops

}  // namespace tensoracle::cuda
