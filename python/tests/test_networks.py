"""Per-layer conformance suite, continued: networks of several layers and the fusion passes,
the type rules of every layer, and the errors that name a layer (test_layers.py has the layers
one at a time; the same `device` fixture and references from layer_cases.py)."""

from __future__ import annotations


import ml_dtypes
import numpy as np
import pytest

import tensoracle
import tensoracle.trt as trt
from layer_cases import (  # noqa: F401 (watchdog: an autouse fixture)
    watchdog,
    rng_for,
    add_shuffle,
    ALL_TYPES,
    ARITH,
    CAST_TYPES,
    COMPARISONS,
    FLOATS,
    INTS,
    TRT_OF,
    A,
    E,
    M,
    activation_ref,
    assert_exact,
    assert_float_close,
    build,
    constant,
    dequantize_ref,
    matmul_ref,
    narrow,
    quantize_ref,
    round_to,
    run_network,
)


# ==== multi-layer networks and fusion ========================================================


def layer_summary(engine):
    return [(layer.name, layer.type, list(layer.fused)) for layer in engine.layers()]


@pytest.mark.parametrize("t,out_t", [("f32", "f16"), ("f16", "f32"), ("bf16", "f32"), ("f32", "bf16")])
def test_fusion_matmul_bias_activation_cast(device, t, out_t):
    """matmul -> + bias (1, N) -> LEAKY_RELU -> cast fuse into the matmul; the numbers are those
    of the unfused chain (each intermediate rounded to its type)."""
    rng = rng_for("fuse1", t, out_t)
    x = narrow(rng.standard_normal((4, 8)), t)
    w = narrow(rng.standard_normal((8, 6)), t)
    bias = narrow(rng.standard_normal((1, 6)), t)

    def body(net, v):
        mm = net.add_matrix_multiply(v["x"], M.NONE, constant(net, w), M.NONE)
        mm.name = "mm"
        add = net.add_elementwise(mm.get_output(0), constant(net, bias), E.SUM)
        add.name = "bias"
        act = net.add_activation(add.get_output(0), A.LEAKY_RELU)
        act.alpha = 0.1
        act.name = "act"
        cast = net.add_cast(act.get_output(0), TRT_OF[out_t])
        cast.name = "to_out"
        return cast

    out, engine = run_network(device, {"x": x}, body)
    ref, scale = matmul_ref(x.astype(np.float64), "NONE", w.astype(np.float64), "NONE")
    h = round_to(ref, t)
    h = round_to(h + bias.astype(np.float64), t)
    h = round_to(activation_ref("LEAKY_RELU", h, 0.1, 0.0), t)
    # One ulp of t (the matmul's rounding may land on the other side) carried through the chain.
    slack = 8 * 2.0**-23 * scale + 2 * np.abs(h) * (2.0**-23 if t == "f32" else 2.0**-7 if t == "bf16" else 2.0**-10)
    assert_float_close(out, h, out_t, ulps=1, atol=slack)
    assert layer_summary(engine) == [("mm", "matrix_multiply", ["bias", "act", "to_out"])]


def test_fusion_shared_intermediate(device):
    """A value read by two layers is not fused into its producer; fusion continues after."""
    rng = rng_for("fuse2")
    x = narrow(rng.standard_normal((4, 8)), "f32")
    w = narrow(rng.standard_normal((8, 6)), "f32")

    def graph(net):
        xi = net.add_input("x", trt.float32, (4, 8))
        mm = net.add_matrix_multiply(xi, M.NONE, constant(net, w), M.NONE)
        mm.name = "mm"
        r = net.add_activation(mm.get_output(0), A.RELU)
        r.name = "relu"
        s = net.add_activation(mm.get_output(0), A.SIGMOID)
        s.name = "sigmoid"
        c = net.add_cast(s.get_output(0), trt.float16)
        c.name = "to_half"
        r.get_output(0).name, c.get_output(0).name = "y1", "y2"
        net.mark_output(r.get_output(0))
        net.mark_output(c.get_output(0))

    engine = build(graph, {"x": (4, 8)}, device)
    out = engine.create_execution().run({"x": x})
    ref, scale = matmul_ref(x.astype(np.float64), "NONE", w.astype(np.float64), "NONE")
    assert_float_close(out["y1"], np.maximum(ref, 0), "f32", atol=1e-5 * scale)
    assert_float_close(out["y2"], activation_ref("SIGMOID", ref, 0, 0), "f16", ulps=1, atol=1e-5 * scale)
    assert sorted(layer_summary(engine)) == [
        ("mm", "matrix_multiply", []),
        ("relu", "activation", []),
        ("sigmoid", "activation", ["to_half"]),
    ]


