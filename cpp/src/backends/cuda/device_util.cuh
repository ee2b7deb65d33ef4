// Internal to the CUDA backend's kernel files (.cu): storage tags, index arithmetic over up to
// eight dims, launch geometry and error checks. Device code only where marked __device__.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "backends/cuda/kernels.h"
#include "tensoracle/errors.h"

namespace tensoracle::cuda::dev {

using i64 = std::int64_t;

// Throws tensoracle::Error("[cuda] <what>: <CUDA's message>") when `e` is not cudaSuccess.
inline void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess)
    throw Error("[cuda] " + what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}
// After a launch: a launch-configuration error names the kernel.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), std::string("launching ") + kernel); }

[[noreturn]] inline void unsupported(const std::string& what) { throw UnsupportedError("[cuda] " + what); }

// ---- host-side checks (backends/common/checks.h), with "[cuda]" ----

// The CUDA backend's refusals: InvalidArgument("[cuda] " + what).
inline constexpr backends::common::Fail kFail{"[cuda] "};
[[noreturn]] inline void fail(const std::string& what) { kFail(what); }
// A type's name, a tensor's type and dims, a number: for messages (backends/common/checks.h).
using backends::common::desc;
using backends::common::is_float_type;
using backends::common::num;
using backends::common::tn;

// The tensor's element count; throws (naming `kernel` and `name`) for an invalid type, unknown
// dims or missing data.
inline std::int64_t checked_volume(const TensorRef& t, const char* kernel, const char* name) {
  return backends::common::checked_volume(kFail, t, kernel, name);
}

// Programmatic dependent launch: a kernel launched after this one with the attribute (the fused
// fp8 GEMM, fp8_gemm.cu) may start its prologue now, while this grid runs. Such a kernel reads,
// before its griddepcontrol.wait, only memory that no earlier kernel in the stream writes (engine
// weights, tables finished before it was launched); for every other kernel this is a no-op.
__device__ inline void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Grid for a grid-stride loop over n elements: enough blocks to fill the device a few times
// over, never more than n needs.
constexpr int kThreads = 256;
inline unsigned blocks_for(i64 n) {
  const i64 need = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(need < 1 ? 1 : need > 65535 * 8 ? 65535 * 8 : need);
}

// ---- storage tags: T is the stored type, load() gives the compute value, store() rounds a
// float to it (round to nearest even, as the CPU's core/numeric.h) --------------------------

struct F32 {
  using T = float;
  __device__ static float load(T v) { return v; }
  __device__ static T store(float x) { return x; }
};
struct F16 {
  using T = __half;
  __device__ static float load(T v) { return __half2float(v); }
  __device__ static T store(float x) { return __float2half_rn(x); }
};
struct BF16 {
  using T = __nv_bfloat16;
  __device__ static float load(T v) { return __bfloat162float(v); }
  __device__ static T store(float x) { return __float2bfloat16_rn(x); }
};
// fp8 e4m3fn: stores saturate to ±448, NaN stays NaN.
struct FP8 {
  using T = __nv_fp8_storage_t;
  __device__ static float load(T v) { return __half2float(__half(__nv_cvt_fp8_to_halfraw(v, __NV_E4M3))); }
  __device__ static T store(float x) { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3); }
};

// Calls f(Tag{}) for a float type (float32, float16, bfloat16, fp8 when `fp8`); returns false
// for any other type.
template <class Fn>
bool with_float(DataType t, Fn&& f, bool fp8 = false) {
  switch (t) {
    case DataType::kFLOAT: f(F32{}); return true;
    case DataType::kHALF: f(F16{}); return true;
    case DataType::kBF16: f(BF16{}); return true;
    case DataType::kFP8:
      if (!fp8) return false;
      f(FP8{});
      return true;
    default: return false;
  }
}

// ---- index arithmetic --------------------------------------------------------------------

// Dims and element strides passed by value to kernels (rank <= 8).
struct Shape {
  int rank = 0;
  i64 d[Dims::kMaxRank] = {};
};
struct Strides {
  i64 s[Dims::kMaxRank] = {};
};

inline Shape shape_of(const Dims& dims) {
  Shape s;
  s.rank = dims.rank();
  for (int i = 0; i < s.rank; ++i) s.d[i] = dims[i];
  return s;
}
// Row-major strides of `dims`.
inline Strides packed_strides(const Dims& dims) {
  Strides st;
  i64 acc = 1;
  for (int i = dims.rank() - 1; i >= 0; --i) {
    st.s[i] = acc;
    acc *= dims[i];
  }
  return st;
}
// Strides of a packed tensor of dims `in` read over the (equal-rank) dims `out`: 0 where `in`
// has 1 and `out` more (broadcast).
inline Strides broadcast_strides(const Dims& in, const Dims& out) {
  Strides st = packed_strides(in);
  for (int i = 0; i < in.rank(); ++i)
    if (in[i] == 1 && out[i] != 1) st.s[i] = 0;
  return st;
}
// Element offset of the `linear`-th element of `shape` (row-major) under `st`.
__device__ inline i64 offset_of(i64 linear, const Shape& shape, const Strides& st) {
  i64 off = 0;
  for (int i = shape.rank - 1; i >= 0; --i) {
    const i64 d = shape.d[i];
    off += (linear % d) * st.s[i];
    linear /= d;
  }
  return off;
}

}  // namespace tensoracle::cuda::dev
