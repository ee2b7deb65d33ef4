// Internal to the CUDA backend: one device through the CUDA runtime. Device is the device half
// of the backend interface (device memory, streams, copies, timing events and CUDA graph
// capture, record()) and owns what the rest of the backend runs on: the device's properties,
// its cuBLASLt handle and cuDNN context. CudaBackend (cuda_backend.cpp) derives from it; the
// tuner (tuner.h) and the node kernels (node_kernel.h) take it. Also the error check, device
// guard and sizes every part of the backend uses.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "backends/backend.h"
#include "backends/cuda/cudnn_conv.h"
#include "graph/graph.h"

namespace tensoracle::cuda {

// Throws tensoracle::Error("[cuda] <what>: <CUDA's message>") when `e` is not cudaSuccess.
void check(cudaError_t e, const std::string& what);

// The alignment of every allocation and of every part of a node's workspace.
constexpr std::size_t kAlign = 256;
inline std::size_t align_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Bytes of a tensor of this description (0 while its dims are unknown).
std::size_t bytes_of(const graph::TensorDesc& d);

inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

// Makes `index` the calling thread's current device for the scope, then restores the caller's.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index) {
    if (cudaGetDevice(&previous_) != cudaSuccess || previous_ == index) previous_ = -1;
    else check(cudaSetDevice(index), "selecting device " + std::to_string(index));
  }
  ~DeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// Device `index`: the backend interface's memory, copies, streams, timelines and recordings;
// the rest of the interface is CudaBackend's.
class Device : public backends::Backend {
 public:
  explicit Device(int index);
  ~Device() override;

  int index() const { return index_; }
  const cudaDeviceProp& prop() const { return prop_; }
  cublasLtHandle_t lt() const { return lt_; }
  const cuda::CudnnContext& dnn() const { return dnn_; }

  backends::MemoryKind memory() const override { return backends::MemoryKind::kDevice; }
  void* allocate(std::size_t bytes) const override;
  void deallocate(void* p) const noexcept override;
  void copy(void* dst, const void* src, std::size_t bytes, backends::CopyKind kind, void* stream) const override;
  void* create_stream() const override;
  void destroy_stream(void* s) const noexcept override;
  void synchronize(void* s) const override;
  void check_stream(void*) const override {}
  // CUDA events between the nodes' launches.
  std::unique_ptr<Timeline> timeline(void* stream) const override;
  // The launches captured as a CUDA graph.
  std::unique_ptr<Recording> record(void* stream, const std::function<void(void*)>& launches) const override;

 protected:
  // CudaBackend's target() and compatibility checks read these too.
  int index_;
  cudaDeviceProp prop_{};
  int driver_ = 0, runtime_ = 0;
  cublasLtHandle_t lt_ = nullptr;
  cuda::CudnnContext dnn_;
};

}  // namespace tensoracle::cuda