def test_fusion_intermediate_that_is_an_output(device):
    """A network output is never fused away, even with one reader."""
    x = narrow(rng_for("fuse3").standard_normal((3, 4)), "f32")

    def graph(net):
        xi = net.add_input("x", trt.float32, (3, 4))
        a = net.add_activation(xi, A.TANH)
        a.name = "tanh"
        b = net.add_activation(a.get_output(0), A.RELU)
        b.name = "relu"
        a.get_output(0).name, b.get_output(0).name = "t", "y"
        net.mark_output(a.get_output(0))
        net.mark_output(b.get_output(0))

    engine = build(graph, {"x": (3, 4)}, device)
    out = engine.create_execution().run({"x": x})
    t = activation_ref("TANH", x.astype(np.float64), 0, 0)
    assert_float_close(out["t"], t, "f32", ulps=8)
    assert_float_close(out["y"], np.maximum(round_to(t, "f32"), 0), "f32", ulps=8)
    assert sorted(layer_summary(engine)) == [("relu", "activation", []), ("tanh", "activation", [])]


@pytest.mark.parametrize("producer", ["activation", "matmul"])
@pytest.mark.parametrize("input_first", [True, False], ids=["x_minus_h", "h_minus_x"])
def test_fusion_elementwise_with_network_input_operand(device, producer, input_first):
    """h = f(x); y = x - h (or h - x): the SUB, whose other operand is the network input, fuses
    into h's producer and keeps its operand order."""
    rng = rng_for("fuse4", producer, input_first)
    x = narrow(rng.standard_normal((4, 6)), "f32")
    w = narrow(rng.standard_normal((6, 6)), "f32")

    def body(net, v):
        if producer == "activation":
            p = net.add_activation(v["x"], A.TANH)
        else:
            p = net.add_matrix_multiply(v["x"], M.NONE, constant(net, w), M.NONE)
        p.name = "producer"
        h = p.get_output(0)
        sub = net.add_elementwise(v["x"], h, E.SUB) if input_first else net.add_elementwise(h, v["x"], E.SUB)
        sub.name = "residual"
        return sub

    out, engine = run_network(device, {"x": x}, body)
    x64 = x.astype(np.float64)
    if producer == "activation":
        h, scale = np.tanh(x64), np.ones_like(x64)
    else:
        h, scale = matmul_ref(x64, "NONE", w.astype(np.float64), "NONE")
    ref = x64 - h if input_first else h - x64
    assert_float_close(out, ref, "f32", ulps=8, atol=1e-5 * scale)
    kind = "activation" if producer == "activation" else "matrix_multiply"
    assert layer_summary(engine) == [("producer", kind, ["residual"])]


def test_fusion_not_across_an_expanding_broadcast(device):
    """relu(x (4, 1)) + c (1, 5) has dims (4, 5), not relu's (4, 1): computed unfused, right."""
    rng = rng_for("fuse5")
    x = narrow(rng.standard_normal((4, 1)), "f32")
    c = narrow(rng.standard_normal((1, 5)), "f32")

    def body(net, v):
        r = net.add_activation(v["x"], A.RELU)
        r.name = "relu"
        s = net.add_elementwise(r.get_output(0), constant(net, c), E.SUM)
        s.name = "add"
        return s

    out, engine = run_network(device, {"x": x}, body)
    assert_float_close(out, np.maximum(x.astype(np.float64), 0) + c.astype(np.float64), "f32")
    assert sorted(layer_summary(engine)) == [("add", "elementwise", []), ("relu", "activation", [])]


