// Internal to the CUDA backend: convolution, deconvolution (transposed convolution) and einsum,
// with the semantics of the CPU kernels (backends/cpu/ops/convolution.cpp, deconvolution.cpp, einsum.cpp; the
// conformance suite compares the two backends). One object per node, built once (it keeps the
// node's cuBLASLt plans); workspace_bytes() is asked at build time with the profile's largest
// shapes (data pointers may be null: it reads no device memory), run() then works at any shapes
// up to those with that much workspace. run() launches everything asynchronously on `stream`:
// no allocation, no synchronization, no host read of device data. Implemented in
// ops/convolution.cu, ops/deconvolution.cu and ops/einsum.cu (what they share: window_util.cuh).
//
// Numerics (as the CPU): float32, float16 and bfloat16 only; products and sums in float32 (the
// GEMMs run with CUBLAS_COMPUTE_32F: float32 never becomes TF32; float16/bfloat16 operands feed
// the tensor cores, whose products of them are exact in float32), the bias added in float32, and
// one rounding to the output type at the end. Deconvolution accumulates every contribution to an
// output element in float32 and rounds once. Einsum reduces a letter that only one operand has
// in double (rounded to float32, as the CPU), one-input einsum likewise. Results differ from the
// CPU's only by the float32 rounding of a different summation order.
//
// Errors: the CPU kernels' checks with the same messages and exception types, prefixed "[cuda]"
// ("[cuda] convolution: ..."), thrown before anything is launched; a failed launch or cuBLASLt
// call throws tensoracle::Error naming the node.
//
// Workspace (bytes; at most the returned size is used; 256-byte alignment of the pointer is
// expected, as the backend's allocations give):
//   convolution    0 for a depthwise convolution (one input channel per group: direct kernel);
//                  else kGemmWorkspaceBytes + 256 + bpp * min(N * P, max(1, kChunkBytes / bpp))
//                  with P = output positions per image and bpp (bytes per output position) =
//                  C * kvol * elem (im2col columns; 0 for an unpadded 1x1 stride-1 convolution,
//                  which reads its input in place) + (float16/bfloat16: 4 * K, the float32 GEMM
//                  result before bias and rounding); the batch (or, when one image exceeds
//                  kChunkBytes, the positions of one image) is processed in chunks that fit.
//                  With use_cudnn(): at least cuDNN's plan's workspace, and for a channels-last
//                  plan that (rounded up to 256) + N * S_in * l + K * kvol * l + N * K * P
//                  elements at the plan's problem (l: the padded channel count; each part
//                  rounded up to 256 bytes).
//   deconvolution  kGemmWorkspaceBytes + 256 + u * min(N * K * Q, max(1, kChunkBytes / u)) with
//                  u = 4 * kvol (float32 GEMM columns per image, output channel and input
//                  position; Q = input positions per image): whole images per chunk, else blocks
//                  of output channels of one image, else one channel in tiles of input positions;
//                  in that last case (4 * kvol * Q > kChunkBytes), float16/bfloat16 add 256 +
//                  4 * (output positions per image) for the channel's float32 accumulator.
//   einsum         0 for one input; else kGemmWorkspaceBytes + the operands that cannot be read
//                  in place (permuted and/or reduced) and the GEMM result when it is not the
//                  output's layout: B*M*K, B*K*N and B*M*N elements of the GEMM type (each
//                  rounded up to 256 bytes), as the CPU's einsum_workspace_bytes.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "backends/cuda/cudnn_conv.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels.h"
#include "graph/graph.h"

namespace tensoracle::cuda {

// Bound on the chunked buffers of convolution and deconvolution (im2col columns, float32 GEMM
// results), beyond cuBLASLt's kGemmWorkspaceBytes.
inline constexpr std::size_t kChunkBytes = std::size_t{256} << 20;

// The workspace a channels-last cuDNN plan of `s` (s.channels_last > 0) needs beside cuDNN's
// own: its three copies, each 256-byte aligned, and the alignment after cuDNN's part.
std::size_t channels_last_copy_bytes(const CudnnConvShape& s);

// A convolution applies the activation its epilogue starts with (on the cuDNN path in the same
// pass as its bias).
std::optional<ActivationParams> conv_activation(const graph::Node& n);

class StridedGemm;  // window_util.cuh: strided-batched cuBLASLt GEMMs with arbitrary leading dims

class ConvolutionKernel {
 public:
  // `node_name` names the node in cuBLASLt errors; `handle` outlives the object.
  ConvolutionKernel(cublasLtHandle_t handle, std::string node_name, ConvolutionParams p);
  ~ConvolutionKernel();
  ConvolutionKernel(const ConvolutionKernel&) = delete;
  ConvolutionKernel& operator=(const ConvolutionKernel&) = delete;

  // Sizing only (x, out: type and dims; data not read; the kernel's dims are implied by the
  // parameters, as the CPU's convolution_workspace_bytes).
  std::size_t workspace_bytes(const TensorRef& x, const TensorRef& kernel, const TensorRef& out) const;
  // x [N, C, spatial...], kernel [K, C / groups, k...] (any dims of that volume), optional bias
  // [K] (any dims of K elements), out [N, K, spatial...]; all one float type; then `act` (the
  // node's first epilogue op, when it is an activation) in place over out.
  // With use_cudnn(): through cuDNN at exactly the shapes given there, when x, kernel and out
  // are kCudnnAlign-aligned, then one pass of bias + activation (bias_activation: the
  // convolution's result is rounded to out's type before its bias is added); at other shapes
  // or alignments, the path above (the bias added before the one rounding), then the activation
  // as a pass. A channels-last plan (CudnnConvShape::channels_last) transposes x and the kernel
  // into the workspace first and y out of it, adding bias and activation on the way out (same
  // arithmetic): a cuDNN workspace is then cuDNN's plus these three copies.
  void run(const TensorRef& x, const TensorRef& kernel, const TensorRef* bias, const TensorRef& out, void* workspace,
           cudaStream_t stream, const ActivationParams* act = nullptr) const;

