// The CUDA backend's matrix-multiply kernels beside its GEMMs (gemm.cpp, fp8_gemm.cu):
// scale_accumulator, an int8 GEMM's int32 sums scaled (and biased) into a float output.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>

#include "backends/cuda/device.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/fp8_gemm.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/node_kernel.h"
#include "backends/cuda/op_kernel.h"
#include "backends/cuda/pointwise_util.cuh"
#include "tensoracle/errors.h"

namespace tensoracle::cuda {

namespace {

using namespace pointwise;  // pointwise_util.cuh

// o[i] = Out::store(float(acc[i]) * (scale_a * scale_b)): an int8 GEMM's int32 sums, scaled.
// With a bias row (`columns` values), o[i] = Out::store(Out::load(o[i]) + bias[i % columns]).
template <class Out>
__global__ void scale_accumulator_kernel(const std::int32_t* acc, typename Out::T* o, i64 n, const float* scale_a,
                                         const float* scale_b, const typename Out::T* bias, i64 columns) {
  const float sc = __fmul_rn(*scale_a, *scale_b);
  for (i64 i = first_index(); i < n; i += grid_step()) {
    typename Out::T y = Out::store(__fmul_rn(static_cast<float>(acc[i]), sc));
    if (bias) {
      i64 row, col;
      divmod(i, columns, row, col);
      y = Out::store(__fadd_rn(Out::load(y), Out::load(bias[col])));
    }
    o[i] = y;
  }
}

}  // namespace

void scale_accumulator(const TensorRef& acc, const void* scale_a, const void* scale_b, const void* bias,
                       const TensorRef& out, cudaStream_t stream) {
  const i64 n = checked_volume(acc, "scale_accumulator", "the sums");
  if (checked_volume(out, "scale_accumulator", "the output") != n || acc.type != DataType::kINT32)
    fail("scale_accumulator: sums " + desc(acc) + " and output " + desc(out) + " must be int32 and of equal volume");
  const i64 columns = out.dims.rank() > 0 ? out.dims[out.dims.rank() - 1] : 1;
  if (bias && columns < 1) fail("scale_accumulator: a bias row for output " + desc(out) + " without columns");
  const bool ok = dev::with_float(out.type, [&](auto tag) {
    using Out = decltype(tag);
    if (n == 0) return;
    scale_accumulator_kernel<Out><<<blocks_for(n), kThreads, 0, stream>>>(
        static_cast<const std::int32_t*>(acc.data), static_cast<typename Out::T*>(out.data), n,
        static_cast<const float*>(scale_a), static_cast<const float*>(scale_b),
        static_cast<const typename Out::T*>(bias), columns);
    check_launch("scale_accumulator");
  });
  if (!ok) fail("scale_accumulator: the output must be float32, float16 or bfloat16, not " + tn(out.type));
}

// ---- the node kernel's entry (op_kernel.h) -----------------------------------------------------

namespace ops {

namespace {

// A node's cuBLASLt GEMM and, with tactic cuda.gemm.sm90.fp8.epilogue<n>, the fused fp8 GEMM
// and its epilogue's lookup table (built on the first run, outside stream capture); cuBLASLt
// and the separate pass where the kernel does not run (this library or device, the run's
// shapes or addresses).
class MatmulState final : public OpState {
 public:
  explicit MatmulState(const Device& device) : device_(device) {}
  ~MatmulState() override { device_.deallocate(table_); }

  std::unique_ptr<Gemm> gemm;
  bool bias = false;  // cuBLASLt adds the bias row (lt_epilogue)
  std::optional<Fp8Epilogue> fp8;
  bool fp8_kernel = false;
  bool fp8_weight_constant = false;  // the weight is the engine's: the kernel may load it before the previous node ends

  void run_fused_fp8(const OpCall& c) const;

 private:
  // The fused fp8 GEMM's table, built on `s` the first time (`scratch`: 128 KiB); null while `s`
  // is capturing a graph before that (the run then takes the unfused path).
  const void* fp8_table(const graph::Node& node, const TensorRef& quantize_scale, void* scratch, cudaStream_t s) const;

