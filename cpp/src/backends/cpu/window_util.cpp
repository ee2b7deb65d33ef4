// The CPU backend's window-layer helpers that are not inline (window_util.h).
#include "backends/cpu/window_util.h"

#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <climits>
#include <cstdint>
#include <functional>
#include <string>

#include "graph/ops.h"
#include "tensoracle/errors.h"

namespace tensoracle::cpu::window {

void parallel_rows(i64 n, i64 row_work, const std::function<void(i64, i64)>& fn) {
  detail::parallel_ranges(n, fn, std::max<i64>(1, ceil_div(kParallelWork, std::max<i64>(1, row_work))));
}

void check_blas(i64 v, const char* kernel, const char* what) {
  if (v > INT_MAX)
    throw UnsupportedError("[cpu] " + std::string(kernel) + ": " + what + " " + std::to_string(v) +
                           " exceeds the BLAS interface's 32-bit limit");
}

void sgemm(bool trans_a, i64 m, i64 n, i64 k, const float* a, i64 lda, const float* b, i64 ldb, float beta, float* c,
           i64 ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (beta == 0.f)
      for (i64 i = 0; i < m; ++i) std::fill_n(c + i * ldc, n, 0.f);
    return;
  }
  detail::ensure_blas_threads();
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
}

bool gemms_on_team() {
  static const bool team = openblas_get_parallel() != OPENBLAS_THREAD;
  return team;
}

void run_tasks(i64 tasks, i64 slots, const std::function<void(i64, i64)>& task) {
  const i64 nt = std::min<i64>(num_threads(), std::min(slots, tasks));
  detail::ensure_blas_threads();
  if (nt <= 1 || !gemms_on_team()) {
    for (i64 t = 0; t < tasks; ++t) task(t, 0);
    return;
  }
#ifdef _OPENMP
#pragma omp parallel for num_threads(static_cast<int>(nt)) schedule(dynamic, 1)
  for (i64 t = 0; t < tasks; ++t) task(t, omp_get_thread_num());
#else
  for (i64 t = 0; t < tasks; ++t) task(t, 0);
#endif
}

}  // namespace tensoracle::cpu::window
