#include "backends/cuda/gemm.h"

#include <algorithm>

#include "tensoracle/errors.h"

namespace tensoracle::cuda {

namespace {

using i64 = std::int64_t;
using MO = MatrixOperation;

const char* lt_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "NOT_SUPPORTED";
    default: return "unknown status";
  }
}

cudaDataType_t lt_type(DataType t, const std::string& name) {
  switch (t) {
    case DataType::kFLOAT: return CUDA_R_32F;
    case DataType::kHALF: return CUDA_R_16F;
    case DataType::kBF16: return CUDA_R_16BF;
    default:
      throw UnsupportedError("[cuda] node '" + name + "': matrix multiply in " + std::string(type_name(t)) +
                             " is not supported (float32, float16, bfloat16)");
  }
}

// An int8 product's int32 sums are exact while K * 128 * 128 < 2^31.
constexpr std::int64_t kInt8ExactK = (std::int64_t{1} << 31) / (128 * 128) - 1;

std::size_t round_up(std::size_t n) { return (n + 255) / 256 * 256; }
std::size_t round_down(std::size_t n) { return n / 256 * 256; }

// The largest power of two (up to 256) that divides `x` (256 for 0).
std::uint32_t alignment_of(std::uint64_t x) {
  std::uint32_t a = 256;
  while (a > 1 && x % a != 0) a /= 2;
  return a;
}

template <class T>
void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const T& v, const char* what) {
  check_lt(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof v), what);
}
template <class T>
void set_attr(cublasLtMatrixLayout_t d, cublasLtMatrixLayoutAttribute_t a, const T& v, const char* what) {
  check_lt(cublasLtMatrixLayoutSetAttribute(d, a, &v, sizeof v), what);
}

}  // namespace

void check_lt(cublasStatus_t s, const std::string& what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw Error("[cuda] " + what + ": cuBLASLt status " + lt_status_name(s));
}

