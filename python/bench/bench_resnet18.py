#!/usr/bin/env python3
"""Benchmark: ResNet-18, batch 8, 224x224, float32 on the CPU, tensoracle against onnxruntime.

The model is examples/resnet18.py's (plain torch.nn, seeded random weights and BatchNorm
statistics). Both peers get the same weights and the same thread count:

  tensoracle   set_cpu_threads(n); the example's graph function (BatchNorm folded into the
               convolutions in NumPy), its engine (dynamic batch 1..8, opt 8) built with
               device="cpu". Timed: execution.enqueue() on buffers bound once. A second line
               times an engine of the same graph with a static batch of 8 (the fusion pass then
               also folds each residual add into its convolution; see the example's test).
  onnxruntime  the same torch model exported with torch.onnx.export (TorchScript exporter,
               dynamo=False: the dynamo exporter needs onnxscript, which is not installed; the
               exporter folds BatchNorm itself), or with --onnx helper the graph built with
               onnx.helper from the same folded weights (Conv, Relu, MaxPool, Add,
               GlobalAveragePool, Flatten, Gemm; opset 17). intra_op_num_threads = n,
               inter_op_num_threads = 1, ORT_SEQUENTIAL, ORT_ENABLE_ALL. Timed:
               run_with_iobinding on CPU OrtValues bound once.

After a warm-up, the peers are timed in interleaved rounds (the order rotates each round); the
table gives median, p90 and min per forward pass over all rounds. The ratio tensoracle /
onnxruntime (medians) is compared with the target 1.3x. The outputs must agree: max abs error
between the peers and against PyTorch fp32 <= 1e-4 (else exit status 1).

    python python/bench/bench_resnet18.py                   # n = os.cpu_count()
    python python/bench/bench_resnet18.py --quick           # a smoke test
    python python/bench/bench_resnet18.py --threads 1 --iterations 50
"""

from __future__ import annotations

import argparse
import io
import math
import os
import pathlib
import platform
import shutil
import sys
import tempfile
import time
import warnings
from typing import Callable

import numpy as np

# tensoracle first: its OpenMP runtime (libgomp, shared by soname with torch's) is then
# initialised with tensoracle's default wait policy (passive: see tensoracle/__init__.py).
import tensoracle  # noqa: I001
from bench_common import cpu_model, load_line

import onnx
import onnxruntime as ort
import torch
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))
import resnet18  # noqa: E402

BATCH = 8
SIZE = 224
TARGET_RATIO = 1.3
MAX_ABS_ERROR = 1e-4


def macs_per_image(size: int) -> int:
    def out(s, k, st, p):
        return (s + 2 * p - k) // st + 1

    total, s = 0, out(size, 7, 2, 3)
    total += s * s * 64 * 3 * 49
    s = out(s, 3, 2, 1)
    inpl = 64
    for i, (blocks, planes) in enumerate(zip(resnet18.BLOCKS, resnet18.WIDTHS)):
        for b in range(blocks):
            st = 2 if (b == 0 and i > 0) else 1
            so = out(s, 3, st, 1)
            total += so * so * planes * inpl * 9 + so * so * planes * planes * 9
            if st != 1 or inpl != planes:
                total += so * so * planes * inpl
            s, inpl = so, planes
    return total + 512 * resnet18.CLASSES


# ----------------------------------------------------------------------------------------
# the ONNX model


def onnx_exported(model: torch.nn.Module, x: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (torch.from_numpy(x),), buffer, input_names=["images"], output_names=["logits"],
            dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}}, opset_version=17, dynamo=False,
            do_constant_folding=True,
        )
    return buffer.getvalue()


