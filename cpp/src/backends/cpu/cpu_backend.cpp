// The CPU backend: runs every layer in every type, on host memory, with the kernels of
// kernels.h. A node's own op runs through its kind's entry (op_kernel.h, ops/registry.cpp) or
// oneDNN (onednn.h); its epilogue runs as in-order pointwise passes over scratch buffers, so
// every intermediate value is rounded to its declared type exactly as if unfused.
#include <cblas.h>
#include <sys/utsname.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <new>
#include <sstream>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/onednn.h"
#include "backends/cpu/op_kernel.h"
#include "core/text.h"
#include "plugin/instance.h"
#include "backends/plugin_node.h"
#include "backends/backend.h"
#include "tensoracle/errors.h"

namespace tensoracle::cpu {

using namespace backends;

namespace {

std::size_t bytes_of(const graph::TensorDesc& d, const Dims& dims) {
  auto v = dims.volume();
  return v < 0 ? 0 : static_cast<std::size_t>(v) * element_size(d.type);
}

// The network-level input and output descriptions of plugin node `n` (all its outputs).
std::pair<std::vector<PluginTensorDesc>, std::vector<PluginTensorDesc>> plugin_node_descs(const graph::Graph& g,
                                                                                          const graph::Node& n) {
  const auto& p = std::get<PluginParams>(n.params);
  std::vector<PluginTensorDesc> in;
  for (int v : n.inputs) in.push_back({g.values[static_cast<std::size_t>(v)].desc.type, g.values[static_cast<std::size_t>(v)].desc.dims});
  return {in, p.plugin->output_descs(in)};
}

class CpuNodeKernel final : public NodeKernel {
 public:
  CpuNodeKernel(const graph::Graph& g, const graph::Node& n)
      : node_(n), op_(cpu::op_kernel(n.type())), accel_(cpu::onednn::make(g, n)) {
    for (int v : n.all_inputs()) facts_.push_back({g.values[static_cast<std::size_t>(v)].constant.has_value(), std::nullopt});
    if (op_ && op_->prepare) state_ = op_->prepare(g, n);
  }

  // Dims of the main op's result and of each epilogue value, for the given inputs.
  std::vector<graph::TensorDesc> chain(std::span<const Buffer> in) const {
    std::vector<graph::TensorDesc> descs;
    for (const auto& b : in) descs.push_back({b.type, b.dims});
    return graph::epilogue_chain(node_, descs, facts_);
  }

  // Scratch: the main op's (the larger of the generic kernel's and oneDNN's, since a shape
  // oneDNN does not run falls back), then the epilogue passes' intermediate results: two
  // buffers they alternate between, one when the epilogue has a single op (the main result
  // goes there and the op's pass writes the output).
  std::size_t workspace_bytes(std::span<const Buffer> in, std::span<const Buffer> outs) const override {
    std::size_t main_ws = main_workspace(in, outs.subspan(1));
    std::size_t accel_ws = 0;
    if (accel_ && accel_->fits(in, chain_main(in).dims, accel_ws)) main_ws = std::max(main_ws, accel_ws);
    if (node_.epilogue.empty()) return align_up(main_ws);
    auto descs = chain(in);
    std::size_t biggest = 0;
    for (std::size_t i = 0; i + 1 < descs.size(); ++i) biggest = std::max(biggest, bytes_of(descs[i], descs[i].dims));
    return align_up(main_ws) + (node_.epilogue.size() > 1 ? 2 : 1) * align_up(biggest);
  }

