#!/usr/bin/env python3
"""Benchmark: a 4-layer MLP on the CPU, tensoracle against onnxruntime (CPUExecutionProvider).

The model: x (64 x 1024, float32) -> 4 x [MatMul with a 1024 x 1024 weight, + bias (1 x 1024),
GELU (erf)]. Both peers get the same random weights (fixed seed) and the same thread count:

  tensoracle   set_cpu_threads(n); the network built with tensoracle.trt's names and
               build_serialized_engine(device="cpu"), then deserialize_engine(bytes).
               Timed: execution.enqueue() on buffers bound once (set_tensor_address on
               preallocated NumPy arrays). Secondary: execution.run({"x": x}).
  onnxruntime  the same model built with onnx.helper (MatMul, Add, Gelu from opset 20;
               Erf-based GELU if Gelu does not load), intra_op_num_threads = n,
               inter_op_num_threads = 1, ORT_ENABLE_ALL. Timed: run_with_iobinding on
               pre-bound CPU OrtValues. Secondary: session.run.

After a warm-up, every peer is timed in several interleaved rounds (the order rotates each
round) to spread drift evenly; the table gives the median and p90 per iteration over all
rounds. The outputs must agree (max abs error <= 1e-3), else the script exits with status 1.
A reference section (skip it with --no-reference) times bare GEMMs of the same shape (the
OpenBLAS tensoracle links and numpy's own, through ctypes; onnxruntime MatMul-only) and engines
made of parts of the MLP (MatMul only, MatMul + bias), and splits tensoracle's time into GEMM,
dispatch, bias and GELU. The header prints the load average and CPU pressure: on a shared
machine other processes' work skews multi-threaded timings most.

    python python/bench/bench_mlp.py                 # the full run (n = os.cpu_count())
    python python/bench/bench_mlp.py --quick         # a smoke test
    python python/bench/bench_mlp.py --threads 1 --iterations 500
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import math
import os
import platform
import sys
import tempfile
import time
from typing import Callable

# The threading variables as the user set them, before any import: importing tensoracle sets
# OMP_WAIT_POLICY=PASSIVE and GOMP_SPINCOUNT=2000 (unless the user set a policy) so that its
# libgomp workers spin only briefly before they sleep.
ENV_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_WAIT_POLICY",
            "GOMP_SPINCOUNT")
ENV_AT_START = {k: os.environ.get(k) for k in ENV_VARS}

import numpy as np  # noqa: E402

# tensoracle first: its OpenMP runtime (libgomp) is then initialised with tensoracle's default
# wait policy (passive: see tensoracle/__init__.py).
import tensoracle  # noqa: I001, E402
from bench_common import cpu_model, load_line  # noqa: E402
import tensoracle.trt as trt  # noqa: E402

import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

BATCH = 64
WIDTH = 1024
LAYERS = 4
TARGET_RATIO = 1.2  # tensoracle / onnxruntime, on the median of the primary lines
MAX_ABS_ERROR = 1e-3
FLOPS = LAYERS * 2 * BATCH * WIDTH * WIDTH  # GEMM flops per forward pass (pointwise ignored)


# ----------------------------------------------------------------------------------------
# the machine


def usable_cpus() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


class OpenBlas:
    """ctypes access to one loaded OpenBLAS (its name, thread count and sgemm)."""

    def __init__(self, lib: ctypes.CDLL, where: str, prefix: str = "", suffix: str = "", int64: bool = False):
        self.lib = lib
        self.where = where  # which file holds it
        self._p, self._s = prefix, suffix
        self.int_t = ctypes.c_int64 if int64 else ctypes.c_int

    def _fn(self, name: str):
        return getattr(self.lib, f"{self._p}{name}{self._s}")

    def _str(self, *names: str) -> str | None:
        for name in names:
            try:
                f = self._fn(name)
            except AttributeError:
                continue
            f.restype = ctypes.c_char_p
            return f().decode()
        return None

    def corename(self) -> str:
        return self._str("openblas_get_corename", "gotoblas_corename") or "?"

    def config(self) -> str:
        config = self._str("openblas_get_config")
        if config is None:  # not exported (a static OpenBLAS inside another library)
            config = "OpenBLAS (version not exported)"
        try:
            f = self._fn("openblas_get_parallel")
            f.restype = ctypes.c_int
            config += ", threading " + {0: "sequential", 1: "pthreads", 2: "OpenMP"}.get(f(), "?")
        except AttributeError:
            pass
        return config

    def num_threads(self) -> int:
        f = self._fn("openblas_get_num_threads")
        f.restype = ctypes.c_int
        return int(f())

    def set_num_threads(self, n: int) -> None:
        f = self._fn("openblas_set_num_threads")
        f.argtypes = [ctypes.c_int]
        f.restype = None
        f(n)

    def sgemm_rowmajor(self) -> Callable[[np.ndarray, np.ndarray, np.ndarray], None]:
        """C = A x B (row-major, float32, no transposes) through cblas_sgemm."""
        f = self._fn("cblas_sgemm")
        it = self.int_t
        f.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, it, it, it, ctypes.c_float, ctypes.c_void_p, it,
                      ctypes.c_void_p, it, ctypes.c_float, ctypes.c_void_p, it]
        f.restype = None
        row_major, no_trans = 101, 111

        def call(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
            m, k = a.shape
            n = b.shape[1]
            f(row_major, no_trans, no_trans, m, n, k, 1.0, a.ctypes.data, k, b.ctypes.data, n, 0.0, c.ctypes.data, n)

        return call


def tensoracle_openblas() -> OpenBlas | None:
    """The OpenBLAS tensoracle's GEMMs run on: linked into the extension itself (static), else the
    shared libopenblas it loaded (dlopen of a loaded library returns that same copy)."""
    native = sys.modules["tensoracle._native"].__file__
    try:
        lib = ctypes.CDLL(native)
        lib.cblas_sgemm, lib.openblas_get_num_threads  # noqa: B018  (exported by a static OpenBLAS)
        return OpenBlas(lib, f"static in {os.path.basename(native)}")
    except (OSError, AttributeError):
        pass
    names = []
    try:
        with open("/proc/self/maps") as f:
            names = sorted({line.split()[-1] for line in f if "libopenblas" in line and "scipy" not in line})
    except OSError:
        pass
    for name in names:
        try:
            ob = OpenBlas(ctypes.CDLL(name), name)
            ob.num_threads()
            return ob
        except (OSError, AttributeError):
            continue
    return None


def numpy_openblas() -> OpenBlas | None:
    """numpy's bundled scipy-openblas (64-bit integers, scipy_ prefix, 64_ suffix)."""
    libdir = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    for path in glob.glob(os.path.join(libdir, "*openblas*")):
        try:
            ob = OpenBlas(ctypes.CDLL(path), os.path.basename(path), prefix="scipy_", suffix="64_", int64=True)
            ob.corename()
            return ob
        except (OSError, AttributeError):
            continue
    return None


