// Internal: the CPU backend's kernels — one function per layer kind, on typed buffers.
//
// Semantics (shared with the CUDA backend, checked by the conformance suite):
// - Values are computed in float32 for float16/bfloat16/fp8 inputs and rounded to the output
//   type once, when stored (round to nearest even; fp16/bf16 overflow to infinity).
// - int32/int64 arithmetic wraps around (two's complement); integer DIV truncates toward zero,
//   FLOOR_DIV rounds toward negative infinity; integer division by zero gives 0 (documented;
//   GPUs do not trap either).
// - Casts: float to integer truncates toward zero and saturates to the integer's range
//   (NaN gives 0); to bool: value != 0; from bool: 0 or 1.
// - Quantize: q = saturate(round_half_even(x / scale)) (int8: [-128, 127], NaN gives 0; fp8
//   e4m3: ±448, NaN stays NaN); dequantize: x = q * scale, rounded to the output type.
// - Matrix multiply: float32 accumulation for every float type (never TF32).
//
// Every function takes dims that are fully known and buffers that do not overlap, except
// where noted ("may alias"). Multi-threaded with OpenMP where it pays.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensoracle/network.h"
#include "tensoracle/types.h"

namespace tensoracle::cpu {

struct TensorRef {
  void* data = nullptr;
  DataType type = DataType::kFLOAT;
  Dims dims;
};

// C = op0(A) x op1(B) with batch broadcasting (see graph/ops.cpp for the shape rules).
// `workspace` must hold matmul_workspace_bytes(...) bytes.
std::size_t matmul_workspace_bytes(const MatrixMultiplyParams& p, const TensorRef& a, const TensorRef& b);
void matmul(const MatrixMultiplyParams& p, const TensorRef& a, const TensorRef& b, const TensorRef& out,
            void* workspace);

// out = a OP b with TensorRT broadcasting (equal ranks; each dim equal or 1). out may alias a
// or b when it has the same dims and type.
void elementwise(ElementWiseOperation op, const TensorRef& a, const TensorRef& b, const TensorRef& out);

// out may alias x.
void activation(const ActivationParams& p, const TensorRef& x, const TensorRef& out);

// Any supported type to any; out may alias x when both types have the same size.
void cast(const TensorRef& x, const TensorRef& out);

// Per-tensor (scale has one element) or per-channel along `axis` (already normalized >= 0).
void quantize(const TensorRef& x, const TensorRef& scale, int axis, const TensorRef& out);
void dequantize(const TensorRef& x, const TensorRef& scale, int axis, const TensorRef& out);

// out = second_transpose(reshape(first_transpose(x))); out.dims are the result's dims.
void shuffle(const ShuffleParams& p, const TensorRef& x, const TensorRef& out);

// Copies x to out (same type and volume).
void copy(const TensorRef& x, const TensorRef& out);

// Number of threads kernels use (default: the machine's cores); set_num_threads(0) restores it.
int num_threads();
void set_num_threads(int n);

// For the scope of one node's run: the calling thread's OpenMP thread count (an ICV of each
// thread) is num_threads(). OpenBLAS's OpenMP build sizes every GEMM by the calling thread's
// count and resets its process-wide count to match, so executions on threads with other counts
// gave other bits and raced on that global; oneDNN sizes its regions the same way.
class ThreadScope {
 public:
  ThreadScope();
  ~ThreadScope();
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace tensoracle::cpu