def test_fusion_dynamic_batch(device):
    """matmul + bias + GELU with a dynamic batch: fused, and right at several batch sizes."""
    rng = rng_for("fuse6")
    w = narrow(rng.standard_normal((8, 6)), "f32")
    bias = narrow(rng.standard_normal((1, 6)), "f32")

    def graph(net):
        xi = net.add_input("x", trt.float32, (-1, 8))
        mm = net.add_matrix_multiply(xi, M.NONE, constant(net, w), M.NONE)
        mm.name = "mm"
        add = net.add_elementwise(mm.get_output(0), constant(net, bias), E.SUM)
        add.name = "bias"
        act = net.add_activation(add.get_output(0), A.GELU_ERF)
        act.name = "gelu"
        act.get_output(0).name = "y"
        net.mark_output(act.get_output(0))

    engine = build(graph, {"x": tensoracle.InputShape.ranged((1, 8), (4, 8), (16, 8))}, device)
    assert layer_summary(engine) == [("mm", "matrix_multiply", ["bias", "gelu"])]
    execution = engine.create_execution()
    for rows in (4, 16, 1):
        x = narrow(rng.standard_normal((rows, 8)), "f32")
        out = execution.run({"x": x})["y"]
        ref, scale = matmul_ref(x.astype(np.float64), "NONE", w.astype(np.float64), "NONE")
        h = round_to(round_to(ref, "f32") + bias.astype(np.float64), "f32")
        assert_float_close(out, activation_ref("GELU_ERF", h, 0, 0), "f32", ulps=8, atol=2e-5 * scale)


def test_constant_subgraphs_are_folded(device):
    """Transposed weights (constant -> shuffle) and quantized weights (constant -> Q -> DQ) feed
    matrix multiplies: the constant parts are evaluated at build time, DQ is kept (kernels can
    take int8 weights), and the numbers are those of the unfolded network."""
    rng = rng_for("fold")
    x = narrow(rng.standard_normal((3, 8)), "f32")
    w_t = narrow(rng.standard_normal((6, 8)), "f32")  # stored (N, K)
    w_q = narrow(rng.standard_normal((8, 5)), "f32")
    s = np.array([0.02], np.float32)
    bias16 = narrow(rng.standard_normal((1, 6)), "f32")

    def graph(net):
        xi = net.add_input("x", trt.float32, (3, 8))
        t = add_shuffle(net, constant(net, w_t), (1, 0), None, None, True)
        t.name = "transpose_w"
        mm1 = net.add_matrix_multiply(xi, M.NONE, t.get_output(0), M.NONE)
        mm1.name = "mm1"
        b = net.add_cast(net.add_cast(constant(net, bias16), trt.float16).get_output(0), trt.float32)
        add = net.add_elementwise(mm1.get_output(0), b.get_output(0), E.SUM)
        add.name = "bias"
        scale = constant(net, s)
        q = net.add_quantize(constant(net, w_q), scale, trt.int8)
        dq = net.add_dequantize(q.get_output(0), scale, trt.float32)
        dq.name = "dq"
        mm2 = net.add_matrix_multiply(xi, M.NONE, dq.get_output(0), M.NONE)
        mm2.name = "mm2"
        add.get_output(0).name, mm2.get_output(0).name = "y1", "y2"
        net.mark_output(add.get_output(0))
        net.mark_output(mm2.get_output(0))

    engine = build(graph, {"x": (3, 8)}, device)
    out = engine.create_execution().run({"x": x})
    x64 = x.astype(np.float64)
    ref1, sc1 = matmul_ref(x64, "NONE", w_t.T.astype(np.float64), "NONE")
    assert_float_close(out["y1"], ref1 + round_to(bias16.astype(np.float64), "f16"), "f32", atol=1e-5 * sc1 + 1e-6)
    wq = dequantize_ref(quantize_ref(w_q, s, "i8"), s, "f32").astype(np.float64)
    ref2, sc2 = matmul_ref(x64, "NONE", wq, "NONE")
    assert_float_close(out["y2"], ref2, "f32", atol=1e-5 * sc2)
    assert sorted(layer_summary(engine)) == [
        ("dq", "dequantize", []),
        ("mm1", "matrix_multiply", ["bias"]),
        ("mm2", "matrix_multiply", []),
    ]


def test_same_tensor_as_both_operands(device):
    """x OP x (one value read twice by one layer) stays unfused and right."""
    x = narrow(rng_for("xx").standard_normal((3, 4)), "f32")

    def body(net, v):
        h = net.add_activation(v["x"], A.TANH)
        h.name = "tanh"
        p = net.add_elementwise(h.get_output(0), h.get_output(0), E.PROD)
        p.name = "square"
        return p

    out, engine = run_network(device, {"x": x}, body)
    t = round_to(np.tanh(x.astype(np.float64)), "f32")
    assert_float_close(out, t * t, "f32", ulps=8)
    assert sorted(layer_summary(engine)) == [("square", "elementwise", []), ("tanh", "activation", [])]


