// Internal to the backends: what the CPU backend (backends/cpu) and the CUDA backend
// (backends/cuda) both check on the host before running a layer. Plain host C++ (no CUDA
// headers): the CUDA backend's .cu files include it too. The topics beside it: einsum_plan.h,
// reduce_layout.h, broadcast.h, window_geometry.h, index_checks.h, pointwise_checks.h.
//
// Messages name the backend: each passes its Fail ("[cpu] ", "[cuda] "), the rest of every
// message is the same on both.
#pragma once

#include <cstdint>
#include <string>

#include "tensoracle/network.h"
#include "tensoracle/types.h"

namespace tensoracle::backends::common {

using i64 = std::int64_t;

// A buffer with its type and (fully known) dims, packed row-major: in host memory for the CPU
// backend, in device memory for the CUDA backend (cpu::TensorRef, cuda::TensorRef).
struct TensorRef {
  void* data = nullptr;
  DataType type = DataType::kFLOAT;
  Dims dims;
};

// Throws InvalidArgument(prefix + what): the backend's refusal of a layer.
class Fail {
 public:
  explicit constexpr Fail(const char* prefix) : prefix_(prefix) {}
  [[noreturn]] void operator()(const std::string& what) const;
  const char* prefix() const { return prefix_; }

 private:
  const char* prefix_;
};

// A type's name, a tensor's type and dims ("float16[2,3]"), a number: for messages.
std::string tn(DataType t);
std::string desc(const TensorRef& t);
std::string num(std::int64_t v);
bool is_float_type(DataType t);

// The tensor's element count; throws (naming `kernel` and `name`) for an invalid type, unknown
// dims or missing data.
std::int64_t checked_volume(const Fail& fail, const TensorRef& t, const char* kernel, const char* name);

// An operation's name ("SUM"), or "an unknown operation": for messages.
const char* elementwise_name(ElementWiseOperation op);
const char* reduce_name(ReduceOperation op);
const char* unary_name(UnaryOperation op);

// Throws unless `t` is float32, float16 or bfloat16.
void check_float(const Fail& fail, const TensorRef& t, const char* kernel, const char* name);

// Row-major strides of `d`, in elements.
void strides_of(const Dims& d, i64* s);

// The product of d[from, to).
i64 prod(const Dims& d, int from, int to);

}  // namespace tensoracle::backends::common
