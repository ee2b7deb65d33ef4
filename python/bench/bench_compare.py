#!/usr/bin/env python3
"""Benchmark: tensoracle.compare_outputs against the same metrics computed with NumPy.

One run makes a float32 reference and a candidate (default 100,000,000 elements each, the
candidate = reference + small noise), then times, alternately and several times each:

  tensoracle  compare_outputs(candidate, reference, atol=..., rtol=...): one pass, float64
              accumulation, the CPU backend's threads (tensoracle.cpu_threads())
  NumPy       the equivalent expressions, in float64: convert both arrays, count the
              non-finite values, d = c - r, max |d|, the three norms and c·r (np.dot, which
              OpenBLAS runs on all cores), and the elements where not |d| <= atol + rtol·|r|

and prints both medians, their ratio and the target (tensoracle <= 0.3x NumPy's time). The
two results are checked to agree before anything is timed. The header prints the load
average and CPU pressure: on a shared machine other work skews every timing here.

    python python/bench/bench_compare.py                      # 100 M elements (0.8 GB of inputs)
    python python/bench/bench_compare.py --elements 10000000  # a quicker run
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import numpy as np

import tensoracle
from bench_common import cpu_model, load_line

TARGET_RATIO = 0.3
ATOL, RTOL = 1e-3, 1e-3


def numpy_metrics(candidate: np.ndarray, reference: np.ndarray) -> dict:
    c = candidate.astype(np.float64)
    r = reference.astype(np.float64)
    out = {
        "candidate_nonfinite_count": int(np.count_nonzero(~np.isfinite(c))),
        "reference_nonfinite_count": int(np.count_nonzero(~np.isfinite(r))),
    }
    d = c - r
    ad = np.abs(d)
    norm_c, norm_r, norm_d = np.sqrt(np.dot(c, c)), np.sqrt(np.dot(r, r)), np.sqrt(np.dot(d, d))
    out["max_absolute_error"] = float(np.max(ad))
    out["relative_l2_error"] = float(norm_d / norm_r)
    out["cosine_similarity"] = float(np.dot(c, r) / (norm_c * norm_r))
    out["outside_tolerance_count"] = int(np.count_nonzero(~(ad <= ATOL + RTOL * np.abs(r))))
    return out


def tensoracle_metrics(candidate: np.ndarray, reference: np.ndarray) -> dict:
    return tensoracle.compare_outputs(candidate, reference, atol=ATOL, rtol=RTOL).to_dict()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=100_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs; {load_line()}")
    print(f"tensoracle {tensoracle.__version__} ({tensoracle.cpu_threads()} threads), NumPy {np.__version__}, "
          f"Python {platform.python_version()}")
    print(f"inputs: 2 x {args.elements:,} float32 ({2 * args.elements * 4 / 1e9:.2f} GB); "
          f"atol={ATOL}, rtol={RTOL}; median of {args.repeats} alternating runs")

    rng = np.random.default_rng(0)
    reference = rng.standard_normal(args.elements, dtype=np.float32)
    candidate = reference + np.float32(1e-3) * rng.standard_normal(args.elements, dtype=np.float32)

    # Agreement first (this also warms both paths: page faults, thread pools, BLAS).
    ours, theirs = tensoracle_metrics(candidate, reference), numpy_metrics(candidate, reference)
    for key, value in theirs.items():
        if isinstance(value, int):
            ok = ours[key] == value
        else:
            ok = abs(ours[key] - value) <= 1e-9 * abs(value)
        if not ok:
            print(f"DISAGREEMENT on {key}: tensoracle {ours[key]!r}, NumPy {value!r}")
            return 1
    print(f"results agree: max |c-r| {ours['max_absolute_error']:.6g}, relative L2 {ours['relative_l2_error']:.9g}, "
          f"cosine {ours['cosine_similarity']:.12f}, outside {ours['outside_tolerance_count']:,}")

    times = {"tensoracle": [], "numpy": []}
    for _ in range(args.repeats):
        for name, fn in (("tensoracle", tensoracle_metrics), ("numpy", numpy_metrics)):
            t = time.perf_counter()
            fn(candidate, reference)
            times[name].append(time.perf_counter() - t)

    ours_t, numpy_t = statistics.median(times["tensoracle"]), statistics.median(times["numpy"])
    ratio = ours_t / numpy_t
    print()
    print(f"{'':12} {'median':>10} {'min':>10}")
    for name in ("tensoracle", "numpy"):
        print(f"{name:12} {statistics.median(times[name]) * 1e3:8.1f} ms {min(times[name]) * 1e3:8.1f} ms")
    verdict = "met" if ratio <= TARGET_RATIO else "MISSED"
    print(f"ratio tensoracle / NumPy: {ratio:.3f}x (target <= {TARGET_RATIO}x: {verdict}); "
          f"{args.elements / ours_t / 1e9:.2f} G element pairs/s")
    print(f"load after the run: {load_line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
