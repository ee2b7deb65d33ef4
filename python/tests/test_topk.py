"""add_topk end to end: both outputs against a reference written here (a stable sort of each
slice in Python: largest or smallest first, equal values by ascending index, NaN larger than
every number), every type topk takes, every axis, dynamic shapes, dead outputs, and the
parameter checks when the layer is added."""

from __future__ import annotations


import ml_dtypes
import numpy as np
import pytest

import tensoracle
import tensoracle.trt as trt
from layer_cases import build, rng_for

TYPES = {
    "f32": (np.dtype(np.float32), trt.float32),
    "f16": (np.dtype(np.float16), trt.float16),
    "bf16": (np.dtype(ml_dtypes.bfloat16), trt.bfloat16),
    "i32": (np.dtype(np.int32), trt.int32),
    "i64": (np.dtype(np.int64), trt.int64),
}
OPS = {"MAX": trt.TopKOperation.MAX, "MIN": trt.TopKOperation.MIN}


def sample(rng, shape, name: str) -> np.ndarray:
    """Values with many ties (small integers), plus NaN and infinities for float types."""
    dt = TYPES[name][0]
    if name.startswith("i"):
        info = np.iinfo(dt)
        x = rng.integers(-4, 5, shape).astype(dt)
        x.flat[0], x.flat[-1] = info.min, info.max  # extremes must not overflow the ordering
        return x
    x = (rng.integers(-8, 9, shape) / 4).astype(np.float32)
    flat = x.reshape(-1)
    for v, at in ((np.nan, 3), (np.inf, 7), (-np.inf, 11), (np.nan, 13)):
        if at < flat.size:
            flat[at] = v
    return x.astype(dt)


def reference(x: np.ndarray, op: str, k: int, axis: int):
    floating = x.dtype.kind not in "iu"  # ml_dtypes' bfloat16 has kind "V"
    moved = np.moveaxis(x, axis, -1)
    values = np.empty(moved.shape[:-1] + (k,), x.dtype)
    indices = np.empty(moved.shape[:-1] + (k,), np.int32)
    for idx in np.ndindex(moved.shape[:-1]):
        row = moved[idx]
        keyed = [(float(v) if floating else int(v), j) for j, v in enumerate(row)]

        def key(item):
            v, j = item
            nan = isinstance(v, float) and np.isnan(v)
            return (0 if nan else 1, -v if not nan else 0, j) if op == "MAX" else (1 if nan else 0, v if not nan else 0, j)

        order = [j for _, j in sorted(keyed, key=key)][:k]
        indices[idx] = order
        values[idx] = row[order]
    return np.moveaxis(values, -1, axis), np.moveaxis(indices, -1, axis)


def topk_graph(shape, name, op, k, axes, outputs=("v", "i")):
    def graph(net):
        x = net.add_input("x", TYPES[name][1], shape)
        layer = net.add_topk(x, OPS[op], k, axes)
        layer.name = "top"
        for i, out in enumerate(("v", "i")):
            if out in outputs:
                layer.get_output(i).name = out
                net.mark_output(layer.get_output(i))

    return graph


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("name", list(TYPES))
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("axis,k", [(0, 2), (1, 1), (1, 5), (2, 3), (2, 6)])
def test_topk_values_and_indices(device, name, op, axis, k):
    x = sample(rng_for(name, op, axis, k), (4, 5, 6), name)
    engine = build(topk_graph(x.shape, name, op, k, 1 << axis), {"x": x.shape}, device)
    out = engine.create_execution().run({"x": x})
    values, indices = reference(x, op, k, axis)
    assert same(out["i"], indices), f"indices\n{out['i']}\nexpected\n{indices}"
    assert same(out["v"], values)  # the same bytes: copied, never converted


