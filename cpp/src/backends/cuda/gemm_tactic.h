// Internal to the CUDA backend, and free of CUDA so that the CPU tests and a fuzz target can
// check it: how a matrix multiply's tactic is written into an engine and read back.
//
//   cuda.gemm.cublaslt[.int8|.fp8][.epilogue<n>][/algo:<hex>][/ws:<bytes>]
//   cuda.gemm.sm90.fp8.epilogue<n>
//
// epilogue<n>: cuBLASLt applies the node's first n epilogue ops (n >= 1); algo: the cuBLASLt
// algorithm timed at build time (its bytes in lowercase hex, as algo_to_hex writes them); ws:
// the most scratch cuBLASLt may use, written only when the build's workspace limit asked for
// less than the default (kGemmWorkspaceBytes). The second form is the backend's fused fp8 GEMM
// (fp8_gemm.h), which applies the node's first n epilogue ops: 2 (bias, GELU) or 3 (bias, GELU,
// quantize). Engine files are untrusted input:
// parse_gemm_tactic accepts exactly what format_gemm_tactic writes and rejects anything else.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "backends/cuda/cudnn_tactic.h"  // detail::whole_number

namespace tensoracle::cuda {

inline constexpr std::string_view kGemmTacticPrefix = "cuda.gemm.cublaslt";

struct GemmTactic {
  std::string base;                        // "cuda.gemm.cublaslt[.int8|.fp8][.epilogue<n>]"
  std::string algo;                        // hex digits; empty: cuBLASLt's heuristic at run time
  std::optional<std::uint64_t> workspace;  // cuBLASLt's scratch; none: kGemmWorkspaceBytes
  bool operator==(const GemmTactic&) const = default;
};

inline std::string format_gemm_tactic(const GemmTactic& t) {
  std::string s = t.base;
  if (!t.algo.empty()) s += "/algo:" + t.algo;
  if (t.workspace) s += "/ws:" + std::to_string(*t.workspace);
  return s;
}

// Exactly format_gemm_tactic's output for a well-formed base; false for anything else.
inline bool parse_gemm_tactic(std::string_view text, GemmTactic& out) {
  GemmTactic t;
  const auto slash = text.find('/');
  std::string_view base = text.substr(0, slash);
  t.base = std::string(base);
  if (!base.starts_with(kGemmTacticPrefix)) return false;
  base.remove_prefix(kGemmTacticPrefix.size());
  if (base.starts_with(".int8")) base.remove_prefix(5);
  else if (base.starts_with(".fp8")) base.remove_prefix(4);
  if (base.starts_with(".epilogue")) {
    base.remove_prefix(9);
    int n = 0;
    if (!detail::whole_number(base, n) || n < 1) return false;
  } else if (!base.empty()) {
    return false;
  }
  std::string_view rest = slash == std::string_view::npos ? std::string_view() : text.substr(slash);
  if (rest.starts_with("/algo:")) {
    rest.remove_prefix(6);
    const auto end = rest.find('/');
    const std::string_view hex = rest.substr(0, end);
    if (hex.empty() || hex.find_first_not_of("0123456789abcdef") != std::string_view::npos) return false;
    t.algo = std::string(hex);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end);
  }
  if (rest.starts_with("/ws:")) {
    std::uint64_t ws = 0;
    if (!detail::whole_number(rest.substr(4), ws)) return false;
    t.workspace = ws;
    rest = {};
  }
  if (!rest.empty()) return false;
  out = std::move(t);
  return true;
}

inline constexpr std::string_view kFusedFp8TacticPrefix = "cuda.gemm.sm90.fp8.epilogue";

inline std::string format_fused_fp8_tactic(int ops) { return std::string(kFusedFp8TacticPrefix) + std::to_string(ops); }

// Exactly format_fused_fp8_tactic's output for 2 or 3 ops; false for anything else.
inline bool parse_fused_fp8_tactic(std::string_view text, int& ops) {
  if (!text.starts_with(kFusedFp8TacticPrefix)) return false;
  text.remove_prefix(kFusedFp8TacticPrefix.size());
  int n = 0;
  if (!detail::whole_number(text, n) || (n != 2 && n != 3)) return false;
  ops = n;
  return true;
}

}  // namespace tensoracle::cuda