  void run(std::span<const Buffer> in, std::span<const Buffer> outs, void* workspace, void*) const override {
    cpu::ThreadScope threads;
    const Buffer& out = outs[0];
    const auto extra = outs.subspan(1);  // a multi-output node's others (no epilogue)
    auto* ws = static_cast<std::byte*>(workspace);
    // oneDNN runs the main op and the first `done` epilogue ops as one primitive.
    std::size_t done = 0, accel_ws = 0;
    const bool accel = accel_ && accel_->fits(in, chain_main(in).dims, accel_ws);
    if (accel) done = accel_->fused();
    if (node_.epilogue.size() == done) {
      if (accel) accel_->run(in, chain_main(in).dims, out, ws);
      else run_main(in, out, ws, extra);
      return;
    }
    auto descs = chain(in);
    std::size_t main_ws = std::max(main_workspace(in, extra), accel_ws);
    std::size_t biggest = 0;
    for (std::size_t i = 0; i + 1 < descs.size(); ++i) biggest = std::max(biggest, bytes_of(descs[i], descs[i].dims));
    std::byte* scratch[2] = {ws + align_up(main_ws), ws + align_up(main_ws) + align_up(biggest)};
    int slot = 0;  // the scratch buffer holding `cur`; each pass writes the other
    Buffer cur{scratch[slot], descs[done].type, descs[done].dims};
    if (accel) accel_->run(in, descs[0].dims, cur, ws);
    else run_main(in, cur, ws, extra);
    std::size_t k = node_.inputs.size();
    for (std::size_t i = 0; i < done; ++i)
      if (node_.epilogue[i].operand >= 0) ++k;
    for (std::size_t i = done; i < node_.epilogue.size(); ++i) {
      const auto& op = node_.epilogue[i];
      bool last = i + 1 == node_.epilogue.size();
      slot = 1 - slot;
      Buffer next = last ? out : Buffer{scratch[slot], descs[i + 1].type, descs[i + 1].dims};
      if (const auto* a = std::get_if<ActivationParams>(&op.params)) {
        cpu::activation(*a, ref(cur), ref(next));
      } else if (std::holds_alternative<CastParams>(op.params)) {
        cpu::cast(ref(cur), ref(next));
      } else if (const auto* e = std::get_if<ElementWiseParams>(&op.params)) {
        const Buffer& other = in[k++];
        if (op.operand_first) cpu::elementwise(e->op, ref(other), ref(cur), ref(next));
        else cpu::elementwise(e->op, ref(cur), ref(other), ref(next));
      } else if (std::holds_alternative<QuantizeParams>(op.params)) {
        cpu::quantize(ref(cur), ref(in[k++]), 0, ref(next));  // a per-tensor scale (fuse_pointwise)
      } else {
        throw BuildError("[cpu] node '" + node_.name + "': layer '" + op.layer + "' cannot run as an epilogue");
      }
      cur = next;
    }
  }

 private:
  // Scratch of the node's own op (before the epilogue), at these input shapes.
  std::size_t main_workspace(std::span<const Buffer> in, std::span<const Buffer> extra) const {
    const graph::TensorDesc out = chain_main(in);
    if (!op_ || !op_->workspace) return 0;
    const Buffer o{nullptr, out.type, out.dims};
    return op_->workspace(cpu::OpCall{node_, state_.get(), in, o, nullptr, extra});
  }

  graph::TensorDesc chain_main(std::span<const Buffer> in) const {
    std::vector<graph::TensorDesc> main_in;
    for (std::size_t i = 0; i < node_.inputs.size(); ++i) main_in.push_back({in[i].type, in[i].dims});
    return graph::infer_main(node_, main_in, facts_);
  }

  void run_main(std::span<const Buffer> in, const Buffer& out, std::byte* ws, std::span<const Buffer> extra) const {
    if (!op_ || !op_->run) throw BuildError("[cpu] node '" + node_.name + "': no kernel for this layer type");
    op_->run(cpu::OpCall{node_, state_.get(), in, out, ws, extra});
  }

  graph::Node node_;
  const cpu::OpKernel* op_;  // the node's kind's entry (null: input, constant)
  std::unique_ptr<cpu::OpState> state_;  // what op_->prepare kept
  std::unique_ptr<cpu::onednn::Accelerated> accel_;  // null: the generic kernels
  std::vector<graph::InputFacts> facts_;
};

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) return line.substr(line.find_first_not_of(' ', p + 1));
    }
  return "unknown";
}

// The ISA extensions that matter to kernels, as the kernel reports them (/proc/cpuinfo's
// "flags" on x86, "Features" on Arm).
std::vector<std::string> cpu_isa() {
  static const char* kWanted[] = {"sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
                                  "avx512_vnni", "avx512_bf16", "amx_tile", "asimd", "sve", "sve2", "bf16", "i8mm"};
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("flags", 0) != 0 && line.rfind("Features", 0) != 0) continue;
    std::vector<std::string> isa;
    std::string flags = " " + line.substr(line.find(':') + 1) + " ";
    for (const char* w : kWanted)
      if (flags.find(" " + std::string(w) + " ") != std::string::npos) isa.push_back(w);
    return isa;
  }
  return {};
}