# ==== type rules (what each layer accepts; no engine needed) =================================

EXPECTED_TYPES = {
    "matrix_multiply": FLOATS,
    "activation": FLOATS,
    **{f"elementwise_{op}": FLOATS + INTS for op in ARITH + ["FLOOR_DIV"]},
    "elementwise_POW": FLOATS,
    **{f"elementwise_{op}": ["bool"] for op in ("AND", "OR", "XOR")},
    "elementwise_EQUAL": FLOATS + INTS + ["bool"],
    **{f"elementwise_{op}": FLOATS + INTS for op in ("GREATER", "LESS")},
    "cast_from": CAST_TYPES,
    "cast_to": CAST_TYPES,
    "quantize_input": FLOATS,
    "quantize_to": ["i8", "fp8"],
    "dequantize_input": ["i8", "fp8"],
    "dequantize_to": FLOATS,
    "shuffle": ALL_TYPES,
    "identity": ALL_TYPES,
}


def try_add(kind: str, t: str):
    """Adds one layer `kind` in type `t` to a fresh network; returns its output type (or raises)."""
    net = tensoracle.Network()
    dt = TRT_OF[t]
    if kind == "matrix_multiply":
        layer = net.add_matrix_multiply(net.add_input("a", dt, (2, 3)), M.NONE, net.add_input("b", dt, (3, 4)), M.NONE)
    elif kind == "activation":
        layer = net.add_activation(net.add_input("x", dt, (2, 3)), A.RELU)
    elif kind.startswith("elementwise_"):
        op = getattr(E, kind.split("_", 1)[1])
        layer = net.add_elementwise(net.add_input("a", dt, (2, 3)), net.add_input("b", dt, (2, 3)), op)
    elif kind == "cast_from":
        layer = net.add_cast(net.add_input("x", dt, (2, 3)), trt.float32)
    elif kind == "cast_to":
        layer = net.add_cast(net.add_input("x", trt.float32, (2, 3)), dt)
    elif kind == "quantize_input":
        layer = net.add_quantize(net.add_input("x", dt, (2, 3)), constant(net, np.ones(1, np.float32)), trt.int8)
    elif kind == "quantize_to":
        layer = net.add_quantize(net.add_input("x", trt.float32, (2, 3)), constant(net, np.ones(1, np.float32)), dt)
    elif kind == "dequantize_input":
        layer = net.add_dequantize(net.add_input("x", dt, (2, 3)), constant(net, np.ones(1, np.float32)), trt.float32)
    elif kind == "dequantize_to":
        layer = net.add_dequantize(net.add_input("x", trt.int8, (2, 3)), constant(net, np.ones(1, np.float32)), dt)
    elif kind == "shuffle":
        layer = net.add_shuffle(net.add_input("x", dt, (2, 3)))
    else:
        layer = net.add_identity(net.add_input("x", dt, (2, 3)))
    return layer.get_output(0).dtype


@pytest.mark.parametrize("kind", list(EXPECTED_TYPES))
def test_type_rules(kind):
    """Each layer accepts exactly the types TensorRT gives it (and InvalidArgument otherwise)."""
    accepted, wrong_out = [], []
    for t in ALL_TYPES:
        try:
            out_type = try_add(kind, t)
        except tensoracle.InvalidArgument:
            continue
        accepted.append(t)
        if kind.startswith("elementwise_") and kind.split("_", 1)[1] in COMPARISONS:
            want = trt.bool
        elif kind in ("cast_to", "quantize_to", "dequantize_to"):
            want = TRT_OF[t]
        elif kind in ("cast_from", "dequantize_input"):
            want = trt.float32
        elif kind == "quantize_input":
            want = trt.int8
        else:
            want = TRT_OF[t]
        if out_type != want:
            wrong_out.append((t, out_type))
    assert accepted == [t for t in ALL_TYPES if t in EXPECTED_TYPES[kind]]
    assert wrong_out == []


# ==== errors =================================================================================


def _mm(net, ta, sa, tb, sb):
    return net.add_matrix_multiply(net.add_input("a", ta, sa), M.NONE, net.add_input("b", tb, sb), M.NONE)


def _ew(net, ta, sa, tb, sb, op=E.SUM):
    return net.add_elementwise(net.add_input("a", ta, sa), net.add_input("b", tb, sb), op)


f32, f16, i32 = trt.float32, trt.float16, trt.int32

