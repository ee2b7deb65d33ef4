// The CUDA backend's einsum (conv.h: EinsumKernel) with TensorRT's semantics and the CPU's plan
// (backends/cpu/ops/einsum.cpp): a permute-and-reduce kernel, and two inputs as a batched GEMM
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
#include <span>
#include <string>
#include <vector>

#include "backends/cuda/conv.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels.h"
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

// One operand as a strided view over its distinct letters (a repeated letter, as in "ii",
// reads the diagonal: its stride is the sum of the repeated positions' strides).
struct EinsumView {
  std::string letters;
  i64 stride[26] = {};
};

// The CPU's EinsumPlan, with the GPU's choice of what is read in place.
struct EinsumPlan {
  int inputs = 1;
  DataType type = DataType::kFLOAT;
  i64 size[26] = {};
  EinsumView view[2];
  std::string out;  // output letters
  // Two inputs: C[batch, M, N] = A[batch, M, K] x B[batch, K, N].
  std::string batch, mfree, nfree, kcon, sum_a, sum_b;
  i64 B = 1, M = 1, N = 1, K = 1;
  DataType gemm_type = DataType::kFLOAT;  // the operands' and the GEMM result's type
  bool a_direct = false, a_trans = false, b_direct = false, b_trans = false, c_direct = false;
  i64 wa = 0, wb = 0, wc = 0;  // workspace elements (gemm_type) per part
};

i64 letters_volume(const EinsumPlan& p, const std::string& ls) {
  i64 v = 1;
  for (char c : ls) v *= p.size[c - 'a'];
  return v;
}

bool contains(const std::string& s, char c) { return s.find(c) != std::string::npos; }

// True when the view, read in the letter order `seq`, is a contiguous row-major array.
bool is_contiguous(const EinsumPlan& p, const EinsumView& v, const std::string& seq) {
  i64 expected = 1;
  for (auto it = seq.rbegin(); it != seq.rend(); ++it) {
    const i64 n = p.size[*it - 'a'];
    if (n == 1) continue;
    if (v.stride[*it - 'a'] != expected) return false;
    expected *= n;
  }
  return true;
}

void row_major_strides(const Dims& d, i64* s) {
  i64 acc = 1;
  for (int k = d.rank() - 1; k >= 0; --k) {
    s[k] = acc;
    acc *= d[k];
  }
}

std::size_t round_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

