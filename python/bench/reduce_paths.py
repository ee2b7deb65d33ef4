#!/usr/bin/env python3
"""The CUDA backend's two reduce paths on the GPU, same run: the split reduce (tactic
cuda.reduce.split, the default where few outputs cover many elements) against one team per
output (cuda.reduce: the same engine built within a 64 KiB workspace limit, which leaves no
room for the partials), torch eager beside them, float32. Prints per reduction the times, the
bandwidth, the tactics and both paths' max |error| against torch's float64 result rounded to
float32.

    python python/bench/reduce_paths.py
"""

from __future__ import annotations

import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_torch import cuda_time  # noqa: E402

import tensoracle  # noqa: E402
import tensoracle.trt as trt  # noqa: E402


def engine(shape, op, axes, limit):
    def graph(net):
        y = net.add_reduce(net.add_input("x", trt.float32, shape), op, axes, False).get_output(0)
        y.name = "y"
        net.mark_output(y)

    decl = tensoracle.EngineBuild({"x": tensoracle.InputShape.fixed(shape)},
                                  tensoracle.BuilderSettings(device="cuda:0", optimization_level=0,
                                                             workspace_limit=limit))
    return tensoracle.deserialize_engine(tensoracle.build_serialized_engine(graph, decl))


def timed(fn, stream):
    """Microseconds per call: the median of 7 rounds of 20 back-to-back calls on `stream`."""
    return statistics.median(cuda_time(fn, 20, 7, stream)) * 1e6


def main() -> None:
    stream = torch.cuda.Stream()
    cases = [("sum of 16 M", (1 << 24,), trt.ReduceOperation.SUM, 1, lambda t: t.sum()),
             ("mean over axis 0 of 262144 x 64", (1 << 18, 64), trt.ReduceOperation.AVG, 1, lambda t: t.mean(0)),
             ("sums of 8 rows of 2 M", (8, 1 << 21), trt.ReduceOperation.SUM, 2, lambda t: t.sum(1))]
    for name, shape, op, axes, fn in cases:
        x = torch.randn(*shape, device="cuda")
        ref = fn(x.double()).float()
        gb = x.numel() * 4 / 1e9
        cells = []
        for label, limit in [("split", 0), ("one team", 64 << 10)]:
            e = engine(shape, op, axes, limit)
            ex = e.create_execution()
            ex.set_tensor_address("x", x)
            y = torch.empty(tuple(ex.get_tensor_shape("y")), device="cuda")
            ex.set_tensor_address("y", y)
            us = timed(lambda ex=ex: ex.enqueue(stream), stream)
            err = (y - ref).abs().max().item()
            cells.append(f"{label} {us:.1f} us ({gb / us * 1e6:.0f} GB/s, {e.layers()[0].tactic}, max|err| {err:.3g})")
        print(f"{name}: " + "; ".join(cells) + f"; torch {timed(lambda x=x, fn=fn: fn(x), stream):.1f} us")


if __name__ == "__main__":
    main()
