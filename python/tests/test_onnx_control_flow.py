"""ONNX If and Loop through trt.OnnxParser against onnxruntime: an If on a run-time condition
(both branches, a select), an If whose condition is known when parsing (one branch), a counted
Loop with loop-carried values, scan outputs and the iteration number, an If inside a Loop's
body, and the loops tensoracle does not build (a condition that is not known to stay true)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensoracle
from test_onnx_parser import model, n, ort_run, parse, run, vi

RNG = np.random.default_rng(35)


def branch(name, nodes, outputs, inits=()):
    return helper.make_graph(nodes, name, [], outputs, list(inits))


def if_model(cond_from_input=True):
    then_g = branch("then", [n("Relu", ["x"], ["t0"]), n("Add", ["t0", "t0"], ["t1"])], [vi("t1", [2, 3])])
    else_g = branch("else", [n("Neg", ["x"], ["e0"])], [vi("e0", [2, 3])])
    nodes = [n("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="choose")]
    inputs = [vi("x", [2, 3])]
    inits = []
    if cond_from_input:
        inputs.append(vi("c", [], TensorProto.BOOL))
    else:
        inits.append(numpy_helper.from_array(np.array(False), "c"))
    return model(nodes, inputs, [vi("y", [2, 3])], inits)


@pytest.mark.parametrize("cond", [True, False])
def test_if_on_a_run_time_condition_matches_onnxruntime(cond):
    m = if_model()
    ok, net, p = parse(m)
    assert ok, [p.get_error(i).desc() for i in range(p.num_errors)]
    feeds = {"x": RNG.uniform(-1, 1, (2, 3)).astype(np.float32), "c": np.array(cond)}
    np.testing.assert_array_equal(run(net, feeds)["y"], ort_run(m, feeds)["y"])


def test_if_with_a_known_condition_keeps_one_branch():
    m = if_model(cond_from_input=False)
    ok, net, p = parse(m)
    assert ok
    kinds = {net.get_layer(i).type for i in range(net.num_layers)}
    assert tensoracle.trt.LayerType.CONDITIONAL_OUTPUT not in kinds and tensoracle.trt.LayerType.ACTIVATION not in kinds
    feeds = {"x": RNG.uniform(-1, 1, (2, 3)).astype(np.float32)}
    np.testing.assert_array_equal(run(net, feeds)["y"], ort_run(m, feeds)["y"])


def loop_model(trips, with_if=False):
    """acc += x * (i + 1) over `trips` iterations; the scan output stacks acc after each."""
    body_nodes = [
        n("Cast", ["i"], ["i_f"], to=TensorProto.FLOAT),
        n("Add", ["i_f", "one"], ["k"]),
        n("Mul", ["x", "k"], ["xk"]),
    ]
    if with_if:
        # Halve xk on odd iterations: an If on a value that changes per iteration.
        body_nodes += [
            n("Mod", ["i", "two"], ["r"]),
            n("Equal", ["r", "one_i"], ["odd"]),
            n("If", ["odd"], ["xk2"], then_branch=branch("h", [n("Mul", ["xk", "half"], ["h0"])], [vi("h0", [3])]),
              else_branch=branch("k", [n("Identity", ["xk"], ["k0"])], [vi("k0", [3])])),
            n("Add", ["acc_in", "xk2"], ["acc_out"]),
        ]
    else:
        body_nodes.append(n("Add", ["acc_in", "xk"], ["acc_out"]))
    body_nodes += [n("Identity", ["cond_in"], ["cond_out"]), n("Identity", ["acc_out"], ["scan"])]
    body = helper.make_graph(
        body_nodes, "body",
        [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL), vi("acc_in", [3])],
        [vi("cond_out", [], TensorProto.BOOL), vi("acc_out", [3]), vi("scan", [3])])
    inits = [numpy_helper.from_array(np.array(trips, np.int64), "M"), numpy_helper.from_array(np.array(True), "go"),
             numpy_helper.from_array(np.zeros(3, np.float32), "acc0"), numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(2, np.int64), "two"), numpy_helper.from_array(np.array(1, np.int64), "one_i"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    nodes = [n("Loop", ["M", "go", "acc0"], ["acc", "scans"], body=body, name="accumulate")]
    return model(nodes, [vi("x", [3])], [vi("acc", [3]), vi("scans", [trips, 3])], inits)


@pytest.mark.parametrize("trips", [1, 4])
@pytest.mark.parametrize("with_if", [False, True])
def test_counted_loop_matches_onnxruntime(trips, with_if):
    m = loop_model(trips, with_if)
    ok, net, p = parse(m)
    assert ok, [p.get_error(i).desc() for i in range(p.num_errors)]
    feeds = {"x": RNG.uniform(-1, 1, 3).astype(np.float32)}
    got, ref = run(net, feeds), ort_run(m, feeds)
    for name in ("acc", "scans"):
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-6, atol=1e-6)


def test_loops_tensoracle_does_not_build_are_refused():
    # The condition is a graph input: a while loop.
    m = loop_model(3)
    m.graph.initializer.remove(next(i for i in m.graph.initializer if i.name == "go"))
    m.graph.input.append(vi("go", [], TensorProto.BOOL))
    ok, net, p = parse(m)
    assert not ok and p.get_error(0).node_operator() == "Loop"
    assert "counted loops only" in p.get_error(0).desc()
    # No trip count at all.
    m = loop_model(3)
    m.graph.node[0].input[0] = ""
    ok, net, p = parse(m)
    assert not ok and "while loop" in p.get_error(0).desc()
    # An operator the body cannot convert names the body's node.
    m = loop_model(3)
    m.graph.node[0].attribute[0].g.node[0].op_type = "NoSuchOp"
    ok, net, p = parse(m)
    assert not ok and "body node 0" in p.get_error(0).desc() and "NoSuchOp" in p.get_error(0).desc()
