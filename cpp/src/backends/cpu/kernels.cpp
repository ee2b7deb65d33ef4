// The CPU backend's threads (num_threads/set_num_threads, and the public set_cpu_threads/
// cpu_threads of tensoracle/engine.h) and the helpers every kernel file shares (`detail`,
// declared in kernels_util.h with the storage tags the kernel files share). The kernels
// themselves are in ops/, one file per layer (kernels.h is their index).
#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_util.h"

#include <cblas.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "tensoracle/engine.h"
#include "tensoracle/errors.h"

namespace tensoracle::cpu {

namespace {

// 0: the default (the machine's cores).
std::atomic<int> g_threads{0};
std::once_flag g_blas_once;

int default_threads() noexcept {
  unsigned h = std::thread::hardware_concurrency();
  return h > 0 ? static_cast<int>(h) : 1;
}

}  // namespace

int num_threads() {
  int n = g_threads.load(std::memory_order_relaxed);
  return n > 0 ? n : default_threads();
}

void set_num_threads(int n) {
  if (n < 0)
    throw InvalidArgument("[cpu] set_num_threads(" + std::to_string(n) +
                          "): the thread count must be >= 1, or 0 for the machine's cores");
  g_threads.store(n, std::memory_order_relaxed);
  std::call_once(g_blas_once, [] {});  // supersedes the lazy first-use setting below
  openblas_set_num_threads(num_threads());
}

ThreadScope::ThreadScope() {
#ifdef _OPENMP
  previous_ = omp_get_max_threads();
  if (previous_ != num_threads()) omp_set_num_threads(num_threads());
#endif
}

ThreadScope::~ThreadScope() {
#ifdef _OPENMP
  if (previous_ != num_threads()) omp_set_num_threads(previous_);
#endif
}

namespace detail {

// OpenBLAS starts with its own default (all cores or OPENBLAS_NUM_THREADS); the first GEMM
// applies ours.
void ensure_blas_threads() {
  std::call_once(g_blas_once, [] { openblas_set_num_threads(num_threads()); });
}

void fail(const std::string& what) { kFail(what); }

std::int64_t checked_volume(const TensorRef& t, const char* kernel, const char* name) {
  return backends::common::checked_volume(kFail, t, kernel, name);
}

// Calls fn(begin, end) over [0, n) split into one contiguous range per thread, on several
// threads only when n >= parallel_min (each thread then gets at least parallel_min / 8).
void parallel_ranges(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& fn,
                     std::int64_t parallel_min) {
  if (n <= 0) return;
  std::int64_t nt = n >= parallel_min ? num_threads() : 1;
  nt = std::min(nt, std::max<std::int64_t>(1, n / std::max<std::int64_t>(1, parallel_min / 8)));
  if (nt <= 1) {
    fn(0, n);
    return;
  }
#ifdef _OPENMP
#pragma omp parallel for num_threads(static_cast<int>(nt)) schedule(static, 1)
#endif
  for (std::int64_t t = 0; t < nt; ++t) fn(n * t / nt, n * (t + 1) / nt);
}

bool avx512_kernels(const char* baseline_variable) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return cpu && !std::getenv(baseline_variable);
#else
  (void)baseline_variable;
  return false;
#endif
}

}  // namespace detail

}  // namespace tensoracle::cpu

namespace tensoracle {

void set_cpu_threads(int n) {
  if (n < 0) throw InvalidArgument("[engine] set_cpu_threads: " + std::to_string(n) + " is negative");
  cpu::set_num_threads(n);
}
int cpu_threads() { return cpu::num_threads(); }

}  // namespace tensoracle