# (id, function adding inputs then one invalid layer, the default name the error must carry)
INVALID_LAYERS = [
    ("constant_count", lambda n: n.add_constant((2, 3), np.ones(5, np.float32)), "constant_0"),
    ("constant_negative_dim", lambda n: n.add_constant((-1, 3), np.ones(3, np.float32)), "constant_0"),
    ("matmul_int32", lambda n: _mm(n, i32, (2, 3), i32, (3, 4)), "matrix_multiply_2"),
    ("matmul_mixed_types", lambda n: _mm(n, f32, (2, 3), f16, (3, 4)), "matrix_multiply_2"),
    ("matmul_inner_dims", lambda n: _mm(n, f32, (2, 3), f32, (4, 5)), "matrix_multiply_2"),
    ("matmul_batch_rank", lambda n: _mm(n, f32, (2, 2, 3), f32, (3, 4)), "matrix_multiply_2"),
    ("matmul_batch_dims", lambda n: _mm(n, f32, (2, 2, 3), f32, (3, 3, 4)), "matrix_multiply_2"),
    ("matmul_vector_rank0", lambda n: n.add_matrix_multiply(n.add_input("a", f32, ()), M.VECTOR,
                                                            n.add_input("b", f32, (3,)), M.VECTOR), "matrix_multiply_2"),
    ("elementwise_mixed_types", lambda n: _ew(n, f32, (2, 3), f16, (2, 3)), "elementwise_2"),
    ("elementwise_rank", lambda n: _ew(n, f32, (2, 3), f32, (3,)), "elementwise_2"),
    ("elementwise_dims", lambda n: _ew(n, f32, (2, 3), f32, (3, 3)), "elementwise_2"),
    ("elementwise_pow_int32", lambda n: _ew(n, i32, (2, 3), i32, (2, 3), E.POW), "elementwise_2"),
    ("elementwise_and_float", lambda n: _ew(n, f32, (2, 3), f32, (2, 3), E.AND), "elementwise_2"),
    ("elementwise_sum_bool", lambda n: _ew(n, trt.bool, (2,), trt.bool, (2,)), "elementwise_2"),
    ("elementwise_sum_int8", lambda n: _ew(n, trt.int8, (2,), trt.int8, (2,)), "elementwise_2"),
    ("elementwise_less_bool", lambda n: _ew(n, trt.bool, (2,), trt.bool, (2,), E.LESS), "elementwise_2"),
    ("activation_int32", lambda n: n.add_activation(n.add_input("x", i32, (2,)), A.RELU), "activation_1"),
    ("cast_to_fp8", lambda n: n.add_cast(n.add_input("x", f32, (2,)), trt.fp8), "cast_1"),
    ("cast_from_fp8", lambda n: n.add_cast(n.add_input("x", trt.fp8, (2,)), f32), "cast_1"),
    ("quantize_to_int32", lambda n: n.add_quantize(n.add_input("x", f32, (2, 3)), constant(n, np.ones(1, np.float32)),
                                                   i32), "quantize_2"),
    ("quantize_scale_not_constant", lambda n: n.add_quantize(n.add_input("x", f32, (2, 3)), n.add_input("s", f32, (1,)),
                                                             trt.int8), "quantize_2"),
    ("quantize_scale_int", lambda n: n.add_quantize(n.add_input("x", f32, (2, 3)), constant(n, np.ones(1, np.int32)),
                                                    trt.int8), "quantize_2"),
    ("quantize_scale_f16_for_f32", lambda n: n.add_quantize(n.add_input("x", f32, (2, 3)),
                                                            constant(n, np.ones(1, np.float16)), trt.int8), "quantize_2"),
    ("quantize_int_input", lambda n: n.add_quantize(n.add_input("x", i32, (2, 3)), constant(n, np.ones(1, np.float32)),
                                                    trt.int8), "quantize_2"),
    ("dequantize_float_input", lambda n: n.add_dequantize(n.add_input("x", f32, (2, 3)),
                                                          constant(n, np.ones(1, np.float32)), f32), "dequantize_2"),
    ("dequantize_to_int32", lambda n: n.add_dequantize(n.add_input("x", trt.int8, (2, 3)),
                                                       constant(n, np.ones(1, np.float32)), i32), "dequantize_2"),
]


