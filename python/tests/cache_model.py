"""A model package in miniature for the open_engine tests: weights in a safetensors file, a
graph function that reads them (and counts its calls in a file), the declaration and I/O.

Run as a script it is one worker process of the multi-process tests::

    python cache_model.py open   CACHE WEIGHTS COUNTER [--k K --n N] [--ready F --go F]
    python cache_model.py hang   CACHE WEIGHTS COUNTER MARKER   # the graph function never returns

``open`` prints one JSON line: {"built", "identity", "path", "value"} or {"error", "errno", "message"}.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

import numpy as np

import tensoracle
import tensoracle.trt as trt
from tensoracle import BuilderSettings, EngineBuild, EngineIO, InputShape, TensorSpec

# File times tick coarsely, so a record taken within 25 ms of a file's last change is checked
# again by content (by design). Tests asserting "nothing was read again" wait longer than that.
SETTLE_SECONDS = 0.06


def matrix(k: int = 32, n: int = 16, scale: float = 1.0) -> np.ndarray:
    return ((np.arange(k * n) % 7 - 2).astype(np.float32).reshape(k, n) * np.float32(scale / 8))


def write_weights(path, k: int = 32, n: int = 16, scale: float = 1.0) -> None:
    tensoracle.safetensors.save_file({"matrix": matrix(k, n, scale)}, str(path))


def graph(weights, counter=None, marker=None, hang: bool = False, sleep: float = 0.0):
    """features (rows x K) @ matrix (K x N), then ReLU; records each call in `counter`."""

    def define(network):
        if counter is not None:
            with open(counter, "a") as f:
                f.write(f"{os.getpid()}\n")
        if marker is not None:
            pathlib.Path(marker).write_text("building")
        if hang:
            time.sleep(600)
        if sleep:
            time.sleep(sleep)
        w = np.ascontiguousarray(tensoracle.safetensors.load_file(str(weights))["matrix"])
        k, n = w.shape
        x = network.add_input("features", trt.float32, (-1, k))
        c = network.add_constant((k, n), w).get_output(0)
        y = network.add_matrix_multiply(x, trt.MatrixOperation.NONE, c, trt.MatrixOperation.NONE).get_output(0)
        y = network.add_activation(y, trt.ActivationType.RELU).get_output(0)
        y.name = "result"
        network.mark_output(y)

    return define


def declaration(k: int = 32, opt_rows: int = 16, level: int = 0) -> EngineBuild:
    return EngineBuild(
        {"features": InputShape.ranged((1, k), (opt_rows, k), (64, k))},
        BuilderSettings(optimization_level=level, device="cpu"),
    )


def io(k: int = 32, n: int = 16) -> EngineIO:
    return EngineIO({"features": TensorSpec(trt.float32, (-1, k))}, {"result": TensorSpec(trt.float32, (-1, n))})


def open_model(cache, weights_file, counter=None, *, k=32, n=16, **kwargs):
    kw = dict(name="linear", graph_version="1", weights=(weights_file,), io=io(k, n), cache_dir=cache)
    kw.update(kwargs)
    g = kw.pop("graph", None) or graph(weights_file, counter)
    decl = kw.pop("declaration", None) or declaration(k)
    return tensoracle.open_engine(g, decl, **kw)


def run(handle, k: int = 32) -> np.ndarray:
    return handle.create_execution().run({"features": np.ones((4, k), np.float32)})["result"]


def expected(k: int = 32, n: int = 16, scale: float = 1.0) -> np.ndarray:
    return np.maximum(np.ones((4, k), np.float32) @ matrix(k, n, scale), 0)


def calls(counter) -> int:
    p = pathlib.Path(counter)
    return len(p.read_text().splitlines()) if p.exists() else 0


def _main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["open", "hang"])
    ap.add_argument("cache")
    ap.add_argument("weights")
    ap.add_argument("counter")
    ap.add_argument("marker", nargs="?")
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--ready")
    ap.add_argument("--go")
    ap.add_argument("--sleep", type=float, default=0.0)
    ap.add_argument("--force-rebuild", action="store_true")
    a = ap.parse_args()
    if a.ready:
        pathlib.Path(a.ready).write_text("ready")
    if a.go:
        while not os.path.exists(a.go):
            time.sleep(0.001)
    g = graph(a.weights, a.counter, a.marker, hang=a.mode == "hang", sleep=a.sleep)
    try:
        h = open_model(a.cache, a.weights, k=a.k, n=a.n, graph=g, force_rebuild=a.force_rebuild)
    except OSError as e:
        print(json.dumps({"error": type(e).__name__, "errno": e.errno, "message": str(e)}))
        return 0
    value = run(h, a.k)
    print(json.dumps({"built": h.built, "identity": h.identity, "path": str(h.path), "value": value.tolist()}))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