def onnx_from_weights(path) -> bytes:
    """The same network built with onnx.helper from the safetensors file, BatchNorm folded in
    NumPy exactly as the example's graph function folds it."""
    w = resnet18.load_file(str(path))
    nodes, inits = [], []

    def conv(x, conv_key, bn_key, stride, pad, name, relu):
        kernel = w[conv_key + ".weight"]
        scale = w[bn_key + ".weight"] / np.sqrt(w[bn_key + ".running_var"] + np.float32(resnet18.BN_EPS))
        inits.append(numpy_helper.from_array((kernel * scale[:, None, None, None]).astype(np.float32), name + ".w"))
        inits.append(numpy_helper.from_array((w[bn_key + ".bias"] - w[bn_key + ".running_mean"] * scale)
                                             .astype(np.float32), name + ".b"))
        k = kernel.shape[2]
        nodes.append(helper.make_node("Conv", [x, name + ".w", name + ".b"], [name], name=name,
                                      kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4))
        if not relu:
            return name
        nodes.append(helper.make_node("Relu", [name], [name + ".relu"]))
        return name + ".relu"

    x = conv("images", "conv1", "bn1", 2, 3, "conv1", True)
    nodes.append(helper.make_node("MaxPool", [x], ["maxpool"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4))
    x, inpl = "maxpool", 64
    for i, (blocks, planes) in enumerate(zip(resnet18.BLOCKS, resnet18.WIDTHS)):
        for b in range(blocks):
            p, st = f"layer{i + 1}.{b}", 2 if (b == 0 and i > 0) else 1
            identity = x
            if st != 1 or inpl != planes:
                identity = conv(x, f"{p}.downsample.0", f"{p}.downsample.1", st, 0, f"{p}.downsample", False)
            out = conv(x, f"{p}.conv1", f"{p}.bn1", st, 1, f"{p}.conv1", True)
            out = conv(out, f"{p}.conv2", f"{p}.bn2", 1, 1, f"{p}.conv2", False)
            nodes.append(helper.make_node("Add", [out, identity], [f"{p}.add"]))
            nodes.append(helper.make_node("Relu", [f"{p}.add"], [f"{p}.out"]))
            x, inpl = f"{p}.out", planes
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"]))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], axis=1))
    inits.append(numpy_helper.from_array(w["fc.weight"].astype(np.float32), "fc.w"))
    inits.append(numpy_helper.from_array(w["fc.bias"].astype(np.float32), "fc.b"))
    nodes.append(helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], transB=1))
    graph = helper.make_graph(
        nodes, "resnet18",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, SIZE, SIZE])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", resnet18.CLASSES])],
        initializer=inits,
    )
    opsets = [helper.make_opsetid("", 17)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="bench_resnet18",
                              ir_version=helper.find_min_ir_version_for(opsets))
    onnx.checker.check_model(model)
    return model.SerializeToString()


def ort_session(model: bytes, threads: int) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(model, sess_options=so, providers=["CPUExecutionProvider"])


# ----------------------------------------------------------------------------------------
# timing


class Peer:
    def __init__(self, name: str, fn: Callable[[], object]):
        self.name, self.fn = name, fn
        self.samples: list[int] = []
        self.round_medians: list[float] = []
        self.cpu_s = self.wall_s = 0.0

    def run_round(self, iterations: int, min_seconds: float) -> None:
        fn, clock, out = self.fn, time.perf_counter_ns, []
        c0, w0 = time.process_time(), time.perf_counter()
        deadline = w0 + min_seconds
        while len(out) < iterations or time.perf_counter() < deadline:
            t0 = clock()
            fn()
            out.append(clock() - t0)
        self.cpu_s += time.process_time() - c0
        self.wall_s += time.perf_counter() - w0
        self.samples += out
        self.round_medians.append(float(np.median(out)) / 1e6)

    def median_ms(self) -> float:
        return float(np.median(self.samples)) / 1e6

    def p90_ms(self) -> float:
        return float(np.percentile(self.samples, 90)) / 1e6


def bench(peers: list[Peer], warmup: int, iterations: int, rounds: int, min_seconds: float) -> None:
    for p in peers:
        for _ in range(warmup):
            p.fn()
    per_round = max(1, math.ceil(iterations / rounds))
    for r in range(rounds):
        k = r % len(peers)
        for p in peers[k:] + peers[:k]:
            p.run_round(per_round, min_seconds / rounds)


