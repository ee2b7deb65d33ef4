// Internal to the backends: the einsum plan both backends run (backends/cpu/ops/einsum.cpp,
// backends/cuda/ops/einsum.cu). One input is a permute-and-reduce; two inputs lower to
// C[batch, M, N] = A[batch, M, K] x B[batch, K, N]: an operand is read in place when its layout
// already is [batch, M, K] or [batch, K, M] (resp. B) in the GEMM's type, else permuted (and
// reduced over the letters only it has) into the workspace; the GEMM result is the output when
// it has that layout, else permuted into it. Plain host C++ (checks.h).
#pragma once

#include <span>
#include <string>

#include "backends/common/checks.h"
#include "tensoracle/network.h"

namespace tensoracle::backends::common {

// One operand as a strided view over its distinct letters (a repeated letter, as in "ii",
// reads the diagonal: its stride is the sum of the repeated positions' strides).
struct EinsumView {
  std::string letters;
  i64 stride[26] = {};
};

// The type a two-input einsum's GEMM multiplies in.
enum class EinsumGemm {
  kFloat32,    // always float32 (the CPU's cblas_sgemm)
  kInputType,  // the inputs' type, unless an operand is reduced: its float32 sums are not values
               // of a narrow type, so then float32 (the CUDA backend's cuBLASLt GEMM)
};

struct EinsumPlan {
  int inputs = 1;
  DataType type = DataType::kFLOAT;  // the inputs' and the output's
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

bool contains(const std::string& s, char c);

// The equation checked against the inputs and the output, and the plan (throws through `fail`).
EinsumPlan plan_einsum(const Fail& fail, const EinsumParams& params, std::span<const TensorRef> inputs,
                       const TensorRef& out, EinsumGemm gemm);

// What an einsum checks before it runs: every input's and the output's volume (checked_volume),
// then plan_einsum. Sets n to the output's volume.
EinsumPlan check_einsum(const Fail& fail, const EinsumParams& params, std::span<const TensorRef> inputs,
                        const TensorRef& out, EinsumGemm gemm, i64& n);

// One input: the letters it sums over (its letters the output lacks).
std::string einsum_reduced_letters(const EinsumPlan& p);

// Two inputs: the strides, per letter, of the contiguous C[batch, M, N].
void einsum_c_strides(const EinsumPlan& p, i64 (&stride)[26]);

}  // namespace tensoracle::backends::common
