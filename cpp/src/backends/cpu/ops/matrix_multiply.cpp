// The CPU backend's matrix multiply: OpenBLAS sgemm per batch, float32 accumulation for every
// float type (float16/bfloat16 operands are widened to float32 in the workspace, and the
// float32 result is rounded once into the output).
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/op_kernel.h"
#include "backends/cpu/kernels_util.h"
#include "core/numeric.h"
#include "tensoracle/errors.h"

namespace tensoracle::cpu {

namespace {

using i64 = std::int64_t;
using detail::fail;
using MO = MatrixOperation;

std::string tn(DataType t) { return std::string(type_name(t)); }

// The GEMMs of one matrix multiply, in cblas's row-major terms: per batch index,
// C (M x N, ldc = N) = op(A) (M x K) x op(B) (K x N). A VECTOR operand is a 1 x K row (op0)
// or a K x 1 column, stored as a transposed 1 x K row (op1); the output's layout is the same
// with the vector's dim left out.
struct GemmPlan {
  i64 M = 1, N = 1, K = 1;
  bool trans_a = false, trans_b = false;
  i64 lda = 1, ldb = 1;      // the stored rows' lengths
  i64 a_mat = 1, b_mat = 1;  // elements per matrix
  int batch_rank = 0;
  i64 batch[Dims::kMaxRank] = {};     // the output's batch dims
  i64 a_stride[Dims::kMaxRank] = {};  // in matrices; 0 where the operand is broadcast
  i64 b_stride[Dims::kMaxRank] = {};
  i64 batches = 1;                 // output matrices
  i64 a_count = 1, b_count = 1;    // matrices each operand holds
  Dims out_dims;
};

// The rules of graph/ops/matrix_multiply.cpp, on known dims.
GemmPlan plan_gemm(const MatrixMultiplyParams& p, const TensorRef& a, const TensorRef& b) {
  auto valid_op = [](MO op) { return op == MO::kNONE || op == MO::kTRANSPOSE || op == MO::kVECTOR; };
  if (!valid_op(p.op0) || !valid_op(p.op1)) fail("matmul: unknown matrix operation");
  const Dims& da = a.dims;
  const Dims& db = b.dims;
  const int ma = p.op0 == MO::kVECTOR ? 1 : 2, mb = p.op1 == MO::kVECTOR ? 1 : 2;
  if (da.rank() < ma || db.rank() < mb)
    fail("matmul: input dims " + da.str() + " and " + db.str() + " are too small for their operations");
  GemmPlan g;
  i64 kb;
  if (p.op0 == MO::kVECTOR) {
    g.M = 1;
    g.K = g.lda = g.a_mat = da[da.rank() - 1];
  } else {
    const i64 r = da[da.rank() - 2], c = da[da.rank() - 1];
    g.trans_a = p.op0 == MO::kTRANSPOSE;
    g.M = g.trans_a ? c : r;
    g.K = g.trans_a ? r : c;
    g.lda = c;
    g.a_mat = r * c;
  }
  if (p.op1 == MO::kVECTOR) {
    g.N = 1;
    g.trans_b = true;
    kb = g.ldb = g.b_mat = db[db.rank() - 1];
  } else {
    const i64 r = db[db.rank() - 2], c = db[db.rank() - 1];
    g.trans_b = p.op1 == MO::kTRANSPOSE;
    kb = g.trans_b ? c : r;
    g.N = g.trans_b ? r : c;
    g.ldb = c;
    g.b_mat = r * c;
  }
  if (g.K != kb) fail("matmul: inner dimensions differ: " + da.str() + " gives K=" + std::to_string(g.K) + ", " +
                      db.str() + " gives K=" + std::to_string(kb));
  g.batch_rank = da.rank() - ma;
  if (db.rank() - mb != g.batch_rank)
    fail("matmul: inputs " + da.str() + " and " + db.str() + " differ in their number of batch dims");
  std::vector<i64> out;
  for (int i = g.batch_rank - 1; i >= 0; --i) {
    const i64 x = da[i], y = db[i];
    if (x != y && x != 1 && y != 1)
      fail("matmul: batch dim " + std::to_string(i) + " differs: " + da.str() + " vs " + db.str());
    g.batch[i] = x == 1 ? y : x;
    g.a_stride[i] = x == 1 ? 0 : g.a_count;
    g.b_stride[i] = y == 1 ? 0 : g.b_count;
    g.a_count *= x;
    g.b_count *= y;
    g.batches *= g.batch[i];
  }
  for (int i = 0; i < g.batch_rank; ++i) out.push_back(g.batch[i]);
  if (p.op0 != MO::kVECTOR) out.push_back(g.M);
  if (p.op1 != MO::kVECTOR) out.push_back(g.N);
  g.out_dims = Dims(std::span<const i64>(out));
  return g;
}

void check_int(i64 v, const char* what) {
  if (v > INT_MAX)
    throw UnsupportedError("[cpu] matmul: " + std::string(what) + " " + std::to_string(v) +
                           " exceeds the BLAS interface's 32-bit limit");
}

// C = op(A) x op(B) for every batch index, all float32.
void gemm_f32(const GemmPlan& g, const float* A, const float* B, float* C) {
  const i64 mn = g.M * g.N;
  if (g.batches == 0 || mn == 0) return;
  if (g.K == 0) {  // empty sums (and BLAS would reject lda = 0)
    std::fill_n(C, g.batches * mn, 0.f);
    return;
  }
  check_int(g.M, "M");
  check_int(g.N, "N");
  check_int(g.K, "K");
  check_int(g.lda, "lda");
  check_int(g.ldb, "ldb");
  detail::ensure_blas_threads();
  const CBLAS_TRANSPOSE ta = g.trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = g.trans_b ? CblasTrans : CblasNoTrans;
  auto gemm = [&](i64 m, const float* a, const float* b, float* c) {
    cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(m), static_cast<int>(g.N), static_cast<int>(g.K), 1.0f, a,
                static_cast<int>(g.lda), b, static_cast<int>(g.ldb), 0.0f, c, static_cast<int>(g.N));
  };
  // One B for every batch (then A is not broadcast: its batches are the output's) and A not
  // transposed: A's batches are the rows of one (batches * M) x K matrix, one GEMM.
  if (g.batches > 1 && g.b_count == 1 && !g.trans_a && g.batches * g.M <= INT_MAX) {
    gemm(g.batches * g.M, A, B, C);
    return;
  }
  i64 idx[Dims::kMaxRank] = {};
  i64 ai = 0, bi = 0;
  for (i64 t = 0; t < g.batches; ++t) {
    gemm(g.M, A + ai * g.a_mat, B + bi * g.b_mat, C + t * mn);
    for (int k = g.batch_rank - 1; k >= 0; --k) {  // odometer over the batch dims
      ++idx[k];
      ai += g.a_stride[k];
      bi += g.b_stride[k];
      if (idx[k] < g.batch[k]) break;
      ai -= idx[k] * g.a_stride[k];
      bi -= idx[k] * g.b_stride[k];
      idx[k] = 0;
    }
  }
}

template <float (*Load)(std::uint16_t)>
void widen(const void* src, float* dst, i64 n) {
  const auto* s = static_cast<const std::uint16_t*>(src);
  detail::parallel_ranges(n, [&](i64 b, i64 e) {
    for (i64 i = b; i < e; ++i) dst[i] = Load(s[i]);
  });
}

template <std::uint16_t (*Store)(float)>
void narrow(const float* src, void* dst, i64 n) {
  auto* d = static_cast<std::uint16_t*>(dst);
  detail::parallel_ranges(n, [&](i64 b, i64 e) {
    for (i64 i = b; i < e; ++i) d[i] = Store(src[i]);
  });
}

bool is_narrow(DataType t) { return t == DataType::kHALF || t == DataType::kBF16; }

// Workspace floats for a float16/bfloat16 multiply: A, B and C widened to float32.
i64 workspace_floats(const GemmPlan& g) {
  return g.a_count * g.a_mat + g.b_count * g.b_mat + g.batches * g.M * g.N;
}

void check_types(const TensorRef& a, const TensorRef& b) {
  if (a.type != b.type) fail("matmul: inputs have types " + tn(a.type) + " and " + tn(b.type) + "; they must match");
  if (a.type != DataType::kFLOAT && !is_narrow(a.type))
    fail("matmul: inputs have type " + tn(a.type) + "; matrix multiply takes float32, float16 or bfloat16");
}

}  // namespace

