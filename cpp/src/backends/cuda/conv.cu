// The CUDA backend's convolution, deconvolution (transposed convolution) and einsum (conv.h), with
// the semantics of the CPU kernels (backends/cpu/kernels_conv.cpp and kernels_index.cpp): the
// same checks and messages ("[cuda] convolution: ..."), float32 / float16 / bfloat16, float32
// products and sums, the bias added in float32 and one rounding to the output type.
//
// Convolution (NCHW-style, 1 to 3 spatial dims normalized to 3 as the CPU's Geo, groups,
// dilation, strides, every PaddingMode through graph::window_pre_padding):
//   - one input channel per group (depthwise, as the CPU's conv_depthwise): a direct kernel, one
//     thread per output element, bias first then the taps in (kd, kh, kw) order, in float32;
//   - otherwise im2col + GEMM: per chunk of images, `im2col_kernel` writes the columns
//     [image][group][C/g * kvol][positions] in the input's own type (a copy: exact), and per
//     group one strided-batched cuBLASLt GEMM over the chunk's images multiplies the group's
//     kernel [K/g, C/g * kvol] (batch stride 0) by them. An unpadded 1x1 stride-1 convolution
//     multiplies the input in place (no im2col). float32 GEMMs write the output directly (its
//     leading dimension is the image's positions, batch stride K * positions) and a pass adds
//     the bias; float16 / bfloat16 GEMMs write float32 results (cuBLASLt's mixed A/B 16-bit,
//     C/D float32 GEMM) into the workspace and one pass adds the bias and rounds once. When one
//     image's columns exceed kChunkBytes, that image is processed in tiles of output positions.
// Deconvolution: per chunk of images and per group, one strided-batched GEMM computes the
//   float32 columns col [K/g * kvol, input positions] = kernel_g^T [K/g * kvol, C/g] x x_g
//   [C/g, input positions] (as the CPU's deconv_gemm), then `col2im_kernel` gathers, for every
//   output element, the bias and each column entry that reaches it (in the CPU's order: kernel
//   taps ascending) in float32 and rounds once: a gather rather than the CPU's scatter, so no
//   atomics and a fixed order. When one image's columns exceed kChunkBytes, the GEMMs and the
//   gather run per block of output channels of one group (rows of the GEMM); when even one
//   channel's columns exceed it, per channel in tiles of input positions that accumulate into
//   a float32 plane (the output's own for float32), rounded once after the last tile.
// Einsum (TensorRT's semantics, the CPU's plan): one input is a permute-and-reduce kernel
//   (double accumulation, as the CPU). Two inputs lower to C[batch, M, N] = A[batch, M, K] x
//   B[batch, K, N] through cuda::Gemm: an operand is read in place when its layout already is
//   [batch, M, K] or [batch, K, M] (resp. B), else permuted (and reduced over the letters only
//   it has, in double) into the workspace; the GEMM result is the output when it has that
//   layout, else permuted into it. The GEMM runs in the input type (float32 accumulation, one
//   rounding) unless an operand was reduced: its float32 sums are then not values of the narrow
//   type, so both operands go to float32 (as the CPU, which always multiplies float32 matrices)
//   and the float32 result is rounded once when permuted into the output.
//
// Index arithmetic: kernels take their index type I as a template parameter: uint32 when every
// index and geometry value of the launch is small (the usual case: 32-bit divisions are several
// times cheaper), else int64. Everything is asynchronous on the caller's stream.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cuda/conv.h"
#include "backends/cuda/device_util.cuh"
#include "graph/ops.h"
#include "tensoracle/errors.h"