// The GEMMs of one matrix multiply at given shapes: cuBLASLt is column-major, so the row-major
// C (M x N) = op0(A) (M x K) x op1(B) (K x N) runs as C^T = op1(B)^T x op0(A)^T, with the
// second operand's memory as cuBLASLt's "A" and the first's as its "B".
struct Gemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::uint32_t alignment[3] = {256, 256, 256};  // of cuBLASLt's A, B and C/D pointers
  std::uint32_t min_alignment = 256;
  std::string description;  // for messages
  bool empty = false;    // no output elements
  bool zero_k = false;   // K = 0: the output is zeros
  bool fallback = false;  // a quantized product cuBLASLt cannot run: dequantize, then a float GEMM
  std::size_t out_bytes = 0;
  // One entry per cuBLASLt call: element offsets into a, b and out (one call unless the
  // operands broadcast along different batch dims).
  std::vector<std::tuple<i64, i64, i64>> calls;

  ~Plan() {
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

Gemm::Gemm(cublasLtHandle_t handle, std::string name, MatrixMultiplyParams p, GemmEpilogue epilogue, DataType quantized,
           std::size_t lt_workspace)
    : handle_(handle), name_(std::move(name)), params_(p), epilogue_(epilogue), quantized_(quantized),
      lt_workspace_(round_down(std::min(lt_workspace, kGemmWorkspaceBytes))) {
  if (quantized_ == DataType::kFLOAT) return;
  if (quantized_ != DataType::kINT8 && quantized_ != DataType::kFP8)
    throw UnsupportedError("[cuda] node '" + name_ + "': a quantized matrix multiply in " + std::string(type_name(quantized_)));
  if (p.op0 != MO::kNONE || p.op1 != MO::kTRANSPOSE)
    throw UnsupportedError("[cuda] node '" + name_ + "': a quantized matrix multiply needs its first operand as is and the "
                           "second transposed");
  float_gemm_ = std::make_unique<Gemm>(handle, name_, p, epilogue, DataType::kFLOAT, lt_workspace_);
}

Gemm::~Gemm() = default;

bool Gemm::may_fall_back(const TensorRef& a, const TensorRef& b) const {
  if (quantized_ == DataType::kFLOAT) return false;
  if (a.dims.rank() < 2 || b.dims.rank() < 2) return true;
  const i64 n = b.dims[b.dims.rank() - 2], k = b.dims[b.dims.rank() - 1];
  return n % 16 != 0 || k % 16 != 0 || (quantized_ == DataType::kINT8 && k > kInt8ExactK);
}

std::size_t Gemm::workspace_bytes(const TensorRef& a, const TensorRef& b, const TensorRef& out) const {
  if (quantized_ == DataType::kFLOAT) return lt_workspace_;
  const auto volume = [](const Dims& d) { return static_cast<std::size_t>(std::max<i64>(d.volume(), 0)); };
  std::size_t extra = 0;
  if (quantized_ == DataType::kINT8) extra = round_up(volume(out.dims) * 4);
  if (may_fall_back(a, b)) {
    const std::size_t es = element_size(out.type);
    extra = std::max(extra, round_up(volume(a.dims) * es) + round_up(volume(b.dims) * es));
  }
  return lt_workspace_ + extra;
}

const Gemm::Plan& Gemm::plan_for(const TensorRef& a, const TensorRef& b, const void* bias, const TensorRef& out,
                                 GemmScales scales) const {
  const auto addr = [](const void* p) { return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p)); };
  std::vector<i64> key;
  for (const Dims* d : {&a.dims, &b.dims}) {
    key.push_back(d->rank());
    key.insert(key.end(), d->begin(), d->end());
  }
  key.push_back(alignment_of(addr(a.data)));
  key.push_back(alignment_of(addr(b.data)));
  key.push_back(alignment_of(addr(out.data)));
  key.push_back(static_cast<i64>(addr(bias)));
  key.push_back(static_cast<i64>(addr(scales.a)));
  key.push_back(static_cast<i64>(addr(scales.b)));
  std::lock_guard lock(mutex_);
  if (auto it = plans_.find(key); it != plans_.end()) return *it->second;
  auto plan = describe(a, b, bias, out, scales);
  if (!plan->empty && !plan->zero_k && !plan->fallback) {
    bool chosen = false;
    // Timed on 256-byte aligned buffers: an algorithm may rely on that, and AlgoCheck does not
    // see pointers, so other alignments take the heuristic's choice for them.
    if (has_preferred_ && plan->min_alignment >= 256) {
      cublasLtMatmulHeuristicResult_t check{};
      chosen = cublasLtMatmulAlgoCheck(handle_, plan->desc, plan->la, plan->lb, plan->lc, plan->lc, &preferred_, &check) ==
                   CUBLAS_STATUS_SUCCESS &&
               check.workspaceSize <= lt_workspace_;
      if (chosen) plan->algo = preferred_;
    }
    if (!chosen) {
      if (quantized_ == DataType::kFLOAT) {
        plan->algo = heuristic(*plan, 1).front();
      } else {
        try {
          plan->algo = heuristic(*plan, 1).front();
        } catch (const Error&) {
          plan->fallback = true;  // no int8/fp8 algorithm for this shape or alignment
        }
      }
    }
  }
  return *plans_.emplace(std::move(key), std::move(plan)).first->second;
}

