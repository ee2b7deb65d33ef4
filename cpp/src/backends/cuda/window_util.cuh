// Internal to the CUDA backend: what its convolution and deconvolution share (ops/convolution.cu,
// deconvolution.cu; the float dispatch, grid loop and constants also ops/einsum.cu): the CPU's
// Geo and shape checks, index-type dispatch, StridedGemm (strided-batched cuBLASLt GEMMs) and the
// bias fill kernel. Defined in window_util.cu where not templates or inline.
//
// Semantics of the CPU kernels (backends/cpu/ops/convolution.cpp, deconvolution.cpp, einsum.cpp):
// the same checks and messages ("[cuda] convolution: ..."), float32 / float16 / bfloat16, float32
// products and sums, the bias added in float32 and one rounding to the output type.
//
// Index arithmetic: kernels take their index type I as a template parameter: uint32 when every
// index and geometry value of the launch is small (the usual case: 32-bit divisions are several
// times cheaper), else int64. Everything is asynchronous on the caller's stream.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/common/window_geometry.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/gemm.h"
#include "graph/ops.h"
#include "tensoracle/errors.h"

namespace tensoracle::cuda::window {

using dev::blocks_for;
using dev::check_launch;
using dev::i64;
using dev::checked_volume;
using dev::fail;
using dev::num;
using dev::tn;
using dev::kThreads;
using u32 = std::uint32_t;

constexpr int kS = backends::common::kWindowSpatial;  // normalized spatial rank
constexpr i64 kSmall = i64{1} << 31;       // indices below this may use 32-bit arithmetic
constexpr i64 kSmallGeo = i64{1} << 28;    // geometry values below this keep int coordinates exact
constexpr i64 kMaxBatch = 65535;           // images per batched GEMM
constexpr std::size_t kAlign = 256;

using dev::is_float_type;

inline void check_float(const TensorRef& t, const char* kernel, const char* name) {
  backends::common::check_float(dev::kFail, t, kernel, name);
}

bool all_small(std::initializer_list<i64> v);

// Calls f(I{}) with the index type: 32-bit when `small`, else 64-bit.
template <class F>
void by_index(bool small, F&& f) {
  if (small) f(u32{});
  else f(i64{});
}

// Calls f(Tag{}) for float32, float16 or bfloat16 (the caller has checked the type).
template <class F>
void by_float(DataType t, F&& f) {
  switch (t) {
    case DataType::kHALF: f(dev::F16{}); break;
    case DataType::kBF16: f(dev::BF16{}); break;
    default: f(dev::F32{}); break;
  }
}

std::byte* align_up(std::byte* p);

template <class T>
T* offset(T* p, i64 elements) {
  return p + elements;
}

// ---- strided-batched cuBLASLt GEMM -----------------------------------------------------------

// The largest power of two (up to 256) that divides `x` (256 for 0).
std::uint32_t alignment_of(std::uint64_t x);

cudaDataType_t lt_type(DataType t);

// ---- geometry ----------------------------------------------------------------------------------

// A (de)convolution's sizes, normalized to 3 spatial dims (backends/common/window_geometry.h).
// Passed to kernels by value.
using Geo = backends::common::WindowGeo;

// Every geometry value small enough for int coordinates (products of two stay below 2^31 only
// where the kernels form them: index * stride + tap * dilation).
bool geo_small(const Geo& g);

// A convolution's or deconvolution's (transposed) rank and shape-rule checks, then the geometry
// (backends/common/window_geometry.h). `kernel` null: sizing only.
template <class P>
Geo window_geo(const P& p, const TensorRef& x, const TensorRef& out, const graph::TensorDesc* kernel,
               const graph::TensorDesc* bias, const char* name, bool transposed) {
  return backends::common::conv_geo(dev::kFail, p, x, out, kernel, bias, name, transposed);
}

// ---- kernels -------------------------------------------------------------------------------

#define CONV_GRID_LOOP(I, i, n) \
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += static_cast<I>(gridDim.x) * blockDim.x)

