// The CUDA backend (libtensoracle_cuda.so): the backends::Backend interface for one device. The
// device itself (memory, streams, copies, timing events, CUDA graph capture) is Device
// (device.h), which CudaBackend derives from; this file holds what the builder asks (the
// target, which nodes run and fuse, tactics and which to take) and instantiates node kernels
// (node_kernel.h: matrix multiplies through cuBLASLt, gemm.h; convolutions through cuDNN or the
// backend's own kernels, conv.h; every other layer through the kernels of kernels.h).
// Matrix multiplies' and convolutions' tactics are the tuner's (tuner.h).
//
// The core opens this library with dlopen and calls tensoracle_cuda_backend (below) once per
// device; everything else goes through the backends::Backend interface.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <dlfcn.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cuda/cudnn_conv.h"
#include "backends/cuda/device.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/layouts.h"
#include "backends/cuda/node_kernel.h"
#include "backends/cuda/tuner.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "plugin/instance.h"
#include "backends/backend.h"
#include "backends/build_identity.h"
#include "tensoracle/errors.h"

namespace tensoracle::cuda {

using namespace backends;

namespace {

class CudaBackend final : public Device {
 public:
  explicit CudaBackend(int index)
      : Device(index),
        tuner_(*this, [this](const graph::Graph& g, const graph::Node& n, const graph::Tactic& tactic,
                             const TacticQuery& q) { return node_scratch(g, n, tactic, q); }) {}

  std::string name() const override { return "cuda"; }
  std::string device() const override { return "cuda:" + std::to_string(index_); }

  nlohmann::json target() const override {
    return {{"backend", "cuda"},
            {"device", prop_.name},
            {"compute_capability", std::to_string(prop_.major) + "." + std::to_string(prop_.minor)},
            {"driver", driver_},
            {"runtime", runtime_},
            {"cublaslt", cublasLtGetVersion()},
            {"cudnn", cuda::cudnn_version()}};  // 0: none (convolutions without cuDNN)
  }

  void check_compatible(const nlohmann::json& t) const override {
    if (!t.is_object() || t.value("backend", "") != "cuda")
      throw IncompatibleEngineError("[engine] the engine was built for backend '" +
                                    (t.is_object() ? t.value("backend", std::string("?")) : std::string("?")) +
                                    "', not CUDA; rebuild it for this device");
    const std::string cc = std::to_string(prop_.major) + "." + std::to_string(prop_.minor);
    if (t.value("compute_capability", std::string()) != cc)
      throw IncompatibleEngineError("[engine] the engine was built for " + t.value("device", std::string("?")) +
                                    " (compute capability " + t.value("compute_capability", std::string("?")) +
                                    "); this device is " + prop_.name + " (compute capability " + cc +
                                    "); rebuild it here");
  }

  std::string unsupported_reason(const graph::Graph& g, const graph::Node& n) const override {
    if (const auto* p = std::get_if<PluginParams>(&n.params)) {
      std::vector<PluginTensorDesc> in;
      for (int v : n.inputs) in.push_back({g.values[static_cast<std::size_t>(v)].desc.type, g.values[static_cast<std::size_t>(v)].desc.dims});
      auto why = p->plugin->unsupported_reason(TENSORACLE_BACKEND_CUDA, in, p->plugin->output_descs(in));
      return why.empty() ? why : why + " (engine backend: cuda)";
    }
    if (n.quantized() && graph::arithmetic_type(g, n) == DataType::kFP8 && prop_.major * 10 + prop_.minor < 89)
      return "an fp8 matrix multiply needs a GPU of compute capability 8.9 or newer; device " + std::to_string(index_) +
             " (" + prop_.name + ") has " + std::to_string(prop_.major) + "." + std::to_string(prop_.minor);
    return "";
  }

  // Where the tensor-core kernel runs (float16 / bfloat16, head size 32, 64 or 128, sm80+:
  // cuda::attention_tensor_cores), one fused node replaces the layers: it never writes the scores
  // to global memory, where the layers write and read them three times. The row kernel (float32,
  // other head sizes) is no faster than the layers' GEMMs and softmax: those stay layers.
  // TENSORACLE_ATTENTION_KERNEL=rows, set while building, keeps the layers (benchmarks compare).
  bool fuses_attention(const graph::Graph& g, const graph::Node& n) const override {
    const auto& q = g.values[static_cast<std::size_t>(n.inputs.at(0))].desc;
    if (q.type != DataType::kHALF && q.type != DataType::kBF16) return false;
    const std::int64_t h = graph::attention_head_size(g, n);
    return h > 0 && attention_tensor_cores(h);
  }