std::string machine_arch() {
  struct utsname u {};
  if (uname(&u) != 0) return "unknown";
  return u.machine;
}

// Whether node n with tactic t stores its output channels-last (onednn.h).
bool writes_channels_last(const graph::Graph& g, const graph::Node& n, const graph::Tactic& t) {
  if (std::holds_alternative<ConvolutionParams>(n.params))
    return t.kernel == cpu::onednn::kConvTactic && cpu::onednn::output_channels_last(g, n);
  if (std::holds_alternative<PoolingParams>(n.params)) return cpu::onednn::pooling_channels_last(g, n);
  return false;
}

// Whether node n's kernel reads channels-last inputs: a oneDNN convolution (its data and fused
// residual; output_channels_last checks the producer's readers) or a pooling that stores its
// own output so.
bool reads_channels_last(const graph::Graph& g, const graph::Node& n) {
  if (std::holds_alternative<ConvolutionParams>(n.params)) return n.tactic.kernel == cpu::onednn::kConvTactic;
  return std::holds_alternative<PoolingParams>(n.params) && graph::channels_last_value(g, n.output);
}

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }

  nlohmann::json target() const override {
    return {{"backend", "cpu"}, {"arch", machine_arch()}, {"device", cpu_model()}, {"isa", cpu_isa()},
            {"onednn", cpu::onednn::version()}};
  }

  void check_compatible(const nlohmann::json& t) const override {
    if (!t.is_object() || t.value("backend", "") != "cpu")
      throw IncompatibleEngineError("[engine] the engine was built for backend '" +
                                    (t.is_object() ? t.value("backend", std::string("?")) : std::string("?")) +
                                    "', not the CPU; rebuild it for this device");
    // Kernels are compiled for the architecture's baseline: any machine of the same
    // architecture runs them.
    if (t.value("arch", "") != machine_arch())
      throw IncompatibleEngineError("[engine] the engine was built for a " + t.value("arch", std::string("?")) +
                                    " CPU; this machine is " + machine_arch() + "; rebuild it here");
    // oneDNN tactics (channels-last data between convolutions among them) need oneDNN here.
    if (!t.value("onednn", std::string()).empty() && cpu::onednn::version().empty())
      throw IncompatibleEngineError("[engine] the engine was built with oneDNN kernels (oneDNN " + t.value("onednn", std::string()) +
                                    "); this build of tensoracle has no oneDNN; rebuild the engine here");
  }

  std::string unsupported_reason(const graph::Graph& g, const graph::Node& n) const override {
    if (const auto* p = std::get_if<PluginParams>(&n.params)) {
      auto [in, out] = plugin_node_descs(g, n);
      auto why = p->plugin->unsupported_reason(TENSORACLE_BACKEND_CPU, in, out);
      return why.empty() ? why : why + " (engine backend: cpu)";
    }
    return "";
  }

  // Where the fused kernel runs its AVX-512 products (head sizes of 16·k): measured on the
  // development machine (2 cores), BERT-style attention of 8 x 12 heads x 128 tokens with an
  // additive padding mask took 0.73 ms fused against 1.33 ms as layers (head size 32; 64: 1.24
  // against 1.74). Elsewhere its BLAS products per tile lose to oneDNN's batched ones (3.8 against
  // 1.3 ms): the layers stay (add_attention still runs the fused kernel).
  bool fuses_attention(const graph::Graph& g, const graph::Node& n) const override {
    const std::int64_t h = graph::attention_head_size(g, n);
    return h > 0 && attention_runs_wide(h);
  }

  bool can_fuse(const graph::Graph&, const graph::Node& producer, const graph::EpilogueOp& op) const override {
    // A plugin's output is written by the plugin: nothing runs after it inside its node.
    if (std::holds_alternative<PluginParams>(producer.params)) return false;
    // A shuffle reshaped by a shape tensor knows its dims only at run time: no epilogue.
    if (std::holds_alternative<ShuffleParams>(producer.params) && producer.inputs.size() > 1) return false;
    if (const auto* s = std::get_if<SliceParams>(&producer.params); s && (s->tensor_inputs & 0x7)) return false;
    return std::holds_alternative<ActivationParams>(op.params) || std::holds_alternative<CastParams>(op.params) ||
           std::holds_alternative<ElementWiseParams>(op.params) || std::holds_alternative<QuantizeParams>(op.params);
  }

  std::vector<graph::Tactic> tactics(const graph::Graph& g, const graph::Node& n) const override {
    using graph::Tactic;
    const bool onednn = cpu::onednn::applicable(g, n);
    switch (n.type()) {
      case LayerType::kMATRIX_MULTIPLY:
        if (onednn) return {Tactic(cpu::onednn::kMatmulTactic), Tactic("cpu.gemm.openblas")};
        return {Tactic("cpu.gemm.openblas")};
      case LayerType::kSHUFFLE: return {Tactic("cpu.shuffle")};
      case LayerType::kCONVOLUTION:
        // A channels-last output is for oneDNN's readers: its own kernel only.
        if (onednn && cpu::onednn::output_channels_last(g, n)) return {Tactic(cpu::onednn::kConvTactic)};
        if (onednn) return {Tactic(cpu::onednn::kConvTactic), Tactic("cpu.conv.im2col_gemm")};
        return {Tactic("cpu.conv.im2col_gemm")};
      case LayerType::kEINSUM: return {Tactic("cpu.einsum.gemm")};
      default: return {Tactic("cpu." + std::string(layer_type_name(n.type())))};
    }
  }

  // The first candidate; oneDNN convolutions, and poolings between them, store their output
  // channels-last where all its readers take it so (onednn.h).
  Choice choose_tactic(const graph::Graph& g, const graph::Node& n, const TacticQuery&) const override {
    Choice c{tactics(g, n).front()};
    if (writes_channels_last(g, n, c.tactic)) c.output_layout = graph::Layout::kChannelsLast;
    return c;
  }

  std::unique_ptr<NodeKernel> instantiate(const graph::Graph& g, const graph::Node& n) const override {
    // An engine file's tactic is not trusted: it must be one this backend offers for the node
    // (empty: the node runs in-process, for constant folding or shape tensors).
    if (!n.tactic.empty()) {
      const auto offered = tactics(g, n);
      if (std::find(offered.begin(), offered.end(), n.tactic) == offered.end()) {
        std::string list;
        for (const auto& t : offered) list += (list.empty() ? "" : ", ") + graph::describe(t);
        throw CorruptEngineError("[cpu] layer " + core::quote_name(n.name) + ": tactic " +
                                 core::quote_name(graph::describe(n.tactic)) + " is not one of the CPU backend's kernels for this " +
                                 std::string(layer_type_name(n.type())) + " layer (" + list + "); rebuild the engine");
      }
    }
    // Nor are its layouts: a channels-last output only where the builder stores it so, and a
    // channels-last input only for a kernel that reads it so.
    if (graph::channels_last_value(g, n.output) && !n.tactic.empty() && !writes_channels_last(g, n, n.tactic))
      throw CorruptEngineError("[cpu] layer " + core::quote_name(n.name) +
                               ": its output is stored channels-last, which the CPU backend does not do for it (" +
                               (std::holds_alternative<PoolingParams>(n.params) ? cpu::onednn::pooling_channels_last_refusal(g, n)
                                                                                 : std::string("not a oneDNN convolution whose readers take it so")) +
                               "); rebuild the engine");
    for (int v : n.all_inputs())
      if (graph::channels_last_value(g, v) && !reads_channels_last(g, n))
        throw CorruptEngineError("[cpu] layer " + core::quote_name(n.name) + " reads " +
                                 core::quote_name(g.values[static_cast<std::size_t>(v)].name) +
                                 ", stored channels-last, with a kernel that reads it linear; rebuild the engine");
    return std::make_unique<CpuNodeKernel>(g, n);
  }

  void* allocate(std::size_t bytes) const override {
    if (bytes == 0) return nullptr;
    void* p = std::aligned_alloc(kAlign, align_up(bytes));
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  void deallocate(void* p) const noexcept override { std::free(p); }
};

}  // namespace