# ----------------------------------------------------------------------------------------
# the model


def make_weights(seed: int) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((BATCH, WIDTH), dtype=np.float32)
    scale = np.float32(math.sqrt(2.0 / WIDTH))  # keeps activations O(1) through the GELUs
    ws = [(rng.standard_normal((WIDTH, WIDTH), dtype=np.float32) * scale) for _ in range(LAYERS)]
    bs = [(rng.standard_normal((1, WIDTH), dtype=np.float32) * np.float32(0.1)) for _ in range(LAYERS)]
    return x, ws, bs


def reference_f64(x: np.ndarray, ws: list[np.ndarray], bs: list[np.ndarray]) -> np.ndarray:
    erf = np.frompyfunc(math.erf, 1, 1)
    h = x.astype(np.float64)
    for w, b in zip(ws, bs):
        z = h @ w.astype(np.float64) + b.astype(np.float64)
        h = 0.5 * z * (1.0 + erf(z / math.sqrt(2.0)).astype(np.float64))
    return h


def tensoracle_graph(ws: list[np.ndarray], bs: list[np.ndarray], bias: bool = True, gelu: bool = True):
    """The MLP as a graph function over tensoracle.trt's names (bias / gelu off: parts of it)."""

    def graph(network):
        h = network.add_input("x", trt.float32, (BATCH, WIDTH))
        for i, (w, b) in enumerate(zip(ws, bs)):
            wt = network.add_constant((WIDTH, WIDTH), w).get_output(0)
            mm = network.add_matrix_multiply(h, trt.MatrixOperation.NONE, wt, trt.MatrixOperation.NONE)
            mm.name = f"fc{i}"
            h = mm.get_output(0)
            if bias:
                bt = network.add_constant((1, WIDTH), b).get_output(0)
                add = network.add_elementwise(h, bt, trt.ElementWiseOperation.SUM)
                add.name = f"fc{i}_bias"
                h = add.get_output(0)
            if gelu:
                act = network.add_activation(h, trt.ActivationType.GELU_ERF)
                act.name = f"fc{i}_gelu"
                h = act.get_output(0)
        h.name = "y"
        network.mark_output(h)

    return graph


