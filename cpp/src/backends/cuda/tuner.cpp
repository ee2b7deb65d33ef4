// The CUDA backend's tuner (tuner.h): a matrix multiply's cuBLASLt algorithm, workspace and
// fused fp8 GEMM, a convolution's cuDNN configuration, layout or own kernel, each chosen by
// timing the candidates on scratch buffers of random values.
#include "backends/cuda/tuner.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "backends/cuda/conv.h"
#include "backends/cuda/cudnn_conv.h"
#include "backends/cuda/fp8_gemm.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/layouts.h"
#include "backends/cuda/node_kernel.h"
#include "backends/cuda/tuning.h"
#include "graph/ops.h"
#include "tensoracle/errors.h"

namespace tensoracle::cuda {

using namespace backends;

namespace {

// How much faster than cuBLASLt's first choice a timed GEMM candidate must be to replace it
// (tuning.h).
constexpr double kTunedMargin = 0.02;

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

}  // namespace

graph::Tactic Tuner::choose_gemm(const graph::Graph& g, const graph::Node& n, const MatrixMultiplyParams& mm,
                                 const graph::Tactic& base, const TacticQuery& q) const {
  graph::CublasLtConfig tactic = std::get<graph::CublasLtConfig>(base.config);
  if (q.scratch_limit != kNoScratchLimit) {
    graph::CublasLtConfig none = tactic;
    none.workspace = 0;
    const std::size_t rest = node_scratch_(g, n, graph::Tactic(none), q);
    const std::uint64_t room = q.scratch_limit > rest ? q.scratch_limit - rest : 0;
    if (room < cuda::kGemmWorkspaceBytes) tactic.workspace = room / kAlign * kAlign;
  }
  const std::size_t lt_workspace = static_cast<std::size_t>(tactic.workspace.value_or(cuda::kGemmWorkspaceBytes));
  // The fused fp8 GEMM (bias, GELU and the next quantize in its epilogue) where it runs and its
  // scratch (cuBLASLt's fallback path) fits a workspace limit; timed below against cuBLASLt and
  // the separate pass.
  const auto fp8 = fused_fp8_epilogue(g, n);
  const graph::Tactic fused_tactic(graph::FusedFp8GemmConfig{fp8 == cuda::Fp8Epilogue::kBIAS_GELU_QUANTIZE ? 3 : 2});
  const bool fp8_candidate = fp8 && fused_fp8_choice() != "0" &&
                             cuda::fused_fp8_gemm_runs_on(device_.prop().major, device_.prop().minor) &&
                             (q.scratch_limit == kNoScratchLimit || node_scratch_(g, n, fused_tactic, q) <= q.scratch_limit);
  if (fp8_candidate && fused_fp8_choice() == "1") return fused_tactic;
  if (q.optimization_level < 2) return graph::Tactic(tactic);
  const auto in = q.inputs;
  // The matrix multiply's own result at these shapes (n.main_desc may hold -1s).
  std::vector<graph::InputFacts> facts(in.size());
  const graph::TensorDesc main = graph::infer_main(n, in, facts);
  if (!main.dims.all_known()) return graph::Tactic(tactic);
  auto [fused, epilogue] = lt_epilogue(g, n);
  DeviceGuard guard(device_.index());
  const DataType quantized = n.quantized() ? graph::arithmetic_type(g, n) : DataType::kFLOAT;
  cuda::Gemm gemm(device_.lt(), n.name, mm, epilogue, quantized, lt_workspace);
  // Scratch operands of random values (fill_random).
  std::vector<void*> owned;
  std::uint64_t seed = 0x9e3779b97f4a7c15ull;
  auto scratch = [&](std::size_t bytes, DataType type = DataType::kINT8) {
    bytes = std::max<std::size_t>(bytes, 256);
    void* p = device_.allocate(bytes);
    owned.push_back(p);
    fill_random(p, bytes, type, seed);
    return p;
  };
  bool fused_won = false;  // the fused fp8 GEMM won the timing
  try {
    // Copies of the operands to cycle through, spanning twice the L2 cache (at most 4), so that
    // a run does not find its operands in L2 from the run before: inside a network each GEMM
    // reads its weights from device memory, and L2-resident timing favours other tiles.
    const std::size_t pair = bytes_of(in[0]) + bytes_of(in[1]);
    const std::size_t l2 = device_.prop().l2CacheSize > 0 ? static_cast<std::size_t>(device_.prop().l2CacheSize) : 0;
    const std::size_t copies = std::clamp<std::size_t>(pair ? (2 * l2 + pair - 1) / pair : 1, 1, 4);
    std::vector<cuda::TensorRef> as, bs;
    auto copy_of = [&](const void* src, std::size_t bytes) {  // same values, another address
      bytes = std::max<std::size_t>(bytes, 256);
      void* p = device_.allocate(bytes);
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
    cudaStream_t stream = static_cast<cudaStream_t>(device_.create_stream());
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
        if (cuda::choose_timed(pair_times, kTunedMargin) == 0) fused_won = true;
      }
    } catch (...) {
      device_.destroy_stream(stream);
      throw;
    }
    device_.destroy_stream(stream);
  } catch (...) {
    for (void* p : owned) device_.deallocate(p);
    throw;
  }
  for (void* p : owned) device_.deallocate(p);
  return fused_won ? fused_tactic : graph::Tactic(tactic);
}