# ----------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="threads for both (default: all)")
    ap.add_argument("--iterations", type=int, default=None, help="timed iterations per peer (default 20; --quick 4)")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 4; --quick 2)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up iterations per peer (default 3; --quick 1)")
    ap.add_argument("--min-seconds", type=float, default=None, help="timed seconds per peer at least (default 5)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--onnx", choices=("export", "helper"), default="export",
                    help="the ONNX model: torch.onnx.export (default) or built with onnx.helper")
    ap.add_argument("--no-static", action="store_true", help="skip the static-batch tensoracle engine")
    ap.add_argument("--quick", action="store_true", help="a smoke test")
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    q = args.quick
    iterations = args.iterations if args.iterations is not None else (4 if q else 20)
    rounds = args.rounds if args.rounds is not None else (2 if q else 4)
    warmup = args.warmup if args.warmup is not None else (1 if q else 3)
    min_seconds = args.min_seconds if args.min_seconds is not None else (0.0 if q else 5.0)
    n = args.threads
    if n < 1:
        raise SystemExit("--threads must be >= 1")
    tensoracle.set_cpu_threads(n)
    torch.set_num_threads(n)
    macs = macs_per_image(SIZE) * BATCH

    print(f"bench_resnet18: ResNet-18, batch {BATCH}, {SIZE}x{SIZE}, float32, CPU "
          f"({macs / 1e9:.2f} GMAC per forward pass)")
    print(f"  machine    : {platform.node()}, {platform.machine()}, os.cpu_count() = {os.cpu_count()}; {cpu_model()}")
    print(f"  load       : {load_line()} (at the start)")
    print(f"  versions   : tensoracle {tensoracle.__version__}, onnxruntime {ort.__version__}, onnx {onnx.__version__}, "
          f"torch {torch.__version__}, numpy {np.__version__}")
    print(f"  threads    : {n} for both (tensoracle.cpu_threads() = {tensoracle.cpu_threads()}; onnxruntime "
          f"intra_op = {n}, inter_op = 1, ORT_SEQUENTIAL, ORT_ENABLE_ALL)")
    print(f"  timing     : warm-up {warmup}, >= {iterations} iterations and >= {min_seconds:g} s per peer, "
          f"{rounds} interleaved rounds")

    folder = pathlib.Path(tempfile.mkdtemp(prefix="bench-resnet18-"))
    weights = folder / "resnet18.safetensors"
    model = resnet18.save_weights(weights, args.seed)
    x = resnet18.images(BATCH, SIZE)

    t0 = time.perf_counter()
    engine = tensoracle.deserialize_engine(resnet18.build_engine(weights, SIZE, BATCH))
    t_build = time.perf_counter() - t0
    static_engine = None
    if not args.no_static:
        decl = tensoracle.EngineBuild({"images": tensoracle.InputShape.fixed((BATCH, 3, SIZE, SIZE))},
                                      tensoracle.BuilderSettings(device="cpu"))
        static_engine = tensoracle.deserialize_engine(
            tensoracle.build_serialized_engine(resnet18.graph(weights, SIZE, BATCH), decl))

    t0 = time.perf_counter()
    how = args.onnx
    if how == "export":
        try:
            model_bytes = onnx_exported(model, x)
        except Exception as e:  # noqa: BLE001  (exporter missing pieces: build the graph ourselves)
            print(f"  note: torch.onnx.export failed ({type(e).__name__}: {e}); building the ONNX model with onnx.helper")
            how = "helper"
    if how == "helper":
        model_bytes = onnx_from_weights(weights)
    shutil.rmtree(folder, ignore_errors=True)  # the engines and the ONNX model hold their own weights
    session = ort_session(model_bytes, n)
    t_ort = time.perf_counter() - t0
    ops = [node.op_type for node in onnx.load_from_string(model_bytes).graph.node]
    counts = ", ".join(f"{op} x{ops.count(op)}" for op in dict.fromkeys(ops))

    print()
    fused = sum(1 for layer in engine.layers() if layer.fused)
    print(f"tensoracle engine (batch 1..{BATCH}): built in {t_build:.2f} s, {len(engine.layers())} nodes "
          f"({fused} with fused layers); activation memory {engine.activation_bytes / 2**20:.1f} MiB "
          f"(naive {engine.naive_activation_bytes / 2**20:.1f} MiB)")
    if static_engine is not None:
        print(f"tensoracle engine (static batch {BATCH}): {len(static_engine.layers())} nodes "
              f"({sum(1 for layer in static_engine.layers() if layer.fused)} with fused layers)")
    print(f"onnxruntime session: ONNX from {'torch.onnx.export' if how == 'export' else 'onnx.helper'} "
          f"({counts}), created in {t_ort:.2f} s")

    # ---- bindings and correctness
    x_b = np.ascontiguousarray(x)
    outputs = {}
    peers = []
    for label, e in (("tensoracle  enqueue, batch 1..8 engine", engine),
                     ("tensoracle  enqueue, static batch 8", static_engine)):
        if e is None:
            continue
        ex = e.create_execution()
        ex.set_input_shape("images", x_b.shape)
        y = np.zeros((BATCH, resnet18.CLASSES), dtype=np.float32)
        ex.set_tensor_address("images", x_b.ctypes.data)
        ex.set_tensor_address("logits", y.ctypes.data)
        ex.enqueue()
        outputs[label] = y
        peers.append(Peer(label, ex.enqueue))
    x_o = ort.OrtValue.ortvalue_from_numpy(x_b.copy())
    y_ort = np.zeros((BATCH, resnet18.CLASSES), dtype=np.float32)
    y_o = ort.OrtValue.ortvalue_from_numpy(y_ort)
    binding = session.io_binding()
    binding.bind_ortvalue_input("images", x_o)
    binding.bind_ortvalue_output("logits", y_o)
    run_opts = ort.RunOptions()
    ort_peer = Peer("onnxruntime run_with_iobinding", lambda: session.run_with_iobinding(binding, run_opts))
    ort_peer.fn()
    peers.insert(1, ort_peer)

    expected = resnet18.torch_logits(model, x)
    exact = resnet18.float64_logits(model, x)
    ta = outputs["tensoracle  enqueue, batch 1..8 engine"]
    err_peers = float(np.max(np.abs(ta.astype(np.float64) - y_ort)))
    print()
    print(f"agreement (logits: std {np.std(expected):.3f}, max |.| {np.max(np.abs(expected)):.3f}):")
    print(f"  max |tensoracle - onnxruntime|  = {err_peers:.3e}")
    for label, y in list(outputs.items()) + [("onnxruntime", y_ort)]:
        print(f"  {label:38s} vs PyTorch fp32 {resnet18.errors(y, expected)[0]:.3e}, "
              f"vs float64 {resnet18.errors(y, exact)[0]:.3e} (max abs)")
    print(f"  PyTorch fp32 vs float64 {resnet18.errors(expected, exact)[0]:.3e}")
    bad = []
    if not all(np.all(np.isfinite(y)) for y in list(outputs.values()) + [y_ort]):
        bad.append("non-finite outputs")
    if not err_peers <= MAX_ABS_ERROR:
        bad.append(f"tensoracle and onnxruntime differ by {err_peers:.3e}")
    for label, y in outputs.items():
        if not resnet18.errors(y, expected)[0] <= MAX_ABS_ERROR:
            bad.append(f"{label} differs from PyTorch by {resnet18.errors(y, expected)[0]:.3e}")
    if bad:
        print("FAIL: " + "; ".join(bad), file=sys.stderr)
        return 1

    # ---- timing
    bench(peers, warmup, iterations, rounds, min_seconds)
    print()
    print(f"timings, {n} thread(s) (ms per forward pass of batch {BATCH}; cpu/wall ~ {n} when all threads work):")
    print(f"  {'':38s} {'median':>8s} {'p90':>8s} {'min':>8s} {'GMAC/s':>7s} {'iters':>6s} {'cpu/wall':>8s}"
          f"   per-round medians")
    for p in peers:
        med = p.median_ms()
        print(f"  {p.name:38s} {med:8.2f} {p.p90_ms():8.2f} {min(p.samples) / 1e6:8.2f} {macs / med / 1e6:7.1f} "
              f"{len(p.samples):6d} {p.cpu_s / max(p.wall_s, 1e-9):8.2f}   "
              + " ".join(f"{m:.1f}" for m in p.round_medians))
    ratio = peers[0].median_ms() / ort_peer.median_ms()
    verdict = "MEETS" if ratio <= TARGET_RATIO else "MISSES"
    print()
    print(f"ratio tensoracle / onnxruntime (median, batch 1..8 engine): {ratio:.2f}x, target <= {TARGET_RATIO}x: "
          f"{verdict}")
    if len(peers) > 2:
        print(f"  static-batch engine: {peers[2].median_ms() / ort_peer.median_ms():.2f}x")
    print(f"machine load at the end: {load_line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
