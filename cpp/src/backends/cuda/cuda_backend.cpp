// The CUDA backend (libtensoracle_cuda.so): device memory, streams and copies through the CUDA
// runtime; matrix multiplies through cuBLASLt (gemm.h); every other layer through the kernels
// of kernels.h. A node's epilogue runs as in-order pointwise passes over scratch buffers, as on
// the CPU, except a bias row and ReLU / GELU (tanh) after a matrix multiply, which cuBLASLt's
// own epilogue applies, and an activation after a convolution, which the convolution applies
// (after cuDNN, in one pass with its bias). Executions of fixed shapes replay CUDA graphs
// (record()).
//
// The core opens this library with dlopen and calls tensoracle_cuda_backend (below) once per
// device; everything else goes through the backends::Backend interface.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>

#include "backends/cuda/conv.h"
#include "backends/cuda/cudnn_conv.h"
#include "backends/cuda/fp8_gemm.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/gemm_tactic.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/layouts.h"
#include "backends/cuda/tuning.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "plugin/instance.h"
#include "backends/backend.h"
#include "backends/plugin_node.h"
#include "tensoracle/errors.h"

namespace tensoracle::cuda {

using namespace backends;

namespace {

void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) throw Error("[cuda] " + what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

constexpr std::size_t kAlign = 256;
// How much faster than cuBLASLt's first choice a timed GEMM candidate must be to replace it
// (tuning.h).
constexpr double kTunedMargin = 0.02;
// A reduce whose few outputs each cover many elements, split over blocks (kernels.h, reduce);
// "cuda.reduce" (and engines from before it) reduce each output with one team.
constexpr const char* kReduceSplitTactic = "cuda.reduce.split";
std::size_t align_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

std::size_t bytes_of(const graph::TensorDesc& d) {
  auto v = d.dims.volume();
  return v < 0 ? 0 : static_cast<std::size_t>(v) * element_size(d.type);
}

cuda::TensorRef ref(const Buffer& b) { return {b.data, b.type, b.dims}; }
cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

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

int norm_axis(int axis, int rank) { return axis < 0 ? axis + rank : axis; }

// The ops of a matrix multiply's epilogue cuBLASLt applies itself: a SUM with a constant bias
// row ([1, ..., 1, N] in the output's type), optionally followed by RELU or GELU_TANH. Returns
// how many of the node's epilogue ops that covers (0, 1 or 2) and the GEMM epilogue.
// An int8 product applies none (its sums are scaled by a kernel of ours); an fp8 product only
// into a float16 or bfloat16 result (cuBLASLt's bias types for fp8).
std::pair<std::size_t, cuda::GemmEpilogue> lt_epilogue(const graph::Graph& g, const graph::Node& n) {
  if (n.type() != LayerType::kMATRIX_MULTIPLY || n.epilogue.empty()) return {0, cuda::GemmEpilogue::kNONE};
  // An int8 product's bias is added by its scale pass (scale_accumulator), without activation;
  // an fp8 product into float32 takes no epilogue.
  const bool int8 = n.quantized() && graph::arithmetic_type(g, n) == DataType::kINT8;
  if (n.quantized() && !int8 && n.main_desc.type == DataType::kFLOAT) return {0, cuda::GemmEpilogue::kNONE};
  const auto& first = n.epilogue[0];
  const auto* e = std::get_if<ElementWiseParams>(&first.params);
  if (!e || e->op != ElementWiseOperation::kSUM || first.operand < 0) return {0, cuda::GemmEpilogue::kNONE};
  const auto& bias = g.values[static_cast<std::size_t>(first.operand)];
  const auto& mm_out = n.main_desc;  // the matrix multiply's result, before the epilogue
  if (!bias.constant || bias.desc.type != mm_out.type || bias.desc.dims.rank() != mm_out.dims.rank() || mm_out.dims.rank() < 1)
    return {0, cuda::GemmEpilogue::kNONE};
  const int r = bias.desc.dims.rank();
  for (int i = 0; i + 1 < r; ++i)
    if (bias.desc.dims[i] != 1) return {0, cuda::GemmEpilogue::kNONE};
  if (bias.desc.dims[r - 1] != mm_out.dims[r - 1] || mm_out.dims[r - 1] < 1) return {0, cuda::GemmEpilogue::kNONE};
  if (int8) return {1, cuda::GemmEpilogue::kBIAS};
  if (n.epilogue.size() >= 2)
    if (const auto* a = std::get_if<ActivationParams>(&n.epilogue[1].params)) {
      if (a->type == ActivationType::kRELU) return {2, cuda::GemmEpilogue::kBIAS_RELU};
      if (a->type == ActivationType::kGELU_TANH) return {2, cuda::GemmEpilogue::kBIAS_GELU_TANH};
    }
  return {1, cuda::GemmEpilogue::kBIAS};
}


// The epilogue the fused fp8 GEMM (fp8_gemm.h) can apply to node `n`: a folded fp8 product into
// float16 whose first operand is used as is and second is a [N, K] matrix used transposed (a
// linear layer's weight), with the epilogue a constant bias row, GELU (erf) and, optionally,
// the next layer's per-tensor fp8 quantize by a constant scale (the lookup table bakes it in);
// nothing after them.
std::optional<cuda::Fp8Epilogue> fused_fp8_epilogue(const graph::Graph& g, const graph::Node& n) {
  const auto* mm = std::get_if<MatrixMultiplyParams>(&n.params);
  if (!mm || !n.quantized() || graph::arithmetic_type(g, n) != DataType::kFP8 || n.main_desc.type != DataType::kHALF)
    return std::nullopt;
  if (mm->op0 != MatrixOperation::kNONE || mm->op1 != MatrixOperation::kTRANSPOSE) return std::nullopt;
  if (g.values[static_cast<std::size_t>(n.inputs[0])].desc.dims.rank() < 2 ||
      g.values[static_cast<std::size_t>(n.inputs[1])].desc.dims.rank() != 2)
    return std::nullopt;
  if (lt_epilogue(g, n) != std::pair<std::size_t, cuda::GemmEpilogue>{1, cuda::GemmEpilogue::kBIAS}) return std::nullopt;
  if (n.epilogue.size() < 2 || n.epilogue.size() > 3) return std::nullopt;
  const auto* act = std::get_if<ActivationParams>(&n.epilogue[1].params);
  if (!act || act->type != ActivationType::kGELU_ERF || n.epilogue[1].desc.type != DataType::kHALF) return std::nullopt;
  if (n.epilogue.size() == 2) return cuda::Fp8Epilogue::kBIAS_GELU;
  const auto* q = std::get_if<QuantizeParams>(&n.epilogue[2].params);
  if (!q || q->to != DataType::kFP8 || n.epilogue[2].operand < 0) return std::nullopt;
  const auto& scale = g.values[static_cast<std::size_t>(n.epilogue[2].operand)];
  if (!scale.constant || scale.desc.dims.volume() != 1) return std::nullopt;
  return cuda::Fp8Epilogue::kBIAS_GELU_QUANTIZE;
}

// TENSORACLE_FP8_FUSED (diagnostics, tests): "0" never takes the fused fp8 GEMM, "1" takes it
// wherever it runs, at any optimization level; otherwise the builder times it from level 2.
std::string_view fused_fp8_choice() {
  const char* env = std::getenv("TENSORACLE_FP8_FUSED");
  return env ? env : "";
}

// Fills `bytes` of device memory at `p` with values of magnitude 0.5 to 1, random signs and
// mantissas (int8: any byte), for timing candidates: tensor cores run measurably faster on
// zeros (less switching), which would mislead the timing. The values never reach an engine.
void fill_random(void* p, std::size_t bytes, DataType type, std::uint64_t& seed) {
  std::vector<std::uint32_t> host((bytes + 3) / 4);
  for (auto& word : host) {
    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
    const auto r = static_cast<std::uint32_t>(seed);
    switch (type) {
      case DataType::kFLOAT: word = (r & 0x807FFFFFu) | 0x3F000000u; break;
      case DataType::kHALF: word = (r & 0x83FF83FFu) | 0x38003800u; break;
      case DataType::kBF16: word = (r & 0x807F807Fu) | 0x3F003F00u; break;
      case DataType::kINT8: word = r; break;
      case DataType::kFP8: word = r & 0xBFBFBFBFu; break;  // exponents below 8: finite, below 1
      default: word = 0;
    }
  }
  check(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice), "filling tuning buffers");
}

// Times `count` candidates on `stream` (launch(i) enqueues candidate i once; a tensoracle::Error
// from it or from the GPU marks the candidate failed) in interleaved rounds: each candidate's
// first runs (loading its kernels) give an estimate; ~20 ms of the first working one let the
// clocks settle; then rounds of ~1 ms per candidate (at least one run), 3 rounds instead of 7
// for slow candidates. Returns each candidate's time per run (ms) in every round; empty for a
// candidate that failed. tuning.h's choose_timed picks from it.
std::vector<std::vector<double>> time_candidates(std::size_t count, cudaStream_t stream,
                                                 const std::function<void(std::size_t)>& launch) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "creating timing events");
  if (cudaError_t e = cudaEventCreate(&stop); e != cudaSuccess) {
    cudaEventDestroy(start);
    check(e, "creating timing events");
  }
  auto ms_per_run = [&](std::size_t i, int runs) {
    check(cudaEventRecord(start, stream), "timing a candidate");
    for (int r = 0; r < runs; ++r) launch(i);
    check(cudaEventRecord(stop, stream), "timing a candidate");
    check(cudaEventSynchronize(stop), "timing a candidate");
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    return static_cast<double>(ms) / runs;
  };
  std::vector<std::vector<double>> times(count);
  std::vector<bool> failed(count, false);
  auto attempt = [&](std::size_t i, auto&& f) {
    if (failed[i]) return;
    try {
      f();
    } catch (const Error&) {
      cudaGetLastError();
      cudaStreamSynchronize(stream);
      failed[i] = true;
      times[i].clear();
    }
  };
  double estimate = 0;
  for (std::size_t i = 0; i < count; ++i)
    attempt(i, [&] {
      launch(i);
      estimate = std::max(estimate, ms_per_run(i, 1));
    });
  const auto first_ok = std::find(failed.begin(), failed.end(), false);
  if (first_ok != failed.end() && estimate > 0) {
    const std::size_t warm = static_cast<std::size_t>(first_ok - failed.begin());
    attempt(warm, [&] { ms_per_run(warm, std::clamp(static_cast<int>(20 / estimate), 2, 1000)); });
    const int reps = std::clamp(static_cast<int>(1 / estimate), 1, 10);
    const int rounds = estimate * reps * 7 * static_cast<double>(count) > 1000 ? 3 : 7;
    for (int r = 0; r < rounds; ++r)
      for (std::size_t i = 0; i < count; ++i) attempt(i, [&] { times[i].push_back(ms_per_run(i, reps)); });
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return times;
}