std::unique_ptr<Gemm::Plan> Gemm::describe(const TensorRef& a, const TensorRef& b, const void* bias, const TensorRef& out,
                                           GemmScales scales) const {
  const bool int8 = quantized_ == DataType::kINT8;
  if (quantized_ != DataType::kFLOAT && (a.type != quantized_ || b.type != quantized_))
    throw InvalidArgument("[cuda] node '" + name_ + "': a " + std::string(type_name(quantized_)) +
                          " matrix multiply got operands of types " + std::string(type_name(a.type)) + " and " +
                          std::string(type_name(b.type)));
  // Element sizes: of the operands, and of what cuBLASLt writes (an int8 product: int32 sums).
  const std::size_t es_in = element_size(a.type), es = int8 ? 4 : element_size(out.type);
  const auto addr = [](const void* p) { return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p)); };
  auto plan = std::make_unique<Plan>();
  const Dims& da = a.dims;
  const Dims& db = b.dims;
  const MO op0 = params_.op0, op1 = params_.op1;
  const int ma = op0 == MO::kVECTOR ? 1 : 2, mb = op1 == MO::kVECTOR ? 1 : 2;
  const int br = da.rank() - ma;
  i64 M, K, N;
  if (op0 == MO::kVECTOR) M = 1, K = da[da.rank() - 1];
  else if (op0 == MO::kNONE) M = da[da.rank() - 2], K = da[da.rank() - 1];
  else M = da[da.rank() - 1], K = da[da.rank() - 2];
  if (op1 == MO::kVECTOR) N = 1;
  else if (op1 == MO::kNONE) N = db[db.rank() - 1];
  else N = db[db.rank() - 2];
  (void)mb;

  // Batches: the output's, and whether each operand has all of them or none.
  i64 batches = 1;
  bool a_one = true, b_one = true, a_full = true, b_full = true;
  std::vector<i64> ob(static_cast<std::size_t>(br));
  for (int i = 0; i < br; ++i) {
    ob[static_cast<std::size_t>(i)] = std::max(da[i], db[i]);
    batches *= ob[static_cast<std::size_t>(i)];
    a_one = a_one && da[i] == 1;
    b_one = b_one && db[i] == 1;
    a_full = a_full && da[i] == ob[static_cast<std::size_t>(i)];
    b_full = b_full && db[i] == ob[static_cast<std::size_t>(i)];
  }
  plan->out_bytes = static_cast<std::size_t>(batches * M * N) * element_size(out.type);
  if (batches * M * N == 0) {
    plan->empty = true;
    return plan;
  }
  if (K == 0) {
    plan->zero_k = true;
    return plan;
  }
  if (int8 && K > kInt8ExactK) {
    plan->fallback = true;
    return plan;
  }

  const i64 a_mat = M * K, b_mat = K * N, c_mat = M * N;
  i64 rows_a_total = M;  // cuBLASLt's n: rows of A, times the folded batch
  int batch_count = 1;
  i64 stride_a = 0, stride_b = 0, stride_c = 0;
  if (b_one && op0 != MO::kTRANSPOSE) {
    rows_a_total = M * batches;  // consecutive A rows are consecutive C rows
    plan->calls.emplace_back(0, 0, 0);
  } else if ((a_one || a_full) && (b_one || b_full)) {
    batch_count = static_cast<int>(batches);
    stride_a = a_one ? 0 : a_mat;
    stride_b = b_one ? 0 : b_mat;
    stride_c = c_mat;
    plan->calls.emplace_back(0, 0, 0);
  } else {
    // Mixed broadcasting: one GEMM per output matrix.
    for (i64 o = 0; o < batches; ++o) {
      i64 rem = o, ia = 0, ib = 0, sa = 1, sb = 1;
      for (int i = br - 1; i >= 0; --i) {
        const i64 idx = rem % ob[static_cast<std::size_t>(i)];
        rem /= ob[static_cast<std::size_t>(i)];
        ia += (da[i] == 1 ? 0 : idx) * sa;
        ib += (db[i] == 1 ? 0 : idx) * sb;
        sa *= da[i];
        sb *= db[i];
      }
      plan->calls.emplace_back(ia * a_mat, ib * b_mat, o * c_mat);
    }
  }

  const cudaDataType_t t = lt_type(out.type, name_);
  const cudaDataType_t t_in = int8 ? CUDA_R_8I : quantized_ == DataType::kFP8 ? CUDA_R_8F_E4M3 : t;
  const cudaDataType_t t_out = int8 ? CUDA_R_32I : t;
  const std::string where = "node '" + name_ + "'";
  check_lt(int8 ? cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32I, CUDA_R_32I)
                : cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
           where + ": matmul descriptor");
  if (quantized_ == DataType::kFP8) {
    // cuBLASLt's A is our second operand.
    set_attr(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, scales.b, "A_SCALE_POINTER");
    set_attr(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, scales.a, "B_SCALE_POINTER");
  }
  // cuBLASLt's A is our second operand.
  const cublasOperation_t ta = op1 == MO::kNONE ? CUBLAS_OP_N : CUBLAS_OP_T;
  const cublasOperation_t tb = op0 == MO::kTRANSPOSE ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_attr(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, ta, "TRANSA");
  set_attr(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, tb, "TRANSB");
  if (epilogue_ != GemmEpilogue::kNONE && !int8) {  // an int8 product's bias: scale_accumulator adds it
    const cublasLtEpilogue_t e = epilogue_ == GemmEpilogue::kBIAS        ? CUBLASLT_EPILOGUE_BIAS
                                 : epilogue_ == GemmEpilogue::kBIAS_RELU ? CUBLASLT_EPILOGUE_RELU_BIAS
                                                                         : CUBLASLT_EPILOGUE_GELU_BIAS;
    set_attr(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, e, "EPILOGUE");
    const cudaDataType_t bias_type = t;
    set_attr(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type, "BIAS_DATA_TYPE");
    // The bias is a constant of the engine: one address for every execution.
    set_attr(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias, "BIAS_POINTER");
  }
  // Stored shapes (column-major rows x cols, leading dimension = rows).
  const i64 la_rows = op1 == MO::kNONE ? N : K, la_cols = op1 == MO::kNONE ? K : N;
  const i64 lb_rows = op0 == MO::kTRANSPOSE ? rows_a_total : K, lb_cols = op0 == MO::kTRANSPOSE ? K : rows_a_total;
  check_lt(cublasLtMatrixLayoutCreate(&plan->la, t_in, static_cast<std::uint64_t>(la_rows), static_cast<std::uint64_t>(la_cols), la_rows),
           where + ": layout of input 1");
  check_lt(cublasLtMatrixLayoutCreate(&plan->lb, t_in, static_cast<std::uint64_t>(lb_rows), static_cast<std::uint64_t>(lb_cols), lb_rows),
           where + ": layout of input 0");
  check_lt(cublasLtMatrixLayoutCreate(&plan->lc, t_out, static_cast<std::uint64_t>(N), static_cast<std::uint64_t>(rows_a_total), N),
           where + ": layout of the output");
  if (batch_count > 1) {
    set_attr(plan->la, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, batch_count, "BATCH_COUNT");
    set_attr(plan->lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, batch_count, "BATCH_COUNT");
    set_attr(plan->lc, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, batch_count, "BATCH_COUNT");
    set_attr(plan->la, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride_b, "STRIDED_BATCH_OFFSET");
    set_attr(plan->lb, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride_a, "STRIDED_BATCH_OFFSET");
    set_attr(plan->lc, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride_c, "STRIDED_BATCH_OFFSET");
  }

  // What every call's pointers guarantee: the base's alignment and each call's offset's.
  // An int8 product writes its sums to the (256-byte aligned) scratch.
  std::uint32_t al_a = alignment_of(addr(b.data)), al_b = alignment_of(addr(a.data)),
                al_c = int8 ? 256 : alignment_of(addr(out.data));
  for (const auto& [oa, ob_, oc] : plan->calls) {
    al_a = std::min(al_a, alignment_of(static_cast<std::uint64_t>(ob_) * es_in));
    al_b = std::min(al_b, alignment_of(static_cast<std::uint64_t>(oa) * es_in));
    al_c = std::min(al_c, alignment_of(static_cast<std::uint64_t>(oc) * es));
  }
  plan->alignment[0] = al_a;
  plan->alignment[1] = al_b;
  plan->alignment[2] = al_c;
  plan->min_alignment = std::min({al_a, al_b, al_c});
  plan->description = std::string(type_name(quantized_ == DataType::kFLOAT ? out.type : quantized_)) + ", M=" + std::to_string(M) + " N=" + std::to_string(N) +
                      " K=" + std::to_string(K);
  return plan;
}

