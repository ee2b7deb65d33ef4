"""Lifetimes and misuse from Python that must not crash (issue 30): networks, layers and
tensors a graph function keeps stay valid after the build; arrays bound to an execution stay
alive while bound; wrong arguments raise Python errors that say what was expected.

Cases that crashed the interpreter before run in a subprocess, so that the suite survives and
reports them."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import weakref

import numpy as np
import pytest

import tensoracle
import tensoracle.trt as trt
from test_execution_bind import double_engine


def run_script(source: str, *args: str) -> None:
    """Runs `source` in a fresh interpreter; fails with its output when it crashes or asserts."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(source), *args], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"exit status {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"


# ---- networks, layers and tensors kept by a graph function ---------------------------------------

KEPT_BY_GRAPH = """
import gc, sys
import numpy as np
import tensoracle, tensoracle.trt as trt

kept = {}

def graph(net):
    x = net.add_input("x", trt.float32, (2, 4))
    layer = net.add_activation(x, trt.ActivationType.RELU)
    y = layer.get_output(0)
    y.name = "y"
    net.mark_output(y)
    kept.update(net=net, x=x, layer=layer, y=y, num_layers=net.num_layers)

def other(net):  # a second build: new allocations where the first network was
    a = net.add_input("a" * 64, trt.float32, (3, 5))
    b = net.add_unary(a, trt.UnaryOperation.NEG).get_output(0)
    b.name = "b" * 64
    net.mark_output(b)

settings = tensoracle.BuilderSettings(device="cpu", optimization_level=0)
if sys.argv[1] == "build":
    tensoracle.build_serialized_engine(graph, tensoracle.EngineBuild({"x": tensoracle.InputShape.fixed((2, 4))}, settings))
    tensoracle.build_serialized_engine(other, tensoracle.EngineBuild({"a" * 64: tensoracle.InputShape.fixed((3, 5))}, settings))
else:
    spec = tensoracle.TensorSpec(trt.float32, (2, 4))
    tensoracle.open_engine(graph, tensoracle.EngineBuild({"x": tensoracle.InputShape.fixed((2, 4))}, settings),
                           name="kept", graph_version="1", weights=[], io=tensoracle.EngineIO({"x": spec}, {"y": spec}),
                           cache_dir=sys.argv[2])
gc.collect()

net, x, layer, y = kept["net"], kept["x"], kept["layer"], kept["y"]
assert x.name == "x" and y.name == "y", (x.name, y.name)
assert layer.get_output(0).name == "y" and layer.get_input(0).name == "x"
assert net.num_layers == kept["num_layers"] and net.get_output(0).name == "y"
# The kept network is an ordinary network now: it may grow, and its tensors belong to it only.
z = net.add_unary(net.get_input(0), trt.UnaryOperation.ABS).get_output(0)
assert z.dtype == trt.float32 and tuple(z.shape) == (2, 4)
y.name = "renamed"
assert net.get_output(0).name == "renamed"

def uses_old_tensor(new):
    new.add_input("x", trt.float32, (2, 4))
    new.mark_output(x)
try:
    tensoracle.build_serialized_engine(uses_old_tensor, tensoracle.EngineBuild({"x": tensoracle.InputShape.fixed((2, 4))}, settings))
    raise SystemExit("a tensor of another network was accepted")
except tensoracle.InvalidArgument as e:
    assert "belongs to another network" in str(e), e
del kept, net, layer, y
gc.collect()
assert x.name == "x"  # a tensor alone keeps its network alive
"""


def test_network_kept_by_the_graph_function_stays_valid_after_the_build():
    run_script(KEPT_BY_GRAPH, "build")


def test_network_kept_by_an_open_engine_graph_function_stays_valid(tmp_path):
    run_script(KEPT_BY_GRAPH, "open", str(tmp_path))


# Every binding that returns a layer or a tensor: its result must keep the network alive on its
# own. add_plugin needs a compiled plugin library (test_plugins.py builds one); it returns its
# layer with the same policy as every other add_* method.
EVERY_BINDING = """
import gc
import numpy as np
import tensoracle, tensoracle.trt as trt

f32 = np.float32
kept = []  # (object, what it looked like at the end of the graph function)
objects = []


def describe(obj):
    if isinstance(obj, (trt.ILoop, trt.IIfConditional)):
        return ("control flow", obj.name)
    if isinstance(obj, trt.ITensor):
        return ("tensor", obj.name, obj.dtype, tuple(obj.shape))
    return ("layer", obj.name, trt.ILayer.type.__get__(obj), [obj.get_output(i).name for i in range(obj.num_outputs)])


def keep(obj):
    objects.append(obj)
    if isinstance(obj, trt.ILayer):
        for t in [obj.get_output(i) for i in range(obj.num_outputs)] + [obj.get_input(i) for i in range(obj.num_inputs)]:
            if t is not None:
                keep(t)
    return obj

called = set()

def graph(net):
    def add(method, *args):
        called.add(method)
        return keep(getattr(net, method)(*args))
    x = add("add_input", "x", trt.float32, (1, 2, 4, 4))
    m = add("add_input", "m", trt.float32, (4, 4))
    c = add("add_constant", (4, 4), np.ones((4, 4), f32)).get_output(0)
    mm = add("add_matrix_multiply", m, trt.MatrixOperation.NONE, c, trt.MatrixOperation.NONE)
    add("add_elementwise", m, c, trt.ElementWiseOperation.SUM)
    add("add_activation", m, trt.ActivationType.RELU)
    add("add_cast", m, trt.float16)
    scale = net.add_constant((1,), np.array([0.5], f32)).get_output(0)
    q = add("add_quantize", m, scale, trt.int8)
    add("add_dequantize", q.get_output(0), scale, trt.float32)
    add("add_shuffle", m)
    add("add_identity", m)
    add("add_unary", m, trt.UnaryOperation.EXP)
    add("add_reduce", m, trt.ReduceOperation.SUM, 1, False)
    add("add_softmax", m)
    add("add_concatenation", [m, c])
    add("add_slice", m, (0, 0), (2, 2), (1, 1))
    idx = net.add_constant((2,), np.array([0, 1], np.int32)).get_output(0)
    add("add_gather", m, idx, 0)
    add("add_gather_v2", m, idx, trt.GatherMode.DEFAULT)
    add("add_shape", m)
    add("add_topk", m, trt.TopKOperation.MAX, 2, 2)
    cond = net.add_elementwise(m, c, trt.ElementWiseOperation.GREATER).get_output(0)
    add("add_select", cond, m, c)
    add("add_padding_nd", x, (1, 1), (1, 1))
    add("add_convolution_nd", x, 3, (3, 3), np.ones((3, 2, 3, 3), f32))
    add("add_deconvolution_nd", x, 3, (3, 3), np.ones((2, 3, 3, 3), f32))
    add("add_pooling_nd", x, trt.PoolingType.MAX, (2, 2))
    s = net.add_constant((1, 2, 1, 1), np.ones((1, 2, 1, 1), f32)).get_output(0)
    add("add_normalization", x, s, s, 0b1100)
    add("add_resize", x)
    add("add_einsum", [m, c], "ij,jk->ik")
    add("add_attention", x, x, x, trt.AttentionNormalizationOp.SOFTMAX, True)
    add("add_scale", x, trt.ScaleMode.CHANNEL, np.ones(2, f32))
    add("add_scale_nd", x, trt.ScaleMode.UNIFORM, None, np.ones(1, f32), None, 1)
    add("add_parametric_relu", x, s)
    add("add_lrn", x, 3, 0.1, 0.75, 1.0)
    axis = net.add_constant((), np.array(1, np.int32)).get_output(0)
    add("add_cumulative", m, axis, trt.CumulativeOperation.SUM, False, False)
    rows = net.add_constant((2, 4), np.zeros((2, 4), np.int32)).get_output(0)
    add("add_scatter", m, rows, net.add_constant((2, 4), np.ones((2, 4), f32)).get_output(0), trt.ScatterMode.ELEMENT)
    onoff = net.add_constant((2,), np.array([0, 1], f32)).get_output(0)
    add("add_one_hot", idx, onoff, net.add_constant((), np.array(3, np.int32)).get_output(0), -1)
    one = net.add_constant((1,), np.array([0], np.int32)).get_output(0)
    add("add_unsqueeze", m, one)
    add("add_squeeze", net.add_unsqueeze(m, one).get_output(0), one)
    add("add_reverse_sequence", m, net.add_constant((4,), np.array([1, 2, 3, 4], np.int32)).get_output(0))
    add("add_fill", (3,), trt.FillOperation.LINSPACE, trt.float32)
    loop = add("add_loop")
    loop.add_trip_limit(net.add_constant((), np.array(2, np.int32)).get_output(0), trt.TripLimit.COUNT)
    rec = keep(loop.add_recurrence(m))
    rec.set_input(1, keep(net.add_activation(rec.get_output(0), trt.ActivationType.RELU)).get_output(0))
    keep(keep(loop.add_loop_output(rec.get_output(0), trt.LoopOutput.LAST_VALUE)).loop)
    branch = add("add_if_conditional")
    keep(branch.set_condition(net.add_constant((), np.array(True)).get_output(0)))
    inside = keep(branch.add_input(m)).get_output(0)
    keep(keep(branch.add_output(inside, inside)).conditional)
    y = mm.get_output(0)
    y.name = "y"
    net.mark_output(y)
    x2 = net.add_unary(x, trt.UnaryOperation.NEG).get_output(0)
    x2.name = "x2"
    net.mark_output(x2)
    for i in range(net.num_layers):
        keep(net.get_layer(i))
    for i in range(net.num_inputs):
        keep(net.get_input(i))
    for i in range(net.num_outputs):
        keep(net.get_output(i))
    kept.extend((obj, describe(obj)) for obj in objects)
    objects.clear()

settings = tensoracle.BuilderSettings(device="cpu", optimization_level=0)
decl = tensoracle.EngineBuild({"x": tensoracle.InputShape.fixed((1, 2, 4, 4)), "m": tensoracle.InputShape.fixed((4, 4))}, settings)
tensoracle.build_serialized_engine(graph, decl)
missing = {n for n in dir(tensoracle.Network) if n.startswith("add_")} - called - {"add_plugin"}
assert not missing, f"add_* bindings the test does not call: {sorted(missing)}"

# New networks of the same shape, built where the first one was.
for _ in range(3):
    saved = list(kept)
    kept.clear()
    tensoracle.build_serialized_engine(graph, decl)
    kept[:0] = saved
    gc.collect()

for obj, before in kept:
    assert describe(obj) == before, (describe(obj), before)
print(len(kept))
"""


def test_every_layer_and_tensor_binding_keeps_its_network_alive():
    run_script(EVERY_BINDING)


def test_python_created_network_outlives_its_name_only_through_its_objects():
    def make():
        net = tensoracle.Network()
        x = net.add_input("x", trt.float32, (2,))
        return net.add_unary(x, trt.UnaryOperation.ABS)

    layer = make()
    gc.collect()
    assert layer.get_input(0).name == "x" and layer.type == trt.LayerType.UNARY


# ---- executions keep the arrays bound to them ------------------------------------------------------


@pytest.fixture(scope="module")
def engine():
    return double_engine()


def test_bound_arrays_live_while_they_are_bound(engine):
    ex = engine.create_execution()
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = np.zeros((3, 4), np.float32)
    x_alive, y_alive = weakref.ref(x), weakref.ref(y)
    expected = 2 * x
    ex.set_tensor_address("x", x)
    ex.set_tensor_address("y", y)
    del x, y
    gc.collect()
    assert x_alive() is not None and y_alive() is not None, "the execution let a bound array go"
    ex.enqueue()
    np.testing.assert_array_equal(y_alive(), expected)
    # Binding something else to a tensor lets the previous array go.
    ex.set_tensor_address("y", np.zeros((3, 4), np.float32))
    gc.collect()
    assert y_alive() is None
    ex.set_tensor_address("x", 0)  # a raw address: the caller's business
    gc.collect()
    assert x_alive() is None


def test_bound_arrays_are_released_with_the_execution(engine):
    ex = engine.create_execution()
    x = np.ones((2, 4), np.float32)
    alive = weakref.ref(x)
    ex.set_tensor_address("x", x)
    del x, ex
    gc.collect()
    assert alive() is None


def test_read_only_arrays_bind_as_inputs_and_are_refused_as_outputs(engine):
    ex = engine.create_execution()
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    x.setflags(write=False)
    y = np.zeros((2, 4), np.float32)
    ex.set_tensor_address("x", x)
    ex.set_tensor_address("y", y)
    ex.enqueue()
    np.testing.assert_array_equal(y, 2 * x)
    y.setflags(write=False)
    with pytest.raises(tensoracle.InvalidArgument, match=r"set_tensor_address\('y'\): the array is read-only"):
        ex.set_tensor_address("y", y)


# ---- wrong arguments: Python errors that name the parameter --------------------------------------------


def test_run_refuses_keys_that_are_not_names(engine):
    ex = engine.create_execution()
    with pytest.raises(TypeError, match=r"run\(inputs\): keys are input names \(str\); got int"):
        ex.run({1: np.ones((2, 4), np.float32)})


@pytest.mark.parametrize("address", [-1, 2**64, -(2**70), True])
def test_set_tensor_address_refuses_ints_that_are_not_addresses(engine, address):
    ex = engine.create_execution()
    with pytest.raises(tensoracle.InvalidArgument, match=r"set_tensor_address\('x'\): address .* is not an address"):
        ex.set_tensor_address("x", address)


@pytest.mark.parametrize("stream", [-1, 2**64])
def test_enqueue_refuses_ints_that_are_not_streams(engine, stream):
    ex = engine.create_execution()
    with pytest.raises(tensoracle.InvalidArgument, match=r"stream: .* is not a cudaStream_t"):
        ex.enqueue(stream)


def test_plugin_fields_of_the_wrong_type_raise_type_errors():
    net = tensoracle.Network()
    x = net.add_input("x", trt.float32, (2,))
    with pytest.raises(TypeError, match=r"add_plugin\(fields\): field names are str; got int"):
        net.add_plugin("any", "1", [x], {1: 2})
    with pytest.raises(TypeError, match=r"add_plugin\(fields\): field 'a': type is a PluginFieldType or None; got str"):
        net.add_plugin("any", "1", [x], [tensoracle.PluginField("a", np.int32(1), "int32")])
    with pytest.raises(TypeError, match=r"add_plugin\(fields\): expected a dict \{name: value\} or PluginField objects"):
        net.add_plugin("any", "1", [x], 5)
