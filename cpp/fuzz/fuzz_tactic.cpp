// libFuzzer target: a node's tactic as an engine's plan carries it (graph/tactic.h's tactic_of,
// the one reader of every backend's tactics), then the CUDA backend's reading of a cuDNN
// convolution's (backends/cuda/cudnn_tactic.h's from_tactic; CUDA-free) on arbitrary JSON text.
// A tactic is accepted only if writing it back gives exactly the JSON that was read (checked,
// trapping otherwise), with every invariant the backends rely on: a well-formed kernel name;
// for cuBLASLt lowercase hex bytes for the algorithm; for the fused fp8 GEMM 2 or 3 epilogue
// ops; for convolutions 4-D or 5-D tensors of positive dims, matching spatial fields, a known
// float type, a channels-last count that holds the channels and never with a bias written
// first, the direct kernel only for a problem it runs, and same_cudnn_problem() safe on what was
// read. The plan fuzzer (fuzz_engine_plan) reaches the same reader inside whole plans.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "backends/cuda/cudnn_tactic.h"
#include "core/json.h"
#include "graph/tactic.h"
#include "tensoracle/errors.h"

namespace cuda = tensoracle::cuda;
namespace graph = tensoracle::graph;

namespace {
void check(bool ok) {
  if (!ok) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  nlohmann::json j;
  try {
    j = tensoracle::core::parse_untrusted(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const tensoracle::core::JsonError&) {
    return 0;
  }
  graph::Tactic t;
  try {
    t = graph::tactic_of(j);
  } catch (const tensoracle::CorruptEngineError&) {
    return 0;
  }
  check(graph::tactic_json(t) == j && graph::tactic_of(graph::tactic_json(t)) == t);
  check(t.kernel.size() <= 64 && t.kernel.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789._") == std::string::npos);
  if (const auto* g = std::get_if<graph::CublasLtConfig>(&t.config)) {
    check(t.kernel == graph::kCublasLtKernel && g->epilogue_ops >= 0 && g->epilogue_ops <= 64);
    check(g->algo.size() % 2 == 0 && g->algo.find_first_not_of("0123456789abcdef") == std::string::npos);
  }
  if (const auto* f = std::get_if<graph::FusedFp8GemmConfig>(&t.config))
    check(t.kernel == graph::kFusedFp8GemmKernel && (f->epilogue_ops == 2 || f->epilogue_ops == 3));
  const auto* c = std::get_if<graph::CudnnConvConfig>(&t.config);
  if (c == nullptr) {
    check(t.kernel != graph::kCudnnConvKernel);
    return 0;
  }
  const std::size_t r = c->problem.x.size();
  check((r == 4 || r == 5) && c->problem.w.size() == r && c->problem.y.size() == r && c->problem.stride.size() == r - 2 &&
        c->problem.dilation.size() == r - 2 && c->problem.pre.size() == r - 2 && c->problem.post.size() == r - 2);
  check(c->problem.channels_last == 0 ||
        (!c->problem.accumulate && c->problem.w[1] == c->problem.x[1] && c->problem.channels_last >= c->problem.x[1] && c->problem.channels_last < c->problem.x[1] + 8));
  cuda::CudnnTactic ct;
  if (!cuda::from_tactic(t, ct)) {
    check(!c->engine);  // only the direct kernel's may be refused: for a problem it does not run
    return 0;
  }
  const auto& s = ct.shape;
  if (ct.config == cuda::kDirectConfig) {
    check(!c->engine && cuda::direct_conv_supported(s) && s.channels_last == 4 && r == 4 &&
          cuda::direct_conv_shared_bytes(s) <= 200 * 1024);
  } else {
    // The configuration string the backend gives cuDNN reads back as the tactic's.
    std::int64_t global = -1;
    std::vector<std::pair<int, std::int64_t>> knobs;
    check(cuda::parse_cudnn_config(ct.config, global, knobs) && global == *c->engine && knobs == c->knobs);
    check(cuda::to_tactic(ct) == t);
  }
  // The run-time match against the actual problem takes the tactic's problem as read: any
  // values (no overflow, no out-of-bounds), and symmetric in its arguments.
  cuda::CudnnConvShape other = s;
  if (!other.post.empty()) other.post[0] = other.pre[0];
  check(cuda::same_cudnn_problem(s, other) == cuda::same_cudnn_problem(other, s));
  return 0;
}
