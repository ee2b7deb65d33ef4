"""Helpers for test_layers.py: building and running one-network engines, type tables, float64
references rounded to tensoracle's types, and comparisons with ulp slack.

The rounding reference (`round_to`) is written from the IEEE definition (round to nearest,
ties to even, on the float64 value) rather than borrowed from NumPy/ml_dtypes casts, so it is a
single rounding whatever the source: no double rounding through float32.
"""

from __future__ import annotations

import faulthandler
import math
import os
import pathlib
import platform
import zlib
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import pytest

import tensoracle
import tensoracle.trt as trt

@pytest.fixture(autouse=True)
def watchdog():
    """For the test modules that import it: a kernel that never returns would hang the whole
    run, so after 120 s the stacks are dumped and the process exits instead."""
    faulthandler.dump_traceback_later(120, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


# ---- types ------------------------------------------------------------------------------

BF16 = np.dtype(ml_dtypes.bfloat16)
FP8 = np.dtype(ml_dtypes.float8_e4m3fn)

# (trt type, NumPy dtype, short name used in test ids)
TYPES = [
    (trt.float32, np.dtype(np.float32), "f32"),
    (trt.float16, np.dtype(np.float16), "f16"),
    (trt.bfloat16, BF16, "bf16"),
    (trt.fp8, FP8, "fp8"),
    (trt.int8, np.dtype(np.int8), "i8"),
    (trt.int32, np.dtype(np.int32), "i32"),
    (trt.int64, np.dtype(np.int64), "i64"),
    (trt.uint8, np.dtype(np.uint8), "u8"),
    (trt.bool, np.dtype(np.bool_), "bool"),
]
NP_OF = {name: dt for _, dt, name in TYPES}
TRT_OF = {name: t for t, _, name in TYPES}
ALL_TYPES = [name for _, _, name in TYPES]
FLOATS = ["f32", "f16", "bf16"]
INTS = ["i32", "i64"]
CAST_TYPES = ["f32", "f16", "bf16", "i8", "i32", "i64", "u8", "bool"]


def trt_type_of(dtype) -> "trt.DataType":
    dtype = np.dtype(dtype)
    for t, dt, _ in TYPES:
        if dt == dtype:
            return t
    raise KeyError(f"no tensoracle type for {dtype}")


def is_float_name(name: str) -> bool:
    return name in ("f32", "f16", "bf16", "fp8")


@dataclass(frozen=True)
class FloatFormat:
    precision: int  # significant bits, the implicit one included
    emin: int  # exponent of the smallest normal number
    max_finite: float
    has_inf: bool = True


FORMATS = {
    "f32": FloatFormat(24, -126, float(np.finfo(np.float32).max)),
    "f16": FloatFormat(11, -14, 65504.0),
    "bf16": FloatFormat(8, -126, float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)),
    "fp8": FloatFormat(4, -6, 448.0, has_inf=False),
}

INT_RANGE = {
    "i8": (-(2**7), 2**7 - 1),
    "i32": (-(2**31), 2**31 - 1),
    "i64": (-(2**63), 2**63 - 1),
    "u8": (0, 255),
}

# ---- rounding references ----------------------------------------------------------------


def round_to(x, name: str) -> np.ndarray:
    """float64 values rounded once to the float format `name` (nearest, ties to even); overflow
    gives +-inf (NaN for fp8, which has no infinity). Returns float64."""
    fmt = FORMATS[name]
    x = np.asarray(x, dtype=np.float64)
    out = x.copy()
    finite = np.isfinite(x)
    ax = np.abs(x[finite])
    _, e = np.frexp(ax)  # ax = m * 2**e, m in [0.5, 1)
    k = np.maximum(e - 1, fmt.emin)
    quantum = np.ldexp(1.0, k - (fmt.precision - 1))
    r = np.rint(ax / quantum) * quantum
    r = np.where(r > fmt.max_finite, np.inf if fmt.has_inf else np.nan, r)
    out[finite] = np.copysign(r, x[finite])
    if not fmt.has_inf:
        out[np.isinf(x)] = np.nan
    return out


def ulp_of(v, name: str) -> np.ndarray:
    """The spacing of format `name` at the (finite, representable) float64 values v."""
    fmt = FORMATS[name]
    v = np.abs(np.asarray(v, dtype=np.float64))
    _, e = np.frexp(v)
    k = np.maximum(e - 1, fmt.emin)
    return np.ldexp(1.0, k - (fmt.precision - 1))


