// Internal to the CUDA backend: a fused fp8 GEMM for sm90a (H100/H200) that applies a product's
// bias, GELU (erf) and, for an fp8 result, the next layer's per-tensor quantize in its own
// epilogue, where cuBLASLt's fp8 kernels take only the bias and a separate pass does the rest.
//
//   out[m, n] = epilogue(fp16(acc[m, n] * scale_a * scale_b + bias[n]))
//
// acc: the e4m3 products of a [M, K] (K contiguous) and b [N, K] (K contiguous: a weight used
// transposed) on the tensor cores (wgmma m64n128k32), each 128-deep slice of K summed in float32
// registers (as cuBLASLt promotes by default). The epilogue reads a lookup table indexed by the
// float16 bits of the biased result: 65536 fp8 codes (GELU, rounded to float16, then quantized)
// or 65536 float16 values (GELU), built by the backend's own activation_quantize / activation
// kernels over every float16 value (build_fp8_epilogue_table), so the result is bit for bit the
// unfused passes' on the same float16 input.
//
// One 128 x 128 tile per CTA: a producer warpgroup loads 128 x 128 tiles of both operands by TMA
// (128-byte swizzle) into a 5-stage (fp8 result) or 3-stage (float16 result) ring; two consumer
// warpgroups multiply 64 rows each, one slice's promotion overlapping the next slice's products;
// the table and the tile's bias row sit in shared memory. Edges: TMA fills rows and columns past
// M, N and K with zeros and clips the stores.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/kernels.h"

namespace tensoracle::cuda {

enum class Fp8Epilogue {
  kBIAS_GELU,           // float16 result
  kBIAS_GELU_QUANTIZE,  // fp8 e4m3 result
};

// Whether this library holds the kernel (built for sm90a) and device `major.minor` runs it.
bool fused_fp8_gemm_runs_on(int major, int minor);

// Whether the kernel takes these sizes (M >= 1; N and K multiples of 16, N*K within int32 tile
// coordinates) and pointers (16-byte aligned, as TMA and bulk copies need).
bool fused_fp8_gemm_fits(std::int64_t M, std::int64_t N, std::int64_t K);
bool fused_fp8_gemm_aligned(const void* a, const void* b, const void* bias, const void* out);

// Bytes of the epilogue's lookup table.
std::size_t fp8_epilogue_table_bytes(Fp8Epilogue e);

// Fills `table` (fp8_epilogue_table_bytes) on `stream`: act over every float16 value, then (fp8
// result) the quantize by `quantize_scale` (one float32/float16 element on the device).
void build_fp8_epilogue_table(Fp8Epilogue e, const ActivationParams& act, const TensorRef& quantize_scale, void* table,
                              void* scratch_65536_halves, cudaStream_t stream);

// out [M, N] (float16 or fp8) = the epilogue of a [M, K] x b [N, K]^T; scale_a/scale_b: one
// float32 each on the device; bias: N float16 values; b_constant: b is not written by earlier
// work on the stream (an engine's weight). Throws tensoracle::Error naming `node`.
//
// The kernel is launched with programmatic dependent launch (unless TENSORACLE_FP8_PDL=0): it
// starts while the previous kernel on the stream finishes, loads its bias row (and, b_constant,
// its first stages of b), and waits for that kernel before touching anything else in global
// memory; it lets the next kernel start early the same way. Every other kernel keeps the
// stream's order.
void fused_fp8_gemm(Fp8Epilogue e, const void* a, const void* b, std::int64_t M, std::int64_t N, std::int64_t K,
                    const void* scale_a, const void* scale_b, const void* bias, const void* table, bool b_constant,
                    void* out, cudaStream_t stream, const std::string& node);

}  // namespace tensoracle::cuda