@pytest.mark.parametrize("case", INVALID_LAYERS, ids=[c[0] for c in INVALID_LAYERS])
def test_invalid_layer_raises_naming_the_layer(case):
    _, add, name = case
    net = tensoracle.Network()
    with pytest.raises(tensoracle.InvalidArgument) as info:
        add(net)
    assert isinstance(info.value, ValueError)
    assert f"'{name}'" in str(info.value), str(info.value)
    # Nothing was added: the layers (inputs not counted, as TensorRT counts) are the constants
    # before it; default names number inputs and layers together.
    assert net.num_layers + net.num_inputs == int(name.rsplit("_", 1)[1])


INVALID_SETTERS = [
    # (id, make the valid layer, the invalid setter, the property that must stay unchanged)
    ("shuffle_first_transpose", lambda n: n.add_shuffle(n.add_input("x", f32, (2, 3))),
     lambda l: setattr(l, "first_transpose", (0, 0)), "first_transpose"),
    ("shuffle_two_minus_ones", lambda n: n.add_shuffle(n.add_input("x", f32, (2, 3))),
     lambda l: setattr(l, "reshape_dims", (-1, -1)), "reshape_dims"),
    ("shuffle_second_transpose", lambda n: n.add_shuffle(n.add_input("x", f32, (2, 3))),
     lambda l: setattr(l, "second_transpose", (1, 2)), "second_transpose"),
    ("elementwise_op", lambda n: _ew(n, f32, (2, 3), f32, (2, 3)), lambda l: setattr(l, "op", E.XOR), "op"),
    ("matmul_op", lambda n: _mm(n, f32, (2, 3), f32, (3, 4)), lambda l: setattr(l, "op0", M.TRANSPOSE), "op0"),
    ("cast_to_type", lambda n: n.add_cast(n.add_input("x", f32, (2,)), i32),
     lambda l: setattr(l, "to_type", trt.fp8), "to_type"),
    ("quantize_axis", lambda n: n.add_quantize(n.add_input("x", f32, (2, 3)), constant(n, np.ones(3, np.float32)),
                                               trt.int8), lambda l: setattr(l, "axis", 2), "axis"),
    ("quantize_to_type", lambda n: n.add_quantize(n.add_input("x", f32, (2, 3)), constant(n, np.ones(1, np.float32)),
                                                  trt.int8), lambda l: setattr(l, "to_type", trt.uint8), "to_type"),
    ("dequantize_to_type", lambda n: n.add_dequantize(n.add_input("x", trt.int8, (2, 3)),
                                                      constant(n, np.ones(1, np.float32)), f32),
     lambda l: setattr(l, "to_type", trt.int8), "to_type"),
]


@pytest.mark.parametrize("custom_name", [False, True], ids=["default_name", "custom_name"])
@pytest.mark.parametrize("case", INVALID_SETTERS, ids=[c[0] for c in INVALID_SETTERS])
def test_invalid_setter_raises_naming_the_layer(case, custom_name):
    """Setters re-validate: InvalidArgument names the layer (its custom name once set) and the
    layer keeps its previous parameters."""
    _, make, setter, prop = case
    net = tensoracle.Network()
    layer = make(net)
    default = layer.name
    assert default == f"{default.rsplit('_', 1)[0]}_{net.num_layers + net.num_inputs - 1}"
    if custom_name:
        layer.name = "my_layer"
    before = getattr(layer, prop)
    with pytest.raises(tensoracle.InvalidArgument) as info:
        setter(layer)
    assert f"'{'my_layer' if custom_name else default}'" in str(info.value), str(info.value)
    assert getattr(layer, prop) == before


# Checks TensorRT makes when the network is built, since other properties may still change
# while a layer is being set up: a per-channel scale against the axis, a reshape's volume.
DEFERRED_CHECKS = [
    ("quantize_scale_length", lambda n: n.add_quantize(n.add_input("x", f32, (2, 3)),
                                                       constant(n, np.ones(2, np.float32)), trt.int8),
     "per-channel scales"),
    ("shuffle_reshape_volume", lambda n: _set(n.add_shuffle(n.add_input("x", f32, (2, 3))), reshape_dims=(4, 2)),
     "hold 8 elements"),
    ("shuffle_zero_beyond_rank", lambda n: _set(n.add_shuffle(n.add_input("x", f32, (6,))), reshape_dims=(2, 0)),
     "copies a dimension"),
    ("shuffle_no_placeholder_volume",
     lambda n: _set(n.add_shuffle(n.add_input("x", f32, (2, 3))), zero_is_placeholder=False, reshape_dims=(0, 6)),
     "hold 0 elements"),
]