std::vector<cublasLtMatmulAlgo_t> Gemm::heuristic(const Plan& plan, int count) const {
  const std::string where = "node '" + name_ + "'";
  cublasLtMatmulPreference_t pref = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&pref), where + ": preference");
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<std::size_t>(count));
  int found = 0;
  const std::uint64_t ws = lt_workspace_;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &plan.alignment[0], sizeof(std::uint32_t));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &plan.alignment[1], sizeof(std::uint32_t));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &plan.alignment[2], sizeof(std::uint32_t));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &plan.alignment[2], sizeof(std::uint32_t));
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.la, plan.lb, plan.lc, plan.lc, pref, count,
                                                           results.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  check_lt(st, where + ": choosing a GEMM algorithm");
  if (found == 0)
    throw Error("[cuda] " + where + ": cuBLASLt has no algorithm for this matrix multiply (" + plan.description + ")");
  std::vector<cublasLtMatmulAlgo_t> algos;
  for (int i = 0; i < found; ++i) algos.push_back(results[static_cast<std::size_t>(i)].algo);
  return algos;
}

std::vector<cublasLtMatmulAlgo_t> Gemm::candidates(const TensorRef& a, const TensorRef& b, const void* bias,
                                                   const TensorRef& out, int count, GemmScales scales) const {
  auto plan = describe(a, b, bias, out, scales);
  if (plan->empty || plan->zero_k || plan->fallback) return {};
  try {
    return heuristic(*plan, count);
  } catch (const Error&) {
    if (quantized_ == DataType::kFLOAT) throw;
    return {};  // a quantized shape cuBLASLt cannot run: nothing to time
  }
}

