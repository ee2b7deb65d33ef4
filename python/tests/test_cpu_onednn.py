"""The CPU backend's oneDNN tactics: which nodes get them, which epilogue ops run as
post-ops, where convolutions keep their outputs channels-last, and that every such choice
computes what the layers define (float64 references from PyTorch and NumPy).

The conformance suites check single layers; these check the choices that depend on a node's
neighbours: a channels-last output is only legal when every reader is a oneDNN convolution,
and a fused operand only when oneDNN can broadcast it."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tensoracle
import tensoracle.trt as trt
from conftest import onednn_version
from layer_cases import build, constant

# The tactics checked here exist only where tensoracle was built with oneDNN (Debian's
# libdnnl-dev, which `make` installs); a build without it runs the same layers with OpenBLAS
# and its own kernels, which the conformance suites check.
pytestmark = pytest.mark.skipif(not onednn_version(), reason="this build of tensoracle has no oneDNN")

CONV = "cpu.conv.onednn"
CONV_CL = (CONV, "channels_last")  # its output stored channels-last (LayerInfo.output_layout)
GEMM = "cpu.gemm.onednn"
A = trt.ActivationType
E = trt.ElementWiseOperation


def rng_for(name: str) -> np.random.Generator:
    return np.random.default_rng([ord(c) for c in name])


def rand(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def t64(a):
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


def tactics(engine) -> dict:
    """Per layer: its tactic (with its output's layout where that is not linear) and fused layers."""
    return {
        layer.name: (
            layer.tactic if layer.output_layout == "linear" else (layer.tactic, layer.output_layout),
            tuple(layer.fused),
        )
        for layer in engine.layers()
    }


def conv(net, x, w, b, pad, name):
    layer = net.add_convolution_nd(x, w.shape[0], w.shape[2:], w, b)
    layer.padding_nd = (pad, pad)
    layer.name = name
    return layer.get_output(0)


def relu(net, x, name):
    layer = net.add_activation(x, A.RELU)
    layer.name = name
    return layer.get_output(0)


def add(net, a, b, name):
    layer = net.add_elementwise(a, b, E.SUM)
    layer.name = name
    return layer.get_output(0)


def run(engine, inputs):
    ex = engine.create_execution()
    return ex.run(inputs)


# ---- convolutions: channels-last between oneDNN convolutions --------------------------------

W = {}


def weights():
    if not W:
        rng = rng_for("residual")
        W.update(
            wa=rand(rng, (8, 8, 3, 3), 0.2), ba=rand(rng, (8,)),
            wb=rand(rng, (8, 8, 3, 3), 0.2), bb=rand(rng, (8,)),
            wc=rand(rng, (4, 8, 1, 1), 0.3), bc=rand(rng, (4,)),
        )
    return W


def residual_graph(net):
    """a = relu(convA(x)); b = relu(convB(a) + a); y = convC(b)."""
    w = weights()
    x = net.add_input("x", trt.float32, (-1, 8, 10, 10))
    a = relu(net, conv(net, x, w["wa"], w["ba"], 1, "convA"), "reluA")
    b = relu(net, add(net, conv(net, a, w["wb"], w["bb"], 1, "convB"), a, "addB"), "reluB")
    y = conv(net, b, w["wc"], w["bc"], 0, "convC")
    y.name = "y"
    net.mark_output(y)


def residual_reference(x):
    w = {k: t64(v) for k, v in weights().items()}
    a = F.relu(F.conv2d(t64(x), w["wa"], w["ba"], padding=1))
    b = F.relu(F.conv2d(a, w["wb"], w["bb"], padding=1) + a)
    return F.conv2d(b, w["wc"], w["bc"]).numpy()


def test_convolutions_between_convolutions_write_channels_last():
    engine = build(residual_graph, {"x": tensoracle.InputShape.ranged((1, 8, 10, 10), (2, 8, 10, 10), (3, 8, 10, 10))}, "cpu")
    t = tactics(engine)
    assert t["convA"] == (CONV_CL, ("reluA",))
    assert t["convB"] == (CONV_CL, ("addB", "reluB"))
    assert t["convC"] == (CONV, ())  # the network's output stays plain
    # Every batch of the profile, twice each on one execution (plans are cached per shape).
    ex = engine.create_execution()
    for batch in (3, 1, 2, 3, 1):
        x = rand(rng_for(f"x{batch}"), (batch, 8, 10, 10))
        y = ex.run({"x": x})["y"]
        np.testing.assert_allclose(y, residual_reference(x), rtol=0, atol=2e-5, err_msg=f"batch {batch}")


def test_inspect_and_the_plan_show_which_values_are_stored_channels_last(cli, tmp_path):
    """The layout is the value's (the plan's "layout"), shown by `tensoracle inspect` beside its
    producer; the tactic names only the kernel."""
    import json
    import subprocess

    decl = tensoracle.EngineBuild({"x": tensoracle.InputShape.fixed((2, 8, 10, 10))}, tensoracle.BuilderSettings(device="cpu"))
    path = tmp_path / "residual.engine"
    path.write_bytes(tensoracle.build_serialized_engine(residual_graph, decl))
    text = subprocess.run([cli, "inspect", str(path)], capture_output=True, text=True, check=True).stdout
    lines = {line.split()[0]: line for line in text.splitlines() if line.startswith("  conv")}
    assert "output channels-last" in lines["convA"] and "output channels-last" in lines["convB"], text
    assert "output channels-last" not in lines["convC"], text
    plan = json.loads(subprocess.run([cli, "inspect", "--json", str(path)], capture_output=True, text=True, check=True).stdout)["plan"]
    layouts = {plan["values"][n["output"]]["name"]: plan["values"][n["output"]]["layout"] for n in plan["nodes"]}
    assert sorted(layouts.values()) == ["channels_last", "channels_last", "linear"], layouts
    assert {n["tactic"]["kernel"] for n in plan["nodes"]} == {CONV}


POOL_CL = ("cpu.pooling", "channels_last")


@pytest.mark.parametrize("kind", ["MAX", "AVERAGE"])
def test_a_pooling_between_convolutions_keeps_the_chain_channels_last(kind):
    """A ResNet stem's pattern: a = relu(convA(x)); p = pool3x3/2(a); b = relu(convB(p));
    c = relu(convC(b) + p); y = convD(c). The pooling reads convA's channels-last output and
    writes its own so for convB and convC's residual; every batch of the profile matches torch."""
    w = weights()
    rng = rng_for("pool-chain" + kind)
    wb, bb = rand(rng, (8, 8, 3, 3), 0.2), rand(rng, (8,))

    def graph(net):
        x = net.add_input("x", trt.float32, (-1, 8, 11, 12))
        a = relu(net, conv(net, x, w["wa"], w["ba"], 1, "convA"), "reluA")
        pool = net.add_pooling_nd(a, getattr(trt.PoolingType, kind), (3, 3))
        pool.stride_nd, pool.padding_nd, pool.name = (2, 2), (1, 1), "pool"
        p = pool.get_output(0)
        b = relu(net, conv(net, p, wb, bb, 1, "convB"), "reluB")
        c = relu(net, add(net, conv(net, b, w["wb"], w["bb"], 1, "convC"), p, "addC"), "reluC")
        y = conv(net, c, w["wc"], w["bc"], 0, "convD")
        y.name = "y"
        net.mark_output(y)

    engine = build(graph, {"x": tensoracle.InputShape.ranged((1, 8, 11, 12), (2, 8, 11, 12), (3, 8, 11, 12))}, "cpu")
    t = tactics(engine)
    assert t["convA"] == (CONV_CL, ("reluA",))
    assert t["pool"] == (POOL_CL, ())
    assert t["convB"] == (CONV_CL, ("reluB",)) and t["convC"] == (CONV_CL, ("addC", "reluC"))
    assert t["convD"] == (CONV, ())
    wt = {k: t64(v) for k, v in w.items()}
    ex = engine.create_execution()
    for batch in (3, 1, 2):
        x = rand(rng_for(f"px{batch}"), (batch, 8, 11, 12))
        a = F.relu(F.conv2d(t64(x), wt["wa"], wt["ba"], padding=1))
        p = (F.max_pool2d(a, 3, 2, 1) if kind == "MAX" else F.avg_pool2d(a, 3, 2, 1, count_include_pad=False))
        b = F.relu(F.conv2d(p, t64(wb), t64(bb), padding=1))
        c = F.relu(F.conv2d(b, wt["wb"], wt["bb"], padding=1) + p)
        ref = F.conv2d(c, wt["wc"], wt["bc"]).numpy()
        np.testing.assert_allclose(ex.run({"x": x})["y"], ref, rtol=0, atol=3e-5, err_msg=f"batch {batch}")


def test_a_plain_reader_keeps_the_output_plain():
    """A pooling layer, a graph output, or a second use as a weight-free elementwise input
    each keep the producer's output in the plain layout."""
    w = weights()

    def graph(net):
        x = net.add_input("x", trt.float32, (2, 8, 10, 10))
        a = relu(net, conv(net, x, w["wa"], w["ba"], 1, "convA"), "reluA")
        b = conv(net, a, w["wb"], w["bb"], 1, "convB")  # reads a as data: fine on its own
        pool = net.add_pooling_nd(a, trt.PoolingType.MAX, (2, 2))  # ... but a pooling reads a too
        pool.name = "pool"
        b.name, pool.get_output(0).name = "b", "p"
        net.mark_output(b)
        net.mark_output(pool.get_output(0))

    engine = build(graph, {"x": (2, 8, 10, 10)}, "cpu")
    t = tactics(engine)
    assert t["convA"][0] == CONV and t["convB"][0] == CONV
    x = rand(rng_for("plain"), (2, 8, 10, 10))
    out = run(engine, {"x": x})
    a = F.relu(F.conv2d(t64(x), t64(w["wa"]), t64(w["ba"]), padding=1))
    np.testing.assert_allclose(out["b"], F.conv2d(a, t64(w["wb"]), t64(w["bb"]), padding=1).numpy(), atol=2e-5, rtol=0)
    np.testing.assert_allclose(out["p"], F.max_pool2d(a, 2, stride=1).numpy(), atol=2e-5, rtol=0)


def test_a_residual_behind_an_unfused_op_keeps_the_output_plain():
    """convB's epilogue: softsign (no oneDNN post-op) then the residual add. The add runs as a
    generic pass that reads `a` plainly, so convA must not write channels-last."""
    w = weights()

    def graph(net):
        x = net.add_input("x", trt.float32, (1, 8, 10, 10))
        a = relu(net, conv(net, x, w["wa"], w["ba"], 1, "convA"), "reluA")
        s = net.add_activation(conv(net, a, w["wb"], w["bb"], 1, "convB"), A.SOFTSIGN)
        s.name = "soft"
        y = add(net, s.get_output(0), a, "addB")
        y.name = "y"
        net.mark_output(y)

    engine = build(graph, {"x": (1, 8, 10, 10)}, "cpu")
    t = tactics(engine)
    assert t["convA"][0] == CONV
    assert t["convB"] == (CONV, ("soft", "addB"))
    x = rand(rng_for("soft"), (1, 8, 10, 10))
    a = F.relu(F.conv2d(t64(x), t64(w["wa"]), t64(w["ba"]), padding=1))
    c = F.conv2d(a, t64(w["wb"]), t64(w["bb"]), padding=1)
    np.testing.assert_allclose(run(engine, {"x": x})["y"], (c / (1 + c.abs()) + a).numpy(), atol=2e-5, rtol=0)


def test_grouped_strided_dilated_convolutions_with_channels_last_data():
    rng = rng_for("grouped")
    wd = rand(rng, (8, 1, 3, 3), 0.3)  # depthwise
    wg = rand(rng, (8, 4, 3, 3), 0.2)  # 2 groups, stride 2, dilation 2
    wp = rand(rng, (5, 8, 1, 1), 0.3)

    def graph(net):
        x = net.add_input("x", trt.float32, (2, 8, 13, 11))
        d = net.add_convolution_nd(x, 8, (3, 3), wd, None)
        d.num_groups, d.padding_nd, d.name = 8, (1, 1), "depthwise"
        g = net.add_convolution_nd(d.get_output(0), 8, (3, 3), wg, None)
        g.num_groups, g.stride_nd, g.dilation_nd, g.padding_nd, g.name = 2, (2, 2), (2, 2), (2, 1), "grouped"
        y = net.add_convolution_nd(g.get_output(0), 5, (1, 1), wp, None)
        y.name = "pointwise"
        y.get_output(0).name = "y"
        net.mark_output(y.get_output(0))

    engine = build(graph, {"x": (2, 8, 13, 11)}, "cpu")
    t = tactics(engine)
    assert t["depthwise"][0] == CONV_CL and t["grouped"][0] == CONV_CL and t["pointwise"][0] == CONV
    x = rand(rng, (2, 8, 13, 11))
    ref = F.conv2d(t64(x), t64(wd), padding=1, groups=8)
    ref = F.conv2d(ref, t64(wg), stride=2, dilation=2, padding=(2, 1), groups=2)
    ref = F.conv2d(ref, t64(wp))
    np.testing.assert_allclose(run(engine, {"x": x})["y"], ref.numpy(), atol=2e-5, rtol=0)


# ---- matrix multiplies: post-ops and their fallbacks ----------------------------------------


def gelu64(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


@pytest.mark.parametrize("act", ["GELU_ERF", "RELU", "SIGMOID", "TANH", "LEAKY_RELU", "CLIP"])
def test_matmul_bias_activation_fuse_into_one_primitive(act):
    rng = rng_for("mm" + act)
    x, w, bias = rand(rng, (3, 5, 16)), rand(rng, (1, 16, 24), 0.3), rand(rng, (1, 1, 24))

    def graph(net):
        t = net.add_input("x", trt.float32, (-1, 5, 16))
        m = net.add_matrix_multiply(t, trt.MatrixOperation.NONE, constant(net, w), trt.MatrixOperation.NONE)
        m.name = "fc"
        s = net.add_elementwise(m.get_output(0), constant(net, bias), E.SUM)
        s.name = "bias"
        a = net.add_activation(s.get_output(0), getattr(A, act))
        a.name = "act"
        if act == "LEAKY_RELU":
            a.alpha = 0.1
        if act == "CLIP":
            a.alpha, a.beta = -0.5, 0.7
        a.get_output(0).name = "y"
        net.mark_output(a.get_output(0))

    engine = build(graph, {"x": tensoracle.InputShape.ranged((1, 5, 16), (3, 5, 16), (3, 5, 16))}, "cpu")
    assert tactics(engine)["fc"] == (GEMM, ("bias", "act"))
    z = x.astype(np.float64) @ w.astype(np.float64) + bias
    ref = {
        "GELU_ERF": gelu64, "RELU": lambda v: np.maximum(v, 0), "SIGMOID": lambda v: 1 / (1 + np.exp(-v)),
        "TANH": np.tanh, "LEAKY_RELU": lambda v: np.where(v >= 0, v, 0.1 * v), "CLIP": lambda v: np.clip(v, -0.5, 0.7),
    }[act](z)
    for batch in (3, 1):
        np.testing.assert_allclose(run(engine, {"x": x[:batch]})["y"], ref[:batch], atol=1e-5, rtol=1e-5)


def test_operands_onednn_cannot_broadcast_fall_back_to_the_generic_kernels():
    """A per-row operand [M, 1] and a full-size operand [B, M, N], then a subtraction with the
    operand first (c - x: not a oneDNN post-op), all on one matmul."""
    rng = rng_for("fallback")
    x, w = rand(rng, (2, 4, 8)), rand(rng, (1, 8, 6))
    col, full = rand(rng, (1, 4, 1)), rand(rng, (2, 4, 6))

    def graph(net):
        t = net.add_input("x", trt.float32, (2, 4, 8))
        m = net.add_matrix_multiply(t, trt.MatrixOperation.NONE, constant(net, w), trt.MatrixOperation.NONE)
        m.name = "fc"
        a = net.add_elementwise(m.get_output(0), constant(net, col), E.PROD)
        a.name = "per_row"
        b = net.add_elementwise(a.get_output(0), net.add_input("full", trt.float32, (2, 4, 6)), E.SUM)
        b.name = "full_add"
        c = net.add_elementwise(constant(net, np.ones((1, 1, 1), np.float32)), b.get_output(0), E.SUB)
        c.name = "one_minus"
        c.get_output(0).name = "y"
        net.mark_output(c.get_output(0))

    engine = build(graph, {"x": (2, 4, 8), "full": (2, 4, 6)}, "cpu")
    tactic, fused = tactics(engine)["fc"]
    assert tactic == GEMM and fused == ("per_row", "full_add", "one_minus")
    ref = 1 - ((x.astype(np.float64) @ w) * col + full)
    np.testing.assert_allclose(run(engine, {"x": x, "full": full})["y"], ref, atol=1e-5, rtol=0)


@pytest.mark.parametrize("op0,op1", [("NONE", "NONE"), ("TRANSPOSE", "NONE"), ("NONE", "TRANSPOSE"), ("TRANSPOSE", "TRANSPOSE")])
def test_batched_matmul_of_two_activations_with_broadcast_batches(op0, op1):
    rng = rng_for("bmm" + op0 + op1)
    a = rand(rng, (2, 1, 7, 5) if op0 == "NONE" else (2, 1, 5, 7))
    b = rand(rng, (1, 3, 5, 6) if op1 == "NONE" else (1, 3, 6, 5))

    def graph(net):
        ta, tb = net.add_input("a", trt.float32, a.shape), net.add_input("b", trt.float32, b.shape)
        m = net.add_matrix_multiply(ta, getattr(trt.MatrixOperation, op0), tb, getattr(trt.MatrixOperation, op1))
        m.name = "bmm"
        m.get_output(0).name = "y"
        net.mark_output(m.get_output(0))

    engine = build(graph, {"a": a.shape, "b": b.shape}, "cpu")
    assert tactics(engine)["bmm"][0] == GEMM
    a64 = a.astype(np.float64) if op0 == "NONE" else np.swapaxes(a, -1, -2).astype(np.float64)
    b64 = b.astype(np.float64) if op1 == "NONE" else np.swapaxes(b, -1, -2).astype(np.float64)
    np.testing.assert_allclose(run(engine, {"a": a, "b": b})["y"], a64 @ b64, atol=1e-5, rtol=0)


def test_narrow_types_keep_the_generic_kernels():
    rng = rng_for("f16")
    w = rand(rng, (8, 4)).astype(np.float16)

    def graph(net):
        t = net.add_input("x", trt.float16, (3, 8))
        m = net.add_matrix_multiply(t, trt.MatrixOperation.NONE, constant(net, w), trt.MatrixOperation.NONE)
        m.name = "fc"
        m.get_output(0).name = "y"
        net.mark_output(m.get_output(0))

    engine = build(graph, {"x": (3, 8)}, "cpu")
    assert tactics(engine)["fc"][0] == "cpu.gemm.openblas"


def test_engine_target_names_the_onednn_version():
    engine = build(residual_graph, {"x": (1, 8, 10, 10)}, "cpu")
    target = json.loads(engine.target_json())
    assert isinstance(target, dict) and target["backend"] == "cpu"
    major, minor, patch = (int(p) for p in target["onednn"].split("."))
    assert major >= 2