def _set(layer, **properties):
    for key, value in properties.items():
        setattr(layer, key, value)
    return layer


@pytest.mark.parametrize("case", DEFERRED_CHECKS, ids=[c[0] for c in DEFERRED_CHECKS])
def test_deferred_checks_fail_the_build_naming_the_layer(case):
    _, make, needle = case
    holder = {}

    def graph(net):
        layer = make(net)
        layer.name = "my_layer"
        layer.get_output(0).name = "y"
        net.mark_output(layer.get_output(0))
        holder["ok"] = True

    shape = (6,) if "beyond" in case[0] else (2, 3)
    decl = tensoracle.EngineBuild({"x": tensoracle.InputShape.fixed(shape)}, tensoracle.BuilderSettings(device="cpu"))
    with pytest.raises(tensoracle.InvalidArgument) as info:
        tensoracle.build_serialized_engine(graph, decl)
    assert holder.get("ok"), "adding the layer and setting its properties must not raise"
    assert "'my_layer'" in str(info.value) and needle in str(info.value), str(info.value)


def test_build_error_names_a_layer_invalidated_later(device):
    """Re-shaping an input after the fact invalidates a later layer: the build reports it by its
    custom name."""

    def graph(net):
        x = net.add_input("x", trt.float32, (2, 3))
        mm = net.add_matrix_multiply(x, M.NONE, constant(net, np.ones((3, 4), np.float32)), M.NONE)
        mm.name = "proj"
        mm.get_output(0).name = "y"
        net.mark_output(mm.get_output(0))
        x.shape = (2, 5)  # K no longer matches: reported when the network is built

    with pytest.raises(tensoracle.InvalidArgument, match="'proj'"):
        build(graph, {"x": (2, 5)}, device)


def _relu_engine(device):
    def graph(net):
        x = net.add_input("x", trt.float32, (-1, 4))
        y = net.add_activation(x, A.RELU).get_output(0)
        y.name = "y"
        net.mark_output(y)

    return build(graph, {"x": tensoracle.InputShape.ranged((2, 4), (4, 4), (8, 4))}, device)


@pytest.mark.parametrize(
    "inputs",
    [
        {"x": np.zeros((1, 4), np.float32)},  # below min
        {"x": np.zeros((9, 4), np.float32)},  # above max
        {"x": np.zeros((4, 5), np.float32)},  # static dim contradicted
        {"x": np.zeros((4,), np.float32)},  # rank
        {"x": np.zeros((4, 4), np.float16)},  # dtype
        {"x": np.zeros((4, 4), np.int32)},  # dtype
        {"x": np.zeros((4, 4), ml_dtypes.bfloat16)},  # dtype
        {},  # missing input
        {"x": np.zeros((4, 4), np.float32), "z": np.zeros((4, 4), np.float32)},  # unknown input
    ],
    ids=["below_min", "above_max", "static_dim", "rank", "dtype_f16", "dtype_i32", "dtype_bf16", "missing", "unknown"],
)
def test_run_rejects_bad_inputs(device, inputs):
    execution = _relu_engine(device).create_execution()
    with pytest.raises(tensoracle.InvalidArgument):
        execution.run(inputs)
    # The execution is still usable afterwards.
    x = np.array([[-1, 2, -3, 4]] * 3, np.float32)
    assert_exact(execution.run({"x": x})["y"], np.maximum(x, 0), "f32")


@pytest.mark.parametrize("shape", [(1, 4), (9, 4), (4, 3)], ids=["below_min", "above_max", "static_dim"])
def test_set_input_shape_outside_profile(device, shape):
    execution = _relu_engine(device).create_execution()
    with pytest.raises(tensoracle.InvalidArgument, match="'x'"):
        execution.set_input_shape("x", shape)


def test_declaration_contradicting_the_network(device):
    def graph(net):
        x = net.add_input("x", trt.float32, (-1, 4))
        y = net.add_activation(x, A.RELU).get_output(0)
        y.name = "y"
        net.mark_output(y)

    with pytest.raises(tensoracle.InvalidArgument, match="'x'"):
        build(graph, {"x": (2, 5)}, device)
    with pytest.raises(tensoracle.InvalidArgument, match="'x'"):
        build(graph, {"x": tensoracle.InputShape.ranged((4, 4), (2, 4), (8, 4))}, device)