def round_int_to(i: int, name: str) -> float:
    """An exact Python int rounded once to float format `name` (nearest, ties to even)."""
    fmt = FORMATS[name]
    if i == 0:
        return 0.0
    a = abs(i)
    bits = a.bit_length()
    if bits > fmt.precision:
        shift = bits - fmt.precision
        q, rem = divmod(a, 1 << shift)
        half = 1 << (shift - 1)
        if rem > half or (rem == half and q & 1):
            q += 1
        a = q << shift
    r = float(a) if a <= fmt.max_finite else (math.inf if fmt.has_inf else math.nan)
    return -r if i < 0 else r


def wrap_int(v: int, name: str) -> int:
    """Two's complement wraparound of an exact int into integer type `name`."""
    lo, hi = INT_RANGE[name]
    span = hi - lo + 1
    return (v - lo) % span + lo


def as_type(values64, name: str) -> np.ndarray:
    """Exactly representable float64 values stored in type `name` (no further rounding)."""
    return np.asarray(values64, dtype=np.float64).astype(NP_OF[name])


def narrow(x, name: str) -> np.ndarray:
    """Test inputs: float64 values rounded (once) to type `name`."""
    if is_float_name(name):
        return as_type(round_to(x, name), name)
    return np.asarray(x).astype(NP_OF[name])


# ---- comparisons ------------------------------------------------------------------------


def assert_dtype_shape(actual: np.ndarray, name: str, shape) -> None:
    assert actual.dtype == NP_OF[name], f"dtype {actual.dtype}, expected {NP_OF[name]}"
    assert tuple(actual.shape) == tuple(shape), f"shape {actual.shape}, expected {tuple(shape)}"


def assert_float_close(actual, ref64, name: str, *, ulps: float = 0, atol=0.0, rtol=0.0, what: str = "") -> None:
    """`actual` (of float type `name`) against a float64 reference: the reference is rounded to
    `name`, and every element may differ from it by `ulps` ulps of `name` + atol + rtol*|ref|.
    NaN must match NaN; infinities must match exactly."""
    ref64 = np.broadcast_to(np.asarray(ref64, dtype=np.float64), np.shape(actual))
    assert_dtype_shape(np.asarray(actual), name, ref64.shape)
    got = np.asarray(actual).astype(np.float64)
    want = round_to(ref64, name)
    nan_got, nan_want = np.isnan(got), np.isnan(want)
    bad = nan_got != nan_want
    inf_want = np.isinf(want)
    bad |= inf_want & (got != want)
    fin = ~nan_want & ~inf_want
    with np.errstate(invalid="ignore"):
        tol = ulps * ulp_of(np.where(fin, want, 0), name) + np.broadcast_to(atol, want.shape) + rtol * np.abs(ref64)
        err = np.abs(got - want)
        bad |= fin & ~(err <= tol)
    if bad.any():
        idx = np.argwhere(bad)[:5]
        lines = [
            f"  at {tuple(int(i) for i in ix)}: got {got[tuple(ix)]!r}, expected {want[tuple(ix)]!r} "
            f"(exact {ref64[tuple(ix)]!r})"
            for ix in idx
        ]
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.size} elements differ beyond {ulps} ulp of {name}"
            f" + atol + rtol={rtol}:\n" + "\n".join(lines)
        )