def test_topk_dynamic_shape_and_large_slices(device):
    """Dynamic batch; slices longer than a cache line of keys; every row distinct from its
    neighbours so that a wrong stride shows."""
    rng = rng_for("dynamic")
    engine = build(
        topk_graph((-1, 300), "f32", "MAX", 17, 2),
        {"x": tensoracle.InputShape.ranged((1, 300), (4, 300), (9, 300))},
        device,
    )
    ex = engine.create_execution()
    for batch in (9, 1, 4):
        x = rng.standard_normal((batch, 300)).astype(np.float32)
        out = ex.run({"x": x})
        order = np.argsort(-x, axis=1, kind="stable")[:, :17]
        assert np.array_equal(out["i"], order.astype(np.int32))
        assert np.array_equal(out["v"], np.take_along_axis(x, order, 1))


def test_one_node_writes_both_outputs_whichever_are_read(device):
    """topk is one node that writes values and indices in one run (a multi-output node), whether
    the network reads both or one; the one it does not read stays inside the engine."""
    x = sample(rng_for("dead"), (3, 8), "f32")
    values, indices = reference(x, "MIN", 2, 1)
    for outputs in (("v", "i"), ("i",), ("v",)):
        engine = build(topk_graph(x.shape, "f32", "MIN", 2, 2, outputs), {"x": x.shape}, device)
        layers = engine.layers()
        assert [layer.name for layer in layers] == ["top"]
        assert len(layers[0].outputs) == 2 and layers[0].output == layers[0].outputs[0]
        for name in outputs:
            assert name == layers[0].outputs[("v", "i").index(name)]
        out = engine.create_execution().run({"x": x})
        assert sorted(out) == sorted(outputs)
        for name in outputs:
            assert same(out[name], values if name == "v" else indices)


def test_layer_properties_and_outputs():
    net = tensoracle.Network()
    x = net.add_input("x", trt.float16, (2, 9, 4))
    layer = net.add_topk(x, trt.TopKOperation.MIN, 3, 2)
    assert isinstance(layer, trt.ITopKLayer) and layer.type == trt.LayerType.TOPK
    assert (layer.op, layer.k, layer.axes, layer.num_outputs) == (trt.TopKOperation.MIN, 3, 2, 2)
    assert layer.get_output(0).dtype == trt.float16 and tuple(layer.get_output(0).shape) == (2, 3, 4)
    assert layer.get_output(1).dtype == trt.int32 and tuple(layer.get_output(1).shape) == (2, 3, 4)
    layer.k, layer.axes = 4, 4
    assert tuple(layer.get_output(1).shape) == (2, 9, 4)


@pytest.mark.parametrize(
    "dtype,k,axes,message",
    [
        (trt.float32, 0, 2, "k 0 must be in [1, 3840]"),
        (trt.float32, 3841, 2, "k 3841 must be in [1, 3840]"),
        (trt.float32, 1, 3, "axes 3 must set exactly one bit"),
        (trt.float32, 1, 8, "axes 8 must set exactly one bit"),
        (trt.float32, 1, 0, "axes 0 must set exactly one bit"),
        (trt.bool, 1, 1, "topk takes float32, float16, bfloat16, int32 or int64"),
        (trt.int8, 1, 1, "topk takes float32"),
    ],
)
def test_invalid_parameters_name_the_layer(dtype, k, axes, message):
    net = tensoracle.Network()
    x = net.add_input("x", dtype, (2, 9, 4))

    with pytest.raises(tensoracle.InvalidArgument, match="topk") as info:
        net.add_topk(x, trt.TopKOperation.MAX, k, axes)
    assert message in str(info.value)


def test_k_beyond_the_dimension_fails_the_build_naming_the_layer():
    """Checked when the network is complete (k and axes may be set in either order)."""
    graph = topk_graph((2, 9, 4), "f32", "MAX", 10, 2)
    with pytest.raises(tensoracle.InvalidArgument, match="layer 'top'.*k 10 is larger than dimension 1"):
        build(graph, {"x": (2, 9, 4)}, "cpu")