namespace tensoracle::cuda {

namespace {

using dev::blocks_for;
using dev::check_launch;
using dev::i64;
using dev::checked_volume;
using dev::fail;
using dev::num;
using dev::tn;
using dev::kThreads;
using u32 = std::uint32_t;

constexpr int kS = 3;  // normalized spatial rank
constexpr i64 kSmall = i64{1} << 31;       // indices below this may use 32-bit arithmetic
constexpr i64 kSmallGeo = i64{1} << 28;    // geometry values below this keep int coordinates exact
constexpr i64 kMaxBatch = 65535;           // images per batched GEMM
constexpr std::size_t kAlign = 256;

bool is_float_type(DataType t) { return t == DataType::kFLOAT || t == DataType::kHALF || t == DataType::kBF16; }


void check_float(const TensorRef& t, const char* kernel, const char* name) {
  if (!is_float_type(t.type))
    fail(std::string(kernel) + ": " + name + " has type " + tn(t.type) + "; it takes float32, float16 or bfloat16");
}

bool all_small(std::initializer_list<i64> v) {
  for (i64 x : v)
    if (x >= kSmall) return false;
  return true;
}

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

std::byte* align_up(std::byte* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  return p + ((kAlign - a % kAlign) % kAlign);
}

template <class T>
T* offset(T* p, i64 elements) {
  return p + elements;
}

// ---- strided-batched cuBLASLt GEMM -----------------------------------------------------------

// The largest power of two (up to 256) that divides `x` (256 for 0).
std::uint32_t alignment_of(std::uint64_t x) {
  std::uint32_t a = 256;
  while (a > 1 && x % a != 0) a /= 2;
  return a;
}

cudaDataType_t lt_type(DataType t) {
  switch (t) {
    case DataType::kHALF: return CUDA_R_16F;
    case DataType::kBF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

}  // namespace

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

namespace {

// ---- geometry (the CPU's Geo) ------------------------------------------------------------------

// A (de)convolution's sizes, normalized to 3 spatial dims (d, h, w). Passed to kernels by value.
struct Geo {
  i64 N = 0, C = 0, K = 0;  // batch, input channels, output channels
  i64 G = 1, Cg = 0, Kg = 0;
  i64 in[kS] = {}, out[kS] = {}, k[kS] = {}, s[kS] = {}, d[kS] = {}, pre[kS] = {};
  i64 in_sp = 1, out_sp = 1, kvol = 1;
};

i64 dim_or(const Dims& d, int i, i64 def) { return d.rank() == 0 ? def : d[i]; }

// Every geometry value small enough for int coordinates (products of two stay below 2^31 only
// where the kernels form them: index * stride + tap * dilation).
bool geo_small(const Geo& g) {
  for (int i = 0; i < kS; ++i)
    if (g.in[i] >= kSmallGeo || g.out[i] * g.s[i] >= kSmallGeo || g.k[i] * g.d[i] >= kSmallGeo || g.pre[i] >= kSmallGeo)
      return false;
  // The kernel ([K, C/g, kvol] or [C, K/g, kvol]: K * C/g * kvol elements) is indexed too.
  return g.in_sp < kSmall && g.out_sp < kSmall && g.C < kSmallGeo && g.K < kSmallGeo && g.kvol < kSmallGeo &&
         g.K * g.Cg * g.kvol < kSmall;
}

// Calls graph inference (the layer's shape rules) and checks `out` against its result, as the
// CPU's check_inference; messages are prefixed with the kernel's name.
template <class P>
void check_inference(const P& p, const char* kernel, const std::vector<graph::TensorDesc>& in, const TensorRef& out) {
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

template <class P>
Geo make_geo(const P& p, const Dims& x, const Dims& out, bool transposed) {
  Geo g;
  const int n = p.kernel_size.rank();
  const Dims eff = graph::window_pre_padding(x, p.kernel_size, p.stride, p.pre_padding, p.post_padding, p.dilation,
                                             p.padding_mode, transposed);
  g.N = x[0];
  g.C = x[1];
  g.K = out[1];
  g.G = p.num_groups;
  g.Cg = g.C / g.G;
  g.Kg = g.K / g.G;
  const int off = kS - n;
  for (int i = 0; i < kS; ++i) {
    if (i < off) {
      g.in[i] = g.out[i] = g.k[i] = g.s[i] = g.d[i] = 1;
      g.pre[i] = 0;
    } else {
      const int j = i - off;
      g.in[i] = x[2 + j];
      g.out[i] = out[2 + j];
      g.k[i] = p.kernel_size[j];
      g.s[i] = dim_or(p.stride, j, 1);
      g.d[i] = dim_or(p.dilation, j, 1);
      g.pre[i] = eff[j];
    }
    g.in_sp *= g.in[i];
    g.out_sp *= g.out[i];
    g.kvol *= g.k[i];
  }
  return g;
}

// The CPU's conv_geo / deconv_geo: rank and shape-rule checks, then the geometry. `kernel` null:
// sizing only, a kernel of the volume the parameters ask for.
template <class P>
Geo window_geo(const P& p, const TensorRef& x, const TensorRef& out, const graph::TensorDesc* kernel,
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
  check_inference(p, name, in, out);
  return make_geo(p, x.dims, out.dims, transposed);
}

// ---- chunking ----------------------------------------------------------------------------------

// How a buffer of `bpp` bytes per position (of `P` per image, `N` images) is covered by chunks of
// at most kChunkBytes: `images` whole images at a time, or (one image exceeds it) `tile`
// positions of one image. The bytes any chunk uses are at most chunk_bound(N, P, bpp), which
// grows with N and P: the builder sizes the workspace at the profile's largest shapes.
struct Chunk {
  i64 images = 1;
  i64 tile = 0;  // positions per chunk (P unless one image is split)
};

Chunk chunk_for(i64 N, i64 P, i64 bpp) {
  const i64 cap = static_cast<i64>(kChunkBytes);
  if (bpp == 0) return {std::clamp<i64>(N, 1, kMaxBatch), P};
  if (P * bpp <= cap) return {std::clamp<i64>(cap / (P * bpp), 1, std::min(N, kMaxBatch)), P};
  return {1, std::max<i64>(1, cap / bpp)};
}

i64 chunk_bound(i64 N, i64 P, i64 bpp) {
  if (bpp == 0) return 0;
  return bpp * std::min(N * P, std::max<i64>(1, static_cast<i64>(kChunkBytes) / bpp));
}

// ---- kernels -------------------------------------------------------------------------------

#define CONV_GRID_LOOP(I, i, n) \
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += static_cast<I>(gridDim.x) * blockDim.x)

// Signed coordinate type matching the index type: int with 32-bit indices, else int64.
template <class I>
using Coord = std::conditional_t<std::is_same_v<I, u32>, int, i64>;

// The im2col columns of a chunk: col[i][g][r][q] for images i < nb of the chunk (x points at its
// first image), groups g, rows r = (c, kd, kh, kw) of the group's C/g channels, and positions
// q < pt starting at output position p0; zero where the window reads padding. Copies elements
// of the input's type (exact).
template <class Tag, class I>
__global__ void __launch_bounds__(kThreads)
    im2col_kernel(const typename Tag::T* __restrict__ x, typename Tag::T* __restrict__ col, I total, Geo g, I pt, I p0) {
  using S = Coord<I>;
  const I R = static_cast<I>(g.Cg * g.kvol), kvol = static_cast<I>(g.kvol), G = static_cast<I>(g.G);
  const I k12 = static_cast<I>(g.k[1] * g.k[2]), k1 = static_cast<I>(g.k[1]), k2 = static_cast<I>(g.k[2]);
  const I OW = static_cast<I>(g.out[2]), OH = static_cast<I>(g.out[1]);
  const S ID = static_cast<S>(g.in[0]), IH = static_cast<S>(g.in[1]), IW = static_cast<S>(g.in[2]);
  const typename Tag::T zero = Tag::store(0.f);
  CONV_GRID_LOOP(I, l, total) {
    const I q = l % pt;
    I t = l / pt;
    const I r = t % R;
    t /= R;
    const I grp = t % G, i = t / G;
    const I c = r / kvol, kr = r % kvol;
    const S kd = static_cast<S>(kr / k12), kh = static_cast<S>((kr / k2) % k1), kw = static_cast<S>(kr % k2);
    const I p = p0 + q;
    const S ow = static_cast<S>(p % OW), oh = static_cast<S>((p / OW) % OH), od = static_cast<S>(p / (OW * OH));
    const S id = od * static_cast<S>(g.s[0]) - static_cast<S>(g.pre[0]) + kd * static_cast<S>(g.d[0]);
    const S ih = oh * static_cast<S>(g.s[1]) - static_cast<S>(g.pre[1]) + kh * static_cast<S>(g.d[1]);
    const S iw = ow * static_cast<S>(g.s[2]) - static_cast<S>(g.pre[2]) + kw * static_cast<S>(g.d[2]);
    typename Tag::T v = zero;
    if (id >= 0 && id < ID && ih >= 0 && ih < IH && iw >= 0 && iw < IW) {
      const I channel = i * static_cast<I>(g.C) + grp * static_cast<I>(g.Cg) + c;
      v = x[channel * static_cast<I>(g.in_sp) + static_cast<I>((id * IH + ih) * IW + iw)];
    }
    col[l] = v;
  }
}

// Depthwise convolution (one input channel per group, K/groups maps per channel), one thread
// per output element: the bias, then every tap in (kd, kh, kw) order, in float32.
template <class Tag, class I>
__global__ void __launch_bounds__(kThreads)
    depthwise_kernel(const typename Tag::T* __restrict__ x, const typename Tag::T* __restrict__ w,
                     const typename Tag::T* __restrict__ bias, typename Tag::T* __restrict__ out, I total, Geo g) {
  using S = Coord<I>;
  const I OW = static_cast<I>(g.out[2]), OH = static_cast<I>(g.out[1]), OD = static_cast<I>(g.out[0]);
  const I K = static_cast<I>(g.K), Kg = static_cast<I>(g.Kg);
  const S ID = static_cast<S>(g.in[0]), IH = static_cast<S>(g.in[1]), IW = static_cast<S>(g.in[2]);
  const S k0 = static_cast<S>(g.k[0]), k1 = static_cast<S>(g.k[1]), k2 = static_cast<S>(g.k[2]);
  CONV_GRID_LOOP(I, l, total) {
    I t = l;
    const S ow = static_cast<S>(t % OW);
    t /= OW;
    const S oh = static_cast<S>(t % OH);
    t /= OH;
    const S od = static_cast<S>(t % OD);
    t /= OD;
    const I k = t % K, n = t / K;
    const typename Tag::T* xc = x + (n * static_cast<I>(g.C) + k / Kg) * static_cast<I>(g.in_sp);
    const typename Tag::T* wk = w + k * static_cast<I>(g.kvol);
    float acc = bias ? Tag::load(bias[k]) : 0.f;
    for (S kd = 0; kd < k0; ++kd) {
      const S id = od * static_cast<S>(g.s[0]) - static_cast<S>(g.pre[0]) + kd * static_cast<S>(g.d[0]);
      if (id < 0 || id >= ID) continue;
      for (S kh = 0; kh < k1; ++kh) {
        const S ih = oh * static_cast<S>(g.s[1]) - static_cast<S>(g.pre[1]) + kh * static_cast<S>(g.d[1]);
        if (ih < 0 || ih >= IH) continue;
        const typename Tag::T* xrow = xc + (id * IH + ih) * IW;
        const typename Tag::T* wrow = wk + (kd * k1 + kh) * k2;
        for (S kw = 0; kw < k2; ++kw) {
          const S iw = ow * static_cast<S>(g.s[2]) - static_cast<S>(g.pre[2]) + kw * static_cast<S>(g.d[2]);
          if (iw < 0 || iw >= IW) continue;
          acc += Tag::load(wrow[kw]) * Tag::load(xrow[iw]);
        }
      }
    }
    out[l] = Tag::store(acc);
  }
}

// A float16/bfloat16 convolution chunk's float32 GEMM result tmp[i][k][q] (q < pt) plus the bias,
// rounded once into the output (`out` points at the chunk's first image and position; images
// are K * P elements apart).
template <class Tag, class I>
__global__ void __launch_bounds__(kThreads)
    conv_store_kernel(const float* __restrict__ tmp, const typename Tag::T* __restrict__ bias,
                      typename Tag::T* __restrict__ out, I total, I pt, I K, I P) {
  CONV_GRID_LOOP(I, l, total) {
    const I q = l % pt, t = l / pt, k = t % K, i = t / K;
    const float b = bias ? Tag::load(bias[k]) : 0.f;
    out[(i * K + k) * P + q] = Tag::store(tmp[l] + b);
  }
}

// out (N, K, P) = the bias (zero without one), rounded: a (de)convolution without input
// channels.
template <class Tag, class I>
__global__ void __launch_bounds__(kThreads)
    bias_fill_kernel(typename Tag::T* __restrict__ out, const typename Tag::T* __restrict__ bias, I total, I P, I K) {
  CONV_GRID_LOOP(I, l, total) out[l] = Tag::store(bias ? Tag::load(bias[(l / P) % K]) : 0.f);
}

// Deconvolution col2im as a gather, over the output channels [kbase, kbase + kb) of a chunk's
// nb images. col[i][kc][(kd, kh, kw)][q - q0] (float32, q0 <= q < q0 + qt) holds the
// contribution of input position q to output channel kbase + kc at offset (kd, kh, kw) from q's
// window origin. Every output element adds the entries that reach it, in tap order (the CPU's
// col2im row order). kAcc (one image, one channel, a tile of input positions): starts from
// acc[l] (float32) and stores back there; else starts from the bias and rounds once into
// out[i][kbase + kc][o] (out: the chunk's first image).
template <class Tag, class I, bool kAcc>
__global__ void __launch_bounds__(kThreads)
    col2im_kernel(const float* __restrict__ col, const typename Tag::T* __restrict__ bias, typename Tag::T* __restrict__ out,
                  float* __restrict__ acc, I total, Geo g, I kbase, I kb, I q0, I qt) {
  using S = Coord<I>;
  const I OW = static_cast<I>(g.out[2]), OH = static_cast<I>(g.out[1]), OSP = static_cast<I>(g.out_sp);
  const I K = static_cast<I>(g.K), kvol = static_cast<I>(g.kvol);
  const S ID = static_cast<S>(g.in[0]), IH = static_cast<S>(g.in[1]), IW = static_cast<S>(g.in[2]);
  const S k0 = static_cast<S>(g.k[0]), k1 = static_cast<S>(g.k[1]), k2 = static_cast<S>(g.k[2]);
  const S s0 = static_cast<S>(g.s[0]), s1 = static_cast<S>(g.s[1]), s2 = static_cast<S>(g.s[2]);
  const S d0 = static_cast<S>(g.d[0]), d1 = static_cast<S>(g.d[1]), d2 = static_cast<S>(g.d[2]);
  const S lo = static_cast<S>(q0), hi = static_cast<S>(q0 + qt);
  CONV_GRID_LOOP(I, l, total) {
    const I o = l % OSP, t = l / OSP, kc = t % kb, i = t / kb;
    const I k = kbase + kc;
    const S ow = static_cast<S>(o % OW), oh = static_cast<S>((o / OW) % OH), od = static_cast<S>(o / (OW * OH));
    float a;
    if constexpr (kAcc) a = acc[l];
    else a = bias ? Tag::load(bias[k]) : 0.f;
    const float* rows = col + (i * kb + kc) * kvol * qt;
    for (S kd = 0; kd < k0; ++kd) {
      const S td = od + static_cast<S>(g.pre[0]) - kd * d0;  // = id * s0
      if (td < 0 || td % s0 != 0) continue;
      const S id = td / s0;
      if (id >= ID) continue;
      for (S kh = 0; kh < k1; ++kh) {
        const S th = oh + static_cast<S>(g.pre[1]) - kh * d1;
        if (th < 0 || th % s1 != 0) continue;
        const S ih = th / s1;
        if (ih >= IH) continue;
        for (S kw = 0; kw < k2; ++kw) {
          const S tw = ow + static_cast<S>(g.pre[2]) - kw * d2;
          if (tw < 0 || tw % s2 != 0) continue;
          const S iw = tw / s2;
          if (iw >= IW) continue;
          const S q = (id * IH + ih) * IW + iw;
          if (kAcc && (q < lo || q >= hi)) continue;
          a += rows[static_cast<I>((kd * k1 + kh) * k2 + kw) * qt + static_cast<I>(q - lo)];
        }
      }
    }
    if constexpr (kAcc) acc[l] = a;
    else out[(i * K + k) * OSP + o] = Tag::store(a);
  }
}

// acc (rows of P) = bias[row] (zero without one), in float32: the start of a tiled deconvolution
// output channel (bias points at its channel's value).
template <class Tag, class I>
__global__ void __launch_bounds__(kThreads)
    acc_init_kernel(float* __restrict__ acc, const typename Tag::T* __restrict__ bias, I total, I P) {
  CONV_GRID_LOOP(I, l, total) acc[l] = bias ? Tag::load(bias[l / P]) : 0.f;
}

template <class Tag, class I>
__global__ void __launch_bounds__(kThreads)
    round_kernel(const float* __restrict__ acc, typename Tag::T* __restrict__ out, I total) {
  CONV_GRID_LOOP(I, l, total) out[l] = Tag::store(acc[l]);
}

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

// ---- convolution -------------------------------------------------------------------------------

namespace {

enum class ConvPath { kDepthwise, kPointwise, kIm2col };

ConvPath conv_path(const Geo& g) {
  if (g.Cg == 1 && g.G > 1) return ConvPath::kDepthwise;
  bool pointwise = g.kvol == 1;
  for (int i = 0; i < kS; ++i) pointwise = pointwise && g.s[i] == 1 && g.pre[i] == 0 && g.in[i] == g.out[i];
  return pointwise ? ConvPath::kPointwise : ConvPath::kIm2col;
}

// A convolution's workspace: cuBLASLt's scratch, then per chunk the im2col columns (col_pp bytes
// per output position) and, float16/bfloat16, the float32 GEMM result (tmp_pp bytes per
// position, 256-aligned after the columns).
struct ConvSizing {
  ConvPath path = ConvPath::kIm2col;
  i64 col_pp = 0, tmp_pp = 0;
  std::size_t total = 0;
};

ConvSizing conv_sizing(const Geo& g, DataType t) {
  ConvSizing z;
  z.path = conv_path(g);
  if (g.N == 0 || g.K == 0 || g.out_sp == 0 || z.path == ConvPath::kDepthwise) return z;
  if (z.path == ConvPath::kIm2col) z.col_pp = g.C * g.kvol * static_cast<i64>(element_size(t));
  if (t != DataType::kFLOAT) z.tmp_pp = 4 * g.K;
  const i64 bpp = z.col_pp + z.tmp_pp;
  z.total = kGemmWorkspaceBytes + (bpp > 0 ? kAlign + static_cast<std::size_t>(chunk_bound(g.N, g.out_sp, bpp)) : 0);
  return z;
}

// The cuDNN path's workspace: cuDNN's own, then for a channels-last plan the copies of x, of
// the kernel (channels padded to the plan's count) and of y at the plan's problem (the only
// one it runs), each 256-byte aligned.
struct CudnnLayout {
  std::size_t x = 0, w = 0, y = 0, total = 0;  // offsets of the copies; the bytes in all
};
CudnnLayout cudnn_layout(const CudnnConvShape& s, std::size_t dnn_workspace) {
  auto up = [](std::size_t b) { return (b + kAlign - 1) / kAlign * kAlign; };
  CudnnLayout l;
  l.total = dnn_workspace;
  if (s.channels_last == 0) return l;
  auto bytes = [&](const std::vector<i64>& dims, i64 channels) {  // [N, channels, spatial...]
    i64 v = dims[0] * channels;
    for (std::size_t i = 2; i < dims.size(); ++i) v *= dims[i];
    return up(element_size(s.type) * static_cast<std::size_t>(v));
  };
  l.x = up(dnn_workspace);
  l.w = l.x + bytes(s.x, s.channels_last);
  l.y = l.w + bytes(s.w, s.channels_last);
  l.total = l.y + bytes(s.y, s.y[1]);
  return l;
}

// ---- direct convolution of few input channels (cudnn_tactic.h: configuration "direct") -------
//
// An image's first layer (3 channels, padded to 4) as an implicit GEMM on the tensor cores
// (mma.sync m16n8k16, float16/bfloat16 products summed in float32): x channels-last [N, H, W, 4],
// the kernel channels-last [K, R, S, 4] (both the copies a channels-last plan makes), y
// channels-last [N, OH, OW, K]. A block owns 64 output channels (blockIdx.y) and walks work
// items of 128 output positions of one output row (4 warps x 32 positions): the block's
// kernels sit in shared memory in fragment order ([k16 block][n-tile][lane] pairs of words,
// k = tap * 4 + channel, zeros past the last tap), and each item's input rows (R rows of the
// 127 * stride + S columns its windows read, zeros outside the image) are copied with cp.async
// into one of two tiles while the block computes the other. The bias is added in float32 and
// the result rounded once (then a ReLU, which commutes with the rounding); the CPU rounds once
// too, so only the summation order differs.
struct DirectArgs {
  int N, H, W, K, R, S, OH, OW, sh, sw, ph, pw, taps, kb, tile_w, segs;
  bool relu;
};
constexpr int kDirectSegment = 128, kDirectThreads = 128;

template <class T>
struct Mma16816 {
  __device__ static void run(float* d, const u32* a, const u32* b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if constexpr (std::is_same_v<T, __half>)
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    __trap();  // the backend's architectures are sm80 and newer
#endif
  }
};

__device__ __forceinline__ void cp_async8(void* dst, const void* src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 8 : 0));
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

template <class Tag>
__global__ void __launch_bounds__(kDirectThreads)
    direct_conv_kernel(const typename Tag::T* __restrict__ x, const typename Tag::T* __restrict__ w,
                       const typename Tag::T* __restrict__ bias, typename Tag::T* __restrict__ y, DirectArgs a) {
  using T = typename Tag::T;
  extern __shared__ __align__(16) unsigned char direct_smem[];
  uint2* frag = reinterpret_cast<uint2*>(direct_smem);  // [kb][8][32]
  float* bsm = reinterpret_cast<float*>(direct_smem + static_cast<std::size_t>(a.kb) * 2048);
  int* offs = reinterpret_cast<int*>(bsm + 64);
  uint2* tiles = reinterpret_cast<uint2*>(direct_smem + static_cast<std::size_t>(a.kb) * 2048 + 256 + a.kb * 16);
  const int tile_px = a.R * a.tile_w;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const int n0 = blockIdx.y * 64, real = a.taps * 4;
  const u32* w32 = reinterpret_cast<const u32*>(w);
  for (int i = tid; i < a.kb * 256; i += kDirectThreads) {
    const int l = i & 31, j = (i >> 5) & 7, kb = i >> 8;
    const int k = kb * 16 + 2 * (l & 3);
    const std::size_t row = static_cast<std::size_t>(n0 + j * 8 + (l >> 2)) * real;
    frag[i] = make_uint2(k < real ? w32[(row + k) >> 1] : 0u, k + 8 < real ? w32[(row + k + 8) >> 1] : 0u);
  }
  if (tid < 64) bsm[tid] = bias ? Tag::load(bias[n0 + tid]) : 0.f;
  for (int i = tid; i < a.kb * 4; i += kDirectThreads) {
    const int kh = i / a.S, kw = i - kh * a.S;
    offs[i] = i < a.taps ? (kh * a.tile_w + kw) * 2 : -1;  // 32-bit words into a tile; -1: a padded tap
  }
  const int items = a.N * a.OH * a.segs;
  const uint2* x8 = reinterpret_cast<const uint2*>(x);
  auto load = [&](int item, int buf) {
    const int seg = item % a.segs, row = item / a.segs;
    const int oh = row % a.OH, b = row / a.OH;
    const int ih0 = oh * a.sh - a.ph, iw0 = seg * kDirectSegment * a.sw - a.pw;
    uint2* dst = tiles + buf * tile_px;
    for (int r = 0; r < a.R; ++r) {
      const int ih = ih0 + r;
      const bool row_in = ih >= 0 && ih < a.H;
      const uint2* src = x8 + (static_cast<std::size_t>(b) * a.H + (row_in ? ih : 0)) * a.W;
      for (int j = tid; j < a.tile_w; j += kDirectThreads) {
        const int iw = iw0 + j;
        const bool in = row_in && iw >= 0 && iw < a.W;
        cp_async8(dst + r * a.tile_w + j, in ? src + iw : x8, in);  // zeros outside the image
      }
    }
    cp_async_commit();
  };
  if (static_cast<int>(blockIdx.x) < items) load(blockIdx.x, 0);
  const int kfull = a.taps / 4;  // k16 blocks without padded taps
  int buf = 0;
  for (int item = blockIdx.x; item < items; item += gridDim.x, buf ^= 1) {
    const int next = item + gridDim.x;
    if (next < items) {
      load(next, buf ^ 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // this item's tile (the first time: the kernels too) seen by every thread
    const int seg = item % a.segs, row = item / a.segs;
    const int ow0 = seg * kDirectSegment;
    const u32* x32 = reinterpret_cast<const u32*>(tiles + buf * tile_px);
    // Rows g and g + 8 of the warp's two m16 tiles: the word of its window's first tap (the
    // channel pair this lane's fragment holds); positions past the row repeat the last one.
    int base[2][2];
    const int last = min(a.OW - ow0, kDirectSegment) - 1;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) base[mt][h] = min(warp * 32 + mt * 16 + h * 8 + g, last) * a.sw * 2 + (t & 1);
    float acc[2][8][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[mt][j][q] = 0.f;
    // k16 block kb: this lane's A columns 2t, 2t + 1 (tap kb * 4 + t / 2) and 2t + 8, 2t + 9 (two taps on).
    auto step = [&](int kb, bool masked) {
      const int oa = offs[kb * 4 + (t >> 1)], ob = offs[kb * 4 + (t >> 1) + 2];
      u32 af[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        if (masked) {
          af[mt][0] = oa >= 0 ? x32[base[mt][0] + oa] : 0u;
          af[mt][1] = oa >= 0 ? x32[base[mt][1] + oa] : 0u;
          af[mt][2] = ob >= 0 ? x32[base[mt][0] + ob] : 0u;
          af[mt][3] = ob >= 0 ? x32[base[mt][1] + ob] : 0u;
        } else {
          af[mt][0] = x32[base[mt][0] + oa];
          af[mt][1] = x32[base[mt][1] + oa];
          af[mt][2] = x32[base[mt][0] + ob];
          af[mt][3] = x32[base[mt][1] + ob];
        }
      }
      const uint2* wk = frag + kb * 256 + lane;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const uint2 v = wk[j * 32];
        const u32 bf[2] = {v.x, v.y};
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) Mma16816<T>::run(acc[mt][j], af[mt], bf);
      }
    };
#pragma unroll 2
    for (int kb = 0; kb < kfull; ++kb) step(kb, false);
    if (kfull < a.kb) step(kfull, true);
    const int oh = row % a.OH, b = row / a.OH;
    T* yrow = y + (static_cast<std::size_t>(b) * a.OH + oh) * a.OW * a.K;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int p = warp * 32 + mt * 16 + h * 8 + g;
        if (ow0 + p >= a.OW) continue;
        T* yo = yrow + static_cast<std::size_t>(ow0 + p) * a.K + n0 + 2 * t;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          float v0 = __fadd_rn(acc[mt][j][h * 2], bsm[j * 8 + 2 * t]);
          float v1 = __fadd_rn(acc[mt][j][h * 2 + 1], bsm[j * 8 + 2 * t + 1]);
          if (a.relu) {
            v0 = v0 > 0.f ? v0 : 0.f;
            v1 = v1 > 0.f ? v1 : 0.f;
          }
          T pair[2] = {Tag::store(v0), Tag::store(v1)};
          *reinterpret_cast<u32*>(yo + j * 8) = *reinterpret_cast<const u32*>(pair);
        }
      }
    __syncthreads();  // every read of this tile done before the next item's copy overwrites it
  }
}

// Launches direct_conv_kernel for problem `s` (direct_conv_supported) on the copies x4 and w4.
void direct_conv(const CudnnConvShape& s, const void* x4, const void* w4, const void* bias, void* y, bool relu,
                 cudaStream_t stream) {
  DirectArgs a{};
  a.N = static_cast<int>(s.x[0]), a.H = static_cast<int>(s.x[2]), a.W = static_cast<int>(s.x[3]);
  a.K = static_cast<int>(s.y[1]), a.R = static_cast<int>(s.w[2]), a.S = static_cast<int>(s.w[3]);
  a.OH = static_cast<int>(s.y[2]), a.OW = static_cast<int>(s.y[3]);
  a.sh = static_cast<int>(s.stride[0]), a.sw = static_cast<int>(s.stride[1]);
  a.ph = static_cast<int>(s.pre[0]), a.pw = static_cast<int>(s.pre[1]);
  a.taps = a.R * a.S, a.kb = (a.taps + 3) / 4, a.tile_w = (kDirectSegment - 1) * a.sw + a.S;
  a.segs = (a.OW + kDirectSegment - 1) / kDirectSegment;
  a.relu = relu;
  const std::size_t smem = direct_conv_shared_bytes(s);
  const int items = a.N * a.OH * a.segs;
  int device = 0, sms = 1;
  dev::check(cudaGetDevice(&device), "convolution: cudaGetDevice");
  dev::check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "convolution: reading the SM count");
  auto launch = [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::T;
    auto* kernel = direct_conv_kernel<Tag>;
    dev::check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
               "convolution: the direct kernel's shared memory");
    int per_sm = 0;
    dev::check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kDirectThreads, smem),
               "convolution: the direct kernel's occupancy");
    const dim3 grid(static_cast<unsigned>(std::min(items, sms * std::max(per_sm, 1))), static_cast<unsigned>(a.K / 64));
    kernel<<<grid, kDirectThreads, smem, stream>>>(static_cast<const T*>(x4), static_cast<const T*>(w4),
                                                   static_cast<const T*>(bias), static_cast<T*>(y), a);
  };
  if (s.type == DataType::kHALF) launch(dev::F16{});
  else launch(dev::BF16{});
  check_launch("convolution (direct)");
}

}  // namespace