def assert_exact(actual, expected, name: str, what: str = "") -> None:
    """Bit-for-bit on integers and bool; value-for-value (NaN == NaN) on floats."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert_dtype_shape(actual, name, expected.shape)
    if is_float_name(name):
        a, b = actual.astype(np.float64), expected.astype(np.float64)
        bad = ~((a == b) | (np.isnan(a) & np.isnan(b)))
    else:
        bad = actual != expected.astype(actual.dtype)
    if bad.any():
        idx = np.argwhere(bad)[:6]
        lines = [f"  at {tuple(int(i) for i in ix)}: got {actual[tuple(ix)]!r}, expected {expected[tuple(ix)]!r}" for ix in idx]
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.size} elements differ:\n" + "\n".join(lines))


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.view(np.uint8).tobytes() == b.view(np.uint8).tobytes()


# ---- building and running ---------------------------------------------------------------


def rng_for(*key) -> np.random.Generator:
    """A fixed seed per test case (stable across runs and test orderings)."""
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def build(graph, shapes: dict, device: str, **settings) -> tensoracle.Engine:
    """Engine of `graph` for `shapes` ({name: tuple (fixed) or InputShape}) on `device`."""
    inputs = {
        k: v if isinstance(v, tensoracle.InputShape) else tensoracle.InputShape.fixed(tuple(v)) for k, v in shapes.items()
    }
    decl = tensoracle.EngineBuild(inputs, tensoracle.BuilderSettings(device=device, **settings))
    return tensoracle.deserialize_engine(tensoracle.build_serialized_engine(graph, decl))


def run_network(device: str, inputs: dict, body, profile: dict | None = None, *, declare: dict | None = None):
    """Builds a network whose inputs are `inputs` ({name: array}, typed by the arrays, dims
    from `declare` or the arrays) and whose single output "y" is `body(network, tensors)`
    (a tensor or a layer); runs it once. Returns (output array, engine)."""

    def graph(network):
        tensors = {}
        for name, arr in inputs.items():
            dims = (declare or {}).get(name, arr.shape)
            tensors[name] = network.add_input(name, trt_type_of(arr.dtype), tuple(dims))
        y = body(network, tensors)
        if isinstance(y, trt.ILayer):
            y = y.get_output(0)
        y.name = "y"
        network.mark_output(y)

    shapes = profile or {name: arr.shape for name, arr in inputs.items()}
    engine = build(graph, shapes, device)
    out = engine.create_execution().run(inputs)
    assert set(out) == {"y"}, f"outputs {sorted(out)}"
    return out["y"], engine


def constant(network, array: np.ndarray):
    """add_constant of `array` (its dims and type); returns the tensor."""
    array = np.ascontiguousarray(array)
    return network.add_constant(tuple(array.shape), array).get_output(0)


# ---- elementwise references -------------------------------------------------------------

E = trt.ElementWiseOperation
COMPARISONS = ("EQUAL", "GREATER", "LESS")
ARITH = ["SUM", "PROD", "MAX", "MIN", "SUB", "DIV"]


def add_shuffle(network, x, first, reshape, second, zero_is_placeholder):
    """A shuffle of `x` with its transposes and reshape (None: left at the default)."""
    layer = network.add_shuffle(x)
    layer.zero_is_placeholder = zero_is_placeholder
    if first is not None:
        layer.first_transpose = first
    if reshape is not None:
        layer.reshape_dims = reshape
    if second is not None:
        layer.second_transpose = second
    return layer


def elementwise_ref(op: str, a: np.ndarray, b: np.ndarray, name: str):
    """The exact result: float64 for float types, exact (wrapped) integers for int types,
    bool for comparisons and logic."""
    a, b = np.broadcast_arrays(a, b)
    if name == "bool":
        fn = {"AND": np.logical_and, "OR": np.logical_or, "XOR": np.logical_xor, "EQUAL": np.equal}[op]
        return fn(a, b)
    if is_float_name(name):
        x, y = a.astype(np.float64), b.astype(np.float64)
        with np.errstate(all="ignore"):
            return {
                "SUM": lambda: x + y,
                "PROD": lambda: x * y,
                "MAX": lambda: np.maximum(x, y),
                "MIN": lambda: np.minimum(x, y),
                "SUB": lambda: x - y,
                "DIV": lambda: x / y,
                "POW": lambda: np.power(x, y),
                "FLOOR_DIV": lambda: np.floor(x / y),
                "EQUAL": lambda: x == y,
                "GREATER": lambda: x > y,
                "LESS": lambda: x < y,
            }[op]()

    def one(x: int, y: int):
        if op == "SUM":
            return x + y
        if op == "PROD":
            return x * y
        if op == "SUB":
            return x - y
        if op == "MAX":
            return max(x, y)
        if op == "MIN":
            return min(x, y)
        if op == "DIV":  # truncates toward zero; by zero gives 0
            return 0 if y == 0 else (abs(x) // abs(y)) * (1 if (x < 0) == (y < 0) else -1)
        if op == "FLOOR_DIV":
            return 0 if y == 0 else x // y
        if op == "EQUAL":
            return x == y
        if op == "GREATER":
            return x > y
        if op == "LESS":
            return x < y
        raise KeyError(op)

    flat = [one(int(x), int(y)) for x, y in zip(a.ravel().tolist(), b.ravel().tolist())]
    if op in COMPARISONS:
        return np.array(flat, dtype=bool).reshape(a.shape)
    return np.array([wrap_int(v, name) for v in flat], dtype=NP_OF[name]).reshape(a.shape)


# ---- activation references --------------------------------------------------------------

A = trt.ActivationType

_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def activation_ref(kind: str, x64: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    """TensorRT's activation formulas in float64 (alpha, beta as the float32 values stored)."""
    x = np.asarray(x64, dtype=np.float64)
    al, be = float(np.float32(alpha)), float(np.float32(beta))
    with np.errstate(all="ignore"):
        if kind == "RELU":
            return np.maximum(x, 0.0)
        if kind == "SIGMOID":
            ex = np.exp(-np.abs(x))
            return np.where(x >= 0, 1.0 / (1.0 + ex), ex / (1.0 + ex))
        if kind == "TANH":
            return np.tanh(x)
        if kind == "LEAKY_RELU":
            return np.where(x >= 0, x, al * x)
        if kind == "ELU":
            return np.where(x >= 0, x, al * np.expm1(np.minimum(x, 0)))
        if kind == "SELU":
            return be * np.where(x > 0, x, al * np.expm1(np.minimum(x, 0)))
        if kind == "SOFTSIGN":
            return x / (1.0 + np.abs(x))
        if kind == "SOFTPLUS":
            return al * np.logaddexp(0.0, be * x)
        if kind == "CLIP":
            return np.maximum(al, np.minimum(be, x))
        if kind == "HARD_SIGMOID":
            return np.clip(al * x + be, 0.0, 1.0)
        if kind == "SCALED_TANH":
            return al * np.tanh(be * x)
        if kind == "THRESHOLDED_RELU":
            return np.where(x > al, x, 0.0)
        if kind == "GELU_ERF":
            return 0.5 * x * _erfc(-x / math.sqrt(2.0))
        if kind == "GELU_TANH":
            u = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)
            return 0.5 * x * (1.0 + np.tanh(u))
    raise KeyError(kind)


