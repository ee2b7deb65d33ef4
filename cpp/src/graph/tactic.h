// Internal: a node's tactic (which backend kernel runs the node, and with what configuration)
// and a value's layout. The builder asks the backend for both (Backend::choose_tactic) and the
// plan stores them as JSON: a tactic as an object {"kernel": <name>, <its configuration's
// fields>}, a layout as a value's "layout" string. Engine files are untrusted: tactic_of reads
// exactly what tactic_json writes, with the structural rules below, and throws
// CorruptEngineError for anything else. Whether a kernel and configuration fit the node is the
// backend's to check when it instantiates the node (only it knows its kernels).
//
// The configurations live here, beside the IR, so that one reader checks them all; they are
// plain data, free of any backend's headers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "tensoracle/types.h"

namespace tensoracle::graph {

// How a value's bytes are ordered. kLinear: row-major over its dims (what every kernel reads
// unless told otherwise, and all a caller ever sees). kChannelsLast: a value of rank >= 3,
// [N, C, spatial...], stored as [N, spatial..., C]; written by a convolution or a pooling whose
// readers all take it so (the backend decides where, docs/architecture.md "Layouts").
enum class Layout : std::uint8_t { kLinear, kChannelsLast };
std::string_view layout_name(Layout l);  // "linear", "channels_last"
Layout layout_of(const nlohmann::json& j);  // throws CorruptEngineError for any other value

// Kernel cuda.gemm.cublaslt: a cuBLASLt matrix multiply.
struct CublasLtConfig {
  enum class Precision : std::uint8_t { kNative, kInt8, kFp8 };  // kInt8/kFp8: a folded Q/DQ product
  Precision precision = Precision::kNative;
  int epilogue_ops = 0;   // the node's first n epilogue ops run in cuBLASLt's epilogue (0..64)
  std::string algo;       // the algorithm timed at build time, its bytes in lowercase hex; empty: heuristic
  std::optional<std::uint64_t> workspace;  // cuBLASLt's scratch limit; none: the backend's default
  bool operator==(const CublasLtConfig&) const = default;
};

// Kernel cuda.gemm.sm90.fp8: the backend's fused fp8 GEMM, applying the node's first
// `epilogue_ops` epilogue ops (2: bias, GELU; 3: then quantize).
struct FusedFp8GemmConfig {
  int epilogue_ops = 2;
  bool operator==(const FusedFp8GemmConfig&) const = default;
};

// A convolution problem in cuDNN's terms: x [N, C, spatial...], w [K, C / groups, k...], y [N,
// K, ...] (4 or 5 dims each, all >= 1), per spatial dim stride and dilation (>= 1) and padding
// before/after (>= 0). The CUDA backend's CudnnConvShape (cudnn_tactic.h).
struct ConvProblem {
  DataType type = DataType::kFLOAT;  // float32, float16 or bfloat16
  std::vector<std::int64_t> x, w, y, stride, dilation, pre, post;
  bool accumulate = false;           // y = conv + y (a bias written into y first)
  // 0: cuDNN reads and writes the tensors in place; else it runs on channels-last copies with
  // x's and w's channels padded to this count (C <= channels_last < C + 8; no groups; not
  // accumulating).
  std::int64_t channels_last = 0;
  bool operator==(const ConvProblem&) const = default;
};

// Kernel cuda.convolution.cudnn: a convolution through cuDNN's graph API (or the backend's
// direct kernel on the same channels-last copies). Its JSON form has the problem's fields at
// its top level.
struct CudnnConvConfig {
  ConvProblem problem;
  std::optional<std::int64_t> engine;  // cuDNN's engine global index (>= 0); none: the direct kernel
  std::vector<std::pair<int, std::int64_t>> knobs;  // cuDNN knob type (>= 0) and value, at most 64
  std::uint64_t workspace = 0;       // bytes reserved for the plan at build time
  bool operator==(const CudnnConvConfig&) const = default;
};

inline constexpr std::string_view kCublasLtKernel = "cuda.gemm.cublaslt";
inline constexpr std::string_view kFusedFp8GemmKernel = "cuda.gemm.sm90.fp8";
inline constexpr std::string_view kCudnnConvKernel = "cuda.convolution.cudnn";

struct Tactic {
  // The kernel's name: lowercase letters, digits, '.' and '_', at most 64 characters ("cpu.gemm.onednn",
  // "cuda.reduce.split", ...). Empty: none chosen (a node run in-process: constant folding,
  // shape tensors).
  std::string kernel;
  // The configuration, for the three kernels above (each requires its own); other kernels have none.
  std::variant<std::monostate, CublasLtConfig, FusedFp8GemmConfig, CudnnConvConfig> config;

  Tactic() = default;
  explicit Tactic(std::string k) : kernel(std::move(k)) {}
  explicit Tactic(CublasLtConfig c) : kernel(kCublasLtKernel), config(std::move(c)) {}
  explicit Tactic(FusedFp8GemmConfig c) : kernel(kFusedFp8GemmKernel), config(c) {}
  explicit Tactic(CudnnConvConfig c) : kernel(kCudnnConvKernel), config(std::move(c)) {}
  bool empty() const noexcept { return kernel.empty(); }
  bool operator==(const Tactic&) const = default;
};

nlohmann::json tactic_json(const Tactic& t);
// Exactly what tactic_json writes (no other keys, every required one, each of its type and
// range); throws CorruptEngineError naming what is wrong.
Tactic tactic_of(const nlohmann::json& j);
// One line for people (inspect, LayerInfo::tactic, error messages): the kernel's name, then its
// configuration's fields ("cuda.gemm.cublaslt int8 epilogue:1 algo:0a1b...").
std::string describe(const Tactic& t);

}  // namespace tensoracle::graph