std::size_t channels_last_copy_bytes(const CudnnConvShape& s) { return kAlign + cudnn_layout(s, 0).total; }

ConvolutionKernel::ConvolutionKernel(cublasLtHandle_t handle, std::string node_name, ConvolutionParams p)
    : name_(std::move(node_name)), params_(std::move(p)), gemm_(std::make_unique<StridedGemm>(handle, name_)) {}

ConvolutionKernel::~ConvolutionKernel() = default;

namespace {
// A tensor's bytes rounded up to 256.
std::size_t aligned_bytes(const TensorRef& t) {
  const std::size_t b = element_size(t.type) * static_cast<std::size_t>(std::max<i64>(t.dims.volume(), 0));
  return (b + kAlign - 1) / kAlign * kAlign;
}
}  // namespace

std::size_t ConvolutionKernel::layout_bytes(const TensorRef& x, const TensorRef& out) const {
  return (x_cl_ ? aligned_bytes(x) : 0) + (out_cl_ ? aligned_bytes(out) : 0);
}

std::size_t ConvolutionKernel::workspace_bytes(const TensorRef& x, const TensorRef& /*kernel: implied by params*/,
                                               const TensorRef& out) const {
  // Sizing only: the buffers need not exist yet (the builder asks before allocating).
  check_float(x, "convolution", "input 0");
  const Geo g = window_geo(params_, x, out, nullptr, nullptr, "convolution", false);
  const std::size_t planned = dnn_      ? cudnn_layout(dnn_->shape(), dnn_->workspace_bytes()).total
                              : direct_ ? cudnn_layout(*direct_, 0).total
                                        : 0;
  return layout_bytes(x, out) + std::max(conv_sizing(g, x.type).total, planned);
}

