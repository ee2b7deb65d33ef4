// libFuzzer target: the CUDA backend's reading of its tactics from an engine file on arbitrary
// bytes: a cuDNN convolution's (backends/cuda/cudnn_tactic.h) and a matrix multiply's
// (backends/cuda/gemm_tactic.h). A string is accepted only if it is exactly what the format
// function writes for what was read (checked, trapping otherwise), with every invariant the
// backend relies on: for convolutions 4-D or 5-D tensors of positive dims, matching spatial
// fields, a known float type, a configuration that parses (or the direct kernel's, only for a
// problem it runs), a channels-last count that holds
// the channels, a channels-last output never on a bias written first, and same_cudnn_problem()
// safe on what was read; for matrix multiplies a known
// base and hex digits for the algorithm, or the fused fp8 GEMM's 2 or 3 epilogue ops.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "backends/cuda/cudnn_tactic.h"
#include "backends/cuda/gemm_tactic.h"

namespace cuda = tensoracle::cuda;

namespace {
void check(bool ok) {
  if (!ok) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  cuda::GemmTactic g;
  if (cuda::parse_gemm_tactic(text, g)) {
    check(cuda::format_gemm_tactic(g) == text);
    check(g.base.starts_with(cuda::kGemmTacticPrefix) && g.base.find('/') == std::string::npos);
    check(g.algo.find_first_not_of("0123456789abcdef") == std::string::npos);
  }
  int ops = 0;
  if (cuda::parse_fused_fp8_tactic(text, ops)) {
    check((ops == 2 || ops == 3) && cuda::format_fused_fp8_tactic(ops) == text);
    check(!cuda::parse_gemm_tactic(text, g));  // one reading per string
  }
  cuda::CudnnTactic t;
  if (!cuda::parse_cudnn_tactic(text, t)) return 0;
  check(cuda::format_cudnn_tactic(t) == text);
  const auto& s = t.shape;
  const std::size_t r = s.x.size();
  check((r == 4 || r == 5) && s.w.size() == r && s.y.size() == r && s.stride.size() == r - 2 &&
        s.dilation.size() == r - 2 && s.pre.size() == r - 2 && s.post.size() == r - 2);
  std::int64_t global = -1;
  std::vector<std::pair<int, std::int64_t>> knobs;
  // The configuration: cuDNN's (an engine index and knobs), or the backend's direct kernel only
  // for a problem it runs (a 4-channel channels-last plan of int-sized, 2-D float16/bfloat16).
  if (t.config == cuda::kDirectConfig)
    check(cuda::direct_conv_supported(s) && s.channels_last == 4 && r == 4 &&
          cuda::direct_conv_shared_bytes(s) <= 200 * 1024);
  else
    check(cuda::parse_cudnn_config(t.config, global, knobs) && global >= 0);
  // Channels-last copies hold x's channels (the backend sizes them from the padded count).
  check(s.channels_last == 0 ||
        (!s.accumulate && s.w[1] == s.x[1] && s.channels_last >= s.x[1] && s.channels_last < s.x[1] + 8));
  // A channels-last output never comes with an accumulating (bias-first) plan.
  check(!t.out_channels_last || !s.accumulate);
  // The run-time match against the actual problem takes the tactic's problem as read: any
  // values (no overflow, no out-of-bounds), and symmetric in its arguments.
  cuda::CudnnConvShape other = s;
  if (!other.post.empty()) other.post[0] = other.pre[0];
  check(cuda::same_cudnn_problem(s, other) == cuda::same_cudnn_problem(other, s));
  return 0;
}
