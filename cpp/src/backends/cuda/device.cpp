// The CUDA backend's device (device.h): device memory, streams and copies through the CUDA
// runtime, timing events, and CUDA graphs that executions of fixed shapes replay (record()).
#include "backends/cuda/device.h"

#include <string>
#include <vector>

#include "backends/cuda/gemm.h"
#include "tensoracle/errors.h"

namespace tensoracle::cuda {

using namespace backends;

void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) throw Error("[cuda] " + what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

std::size_t bytes_of(const graph::TensorDesc& d) {
  auto v = d.dims.volume();
  return v < 0 ? 0 : static_cast<std::size_t>(v) * element_size(d.type);
}

namespace {

// Events recorded on the stream between the nodes' launches: device time, no stalls.
struct Events final : Backend::Timeline {
  int device = 0;
  cudaStream_t stream = nullptr;
  std::vector<cudaEvent_t> events;
  ~Events() override {
    DeviceGuard guard(device);
    for (cudaEvent_t e : events) cudaEventDestroy(e);
  }
  void mark() override {
    DeviceGuard guard(device);
    cudaEvent_t e = nullptr;
    check(cudaEventCreate(&e), "creating a timing event");
    events.push_back(e);
    check(cudaEventRecord(e, stream), "recording a timing event");
  }
  std::vector<double> seconds() override {
    DeviceGuard guard(device);
    if (!events.empty()) check(cudaEventSynchronize(events.back()), "running the engine");
    std::vector<double> s;
    for (std::size_t i = 1; i < events.size(); ++i) {
      float ms = 0;
      check(cudaEventElapsedTime(&ms, events[i - 1], events[i]), "reading a timing event");
      s.push_back(ms * 1e-3);
    }
    return s;
  }
};

struct Graph final : Backend::Recording {
  cudaGraphExec_t exec = nullptr;
  int device = 0;
  ~Graph() override {
    if (exec) cudaGraphExecDestroy(exec);
  }
  void replay(void* stream) const override {
    DeviceGuard guard(device);
    check(cudaGraphLaunch(exec, as_stream(stream)), "replaying the execution's CUDA graph");
  }
};

}  // namespace

Device::Device(int index) : index_(index), dnn_(index) {
  DeviceGuard guard(index_);
  check(cudaGetDeviceProperties(&prop_, index_), "reading the properties of device " + std::to_string(index_));
  cudaDriverGetVersion(&driver_);
  cudaRuntimeGetVersion(&runtime_);
  cuda::check_lt(cublasLtCreate(&lt_), "creating a cuBLASLt handle");
}
Device::~Device() {
  if (lt_) cublasLtDestroy(lt_);
}

void* Device::allocate(std::size_t bytes) const {
  if (bytes == 0) return nullptr;
  DeviceGuard guard(index_);
  void* p = nullptr;
  if (cudaError_t e = cudaMalloc(&p, align_up(bytes)); e != cudaSuccess) {
    cudaGetLastError();  // clear it
    std::size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    throw Error("[cuda] allocating " + std::to_string(bytes) + " bytes on device " + std::to_string(index_) + " (" +
                prop_.name + ", " + std::to_string(free >> 20) + " MiB free of " + std::to_string(total >> 20) +
                " MiB): " + cudaGetErrorString(e));
  }
  return p;
}
void Device::deallocate(void* p) const noexcept {
  if (!p) return;
  DeviceGuard guard(index_);
  cudaFree(p);
}

void Device::copy(void* dst, const void* src, std::size_t bytes, CopyKind kind, void* stream) const {
  if (bytes == 0) return;
  const cudaMemcpyKind k = kind == CopyKind::kHostToDevice   ? cudaMemcpyHostToDevice
                           : kind == CopyKind::kDeviceToHost ? cudaMemcpyDeviceToHost
                                                             : cudaMemcpyDeviceToDevice;
  DeviceGuard guard(index_);
  check(cudaMemcpyAsync(dst, src, bytes, k, as_stream(stream)), "copying " + std::to_string(bytes) + " bytes");
}

void* Device::create_stream() const {
  DeviceGuard guard(index_);
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "creating a stream");
  return s;
}
void Device::destroy_stream(void* s) const noexcept {
  if (s) cudaStreamDestroy(as_stream(s));
}
void Device::synchronize(void* s) const {
  DeviceGuard guard(index_);
  check(cudaStreamSynchronize(as_stream(s)), "running the engine");
}

std::unique_ptr<Backend::Timeline> Device::timeline(void* stream) const {
  auto t = std::make_unique<Events>();
  t->device = index_;
  t->stream = as_stream(stream);
  t->mark();  // the start
  return t;
}

std::unique_ptr<Backend::Recording> Device::record(void* stream, const std::function<void(void*)>& launches) const {
  if (stream == nullptr) return nullptr;  // the legacy default stream cannot be captured
  DeviceGuard guard(index_);
  check(cudaStreamBeginCapture(as_stream(stream), cudaStreamCaptureModeThreadLocal), "capturing a CUDA graph");
  cudaGraph_t graph = nullptr;
  try {
    launches(stream);
  } catch (...) {
    cudaStreamEndCapture(as_stream(stream), &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  check(cudaStreamEndCapture(as_stream(stream), &graph), "capturing a CUDA graph");
  auto rec = std::make_unique<Graph>();
  rec->device = index_;
  cudaError_t e = cudaGraphInstantiate(&rec->exec, graph, 0);
  cudaGraphDestroy(graph);
  check(e, "instantiating a CUDA graph");
  return rec;
}

}  // namespace tensoracle::cuda