std::optional<CudnnConvShape> ConvolutionKernel::cudnn_shape(const TensorRef& x, const TensorRef& kernel,
                                                             const TensorRef& out, bool accumulate) const {
  if (!is_float_type(x.type) || kernel.type != x.type || out.type != x.type) return std::nullopt;
  const graph::TensorDesc kd{kernel.type, kernel.dims};
  const Geo g = window_geo(params_, x, out, &kd, nullptr, "convolution", false);
  if (g.N * g.C * g.in_sp == 0 || g.N * g.K * g.out_sp == 0 || g.Cg == 0 || g.Kg == 0) return std::nullopt;
  CudnnConvShape s;
  s.type = x.type;
  s.accumulate = accumulate;
  s.x = {g.N, g.C};
  s.w = {g.K, g.Cg};
  s.y = {g.N, g.K};
  // 1 and 2 spatial dims as cuDNN's 2-D convolution (a leading 1), 3 as its 3-D one.
  const int first = params_.kernel_size.rank() == 3 ? 0 : 1;
  for (int i = first; i < kS; ++i) {
    if (g.pre[i] < 0) return std::nullopt;
    s.x.push_back(g.in[i]);
    s.w.push_back(g.k[i]);
    s.y.push_back(g.out[i]);
    s.stride.push_back(g.s[i]);
    s.dilation.push_back(g.d[i]);
    s.pre.push_back(g.pre[i]);
    // Padding after: as much as before where that gives the same output size, else just enough
    // for the last window. Either way the windows read the same positions (past the input:
    // zeros, as the CPU), but cuDNN offers other configurations for symmetric padding (for the
    // float32 7x7 stride-2 ResNet stem, one taking 0.85 ms instead of 1.06 on the H200);
    // same_cudnn_problem() says which posts are interchangeable.
    const i64 span = (g.k[i] - 1) * g.d[i] + 1, least = std::max<i64>(0, (g.out[i] - 1) * g.s[i] + span - g.in[i] - g.pre[i]);
    const bool symmetric = g.pre[i] >= least && (g.in[i] + 2 * g.pre[i] - span) / g.s[i] + 1 == g.out[i];
    s.post.push_back(symmetric ? g.pre[i] : least);
  }
  return s;
}

