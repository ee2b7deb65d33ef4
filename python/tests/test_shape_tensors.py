"""add_shape and reshapes whose dims come from shape tensors (TensorRT's `shuffle.set_input(1,
dims)`), end to end: shape inference evaluates the small integer tensors on the host at the
profile's corners and at each execution's input shapes; kernels see concrete dims."""

from __future__ import annotations

import numpy as np
import pytest

import tensoracle
import tensoracle.trt as trt
from layer_cases import build, constant

PROFILE = {"x": tensoracle.InputShape.ranged((1, 1, 384), (2, 8, 384), (4, 16, 384))}


def rng(seed):
    return np.random.default_rng(seed)


def split_heads(net, x):
    """[B, S, 384] -> [B, S, 12, 32] with B and S read from shape(x)."""
    s = net.add_shape(x).get_output(0)
    bs = net.add_gather(s, constant(net, np.array([0, 1], np.int64)), 0).get_output(0)
    dims = net.add_concatenation([bs, constant(net, np.array([12, 32], np.int64))]).get_output(0)
    layer = net.add_shuffle(x)
    layer.set_input(1, dims)
    layer.second_transpose = (0, 2, 1, 3)
    return layer.get_output(0)


def test_split_heads_follows_every_input_shape(device):
    def graph(net):
        x = net.add_input("x", trt.float32, (-1, -1, 384))
        y = split_heads(net, x)
        assert tuple(y.shape) == (-1, -1, -1, -1)
        y.name = "y"
        net.mark_output(y)

    engine = build(graph, PROFILE, device)
    ex = engine.create_execution()
    for b, s in ((2, 8), (4, 16), (1, 1), (3, 5)):
        x = rng(b * 31 + s).standard_normal((b, s, 384)).astype(np.float32)
        y = ex.run({"x": x})["y"]
        assert np.array_equal(y, x.reshape(b, s, 12, 32).transpose(0, 2, 1, 3))


def test_shape_arithmetic_merges_dims(device):
    """[B, S, 384] -> [B * S, 384]: the product of two gathered dims, then concatenated."""

    def graph(net):
        x = net.add_input("x", trt.float32, (-1, -1, 384))
        s = net.add_shape(x).get_output(0)
        b = net.add_gather(s, constant(net, np.array([0], np.int64)), 0).get_output(0)
        t = net.add_gather(s, constant(net, np.array([1], np.int64)), 0).get_output(0)
        rows = net.add_elementwise(b, t, trt.ElementWiseOperation.PROD).get_output(0)
        dims = net.add_concatenation([rows, constant(net, np.array([384], np.int64))]).get_output(0)
        layer = net.add_shuffle(x)
        layer.set_input(1, dims)
        y = layer.get_output(0)
        y.name = "y"
        net.mark_output(y)
        shape = net.add_shape(y).get_output(0)  # the shape tensor itself, as an output
        shape.name = "shape"
        net.mark_output(shape)

    engine = build(graph, PROFILE, device)
    ex = engine.create_execution()
    for b, s in ((4, 16), (2, 3)):
        x = rng(b + s).standard_normal((b, s, 384)).astype(np.float32)
        out = ex.run({"x": x})
        assert np.array_equal(out["y"], x.reshape(b * s, 384))
        assert out["shape"].dtype == np.int64 and out["shape"].tolist() == [b * s, 384]


def test_reshape_dims_that_do_not_fit_fail_when_the_shape_is_set(device):
    """[B, S, 384] -> [B, 100]: fits no input shape of the profile; the build (its corners)
    says which layer and why."""

    def graph(net):
        x = net.add_input("x", trt.float32, (-1, -1, 384))
        s = net.add_shape(x).get_output(0)
        b = net.add_gather(s, constant(net, np.array([0], np.int64)), 0).get_output(0)
        dims = net.add_concatenation([b, constant(net, np.array([100], np.int64))]).get_output(0)
        layer = net.add_shuffle(x)
        layer.set_input(1, dims)
        layer.name = "bad_reshape"
        layer.get_output(0).name = "y"
        net.mark_output(layer.get_output(0))

    with pytest.raises(tensoracle.InvalidArgument, match="bad_reshape.*cannot hold|bad_reshape.*elements"):
        build(graph, PROFILE, device)


def test_reshape_dims_must_be_an_integer_shape_tensor():
    net = tensoracle.Network()
    x = net.add_input("x", trt.float32, (2, 6))
    floats, ints = constant(net, np.array([3.0, 4.0], np.float32)), constant(net, np.array([3, 4], np.int32))
    layer = net.add_shuffle(x)
    with pytest.raises(tensoracle.InvalidArgument, match="input 1 .*1-D int32 or int64 shape tensor"):
        layer.set_input(1, floats)
    layer.set_input(1, ints)  # a constant shape tensor: static dims
    assert tuple(layer.get_output(0).shape) == (3, 4)
    assert net.add_shape(x).get_output(0).dtype == trt.int64