// A convolution applies the activation its epilogue starts with (on the cuDNN path in the same
// pass as its bias).
std::optional<ActivationParams> conv_activation(const graph::Node& n) {
  if (n.epilogue.empty()) return std::nullopt;
  if (const auto* a = std::get_if<ActivationParams>(&n.epilogue[0].params)) return *a;
  return std::nullopt;
}

class CudaBackend;

class CudaNodeKernel final : public NodeKernel {
 public:
  CudaNodeKernel(const CudaBackend& backend, const graph::Graph& g, const graph::Node& n);

  std::vector<graph::TensorDesc> chain(std::span<const Buffer> in) const {
    std::vector<graph::TensorDesc> descs;
    for (const auto& b : in) descs.push_back({b.type, b.dims});
    return graph::epilogue_chain(node_, descs, facts_);
  }

  // Scratch of the node's own op at these shapes (`main` describes its result).
  std::size_t main_workspace(std::span<const Buffer> in, const graph::TensorDesc& main) const {
    const cuda::TensorRef o{nullptr, main.type, main.dims};
    // The fused fp8 GEMM's fallback: cuBLASLt's scratch, then its float16 result; the table's
    // input (every float16 value) uses the same room on the first run.
    if (gemm_ && fp8_)
      return align_up(gemm_->workspace_bytes(ref(in[0]), ref(in[1]), o)) + std::max<std::size_t>(bytes_of(main), 65536 * 2);
    if (gemm_) return gemm_->workspace_bytes(ref(in[0]), ref(in[1]), o);
    if (conv_) return conv_->workspace_bytes(ref(in[0]), ref(in[1]), o);
    if (deconv_) return deconv_->workspace_bytes(ref(in[0]), ref(in[1]), o);
    if (einsum_) {
      std::vector<cuda::TensorRef> refs;
      for (std::size_t i = 0; i < node_.inputs.size(); ++i) refs.push_back(ref(in[i]));
      return einsum_->workspace_bytes(refs, o);
    }
    if (reduce_split_) return cuda::reduce_split_workspace_bytes();
    if (const auto* p = std::get_if<PluginParams>(&node_.params)) {
      std::size_t bytes = 0;
      with_prefix("[cuda] layer '" + node_.name + "': ", [&] {
        bytes = plan_plugin_call(*p->plugin, TENSORACLE_BACKEND_CUDA, plugin_descs(in, node_.inputs.size()),
                                 std::max(p->output, 0), kAlign).workspace;
      });
      return bytes;
    }
    return 0;
  }

  // The node's own scratch, then the epilogue passes' intermediate results: two buffers that
  // the passes alternate between, one when a single pass reads the main result and writes the
  // output.
  std::size_t workspace_bytes(std::span<const Buffer> in, const Buffer&) const override {
    auto descs = chain(in);
    const std::size_t main_ws = align_up(main_workspace(in, descs[0]));
    if (node_.epilogue.size() == fused_) return main_ws;
    std::size_t biggest = 0;
    for (std::size_t i = fused_; i + 1 < descs.size(); ++i) biggest = std::max(biggest, bytes_of(descs[i]));
    return main_ws + (epilogue_passes() > 1 ? 2 : 1) * align_up(biggest) + align_up(converted_operand_bytes(in));
  }

  // The largest epilogue operand stored in the other layout than the node's result (converted
  // into the workspace before its pass).
  std::size_t converted_operand_bytes(std::span<const Buffer> in) const {
    std::size_t bytes = 0;
    for (std::size_t k = node_.inputs.size(); k < in.size() && k < operand_cl_.size(); ++k)
      if (operand_cl_[k] != out_cl_) bytes = std::max(bytes, bytes_of({in[k].type, in[k].dims}));
    return bytes;
  }

  // The passes run() makes after the main op (an activation and the quantize after it are one).
  std::size_t epilogue_passes() const {
    std::size_t passes = 0;
    for (std::size_t i = fused_; i < node_.epilogue.size(); ++i, ++passes)
      if (paired(i)) ++i;
    return passes;
  }

  // Whether epilogue ops i and i + 1 run as one pass: an activation and the quantize after it,
  // or a sum and the ReLU after it (a residual block's add; float types, as both layers take).
  bool paired(std::size_t i) const {
    if (i + 1 >= node_.epilogue.size()) return false;
    const auto& first = node_.epilogue[i].params;
    const auto& second = node_.epilogue[i + 1].params;
    if (std::holds_alternative<ActivationParams>(first)) return std::holds_alternative<QuantizeParams>(second);
    const auto* sum = std::get_if<ElementWiseParams>(&first);
    const auto* relu = std::get_if<ActivationParams>(&second);
    return sum && sum->op == ElementWiseOperation::kSUM && relu && relu->type == ActivationType::kRELU;
  }