void ConvolutionKernel::use_cudnn(const CudnnContext& ctx, const CudnnConvShape& shape, const std::string& config,
                                  std::size_t max_workspace) {
  auto dnn = std::make_unique<CudnnConv>(ctx, shape);
  dnn->select(config);
  if (dnn->workspace_bytes() > max_workspace)
    throw Error("[cuda] convolution '" + name_ + "': cuDNN's plan needs " + std::to_string(dnn->workspace_bytes()) +
                " bytes of workspace, more than the " + std::to_string(max_workspace) + " reserved");
  dnn_ = std::move(dnn);
  direct_.reset();
}

void ConvolutionKernel::use_direct(const CudnnConvShape& shape) {
  if (!direct_conv_supported(shape))
    throw Error("[cuda] convolution '" + name_ + "': the direct kernel does not run this problem");
  dnn_.reset();
  direct_ = shape;
}

bool ConvolutionKernel::run_cudnn(const TensorRef& x, const TensorRef& kernel, const TensorRef* bias,
                                  const TensorRef& out, void* workspace, cudaStream_t stream,
                                  const ActivationParams* act, bool x_cl, bool out_cl) const {
  auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % kCudnnAlign == 0; };
  if (!aligned(x.data) || !aligned(kernel.data) || !aligned(out.data)) return false;
  const CudnnConvShape& planned = dnn_ ? dnn_->shape() : *direct_;
  // Channels-last tensors only go to a channels-last plan, x only where it pads no channels.
  if ((x_cl || out_cl) && planned.channels_last == 0) return false;
  if (x_cl && planned.channels_last != x.dims[1]) return false;
  // An engine's plan accumulates only where it was built with the bias written first (a:1).
  const bool prefill = planned.accumulate && bias != nullptr;
  auto shape = cudnn_shape(x, kernel, out, prefill);
  if (!shape) return false;
  shape->channels_last = planned.channels_last;
  if (!same_cudnn_problem(*shape, planned)) return false;  // another problem than the plan's: our own path
  if (planned.channels_last) {  // transposed copies around cuDNN, bias and activation on the way out
    const CudnnLayout l = cudnn_layout(planned, dnn_ ? dnn_->workspace_bytes() : 0);
    char* ws = static_cast<char*>(workspace);
    try {
      if (!x_cl) to_channels_last(x, planned.channels_last, ws + l.x, stream);
      to_channels_last({kernel.data, kernel.type, Dims(std::span<const std::int64_t>(planned.w))}, planned.channels_last,
                       ws + l.w, stream);
      const void* xc = x_cl ? x.data : ws + l.x;
      void* yc = out_cl ? out.data : ws + l.y;
      if (direct_) {  // bias (and a ReLU) in the kernel, before and after its one rounding
        const bool relu = act && act->type == ActivationType::kRELU;
        direct_conv(planned, xc, ws + l.w, bias ? bias->data : nullptr, yc, relu, stream);
        const ActivationParams* rest = relu ? nullptr : act;
        if (out_cl) {
          if (rest) bias_activation_channels_last(out, nullptr, rest, stream);
        } else {
          from_channels_last(ws + l.y, out, nullptr, rest, stream);
        }
        return true;
      }
      dnn_->run(xc, ws + l.w, yc, ws, stream);
      if (out_cl) bias_activation_channels_last(out, bias ? bias->data : nullptr, act, stream);
      else from_channels_last(ws + l.y, out, bias ? bias->data : nullptr, act, stream);
    } catch (const Error& e) {
      throw Error("[cuda] convolution '" + name_ + "': " + e.what());
    }
    return true;
  }
  if (prefill) {
    const i64 n = out.dims.volume(), P = n / (out.dims[0] * out.dims[1]);
    by_float(x.type, [&](auto tag) {
      using Tag = decltype(tag);
      using T = typename Tag::T;
      by_index(all_small({n}), [&](auto ix) {
        using I = decltype(ix);
        bias_fill_kernel<Tag, I><<<blocks_for(n), kThreads, 0, stream>>>(
            static_cast<T*>(out.data), static_cast<const T*>(bias->data), static_cast<I>(n), static_cast<I>(P),
            static_cast<I>(out.dims[1]));
      });
    });
    check_launch("convolution (bias before cuDNN)");
  }
  try {
    dnn_->run(x.data, kernel.data, out.data, workspace, stream);
  } catch (const Error& e) {
    throw Error("[cuda] convolution '" + name_ + "': " + e.what());
  }
  bias_activation(out, bias && !prefill ? bias->data : nullptr, act, stream);
  return true;
}

