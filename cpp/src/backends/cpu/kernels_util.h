// Internal to the CPU backend: helpers shared by the kernel files (defined in kernels.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "backends/cpu/kernels.h"

namespace tensoracle::cpu::detail {

// Applies the process-wide thread count to OpenBLAS before the first GEMM.
void ensure_blas_threads();

// Throws InvalidArgument("[cpu] " + what).
[[noreturn]] void fail(const std::string& what);

// The tensor's element count; throws (naming `kernel` and `name`) for unknown dims, an invalid
// type, or missing data.
std::int64_t checked_volume(const TensorRef& t, const char* kernel, const char* name);

// Calls fn(begin, end) over [0, n) in one contiguous range per thread (OpenMP), using several
// threads only when n >= parallel_min.
void parallel_ranges(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& fn,
                     std::int64_t parallel_min);

}  // namespace tensoracle::cpu::detail