EinsumPlan plan_einsum(const EinsumParams& params, std::span<const TensorRef> inputs, const TensorRef& out) {
  if (inputs.size() < 1 || inputs.size() > 2)
    fail("einsum: takes one or two inputs, got " + std::to_string(inputs.size()));
  graph::EinsumSpec spec;
  try {
    spec = graph::parse_einsum(params.equation, inputs.size());
  } catch (const InvalidArgument& e) {
    fail(std::string("einsum: ") + e.what());
  }
  EinsumPlan p;
  p.inputs = static_cast<int>(inputs.size());
  for (auto& s : p.size) s = -1;
  const DataType type = inputs[0].type;
  p.type = type;
  if (!is_float_type(type)) fail("einsum: input 0 has type " + tn(type) + "; einsum takes float32, float16 or bfloat16");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const TensorRef& t = inputs[i];
    const std::string& ls = spec.operands[i];
    if (t.type != type)
      fail("einsum: input " + std::to_string(i) + " has type " + tn(t.type) + "; input 0 has " + tn(type));
    if (!t.dims.all_known()) fail("einsum: input " + std::to_string(i) + " has unknown dims " + t.dims.str());
    if (static_cast<int>(ls.size()) != t.dims.rank())
      fail("einsum: operand '" + ls + "' has " + std::to_string(ls.size()) + " letters but input " + std::to_string(i) +
           " has dims " + t.dims.str());
    i64 st[kMaxRank];
    row_major_strides(t.dims, st);
    EinsumView& v = p.view[i];
    for (std::size_t k = 0; k < ls.size(); ++k) {
      const int c = ls[k] - 'a';
      const i64 d = t.dims[static_cast<int>(k)];
      if (p.size[c] < 0) p.size[c] = d;
      else if (p.size[c] != d)
        fail("einsum: letter '" + std::string(1, ls[k]) + "' of '" + params.equation + "' has sizes " + num(p.size[c]) +
             " and " + num(d));
      if (!contains(v.letters, ls[k])) v.letters += ls[k];
      v.stride[c] += st[k];
    }
  }
  p.out = spec.output;
  std::vector<i64> od;
  for (char c : p.out) od.push_back(p.size[c - 'a']);
  const Dims expected{std::span<const i64>(od)};
  if (out.type != type || !(out.dims == expected))
    fail("einsum: the output is " + tn(out.type) + out.dims.str() + "; '" + params.equation + "' gives " + tn(type) +
         expected.str());
  if (p.inputs == 1) return p;

  const std::string& la = p.view[0].letters;
  const std::string& lb = p.view[1].letters;
  for (char c : p.out) {
    const bool a = contains(la, c), b = contains(lb, c);
    if (a && b) p.batch += c;
    else if (a) p.mfree += c;
    else p.nfree += c;
  }
  for (char c : la) {
    if (contains(p.out, c)) continue;
    if (contains(lb, c)) p.kcon += c;
    else p.sum_a += c;
  }
  for (char c : lb)
    if (!contains(p.out, c) && !contains(la, c)) p.sum_b += c;
  p.B = letters_volume(p, p.batch);
  p.M = letters_volume(p, p.mfree);
  p.N = letters_volume(p, p.nfree);
  p.K = letters_volume(p, p.kcon);
  // A reduced operand holds float32 sums: then the GEMM is float32 throughout (the CPU's GEMM
  // always is); else it runs in the input type, whose values float32 holds exactly, with the
  // same float32 accumulation and one rounding of the result.
  p.gemm_type = (p.sum_a.empty() && p.sum_b.empty()) ? type : DataType::kFLOAT;
  if (p.gemm_type == type) {
    if (p.sum_a.empty()) {
      if (is_contiguous(p, p.view[0], p.batch + p.mfree + p.kcon)) p.a_direct = true;
      else if (is_contiguous(p, p.view[0], p.batch + p.kcon + p.mfree)) p.a_direct = p.a_trans = true;
    }
    if (p.sum_b.empty()) {
      if (is_contiguous(p, p.view[1], p.batch + p.kcon + p.nfree)) p.b_direct = true;
      else if (is_contiguous(p, p.view[1], p.batch + p.nfree + p.kcon)) p.b_direct = p.b_trans = true;
    }
    // The output in the order of C: its own strides, read in C's letter order.
    EinsumView ov;
    i64 st[kMaxRank];
    row_major_strides(out.dims, st);
    for (std::size_t k = 0; k < p.out.size(); ++k) ov.stride[p.out[k] - 'a'] = st[k];
    p.c_direct = is_contiguous(p, ov, p.batch + p.mfree + p.nfree);
  }
  if (!p.a_direct) p.wa = p.B * p.M * p.K;
  if (!p.b_direct) p.wb = p.B * p.K * p.N;
  if (!p.c_direct) p.wc = p.B * p.M * p.N;
  return p;
}

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
  return einsum_layout(plan_einsum(params_, inputs, out)).total;
}

void EinsumKernel::run(std::span<const TensorRef> inputs, const TensorRef& out, void* workspace, cudaStream_t stream) const {
  for (std::size_t i = 0; i < inputs.size(); ++i)
    checked_volume(inputs[i], "einsum", ("input " + std::to_string(i)).c_str());
  const i64 n = checked_volume(out, "einsum", "the output");
  const EinsumPlan plan = plan_einsum(params_, inputs, out);
  if (n == 0) return;
  const DataType type = out.type;
  if (plan.inputs == 1) {
    std::string reduced;
    for (char c : plan.view[0].letters)
      if (!contains(plan.out, c)) reduced += c;
    permute_reduce(inputs[0].data, type, plan.out, plan.view[0].stride, reduced, plan, out.data, type, stream);
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
  i64 s = 1;
  const std::string seq = plan.batch + plan.mfree + plan.nfree;
  for (auto it = seq.rbegin(); it != seq.rend(); ++it) {
    cstride[*it - 'a'] = s;
    s *= plan.size[*it - 'a'];
  }
  permute_reduce(C, gt, plan.out, cstride, "", plan, out.data, type, stream);
}

}  // namespace tensoracle::cuda
