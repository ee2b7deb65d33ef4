#!/usr/bin/env python3
"""Benchmark: tensoracle.safetensors against the official `safetensors.numpy` reader.

One run writes a safetensors file (default: 1 GiB, 2,000 float32 tensors of varied shapes)
with tensoracle's save_file into a temporary folder, reads it once to warm the page cache,
then times, for each reader, the median of several repeats of:

  (a) open + touch every tensor (its first and last element)
  (b) open + full read of every tensor (float(a.sum()), the same work for both)
  (c) open only (keys())

tensoracle maps the file and validates its header, so (a) and (c) cost O(header); the
official numpy loader copies every tensor into memory, so its cost grows with the file.
A second table opens small files with 1x and 10x the tensor count to show that the
opening cost follows the header, not the data. Everything written is deleted at the end.

    python python/bench/bench_safetensors.py                      # the full 1 GiB run
    python python/bench/bench_safetensors.py --size-mib 64 --tensors 200   # a quick check
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import shutil
import statistics
import struct
import sys
import tempfile
import time
from importlib import metadata as importlib_metadata

import numpy as np

import tensoracle
from tensoracle import safetensors as ts

import safetensors
import safetensors.numpy as official_np

TARGET_TOUCH_RATIO = 0.25  # (a): tensoracle must take at most a quarter of the official time


# ----------------------------------------------------------------------------------------
# the file


def tensor_shapes(total_elements: int, count: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """`count` shapes of varied rank and size whose element counts sum to `total_elements`."""
    if count < 1 or total_elements < count:
        raise SystemExit("need at least one float32 element per tensor")
    # Sizes spread over about three orders of magnitude, as in real checkpoints.
    weights = rng.lognormal(mean=0.0, sigma=1.5, size=count)
    targets = np.maximum(1, np.floor(weights / weights.sum() * (total_elements - count)))
    widths = np.array([64, 128, 256, 384, 512, 768, 1024, 2048, 4096])

    shapes: list[tuple[int, ...]] = []
    for target in targets[:-1].astype(np.int64):
        n = int(target)
        kind = int(rng.integers(0, 4))
        fitting = widths[widths <= n]
        if kind == 0 or fitting.size == 0:
            shapes.append((n,))  # bias / norm vectors
            continue
        cols = int(rng.choice(fitting))
        rows = n // cols
        if kind == 2 and rows >= 3:
            shapes.append((3, rows // 3, cols))  # fused q/k/v
        elif kind == 3 and rows >= 9:
            shapes.append((rows // 9, 3, 3, cols))  # convolution kernel
        else:
            shapes.append((rows, cols))
    # The last tensor takes what is left, so the file holds exactly total_elements.
    rest = total_elements - sum(int(np.prod(s)) for s in shapes)
    assert rest >= 1, rest
    shapes.append((rest,))
    order = rng.permutation(len(shapes))
    shapes = [shapes[i] for i in order]
    assert sum(int(np.prod(s)) for s in shapes) == total_elements
    return shapes


def make_tensors(shapes, rng: np.random.Generator, buffer: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Tensors named like a model's, as non-overlapping views of one buffer (no copies)."""
    total = sum(int(np.prod(s)) for s in shapes)
    if buffer is None:
        buffer = rng.standard_normal(total, dtype=np.float32)
    tensors, offset = {}, 0
    for i, shape in enumerate(shapes):
        n = int(np.prod(shape))
        part = ("attn.qkv", "mlp.up", "mlp.down", "norm", "embed")[i % 5]
        tensors[f"model.layers.{i // 5}.{part}.weight"] = buffer[offset : offset + n].reshape(shape)
        offset += n
    return tensors


def header_size(path: str) -> int:
    with open(path, "rb") as f:
        return struct.unpack("<Q", f.read(8))[0]


def warm(path: str) -> None:
    with open(path, "rb", buffering=0) as f:
        while f.read(64 << 20):
            pass


# ----------------------------------------------------------------------------------------
# the work timed


def ours_touch(path):
    tensors = ts.load_file(path)
    acc = 0.0
    for a in tensors.values():
        acc += float(a.flat[0]) + float(a.flat[-1])
    return acc


def official_touch(path):
    tensors = official_np.load_file(path)
    acc = 0.0
    for a in tensors.values():
        acc += float(a.flat[0]) + float(a.flat[-1])
    return acc


def ours_full(path):
    return sum(float(a.sum()) for a in ts.load_file(path).values())


def official_full(path):
    return sum(float(a.sum()) for a in official_np.load_file(path).values())


def ours_open(path):
    with ts.safe_open(path) as f:
        return len(f.keys())


def official_open(path):
    with safetensors.safe_open(path, "np") as f:
        return len(f.keys())


