// The CUDA backend's node kernels (node_kernel.h): a node's own op through its kind's entry
// (op_kernel.h, ops/registry.cu), and the epilogue passes after it. A node's epilogue runs as in-order pointwise passes over scratch buffers, as on the CPU, except
// a bias row and ReLU / GELU (tanh) after a matrix multiply, which cuBLASLt's own epilogue
// applies, and an activation after a convolution, which the convolution applies (after cuDNN,
// in one pass with its bias).
#include "backends/cuda/node_kernel.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/cuda/fp8_gemm.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/layouts.h"
#include "backends/cuda/op_kernel.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "backends/backend.h"
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

namespace {

class CudaNodeKernel final : public NodeKernel {
 public:
  CudaNodeKernel(const Device& device, const graph::Graph& g, const graph::Node& n);

  std::vector<graph::TensorDesc> chain(std::span<const Buffer> in) const {
    std::vector<graph::TensorDesc> descs;
    for (const auto& b : in) descs.push_back({b.type, b.dims});
    return graph::epilogue_chain(node_, descs, facts_);
  }

  // Scratch of the node's own op at these shapes (`main` describes its result).
  std::size_t main_workspace(std::span<const Buffer> in, const graph::TensorDesc& main, std::span<const Buffer> extra) const {
    if (!op_ || !op_->workspace) return 0;
    const Buffer o{nullptr, main.type, main.dims};
    return op_->workspace(cuda::OpCall{node_, state_.get(), in, o, nullptr, nullptr, extra});
  }

  // The node's own scratch, then the epilogue passes' intermediate results: two buffers that
  // the passes alternate between, one when a single pass reads the main result and writes the
  // output.
  std::size_t workspace_bytes(std::span<const Buffer> in, std::span<const Buffer> outs) const override {
    auto descs = chain(in);
    const std::size_t main_ws = align_up(main_workspace(in, descs[0], outs.subspan(1)));
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

  void run(std::span<const Buffer> in, std::span<const Buffer> outs, void* workspace, void* stream) const override;

 private:
  void run_main(std::span<const Buffer> in, const Buffer& out, std::byte* ws, cudaStream_t s,
                std::span<const Buffer> extra = {}) const;

  const Device& device_;
  graph::Node node_;
  std::vector<graph::InputFacts> facts_;
  const cuda::OpKernel* op_;  // the node's kind's entry (null: none runs on CUDA)
  std::unique_ptr<cuda::OpState> state_;  // what op_->prepare made (a cuda::Gemm, a convolution's kernel, ...)
  std::size_t fused_ = 0;  // epilogue ops the main op applies (cuBLASLt's epilogue, a convolution's activation)
  // Layouts (channels_last_value): of the node's result, as the main op writes it and the
  // epilogue passes keep it, and of each of node_.all_inputs().
  bool out_cl_ = false;
  std::vector<bool> operand_cl_;
};

CudaNodeKernel::CudaNodeKernel(const Device& device, const graph::Graph& g, const graph::Node& n)
    : device_(device), node_(n), op_(cuda::op_kernel(n.type())) {
  for (int v : n.all_inputs()) facts_.push_back({g.values[static_cast<std::size_t>(v)].constant.has_value(), std::nullopt});
  for (int v : n.all_inputs()) operand_cl_.push_back(cuda::channels_last_value(g, v));
  // An engine file's layouts are not trusted: a channels-last output only where the builder
  // stores it so (layouts.h).
  out_cl_ = cuda::channels_last_value(g, n.output);
  if (std::string why; out_cl_ && !cuda::channels_last_writer_ok(g, n, &why))
    throw CorruptEngineError("[cuda] node '" + n.name + "': its output is stored channels-last, but " + why +
                             " (malformed engine)");
  if (op_ && op_->prepare) {
    cuda::OpPrepared prepared = op_->prepare(cuda::OpSetup{device, device.lt(), device.dnn(), g, n, operand_cl_, out_cl_});
    state_ = std::move(prepared.state);
    fused_ = prepared.fused;
  }
}

void CudaNodeKernel::run(std::span<const Buffer> in, std::span<const Buffer> outs, void* workspace, void* stream) const {
  DeviceGuard guard(device_.index());
  auto* ws = static_cast<std::byte*>(workspace);
  const cudaStream_t s = as_stream(stream);
  const Buffer& out = outs[0];
  if (node_.epilogue.size() == fused_) {
    run_main(in, out, ws, s, outs.subspan(1));  // a multi-output node's others: no epilogue
    return;
  }
  auto descs = chain(in);
  std::size_t biggest = 0;
  for (std::size_t i = fused_; i + 1 < descs.size(); ++i) biggest = std::max(biggest, bytes_of(descs[i]));
  const std::size_t main_ws = align_up(main_workspace(in, descs[0], {}));
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

void CudaNodeKernel::run_main(std::span<const Buffer> in, const Buffer& out, std::byte* ws, cudaStream_t s,
                              std::span<const Buffer> extra) const {
  if (!op_ || !op_->run)
    throw UnsupportedError("[cuda] node '" + node_.name + "': no CUDA kernel for layer type " +
                           std::string(layer_type_name(node_.type())));
  op_->run(cuda::OpCall{node_, state_.get(), in, out, ws, s, extra});
}

}  // namespace

std::unique_ptr<NodeKernel> make_node_kernel(const Device& device, const graph::Graph& g, const graph::Node& n) {
  return std::make_unique<CudaNodeKernel>(device, g, n);
}

}  // namespace tensoracle::cuda
