"""What every benchmark prints about the machine it ran on (imported by the bench_*.py scripts,
which run from this folder)."""

from __future__ import annotations

import platform


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