# ---- matrix multiply reference ----------------------------------------------------------

M = trt.MatrixOperation


def matmul_operand_shape(op: str, batch: tuple, rows: int, cols: int, first: bool) -> tuple:
    """Stored dims of an operand whose (logical) matrix is rows x cols (a 1 x K row for a
    first VECTOR operand, a K x 1 column for a second one)."""
    if op == "VECTOR":
        return batch + ((cols,) if first else (rows,))
    if op == "TRANSPOSE":
        return batch + (cols, rows)
    return batch + (rows, cols)


def matmul_ref(a64: np.ndarray, op0: str, b64: np.ndarray, op1: str):
    """(product, scale): op0(a) x op1(b) in float64 with batch broadcasting, and the same
    product of absolute values (the magnitude the rounding errors are relative to)."""

    def mat(x, op, first):
        if op == "VECTOR":
            return x[..., None, :] if first else x[..., :, None]
        if op == "TRANSPOSE":
            return np.swapaxes(x, -1, -2)
        return x

    A_, B_ = mat(a64, op0, True), mat(b64, op1, False)
    c, s = np.matmul(A_, B_), np.matmul(np.abs(A_), np.abs(B_))
    if op0 == "VECTOR":
        c, s = c[..., 0, :], s[..., 0, :]
    if op1 == "VECTOR":
        c, s = c[..., 0], s[..., 0]
    return c, s


# ---- quantize references ----------------------------------------------------------------


def channel_scales(scale: np.ndarray, shape: tuple, axis: int) -> np.ndarray:
    """The scale broadcast against a tensor of `shape` (per tensor or along `axis`)."""
    scale = np.asarray(scale)
    if scale.size == 1:
        return scale.reshape(())
    axis = axis % len(shape)
    view = [1] * len(shape)
    view[axis] = scale.size
    return scale.reshape(view)


def quantize_ref(x: np.ndarray, scale: np.ndarray, to: str, axis: int = 1) -> np.ndarray:
    """saturate(round_half_even(x / scale)) with x / scale computed in float32 (kernels.h)."""
    s = channel_scales(scale, x.shape, axis).astype(np.float32)
    with np.errstate(all="ignore"):
        q = x.astype(np.float32) / s
    if to == "i8":  # NaN gives 0 (the kernels' rule; NumPy's NaN-to-integer cast is undefined)
        return np.clip(np.rint(np.nan_to_num(q, nan=0.0)), -128, 127).astype(np.int8)
    return np.clip(q, -448, 448).astype(ml_dtypes.float8_e4m3fn)


def dequantize_ref(q: np.ndarray, scale: np.ndarray, to: str, axis: int = 1) -> np.ndarray:
    """q * scale computed in float32, rounded once to `to`."""
    s = channel_scales(scale, q.shape, axis).astype(np.float32)
    prod = q.astype(np.float32) * s
    return as_type(round_to(prod.astype(np.float64), to), to)


def cpu_runs_wide_attention() -> bool:
    """Whether this CPU runs the attention kernel's AVX-512 products (cpu::attention_runs_wide):
    x86-64 with AVX-512 F, DQ, BW and VL, and TENSORACLE_ATTENTION_NO_AVX512 unset."""
    if platform.machine() not in ("x86_64", "AMD64") or os.environ.get("TENSORACLE_ATTENTION_NO_AVX512"):
        return False
    try:
        text = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    flags = next((set(line.split(":", 1)[1].split()) for line in text.splitlines() if line.startswith("flags")), set())
    return {"avx512f", "avx512dq", "avx512bw", "avx512vl"} <= flags