void ConvolutionKernel::run(const TensorRef& x, const TensorRef& kernel, const TensorRef* bias, const TensorRef& out,
                            void* workspace, cudaStream_t stream, const ActivationParams* act) const {
  checked_volume(x, "convolution", "input 0");
  checked_volume(kernel, "convolution", "input 1 (kernel)");
  if (bias) checked_volume(*bias, "convolution", "input 2 (bias)");
  const i64 n = checked_volume(out, "convolution", "the output");
  check_float(x, "convolution", "input 0");
  const graph::TensorDesc kd{kernel.type, kernel.dims};
  graph::TensorDesc bd;
  if (bias) bd = {bias->type, bias->dims};
  window_geo(params_, x, out, &kd, bias ? &bd : nullptr, "convolution", false);
  if (n == 0) return;
  if (!x_cl_ && !out_cl_) {
    run_packed(x, kernel, bias, out, workspace, stream, act);
    return;
  }
  if (workspace == nullptr) fail("convolution: channels-last tensors need a workspace (ConvolutionKernel::workspace_bytes)");
  auto* front = static_cast<std::byte*>(workspace);
  std::byte* rest = front + layout_bytes(x, out);
  if ((dnn_ || direct_) && run_cudnn(x, kernel, bias, out, rest, stream, act, x_cl_, out_cl_)) return;
  // Another path: packed copies in front of the workspace.
  TensorRef xp = x, op = out;
  if (x_cl_) {
    xp.data = front;
    from_channels_last(x.data, xp, nullptr, nullptr, stream);
  }
  if (out_cl_) op.data = front + (x_cl_ ? aligned_bytes(x) : 0);
  run_packed(xp, kernel, bias, op, rest, stream, act);
  if (out_cl_) to_channels_last(op, out.dims[1], out.data, stream);
}