def tensoracle_engine(graph):
    build = tensoracle.EngineBuild({"x": tensoracle.InputShape.fixed((BATCH, WIDTH))},
                                   tensoracle.BuilderSettings(device="cpu"))
    engine_bytes = tensoracle.build_serialized_engine(graph, build)
    return engine_bytes, tensoracle.deserialize_engine(engine_bytes)


def ort_iobinding(session: ort.InferenceSession, x: np.ndarray, y: np.ndarray, keep: list):
    """run_with_iobinding on CPU OrtValues over x and y (kept alive in `keep`)."""
    x_o = ort.OrtValue.ortvalue_from_numpy(x)
    y_o = ort.OrtValue.ortvalue_from_numpy(y)
    io = session.io_binding()
    io.bind_ortvalue_input("x", x_o)
    io.bind_ortvalue_output("y", y_o)
    keep += [x, y, x_o, y_o, io]
    run_opts = ort.RunOptions()
    return lambda: session.run_with_iobinding(io, run_opts)


def onnx_model(ws: list[np.ndarray], bs: list[np.ndarray], gelu_op: bool, matmul_only: bool = False) -> bytes:
    nodes, inits = [], []
    h = "x"
    for i, (w, b) in enumerate(zip(ws, bs)):
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [h, f"w{i}"], [f"mm{i}"], name=f"fc{i}"))
        h = f"mm{i}"
        if matmul_only:
            continue
        inits.append(numpy_helper.from_array(b, f"b{i}"))
        nodes.append(helper.make_node("Add", [h, f"b{i}"], [f"z{i}"], name=f"fc{i}_bias"))
        z = f"z{i}"
        if gelu_op:
            nodes.append(helper.make_node("Gelu", [z], [f"h{i}"], name=f"fc{i}_gelu", approximate="none"))
        else:  # 0.5 * z * (1 + erf(z / sqrt(2)))
            if i == 0:
                for name, v in (("c_rsqrt2", 1.0 / math.sqrt(2.0)), ("c_one", 1.0), ("c_half", 0.5)):
                    inits.append(numpy_helper.from_array(np.array(v, dtype=np.float32), name))
            nodes += [
                helper.make_node("Mul", [z, "c_rsqrt2"], [f"s{i}"]),
                helper.make_node("Erf", [f"s{i}"], [f"e{i}"]),
                helper.make_node("Add", [f"e{i}", "c_one"], [f"p{i}"]),
                helper.make_node("Mul", [z, f"p{i}"], [f"q{i}"]),
                helper.make_node("Mul", [f"q{i}", "c_half"], [f"h{i}"]),
            ]
        h = f"h{i}"
    nodes.append(helper.make_node("Identity", [h], ["y"]))
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [BATCH, WIDTH])],
        initializer=inits,
    )
    opsets = [helper.make_opsetid("", 20)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="bench_mlp",
                              ir_version=helper.find_min_ir_version_for(opsets))
    onnx.checker.check_model(model, full_check=True)
    return model.SerializeToString()


def ort_session(model: bytes, threads: int, optimized_path: str | None = None,
                quiet: bool = False) -> ort.InferenceSession:
    so = ort.SessionOptions()
    if quiet:
        so.log_severity_level = 3  # errors only (saving an optimized model warns)
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if optimized_path:
        so.optimized_model_filepath = optimized_path
    return ort.InferenceSession(model, sess_options=so, providers=["CPUExecutionProvider"])


def optimized_ops(path: str) -> str:
    try:
        m = onnx.load(path)
    except Exception as e:  # noqa: BLE001
        return f"(could not read the optimized model: {e})"
    return " -> ".join(f"{n.op_type}" + (f"[{n.domain}]" if n.domain else "") for n in m.graph.node)


# ----------------------------------------------------------------------------------------
# timing


class Peer:
    def __init__(self, name: str, fn: Callable[[], object]):
        self.name = name
        self.fn = fn
        self.samples: list[int] = []  # ns per iteration
        self.cpu_s = 0.0
        self.wall_s = 0.0
        self.round_medians: list[float] = []

    def run_round(self, iterations: int, min_seconds: float) -> None:
        fn, clock = self.fn, time.perf_counter_ns
        out = []
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

    def min_ms(self) -> float:
        return min(self.samples) / 1e6


