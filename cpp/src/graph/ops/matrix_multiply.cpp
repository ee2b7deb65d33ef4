// Op unit: the matrix_multiply layer. How backends run it: backends/cpu/ops/matrix_multiply.cpp and
// backends/cuda/ops/matrix_multiply.cu where they exist. Every layer's unit is listed in
// graph/ops/registry.cpp.
#include <array>
#include <string_view>

#include "graph/ops/common.h"

namespace tensoracle::graph {

namespace ops {

namespace {

constexpr std::array<std::string_view, 3> kMatOps = {"NONE", "TRANSPOSE", "VECTOR"};

// Matrix multiply: each operand contributes its last 2 dims (1 for kVECTOR) as the matrix; the
// leading dims are batch dims, of equal count, broadcast where one is 1.
TensorDesc infer_matmul(const MatrixMultiplyParams& p, std::span<const TensorDesc> in) {
  require_float(in[0], 0, "matrix multiply");
  require_float(in[1], 1, "matrix multiply");
  require_same_type(in, "matrix multiply");
  const MatrixOperation ops[2] = {p.op0, p.op1};
  std::int64_t rows[2] = {1, 1}, cols[2] = {1, 1};
  int batch_rank[2];
  for (int i = 0; i < 2; ++i) {
    const Dims& d = in[i].dims;
    int mat_rank = ops[i] == MatrixOperation::kVECTOR ? 1 : 2;
    if (d.rank() < mat_rank)
      invalid("input " + std::to_string(i) + " has dims " + d.str() + "; operation " +
              (mat_rank == 2 ? "NONE/TRANSPOSE needs rank >= 2" : "VECTOR needs rank >= 1"));
    batch_rank[i] = d.rank() - mat_rank;
    if (mat_rank == 2) {
      rows[i] = d[d.rank() - 2];
      cols[i] = d[d.rank() - 1];
      if (ops[i] == MatrixOperation::kTRANSPOSE) std::swap(rows[i], cols[i]);
    } else {
      (i == 0 ? cols[0] : rows[1]) = d[d.rank() - 1];
    }
  }
  if (batch_rank[0] != batch_rank[1])
    invalid("inputs have dims " + in[0].dims.str() + " and " + in[1].dims.str() +
            ": their batch dimensions differ in count (" + std::to_string(batch_rank[0]) + " vs " +
            std::to_string(batch_rank[1]) + "); reshape one with a shuffle layer");
  if (cols[0] >= 0 && rows[1] >= 0 && cols[0] != rows[1])
    invalid("inner dimensions differ: input 0 " + in[0].dims.str() + " gives K=" + std::to_string(cols[0]) +
            ", input 1 " + in[1].dims.str() + " gives K=" + std::to_string(rows[1]));
  std::vector<std::int64_t> out;
  for (int b = 0; b < batch_rank[0]; ++b) {
    std::int64_t x = in[0].dims[b], y = in[1].dims[b];
    if (x >= 0 && y >= 0 && x != y && x != 1 && y != 1)
      invalid("batch dimension " + std::to_string(b) + " differs: " + std::to_string(x) + " vs " +
              std::to_string(y) + " (broadcast needs equal dims or 1)");
    out.push_back(x == 1 ? y : y == 1 ? x : (x >= 0 ? x : y));
  }
  if (ops[0] != MatrixOperation::kVECTOR) out.push_back(rows[0]);
  if (ops[1] != MatrixOperation::kVECTOR) out.push_back(cols[1]);
  return {in[0].type, Dims(std::span<const std::int64_t>(out))};
}

std::vector<TensorDesc> infer_op(const MatrixMultiplyParams& p, std::span<const TensorDesc> in, std::span<const InputFacts>, bool) {
  return {infer_matmul(p, in)};
}

json params_to_json(const MatrixMultiplyParams& p) {
  return {{"op0", enum_name(kMatOps, p.op0)}, {"op1", enum_name(kMatOps, p.op1)}};
}

MatrixMultiplyParams params_from_json(const json& j) {
  return MatrixMultiplyParams{enum_value<MatrixOperation>(kMatOps, j.at("op0")), enum_value<MatrixOperation>(kMatOps, j.at("op1"))};
}

}  // namespace

extern const OpTraits kMatrixMultiplyOp =
    make_op<MatrixMultiplyParams, infer_op, params_to_json, params_from_json>("matrix_multiply", {2, 2});

}  // namespace ops

}  // namespace tensoracle::graph
