"""TensorRT 10 layers that programs written for TensorRT use and that have no equivalent among the
older layers (issue 34): scale (add_scale / add_scale_nd), parametric ReLU, LRN, cumulative,
scatter (ELEMENT, ND), one-hot, squeeze / unsqueeze, reverse sequence and fill (linspace and
random draws), end to end through the public Python API on every backend, against NumPy
references (and PyTorch's local_response_norm for LRN), plus their refusals.

Every engine-building test takes the `device` fixture ("cpu", and "cuda:0" marked `gpu`).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

import tensoracle
import tensoracle.trt as trt
from layer_cases import assert_exact, assert_float_close, constant, rng_for, run_network

FLOAT_DTYPES = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16)}
# Tolerances of a float32 computation rounded once to the type, against a float64 reference.
ULPS = {"f32": 8, "f16": 1, "bf16": 1}


def scalar(network, value, dtype=np.int32):
    """A 0-D constant (layer_cases.constant makes arrays of rank 1 or more)."""
    return network.add_constant((), np.array(value, dtype)).get_output(0)


def arr(rng, shape, name, low=-2.0, high=2.0):
    return rng.uniform(low, high, shape).astype(FLOAT_DTYPES[name])


# ---- scale ------------------------------------------------------------------------------------


def scale_ref(x, mode, shift, scale, power, axis):
    x64 = x.astype(np.float64)
    shape = [1] * x.ndim
    if mode == "CHANNEL":
        shape[axis] = x.shape[axis]
    elif mode == "ELEMENTWISE":
        shape = [1] * axis + list(x.shape[axis:])

    def coef(w, identity):
        if w is None:
            return identity
        w = np.asarray(w, np.float64)
        return w.reshape(shape) if w.size > 1 else w.reshape(())

    return (x64 * coef(scale, 1.0) + coef(shift, 0.0)) ** coef(power, 1.0)


@pytest.mark.parametrize("name", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("mode", ["UNIFORM", "CHANNEL", "ELEMENTWISE"])
@pytest.mark.parametrize("with_power", [False, True])
def test_scale_matches_numpy(device, name, mode, with_power):
    rng = rng_for("scale", name, mode, with_power)
    x = arr(rng, (2, 3, 4, 5), name, 0.5, 2.0)
    count = {"UNIFORM": 1, "CHANNEL": 3, "ELEMENTWISE": 3 * 4 * 5}[mode]
    shift = rng.uniform(0.1, 1, count).astype(np.float32)
    scale = rng.uniform(0.5, 2, count).astype(np.float32)
    power = rng.uniform(0.5, 2, count).astype(np.float32) if with_power else None
    layers = []

    def body(n, t):
        layer = n.add_scale(t["x"], getattr(trt.ScaleMode, mode), shift, scale, power)
        layers.append(layer)
        return layer

    y, _ = run_network(device, {"x": x}, body)
    assert layers[0].type == trt.LayerType.SCALE and isinstance(layers[0], trt.IScaleLayer)
    assert layers[0].channel_axis == 1  # the third dim from the end, as TensorRT's add_scale
    ref = scale_ref(x, mode, shift, scale, power, 1)
    assert_float_close(y, ref, name, ulps=ULPS[name] * (4 if with_power else 1), rtol=1e-5 if with_power else 0,
                       what=f"scale {mode}")


@pytest.mark.parametrize("axis", [0, 2, -1])
def test_scale_nd_channel_axis_and_missing_weights(device, axis):
    rng = rng_for("scale_nd", axis)
    x = arr(rng, (3, 4, 5), "f32")
    c = x.shape[axis]
    scale = rng.uniform(0.5, 2, c).astype(np.float32)
    y, _ = run_network(device, {"x": x}, lambda n, t: n.add_scale_nd(t["x"], trt.ScaleMode.CHANNEL, None, scale, None, axis))
    assert_float_close(y, scale_ref(x, "CHANNEL", None, scale, None, axis % 3), "f32", ulps=1, what="scale_nd")


def test_scale_coefficients_can_be_set_after_the_layer(device):
    x = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)

    def body(n, t):
        layer = n.add_scale(t["x"], trt.ScaleMode.UNIFORM)
        assert list(layer.shift) == [0.0] and list(layer.scale) == [1.0] and list(layer.power) == [1.0]
        layer.mode = trt.ScaleMode.CHANNEL
        layer.scale = np.array([2.0, 3.0], np.float32)
        layer.shift = np.array([1.0], np.float16)
        assert list(layer.scale) == [2.0, 3.0] and list(layer.shift) == [1.0]
        return layer

    y, _ = run_network(device, {"x": x}, body)
    assert np.array_equal(y, x * np.array([2.0, 3.0], np.float32).reshape(1, 2, 1, 1) + 1)


def test_scale_coefficients_from_a_tensor_are_not_weights():
    net = tensoracle.Network()
    x = net.add_input("x", trt.float32, (2, 3, 4, 5))
    s = net.add_input("s", trt.float32, (3,))
    layer = net.add_scale(x, trt.ScaleMode.CHANNEL)
    layer.set_input(2, s)
    with pytest.raises(tensoracle.InvalidArgument, match=r"its scale is tensor 's', not weights"):
        layer.scale
    assert list(layer.shift) == [0.0]


def test_scale_refuses_a_wrong_coefficient_count():
    net = tensoracle.Network()
    x = net.add_input("x", trt.float32, (2, 3, 4, 5))
    with pytest.raises(tensoracle.InvalidArgument, match=r"scale.*4 coefficients.*CHANNEL mode needs 3"):
        net.add_scale(x, trt.ScaleMode.CHANNEL, None, np.ones(4, np.float32))
    with pytest.raises(tensoracle.InvalidArgument, match=r"int32.*scale takes float32"):
        net.add_scale(x, trt.ScaleMode.UNIFORM, np.ones(1, np.int32))
    i = net.add_input("i", trt.int32, (2, 3))
    with pytest.raises(tensoracle.InvalidArgument, match="scale"):
        net.add_scale(i, trt.ScaleMode.UNIFORM)


# ---- parametric ReLU ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("slope_shape", [(1, 3, 1, 1), (2, 3, 4, 5), (1, 1, 1, 1), (1, 1, 4, 1)])
def test_parametric_relu(device, name, slope_shape):
    rng = rng_for("prelu", name, slope_shape)
    x = arr(rng, (2, 3, 4, 5), name)
    slope = arr(rng, slope_shape, name, -1, 1)
    layers = []

    def body(n, t):
        layers.append(n.add_parametric_relu(t["x"], constant(n, slope)))
        return layers[0]

    y, _ = run_network(device, {"x": x}, body)
    assert isinstance(layers[0], trt.IParametricReLULayer) and layers[0].type == trt.LayerType.PARAMETRIC_RELU
    x64, s64 = x.astype(np.float64), np.broadcast_to(slope.astype(np.float64), x.shape)
    ref = np.where(x64 >= 0, x64, x64 * s64)
    expected = torch.nn.functional.prelu(torch.from_numpy(x.astype(np.float32)), torch.from_numpy(slope.astype(np.float32).reshape(-1))) if slope_shape == (1, 3, 1, 1) else None
    assert_float_close(y, ref, name, ulps=ULPS[name], what="parametric_relu")
    if expected is not None and name == "f32":
        assert np.allclose(y, expected.numpy(), rtol=1e-6, atol=0)


def test_parametric_relu_refuses_a_slope_that_does_not_broadcast():
    net = tensoracle.Network()
    x = net.add_input("x", trt.float32, (2, 3, 4))
    s = net.add_input("s", trt.float32, (2, 2, 1))
    with pytest.raises(tensoracle.InvalidArgument, match="parametric"):
        net.add_parametric_relu(x, s)


# ---- LRN ------------------------------------------------------------------------------------


def lrn_ref(x, window, alpha, beta, k):
    """ONNX's LRN: channels c - floor((w-1)/2) .. c + ceil((w-1)/2)."""
    x64 = x.astype(np.float64)
    c = x.shape[1]
    before, after = (window - 1) // 2, window // 2
    sq = x64**2
    sums = np.zeros_like(x64)
    for ch in range(c):
        lo, hi = max(0, ch - before), min(c - 1, ch + after)
        sums[:, ch] = sq[:, lo : hi + 1].sum(axis=1)
    return x64 / (k + alpha / window * sums) ** beta


