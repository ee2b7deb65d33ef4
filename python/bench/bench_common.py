"""What every benchmark prints about the machine it ran on (imported by the bench_*.py scripts,
which run from this folder)."""

from __future__ import annotations

import platform
import statistics
import time
from typing import Callable


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load_line() -> str:
    """Load average and CPU pressure: other processes' work skews every timing here."""
    parts = []
    try:
        with open("/proc/loadavg") as f:
            parts.append("loadavg " + " ".join(f.read().split()[:3]))
    except OSError:
        pass
    try:
        with open("/proc/pressure/cpu") as f:
            parts.append("cpu pressure " + " ".join(f.readline().split()[1:3]))
    except OSError:
        pass
    return ", ".join(parts) or "unknown"


class Peer:
    """One timed contestant: `fn` runs one iteration; times in ms accumulate over calls of time()."""

    def __init__(self, label: str, fn: Callable[[], object]):
        self.label, self.fn, self.times_ms = label, fn, []

    def time(self, iterations: int) -> None:
        fn, clock = self.fn, time.perf_counter_ns
        for _ in range(iterations):
            t0 = clock()
            fn()
            self.times_ms.append((clock() - t0) / 1e6)

    @property
    def median(self) -> float:
        return statistics.median(self.times_ms)

    @property
    def p90(self) -> float:
        ordered = sorted(self.times_ms)
        return ordered[min(len(ordered) - 1, int(0.9 * (len(ordered) - 1) + 0.5))]


def interleaved(peers: list[Peer], rounds: int, iterations: int) -> None:
    """Times the peers in `rounds` rounds of `iterations` each, the order rotating every round, so
    that a slow phase of the machine falls on every peer alike."""
    for r in range(rounds):
        for i in range(len(peers)):
            peers[(r + i) % len(peers)].time(iterations)