void Gemm::run_with(const cublasLtMatmulAlgo_t& algo, const TensorRef& a, const TensorRef& b, const void* bias,
                    const TensorRef& out, void* workspace, cudaStream_t stream, GemmScales scales) const {
  auto plan = describe(a, b, bias, out, scales);
  if (plan->empty || plan->zero_k || plan->fallback) return;
  launch(*plan, algo, a, b, bias, out, workspace, stream, scales);
}

void Gemm::run_dequantized(const TensorRef& a, const TensorRef& b, const void* bias, const TensorRef& out, void* workspace,
                           cudaStream_t stream, GemmScales scales) const {
  if (!may_fall_back(a, b))
    throw Error("[cuda] node '" + name_ + "': cuBLASLt has no " + std::string(type_name(quantized_)) +
                " algorithm for operands " + a.dims.str() + " and " + b.dims.str() +
                " (are the tensors' addresses 16-byte aligned?)");
  auto* base = static_cast<std::byte*>(workspace) + lt_workspace_;
  const TensorRef da{base, out.type, a.dims};
  const TensorRef db{base + round_up(static_cast<std::size_t>(a.dims.volume()) * element_size(out.type)), out.type, b.dims};
  cuda::dequantize(a, TensorRef{const_cast<void*>(scales.a), DataType::kFLOAT, Dims{1}}, 0, da, stream);
  cuda::dequantize(b, TensorRef{const_cast<void*>(scales.b), DataType::kFLOAT, Dims{1}}, 0, db, stream);
  float_gemm_->run(da, db, bias, out, workspace, stream);
}