  void run(std::span<const Buffer> in, const Buffer& out, void* workspace, void* stream) const override;
  ~CudaNodeKernel() override;

 private:
  void run_main(std::span<const Buffer> in, const Buffer& out, std::byte* ws, cudaStream_t s) const;
  void run_fused_fp8(std::span<const Buffer> in, const Buffer& out, std::byte* ws, cudaStream_t s) const;
  // The fused fp8 GEMM's table, built on `s` the first time (`scratch`: 128 KiB); null while `s`
  // is capturing a graph before that (the run then takes the unfused path).
  const void* fp8_table(const cuda::TensorRef& quantize_scale, void* scratch, cudaStream_t s) const;
  void run_plugin(const PluginParams& p, std::span<const Buffer> in, const Buffer& out, std::byte* ws, cudaStream_t s) const;

  const CudaBackend& backend_;
  graph::Node node_;
  std::vector<graph::InputFacts> facts_;
  std::unique_ptr<cuda::Gemm> gemm_;
  std::unique_ptr<cuda::ConvolutionKernel> conv_;
  std::unique_ptr<cuda::DeconvolutionKernel> deconv_;
  std::unique_ptr<cuda::EinsumKernel> einsum_;
  std::size_t fused_ = 0;  // epilogue ops the main op applies (cuBLASLt's epilogue, a convolution's activation)
  std::optional<ActivationParams> conv_act_;  // a convolution's fused activation
  // Layouts (channels_last_value): of the node's result, as the main op writes it and the
  // epilogue passes keep it, and of each of node_.all_inputs().
  bool out_cl_ = false;
  std::vector<bool> operand_cl_;
  bool reduce_split_ = false;  // tactic cuda.reduce.split: reduce() gets its partials' scratch
  // Tactic cuda.gemm.sm90.fp8.epilogue<n>: the fused fp8 GEMM and its epilogue's lookup table
  // (built on the first run, outside stream capture); cuBLASLt and the separate pass where the
  // kernel does not run (this library or device, the run's shapes or addresses).
  std::optional<cuda::Fp8Epilogue> fp8_;
  bool fp8_kernel_ = false;
  bool fp8_weight_constant_ = false;  // the weight is the engine's: the kernel may load it before the previous node ends
  mutable std::mutex table_mutex_;
  mutable void* table_ = nullptr;
  mutable bool table_ready_ = false;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int index) : index_(index), dnn_(index) {
    DeviceGuard guard(index_);
    check(cudaGetDeviceProperties(&prop_, index_), "reading the properties of device " + std::to_string(index_));
    cudaDriverGetVersion(&driver_);
    cudaRuntimeGetVersion(&runtime_);
    cuda::check_lt(cublasLtCreate(&lt_), "creating a cuBLASLt handle");
  }
  ~CudaBackend() override {
    if (lt_) cublasLtDestroy(lt_);
  }

  int index() const { return index_; }
  const cudaDeviceProp& prop() const { return prop_; }
  cublasLtHandle_t lt() const { return lt_; }
  const cuda::CudnnContext& dnn() const { return dnn_; }

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

  bool can_fuse(const graph::Graph&, const graph::Node& producer, const graph::EpilogueOp& op) const override {
    if (std::holds_alternative<ShuffleParams>(producer.params) && producer.inputs.size() > 1) return false;
    if (const auto* s = std::get_if<SliceParams>(&producer.params); s && (s->tensor_inputs & 0x7)) return false;
    if (std::holds_alternative<ShapeParams>(producer.params)) return false;
    if (std::holds_alternative<PluginParams>(producer.params)) return false;  // the plugin writes its output
    return std::holds_alternative<ActivationParams>(op.params) || std::holds_alternative<CastParams>(op.params) ||
           std::holds_alternative<ElementWiseParams>(op.params) || std::holds_alternative<QuantizeParams>(op.params);
  }

  std::vector<std::string> tactics(const graph::Graph& g, const graph::Node& n) const override {
    if (n.type() == LayerType::kMATRIX_MULTIPLY) {
      auto [fused, e] = lt_epilogue(g, n);
      std::string base = "cuda.gemm.cublaslt";
      if (n.quantized()) base += graph::arithmetic_type(g, n) == DataType::kINT8 ? ".int8" : ".fp8";
      return {fused ? base + ".epilogue" + std::to_string(fused) : base};
    }
    return {"cuda." + std::string(layer_type_name(n.type()))};
  }

  std::unique_ptr<NodeKernel> instantiate(const graph::Graph& g, const graph::Node& n) const override {
    return std::make_unique<CudaNodeKernel>(*this, g, n);
  }

  // Matrix multiplies: cuBLASLt may use kGemmWorkspaceBytes of scratch, or what a workspace
  // limit leaves beside the node's other scratch ("/ws:<bytes>"). From level 2 cuBLASLt's top
  // candidates (within that scratch) are timed at the profile's opt shapes (on scratch buffers
  // of this device, in interleaved rounds; tuning.h says which one wins) and the chosen
  // algorithm is stored ("/algo:<hex>"); gemm_tactic.h has the format. Convolutions:
  // choose_convolution. Other nodes: the one tactic.
  std::string choose_tactic(const graph::Graph& g, const graph::Node& n, const TacticQuery& q) const override {
    std::string base = tactics(g, n).front();
    if (const auto* cp = std::get_if<ConvolutionParams>(&n.params)) return choose_convolution(g, n, *cp, q);
    // A pooling that reads a channels-last value stores its output so too where its readers take
    // it in place (layouts.h); the choice follows the graph, nothing is timed.
    if (std::holds_alternative<PoolingParams>(n.params))
      return cuda::pooling_chain_output(g, n) ? std::string(cuda::kPoolingChannelsLastTactic) : base;
    if (const auto* rp = std::get_if<ReduceParams>(&n.params)) {
      // Few outputs over many elements at the opt or max shapes: split over blocks, when the
      // partials' scratch fits the workspace limit (at other shapes reduce() decides again).
      if (!cuda::reduce_splits(*rp, q.inputs[0].dims) && !cuda::reduce_splits(*rp, q.max_inputs[0].dims)) return base;
      if (q.scratch_limit != kNoScratchLimit && node_scratch(g, n, kReduceSplitTactic, q) > q.scratch_limit) return base;
      return kReduceSplitTactic;
    }
    const auto* mm = std::get_if<MatrixMultiplyParams>(&n.params);
    if (!mm) return base;
    cuda::GemmTactic tactic{base, {}, std::nullopt};
    if (q.scratch_limit != kNoScratchLimit) {
      const std::size_t rest = node_scratch(g, n, base + "/ws:0", q);
      const std::uint64_t room = q.scratch_limit > rest ? q.scratch_limit - rest : 0;
      if (room < cuda::kGemmWorkspaceBytes) tactic.workspace = room / kAlign * kAlign;
    }
    const std::size_t lt_workspace = static_cast<std::size_t>(tactic.workspace.value_or(cuda::kGemmWorkspaceBytes));
    // The fused fp8 GEMM (bias, GELU and the next quantize in its epilogue) where it runs and its
    // scratch (cuBLASLt's fallback path) fits a workspace limit; timed below against cuBLASLt and
    // the separate pass.
    const auto fp8 = fused_fp8_epilogue(g, n);
    const std::string fused_tactic = cuda::format_fused_fp8_tactic(fp8 == cuda::Fp8Epilogue::kBIAS_GELU_QUANTIZE ? 3 : 2);
    const bool fp8_candidate = fp8 && fused_fp8_choice() != "0" && cuda::fused_fp8_gemm_runs_on(prop_.major, prop_.minor) &&
                               (q.scratch_limit == kNoScratchLimit || node_scratch(g, n, fused_tactic, q) <= q.scratch_limit);
    if (fp8_candidate && fused_fp8_choice() == "1") return fused_tactic;
    if (q.optimization_level < 2) return cuda::format_gemm_tactic(tactic);
    const auto in = q.inputs;
    // The matrix multiply's own result at these shapes (n.main_desc may hold -1s).
    std::vector<graph::InputFacts> facts(in.size());
    const graph::TensorDesc main = graph::infer_main(n, in, facts);
    if (!main.dims.all_known()) return cuda::format_gemm_tactic(tactic);
    auto [fused, epilogue] = lt_epilogue(g, n);
    DeviceGuard guard(index_);
    const DataType quantized = n.quantized() ? graph::arithmetic_type(g, n) : DataType::kFLOAT;
    cuda::Gemm gemm(lt_, n.name, *mm, epilogue, quantized, lt_workspace);
    // Scratch operands of random values (fill_random).
    std::vector<void*> owned;
    std::uint64_t seed = 0x9e3779b97f4a7c15ull;
    auto scratch = [&](std::size_t bytes, DataType type = DataType::kINT8) {
      bytes = std::max<std::size_t>(bytes, 256);
      void* p = allocate(bytes);
      owned.push_back(p);
      fill_random(p, bytes, type, seed);
      return p;
    };
    std::string fused_won;  // the fused fp8 GEMM's tactic when it won the timing
    try {
      // Copies of the operands to cycle through, spanning twice the L2 cache (at most 4), so that
      // a run does not find its operands in L2 from the run before: inside a network each GEMM
      // reads its weights from device memory, and L2-resident timing favours other tiles.
      const std::size_t pair = bytes_of(in[0]) + bytes_of(in[1]);
      const std::size_t l2 = prop_.l2CacheSize > 0 ? static_cast<std::size_t>(prop_.l2CacheSize) : 0;
      const std::size_t copies = std::clamp<std::size_t>(pair ? (2 * l2 + pair - 1) / pair : 1, 1, 4);
      std::vector<cuda::TensorRef> as, bs;
      auto copy_of = [&](const void* src, std::size_t bytes) {  // same values, another address
        bytes = std::max<std::size_t>(bytes, 256);
        void* p = allocate(bytes);
        owned.push_back(p);
        check(cudaMemcpy(p, src, bytes, cudaMemcpyDeviceToDevice), "copying tuning buffers");
        return p;
      };
      as.push_back({scratch(bytes_of(in[0]), in[0].type), in[0].type, in[0].dims});
      bs.push_back({scratch(bytes_of(in[1]), in[1].type), in[1].type, in[1].dims});
      for (std::size_t c = 1; c < copies; ++c) {
        as.push_back({copy_of(as[0].data, bytes_of(in[0])), in[0].type, in[0].dims});
        bs.push_back({copy_of(bs[0].data, bytes_of(in[1])), in[1].type, in[1].dims});
      }
      cuda::TensorRef o{scratch(bytes_of(main)), main.type, main.dims};
      const std::size_t nin = n.inputs.size();
      void* bias = fused ? scratch(bytes_of(in[nin]), in[nin].type) : nullptr;
      cuda::GemmScales scales;
      if (n.quantized()) scales = {scratch(4, DataType::kFLOAT), scratch(4, DataType::kFLOAT)};
      void* ws = scratch(gemm.workspace_bytes(as[0], bs[0], o));
      auto algos = gemm.candidates(as[0], bs[0], bias, o, 8, scales);
      cudaStream_t stream = static_cast<cudaStream_t>(create_stream());
      std::size_t turn = 0;
      try {
        const auto times = time_candidates(algos.size(), stream, [&](std::size_t i) {
          gemm.run_with(algos[i], as[turn % copies], bs[turn % copies], bias, o, ws, stream, scales);
          ++turn;
        });
        const int chosen = cuda::choose_timed(times, kTunedMargin);
        if (chosen >= 0) tactic.algo = cuda::algo_to_hex(algos[static_cast<std::size_t>(chosen)]);
        // (A candidate's operands have rank 2 or more: fused_fp8_epilogue.)
        const std::int64_t K = fp8_candidate ? in[0].dims[in[0].dims.rank() - 1] : 0, N = fp8_candidate ? in[1].dims[0] : 0;
        if (fp8_candidate && !algos.empty() && K > 0 && cuda::fused_fp8_gemm_fits(in[0].dims.volume() / K, N, K)) {
          // The fused kernel against cuBLASLt's kept algorithm and the GELU (+ quantize) pass,
          // each writing the node's final result; the pair must win clearly (kTunedMargin) to be
          // kept: timed alone it cannot show what one kernel instead of two saves inside a
          // network (a launch, and the fused kernel's start overlapping the previous kernel's
          // end: on the H200's fp8 MLP the float16-out layer fused was 0.8 us faster in the
          // engine while 1-2% slower timed here).
          const auto& algo = algos[static_cast<std::size_t>(std::max(chosen, 0))];
          const bool quantize = *fp8 == cuda::Fp8Epilogue::kBIAS_GELU_QUANTIZE;
          const auto& act = std::get<ActivationParams>(n.epilogue[1].params);
          const cuda::TensorRef qscale{scratch(4, DataType::kFLOAT), DataType::kFLOAT, Dims{1}};
          const graph::TensorDesc result{quantize ? DataType::kFP8 : DataType::kHALF, main.dims};
          const cuda::TensorRef final_out{scratch(bytes_of(result)), result.type, result.dims};
          void* table = scratch(cuda::fp8_epilogue_table_bytes(*fp8));
          cuda::build_fp8_epilogue_table(*fp8, act, qscale, table, scratch(65536 * 2), stream);
          const auto pair_times = time_candidates(2, stream, [&](std::size_t i) {
            const auto& a = as[turn % copies];
            const auto& b = bs[turn % copies];
            ++turn;
            if (i == 0) {
              cuda::fused_fp8_gemm(*fp8, a.data, b.data, a.dims.volume() / K, N, K, scales.a, scales.b, bias, table,
                                   true, final_out.data, stream, n.name);
            } else {
              gemm.run_with(algo, a, b, bias, o, ws, stream, scales);
              if (quantize) cuda::activation_quantize(act, o, qscale, final_out, stream);
              else cuda::activation(act, o, final_out, stream);
            }
          });
          if (cuda::choose_timed(pair_times, kTunedMargin) == 0) fused_won = fused_tactic;
        }
      } catch (...) {
        destroy_stream(stream);
        throw;
      }
      destroy_stream(stream);
    } catch (...) {
      for (void* p : owned) deallocate(p);
      throw;
    }
    for (void* p : owned) deallocate(p);
    return fused_won.empty() ? cuda::format_gemm_tactic(tactic) : fused_won;
  }

  // The scratch node `n` would reserve with this tactic at the query's max shapes.
  std::size_t node_scratch(const graph::Graph& g, const graph::Node& n, const std::string& tactic, const TacticQuery& q) const {
    graph::Node probe = n;
    probe.tactic = tactic;
    std::vector<Buffer> in;
    for (const auto& d : q.max_inputs) in.push_back({nullptr, d.type, d.dims});
    return instantiate(g, probe)->workspace_bytes(in, {nullptr, q.max_output.type, q.max_output.dims});
  }

  // Convolutions at fixed shapes where cuDNN is available: level 0 and 1 take cuDNN's first
  // usable configuration (cudnn_conv.h says which are usable), except for depthwise convolutions,
  // which keep the backend's direct kernel; from level 2 the backend's own path and the first 8
  // usable configurations of cuDNN's heuristics and of its fallback list are timed as GEMMs
  // are (cuDNN's first kept unless beaten by more than kTunedMargin; the direct kernel first
  // for depthwise), with channels-last configurations for float16/bfloat16 (below).
  // The tactic stores the problem and the configuration:
  // "cuda.convolution.cudnn/<shape>/cfg:<configuration>" (cudnn_tactic.h).
  std::string choose_convolution(const graph::Graph& g, const graph::Node& n, const ConvolutionParams& p,
                                 const TacticQuery& q) const {
    const std::string base = tactics(g, n).front();
    const auto in = q.inputs;
    const int level = q.optimization_level;
    std::vector<graph::InputFacts> facts(in.size());
    const graph::TensorDesc main = graph::infer_main(n, in, facts);
    if (!main.dims.all_known() || !in[0].dims.all_known() || !in[1].dims.all_known()) return base;
    const bool has_bias = n.inputs.size() > 2;
    DeviceGuard guard(index_);
    cuda::ConvolutionKernel plain(lt_, n.name, p);
    std::optional<cuda::CudnnConvShape> shape;
    std::vector<cuda::CudnnConv::Candidate> configs;
    std::size_t cap = cuda::kChunkBytes;
    try {
      shape = plain.cudnn_shape({nullptr, in[0].type, in[0].dims}, {nullptr, in[1].type, in[1].dims},
                                {nullptr, main.type, main.dims}, false);
      if (!shape || !dnn_.handle()) return base;
      // cuDNN's scratch: up to kChunkBytes, or what a workspace limit leaves beside the node's
      // other scratch (its epilogue's); the backend's own path stays reserved as the fallback for
      // other shapes, so configurations within its scratch cost nothing more.
      if (q.scratch_limit != kNoScratchLimit) {
        const cuda::TensorRef xm{nullptr, q.max_inputs[0].type, q.max_inputs[0].dims},
            wm{nullptr, q.max_inputs[1].type, q.max_inputs[1].dims};
        std::vector<graph::InputFacts> max_facts(q.max_inputs.size());
        const graph::TensorDesc max_main = graph::infer_main(n, q.max_inputs, max_facts);
        const std::size_t own = align_up(plain.workspace_bytes(xm, wm, {nullptr, max_main.type, max_main.dims}));
        const std::size_t epilogue = node_scratch(g, n, base, q) - own;
        const std::uint64_t room = q.scratch_limit > epilogue ? q.scratch_limit - epilogue : 0;
        cap = static_cast<std::size_t>(std::min<std::uint64_t>(cap, std::max<std::uint64_t>(room, own)));
      }
      cuda::CudnnConv problem(dnn_, *shape);
      configs = problem.candidates(level >= 2 ? 8 : 1, cap);
    } catch (const Error&) {
      return base;  // cuDNN refuses the problem: the backend's own path
    }
    if (configs.empty()) return base;
    const bool depthwise = shape->w[1] == 1;

    // float16/bfloat16 without groups, from level 2: also channels-last (NHWC) configurations
    // (8 for up to 8 channels, else 4), x's channels padded to 4 (up to 4 of them) or to a
    // multiple of 8. cuDNN's tensor-core
    // kernels are channels-last (a 7x7 first layer over 3 channels has one only for 4), so they
    // may win despite the three transposes around them; the timing below counts those. The
    // environment variable TENSORACLE_CUDNN_LAYOUT (diagnostics, tests) narrows the choice:
    // "nchw" drops them, "nhwc" takes the first of them at any level where there is one.
    const char* env = std::getenv("TENSORACLE_CUDNN_LAYOUT");
    const std::string_view layout = env ? env : "";
    cuda::CudnnConvShape nhwc = *shape;
    std::vector<cuda::CudnnConv::Candidate> nhwc_configs;
    if ((level >= 2 || layout == "nhwc") && layout != "nchw" && shape->type != DataType::kFLOAT &&
        shape->w[1] == shape->x[1]) {
      const std::int64_t c = shape->x[1];
      nhwc.channels_last = c <= 4 ? 4 : (c + 7) / 8 * 8;
      const std::size_t copies = cuda::channels_last_copy_bytes(nhwc);
      try {
        if (copies < cap) nhwc_configs = cuda::CudnnConv(dnn_, nhwc).candidates(c <= 8 ? 8 : 4, cap - copies);
      } catch (const Error&) {
        nhwc_configs.clear();  // cuDNN refuses the channels-last problem: the others only
      }
    }
    // The backend's direct kernel for few input channels (an image's first layer) on the same
    // channels-last copies: one more channels-last candidate where direct_conv_supported() holds
    // (cudnn_tactic.h). TENSORACLE_CONV_DIRECT (diagnostics, tests): "0" leaves it out, "1" takes
    // it at any level where it runs.
    const char* direct_env = std::getenv("TENSORACLE_CONV_DIRECT");
    const std::string_view direct_choice = direct_env ? direct_env : "";
    const bool direct = nhwc.channels_last == 4 && direct_choice != "0" && cuda::direct_conv_supported(nhwc) &&
                        cuda::channels_last_copy_bytes(nhwc) < cap;
    // Channels-last between convolutions: where chain_output() holds, the node writes its output
    // channels-last, and every candidate is timed writing it so (channels-last plans in place,
    // the others through a packed copy; the backend's own path is left out); a reader of a
    // channels-last x times its candidates with x so stored.
    const bool x_cl = cuda::channels_last_value(g, n.inputs[0]);
    const bool out_cl = (!nhwc_configs.empty() || direct) && q.scratch_limit == kNoScratchLimit &&
                        cuda::chain_output(g, n, *shape, in, main);
    if (direct && direct_choice == "1") return cuda::format_cudnn_tactic({nhwc, std::string(cuda::kDirectConfig), 0, out_cl});
    if (layout == "nhwc" && !nhwc_configs.empty())
      return cuda::format_cudnn_tactic({nhwc, nhwc_configs[0].config, nhwc_configs[0].workspace, out_cl});
    // Below level 2 a channels-last output only comes from the environment's nhwc (above), and
    // a channels-last x changes nothing in the tactic: cuDNN's first choice, untimed.
    if (level < 2) return depthwise ? base : cuda::format_cudnn_tactic({*shape, configs[0].config, configs[0].workspace});

    // Candidates: [cuDNN's first, ours, cuDNN's others] (ours first for depthwise), then the
    // channels-last ones; only those for a channels-last output.
    std::vector<std::string> names;
    std::vector<std::unique_ptr<cuda::ConvolutionKernel>> kernels;
    auto add = [&](const cuda::CudnnConv::Candidate* c, const cuda::CudnnConvShape& problem, bool chained) {
      auto k = std::make_unique<cuda::ConvolutionKernel>(lt_, n.name, p);
      if (c) {
        try {
          if (c->config == cuda::kDirectConfig) k->use_direct(problem);
          else k->use_cudnn(dnn_, problem, c->config, c->workspace);
        } catch (const Error&) {
          return;
        }
      }
      k->set_layouts(x_cl, chained);
      kernels.push_back(std::move(k));
      names.push_back(c ? cuda::format_cudnn_tactic({problem, c->config, c->workspace, chained}) : base);
    };
    const cuda::CudnnConv::Candidate own_direct{std::string(cuda::kDirectConfig), 0};
    if (out_cl) {
      for (const auto& c : configs) add(&c, *shape, true);
      for (const auto& c : nhwc_configs) add(&c, nhwc, true);
      if (direct) add(&own_direct, nhwc, true);
    }
    if (kernels.empty()) {
      if (depthwise) add(nullptr, *shape, false);
      for (std::size_t i = 0; i < configs.size(); ++i) {
        if (i == 1 && !depthwise) add(nullptr, *shape, false);
        add(&configs[i], *shape, false);
      }
      if (!depthwise && configs.size() == 1) add(nullptr, *shape, false);
      for (const auto& c : nhwc_configs) add(&c, nhwc, false);
      if (direct) add(&own_direct, nhwc, false);
    }
    std::vector<void*> owned;
    std::uint64_t seed = 0x9e3779b97f4a7c15ull;
    auto scratch = [&](const graph::TensorDesc& d) {
      const std::size_t bytes = std::max<std::size_t>(bytes_of(d), 256);
      void* ptr = allocate(bytes);
      owned.push_back(ptr);
      fill_random(ptr, bytes, d.type, seed);
      return ptr;
    };
    std::string best = base;
    cudaStream_t stream = nullptr;
    try {
      const cuda::TensorRef x{scratch(in[0]), in[0].type, in[0].dims}, w{scratch(in[1]), in[1].type, in[1].dims};
      const cuda::TensorRef o{scratch(main), main.type, main.dims};
      cuda::TensorRef b;
      if (has_bias) b = {scratch(in[2]), in[2].type, in[2].dims};
      std::size_t ws_bytes = 0;
      for (const auto& k : kernels) ws_bytes = std::max(ws_bytes, k->workspace_bytes(x, w, o));
      void* ws = ws_bytes ? scratch({DataType::kINT8, Dims{static_cast<std::int64_t>(ws_bytes)}}) : nullptr;
      stream = static_cast<cudaStream_t>(create_stream());
      const auto act = conv_activation(n);
      const auto times = time_candidates(kernels.size(), stream, [&](std::size_t i) {
        kernels[i]->run(x, w, has_bias ? &b : nullptr, o, ws, stream, act ? &*act : nullptr);
      });
      const int chosen = cuda::choose_timed(times, kTunedMargin);
      if (chosen >= 0) best = names[static_cast<std::size_t>(chosen)];
    } catch (...) {
      if (stream) destroy_stream(stream);
      for (void* ptr : owned) deallocate(ptr);
      throw;
    }
    destroy_stream(stream);
    for (void* ptr : owned) deallocate(ptr);
    return best;
  }

  MemoryKind memory() const override { return MemoryKind::kDevice; }

  void* allocate(std::size_t bytes) const override {
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
  void deallocate(void* p) const noexcept override {
    if (!p) return;
    DeviceGuard guard(index_);
    cudaFree(p);
  }

  void copy(void* dst, const void* src, std::size_t bytes, CopyKind kind, void* stream) const override {
    if (bytes == 0) return;
    const cudaMemcpyKind k = kind == CopyKind::kHostToDevice   ? cudaMemcpyHostToDevice
                             : kind == CopyKind::kDeviceToHost ? cudaMemcpyDeviceToHost
                                                               : cudaMemcpyDeviceToDevice;
    DeviceGuard guard(index_);
    check(cudaMemcpyAsync(dst, src, bytes, k, as_stream(stream)), "copying " + std::to_string(bytes) + " bytes");
  }

  void* create_stream() const override {
    DeviceGuard guard(index_);
    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "creating a stream");
    return s;
  }
  void destroy_stream(void* s) const noexcept override {
    if (s) cudaStreamDestroy(as_stream(s));
  }
  void synchronize(void* s) const override {
    DeviceGuard guard(index_);
    check(cudaStreamSynchronize(as_stream(s)), "running the engine");
  }
  void check_stream(void*) const override {}

  // Events recorded on the stream between the nodes' launches: device time, no stalls.
  struct Events final : Timeline {
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

  std::unique_ptr<Timeline> timeline(void* stream) const override {
    auto t = std::make_unique<Events>();
    t->device = index_;
    t->stream = as_stream(stream);
    t->mark();  // the start
    return t;
  }

  struct Graph final : Recording {
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

  std::unique_ptr<Recording> record(void* stream, const std::function<void(void*)>& launches) const override {
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

 private:
  int index_;
  cudaDeviceProp prop_{};
  int driver_ = 0, runtime_ = 0;
  cublasLtHandle_t lt_ = nullptr;
  cuda::CudnnContext dnn_;
};

CudaNodeKernel::CudaNodeKernel(const CudaBackend& backend, const graph::Graph& g, const graph::Node& n)
    : backend_(backend), node_(n) {
  for (int v : n.all_inputs()) facts_.push_back({g.values[static_cast<std::size_t>(v)].constant.has_value(), std::nullopt});
  if (const auto* c = std::get_if<ConvolutionParams>(&n.params)) {
    conv_ = std::make_unique<cuda::ConvolutionKernel>(backend.lt(), n.name, *c);
    conv_act_ = conv_activation(n);
    fused_ = conv_act_ ? 1 : 0;
    if (n.tactic.starts_with(cuda::kCudnnTacticPrefix)) {
      cuda::CudnnTactic t;
      if (!cuda::parse_cudnn_tactic(n.tactic, t))
        throw CorruptEngineError("[cuda] node '" + n.name + "': the tactic's cuDNN convolution is malformed");
      std::string why;
      if (t.out_channels_last && !cuda::channels_last_readers_ok(g, n, &why))
        throw CorruptEngineError("[cuda] node '" + n.name + "': its tactic stores the output channels-last, but " + why +
                                 " (malformed engine)");
      out_cl_ = t.out_channels_last;
      try {
        if (t.config == cuda::kDirectConfig) conv_->use_direct(t.shape);  // the backend's own kernel
        else conv_->use_cudnn(backend.dnn(), t.shape, t.config, t.workspace);
      } catch (const CorruptEngineError&) {
        throw;
      } catch (const Error&) {
        // cuDNN missing here, or its configuration does not build with this cuDNN: the backend's
        // own convolution (same results within float32 rounding; slower).
      }
    }
    conv_->set_layouts(cuda::channels_last_value(g, n.inputs[0]), out_cl_);
  }
  for (int v : n.all_inputs()) operand_cl_.push_back(cuda::channels_last_value(g, v));
  if (std::holds_alternative<PoolingParams>(n.params)) {
    // "cuda.pooling/o:1" only where the builder writes it: a channels-last input, readers that
    // take the value so (pooling_chain_output).
    if (n.tactic == cuda::kPoolingChannelsLastTactic) {
      std::string why;
      if (!operand_cl_[0]) why = "its input is not";
      else cuda::channels_last_readers_ok(g, n, &why);
      if (!why.empty())
        throw CorruptEngineError("[cuda] node '" + n.name + "': its tactic stores the output channels-last, but " + why +
                                 " (malformed engine)");
      out_cl_ = true;
    } else if (!n.tactic.empty() && n.tactic != "cuda.pooling") {
      throw CorruptEngineError("[cuda] node '" + n.name + "': tactic '" + n.tactic + "' is not a pooling's (malformed engine)");
    }
  }
  if (std::holds_alternative<ReduceParams>(n.params)) {
    if (n.tactic == kReduceSplitTactic) reduce_split_ = true;
    else if (!n.tactic.empty() && n.tactic != "cuda.reduce")
      throw CorruptEngineError("[cuda] node '" + n.name + "': tactic '" + n.tactic + "' is not a reduce's (malformed engine)");
  }
  if (const auto* d = std::get_if<DeconvolutionParams>(&n.params))
    deconv_ = std::make_unique<cuda::DeconvolutionKernel>(backend.lt(), n.name, *d);
  if (const auto* e = std::get_if<EinsumParams>(&n.params)) einsum_ = std::make_unique<cuda::EinsumKernel>(backend.lt(), n.name, *e);
  if (const auto* p = std::get_if<MatrixMultiplyParams>(&n.params)) {
    auto [fused, epilogue] = lt_epilogue(g, n);
    fused_ = fused;
    cuda::GemmTactic t;
    int fp8_ops = 0;
    if (cuda::parse_fused_fp8_tactic(n.tactic, fp8_ops)) {
      // Only where the builder writes it: the node's epilogue is the kernel's (fused_fp8_epilogue).
      fp8_ = fused_fp8_epilogue(g, n);
      if (!fp8_ || static_cast<std::size_t>(fp8_ops) != n.epilogue.size())
        throw CorruptEngineError("[cuda] node '" + n.name + "': tactic '" + n.tactic +
                                 "' does not match the node's product and epilogue (malformed engine)");
      fused_ = n.epilogue.size();
      fp8_kernel_ = cuda::fused_fp8_gemm_runs_on(backend.prop().major, backend.prop().minor);
      fp8_weight_constant_ = g.values[static_cast<std::size_t>(n.inputs[1])].constant.has_value();
    } else if (!n.tactic.empty() && !cuda::parse_gemm_tactic(n.tactic, t)) {
      throw CorruptEngineError("[cuda] node '" + n.name + "': its tactic is not a matrix multiply's (malformed engine)");
    }
    gemm_ = std::make_unique<cuda::Gemm>(backend.lt(), n.name, *p, epilogue,
                                         n.quantized() ? graph::arithmetic_type(g, n) : DataType::kFLOAT,
                                         static_cast<std::size_t>(std::min<std::uint64_t>(
                                             t.workspace.value_or(cuda::kGemmWorkspaceBytes), cuda::kGemmWorkspaceBytes)));
    if (!t.algo.empty()) {
      cublasLtMatmulAlgo_t algo{};
      if (!cuda::algo_from_hex(t.algo, algo))
        throw CorruptEngineError("[cuda] node '" + n.name + "': the tactic's GEMM algorithm is malformed");
      gemm_->prefer(algo);
    }
  }
}

void CudaNodeKernel::run(std::span<const Buffer> in, const Buffer& out, void* workspace, void* stream) const {
  DeviceGuard guard(backend_.index());
  auto* ws = static_cast<std::byte*>(workspace);
  const cudaStream_t s = as_stream(stream);
  if (node_.epilogue.size() == fused_) {
    run_main(in, out, ws, s);
    return;
  }
  auto descs = chain(in);
  std::size_t biggest = 0;
  for (std::size_t i = fused_; i + 1 < descs.size(); ++i) biggest = std::max(biggest, bytes_of(descs[i]));
  const std::size_t main_ws = align_up(main_workspace(in, descs[0]));
  std::byte* scratch[2] = {ws + main_ws, ws + main_ws + align_up(biggest)};
  const std::size_t done = fused_;
  int slot = 0;  // the scratch buffer holding `cur`; each pass writes the other
  Buffer cur{scratch[slot], descs[done].type, descs[done].dims};
  run_main(in, cur, ws, s);
  std::byte* converted = ws + main_ws + (epilogue_passes() > 1 ? 2 : 1) * align_up(biggest);
  // Epilogue operand k in the result's layout: as stored, or converted into the workspace.
  auto operand = [&](std::size_t k) -> cuda::TensorRef {
    const cuda::TensorRef r = ref(in[k]);
    if (!(operand_cl_[k] || out_cl_) || r.dims.volume() == 1) return r;
    if (!(r.dims == cur.dims))
      throw Error("[cuda] node '" + node_.name + "': epilogue operand " + r.dims.str() + " cannot broadcast onto the " +
                  cur.dims.str() + " result when either is stored channels-last");
    if (operand_cl_[k] == out_cl_) return r;
    const cuda::TensorRef c{converted, r.type, r.dims};
    if (out_cl_) cuda::to_channels_last(r, r.dims[1], converted, s);
    else cuda::from_channels_last(r.data, c, nullptr, nullptr, s);
    return c;
  };
  std::size_t k = node_.inputs.size();
  for (std::size_t i = 0; i < done; ++i)
    if (node_.epilogue[i].operand >= 0) ++k;
  for (std::size_t i = done; i < node_.epilogue.size(); ++i) {
    const auto& op = node_.epilogue[i];
    // An activation followed by a quantize, or a sum followed by ReLU, runs as one pass (the
    // first result rounded to its type in registers, as if stored).
    const auto* a = std::get_if<ActivationParams>(&op.params);
    const bool pair = paired(i);
    const bool operand_first = op.operand_first;
    if (pair) ++i;
    const bool last = i + 1 == node_.epilogue.size();
    slot = 1 - slot;
    Buffer next = last ? out : Buffer{scratch[slot], descs[i + 1].type, descs[i + 1].dims};
    if (pair && a) {
      cuda::activation_quantize(*a, ref(cur), operand(k++), ref(next), s);
    } else if (pair) {
      const cuda::TensorRef other = operand(k++);
      if (operand_first) cuda::sum_relu(other, ref(cur), ref(next), s);
      else cuda::sum_relu(ref(cur), other, ref(next), s);
    } else if (a) {
      cuda::activation(*a, ref(cur), ref(next), s);
    } else if (std::holds_alternative<CastParams>(op.params)) {
      cuda::cast(ref(cur), ref(next), s);
    } else if (const auto* e = std::get_if<ElementWiseParams>(&op.params)) {
      const cuda::TensorRef other = operand(k++);
      if (op.operand_first) cuda::elementwise(e->op, other, ref(cur), ref(next), s);
      else cuda::elementwise(e->op, ref(cur), other, ref(next), s);
    } else if (std::holds_alternative<QuantizeParams>(op.params)) {
      cuda::quantize(ref(cur), operand(k++), 0, ref(next), s);  // a per-tensor scale (fuse_pointwise)
    } else {
      throw BuildError("[cuda] node '" + node_.name + "': layer '" + op.layer + "' cannot run as an epilogue");
    }
    cur = next;
  }
}

CudaNodeKernel::~CudaNodeKernel() { backend_.deallocate(table_); }

const void* CudaNodeKernel::fp8_table(const cuda::TensorRef& quantize_scale, void* scratch, cudaStream_t s) const {
  std::lock_guard lock(table_mutex_);
  if (table_ready_) return table_;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(s, &capturing), "node '" + node_.name + "': querying the stream");
  if (capturing != cudaStreamCaptureStatusNone) return nullptr;
  if (!table_) table_ = backend_.allocate(cuda::fp8_epilogue_table_bytes(*fp8_));
  cuda::build_fp8_epilogue_table(*fp8_, std::get<ActivationParams>(node_.epilogue[1].params), quantize_scale, table_,
                                 scratch, s);
  // Other executions' streams use the table from now on.
  check(cudaStreamSynchronize(s), "node '" + node_.name + "': building the fp8 GEMM's epilogue table");
  table_ready_ = true;
  return table_;
}

void CudaNodeKernel::run_fused_fp8(std::span<const Buffer> in, const Buffer& out, std::byte* ws, cudaStream_t s) const {
  const cuda::TensorRef a = ref(in[0]), b = ref(in[1]);
  const std::size_t nin = node_.inputs.size();
  const void* bias = in[nin].data;
  const cuda::TensorRef quantize_scale = *fp8_ == cuda::Fp8Epilogue::kBIAS_GELU_QUANTIZE ? ref(in[nin + 1]) : cuda::TensorRef{};
  const cuda::GemmScales scales{in[2].data, in[3].data};
  const std::int64_t K = a.dims[a.dims.rank() - 1], N = b.dims[0], M = K > 0 ? a.dims.volume() / K : 0;
  const cuda::TensorRef h{nullptr, DataType::kHALF, out.dims};  // the product with its bias, as the passes read it
  std::byte* rest = ws + align_up(gemm_->workspace_bytes(a, b, h));
  if (fp8_kernel_ && cuda::fused_fp8_gemm_fits(M, N, K) && cuda::fused_fp8_gemm_aligned(a.data, b.data, bias, out.data))
    if (const void* table = fp8_table(quantize_scale, rest, s)) {
      cuda::fused_fp8_gemm(*fp8_, a.data, b.data, M, N, K, scales.a, scales.b, bias, table, fp8_weight_constant_, out.data,
                           s, node_.name);
      return;
    }
  const cuda::TensorRef product{rest, DataType::kHALF, out.dims};
  gemm_->run(a, b, bias, product, ws, s, scales);
  const auto& act = std::get<ActivationParams>(node_.epilogue[1].params);
  if (quantize_scale.data) cuda::activation_quantize(act, product, quantize_scale, ref(out), s);
  else cuda::activation(act, product, ref(out), s);
}

// Host values of a slice's shape-tensor input (start, size or stride).
Dims host_dims(const Buffer& b, const std::string& node) {
  if (!b.host_values)
    throw UnsupportedError("[cuda] node '" + node + "': slice bounds computed on the device are not supported; derive them "
                           "from add_shape outputs and constants");
  return Dims(std::span<const std::int64_t>(*b.host_values));
}

void CudaNodeKernel::run_main(std::span<const Buffer> in, const Buffer& out, std::byte* ws, cudaStream_t s) const {
  std::visit(
      [&](const auto& p) {
        using P = std::decay_t<decltype(p)>;
        if constexpr (std::is_same_v<P, MatrixMultiplyParams>) {
          if (fp8_) {
            run_fused_fp8(in, out, ws, s);
            return;
          }
          const void* bias = fused_ > 0 ? in[node_.inputs.size()].data : nullptr;
          cuda::GemmScales scales;
          if (node_.quantized()) scales = {in[2].data, in[3].data};
          gemm_->run(ref(in[0]), ref(in[1]), bias, ref(out), ws, s, scales);
        } else if constexpr (std::is_same_v<P, ElementWiseParams>) {
          cuda::elementwise(p.op, ref(in[0]), ref(in[1]), ref(out), s);
        } else if constexpr (std::is_same_v<P, ActivationParams>) {
          cuda::activation(p, ref(in[0]), ref(out), s);
        } else if constexpr (std::is_same_v<P, CastParams>) {
          cuda::cast(ref(in[0]), ref(out), s);
        } else if constexpr (std::is_same_v<P, QuantizeParams>) {
          cuda::quantize(ref(in[0]), ref(in[1]), norm_axis(p.axis, in[0].dims.rank()), ref(out), s);
        } else if constexpr (std::is_same_v<P, DequantizeParams>) {
          cuda::dequantize(ref(in[0]), ref(in[1]), norm_axis(p.axis, in[0].dims.rank()), ref(out), s);
        } else if constexpr (std::is_same_v<P, ShuffleParams>) {
          ShuffleParams q = p;
          if (node_.inputs.size() > 1) q.reshape_dims = out.dims;  // dims from a shape tensor: the output's say them
          cuda::shuffle(q, ref(in[0]), ref(out), s);
        } else if constexpr (std::is_same_v<P, IdentityParams>) {
          cuda::copy(ref(in[0]), ref(out), s);
        } else if constexpr (std::is_same_v<P, UnaryParams>) {
          cuda::unary(p.op, ref(in[0]), ref(out), s);
        } else if constexpr (std::is_same_v<P, ReduceParams>) {
          cuda::reduce(p, ref(in[0]), ref(out), s, reduce_split_ ? ws : nullptr);
        } else if constexpr (std::is_same_v<P, SoftmaxParams>) {
          cuda::softmax(graph::softmax_axis(p, in[0].dims.rank()), ref(in[0]), ref(out), s);
        } else if constexpr (std::is_same_v<P, NormalizationParams>) {
          cuda::normalization(p, ref(in[0]), ref(in[1]), ref(in[2]), ref(out), s);
        } else if constexpr (std::is_same_v<P, PoolingParams>) {
          cuda::pooling(p, ref(in[0]), ref(out), s, operand_cl_[0], out_cl_);
        } else if constexpr (std::is_same_v<P, ConcatenationParams>) {
          std::vector<cuda::TensorRef> refs;
          for (std::size_t i = 0; i < node_.inputs.size(); ++i) refs.push_back(ref(in[i]));
          cuda::concatenation(graph::concat_axis(p, in[0].dims.rank()), refs, ref(out), s);
        } else if constexpr (std::is_same_v<P, SliceParams>) {
          SliceParams q = p;
          for (int index : {kSliceStart, kSliceSize, kSliceStride}) {
            int pos = slice_input_position(p, index);
            if (pos < 0) continue;
            Dims d = host_dims(in[static_cast<std::size_t>(pos)], node_.name);
            (index == kSliceStart ? q.start : index == kSliceSize ? q.size : q.stride) = d;
          }
          int fill_pos = slice_input_position(p, kSliceFill);
          cuda::TensorRef fill = fill_pos >= 0 ? ref(in[static_cast<std::size_t>(fill_pos)]) : cuda::TensorRef{};
          cuda::slice(q, ref(in[0]), fill_pos >= 0 ? &fill : nullptr, ref(out), s);
        } else if constexpr (std::is_same_v<P, GatherParams>) {
          cuda::gather(p, ref(in[0]), ref(in[1]), ref(out), s);
        } else if constexpr (std::is_same_v<P, TopKParams>) {
          cuda::topk(p, ref(in[0]), ref(out), s);
        } else if constexpr (std::is_same_v<P, SelectParams>) {
          cuda::select(ref(in[0]), ref(in[1]), ref(in[2]), ref(out), s);
        } else if constexpr (std::is_same_v<P, PaddingParams>) {
          cuda::padding(p, ref(in[0]), ref(out), s);
        } else if constexpr (std::is_same_v<P, ResizeParams>) {
          cuda::resize(p, ref(in[0]), ref(out), s);
        } else if constexpr (std::is_same_v<P, ConvolutionParams>) {
          cuda::TensorRef bias = node_.inputs.size() > 2 ? ref(in[2]) : cuda::TensorRef{};
          conv_->run(ref(in[0]), ref(in[1]), node_.inputs.size() > 2 ? &bias : nullptr, ref(out), ws, s,
                     conv_act_ ? &*conv_act_ : nullptr);
        } else if constexpr (std::is_same_v<P, DeconvolutionParams>) {
          cuda::TensorRef bias = node_.inputs.size() > 2 ? ref(in[2]) : cuda::TensorRef{};
          deconv_->run(ref(in[0]), ref(in[1]), node_.inputs.size() > 2 ? &bias : nullptr, ref(out), ws, s);
        } else if constexpr (std::is_same_v<P, EinsumParams>) {
          std::vector<cuda::TensorRef> refs;
          for (std::size_t i = 0; i < node_.inputs.size(); ++i) refs.push_back(ref(in[i]));
          einsum_->run(refs, ref(out), ws, s);
        } else if constexpr (std::is_same_v<P, PluginParams>) {
          run_plugin(p, in, out, ws, s);
        } else {
          throw UnsupportedError("[cuda] node '" + node_.name + "': no CUDA kernel for layer type " +
                                 std::string(layer_type_name(node_.type())));
        }
      },
      node_.params);
}

// A plugin node: device pointers and the execution's stream; the outputs this node does not
// keep go into the workspace after the plugin's own scratch.
void CudaNodeKernel::run_plugin(const PluginParams& p, std::span<const Buffer> in, const Buffer& out, std::byte* ws,
                                cudaStream_t s) const {
  run_plugin_node("cuda", node_, p, TENSORACLE_BACKEND_CUDA, kAlign, in, out, ws,
                  [&](auto... args) { p.plugin->enqueue_cuda(args..., static_cast<void*>(s)); });
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
    int abi_version, int index, char* error, std::size_t error_size) {
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
  try {
    int count = 0;
    if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
      cudaGetLastError();
      return fail(std::string("no usable CUDA driver or device: ") + cudaGetErrorString(e));
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