def bench(peers: list[Peer], warmup: int, iterations: int, rounds: int, min_seconds: float) -> None:
    for p in peers:
        for _ in range(warmup):
            p.fn()
    per_round = max(1, math.ceil(iterations / rounds))
    for r in range(rounds):
        k = r % len(peers)  # rotate the order so no peer always runs first
        for p in peers[k:] + peers[:k]:
            p.run_round(per_round, min_seconds / rounds)


def table(peers: list[Peer]) -> None:
    print(f"  {'(ms per forward pass)':36s} {'median':>8s} {'p90':>8s} {'min':>8s} {'GFLOP/s':>8s} {'iters':>6s} "
          f"{'cpu/wall':>8s}   per-round medians")
    for p in peers:
        med = p.median_ms()
        rounds = " ".join(f"{m:.3f}" for m in p.round_medians)
        print(f"  {p.name:36s} {med:8.3f} {p.p90_ms():8.3f} {p.min_ms():8.3f} {FLOPS / med / 1e6:8.1f} "
              f"{len(p.samples):6d} {p.cpu_s / p.wall_s:8.2f}   {rounds}")


# ----------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="threads for both peers (default: os.cpu_count())")
    ap.add_argument("--iterations", type=int, default=None,
                    help="timed iterations per peer, over all rounds (default 400; --quick: 20)")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 8; --quick: 2)")
    ap.add_argument("--min-seconds", type=float, default=None,
                    help="at least this much timed wall time per primary peer (default 3; --quick: 0)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up iterations per peer (default 20; --quick: 3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="a few iterations only (smoke test)")
    ap.add_argument("--no-reference", action="store_true", help="skip the bare-GEMM reference section")
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # keep order with onnxruntime's stderr
    q = args.quick
    iterations = args.iterations if args.iterations is not None else (20 if q else 400)
    rounds = args.rounds if args.rounds is not None else (2 if q else 8)
    min_seconds = args.min_seconds if args.min_seconds is not None else (0.0 if q else 3.0)
    warmup = args.warmup if args.warmup is not None else (3 if q else 20)
    n = args.threads
    if n < 1:
        raise SystemExit("--threads must be >= 1")

    tensoracle.set_cpu_threads(n)
    sys_blas = tensoracle_openblas()
    np_blas = numpy_openblas()

    # ---- header
    print("bench_mlp: 4-layer MLP (MatMul 1024x1024 + bias + GELU-erf), batch 64, float32, CPU")
    print(f"  machine      : {platform.node()}, {platform.machine()}, nproc (os.cpu_count) = {os.cpu_count()}, "
          f"usable (affinity) = {usable_cpus()}")
    print(f"  cpu          : {cpu_model()}")
    print(f"  python       : {platform.python_version()}")
    print(f"  load         : {load_line()} (at the start; other processes skew the timings)")
    print(f"  versions     : tensoracle {tensoracle.__version__}, onnxruntime {ort.__version__}, onnx {onnx.__version__}, "
          f"numpy {np.__version__}")
    for var in ENV_VARS:
        before, now = ENV_AT_START[var], os.environ.get(var)
        line = f"set to {before!r}" if before is not None else "not set"
        if now != before:
            line += f" by the user, {now!r} after importing tensoracle"
        print(f"  env {var:20s}: {line}")
    print(f"  threads      : {n} for both (tensoracle.cpu_threads() = {tensoracle.cpu_threads()}; "
          f"onnxruntime intra_op = {n}, inter_op = 1, ORT_ENABLE_ALL)")
    if sys_blas:
        print(f"  tensoracle's OpenBLAS : {sys_blas.config()} | core {sys_blas.corename()} | "
              f"threads {sys_blas.num_threads()} | {sys_blas.where}")
    if np_blas:
        print(f"  numpy's OpenBLAS      : {np_blas.config()} | core {np_blas.corename()} | "
              f"threads {np_blas.num_threads()} | {np_blas.where}")
    print(f"  timing       : warm-up {warmup}, >= {iterations} iterations and >= {min_seconds:g} s per peer, "
          f"in {rounds} interleaved rounds")

    # ---- models
    x, ws, bs = make_weights(args.seed)

    t0 = time.perf_counter()
    engine_bytes, engine = tensoracle_engine(tensoracle_graph(ws, bs))
    t_build = time.perf_counter() - t0
    execution = engine.create_execution()

    gelu = "Gelu (opset 20)"
    t0 = time.perf_counter()
    try:
        model = onnx_model(ws, bs, gelu_op=True)
        session = ort_session(model, n)
        session.run(["y"], {"x": x})
    except Exception as e:  # noqa: BLE001  (Gelu missing in this onnx/onnxruntime: fall back to Erf)
        print(f"  note: Gelu opset 20 did not run ({type(e).__name__}: {e}); using the Erf-based GELU")
        gelu = "Erf-based GELU"
        model = onnx_model(ws, bs, gelu_op=False)
        session = ort_session(model, n)
    t_ort = time.perf_counter() - t0
    # What ORT's optimizer made of the graph: a separate, quiet session writes it out.
    with tempfile.TemporaryDirectory(prefix="bench_mlp_") as tmp:
        opt_path = os.path.join(tmp, "optimized.onnx")
        ort_session(model, n, opt_path, quiet=True)
        ort_graph = optimized_ops(opt_path)

    print()
    print(f"tensoracle engine: {len(engine_bytes) / 2**20:.2f} MiB, built + opened in {t_build:.2f} s; "
          f"weights {engine.weight_bytes / 2**20:.2f} MiB")
    print(f"  activation memory: peak {engine.activation_bytes / 1024:.0f} KiB (arena) vs naive sum "
          f"{engine.naive_activation_bytes / 1024:.0f} KiB "
          f"({engine.activation_bytes / max(1, engine.naive_activation_bytes):.0%})")
    print("  layers after fusion:")
    for layer in engine.layers():
        fused = f" + fused [{', '.join(layer.fused)}]" if layer.fused else ""
        print(f"    {layer.name:10s} {layer.type:16s} tactic {layer.tactic:18s}{fused}")
    print(f"onnxruntime session: {gelu}, created in {t_ort:.2f} s; optimized graph: {ort_graph}")

    # ---- bindings
    x_t = np.ascontiguousarray(x)
    y_t = np.zeros((BATCH, WIDTH), dtype=np.float32)

    def bind_tensoracle() -> None:  # execution.run rebinds the addresses: bind ours again after it
        execution.set_tensor_address("x", x_t.ctypes.data)
        execution.set_tensor_address("y", y_t.ctypes.data)

    bind_tensoracle()

    keep: list = []
    y_o_np = np.zeros((BATCH, WIDTH), dtype=np.float32)
    ort_bound = ort_iobinding(session, x.copy(), y_o_np, keep)

    # ---- correctness
    execution.enqueue()
    ort_bound()
    y_run = execution.run({"x": x})["y"]
    bind_tensoracle()
    y_plain = session.run(["y"], {"x": x})[0]
    ref = reference_f64(x, ws, bs)
    err = float(np.max(np.abs(y_t - y_o_np)))
    print()
    print(f"agreement: max |tensoracle - onnxruntime| = {err:.3e} (limit {MAX_ABS_ERROR:g}); vs float64 reference: "
          f"tensoracle {np.max(np.abs(y_t - ref)):.3e}, onnxruntime {np.max(np.abs(y_o_np - ref)):.3e}; "
          f"output max |y| = {np.max(np.abs(ref)):.2f}")
    bad = []
    if not np.all(np.isfinite(y_t)) or not np.all(np.isfinite(y_o_np)):
        bad.append("non-finite outputs")
    if not err <= MAX_ABS_ERROR:
        bad.append(f"tensoracle and onnxruntime differ by {err:.3e}")
    if not np.array_equal(y_run, y_t):
        bad.append(f"execution.run differs from enqueue by {np.max(np.abs(y_run - y_t)):.3e}")
    if not np.max(np.abs(y_plain - y_o_np)) <= MAX_ABS_ERROR:
        bad.append("session.run differs from run_with_iobinding")
    if bad:
        print("FAIL: " + "; ".join(bad), file=sys.stderr)
        return 1

    # ---- timing
    def ta_run() -> None:
        execution.run({"x": x_t})

    def ort_run() -> None:
        session.run(["y"], {"x": x})

    primary = [
        Peer("tensoracle  enqueue (bound)", execution.enqueue),
        Peer("onnxruntime run_with_iobinding", ort_bound),
    ]
    secondary = [
        Peer("tensoracle  execution.run", ta_run),
        Peer("onnxruntime session.run", ort_run),
    ]
    bench(primary, warmup, iterations, rounds, min_seconds)
    bench(secondary, warmup, max(1, iterations // 2), rounds, min_seconds / 3)
    bind_tensoracle()

    print()
    print(f"timings ({FLOPS / 1e6:.0f} MFLOP of GEMM per pass), {n} thread(s); cpu/wall = process CPU time / wall "
          f"time while timing (~{n} when all threads run):")
    table(primary + secondary)
    ratio = primary[0].median_ms() / primary[1].median_ms()
    ratio_p90 = primary[0].p90_ms() / primary[1].p90_ms()
    ratio2 = secondary[0].median_ms() / secondary[1].median_ms()
    verdict = "MEETS" if ratio <= TARGET_RATIO else "MISSES"
    print()
    print(f"ratio tensoracle / onnxruntime (median, enqueue vs iobinding): {ratio:.2f}x  (p90: {ratio_p90:.2f}x; "
          f"run vs session.run: {ratio2:.2f}x)  target <= {TARGET_RATIO}x: {verdict}")

    # ---- reference: where the time goes (bare GEMMs of the same shape, parts of the engine)
    if not args.no_reference:
        refs = []
        a = np.ascontiguousarray(x)
        cs = [np.empty((BATCH, WIDTH), dtype=np.float32) for _ in range(LAYERS)]

        def chain(gemm: Callable[[np.ndarray, np.ndarray, np.ndarray], None]) -> Callable[[], None]:
            def f() -> None:
                h = a
                for w, c in zip(ws, cs):
                    gemm(h, w, c)
                    h = c
            return f

        if sys_blas:
            refs.append(Peer("cblas_sgemm x4, tensoracle's BLAS", chain(sys_blas.sgemm_rowmajor())))
        if np_blas:  # numpy's OpenBLAS starts with all cores: give it the same n
            np_blas.set_num_threads(n)
            refs.append(Peer("cblas_sgemm x4, numpy's BLAS", chain(np_blas.sgemm_rowmajor())))
        mm_sess = ort_session(onnx_model(ws, bs, gelu_op=True, matmul_only=True), n)
        ort_mm = Peer("onnxruntime MatMul x4", ort_iobinding(mm_sess, x.copy(), np.zeros_like(x), keep))
        refs.append(ort_mm)
        parts = {}
        for label, kw in (("MatMul x4", dict(bias=False, gelu=False)), ("MatMul+bias x4", dict(gelu=False))):
            _, e = tensoracle_engine(tensoracle_graph(ws, bs, **kw))
            ex = e.create_execution()
            y_p = np.zeros_like(x)
            ex.set_tensor_address("x", x_t.ctypes.data)
            ex.set_tensor_address("y", y_p.ctypes.data)
            keep += [e, ex, y_p]
            parts[label] = Peer(f"tensoracle  {label} (engine)", ex.enqueue)
            refs.append(parts[label])
        full = Peer("tensoracle  full MLP (again)", execution.enqueue)
        refs.append(full)
        bench(refs, warmup, max(1, iterations // 2), rounds, min_seconds / 2)
        print()
        print(f"reference: bare GEMMs (4 x [64x1024] @ [1024x1024]) and parts of the tensoracle engine, {n} thread(s); "
              "ctypes adds ~µs per call:")
        table(refs)
        mm, mmb, fl = parts["MatMul x4"].median_ms(), parts["MatMul+bias x4"].median_ms(), full.median_ms()
        print("  where tensoracle's time goes (differences of medians, ms per forward pass):")
        if sys_blas:
            g = refs[0].median_ms()
            print(f"    GEMMs in its OpenBLAS (bare cblas)           {g:8.3f}   (onnxruntime's MLAS MatMul x4: "
                  f"{ort_mm.median_ms():.3f})")
            print(f"    engine dispatch around the GEMMs             {mm - g:8.3f}   (MatMul-only engine - bare cblas)")
        print(f"    bias epilogue passes                         {mmb - mm:8.3f}   (MatMul+bias engine - MatMul-only)")
        print(f"    GELU epilogue passes                         {fl - mmb:8.3f}   (full - MatMul+bias)")
        if sys_blas:
            print(f"  OpenBLAS threads after the run: tensoracle's {sys_blas.num_threads()}"
                  + (f", numpy's {np_blas.num_threads()}" if np_blas else ""))

    print()
    print(f"machine load at the end: {load_line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