@pytest.mark.parametrize("name", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("window,alpha,beta,k", [(5, 1e-4, 0.75, 2.0), (3, 0.5, 0.5, 1.0), (1, 1.0, 1.0, 1.0), (4, 0.2, 0.9, 1.5)])
def test_lrn(device, name, window, alpha, beta, k):
    rng = rng_for("lrn", name, window)
    x = arr(rng, (2, 7, 3, 4), name)
    layers = []

    def body(n, t):
        layers.append(n.add_lrn(t["x"], window, alpha, beta, k))
        return layers[0]

    y, _ = run_network(device, {"x": x}, body)
    layer = layers[0]
    assert isinstance(layer, trt.ILRNLayer) and layer.window_size == window and layer.k == pytest.approx(k)
    assert_float_close(y, lrn_ref(x, window, alpha, beta, k), name, ulps=ULPS[name] + 1, what="lrn")
    if window % 2 == 1 and name == "f32":  # PyTorch's window agrees with ONNX's for odd sizes
        ref = torch.nn.functional.local_response_norm(torch.from_numpy(x), window, alpha, beta, k).numpy()
        assert np.allclose(y, ref, rtol=1e-5, atol=1e-6)


def test_lrn_3d_input_and_refusals(device):
    x = arr(rng_for("lrn3"), (2, 5, 6), "f32")
    y, _ = run_network(device, {"x": x}, lambda n, t: n.add_lrn(t["x"], 3, 0.1, 0.75, 1.0))
    assert_float_close(y, lrn_ref(x, 3, 0.1, 0.75, 1.0), "f32", ulps=8)
    net = tensoracle.Network()
    t = net.add_input("t", trt.float32, (5, 6))
    with pytest.raises(tensoracle.InvalidArgument, match="rank 3 or more"):
        net.add_lrn(t, 3, 0.1, 0.75, 1.0)
    u = net.add_input("u", trt.float32, (1, 5, 6))
    with pytest.raises(tensoracle.InvalidArgument, match="window 0"):
        net.add_lrn(u, 0, 0.1, 0.75, 1.0)


# ---- cumulative -----------------------------------------------------------------------------


def cumsum_ref(x, axis, exclusive, reverse):
    v = np.flip(x, axis) if reverse else x
    acc = v.astype(np.float64) if v.dtype.kind == "f" or v.dtype == FLOAT_DTYPES["bf16"] else v
    c = np.cumsum(acc, axis=axis, dtype=acc.dtype)
    if exclusive:
        c = c - acc
    return np.flip(c, axis) if reverse else c


@pytest.mark.parametrize("name", ["f32", "f16", "bf16", "i32", "i64"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("exclusive,reverse", [(False, False), (True, False), (False, True), (True, True)])
def test_cumulative(device, name, axis, exclusive, reverse):
    rng = rng_for("cumsum", name, axis, exclusive, reverse)
    if name.startswith("i"):
        x = rng.integers(-1000, 1000, (3, 4, 6)).astype(np.int32 if name == "i32" else np.int64)
    else:
        x = arr(rng, (3, 4, 6), name)
    layers = []

    def body(n, t):
        ax = scalar(n, axis, np.int32)
        layers.append(n.add_cumulative(t["x"], ax, trt.CumulativeOperation.SUM, exclusive, reverse))
        return layers[0]

    y, _ = run_network(device, {"x": x}, body)
    layer = layers[0]
    assert isinstance(layer, trt.ICumulativeLayer) and layer.exclusive == exclusive and layer.reverse == reverse
    ref = cumsum_ref(x, axis, exclusive, reverse)
    if name.startswith("i"):
        assert_exact(y, ref, name, what="cumulative")
    else:
        assert_float_close(y, ref, name, ulps=1, atol=1e-12, what="cumulative")  # summed in double, rounded once


def test_cumulative_int32_wraps_and_axis_must_be_constant():
    x = np.array([[2**31 - 1, 1, 1]], np.int32)
    y, _ = run_network("cpu", {"x": x}, lambda n, t: n.add_cumulative(t["x"], scalar(n, 1, np.int64), trt.CumulativeOperation.SUM, False, False))
    assert y.tolist() == [[2**31 - 1, -(2**31), -(2**31) + 1]]
    net = tensoracle.Network()
    t = net.add_input("t", trt.float32, (3, 4))
    a = net.add_input("a", trt.int32, ())
    with pytest.raises(tensoracle.InvalidArgument, match="axis.*constant layer"):
        net.add_cumulative(t, a, trt.CumulativeOperation.SUM, False, False)
    with pytest.raises(tensoracle.InvalidArgument, match="axis"):
        net.add_cumulative(t, net.add_constant((), np.array(2, np.int32)).get_output(0), trt.CumulativeOperation.SUM, False, False)


# ---- scatter ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["f32", "f16", "i32", "i64", "bf16"])
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("index_type", [np.int32, np.int64])
def test_scatter_element(device, name, axis, index_type):
    rng = rng_for("scatter_el", name, axis, index_type)
    D = (4, 5, 6)
    dt = FLOAT_DTYPES.get(name, np.dtype(np.int32 if name == "i32" else np.int64))
    data = rng.uniform(-5, 5, D).astype(dt)
    ishape = list(D)
    ishape[axis] = 3
    ishape[(axis + 1) % 3] -= 1  # indices smaller than the data in another dim too
    # distinct positions along the axis for each line (duplicates have no defined winner)
    idx = np.argsort(rng.random(tuple(ishape[:axis % 3]) + (D[axis],) + tuple(ishape[axis % 3 + 1 :])), axis=axis)
    idx = np.take(idx, range(3), axis=axis).astype(index_type)
    neg = idx - D[axis]  # the same positions counted from the end
    idx = np.where(rng.random(idx.shape) < 0.5, idx, neg).astype(index_type)
    updates = rng.uniform(-5, 5, idx.shape).astype(dt)
    layers = []

    def body(n, t):
        layers.append(n.add_scatter(t["data"], t["idx"], t["upd"], trt.ScatterMode.ELEMENT))
        layers[0].axis = axis
        return layers[0]

    y, _ = run_network(device, {"data": data, "idx": idx, "upd": updates}, body)
    assert isinstance(layers[0], trt.IScatterLayer) and layers[0].mode == trt.ScatterMode.ELEMENT
    ref = data.copy()
    ax = axis % 3
    for u in np.ndindex(idx.shape):
        at = list(u)
        at[ax] = int(idx[u]) % D[ax]
        ref[tuple(at)] = updates[u]
    assert np.array_equal(y.view(np.uint8), ref.view(np.uint8))


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("name", ["f32", "i64", "f16"])
def test_scatter_nd(device, depth, name):
    rng = rng_for("scatter_nd", depth, name)
    D = (4, 5, 6)
    dt = FLOAT_DTYPES.get(name, np.dtype(np.int64))
    data = rng.uniform(-5, 5, D).astype(dt)
    cells = np.array(np.unravel_index(rng.permutation(int(np.prod(D[:depth])))[:4], D[:depth])).T.reshape(2, 2, depth)
    idx = np.where(rng.random(cells.shape) < 0.3, cells - np.array(D[:depth]), cells).astype(np.int64)
    updates = rng.uniform(-5, 5, (2, 2) + D[depth:]).astype(dt)
    y, _ = run_network(device, {"data": data, "idx": idx, "upd": updates},
                       lambda n, t: n.add_scatter(t["data"], t["idx"], t["upd"], trt.ScatterMode.ND))
    ref = data.copy()
    for j in np.ndindex(2, 2):
        ref[tuple(cells[j])] = updates[j]
    assert np.array_equal(y.view(np.uint8), ref.view(np.uint8))


REDUCE = {"SUM": np.add, "PROD": np.multiply, "MAX": np.maximum, "MIN": np.minimum}


@pytest.mark.parametrize("reduction", ["SUM", "PROD", "MAX", "MIN"])
@pytest.mark.parametrize("name", ["f32", "f16", "i32", "i64"])
@pytest.mark.parametrize("mode", ["ELEMENT", "ND"])
def test_scatter_reductions_combine_duplicates_in_order(device, reduction, name, mode):
    """tensoracle's reductions (ONNX's ScatterElements / ScatterND reduction): every update is
    combined with its element, duplicates included, in the updates' order."""
    rng = rng_for("scatter_red", reduction, name, mode)
    D = (4, 5)
    dt = FLOAT_DTYPES.get(name, np.dtype(np.int32 if name == "i32" else np.int64))
    data = (rng.uniform(0.5, 1.5, D) if name.startswith("f") else rng.integers(-9, 9, D)).astype(dt)
    if mode == "ELEMENT":
        idx = rng.integers(-4, 4, (6, 5)).astype(np.int64)  # along axis 0, with duplicates
        updates = (rng.uniform(0.5, 1.5, idx.shape) if name.startswith("f") else rng.integers(-9, 9, idx.shape)).astype(dt)
        targets = [((int(idx[u]) % 4, u[1]), updates[u]) for u in np.ndindex(idx.shape)]
    else:
        idx = rng.integers(-4, 4, (7, 1)).astype(np.int64)  # rows of data, with duplicates
        updates = (rng.uniform(0.5, 1.5, (7, 5)) if name.startswith("f") else rng.integers(-9, 9, (7, 5))).astype(dt)
        targets = [((int(idx[j, 0]) % 4, c), updates[j, c]) for j in range(7) for c in range(5)]
    ref = data.copy()
    for at, v in targets:  # float updates rounded to the type after each step, as the kernels do
        ref[at] = REDUCE[reduction](ref[at].astype(np.float32) if name.startswith("f") else ref[at],
                                    v.astype(np.float32) if name.startswith("f") else v)

    def body(n, t):
        s = n.add_scatter(t["data"], t["idx"], t["upd"], getattr(trt.ScatterMode, mode))
        s.reduction = getattr(tensoracle._native.ScatterReduction, reduction)
        return s

    y, _ = run_network(device, {"data": data, "idx": idx, "upd": updates}, body)
    assert np.array_equal(y.view(np.uint8), ref.view(np.uint8)), (y, ref)


def test_scatter_reduction_refuses_bool_data():
    net = tensoracle.Network()
    d = net.add_input("d", trt.bool, (4,))
    i = net.add_input("i", trt.int32, (2,))
    u = net.add_input("u", trt.bool, (2,))
    layer = net.add_scatter(d, i, u, trt.ScatterMode.ELEMENT)
    with pytest.raises(tensoracle.InvalidArgument, match="reduction takes float or int32/int64"):
        layer.reduction = tensoracle._native.ScatterReduction.MAX


def test_scatter_out_of_range_index_fails_on_the_cpu():
    data = np.zeros((3, 4), np.float32)
    idx = np.array([[0, 3]], np.int32)
    upd = np.ones((1, 2), np.float32)
    with pytest.raises(tensoracle.InvalidArgument, match=r"scatter: index 3 is out of range for a dimension of size 3"):
        run_network("cpu", {"data": data, "idx": idx, "upd": upd},
                    lambda n, t: n.add_scatter(t["data"], t["idx"], t["upd"], trt.ScatterMode.ELEMENT))


def test_scatter_refuses_mismatched_shapes():
    net = tensoracle.Network()
    d = net.add_input("d", trt.float32, (4, 5))
    i = net.add_input("i", trt.int32, (2, 5))
    u = net.add_input("u", trt.float32, (2, 4))
    with pytest.raises(tensoracle.InvalidArgument, match="ELEMENT mode"):
        net.add_scatter(d, i, u, trt.ScatterMode.ELEMENT)
    with pytest.raises(tensoracle.InvalidArgument, match="ND mode"):
        net.add_scatter(d, i, u, trt.ScatterMode.ND)
    f = net.add_input("f", trt.float32, (2, 5))
    with pytest.raises(tensoracle.InvalidArgument, match="int32 or int64"):
        net.add_scatter(d, f, u, trt.ScatterMode.ELEMENT)


# ---- one-hot --------------------------------------------------------------------------------


def one_hot_ref(indices, off, on, depth, axis):
    k = np.where(indices < 0, indices + depth, indices)
    hot = (k[..., None] == np.arange(depth)) & (indices >= -depth)[..., None] & (indices < depth)[..., None]
    out = np.where(hot, on, off)
    return np.moveaxis(out, -1, axis if axis >= 0 else indices.ndim + 1 + axis)


@pytest.mark.parametrize("axis", [-1, 0, 1, 2])
@pytest.mark.parametrize("values_dtype", [np.float32, np.int32, np.float16, np.int64])
def test_one_hot(device, axis, values_dtype):
    rng = rng_for("one_hot", axis, np.dtype(values_dtype).name)
    depth = 5
    indices = rng.integers(-7, 7, (3, 4)).astype(np.int32)
    values = np.array([-2, 3], values_dtype)
    layers = []

    def body(n, t):
        layers.append(n.add_one_hot(t["i"], t["v"], scalar(n, depth, np.int32), axis))
        return layers[0]

    y, _ = run_network(device, {"i": indices, "v": values}, body)
    assert isinstance(layers[0], trt.IOneHotLayer) and layers[0].axis == axis
    ref = one_hot_ref(indices.astype(np.int64), values[0], values[1], depth, axis)
    assert y.dtype == values.dtype and np.array_equal(y, ref)


def test_one_hot_refusals():
    net = tensoracle.Network()
    i = net.add_input("i", trt.int64, (3,))
    v = net.add_input("v", trt.float32, (2,))
    d = net.add_input("d", trt.int32, ())
    with pytest.raises(tensoracle.InvalidArgument, match="depth.*constant layer"):
        net.add_one_hot(i, v, d, -1)
    with pytest.raises(tensoracle.InvalidArgument, match="depth 0"):
        net.add_one_hot(i, v, net.add_constant((), np.array(0, np.int32)).get_output(0), -1)
    v3 = net.add_input("v3", trt.float32, (3,))
    with pytest.raises(tensoracle.InvalidArgument, match=r"values .* must be \[2\]"):
        net.add_one_hot(i, v3, net.add_constant((), np.array(4, np.int32)).get_output(0), -1)
    with pytest.raises(tensoracle.InvalidArgument, match="axis"):
        net.add_one_hot(i, v, net.add_constant((), np.array(4, np.int32)).get_output(0), 3)


def test_new_layers_survive_the_engine_file(tmp_path):
    """Each new layer's parameters are written to the plan and read back: the reopened engine
    gives the same outputs."""
    rng = rng_for("roundtrip")
    x = arr(rng, (2, 3, 4, 5), "f32", 0.5, 2)

    def graph(n):
        t = n.add_input("x", trt.float32, x.shape)
        a = n.add_scale(t, trt.ScaleMode.CHANNEL, np.ones(3, np.float32), np.full(3, 2, np.float32), np.full(3, 1.5, np.float32))
        b = n.add_lrn(a.get_output(0), 3, 0.3, 0.6, 1.2)
        c = n.add_parametric_relu(b.get_output(0), constant(n, np.full((1, 3, 1, 1), 0.25, np.float32)))
        d = n.add_cumulative(c.get_output(0), scalar(n, 2, np.int32), trt.CumulativeOperation.SUM, True, True)
        idx = constant(n, np.ones((2, 3, 1, 5), np.int32))
        e = n.add_scatter(d.get_output(0), idx, constant(n, np.full((2, 3, 1, 5), 7, np.float32)), trt.ScatterMode.ELEMENT)
        e.axis = 2
        y = e.get_output(0)
        y.name = "y"
        n.mark_output(y)
        h = n.add_one_hot(constant(n, np.array([0, 2, -1], np.int64)), constant(n, np.array([0, 1], np.float32)),
                          scalar(n, 3, np.int32), 0)
        h.get_output(0).name = "h"
        n.mark_output(h.get_output(0))

    decl = tensoracle.EngineBuild({"x": tensoracle.InputShape.fixed(x.shape)}, tensoracle.BuilderSettings(device="cpu"))
    blob = tensoracle.build_serialized_engine(graph, decl)
    first = tensoracle.deserialize_engine(blob).create_execution().run({"x": x})
    again = tensoracle.deserialize_engine(bytes(blob)).create_execution().run({"x": x})
    assert np.array_equal(first["y"], again["y"]) and np.array_equal(first["h"], again["h"])
    assert first["h"].tolist() == [[1, 0, 0], [0, 0, 0], [0, 1, 1]]  # depth along axis 0
    assert (first["y"][:, :, 1, :] == 7).all()


# ---- squeeze / unsqueeze ----------------------------------------------------------------------


def axes_const(network, axes, dtype=np.int32):
    return constant(network, np.array(axes, dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.bool_])
def test_squeeze_and_unsqueeze(device, dtype):
    rng = rng_for("squeeze", np.dtype(dtype).name)
    x = (rng.uniform(-3, 3, (2, 1, 3, 1)) > 0 if dtype is np.bool_ else rng.uniform(-3, 3, (2, 1, 3, 1))).astype(dtype)
    layers = []

    def body(n, t):
        layers.append(n.add_squeeze(t["x"], axes_const(n, [1, -1], np.int64)))
        layers.append(n.add_unsqueeze(layers[0].get_output(0), axes_const(n, [0, 3])))
        return layers[1]

    y, _ = run_network(device, {"x": x}, body)
    assert isinstance(layers[0], trt.ISqueezeLayer) and isinstance(layers[1], trt.IUnsqueezeLayer)
    assert layers[0].type == trt.LayerType.SQUEEZE and layers[1].type == trt.LayerType.UNSQUEEZE
    assert tuple(layers[0].get_output(0).shape) == (2, 3)
    assert y.dtype == x.dtype and np.array_equal(y, np.expand_dims(x.reshape(2, 3), (0, 3)))


def test_squeeze_with_a_dynamic_batch(device):
    x = np.arange(12, dtype=np.float32).reshape(4, 1, 3)

    def body(n, t):
        return n.add_squeeze(t["x"], axes_const(n, [1]))

    profile = {"x": tensoracle.InputShape.ranged((1, 1, 3), (2, 1, 3), (8, 1, 3))}
    y, _ = run_network(device, {"x": x}, body, profile, declare={"x": (-1, 1, 3)})
    assert np.array_equal(y, x.reshape(4, 3))


def test_squeeze_refusals_and_axes_set_later():
    net = tensoracle.Network()
    x = net.add_input("x", trt.float32, (2, 1, 3))
    with pytest.raises(tensoracle.InvalidArgument, match="size 3 in dim 2; squeeze removes dims of size 1"):
        net.add_squeeze(x, axes_const(net, [2]))
    with pytest.raises(tensoracle.InvalidArgument, match="twice"):
        net.add_squeeze(x, axes_const(net, [1, -2]))
    with pytest.raises(tensoracle.InvalidArgument, match="outside"):
        net.add_unsqueeze(x, axes_const(net, [4]))
    runtime_axes = net.add_input("axes", trt.int32, (1,))
    with pytest.raises(tensoracle.UnsupportedError, match="constant layer"):
        net.add_squeeze(x, runtime_axes)
    # TensorRT's programs may replace the axes input: it is read from its constant
    layer = net.add_unsqueeze(x, axes_const(net, [0]))
    layer.set_input(1, axes_const(net, [-1]))
    assert tuple(layer.get_output(0).shape) == (2, 1, 3, 1)
    with pytest.raises(tensoracle.UnsupportedError, match="constant layer"):
        layer.set_input(1, runtime_axes)


# ---- reverse sequence ---------------------------------------------------------------------------


def reverse_sequence_ref(x, lens, batch_axis, seq_axis):
    y = x.copy()
    for b, n in enumerate(lens):
        src = [slice(None)] * x.ndim
        src[batch_axis] = b
        src[seq_axis] = slice(0, n)
        y[tuple(src)] = np.flip(x[tuple(src)], axis=seq_axis - (1 if batch_axis < seq_axis else 0))
    return y


@pytest.mark.parametrize("batch_axis,seq_axis", [(1, 0), (0, 1), (2, 0), (0, 2)])
@pytest.mark.parametrize("lens_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8])
def test_reverse_sequence(device, batch_axis, seq_axis, lens_dtype, dtype):
    rng = rng_for("reverse_sequence", batch_axis, seq_axis, np.dtype(dtype).name)
    shape = [5, 5, 5]
    shape[batch_axis], shape[seq_axis] = 3, 6
    x = rng.integers(-100, 100, shape).astype(dtype)
    lens = np.array([6, 2, 0], lens_dtype)
    layers = []

    def body(n, t):
        layers.append(n.add_reverse_sequence(t["x"], t["lens"]))
        layers[0].batch_axis = batch_axis
        layers[0].sequence_axis = seq_axis
        return layers[0]

    y, _ = run_network(device, {"x": x, "lens": lens}, body)
    assert isinstance(layers[0], trt.IReverseSequenceLayer)
    assert (layers[0].batch_axis, layers[0].sequence_axis) == (batch_axis, seq_axis)
    assert np.array_equal(y, reverse_sequence_ref(x, lens, batch_axis, seq_axis))


def test_reverse_sequence_defaults_refusals_and_a_bad_length():
    net = tensoracle.Network()
    x = net.add_input("x", trt.float32, (4, 3, 2))
    layer = net.add_reverse_sequence(x, net.add_input("lens", trt.int32, (3,)))
    assert (layer.batch_axis, layer.sequence_axis) == (1, 0)  # TensorRT's defaults: [time, batch, ...]
    with pytest.raises(tensoracle.InvalidArgument, match="sequence_lens .* must be \\[batch\\] = \\[2\\]"):
        layer.batch_axis = 2
    with pytest.raises(tensoracle.InvalidArgument, match="both dim 1"):
        layer.sequence_axis = 1
    with pytest.raises(tensoracle.InvalidArgument, match="int32 or int64"):
        net.add_reverse_sequence(x, net.add_input("f", trt.float32, (3,)))
    x = np.zeros((4, 3, 2), np.float32)
    with pytest.raises(tensoracle.InvalidArgument, match=r"sequence length 5 of batch entry 1 is outside \[0, 4\]"):
        run_network("cpu", {"x": x, "lens": np.array([1, 5, 0], np.int32)},
                    lambda n, t: n.add_reverse_sequence(t["x"], t["lens"]))


# ---- fill ---------------------------------------------------------------------------------------


def run_fill(device, configure, inputs=None):
    """Builds a network whose output "y" is a fill made by configure(network, tensors); returns
    (output, layer)."""
    layers = []

    def body(n, t):
        layers.append(configure(n, t))
        return layers[0]

    y, _ = run_network(device, inputs or {}, body)
    return y, layers[0]


@pytest.mark.parametrize("to,dtype", [(trt.float32, np.float32), (trt.float16, np.float16), (trt.int32, np.int32),
                                      (trt.int64, np.int64)])
def test_fill_linspace_with_its_own_numbers(device, to, dtype):
    def configure(n, _):
        layer = n.add_fill((7,), trt.FillOperation.LINSPACE, to)
        layer.alpha, layer.beta = 3.0, -2.0
        return layer

    y, layer = run_fill(device, configure)
    assert isinstance(layer, trt.IFillLayer) and layer.operation == trt.FillOperation.LINSPACE
    assert (layer.alpha, layer.beta, layer.to_type, tuple(layer.shape)) == (3.0, -2.0, to, (7,))
    assert y.dtype == dtype and np.array_equal(y, (3 - 2 * np.arange(7)).astype(dtype))


@pytest.mark.parametrize("to,dtype", [(trt.float32, np.float32), (trt.int64, np.int64), (trt.bfloat16, ml_dtypes.bfloat16)])
def test_fill_linspace_of_rank_two_from_tensors(device, to, dtype):
    """TensorRT's documented example: alpha 0 and steps [3, 1] over (2, 3) give 0..5, here from
    execution-time inputs; the dims come from a constant set as input 0."""
    def configure(n, t):
        layer = n.add_fill((1,), trt.FillOperation.LINSPACE, to)
        layer.set_input(0, constant(n, np.array([2, 3], np.int64)))
        layer.set_input(1, t["alpha"])
        layer.set_input(2, t["beta"])
        return layer

    inputs = {"alpha": np.array(0.5 if dtype is not np.int64 else 1, dtype), "beta": np.array([3, 1], dtype)}
    y, layer = run_fill(device, configure, inputs)
    start = float(inputs["alpha"])
    assert tuple(layer.shape) == (2, 3) and y.dtype == np.dtype(dtype)
    assert np.array_equal(y.astype(np.float64), start + np.arange(6, dtype=np.float64).reshape(2, 3))


def test_fill_rank_two_linspace_waits_for_its_tensors():
    builder = trt.Builder(trt.Logger())
    config = builder.create_builder_config()
    config.device = "cpu"
    net = builder.create_network(0)
    layer = net.add_fill((2, 3), trt.FillOperation.LINSPACE, trt.float32)
    y = layer.get_output(0)
    y.name = "y"
    net.mark_output(y)
    assert tuple(y.shape) == (2, 3)
    with pytest.raises(tensoracle.InvalidArgument, match=r"set alpha \(input 1\) before beta"):
        layer.set_input(2, constant(net, np.array([3, 1], np.float32)))
    layer.set_input(1, net.add_constant((), np.array(1, np.float32)).get_output(0))
    with pytest.raises(tensoracle.InvalidArgument, match="beta"):
        builder.build_serialized_network(net, config)
    layer.set_input(2, constant(net, np.array([3, 1], np.float32)))
    blob = builder.build_serialized_network(net, config)
    out = tensoracle.deserialize_engine(bytes(blob)).create_execution().run({})["y"]
    assert np.array_equal(out, 1 + np.arange(6, dtype=np.float32).reshape(2, 3))


@pytest.mark.parametrize("op", ["RANDOM_UNIFORM", "RANDOM_NORMAL"])
@pytest.mark.parametrize("to,dtype", [(trt.float32, np.float32), (trt.float16, np.float16)])
def test_fill_random_draws(device, op, to, dtype):
    def configure(n, _):
        layer = n.add_fill((256, 256), getattr(trt.FillOperation, op), to)
        layer.alpha, layer.beta = (-1.0, 3.0) if op == "RANDOM_UNIFORM" else (2.0, 0.5)
        return layer

    y, _ = run_fill(device, configure)
    again, _ = run_fill(device, configure)
    assert y.dtype == dtype and y.shape == (256, 256)
    assert np.array_equal(y, again)  # a counter-based generator: the same values every run
    v = y.astype(np.float64)
    if op == "RANDOM_UNIFORM":
        assert v.min() >= -1 and v.max() <= 3 and v.min() < -0.99 and v.max() > 2.99
        assert abs(v.mean() - 1) < 0.02 and abs(v.std() - 4 / np.sqrt(12)) < 0.02
        hist = np.histogram(v, bins=16, range=(-1, 3))[0]
        assert hist.min() > 0.9 * v.size / 16
    else:
        assert abs(v.mean() - 2) < 0.01 and abs(v.std() - 0.5) < 0.01
        assert abs(((v - 2) / 0.5 > 1.96).mean() - 0.025) < 0.003
    assert len(np.unique(y)) > (1000 if dtype == np.float16 else 60000)


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["LINSPACE", "RANDOM_UNIFORM"])
def test_fill_gives_the_cpus_values_on_cuda(op):
    def configure(n, _):
        layer = n.add_fill((4096,), getattr(trt.FillOperation, op), trt.float32)
        layer.alpha, layer.beta = (-1.5, 0.37)
        return layer

    cpu, _ = run_fill("cpu", configure)
    cuda, _ = run_fill("cuda:0", configure)
    assert np.array_equal(cpu, cuda)


def test_fill_refusals():
    net = tensoracle.Network()
    with pytest.raises(tensoracle.InvalidArgument, match="RANDOM_UNIFORM makes float32, float16 or bfloat16"):
        net.add_fill((3,), trt.FillOperation.RANDOM_UNIFORM, trt.int32)
    with pytest.raises(tensoracle.InvalidArgument, match="must all be known"):
        net.add_fill((-1, 3), trt.FillOperation.RANDOM_NORMAL, trt.float32)
    layer = net.add_fill((3,), trt.FillOperation.RANDOM_UNIFORM, trt.float32)
    with pytest.raises(tensoracle.InvalidArgument, match="alpha .* <= beta"):
        layer.alpha = 5.0
    with pytest.raises(tensoracle.UnsupportedError, match="constant layer"):
        layer.set_input(0, net.add_input("dims", trt.int32, (1,)))
    with pytest.raises(tensoracle.InvalidArgument, match="not 3"):
        layer.set_input(3, net.add_input("x", trt.float32, ()))
    layer.set_input(1, net.add_input("a16", trt.float16, ()))  # alpha alone: invalid until beta, which is refused
    with pytest.raises(tensoracle.InvalidArgument, match="must be the output's float32"):
        layer.set_input(2, net.add_input("b", trt.float32, ()))