void ConvolutionKernel::run_packed(const TensorRef& x, const TensorRef& kernel, const TensorRef* bias,
                                   const TensorRef& out, void* workspace, cudaStream_t stream,
                                   const ActivationParams* act) const {
  const i64 n = out.dims.volume();
  const graph::TensorDesc kd{kernel.type, kernel.dims};
  graph::TensorDesc bd;
  if (bias) bd = {bias->type, bias->dims};
  const Geo g = window_geo(params_, x, out, &kd, bias ? &bd : nullptr, "convolution", false);
  if ((dnn_ || direct_) && run_cudnn(x, kernel, bias, out, workspace, stream, act, false, false)) return;
  const ConvSizing z = conv_sizing(g, x.type);
  if (z.total > 0 && workspace == nullptr)
    fail("convolution: this convolution needs a workspace (ConvolutionKernel::workspace_bytes)");
  const bool gsmall = geo_small(g);
  const i64 P = g.out_sp, R = g.Cg * g.kvol;
  by_float(x.type, [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::T;
    constexpr bool narrow = !std::is_same_v<Tag, dev::F32>;
    const T* xs = static_cast<const T*>(x.data);
    const T* ws = static_cast<const T*>(kernel.data);
    const T* bs = bias ? static_cast<const T*>(bias->data) : nullptr;
    T* os = static_cast<T*>(out.data);

    if (z.path == ConvPath::kDepthwise) {
      by_index(gsmall && all_small({n, x.dims.volume()}), [&](auto ix) {
        using I = decltype(ix);
        depthwise_kernel<Tag, I><<<blocks_for(n), kThreads, 0, stream>>>(xs, ws, bs, os, static_cast<I>(n), g);
      });
      check_launch("convolution (depthwise)");
      if (act) activation(*act, out, out, stream);
      return;
    }
    if (R == 0) {  // no input channels: the bias alone
      by_index(all_small({n}), [&](auto ix) {
        using I = decltype(ix);
        bias_fill_kernel<Tag, I><<<blocks_for(n), kThreads, 0, stream>>>(os, bs, static_cast<I>(n), static_cast<I>(P),
                                                                          static_cast<I>(g.K));
      });
      check_launch("convolution (bias)");
      if (act) activation(*act, out, out, stream);
      return;
    }

    std::byte* wsp = static_cast<std::byte*>(workspace);
    std::byte* base = wsp + kGemmWorkspaceBytes;
    const Chunk ch = chunk_for(g.N, P, z.col_pp + z.tmp_pp);
    for (i64 n0 = 0; n0 < g.N; n0 += ch.images) {
      const i64 nb = std::min(ch.images, g.N - n0);
      for (i64 p0 = 0; p0 < P; p0 += ch.tile) {
        const i64 pt = std::min(ch.tile, P - p0);
        T* col = reinterpret_cast<T*>(base);
        float* tmp = reinterpret_cast<float*>(align_up(base + nb * pt * z.col_pp));
        if (z.path == ConvPath::kIm2col) {
          const i64 total = nb * g.C * g.kvol * pt;
          by_index(gsmall && all_small({total, nb * g.C * g.in_sp}), [&](auto ix) {
            using I = decltype(ix);
            im2col_kernel<Tag, I><<<blocks_for(total), kThreads, 0, stream>>>(
                offset(xs, n0 * g.C * g.in_sp), col, static_cast<I>(total), g, static_cast<I>(pt), static_cast<I>(p0));
          });
          check_launch("convolution (im2col)");
        }
        for (i64 grp = 0; grp < g.G; ++grp) {
          StridedGemm::Shape s;
          s.M = g.Kg;
          s.N = pt;
          s.K = R;
          s.lda = R;
          s.batch = nb;
          s.ab = x.type;
          s.c_float = true;
          const void* b;
          if (z.path == ConvPath::kIm2col) {
            b = offset(col, grp * R * pt);
            s.ldb = pt;
            s.stride_b = g.C * g.kvol * pt;
          } else {  // the input itself: [C/g, P] per (image, group)
            b = offset(xs, (n0 * g.C + grp * g.Cg) * g.in_sp + p0);
            s.ldb = g.in_sp;
            s.stride_b = g.C * g.in_sp;
          }
          void* c;
          if constexpr (narrow) {
            c = offset(tmp, grp * g.Kg * pt);
            s.ldc = pt;
            s.stride_c = g.K * pt;
          } else {
            c = offset(os, (n0 * g.K + grp * g.Kg) * P + p0);
            s.ldc = P;
            s.stride_c = g.K * P;
          }
          gemm_->run(s, offset(ws, grp * g.Kg * R), b, c, wsp, stream);
        }
        if constexpr (narrow) {
          const i64 total = nb * g.K * pt;
          by_index(all_small({total, nb * g.K * P}), [&](auto ix) {
            using I = decltype(ix);
            conv_store_kernel<Tag, I><<<blocks_for(total), kThreads, 0, stream>>>(
                tmp, bs, offset(os, n0 * g.K * P + p0), static_cast<I>(total), static_cast<I>(pt), static_cast<I>(g.K),
                static_cast<I>(P));
          });
          check_launch("convolution (bias and rounding)");
        }
      }
    }
    // float32: the bias and the activation in one pass over the GEMM's result; narrower types
    // were rounded with their bias by conv_store_kernel, the activation follows
    if constexpr (!narrow) bias_activation(out, bs, act, stream);
    else if (act) activation(*act, out, out, stream);
  });
}

// ---- deconvolution -----------------------------------------------------------------------------

namespace {

// How a deconvolution's float32 columns (4 * kvol bytes per image, output channel and input
// position) are covered by chunks of at most kChunkBytes:
//   kImages    `images` whole images (all output channels, all input positions) at a time;
//   kChannels  one image and a block of `channels` output channels of one group;
//   kTiles     one image and one output channel, in tiles of `tile` input positions, which
//              accumulate into a float32 plane (the output's own for float32, else one in the
//              workspace) rounded once after the last tile.
// The column bytes of any chunk are at most 4 * kvol * min(N * K * Q, max(1, kChunkBytes /
// (4 * kvol))), which grows with N and Q (the builder sizes at the largest shapes).
struct DeconvPlan {
  enum Mode { kImages, kChannels, kTiles } mode = kImages;
  i64 images = 1, channels = 0, tile = 0;
  std::size_t total = 0;  // workspace bytes
};

DeconvPlan deconv_plan(const Geo& g, DataType t) {
  DeconvPlan z;
  if (g.N == 0 || g.K == 0 || g.out_sp == 0) return z;
  const i64 cap = static_cast<i64>(kChunkBytes), unit = 4 * g.kvol, Q = g.in_sp;
  if (g.K * Q * unit <= cap) {
    z.mode = DeconvPlan::kImages;
    z.images = std::clamp<i64>(cap / std::max<i64>(1, g.K * Q * unit), 1, std::min(g.N, kMaxBatch));
    z.channels = g.K;
    z.tile = Q;
  } else if (Q * unit <= cap) {
    z.mode = DeconvPlan::kChannels;
    z.channels = std::clamp<i64>(cap / (Q * unit), 1, g.Kg);
    z.tile = Q;
  } else {
    z.mode = DeconvPlan::kTiles;
    z.channels = 1;
    z.tile = std::max<i64>(1, cap / unit);
  }
  z.total = kGemmWorkspaceBytes + kAlign +
            static_cast<std::size_t>(unit * std::min(g.N * g.K * Q, std::max<i64>(1, cap / unit)));
  if (Q * unit > cap && t != DataType::kFLOAT) z.total += kAlign + static_cast<std::size_t>(4 * g.out_sp);
  return z;
}

}  // namespace

DeconvolutionKernel::DeconvolutionKernel(cublasLtHandle_t handle, std::string node_name, DeconvolutionParams p)
    : name_(std::move(node_name)), params_(std::move(p)), gemm_(std::make_unique<StridedGemm>(handle, name_)) {}

DeconvolutionKernel::~DeconvolutionKernel() = default;