def test_slice_bounds_from_shape_tensors(device):
    """The second half of the last dim, for any input shape: start [0, S/2], size [B, S/2],
    both computed from shape(x) (TensorRT's set_input(1, start) and set_input(2, size))."""

    def graph(net):
        x = net.add_input("x", trt.float32, (-1, -1))
        s = net.add_shape(x).get_output(0)
        half = net.add_elementwise(s, constant(net, np.array([1, 2], np.int64)), trt.ElementWiseOperation.FLOOR_DIV)
        half_s = net.add_gather(half.get_output(0), constant(net, np.array([1], np.int64)), 0).get_output(0)
        b = net.add_gather(s, constant(net, np.array([0], np.int64)), 0).get_output(0)
        start = net.add_concatenation([constant(net, np.array([0], np.int64)), half_s]).get_output(0)
        size = net.add_concatenation([b, half_s]).get_output(0)
        layer = net.add_slice(x, (0, 0), (1, 1), (1, 1))
        layer.set_input(2, size)  # in any order, as TensorRT allows
        layer.set_input(1, start)
        assert layer.get_input(3) is None and layer.get_input(1).name == start.name
        layer.get_output(0).name = "y"
        net.mark_output(layer.get_output(0))

    engine = build(graph, {"x": tensoracle.InputShape.ranged((1, 2), (3, 10), (5, 20))}, device)
    ex = engine.create_execution()
    for b, s in ((3, 10), (5, 20), (1, 7), (2, 2)):
        x = rng(b * 7 + s).standard_normal((b, s)).astype(np.float32)
        y = ex.run({"x": x})["y"]
        assert np.array_equal(y, x[:, s // 2 : s // 2 + s // 2]), (b, s)


def test_slice_fill_value_is_input_4(device):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)

    def graph(net):
        t = net.add_input("x", trt.float32, x.shape)
        fill = constant(net, np.array([-5.0], np.float32))
        layer = net.add_slice(t, (0, -1), (2, 5), (1, 1))
        layer.mode = trt.SampleMode.FILL
        layer.set_input(4, fill)
        assert layer.get_input(4).name == fill.name and layer.get_input(1) is None
        layer.get_output(0).name = "y"
        net.mark_output(layer.get_output(0))

    y = build(graph, {"x": x.shape}, device).create_execution().run({"x": x})["y"]
    expected = np.full((2, 5), -5.0, np.float32)
    expected[:, 1:4] = x
    assert np.array_equal(y, expected)


def test_slice_axes_input_is_refused():
    net = tensoracle.Network()
    x = net.add_input("x", trt.float32, (2, 6))
    axes = constant(net, np.array([1], np.int64))
    layer = net.add_slice(x, (0, 0), (1, 1), (1, 1))
    with pytest.raises(tensoracle.UnsupportedError, match="input 5 \\(axes\\)"):
        layer.set_input(5, axes)


def test_bounds_computed_from_data_are_refused_at_build(device):
    """A reshape whose dims come from a data input (not a shape tensor) cannot be planned."""

    def graph(net):
        x = net.add_input("x", trt.float32, (2, 6))
        dims = net.add_input("dims", trt.int64, (2,))
        layer = net.add_shuffle(x)
        layer.set_input(1, dims)
        layer.name = "from_data"
        layer.get_output(0).name = "y"
        net.mark_output(layer.get_output(0))

    with pytest.raises(tensoracle.BuildError, match="from_data.*cannot compute"):
        build(graph, {"x": (2, 6), "dims": (2,)}, device)


@pytest.mark.parametrize("pick", ["gather", "slice"])
def test_dims_known_at_build_time_fold_even_when_others_are_dynamic(device, pick):
    # 1 / sqrt(x.shape[-1]) as exported models compute attention's scale: the last dim is 384
    # for every input shape, so the Shape -> Gather (or Slice) -> Cast -> Sqrt chain folds into a
    # constant although the batch and sequence are known only at run time.
    def graph(net):
        x = net.add_input("x", trt.float32, (-1, -1, 384))
        s = net.add_shape(x).get_output(0)
        if pick == "gather":
            last = net.add_gather(s, constant(net, np.array([-1], np.int64)), 0).get_output(0)
        else:
            last = net.add_slice(s, (2,), (1,), (1,)).get_output(0)
        f = net.add_cast(last, trt.float32).get_output(0)
        r = net.add_unary(net.add_unary(f, trt.UnaryOperation.SQRT).get_output(0), trt.UnaryOperation.RECIP).get_output(0)
        r = net.add_shuffle(r)
        r.reshape_dims = (1, 1, 1)
        y = net.add_elementwise(x, r.get_output(0), trt.ElementWiseOperation.PROD).get_output(0)
        y.name = "y"
        net.mark_output(y)

    engine = build(graph, PROFILE, device)
    types = [layer.type for layer in engine.layers()]
    assert "shape" not in types and "gather" not in types and "slice" not in types, types
    x = rng(7).standard_normal((3, 5, 384)).astype(np.float32)
    y = engine.create_execution().run({"x": x})["y"]
    np.testing.assert_allclose(y, x / np.sqrt(np.float32(384)), rtol=1e-6)