  // This convolution as a cuDNN problem at these shapes (data not read), or nullopt where cuDNN
  // is not used: a type other than float32/float16/bfloat16, negative padding, an empty tensor.
  // `accumulate`: cuDNN adds its result to out (what engines built before 2026-12-03 stored,
  // with the bias written into out first; tactic field a:1); new tactics have a:0.
  std::optional<CudnnConvShape> cudnn_shape(const TensorRef& x, const TensorRef& kernel, const TensorRef& out,
                                            bool accumulate) const;
  // Runs `shape` through cuDNN's configuration `config` (CudnnConv::candidates); throws
  // tensoracle::Error when its plan cannot be built here or needs more than `max_workspace`
  // bytes (what the engine reserved when it was built). workspace_bytes() then covers it.
  void use_cudnn(const CudnnContext& ctx, const CudnnConvShape& shape, const std::string& config,
                 std::size_t max_workspace);
  bool uses_cudnn() const { return dnn_ != nullptr; }
  // Runs `shape` (direct_conv_supported(): l:4, a:0) through the backend's direct kernel on the
  // channels-last copies a channels-last cuDNN plan would use (tactic configuration "direct"):
  // float32 sums on the tensor cores, the bias added before the one rounding, a ReLU in the
  // same kernel (another activation as a pass over the rounded result). Throws tensoracle::Error
  // where the problem is not one it runs.
  void use_direct(const CudnnConvShape& shape);

  // How x and the output are stored (the TensorRefs keep the logical dims [N, C, spatial...]):
  // false packed as those dims, true channels-last, [N, spatial..., C] (a value whose producer's
  // tactic says so: CudnnTactic::out_channels_last). A channels-last plan reads a channels-last x
  // in place when it pads no channels, and writes a channels-last output in place (then its bias
  // and activation in one pass over it); every other path runs on converted copies, which the
  // workspace then holds in front of the rest: x's bytes (when x is channels-last) and the
  // output's (when it is), each rounded up to 256.
  void set_layouts(bool x_channels_last, bool out_channels_last) {
    x_cl_ = x_channels_last;
    out_cl_ = out_channels_last;
  }
  bool out_channels_last() const { return out_cl_; }

 private:
  // The cuDNN path of run() with x and out stored as the flags say; false (nothing launched)
  // where it does not apply (another problem than the plan's; a layout the plan cannot take).
  bool run_cudnn(const TensorRef& x, const TensorRef& kernel, const TensorRef* bias, const TensorRef& out,
                 void* workspace, cudaStream_t stream, const ActivationParams* act, bool x_cl, bool out_cl) const;
  // run() on packed x and out (checked by run()).
  void run_packed(const TensorRef& x, const TensorRef& kernel, const TensorRef* bias, const TensorRef& out,
                  void* workspace, cudaStream_t stream, const ActivationParams* act) const;
  // Bytes in front of the workspace for the layout conversions (0 when both are packed).
  std::size_t layout_bytes(const TensorRef& x, const TensorRef& out) const;

  std::string name_;
  ConvolutionParams params_;
  std::unique_ptr<StridedGemm> gemm_;
  std::unique_ptr<CudnnConv> dnn_;
  std::optional<CudnnConvShape> direct_;  // use_direct()'s problem
  bool x_cl_ = false, out_cl_ = false;
};

class DeconvolutionKernel {
 public:
  DeconvolutionKernel(cublasLtHandle_t handle, std::string node_name, DeconvolutionParams p);
  ~DeconvolutionKernel();
  DeconvolutionKernel(const DeconvolutionKernel&) = delete;
  DeconvolutionKernel& operator=(const DeconvolutionKernel&) = delete;

  std::size_t workspace_bytes(const TensorRef& x, const TensorRef& kernel, const TensorRef& out) const;
  // x [N, C, spatial...], kernel [C, K / groups, k...], optional bias [K], out [N, K, spatial...].
  void run(const TensorRef& x, const TensorRef& kernel, const TensorRef* bias, const TensorRef& out, void* workspace,
           cudaStream_t stream) const;

 private:
  std::string name_;
  DeconvolutionParams params_;
  std::unique_ptr<StridedGemm> gemm_;
};

class EinsumKernel {
 public:
  EinsumKernel(cublasLtHandle_t handle, std::string node_name, EinsumParams p);
  ~EinsumKernel();
  EinsumKernel(const EinsumKernel&) = delete;
  EinsumKernel& operator=(const EinsumKernel&) = delete;

  // Sizing only (types and dims; data not read).
  std::size_t workspace_bytes(std::span<const TensorRef> inputs, const TensorRef& out) const;
  // One or two inputs of one float type; the output in the equation's letter order.
  void run(std::span<const TensorRef> inputs, const TensorRef& out, void* workspace, cudaStream_t stream) const;

 private:
  std::string name_;
  EinsumParams params_;
  // One cuda::Gemm per (op0, op1) in {NONE, TRANSPOSE}^2: which one a call needs depends on the
  // operands' layouts at its shapes. Index [a transposed][b transposed].
  std::unique_ptr<Gemm> gemm_[2][2];
};

}  // namespace tensoracle::cuda
