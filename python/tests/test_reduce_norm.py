"""Unary, reduce, softmax and normalization layers end to end from Python.

References are NumPy float64 (or exact integers) and torch float64 on CPU for layer, instance
and group norm and softmax, rounded once to the output type (layer_cases.round_to). float32 is
checked to a few ulp; float16/bfloat16 to one ulp of the rounded reference (the layers compute
in float32 and round once when stored). Every engine-building test takes the `device` fixture:
"cpu", and "cuda:0" marked `gpu`.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tensoracle
import tensoracle.trt as trt
from layer_cases import (
    rng_for,
    FLOATS,
    INT_RANGE,
    INTS,
    NP_OF,
    TRT_OF,
    as_type,
    assert_exact,
    assert_float_close,
    build,
    constant,
    narrow,
    run_network,
    wrap_int,
)

U = trt.UnaryOperation
R = trt.ReduceOperation


def build_outputs(device, x: np.ndarray, outputs: dict, shape=None, declare=None):
    """Engine with input "x" (typed by the array; dims `declare` or its shape) and one output per
    entry of `outputs` ({name: body(network, x) -> layer or tensor}); returns the engine."""

    def graph(net):
        xt = net.add_input("x", TRT_OF[_name_of(x.dtype)], tuple(declare or x.shape))
        for name, body in outputs.items():
            y = body(net, xt)
            if isinstance(y, trt.ILayer):
                y = y.get_output(0)
            y.name = name
            net.mark_output(y)

    return build(graph, {"x": shape or x.shape}, device)


def _name_of(dtype) -> str:
    for name, dt in NP_OF.items():
        if dt == np.dtype(dtype):
            return name
    raise KeyError(dtype)


def run_outputs(device, x, outputs, **kw) -> dict:
    return build_outputs(device, x, outputs, **kw).create_execution().run({"x": x})


# ==== unary ==================================================================================

_erf = np.vectorize(math.erf, otypes=[np.float64])

# name: (input low, input high, float64 reference, exact in every type)
FLOAT_UNARY = {
    "EXP": (-8, 8, np.exp, False),
    "LOG": (0.01, 50, np.log, False),
    "SQRT": (0, 50, np.sqrt, False),
    "RECIP": (0.1, 8, lambda v: 1 / v, False),
    "ABS": (-8, 8, np.abs, True),
    "NEG": (-8, 8, np.negative, True),
    "SIN": (-6, 6, np.sin, False),
    "COS": (-6, 6, np.cos, False),
    "TAN": (-1.4, 1.4, np.tan, False),
    "SINH": (-5, 5, np.sinh, False),
    "COSH": (-5, 5, np.cosh, False),
    "ASIN": (-0.99, 0.99, np.arcsin, False),
    "ACOS": (-0.99, 0.99, np.arccos, False),
    "ATAN": (-10, 10, np.arctan, False),
    "ASINH": (-10, 10, np.arcsinh, False),
    "ACOSH": (1, 10, np.arccosh, False),
    "ATANH": (-0.99, 0.99, np.arctanh, False),
    "CEIL": (-8, 8, np.ceil, True),
    "FLOOR": (-8, 8, np.floor, True),
    "ERF": (-3, 3, _erf, False),
    "SIGN": (-2, 2, np.sign, True),
    "ROUND": (-8, 8, np.rint, True),  # np.rint rounds half to even
}


@pytest.mark.parametrize("t", FLOATS)
def test_unary_float_operations(device, t):
    """Every float operation in one engine: float32 within 4 ulp of the float64 result (libm's
    float functions), float16/bfloat16 within 1 ulp; the exact ones bit for bit."""
    rng = rng_for("unary", t)
    inputs = {}
    for name, (lo, hi, _, exact) in FLOAT_UNARY.items():
        v = rng.uniform(lo, hi, (3, 40))
        if exact:
            v[:, ::4] = np.round(v[:, ::4] * 2) / 2  # halves and integers (ties for ROUND)
        inputs[name] = narrow(v, t)

    def graph(net):
        for name in FLOAT_UNARY:
            x = net.add_input(name, TRT_OF[t], (3, 40))
            y = net.add_unary(x, getattr(U, name)).get_output(0)
            y.name = "y_" + name
            net.mark_output(y)

    out = build(graph, {n: (3, 40) for n in FLOAT_UNARY}, device).create_execution().run(inputs)
    for name, (_, _, ref, exact) in FLOAT_UNARY.items():
        x64 = inputs[name].astype(np.float64)
        ulps = 0 if exact else (4 if t == "f32" else 1)
        assert_float_close(out["y_" + name], ref(x64), t, ulps=ulps, what=f"{name} {t}")


@pytest.mark.parametrize("t", FLOATS)
def test_unary_special_values(device, t):
    """NaN in gives NaN out for every float operation; infinities, zeros and domain edges;
    ROUND ties to even; SIGN(0) = 0; ISINF/ISNAN give bool."""
    x = narrow([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, 1.5, 2.5, -2.5, -0.5, 1.0, -1.0, 3.5, 70000.0], t)
    x64 = x.astype(np.float64)
    outs = {name: (lambda n: lambda net, v: net.add_unary(v, getattr(U, n)))(name) for name in FLOAT_UNARY}
    outs["ISINF"] = lambda net, v: net.add_unary(v, U.ISINF)
    outs["ISNAN"] = lambda net, v: net.add_unary(v, U.ISNAN)
    out = run_outputs(device, x, outs)
    for name, (_, _, ref, exact) in FLOAT_UNARY.items():
        got = out[name]
        assert np.isnan(got[0].astype(np.float64)), f"{name}(NaN) = {got[0]}"
        with np.errstate(all="ignore"):
            want = ref(x64)
        if exact:
            assert_exact(got, as_type(want, t), t, what=name)
        else:
            assert_float_close(got, want, t, ulps=4 if t == "f32" else 1, what=name)
    assert_exact(out["ROUND"][5:13], as_type([0, 2, 2, -2, -0.0, 1, -1, 4], t), t, what="ROUND ties to even")
    assert_exact(out["SIGN"][:5], as_type([np.nan, 1, -1, 0, 0], t), t, what="SIGN")
    assert out["ISINF"].dtype == np.bool_ and out["ISNAN"].dtype == np.bool_
    np.testing.assert_array_equal(out["ISINF"], np.isinf(x64))
    np.testing.assert_array_equal(out["ISNAN"], np.isnan(x64))


@pytest.mark.parametrize("t", INTS)
def test_unary_integer_abs_neg_sign_wrap(device, t):
    lo, hi = INT_RANGE[t]
    values = [lo, lo + 1, -7, -1, 0, 1, 7, hi, 123456]
    x = np.array(values, dtype=NP_OF[t])
    out = run_outputs(device, x, {n: (lambda n: lambda net, v: net.add_unary(v, getattr(U, n)))(n) for n in ("ABS", "NEG", "SIGN")})
    assert_exact(out["ABS"], np.array([wrap_int(abs(v), t) for v in values], NP_OF[t]), t, what="ABS")
    assert_exact(out["NEG"], np.array([wrap_int(-v, t) for v in values], NP_OF[t]), t, what="NEG")
    assert_exact(out["SIGN"], np.array([(v > 0) - (v < 0) for v in values], NP_OF[t]), t, what="SIGN")


def test_unary_not(device):
    x = np.array([[True, False, True], [False, False, True]])
    out, _ = run_network(device, {"x": x}, lambda net, v: net.add_unary(v["x"], U.NOT))
    assert_exact(out, ~x, "bool", what="NOT")


# ==== reduce =================================================================================

OPS = ["SUM", "PROD", "MAX", "MIN", "AVG"]
REDUCE_CASES = [(op, t) for op in OPS for t in FLOATS + INTS if not (op == "AVG" and t in INTS)]
# Masks over (3, 4, 5): single axes, two adjacent, two non-adjacent, all.
MASKS = [0b001, 0b010, 0b100, 0b011, 0b101, 0b110, 0b111]


def axes_of(mask: int, rank: int) -> tuple:
    return tuple(i for i in range(rank) if (mask >> i) & 1)


def reduce_ref(op: str, x: np.ndarray, axes: tuple, keep: bool, t: str) -> np.ndarray:
    """float64 (floats) or wrapped exact integers (ints) result."""
    if t in INTS:
        wide = x.astype(np.int64)  # int64 arithmetic wraps mod 2^64; narrowing wraps again
        fn = {"SUM": np.sum, "PROD": np.prod, "MAX": np.max, "MIN": np.min}[op]
        return fn(wide, axis=axes, keepdims=keep).astype(NP_OF[t])
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"):
        return {"SUM": np.sum, "PROD": np.prod, "MAX": np.max, "MIN": np.min, "AVG": np.mean}[op](
            x64, axis=axes, keepdims=keep
        )


def reduce_input(rng, op: str, t: str, shape) -> np.ndarray:
    if t in INTS:
        if op == "PROD":
            return rng.integers(-40, 40, shape).astype(NP_OF[t])  # 60 factors: wraps
        lo, hi = INT_RANGE[t]
        return rng.integers(lo // 4, hi // 4, shape, dtype=np.int64).astype(NP_OF[t])  # sums wrap
    if op == "PROD":
        v = rng.uniform(0.6, 1.5, shape) * rng.choice([-1, 1], shape)
    else:
        v = rng.standard_normal(shape) * 4
    return narrow(v, t)


def check_reduce_out(got, op, x, axes, keep, t, what):
    ref = reduce_ref(op, x, axes, keep, t)
    if t in INTS or op in ("MAX", "MIN"):
        assert_exact(got, ref if t in INTS else as_type(ref, t), t, what=what)
    else:  # accumulated in double, rounded once: the rounded reference or its neighbour
        assert_float_close(got, ref, t, ulps=1, what=what)


@pytest.mark.parametrize("op,t", REDUCE_CASES, ids=[f"{o}-{t}" for o, t in REDUCE_CASES])
def test_reduce_every_mask(device, op, t):
    """Every operation and type over single, adjacent, non-adjacent and all axes, with and
    without keep_dims (one engine, one output per mask and keep_dims)."""
    x = reduce_input(rng_for("reduce", op, t), op, t, (3, 4, 5))
    outs = {}
    for mask in MASKS:
        for keep in (False, True):
            outs[f"m{mask}_{int(keep)}"] = (lambda m, k: lambda net, v: net.add_reduce(v, getattr(R, op), m, k))(mask, keep)
    out = run_outputs(device, x, outs)
    for mask in MASKS:
        for keep in (False, True):
            axes = axes_of(mask, 3)
            check_reduce_out(out[f"m{mask}_{int(keep)}"], op, x, axes, keep, t, f"{op} {t} axes {axes} keep={keep}")


@pytest.mark.parametrize("t", FLOATS)
def test_reduce_nan_and_infinity(device, t):
    x = narrow(np.arange(20, dtype=np.float64).reshape(4, 5) - 7, t)
    x[0, 1] = np.nan
    x[2, 3] = np.inf
    x[2, 0] = -np.inf  # row 2: inf - inf
    x[3, 4] = -np.inf
    outs = {f"{op}{m}": (lambda o, m: lambda net, v: net.add_reduce(v, getattr(R, o), m, False))(op, m)
            for op in OPS for m in (1, 2, 3)}
    out = run_outputs(device, x, outs)
    for op in OPS:
        for m in (1, 2, 3):
            check_reduce_out(out[f"{op}{m}"], op, x, axes_of(m, 2), False, t, f"{op} mask {m}")
    assert np.isnan(out["MAX2"].astype(np.float64)[[0, 2]]).tolist() == [True, False]
    assert np.isnan(out["SUM2"].astype(np.float64)[2])


def test_reduce_over_an_empty_dim(device):
    """SUM 0, PROD 1, MAX -inf / lowest, MIN +inf / highest, AVG NaN."""
    xf = np.zeros((2, 0, 3), np.float32)
    outs = {op: (lambda o: lambda net, v: net.add_reduce(v, getattr(R, o), 0b010, False))(op) for op in OPS}
    out = run_outputs(device, xf, outs)
    want = {"SUM": 0.0, "PROD": 1.0, "MAX": -np.inf, "MIN": np.inf, "AVG": np.nan}
    for op in OPS:
        assert_exact(out[op], np.full((2, 3), want[op], np.float32), "f32", what=op)
    for t in INTS:
        xi = np.zeros((2, 0, 3), NP_OF[t])
        out = run_outputs(device, xi, {op: outs[op] for op in OPS[:4]})
        lo, hi = INT_RANGE[t]
        for op, w in zip(OPS[:4], (0, 1, lo, hi)):
            assert_exact(out[op], np.full((2, 3), w, NP_OF[t]), t, what=f"{op} {t}")


@pytest.mark.parametrize("t", ["f32", "f16", "i32"])
def test_reduce_dynamic_shapes(device, t):
    """One engine (ranged batch and rows) run at two shapes: rows (inner axis), columns (outer
    axis) and non-adjacent axes."""
    engine = build_outputs(
        device,
        np.zeros((1, 1, 6), NP_OF[t]),
        {
            "inner": lambda net, v: net.add_reduce(v, R.SUM, 0b100, True),
            "outer": lambda net, v: net.add_reduce(v, R.MAX, 0b001, False),
            "ends": lambda net, v: net.add_reduce(v, R.MIN if t in INTS else R.AVG, 0b101, False),
        },
        shape=tensoracle.InputShape.ranged((1, 1, 6), (2, 3, 6), (8, 700, 6)),
        declare=(-1, -1, 6),
    )
    execution = engine.create_execution()
    for shape in [(2, 3, 6), (8, 700, 6)]:
        x = reduce_input(rng_for("dyn", t, shape), "SUM", t, shape)
        out = execution.run({"x": x})
        check_reduce_out(out["inner"], "SUM", x, (2,), True, t, f"inner at {shape}")
        check_reduce_out(out["outer"], "MAX", x, (0,), False, t, f"outer at {shape}")
        check_reduce_out(out["ends"], "MIN" if t in INTS else "AVG", x, (0, 2), False, t, f"ends at {shape}")


# ==== softmax ================================================================================


def softmax_ref(x: np.ndarray, axis: int) -> np.ndarray:
    return torch.softmax(torch.from_numpy(x.astype(np.float64)), dim=axis).numpy()


def check_softmax(got, x, axis, t, what=""):
    # exp of a float32 difference: error ~ |x - max| * 2^-24 relative, a few ulp at most here.
    if t == "f32":
        assert_float_close(got, softmax_ref(x, axis), t, ulps=4, rtol=1e-6, what=what)
    else:
        assert_float_close(got, softmax_ref(x, axis), t, ulps=1, what=what)


def add_softmax(net, v, axis=None):
    layer = net.add_softmax(v)
    if axis is not None:
        layer.axes = 1 << axis
    return layer


@pytest.mark.parametrize("t", FLOATS)
def test_softmax_each_axis_of_a_3d_tensor(device, t):
    x = narrow(rng_for("softmax", t).standard_normal((3, 4, 5)) * 3, t)
    out = run_outputs(device, x, {f"a{a}": (lambda a: lambda net, v: add_softmax(net, v, a))(a) for a in range(3)})
    for a in range(3):
        check_softmax(out[f"a{a}"], x, a, t, f"axis {a}")


@pytest.mark.parametrize("shape,axis", [((6, 7), 0), ((4, 5, 6), 0), ((2, 3, 4, 5), 1), ((2, 2, 3, 4, 5), 2)])
def test_softmax_default_axis_is_rank_minus_three(device, shape, axis):
    x = narrow(rng_for("softmax default", shape).standard_normal(shape), "f32")
    out, _ = run_network(device, {"x": x}, lambda net, v: add_softmax(net, v["x"]))
    check_softmax(out, x, axis, "f32")


@pytest.mark.parametrize("t", FLOATS)
def test_softmax_nan_infinity_and_large_values(device, t):
    """Rows along the last axis: a NaN row is NaN; a row of -inf is NaN (0/0); -inf entries are
    exactly 0; a +inf entry gives NaN (inf - inf); large values do not overflow."""
    x = narrow(
        [[1, np.nan, 2, 3], [-np.inf] * 4, [-np.inf, 0, -np.inf, 1], [np.inf, 1, 2, 3], [96, 97, 95, 96]], t
    )
    out, _ = run_network(device, {"x": x}, lambda net, v: add_softmax(net, v["x"], 1))
    got = out.astype(np.float64)
    assert np.isnan(got[[0, 1, 3]]).all(), got
    assert got[2, 0] == 0 and got[2, 2] == 0
    check_softmax(out[[2, 4]], x[[2, 4]], 1, t)


@pytest.mark.parametrize("t", ["f32", "bf16"])
def test_softmax_dynamic_shapes(device, t):
    engine = build_outputs(
        device,
        np.zeros((1, 1), NP_OF[t]),
        {"last": lambda net, v: add_softmax(net, v, 1), "first": lambda net, v: add_softmax(net, v, 0)},
        shape=tensoracle.InputShape.ranged((1, 1), (4, 8), (300, 1000)),
        declare=(-1, -1),
    )
    execution = engine.create_execution()
    for shape in [(4, 8), (300, 1000)]:
        x = narrow(rng_for("sm dyn", shape).standard_normal(shape) * 2, t)
        out = execution.run({"x": x})
        check_softmax(out["last"], x, 1, t, f"last axis at {shape}")
        check_softmax(out["first"], x, 0, t, f"first axis at {shape}")


# ==== normalization ==========================================================================


def add_norm(net, v, scale, bias, mask, eps=1e-5, groups=1):
    layer = net.add_normalization(v, constant(net, scale), constant(net, bias), mask)
    layer.epsilon = eps
    if groups != 1:
        layer.num_groups = groups
    return layer


def check_norm(got, ref64, x, scale, bias, t, what=""):
    """float32: a few float32 roundings of (x - mean) * rstd * scale + bias; narrow types: one
    ulp of the rounded reference."""
    if t == "f32":
        assert_float_close(got, ref64, t, ulps=2, atol=1e-6 * (np.abs(ref64) + 1), what=what)
    else:
        assert_float_close(got, ref64, t, ulps=1, atol=1e-6 * (np.abs(ref64) + 1), what=what)


def t64(a) -> torch.Tensor:
    return torch.from_numpy(np.asarray(a).astype(np.float64))


def norm_params(rng, t, shape):
    return narrow(rng.uniform(0.5, 2.0, shape), t), narrow(rng.uniform(-1, 1, shape), t)


@pytest.mark.parametrize("t", FLOATS)
def test_layer_norm_last_dim_and_last_two_dims(device, t):
    rng = rng_for("layer norm", t)
    x = narrow(rng.standard_normal((4, 6, 16)) * 3 + 1, t)
    s1, b1 = norm_params(rng, t, (1, 1, 16))
    s2, b2 = norm_params(rng, t, (1, 6, 16))
    out = run_outputs(
        device,
        x,
        {
            "last": lambda net, v: add_norm(net, v, s1, b1, 0b100),
            "last2": lambda net, v: add_norm(net, v, s2, b2, 0b110, eps=1e-3),
        },
    )
    ref1 = F.layer_norm(t64(x), (16,), t64(s1).reshape(16), t64(b1).reshape(16), eps=float(np.float32(1e-5))).numpy()
    ref2 = F.layer_norm(t64(x), (6, 16), t64(s2).reshape(6, 16), t64(b2).reshape(6, 16), eps=float(np.float32(1e-3))).numpy()
    check_norm(out["last"], ref1, x, s1, b1, t, "layer norm, last dim")
    check_norm(out["last2"], ref2, x, s2, b2, t, "layer norm, last two dims")


@pytest.mark.parametrize("t", FLOATS)
def test_instance_norm(device, t):
    rng = rng_for("instance norm", t)
    x = narrow(rng.standard_normal((2, 3, 5, 7)) * 2 - 1, t)
    s, b = norm_params(rng, t, (1, 3, 1, 1))
    out, _ = run_network(device, {"x": x}, lambda net, v: add_norm(net, v["x"], s, b, 0b1100))
    ref = F.instance_norm(t64(x), weight=t64(s).reshape(3), bias=t64(b).reshape(3), eps=float(np.float32(1e-5))).numpy()
    check_norm(out, ref, x, s, b, t, "instance norm")


@pytest.mark.parametrize("groups", [2, 4])
@pytest.mark.parametrize("t", FLOATS)
def test_group_norm(device, t, groups):
    rng = rng_for("group norm", t, groups)
    x = narrow(rng.standard_normal((2, 8, 3, 5)) * 2 + 0.5, t)
    s, b = norm_params(rng, t, (1, 8, 1, 1))
    out, _ = run_network(device, {"x": x}, lambda net, v: add_norm(net, v["x"], s, b, 0b1100, groups=groups))
    ref = F.group_norm(t64(x), groups, t64(s).reshape(8), t64(b).reshape(8), eps=float(np.float32(1e-5))).numpy()
    check_norm(out, ref, x, s, b, t, f"group norm, {groups} groups")


def test_normalization_strided_axes_against_numpy(device):
    """Statistics over non-contiguous axes (0, 2, 3: batch-norm style) and over an outer axis,
    with scale and bias broadcast differently."""
    rng = rng_for("strided norm")
    x = narrow(rng.standard_normal((4, 3, 5, 6)) * 2, "f32")
    s = narrow(rng.uniform(0.5, 2, (1, 3, 1, 1)), "f32")
    b = narrow(rng.uniform(-1, 1, (1, 1, 5, 6)), "f32")
    out, _ = run_network(device, {"x": x}, lambda net, v: add_norm(net, v["x"], s, b, 0b1101))
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=(0, 2, 3), keepdims=True)
    var = x64.var(axis=(0, 2, 3), keepdims=True)
    ref = (x64 - mean) / np.sqrt(var + float(np.float32(1e-5))) * s + b
    check_norm(out, ref, x, s, b, "f32", "axes (0, 2, 3)")


@pytest.mark.parametrize("t", ["f32", "f16"])
def test_normalization_dynamic_shapes(device, t):
    """Layer norm over the last dim and group norm over ranged batch/spatial dims, each engine
    run at two shapes."""
    rng = rng_for("norm dyn", t)
    sl, bl = norm_params(rng, t, (1, 1, 32))
    engine = build_outputs(
        device,
        np.zeros((1, 1, 32), NP_OF[t]),
        {"y": lambda net, v: add_norm(net, v, sl, bl, 0b100)},
        shape=tensoracle.InputShape.ranged((1, 1, 32), (2, 5, 32), (4, 300, 32)),
        declare=(-1, -1, 32),
    )
    execution = engine.create_execution()
    for shape in [(2, 5, 32), (4, 300, 32)]:
        x = narrow(rng.standard_normal(shape), t)
        ref = F.layer_norm(t64(x), (32,), t64(sl).reshape(32), t64(bl).reshape(32), eps=float(np.float32(1e-5))).numpy()
        check_norm(execution.run({"x": x})["y"], ref, x, sl, bl, t, f"layer norm at {shape}")

    sg, bg = norm_params(rng, t, (1, 8, 1, 1))
    engine = build_outputs(
        device,
        np.zeros((1, 8, 1, 1), NP_OF[t]),
        {"y": lambda net, v: add_norm(net, v, sg, bg, 0b1100, groups=4)},
        shape=tensoracle.InputShape.ranged((1, 8, 1, 1), (2, 8, 4, 4), (3, 8, 16, 20)),
        declare=(-1, 8, -1, -1),
    )
    execution = engine.create_execution()
    for shape in [(2, 8, 4, 4), (3, 8, 16, 20)]:
        x = narrow(rng.standard_normal(shape), t)
        ref = F.group_norm(t64(x), 4, t64(sg).reshape(8), t64(bg).reshape(8), eps=float(np.float32(1e-5))).numpy()
        check_norm(execution.run({"x": x})["y"], ref, x, sg, bg, t, f"group norm at {shape}")


def test_normalization_nan_stays_in_its_group(device):
    x = narrow(rng_for("norm nan").standard_normal((2, 4, 6)), "f32")
    x[1, 2, 3] = np.nan
    s, b = np.ones((1, 4, 1), np.float32), np.zeros((1, 4, 1), np.float32)
    out, _ = run_network(device, {"x": x}, lambda net, v: add_norm(net, v["x"], s, b, 0b100, groups=2))
    got = np.isnan(out)
    assert got[1, 2:].all() and not got[1, :2].any() and not got[0].any()


def test_layer_norm_over_a_dynamic_dim_with_a_constant_scale(device):
    rng = rng_for("norm dynamic hidden")
    s, b = norm_params(rng, "f32", (1, 16))
    engine = build_outputs(
        device,
        np.zeros((1, 16), np.float32),
        {"y": lambda net, v: add_norm(net, v, s, b, 0b10)},
        shape=tensoracle.InputShape.ranged((1, 16), (4, 16), (8, 16)),
        declare=(-1, -1),
    )
    x = narrow(rng.standard_normal((4, 16)), "f32")
    ref = F.layer_norm(t64(x), (16,), t64(s).reshape(16), t64(b).reshape(16), eps=float(np.float32(1e-5))).numpy()
    check_norm(engine.create_execution().run({"x": x})["y"], ref, x, s, b, "f32", "dynamic normalized dim")