  bool can_fuse(const graph::Graph&, const graph::Node& producer, const graph::EpilogueOp& op) const override {
    if (std::holds_alternative<ShuffleParams>(producer.params) && producer.inputs.size() > 1) return false;
    if (const auto* s = std::get_if<SliceParams>(&producer.params); s && (s->tensor_inputs & 0x7)) return false;
    if (std::holds_alternative<ShapeParams>(producer.params)) return false;
    if (std::holds_alternative<PluginParams>(producer.params)) return false;  // the plugin writes its output
    return std::holds_alternative<ActivationParams>(op.params) || std::holds_alternative<CastParams>(op.params) ||
           std::holds_alternative<ElementWiseParams>(op.params) || std::holds_alternative<QuantizeParams>(op.params);
  }

  std::vector<graph::Tactic> tactics(const graph::Graph& g, const graph::Node& n) const override {
    if (n.type() == LayerType::kMATRIX_MULTIPLY) {
      graph::CublasLtConfig c;
      c.epilogue_ops = static_cast<int>(lt_epilogue(g, n).first);
      if (n.quantized())
        c.precision = graph::arithmetic_type(g, n) == DataType::kINT8 ? graph::CublasLtConfig::Precision::kInt8
                                                                      : graph::CublasLtConfig::Precision::kFp8;
      return {graph::Tactic(std::move(c))};
    }
    return {graph::Tactic("cuda." + std::string(layer_type_name(n.type())))};
  }

  std::unique_ptr<NodeKernel> instantiate(const graph::Graph& g, const graph::Node& n) const override {
    // An engine file's tactic is not trusted: its kernel must be one this backend writes for the
    // node (the kind's entry then checks its configuration; empty: run in-process).
    if (!n.tactic.empty()) {
      const std::string& k = n.tactic.kernel;
      const bool ok = k == tactics(g, n).front().kernel ||
                      (n.type() == LayerType::kMATRIX_MULTIPLY && k == graph::kFusedFp8GemmKernel) ||
                      (n.type() == LayerType::kCONVOLUTION && k == graph::kCudnnConvKernel) ||
                      (n.type() == LayerType::kREDUCE && k == kReduceSplitTactic);
      if (!ok)
        throw CorruptEngineError("[cuda] layer '" + n.name + "': tactic '" + graph::describe(n.tactic) +
                                 "' is not one of the CUDA backend's kernels for this " +
                                 std::string(layer_type_name(n.type())) + " layer; rebuild the engine");
    }
    return make_node_kernel(*this, g, n);
  }

  // Matrix multiplies and convolutions: the tuner (tuner.h); poolings and reduces: below; other
  // nodes: the one tactic.
  Choice choose_tactic(const graph::Graph& g, const graph::Node& n, const TacticQuery& q) const override {
    graph::Tactic base = tactics(g, n).front();
    if (const auto* cp = std::get_if<ConvolutionParams>(&n.params)) return tuner_.choose_convolution(g, n, *cp, base, q);
    // A pooling that reads a channels-last value stores its output so too where its readers take
    // it in place (layouts.h); the choice follows the graph, nothing is timed.
    if (std::holds_alternative<PoolingParams>(n.params))
      return {base, cuda::pooling_chain_output(g, n) ? graph::Layout::kChannelsLast : graph::Layout::kLinear};
    if (const auto* rp = std::get_if<ReduceParams>(&n.params)) {
      // Few outputs over many elements at the opt or max shapes: split over blocks, when the
      // partials' scratch fits the workspace limit (at other shapes reduce() decides again).
      if (!cuda::reduce_splits(*rp, q.inputs[0].dims) && !cuda::reduce_splits(*rp, q.max_inputs[0].dims)) return {base};
      const graph::Tactic split(kReduceSplitTactic);
      if (q.scratch_limit != kNoScratchLimit && node_scratch(g, n, split, q) > q.scratch_limit) return {base};
      return {split};
    }
    const auto* mm = std::get_if<MatrixMultiplyParams>(&n.params);
    if (!mm) return {base};
    return {tuner_.choose_gemm(g, n, *mm, base, q)};
  }

