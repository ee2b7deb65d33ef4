// The CUDA backend's node kernels (node_kernel.h): per-layer dispatch of a node's own op, the
// fused fp8 GEMM with its fallback, plugins, and the epilogue passes after the main op. A
// node's epilogue runs as in-order pointwise passes over scratch buffers, as on the CPU, except
// a bias row and ReLU / GELU (tanh) after a matrix multiply, which cuBLASLt's own epilogue
// applies, and an activation after a convolution, which the convolution applies (after cuDNN,
// in one pass with its bias).
#include "backends/cuda/node_kernel.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backends/cuda/conv.h"
#include "backends/cuda/cudnn_conv.h"
#include "backends/cuda/fp8_gemm.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/gemm_tactic.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/layouts.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "plugin/instance.h"
#include "backends/backend.h"
#include "backends/plugin_node.h"
#include "tensoracle/errors.h"

namespace tensoracle::cuda {

using namespace backends;

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

std::optional<ActivationParams> conv_activation(const graph::Node& n) {
  if (n.epilogue.empty()) return std::nullopt;
  if (const auto* a = std::get_if<ActivationParams>(&n.epilogue[0].params)) return *a;
  return std::nullopt;
}

namespace {

cuda::TensorRef ref(const Buffer& b) { return {b.data, b.type, b.dims}; }

int norm_axis(int axis, int rank) { return axis < 0 ? axis + rank : axis; }

class CudaNodeKernel final : public NodeKernel {
 public:
  CudaNodeKernel(const Device& device, const graph::Graph& g, const graph::Node& n);

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

  const Device& device_;
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

CudaNodeKernel::CudaNodeKernel(const Device& device, const graph::Graph& g, const graph::Node& n)
    : device_(device), node_(n) {
  for (int v : n.all_inputs()) facts_.push_back({g.values[static_cast<std::size_t>(v)].constant.has_value(), std::nullopt});
  if (const auto* c = std::get_if<ConvolutionParams>(&n.params)) {
    conv_ = std::make_unique<cuda::ConvolutionKernel>(device.lt(), n.name, *c);
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
        else conv_->use_cudnn(device.dnn(), t.shape, t.config, t.workspace);
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
    deconv_ = std::make_unique<cuda::DeconvolutionKernel>(device.lt(), n.name, *d);
  if (const auto* e = std::get_if<EinsumParams>(&n.params)) einsum_ = std::make_unique<cuda::EinsumKernel>(device.lt(), n.name, *e);
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
      fp8_kernel_ = cuda::fused_fp8_gemm_runs_on(device.prop().major, device.prop().minor);
      fp8_weight_constant_ = g.values[static_cast<std::size_t>(n.inputs[1])].constant.has_value();
    } else if (!n.tactic.empty() && !cuda::parse_gemm_tactic(n.tactic, t)) {
      throw CorruptEngineError("[cuda] node '" + n.name + "': its tactic is not a matrix multiply's (malformed engine)");
    }
    gemm_ = std::make_unique<cuda::Gemm>(device.lt(), n.name, *p, epilogue,
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
  DeviceGuard guard(device_.index());
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

CudaNodeKernel::~CudaNodeKernel() { device_.deallocate(table_); }

const void* CudaNodeKernel::fp8_table(const cuda::TensorRef& quantize_scale, void* scratch, cudaStream_t s) const {
  std::lock_guard lock(table_mutex_);
  if (table_ready_) return table_;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(s, &capturing), "node '" + node_.name + "': querying the stream");
  if (capturing != cudaStreamCaptureStatusNone) return nullptr;
  if (!table_) table_ = device_.allocate(cuda::fp8_epilogue_table_bytes(*fp8_));
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

}  // namespace

std::unique_ptr<NodeKernel> make_node_kernel(const Device& device, const graph::Graph& g, const graph::Node& n) {
  return std::make_unique<CudaNodeKernel>(device, g, n);
}

}  // namespace tensoracle::cuda
