// Internal to the CUDA backend: matrix multiplies through cuBLASLt, in float32 (CUBLAS_COMPUTE_32F:
// never TF32), float16 and bfloat16 (float32 accumulation), with the same shape rules as the
// CPU backend (graph/ops/matrix_multiply.cpp): NONE / TRANSPOSE / VECTOR operands and batch
// broadcasting. A batch that only the first operand has is folded into its rows (one GEMM
// instead of a batched one); other batches run as one strided-batched GEMM, or one GEMM per
// output matrix when the operands broadcast along different batch dims.
//
// An optional fused epilogue adds a bias row (one value per output column) and applies ReLU or
// GELU (tanh form) in the GEMM's own epilogue.
//
// Quantized products (Q/DQ folded by the builder): int8 operands multiply on the tensor cores
// with exact int32 sums (CUBLAS_COMPUTE_32I) into scratch, which scale_accumulator scales by
// both operands' per-tensor scales into the float output, adding a fused bias row in the same
// pass (cuBLASLt's int8 path has no float epilogue; no activation is fused); fp8 e4m3 operands multiply with
// float32 accumulation and cuBLASLt applies the scales (A/B_SCALE_POINTER) and the epilogue
// itself. Both take the tensor cores' layout: the first operand as is, the second transposed
// ([N, K], op1 = TRANSPOSE). When cuBLASLt has no quantized algorithm for a shape (K or N not
// a multiple of 16, K beyond the int32-exact bound, unaligned pointers), the operands are
// dequantized into scratch and multiplied in the float type — the unfolded graph's arithmetic.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cuda/kernels.h"

namespace tensoracle::cuda {

enum class GemmEpilogue { kNONE, kBIAS, kBIAS_RELU, kBIAS_GELU_TANH };

// cuBLASLt's scratch for one GEMM by default; a Gemm made with less (a build's workspace limit)
// only takes algorithms that fit in it.
inline constexpr std::size_t kGemmWorkspaceBytes = 32u << 20;

// A quantized product's per-tensor scales: one float32 each, device addresses that stay fixed
// (engine constants).
struct GemmScales {
  const void* a = nullptr;
  const void* b = nullptr;
};

class Gemm {
 public:
  // `name` names the node in error messages; `quantized` is kINT8 or kFP8 for a folded Q/DQ
  // product, kFLOAT otherwise; `lt_workspace`: the most scratch cuBLASLt may use (at most
  // kGemmWorkspaceBytes; rounded down to 256 bytes).
  Gemm(cublasLtHandle_t handle, std::string name, MatrixMultiplyParams p, GemmEpilogue epilogue,
       DataType quantized = DataType::kFLOAT, std::size_t lt_workspace = kGemmWorkspaceBytes);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // out = op0(a) x op1(b) [+ bias] [activation]; `bias` (the output's type, N elements, an
  // engine constant: the same address on every call) only with a bias epilogue. `workspace`
  // holds workspace_bytes() for these shapes.
  void run(const TensorRef& a, const TensorRef& b, const void* bias, const TensorRef& out, void* workspace,
           cudaStream_t stream, GemmScales scales = {}) const;

  // The scratch run() needs at these shapes: cuBLASLt's (lt_workspace), plus an int8 product's int32
  // sums, plus room for dequantized operands where a quantized product may fall back.
  std::size_t workspace_bytes(const TensorRef& a, const TensorRef& b, const TensorRef& out) const;

  // The algorithm the engine's tactic stores (timed at build time): used for every shape
  // cuBLASLt accepts it for (cublasLtMatmulAlgoCheck) when the pointers are 256-byte aligned (as
  // when it was timed);
  // other shapes take the heuristic's first choice.
  void prefer(const cublasLtMatmulAlgo_t& algo) { preferred_ = algo; has_preferred_ = true; }
  // Build-time tuning: up to `count` of the heuristic's candidates for these operands, and a run
  // with one of them.
  std::vector<cublasLtMatmulAlgo_t> candidates(const TensorRef& a, const TensorRef& b, const void* bias,
                                               const TensorRef& out, int count, GemmScales scales = {}) const;
  void run_with(const cublasLtMatmulAlgo_t& algo, const TensorRef& a, const TensorRef& b, const void* bias,
                const TensorRef& out, void* workspace, cudaStream_t stream, GemmScales scales = {}) const;

  struct Plan;

 private:
  const Plan& plan_for(const TensorRef& a, const TensorRef& b, const void* bias, const TensorRef& out,
                       GemmScales scales) const;
  // Descriptors of a plan (no algorithm yet); `alignment` receives the pointers' guarantees.
  std::unique_ptr<Plan> describe(const TensorRef& a, const TensorRef& b, const void* bias, const TensorRef& out,
                                 GemmScales scales) const;
  std::vector<cublasLtMatmulAlgo_t> heuristic(const Plan& plan, int count) const;
  void launch(const Plan& plan, const cublasLtMatmulAlgo_t& algo, const TensorRef& a, const TensorRef& b,
              const void* bias, const TensorRef& out, void* workspace, cudaStream_t stream, GemmScales scales) const;
  // Whether a quantized product at these shapes might need the dequantizing fallback.
  bool may_fall_back(const TensorRef& a, const TensorRef& b) const;
  void run_dequantized(const TensorRef& a, const TensorRef& b, const void* bias, const TensorRef& out, void* workspace,
                       cudaStream_t stream, GemmScales scales) const;

  cublasLtHandle_t handle_;
  std::string name_;
  MatrixMultiplyParams params_;
  GemmEpilogue epilogue_;
  DataType quantized_;
  std::size_t lt_workspace_;
  std::unique_ptr<Gemm> float_gemm_;  // a quantized product's fallback
  cublasLtMatmulAlgo_t preferred_{};
  bool has_preferred_ = false;
  mutable std::mutex mutex_;
  // Descriptors and the chosen algorithm per (shapes, pointer alignments).
  mutable std::map<std::vector<std::int64_t>, std::unique_ptr<Plan>> plans_;
};

// cublasLtMatmulAlgo_t <-> 128 hex digits (how a timed choice is stored in an engine's tactic).
std::string algo_to_hex(const cublasLtMatmulAlgo_t& algo);
bool algo_from_hex(const std::string& hex, cublasLtMatmulAlgo_t& algo);

// Throws tensoracle::Error("[cuda] <what>: cuBLASLt status <name>") unless `s` is success.
void check_lt(cublasStatus_t s, const std::string& what);

}  // namespace tensoracle::cuda