std::size_t matmul_workspace_bytes(const MatrixMultiplyParams& p, const TensorRef& a, const TensorRef& b) {
  // Sizing only: the buffers need not exist yet (the builder asks before allocating).
  check_types(a, b);
  if (a.type == DataType::kFLOAT) return 0;
  return static_cast<std::size_t>(workspace_floats(plan_gemm(p, a, b))) * sizeof(float);
}

void matmul(const MatrixMultiplyParams& p, const TensorRef& a, const TensorRef& b, const TensorRef& out,
            void* workspace) {
  detail::checked_volume(a, "matmul", "input 0");
  detail::checked_volume(b, "matmul", "input 1");
  const i64 n = detail::checked_volume(out, "matmul", "the output");
  check_types(a, b);
  const GemmPlan g = plan_gemm(p, a, b);
  if (out.type != a.type || !(out.dims == g.out_dims))
    fail("matmul: the output is " + tn(out.type) + out.dims.str() + "; expected " + tn(a.type) + g.out_dims.str());
  if (n == 0) return;
  if (a.type == DataType::kFLOAT) {
    gemm_f32(g, static_cast<const float*>(a.data), static_cast<const float*>(b.data), static_cast<float*>(out.data));
    return;
  }
  if (workspace == nullptr) fail("matmul: " + tn(a.type) + " needs a workspace (matmul_workspace_bytes)");
  float* wa = static_cast<float*>(workspace);
  float* wb = wa + g.a_count * g.a_mat;
  float* wc = wb + g.b_count * g.b_mat;
  if (a.type == DataType::kHALF) {
    widen<core::half_to_float>(a.data, wa, g.a_count * g.a_mat);
    widen<core::half_to_float>(b.data, wb, g.b_count * g.b_mat);
    gemm_f32(g, wa, wb, wc);
    narrow<core::float_to_half>(wc, out.data, n);
  } else {
    widen<core::bf16_to_float>(a.data, wa, g.a_count * g.a_mat);
    widen<core::bf16_to_float>(b.data, wb, g.b_count * g.b_mat);
    gemm_f32(g, wa, wb, wc);
    narrow<core::float_to_bf16>(wc, out.data, n);
  }
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

namespace {

std::size_t bytes_of(const graph::TensorDesc& d, const Dims& dims) {
  auto v = dims.volume();
  return v < 0 ? 0 : static_cast<std::size_t>(v) * element_size(d.type);
}

// A quantized matrix multiply's operands dequantized into the start of `ws` (null: only
// sized), and the bytes they take; the product then runs on them as an unfused graph would.
std::tuple<TensorRef, TensorRef, std::size_t> dequantized_operands(const OpCall& c, std::byte* ws) {
  const DataType t = c.node.main_desc.type;
  TensorRef a{ws, t, c.in[0].dims};
  const std::size_t a_bytes = align_up(bytes_of({t, c.in[0].dims}, c.in[0].dims));
  TensorRef b{ws ? ws + a_bytes : nullptr, t, c.in[1].dims};
  const std::size_t b_bytes = align_up(bytes_of({t, c.in[1].dims}, c.in[1].dims));
  if (ws) {
    dequantize(ref(c.in[0]), ref(c.in[2]), 0, a);
    dequantize(ref(c.in[1]), ref(c.in[3]), 0, b);
  }
  return {a, b, a_bytes + b_bytes};
}

}  // namespace

extern const OpKernel kMatrixMultiplyKernel = {
    LayerType::kMATRIX_MULTIPLY, nullptr,
    [](const OpCall& c) {
      const auto& p = std::get<MatrixMultiplyParams>(c.node.params);
      if (c.node.quantized()) {
        auto [a, b, rest] = dequantized_operands(c, nullptr);
        return rest + matmul_workspace_bytes(p, a, b);
      }
      return matmul_workspace_bytes(p, ref(c.in[0]), ref(c.in[1]));
    },
    [](const OpCall& c) {
      const auto& p = std::get<MatrixMultiplyParams>(c.node.params);
      if (c.node.quantized()) {
        auto [a, b, used] = dequantized_operands(c, c.workspace);
        matmul(p, a, b, ref(c.out), c.workspace + used);
      } else {
        matmul(p, ref(c.in[0]), ref(c.in[1]), ref(c.out), c.workspace);
      }
    }};

}  // namespace ops

}  // namespace tensoracle::cpu
