// Internal to the CUDA backend: forward convolutions through cuDNN 9's graph (backend) API.
//
// cuDNN is opened at run time (dlopen of libcudnn.so.9, found through the backend library's
// run path: the nvidia-cudnn-cu13 wheel beside the Python package, or the system's). Without it
// the backend still works: convolutions keep the im2col + cuBLASLt path (conv.h), as they do with
// TENSORACLE_CUDNN=0 in the environment (read once per process). The backend is compiled
// against cuDNN's headers only (TENSORACLE_HAVE_CUDNN); without the headers, cudnn_version() is
// always 0 and no CudnnConv can be made.
//
// A CudnnConv is one operation graph (its problem: CudnnConvShape, cudnn_tactic.h): a
// cross-correlation at fixed shapes, float32 compute, the output blended as
// y = conv(x, w) + beta * y (beta 1 only for tactics of engines built before 2026-12-03, which
// wrote the bias into y first; now beta is 0 and a pass adds the bias after cuDNN). Its engine
// configurations are described by a string ("<engine global index>[,<knob type>=<value>]..."),
// which the builder stores in the node's tactic (cudnn_tactic.h) and the engine reopens without
// heuristics.
//
// Which of cuDNN's engines may run (tensoracle's numerics, docs/architecture.md): float32
// accumulation, never TF32 for float32 data (no TENSOR_CORE or DOWN_CONVERT_INPUTS note), no
// reduced-precision reductions, FFT or Winograd transforms, deterministic, and precompiled (no
// run-time compilation, so that reopening an engine stays fast).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cuda/cudnn_tactic.h"
#include "tensoracle/types.h"

namespace tensoracle::cuda {

// cuDNN's version (e.g. 91900) when the library opened, else 0. Opens it on first use.
int cudnn_version();

// One cuDNN handle per device, created on first use (creating one costs ~0.1-1 s) and shared by
// the device's convolutions; `run` serializes on it (cudnnSetStream + execute).
class CudnnContext {
 public:
  explicit CudnnContext(int device) : device_(device) {}
  ~CudnnContext();
  CudnnContext(const CudnnContext&) = delete;
  CudnnContext& operator=(const CudnnContext&) = delete;
  // The handle, created now if needed; nullptr when cuDNN is not available.
  void* handle() const;
  std::mutex& mutex() const { return run_mutex_; }

 private:
  int device_;
  mutable std::mutex init_mutex_, run_mutex_;
  mutable void* handle_ = nullptr;
  mutable bool tried_ = false;
};

class CudnnConv {
 public:
  // Builds the operation graph; throws tensoracle::Error when cuDNN refuses it.
  CudnnConv(const CudnnContext& ctx, CudnnConvShape shape);
  ~CudnnConv();
  CudnnConv(const CudnnConv&) = delete;
  CudnnConv& operator=(const CudnnConv&) = delete;

  const CudnnConvShape& shape() const { return shape_; }
  struct Candidate {
    std::string config;
    std::size_t workspace = 0;  // bytes its plan needs
  };
  // Configurations that keep tensoracle's numerics and whose plans build here, each needing at
  // most `max_workspace` bytes: up to `max` from cuDNN's heuristics (mode A, in its order), then
  // up to `max` more from its fallback list (with max == 1: the fallback's first only when mode
  // A offers none).
  std::vector<Candidate> candidates(std::size_t max, std::size_t max_workspace) const;
  // Builds the plan of `config`; throws tensoracle::Error when it cannot be built here.
  void select(const std::string& config);
  std::size_t workspace_bytes() const;
  // x, w, y: device buffers of the shape's dims (with channels_last: channels-last, x's and w's
  // channels padded), 16-byte aligned; asynchronous on `stream`.
  void run(const void* x, const void* w, void* y, void* workspace, cudaStream_t stream) const;

 private:
  struct State;
  const CudnnContext& ctx_;
  CudnnConvShape shape_;
  std::unique_ptr<State> state_;
};

// The byte alignment the plans are built for (their tensors' declared alignment).
inline constexpr std::size_t kCudnnAlign = 16;

}  // namespace tensoracle::cuda