backends::Backend::Choice Tuner::choose_convolution(const graph::Graph& g, const graph::Node& n, const ConvolutionParams& p,
                                                    const graph::Tactic& own, const TacticQuery& q) const {
  // The backend's own path, linear output: the fallback of every early return.
  const backends::Backend::Choice base{own};
  const auto in = q.inputs;
  const int level = q.optimization_level;
  std::vector<graph::InputFacts> facts(in.size());
  const graph::TensorDesc main = graph::infer_main(n, in, facts);
  if (!main.dims.all_known() || !in[0].dims.all_known() || !in[1].dims.all_known()) return base;
  const bool has_bias = n.inputs.size() > 2;
  DeviceGuard guard(device_.index());
  cuda::ConvolutionKernel plain(device_.lt(), n.name, p);
  std::optional<cuda::CudnnConvShape> shape;
  std::vector<cuda::CudnnConv::Candidate> configs;
  std::size_t cap = cuda::kChunkBytes;
  try {
    shape = plain.cudnn_shape({nullptr, in[0].type, in[0].dims}, {nullptr, in[1].type, in[1].dims},
                              {nullptr, main.type, main.dims}, false);
    if (!shape || !device_.dnn().handle()) return base;
    // cuDNN's scratch: up to kChunkBytes, or what a workspace limit leaves beside the node's
    // other scratch (its epilogue's); the backend's own path stays reserved as the fallback for
    // other shapes, so configurations within its scratch cost nothing more.
    if (q.scratch_limit != kNoScratchLimit) {
      const cuda::TensorRef xm{nullptr, q.max_inputs[0].type, q.max_inputs[0].dims},
          wm{nullptr, q.max_inputs[1].type, q.max_inputs[1].dims};
      std::vector<graph::InputFacts> max_facts(q.max_inputs.size());
      const graph::TensorDesc max_main = graph::infer_main(n, q.max_inputs, max_facts);
      const std::size_t own_bytes = align_up(plain.workspace_bytes(xm, wm, {nullptr, max_main.type, max_main.dims}));
      const std::size_t epilogue = node_scratch_(g, n, own, q) - own_bytes;
      const std::uint64_t room = q.scratch_limit > epilogue ? q.scratch_limit - epilogue : 0;
      cap = static_cast<std::size_t>(std::min<std::uint64_t>(cap, std::max<std::uint64_t>(room, own_bytes)));
    }
    cuda::CudnnConv problem(device_.dnn(), *shape);
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
      if (copies < cap) nhwc_configs = cuda::CudnnConv(device_.dnn(), nhwc).candidates(c <= 8 ? 8 : 4, cap - copies);
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
  const graph::Layout out_layout = out_cl ? graph::Layout::kChannelsLast : graph::Layout::kLinear;
  if (direct && direct_choice == "1") return {cuda::to_tactic({nhwc, std::string(cuda::kDirectConfig), 0}), out_layout};
  if (layout == "nhwc" && !nhwc_configs.empty())
    return {cuda::to_tactic({nhwc, nhwc_configs[0].config, nhwc_configs[0].workspace}), out_layout};
  // Below level 2 a channels-last output only comes from the environment's nhwc (above), and
  // a channels-last x changes nothing in the tactic: cuDNN's first choice, untimed.
  if (level < 2) return depthwise ? base : backends::Backend::Choice{cuda::to_tactic({*shape, configs[0].config, configs[0].workspace})};

  // Candidates: [cuDNN's first, ours, cuDNN's others] (ours first for depthwise), then the
  // channels-last ones; only those for a channels-last output.
  std::vector<backends::Backend::Choice> names;
  std::vector<std::unique_ptr<cuda::ConvolutionKernel>> kernels;
  auto add = [&](const cuda::CudnnConv::Candidate* c, const cuda::CudnnConvShape& problem, bool chained) {
    auto k = std::make_unique<cuda::ConvolutionKernel>(device_.lt(), n.name, p);
    if (c) {
      try {
        if (c->config == cuda::kDirectConfig) k->use_direct(problem);
        else k->use_cudnn(device_.dnn(), problem, c->config, c->workspace);
      } catch (const Error&) {
        return;
      }
    }
    k->set_layouts(x_cl, chained);
    kernels.push_back(std::move(k));
    names.push_back(c ? backends::Backend::Choice{cuda::to_tactic({problem, c->config, c->workspace}),
                                                  chained ? graph::Layout::kChannelsLast : graph::Layout::kLinear}
                      : base);
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
    void* ptr = device_.allocate(bytes);
    owned.push_back(ptr);
    fill_random(ptr, bytes, d.type, seed);
    return ptr;
  };
  backends::Backend::Choice best = base;
  cudaStream_t stream = nullptr;
  try {
    const cuda::TensorRef x{scratch(in[0]), in[0].type, in[0].dims}, w{scratch(in[1]), in[1].type, in[1].dims};
    const cuda::TensorRef o{scratch(main), main.type, main.dims};
    cuda::TensorRef b;
    if (has_bias) b = {scratch(in[2]), in[2].type, in[2].dims};
    std::size_t ws_bytes = 0;
    for (const auto& k : kernels) ws_bytes = std::max(ws_bytes, k->workspace_bytes(x, w, o));
    void* ws = ws_bytes ? scratch({DataType::kINT8, Dims{static_cast<std::int64_t>(ws_bytes)}}) : nullptr;
    stream = static_cast<cudaStream_t>(device_.create_stream());
    const auto act = conv_activation(n);
    const auto times = time_candidates(kernels.size(), stream, [&](std::size_t i) {
      kernels[i]->run(x, w, has_bias ? &b : nullptr, o, ws, stream, act ? &*act : nullptr);
    });
    const int chosen = cuda::choose_timed(times, kTunedMargin);
    if (chosen >= 0) best = names[static_cast<std::size_t>(chosen)];
  } catch (...) {
    if (stream) device_.destroy_stream(stream);
    for (void* ptr : owned) device_.deallocate(ptr);
    throw;
  }
  device_.destroy_stream(stream);
  for (void* ptr : owned) device_.deallocate(ptr);
  return best;
}

}  // namespace tensoracle::cuda