std::string openblas_version() {
  // "OpenBLAS 0.3.21" from openblas_get_config()'s "OpenBLAS 0.3.21 DYNAMIC_ARCH ... Haswell ...".
  std::istringstream in(openblas_get_config());
  std::string product, version;
  in >> product >> version;
  return product + " " + version;
}

const Backend& cpu_backend() {
  static const CpuBackend backend;
  return backend;
}

namespace {

// Runs node `n` once on host buffers with a workspace of its own.
// Runs `n` in-process on the CPU backend's default kernel: `n` may be a node of another
// backend's engine (a shape tensor computed on the host for a CUDA engine), whose tactic names
// that backend's kernel.
void run_on_host(const graph::Graph& g, const graph::Node& n, std::span<const Buffer> in, const Buffer& out) {
  graph::Node host = n;
  host.tactic = graph::Tactic();
  if (!n.extra_outputs.empty())
    throw BuildError("[cpu] layer '" + n.name + "' has several outputs; it is not evaluated on the host");
  auto kernel = cpu_backend().instantiate(g, host);
  const std::span<const Buffer> outs(&out, 1);
  std::vector<std::byte> ws(kernel->workspace_bytes(in, outs) + kAlign);
  void* wsp = ws.data();
  std::size_t space = ws.size();
  std::align(kAlign, 1, wsp, space);
  kernel->run(in, outs, wsp, nullptr);
}

}  // namespace