void Gemm::run(const TensorRef& a, const TensorRef& b, const void* bias, const TensorRef& out, void* workspace,
               cudaStream_t stream, GemmScales scales) const {
  const Plan& plan = plan_for(a, b, bias, out, scales);
  if (plan.empty) return;
  if (plan.fallback) {
    run_dequantized(a, b, bias, out, workspace, stream, scales);
    return;
  }
  if (plan.zero_k && quantized_ == DataType::kINT8) {  // zero sums, then the scale pass (and its bias)
    void* sums = static_cast<std::byte*>(workspace) + lt_workspace_;
    if (cudaMemsetAsync(sums, 0, static_cast<std::size_t>(out.dims.volume()) * 4, stream) != cudaSuccess)
      throw Error("[cuda] node '" + name_ + "': clearing the int32 sums failed");
    cuda::scale_accumulator(TensorRef{sums, DataType::kINT32, out.dims}, scales.a, scales.b,
                            epilogue_ == GemmEpilogue::kNONE ? nullptr : bias, out, stream);
    return;
  }
  if (plan.zero_k) {
    if (epilogue_ != GemmEpilogue::kNONE)
      throw UnsupportedError("[cuda] node '" + name_ + "': a fused bias on a matrix multiply with K = 0");
    if (cudaMemsetAsync(out.data, 0, plan.out_bytes, stream) != cudaSuccess)
      throw Error("[cuda] node '" + name_ + "': clearing the output failed");
    return;
  }
  launch(plan, plan.algo, a, b, bias, out, workspace, stream, scales);
}

void Gemm::launch(const Plan& plan, const cublasLtMatmulAlgo_t& algo, const TensorRef& a, const TensorRef& b,
                  const void* bias, const TensorRef& out, void* workspace, cudaStream_t stream, GemmScales scales) const {
  const bool int8 = quantized_ == DataType::kINT8;
  const float alpha = 1.f, beta = 0.f;
  const std::int32_t alpha_i = 1, beta_i = 0;
  const std::size_t es_in = element_size(a.type), es = int8 ? 4 : element_size(out.type);
  const auto* pa = static_cast<const std::byte*>(a.data);
  const auto* pb = static_cast<const std::byte*>(b.data);
  // An int8 product's sums go to the scratch after cuBLASLt's own.
  auto* pc = int8 ? static_cast<std::byte*>(workspace) + lt_workspace_ : static_cast<std::byte*>(out.data);
  for (const auto& [oa, ob, oc] : plan.calls) {
    void* c = pc + oc * static_cast<i64>(es);
    check_lt(cublasLtMatmul(handle_, plan.desc, int8 ? static_cast<const void*>(&alpha_i) : &alpha,
                            pb + ob * static_cast<i64>(es_in), plan.la, pa + oa * static_cast<i64>(es_in), plan.lb,
                            int8 ? static_cast<const void*>(&beta_i) : &beta, c, plan.lc, c, plan.lc, &algo, workspace,
                            lt_workspace_, stream),
             "node '" + name_ + "': matrix multiply (" + plan.description + ")");
  }
  if (int8)
    cuda::scale_accumulator(TensorRef{pc, DataType::kINT32, out.dims}, scales.a, scales.b,
                            epilogue_ == GemmEpilogue::kNONE ? nullptr : bias, out, stream);
}

std::string algo_to_hex(const cublasLtMatmulAlgo_t& algo) {
  static const char* digits = "0123456789abcdef";
  std::string hex;
  const auto* bytes = reinterpret_cast<const unsigned char*>(&algo);
  for (std::size_t i = 0; i < sizeof algo; ++i) {
    hex += digits[bytes[i] >> 4];
    hex += digits[bytes[i] & 15];
  }
  return hex;
}

bool algo_from_hex(const std::string& hex, cublasLtMatmulAlgo_t& algo) {
  if (hex.size() != 2 * sizeof algo) return false;
  auto* bytes = reinterpret_cast<unsigned char*>(&algo);
  auto nibble = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  for (std::size_t i = 0; i < sizeof algo; ++i) {
    int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    bytes[i] = static_cast<unsigned char>(hi * 16 + lo);
  }
  return true;
}

}  // namespace tensoracle::cuda
