"""Execution.set_tensor_address with tensors (DLPack) on the CPU backend: the shape of an input
comes from the array, and type, contiguity, memory kind and output shape are checked."""

from __future__ import annotations

import numpy as np
import pytest

import tensoracle
import tensoracle.trt as trt


def double_engine():
    def graph(net):
        x = net.add_input("x", trt.float32, (-1, 4))
        y = net.add_elementwise(x, x, trt.ElementWiseOperation.SUM).get_output(0)
        y.name = "y"
        net.mark_output(y)

    decl = tensoracle.EngineBuild({"x": tensoracle.InputShape.ranged((1, 4), (2, 4), (8, 4))},
                                  tensoracle.BuilderSettings(device="cpu"))
    return tensoracle.deserialize_engine(tensoracle.build_serialized_engine(graph, decl))


def test_numpy_arrays_bind_by_dlpack_and_set_the_input_shape():
    engine = double_engine()
    assert engine.device == "cpu"
    ex = engine.create_execution()
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = np.zeros((3, 4), np.float32)
    ex.set_tensor_address("x", x)
    assert tuple(ex.get_tensor_shape("x")) == (3, 4)
    ex.set_tensor_address("y", y)
    ex.enqueue()
    np.testing.assert_array_equal(y, 2 * x)
    ex.graph_replay = False  # accepted (and ignored) on the CPU
    assert ex.graph_replay is False


def test_bound_arrays_are_checked():
    ex = double_engine().create_execution()
    with pytest.raises(tensoracle.InvalidArgument, match="dtype is float16, the engine's input is float32"):
        ex.set_tensor_address("x", np.zeros((2, 4), np.float16))
    with pytest.raises(tensoracle.InvalidArgument, match="not C-contiguous"):
        ex.set_tensor_address("x", np.zeros((4, 2), np.float32).T)
    with pytest.raises(tensoracle.InvalidArgument, match="outside the profile"):
        ex.set_tensor_address("x", np.zeros((9, 4), np.float32))
    ex.set_tensor_address("x", np.zeros((2, 4), np.float32))
    with pytest.raises(tensoracle.InvalidArgument, match=r"not the output's shape \(2, 4\)"):
        ex.set_tensor_address("y", np.zeros((3, 4), np.float32))
    with pytest.raises(tensoracle.InvalidArgument, match="expected an int address or a tensor"):
        ex.set_tensor_address("x", "nope")
    with pytest.raises(tensoracle.InvalidArgument, match="takes no stream"):
        ex.enqueue(1234)