  const Device& device_;
  mutable std::mutex table_mutex_;
  mutable void* table_ = nullptr;
  mutable bool table_ready_ = false;
};

const void* MatmulState::fp8_table(const graph::Node& node, const TensorRef& quantize_scale, void* scratch,
                                   cudaStream_t s) const {
  std::lock_guard lock(table_mutex_);
  if (table_ready_) return table_;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(s, &capturing), "node '" + node.name + "': querying the stream");
  if (capturing != cudaStreamCaptureStatusNone) return nullptr;
  if (!table_) table_ = device_.allocate(fp8_epilogue_table_bytes(*fp8));
  build_fp8_epilogue_table(*fp8, std::get<ActivationParams>(node.epilogue[1].params), quantize_scale, table_, scratch, s);
  // Other executions' streams use the table from now on.
  check(cudaStreamSynchronize(s), "node '" + node.name + "': building the fp8 GEMM's epilogue table");
  table_ready_ = true;
  return table_;
}

void MatmulState::run_fused_fp8(const OpCall& c) const {
  const std::span<const backends::Buffer> in = c.in;
  const backends::Buffer& out = c.out;
  const cudaStream_t s = c.stream;
  const TensorRef a = ref(in[0]), b = ref(in[1]);
  const std::size_t nin = c.node.inputs.size();
  const void* bias = in[nin].data;
  const TensorRef quantize_scale = *fp8 == Fp8Epilogue::kBIAS_GELU_QUANTIZE ? ref(in[nin + 1]) : TensorRef{};
  const GemmScales scales{in[2].data, in[3].data};
  const std::int64_t K = a.dims[a.dims.rank() - 1], N = b.dims[0], M = K > 0 ? a.dims.volume() / K : 0;
  const TensorRef h{nullptr, DataType::kHALF, out.dims};  // the product with its bias, as the passes read it
  std::byte* rest = c.workspace + align_up(gemm->workspace_bytes(a, b, h));
  if (fp8_kernel && fused_fp8_gemm_fits(M, N, K) && fused_fp8_gemm_aligned(a.data, b.data, bias, out.data))
    if (const void* table = fp8_table(c.node, quantize_scale, rest, s)) {
      fused_fp8_gemm(*fp8, a.data, b.data, M, N, K, scales.a, scales.b, bias, table, fp8_weight_constant, out.data, s,
                     c.node.name);
      return;
    }
  const TensorRef product{rest, DataType::kHALF, out.dims};
  gemm->run(a, b, bias, product, c.workspace, s, scales);
  const auto& act = std::get<ActivationParams>(c.node.epilogue[1].params);
  if (quantize_scale.data) activation_quantize(act, product, quantize_scale, ref(out), s);
  else activation(act, product, ref(out), s);
}

OpPrepared prepare_matmul(const OpSetup& setup) {
  const Device& device = setup.device;
  const graph::Graph& g = setup.graph;
  const graph::Node& n = setup.node;
  auto state = std::make_unique<MatmulState>(device);
  OpPrepared r;
  auto [fused, epilogue] = lt_epilogue(g, n);
  r.fused = fused;
  state->bias = fused > 0;
  graph::CublasLtConfig t;
  if (const auto* f = std::get_if<graph::FusedFp8GemmConfig>(&n.tactic.config)) {
    // Only where the builder writes it: the node's epilogue is the kernel's (fused_fp8_epilogue).
    state->fp8 = fused_fp8_epilogue(g, n);
    if (!state->fp8 || static_cast<std::size_t>(f->epilogue_ops) != n.epilogue.size())
      throw CorruptEngineError("[cuda] node '" + n.name + "': tactic '" + graph::describe(n.tactic) +
                               "' does not match the node's product and epilogue (malformed engine)");
    r.fused = n.epilogue.size();
    state->fp8_kernel = fused_fp8_gemm_runs_on(device.prop().major, device.prop().minor);
    state->fp8_weight_constant = g.values[static_cast<std::size_t>(n.inputs[1])].constant.has_value();
  } else if (const auto* c = std::get_if<graph::CublasLtConfig>(&n.tactic.config)) {
    // Precision and epilogue as the builder derives them from the node (cuda_backend.cpp's tactics).
    const auto precision = !n.quantized() ? graph::CublasLtConfig::Precision::kNative
                           : graph::arithmetic_type(g, n) == DataType::kINT8 ? graph::CublasLtConfig::Precision::kInt8
                                                                              : graph::CublasLtConfig::Precision::kFp8;
    if (c->precision != precision || static_cast<std::size_t>(c->epilogue_ops) != fused)
      throw CorruptEngineError("[cuda] node '" + n.name + "': tactic '" + graph::describe(n.tactic) +
                               "' does not match the node's precision and epilogue (malformed engine)");
    t = *c;
  } else if (!n.tactic.empty()) {
    throw CorruptEngineError("[cuda] node '" + n.name + "': its tactic '" + graph::describe(n.tactic) +
                             "' is not a matrix multiply's (malformed engine)");
  }
  state->gemm = std::make_unique<Gemm>(device.lt(), n.name, std::get<MatrixMultiplyParams>(n.params), epilogue,
                                       n.quantized() ? graph::arithmetic_type(g, n) : DataType::kFLOAT,
                                       static_cast<std::size_t>(std::min<std::uint64_t>(
                                           t.workspace.value_or(kGemmWorkspaceBytes), kGemmWorkspaceBytes)));
  if (!t.algo.empty()) {
    cublasLtMatmulAlgo_t algo{};
    if (!algo_from_hex(t.algo, algo))
      throw CorruptEngineError("[cuda] node '" + n.name + "': the tactic's GEMM algorithm is malformed");
    state->gemm->prefer(algo);
  }
  r.state = std::move(state);
  return r;
}

const MatmulState& matmul_state(const OpCall& c) { return static_cast<const MatmulState&>(*c.state); }

// cuBLASLt's scratch; with the fused fp8 GEMM, that of its fallback: cuBLASLt's, then its
// float16 result; the table's input (every float16 value) uses the same room on the first run.
std::size_t matmul_workspace(const OpCall& c) {
  const MatmulState& state = matmul_state(c);
  const TensorRef o = ref(c.out);
  if (state.fp8)
    return align_up(state.gemm->workspace_bytes(ref(c.in[0]), ref(c.in[1]), o)) +
           std::max<std::size_t>(bytes_of({c.out.type, c.out.dims}), 65536 * 2);
  return state.gemm->workspace_bytes(ref(c.in[0]), ref(c.in[1]), o);
}

void run_matmul(const OpCall& c) {
  const MatmulState& state = matmul_state(c);
  if (state.fp8) {
    state.run_fused_fp8(c);
    return;
  }
  const void* bias = state.bias ? c.in[c.node.inputs.size()].data : nullptr;
  GemmScales scales;
  if (c.node.quantized()) scales = {c.in[2].data, c.in[3].data};
  state.gemm->run(ref(c.in[0]), ref(c.in[1]), bias, ref(c.out), c.workspace, c.stream, scales);
}

}  // namespace

extern const OpKernel kMatrixMultiplyKernel = {LayerType::kMATRIX_MULTIPLY, prepare_matmul, matmul_workspace, run_matmul};

}  // namespace ops

}  // namespace tensoracle::cuda