std::vector<std::int64_t> evaluate_shape_node(const graph::Graph& g, const graph::Node& n,
                                              std::span<const graph::TensorDesc> inputs, const graph::ShapeValues& values,
                                              const graph::TensorDesc& out_desc) {
  auto all = n.all_inputs();
  std::vector<std::vector<std::int64_t>> storage(all.size());  // int64 slots hold int32 values too
  std::vector<Buffer> in;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto& v = *values[static_cast<std::size_t>(all[i])];
    storage[i].resize(std::max<std::size_t>(v.size(), 1));
    if (inputs[i].type == DataType::kINT32) {
      auto* p = reinterpret_cast<std::int32_t*>(storage[i].data());
      for (std::size_t k = 0; k < v.size(); ++k) p[k] = static_cast<std::int32_t>(v[k]);
    } else if (inputs[i].type == DataType::kBOOL) {
      auto* p = reinterpret_cast<std::uint8_t*>(storage[i].data());
      for (std::size_t k = 0; k < v.size(); ++k) p[k] = v[k] != 0;
    } else {
      std::copy(v.begin(), v.end(), storage[i].begin());
    }
    in.push_back({storage[i].data(), inputs[i].type, inputs[i].dims});
  }
  const auto count = static_cast<std::size_t>(out_desc.dims.volume());
  std::vector<std::int64_t> result(std::max<std::size_t>(count, 1));
  Buffer out{result.data(), out_desc.type, out_desc.dims};
  run_on_host(g, n, in, out);
  if (out_desc.type == DataType::kINT32 || out_desc.type == DataType::kBOOL) {
    std::vector<std::int64_t> wide(count);
    const auto* p32 = reinterpret_cast<const std::int32_t*>(result.data());
    const auto* p8 = reinterpret_cast<const std::uint8_t*>(result.data());
    for (std::size_t k = 0; k < count; ++k) wide[k] = out_desc.type == DataType::kBOOL ? p8[k] != 0 : p32[k];
    return wide;
  }
  result.resize(count);
  return result;
}

Weights evaluate_constant_node(const graph::Graph& g, const graph::Node& n) {
  std::vector<Buffer> in;
  for (int v : n.all_inputs()) {
    const auto& val = g.values[static_cast<std::size_t>(v)];
    in.push_back({const_cast<void*>(val.constant->values()), val.desc.type, val.desc.dims});
  }
  const auto& outv = g.values[static_cast<std::size_t>(n.output)];
  auto count = outv.desc.dims.volume();
  std::vector<std::byte> data(static_cast<std::size_t>(count) * element_size(outv.desc.type) + 1);
  Buffer out{data.data(), outv.desc.type, outv.desc.dims};
  run_on_host(g, n, in, out);  // (constant folding leaves multi-output nodes alone)
  return Weights::copy_of(outv.desc.type, data.data(), count);
}

}  // namespace tensoracle::cpu