// Signed coordinate type matching the index type: int with 32-bit indices, else int64.
template <class I>
using Coord = std::conditional_t<std::is_same_v<I, u32>, int, i64>;

// out (N, K, P) = the bias (zero without one), rounded: a (de)convolution without input
// channels.
template <class Tag, class I>
__global__ void __launch_bounds__(kThreads)
    bias_fill_kernel(typename Tag::T* __restrict__ out, const typename Tag::T* __restrict__ bias, I total, I P, I K) {
  CONV_GRID_LOOP(I, l, total) out[l] = Tag::store(bias ? Tag::load(bias[(l / P) % K]) : 0.f);
}

}  // namespace tensoracle::cuda::window

namespace tensoracle::cuda {

// What StridedGemm's code names (window_util.cuh, device_util.cuh).
using dev::i64;
using dev::num;
using dev::tn;
using window::alignment_of;
using window::lt_type;

// Strided-batched GEMMs through cuBLASLt (CUBLAS_COMPUTE_32F, float32 scale: float32 operands
// never use TF32; float16/bfloat16 operands accumulate in float32), with any leading dimensions
// and a float32 result for 16-bit operands — what cuda::Gemm's packed, single-type interface
// cannot express. Plans (descriptors and the heuristic's algorithm) are cached per shape and
// pointer alignment, as cuda::Gemm does. cuBLASLt is column-major: the row-major C = op(A) x B
// runs as C^T = B^T x op(A)^T, B's memory as cuBLASLt's "A" and A's as its "B".
class StridedGemm {
 public:
  // One GEMM shape, all row-major: for b < batch,
  //   C_b (M x N, leading dim ldc) = op(A_b) (M x K) x B_b (K x N, leading dim ldb)
  // where A_b is stored M x K (lda), or K x M (lda) when trans_a; X_b = X + b * stride_x
  // (elements). A and B have type `ab`, C float32 (c_float) or `ab`.
  struct Shape {
    bool trans_a = false;
    i64 M = 0, N = 0, K = 0;
    i64 lda = 0, ldb = 0, ldc = 0;
    i64 batch = 1;
    i64 stride_a = 0, stride_b = 0, stride_c = 0;
    DataType ab = DataType::kFLOAT;
    bool c_float = true;
  };

  StridedGemm(cublasLtHandle_t handle, std::string name) : handle_(handle), name_(std::move(name)) {}
  StridedGemm(const StridedGemm&) = delete;
  StridedGemm& operator=(const StridedGemm&) = delete;

  // `workspace` holds kGemmWorkspaceBytes (cuBLASLt's scratch). M, N, K >= 1.
  void run(const Shape& s, const void* a, const void* b, void* c, void* workspace, cudaStream_t stream) const {
    const Plan& plan = plan_for(s, a, b, c);
    const float alpha = 1.f, beta = 0.f;
    check_lt(cublasLtMatmul(handle_, plan.desc, &alpha, b, plan.la, a, plan.lb, &beta, c, plan.lc, c, plan.lc, &plan.algo,
                            workspace, kGemmWorkspaceBytes, stream),
             "node '" + name_ + "': matrix multiply");
  }

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    cublasLtMatmulAlgo_t algo{};
    ~Plan() {
      if (la) cublasLtMatrixLayoutDestroy(la);
      if (lb) cublasLtMatrixLayoutDestroy(lb);
      if (lc) cublasLtMatrixLayoutDestroy(lc);
      if (desc) cublasLtMatmulDescDestroy(desc);
    }
  };

