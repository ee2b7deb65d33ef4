// Internal to the CUDA backend, and free of CUDA so the CPU tests can check it: which of a
// GEMM's timed candidates an engine keeps.
//
// The builder times cuBLASLt's top candidates in interleaved rounds (every candidate once per
// round, so clock and temperature drift touches them alike) and keeps the one with the lowest
// median time per run. cuBLASLt's first choice (candidate 0) is kept unless another candidate
// beats its median by more than `margin` (a fraction): a single batch of runs of one candidate
// varies by several percent on a busy or warming GPU, and the heuristic's choice is the one that
// was fastest inside a real network in our measurements (docs/performance.md), so a challenger
// has to win clearly.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace tensoracle::cuda {

// The median of `v` (non-empty): the mean of the middle two for an even count.
inline double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

// `times[i]`: candidate i's time per run in each round; empty for a candidate that failed to run.
// Returns the index to keep, or -1 when no candidate ran.
inline int choose_timed(const std::vector<std::vector<double>>& times, double margin) {
  int best = -1;
  double best_median = 0;
  for (std::size_t i = 0; i < times.size(); ++i) {
    if (times[i].empty()) continue;
    const double m = median_of(times[i]);
    if (best < 0 || m < best_median) {
      best = static_cast<int>(i);
      best_median = m;
    }
  }
  if (best > 0 && !times[0].empty() && best_median > median_of(times[0]) * (1 - margin)) return 0;
  return best;
}

}  // namespace tensoracle::cuda