def median_seconds(fn, path, repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        result = fn(path)
        times.append(time.perf_counter() - start)
    gc.collect()
    return statistics.median(times), result


# ----------------------------------------------------------------------------------------
# report


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("model name", "Model", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def memory_gib() -> str:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def version(dist: str, module=None) -> str:
    try:
        return importlib_metadata.version(dist)
    except importlib_metadata.PackageNotFoundError:
        return getattr(module, "__version__", "unknown")


def fmt_time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:9.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:9.2f} ms"
    return f"{seconds:9.3f} s "


def print_machine() -> None:
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print("machine")
    print(f"  nproc          {affinity} (os.cpu_count() = {os.cpu_count()})")
    print(f"  cpu            {cpu_model()}")
    print(f"  memory         {memory_gib()}")
    print(f"  os             {platform.system()} {platform.release()} {platform.machine()}")
    print("versions")
    print(f"  python         {platform.python_version()}")
    print(f"  tensoracle     {version('tensoracle', tensoracle)}")
    print(f"  safetensors    {version('safetensors', safetensors)}")
    print(f"  numpy          {np.__version__}")
    try:
        import ml_dtypes

        print(f"  ml_dtypes      {version('ml_dtypes', ml_dtypes)}")
    except ImportError:
        pass


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="data size of the file (default 1024)")
    parser.add_argument("--tensors", type=int, default=2000, help="number of float32 tensors (default 2000)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per measurement (default 5)")
    parser.add_argument("--dir", default=None, help="folder for the temporary files (default: system temp)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.size_mib < 1 or args.tensors < 1 or args.repeats < 1:
        parser.error("--size-mib, --tensors and --repeats must be positive")

    print_machine()
    rng = np.random.default_rng(args.seed)
    total_elements = args.size_mib * 2**20 // 4
    workdir = tempfile.mkdtemp(prefix="tensoracle-bench-", dir=args.dir)
    try:
        path = os.path.join(workdir, "bench.safetensors")
        shapes = tensor_shapes(total_elements, args.tensors, rng)
        start = time.perf_counter()
        tensors = make_tensors(shapes, rng)
        ts.save_file(tensors, path, metadata={"format": "np", "bench": "tensoracle"})
        write_s = time.perf_counter() - start
        del tensors
        gc.collect()
        size = os.path.getsize(path)
        hsize = header_size(path)
        ranks = {}
        for s in shapes:
            ranks[len(s)] = ranks.get(len(s), 0) + 1
        sizes = sorted(int(np.prod(s)) * 4 for s in shapes)
        print("file")
        print(f"  path           {path}")
        print(f"  size           {size:,} bytes ({size / 2**20:.1f} MiB), {len(shapes):,} float32 tensors")
        print(f"  header         {hsize:,} bytes ({hsize / size * 100:.4f}% of the file)")
        print(f"  tensor ranks   " + ", ".join(f"{r}-D: {n}" for r, n in sorted(ranks.items())))
        print(f"  tensor bytes   min {sizes[0]:,}, median {sizes[len(sizes) // 2]:,}, max {sizes[-1]:,}")
        print(f"  written in     {write_s:.2f} s (generation + tensoracle save_file)")

        warm(path)
        print(f"  page cache     warmed (read once); {args.repeats} repeats each, median reported")
        print()

        rows = []
        for label, ours_fn, official_fn in (
            ("(a) open + touch every tensor", ours_touch, official_touch),
            ("(b) open + full read (sum)", ours_full, official_full),
            ("(c) open only (keys)", ours_open, official_open),
        ):
            ours_t, ours_r = median_seconds(ours_fn, path, args.repeats)
            off_t, off_r = median_seconds(official_fn, path, args.repeats)
            same = ours_r == off_r or (
                isinstance(ours_r, float) and abs(ours_r - off_r) <= 1e-6 * max(1.0, abs(off_r))
            )
            if not same:
                print(f"warning: {label}: results differ (tensoracle {ours_r!r}, official {off_r!r})")
            rows.append((label, ours_t, off_t))

        print(f"{'measurement':32} {'tensoracle':>12} {'official':>12} {'ratio':>8}  target")
        for label, ours_t, off_t in rows:
            ratio = ours_t / off_t if off_t > 0 else float("inf")
            target = ""
            if label.startswith("(a)"):
                verdict = "met" if ratio <= TARGET_TOUCH_RATIO else "MISSED"
                target = f"<= {TARGET_TOUCH_RATIO:.2f}x ({verdict})"
            print(f"{label:32} {fmt_time(ours_t):>12} {fmt_time(off_t):>12} {ratio:7.3f}x  {target}")
        print("ratio = tensoracle / official (lower is better for tensoracle)")
        print()

        # Opening cost against header size: small files, same and 10x the tensor count.
        print("open only (c) against header size")
        print(f"  {'file':30} {'file bytes':>15} {'header bytes':>13} {'tensoracle':>12} {'ns/header byte':>15} {'official':>12}")
        scaling = [("this benchmark's file", path)]
        for factor in (1, 10):
            count = args.tensors * factor
            small = os.path.join(workdir, f"small-{factor}.safetensors")
            small_shapes = tensor_shapes(count * 16, count, rng)
            ts.save_file(make_tensors(small_shapes, rng), small, metadata={"format": "np"})
            warm(small)
            scaling.append((f"{count:,} tensors of 64 B each", small))
        for label, p in scaling:
            ours_t, _ = median_seconds(ours_open, p, args.repeats)
            off_t, _ = median_seconds(official_open, p, args.repeats)
            h = header_size(p)
            print(
                f"  {label:30} {os.path.getsize(p):>15,} {h:>13,} {fmt_time(ours_t):>12} "
                f"{ours_t / h * 1e9:>15.2f} {fmt_time(off_t):>12}"
            )
        print("  (opening reads and validates the header only: its cost follows the header size,")
        print("   not the file size)")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