  // The scratch node `n` would reserve with this tactic at the query's max shapes.
  std::size_t node_scratch(const graph::Graph& g, const graph::Node& n, const graph::Tactic& tactic, const TacticQuery& q) const {
    graph::Node probe = n;
    probe.tactic = tactic;
    std::vector<Buffer> in;
    for (const auto& d : q.max_inputs) in.push_back({nullptr, d.type, d.dims});
    const Buffer out{nullptr, q.max_output.type, q.max_output.dims};  // matrix multiplies, convolutions, reduces: one output
    return instantiate(g, probe)->workspace_bytes(in, std::span<const Buffer>(&out, 1));
  }

 private:
  Tuner tuner_;
};

// Why the CUDA runtime finds no device, in the user's terms: no NVIDIA driver at all (the case
// of every machine without a GPU, where CUDA itself says "driver version is insufficient"), a
// driver too old for this build's runtime, or a driver that sees no GPU.
std::string no_device_reason(cudaError_t e) {
  const std::string cuda = std::string(" (CUDA: ") + cudaGetErrorString(e) + ")";
  const std::string use_cpu = "; engines for device='cpu' run here";
  if (e == cudaErrorInsufficientDriver) {
    if (void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD); lib == nullptr) {
      lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
      if (lib == nullptr) return "no NVIDIA driver on this machine (libcuda.so.1 is not found)" + use_cpu + cuda;
      dlclose(lib);
    }
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
    return "the NVIDIA driver supports CUDA " + version(driver) + ", older than this build's CUDA " + version(runtime) +
           ": update the driver" + use_cpu + cuda;
  }
  if (e == cudaErrorNoDevice) return "the NVIDIA driver finds no GPU on this machine" + use_cpu + cuda;
  return std::string("no usable CUDA driver or device") + cuda;
}

// One backend per device, made on first use and never destroyed: engines may outlive any static
// destructor order, and cuBLASLt must not be torn down after the CUDA runtime at exit.
std::mutex g_backends_mutex;
std::array<CudaBackend*, 64> g_backends{};

}  // namespace

}  // namespace tensoracle::cuda

// The entry point the core's loader (runtime/devices.cpp) calls: the backend of device
// `index` (-1: the calling thread's current device), or null with the reason in `error`.
extern "C" __attribute__((visibility("default"))) const tensoracle::backends::Backend* tensoracle_cuda_backend(
    int abi_version, const char* build_identity, int index, char* error, std::size_t error_size) {
  using namespace tensoracle::backends;
  using tensoracle::cuda::CudaBackend;
  using tensoracle::cuda::g_backends;
  using tensoracle::cuda::g_backends_mutex;
  auto fail = [&](const std::string& why) -> const Backend* {
    if (error && error_size) std::snprintf(error, error_size, "%s", why.c_str());
    return nullptr;
  };
  if (abi_version != kBackendAbiVersion)
    return fail("libtensoracle_cuda.so speaks backend interface version " + std::to_string(kBackendAbiVersion) +
                ", the core version " + std::to_string(abi_version) + ": they come from different builds of tensoracle");
  if (build_identity == nullptr || std::strcmp(build_identity, tensoracle::backends::build_identity()) != 0)
    return fail(std::string("libtensoracle_cuda.so was built from other sources than this core (build identity ") +
                tensoracle::backends::build_identity() + ", the core's " + (build_identity ? build_identity : "none") +
                "): the core passes C++ objects to it, so both must come from one build of tensoracle; rebuild or "
                "reinstall them together");
  try {
    int count = 0;
    if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
      cudaGetLastError();
      return fail(tensoracle::cuda::no_device_reason(e));
    }
    if (index < 0 && cudaGetDevice(&index) != cudaSuccess) index = 0;
    if (index >= count)
      return fail("there is no CUDA device " + std::to_string(index) + " (this machine has " + std::to_string(count) + ")");
    if (static_cast<std::size_t>(index) >= g_backends.size()) return fail("device index " + std::to_string(index) + " is too large");
    std::lock_guard lock(g_backends_mutex);
    auto& slot = g_backends[static_cast<std::size_t>(index)];
    if (!slot) slot = new CudaBackend(index);
    return slot;
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}