  const Plan& plan_for(const Shape& s, const void* a, const void* b, const void* c) const {
    const auto addr = [](const void* p) { return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p)); };
    const std::uint64_t es_ab = element_size(s.ab), es_c = s.c_float ? 4 : es_ab;
    // What every batch's pointer guarantees: the base's alignment and the batch stride's.
    auto align = [&](const void* p, i64 stride, std::uint64_t es) {
      std::uint32_t al = alignment_of(addr(p));
      if (s.batch > 1) al = std::min(al, alignment_of(static_cast<std::uint64_t>(stride) * es));
      return al;
    };
    const std::uint32_t al_a = align(b, s.stride_b, es_ab);  // cuBLASLt's A: our B
    const std::uint32_t al_b = align(a, s.stride_a, es_ab);  // cuBLASLt's B: our A
    const std::uint32_t al_c = align(c, s.stride_c, es_c);
    const std::vector<i64> key{s.trans_a, s.M,        s.N,        s.K,        s.lda,  s.ldb,  s.ldc,
                               s.batch,   s.stride_a, s.stride_b, s.stride_c, static_cast<i64>(s.ab),
                               s.c_float, al_a,       al_b,       al_c};
    std::lock_guard lock(mutex_);
    if (auto it = plans_.find(key); it != plans_.end()) return *it->second;

    auto plan = std::make_unique<Plan>();
    const std::string where = "node '" + name_ + "'";
    const cudaDataType_t tab = lt_type(s.ab), tc = s.c_float ? CUDA_R_32F : tab;
    check_lt(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), where + ": matmul descriptor");
    const cublasOperation_t ta = CUBLAS_OP_N, tb = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    check_lt(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), where + ": TRANSA");
    check_lt(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), where + ": TRANSB");
    // Column-major stored shapes (rows x cols, leading dimension):
    //   cuBLASLt A = our B: N x K (ldb);  B = our A: K x M (lda), or M x K (lda) transposed;
    //   C = D = our C: N x M (ldc).
    const auto u = [](i64 v) { return static_cast<std::uint64_t>(v); };
    check_lt(cublasLtMatrixLayoutCreate(&plan->la, tab, u(s.N), u(s.K), s.ldb), where + ": layout of B");
    check_lt(cublasLtMatrixLayoutCreate(&plan->lb, tab, u(s.trans_a ? s.M : s.K), u(s.trans_a ? s.K : s.M), s.lda),
             where + ": layout of A");
    check_lt(cublasLtMatrixLayoutCreate(&plan->lc, tc, u(s.N), u(s.M), s.ldc), where + ": layout of C");
    if (s.batch > 1) {
      const int count = static_cast<int>(s.batch);
      const std::pair<cublasLtMatrixLayout_t, i64> layouts[] = {{plan->la, s.stride_b}, {plan->lb, s.stride_a}, {plan->lc, s.stride_c}};
      for (const auto& [layout, stride] : layouts) {
        check_lt(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
                 where + ": BATCH_COUNT");
        check_lt(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
                 where + ": STRIDED_BATCH_OFFSET");
      }
    }
    cublasLtMatmulPreference_t pref = nullptr;
    check_lt(cublasLtMatmulPreferenceCreate(&pref), where + ": preference");
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const std::uint64_t ws = kGemmWorkspaceBytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof al_c);
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->la, plan->lb, plan->lc, plan->lc, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    check_lt(st, where + ": choosing a GEMM algorithm");
    if (found == 0)
      throw Error("[cuda] " + where + ": cuBLASLt has no algorithm for this matrix multiply (" + tn(s.ab) +
                  (s.c_float ? " to float32" : "") + ", M=" + num(s.M) + " N=" + num(s.N) + " K=" + num(s.K) +
                  " batch=" + num(s.batch) + ")");
    plan->algo = result.algo;
    return *plans_.emplace(key, std::move(plan)).first->second;
  }

  cublasLtHandle_t handle_;
  std::string name_;
  mutable std::mutex mutex_;
  mutable std::map<std::vector<i64>, std::unique_ptr<Plan>> plans_;
};

}  // namespace tensoracle::cuda