std::size_t DeconvolutionKernel::workspace_bytes(const TensorRef& x, const TensorRef& /*kernel: implied by params*/,
                                                 const TensorRef& out) const {
  // Sizing only: the buffers need not exist yet (the builder asks before allocating).
  check_float(x, "deconvolution", "input 0");
  const Geo g = window_geo(params_, x, out, nullptr, nullptr, "deconvolution", true);
  return deconv_plan(g, x.type).total;
}

void DeconvolutionKernel::run(const TensorRef& x, const TensorRef& kernel, const TensorRef* bias, const TensorRef& out,
                              void* workspace, cudaStream_t stream) const {
  checked_volume(x, "deconvolution", "input 0");
  checked_volume(kernel, "deconvolution", "input 1 (kernel)");
  if (bias) checked_volume(*bias, "deconvolution", "input 2 (bias)");
  const i64 n = checked_volume(out, "deconvolution", "the output");
  check_float(x, "deconvolution", "input 0");
  const graph::TensorDesc kd{kernel.type, kernel.dims};
  graph::TensorDesc bd;
  if (bias) bd = {bias->type, bias->dims};
  const Geo g = window_geo(params_, x, out, &kd, bias ? &bd : nullptr, "deconvolution", true);
  if (n == 0) return;
  const DeconvPlan z = deconv_plan(g, x.type);
  if (z.total > 0 && workspace == nullptr)
    fail("deconvolution: this deconvolution needs a workspace (DeconvolutionKernel::workspace_bytes)");
  const bool gsmall = geo_small(g);
  const i64 Q = g.in_sp, OSP = g.out_sp, rows = g.Kg * g.kvol;  // a group's GEMM rows: (kk, kd, kh, kw)
  by_float(x.type, [&](auto tag) {
    using Tag = decltype(tag);
    using T = typename Tag::T;
    constexpr bool narrow = !std::is_same_v<Tag, dev::F32>;
    const T* xs = static_cast<const T*>(x.data);
    const T* ws = static_cast<const T*>(kernel.data);
    const T* bs = bias ? static_cast<const T*>(bias->data) : nullptr;
    T* os = static_cast<T*>(out.data);

    if (g.Cg == 0) {  // no input channels: the bias alone
      by_index(all_small({n}), [&](auto ix) {
        using I = decltype(ix);
        bias_fill_kernel<Tag, I><<<blocks_for(n), kThreads, 0, stream>>>(os, bs, static_cast<I>(n), static_cast<I>(OSP),
                                                                          static_cast<I>(g.K));
      });
      check_launch("deconvolution (bias)");
      return;
    }

    std::byte* wsp = static_cast<std::byte*>(workspace);
    std::byte* base = wsp + kGemmWorkspaceBytes;
    float* col = reinterpret_cast<float*>(base);
    // The columns of output channels [k0, k0 + kb) of group grp (as CPU's deconv_gemm, a slice
    // of its rows): col[i][(kk - k0, kd, kh, kw)][q - q0] = sum over the group's input channels c
    // of kernel[grp * Cg + c][kk][kd, kh, kw] * x[n0 + i][grp * Cg + c][q], for the chunk's nb
    // images (the images' columns `col_stride` elements apart).
    auto gemm = [&](i64 n0, i64 nb, i64 grp, i64 k0, i64 kb, i64 q0, i64 qt, float* c, i64 col_stride) {
      StridedGemm::Shape s;
      s.trans_a = true;  // the kernel's group block is stored [C/g, rows]
      s.M = kb * g.kvol;
      s.N = qt;
      s.K = g.Cg;
      s.lda = rows;
      s.ldb = Q;
      s.ldc = qt;
      s.batch = nb;
      s.stride_b = g.C * Q;
      s.stride_c = col_stride;
      s.ab = x.type;
      s.c_float = true;
      gemm_->run(s, offset(ws, grp * g.Cg * rows + k0 * g.kvol), offset(xs, (n0 * g.C + grp * g.Cg) * Q + q0), c, wsp,
                 stream);
    };
    // Gathers output channels [kbase, kbase + kb) of nb images from whole-image columns.
    auto gather = [&](i64 n0, i64 nb, i64 kbase, i64 kb) {
      const i64 total = nb * kb * OSP;
      by_index(gsmall && all_small({total, nb * g.K * OSP, nb * kb * g.kvol * Q}), [&](auto ix) {
        using I = decltype(ix);
        col2im_kernel<Tag, I, false><<<blocks_for(total), kThreads, 0, stream>>>(
            col, bs, offset(os, n0 * g.K * OSP), nullptr, static_cast<I>(total), g, static_cast<I>(kbase),
            static_cast<I>(kb), I{0}, static_cast<I>(Q));
      });
      check_launch("deconvolution (col2im)");
    };

    if (z.mode == DeconvPlan::kImages) {
      for (i64 n0 = 0; n0 < g.N; n0 += z.images) {
        const i64 nb = std::min(z.images, g.N - n0);
        for (i64 grp = 0; grp < g.G; ++grp)
          gemm(n0, nb, grp, 0, g.Kg, 0, Q, offset(col, grp * rows * Q), g.K * g.kvol * Q);
        gather(n0, nb, 0, g.K);
      }
      return;
    }
    if (z.mode == DeconvPlan::kChannels) {
      for (i64 n0 = 0; n0 < g.N; ++n0)
        for (i64 grp = 0; grp < g.G; ++grp)
          for (i64 k0 = 0; k0 < g.Kg; k0 += z.channels) {
            const i64 kb = std::min(z.channels, g.Kg - k0);
            gemm(n0, 1, grp, k0, kb, 0, Q, col, 0);
            gather(n0, 1, grp * g.Kg + k0, kb);
          }
      return;
    }
    // kTiles: one output channel of one image at a time, in tiles of input positions.
    const bool small = gsmall && all_small({OSP, g.kvol * z.tile});
    float* plane = reinterpret_cast<float*>(align_up(base + 4 * g.kvol * z.tile));
    for (i64 n0 = 0; n0 < g.N; ++n0)
      for (i64 k = 0; k < g.K; ++k) {
        const i64 grp = k / g.Kg;
        T* dst = offset(os, (n0 * g.K + k) * OSP);
        float* acc = narrow ? plane : reinterpret_cast<float*>(dst);
        by_index(small, [&](auto ix) {
          using I = decltype(ix);
          acc_init_kernel<Tag, I><<<blocks_for(OSP), kThreads, 0, stream>>>(acc, bs ? bs + k : nullptr,
                                                                             static_cast<I>(OSP), static_cast<I>(OSP));
        });
        check_launch("deconvolution (bias)");
        for (i64 q0 = 0; q0 < Q; q0 += z.tile) {
          const i64 qt = std::min(z.tile, Q - q0);
          gemm(n0, 1, grp, k % g.Kg, 1, q0, qt, col, 0);
          by_index(small, [&](auto ix) {
            using I = decltype(ix);
            col2im_kernel<Tag, I, true><<<blocks_for(OSP), kThreads, 0, stream>>>(
                col, bs, nullptr, acc, static_cast<I>(OSP), g, static_cast<I>(k), I{1}, static_cast<I>(q0),
                static_cast<I>(qt));
          });
          check_launch("deconvolution (col2im)");
        }
        if constexpr (narrow) {
          by_index(small, [&](auto ix) {
            using I = decltype(ix);
            round_kernel<Tag, I><<<blocks_for(OSP), kThreads, 0, stream>>>(acc, dst, static_cast<I>(OSP));
          });
          check_launch("deconvolution (rounding)");
        }
      }
  });
}

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
