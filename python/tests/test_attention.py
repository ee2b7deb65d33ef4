"""add_attention (TensorRT's IAttention) end to end on every backend: a float64 reference written
here (scores, masks, softmax or none, grouped-query heads) against each float type, shapes that
cross the kernels' tiles, bool and additive masks that broadcast, causal attention, fully
masked rows, dynamic shapes, and the checks when the layer is added."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensoracle
import tensoracle.trt as trt
from layer_cases import NP_OF, assert_float_close, build, cpu_runs_wide_attention, rng_for, trt_type_of

SOFTMAX = trt.AttentionNormalizationOp.SOFTMAX
NONE = trt.AttentionNormalizationOp.NONE


def attention_ref(q, k, v, *, mask=None, causal=False, softmax=True, scale=1.0):
    """float64 attention: out[b, n] = normalize(scale * q kᵀ + mask) v, key head n // (Nq / Nkv)."""
    q64, k64, v64 = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    group = q64.shape[1] // k64.shape[1]
    k64 = np.repeat(k64, group, axis=1)
    v64 = np.repeat(v64, group, axis=1)
    s = scale * (q64 @ np.swapaxes(k64, -1, -2))
    keep = np.ones(s.shape, dtype=bool)
    if causal:
        keep &= np.tril(np.ones(s.shape[-2:], dtype=bool))
    if mask is not None:
        if mask.dtype == np.bool_:
            keep &= np.broadcast_to(mask, s.shape)
        else:
            s = s + np.broadcast_to(np.asarray(mask, dtype=np.float64), s.shape)
    if not softmax:
        return np.where(keep, s, 0.0) @ v64
    s = np.where(keep, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    empty = np.isneginf(m)
    e = np.exp(s - np.where(empty, 0.0, m))
    p = e / np.where(empty, 1.0, e.sum(axis=-1, keepdims=True))
    return np.where(empty, 0.0, p) @ v64


def sample(rng, shape, name):
    return rng.uniform(-1, 1, shape).astype(np.float32).astype(NP_OF[name])


def run_attention(device, q, k, v, *, mask=None, causal=False, norm=SOFTMAX, scale=None):
    inputs = {"q": q, "k": k, "v": v}
    if mask is not None:
        inputs["mask"] = mask

    def graph(network):
        t = {n: network.add_input(n, trt_type_of(a.dtype), a.shape) for n, a in inputs.items()}
        layer = network.add_attention(t["q"], t["k"], t["v"], norm, causal)
        if mask is not None:
            layer.mask = t["mask"]
        if scale is not None:
            layer.scale = scale
        y = layer.get_output(0)
        y.name = "y"
        network.mark_output(y)

    engine = build(graph, {n: a.shape for n, a in inputs.items()}, device)
    return engine.create_execution().run(inputs)["y"], engine



TOL = {"f32": dict(ulps=8, atol=2e-6), "f16": dict(ulps=1, atol=2e-5), "bf16": dict(ulps=1, atol=2e-5)}
# The CUDA backend's tensor-core kernel rounds the probabilities to the input type before the
# second product (as every flash-attention kernel does): about 2^-11 (float16) or 2^-8
# (bfloat16) of the largest value, relative.
TOL_CUDA = {"f32": TOL["f32"], "f16": dict(ulps=1, atol=6e-4), "bf16": dict(ulps=1, atol=4e-3)}


# (device, type) where the builder replaces decomposed attention (head size 32) by the fused
# node: on the CPU where its AVX-512 products run (they beat oneDNN's batched products and the
# softmax between them); on CUDA in float16 / bfloat16, where the tensor-core kernel runs (the
# GPU machine is sm90); float32 stays as its layers there.
FUSES_ATTENTION: dict = {**{("cpu", t): cpu_runs_wide_attention() for t in ("f32", "f16")}, ("cuda", "f16"): True}


def fuses(device: str, t: str) -> bool:
    return FUSES_ATTENTION.get((device.split(":")[0], t), False)


def tol(device, t):
    return (TOL if device == "cpu" else TOL_CUDA)[t]

# (batch, query heads, key heads, queries, keys, head size): tiles of queries and keys crossed,
# grouped- and multi-query heads, head sizes that are no power of two, one above 128
SHAPES = [
    (2, 4, 4, 7, 9, 16),
    (1, 8, 2, 33, 70, 64),
    (2, 4, 1, 5, 130, 32),
    (1, 2, 2, 65, 65, 80),
    (1, 1, 1, 3, 4, 200),
    (1, 2, 2, 130, 129, 128),
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("t", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_attention_softmax_against_float64(device, shape, t, causal):
    b, nq, nkv, sq, skv, h = shape
    rng = rng_for("attention", shape, t, causal)
    q, k, v = sample(rng, (b, nq, sq, h), t), sample(rng, (b, nkv, skv, h), t), sample(rng, (b, nkv, skv, h), t)
    scale = 1 / math.sqrt(h)
    y, _ = run_attention(device, q, k, v, causal=causal, scale=scale)
    ref = attention_ref(q, k, v, causal=causal, scale=scale)
    assert_float_close(y, ref, t, **tol(device, t), what=f"attention {shape} {t}")


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(2, 4, 2, 70, 130, 64), (1, 2, 2, 9, 65, 128), (3, 2, 1, 33, 17, 32)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("t", ["f16", "bf16"])
def test_cuda_row_kernel_matches_the_tensor_core_kernel(monkeypatch, shape, t):
    """The head sizes the tensor-core kernel takes, through the row kernel too
    (TENSORACLE_ATTENTION_KERNEL=rows): both against float64, with masks and causal."""
    b, nq, nkv, sq, skv, h = shape
    rng = rng_for("attention-kernels", shape, t)
    q, k, v = sample(rng, (b, nq, sq, h), t), sample(rng, (b, nkv, skv, h), t), sample(rng, (b, nkv, skv, h), t)
    mask = rng.random((b, 1, sq, skv)) < 0.8
    results = {}
    for kernel in ("flash", "rows"):
        if kernel == "rows":
            monkeypatch.setenv("TENSORACLE_ATTENTION_KERNEL", "rows")
        for causal in (False, True):
            m = None if causal else mask
            y, _ = run_attention("cuda:0", q, k, v, mask=m, causal=causal, scale=0.125)
            ref = attention_ref(q, k, v, mask=m, causal=causal, scale=0.125)
            assert_float_close(y, ref, t, **(TOL_CUDA if kernel == "flash" else TOL)[t], what=f"{kernel} causal={causal}")
            results[kernel, causal] = y
    assert not all(np.array_equal(results["flash", c], results["rows", c]) for c in (False, True)), (
        "the two kernels gave the same bits: the override did not reach the row kernel")


@pytest.mark.parametrize("t", ["f32", "f16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_attention_without_normalization(device, t, causal):
    rng = rng_for("attention-none", t, causal)
    q, k, v = sample(rng, (2, 2, 6, 16), t), sample(rng, (2, 1, 10, 16), t), sample(rng, (2, 1, 10, 16), t)
    y, _ = run_attention(device, q, k, v, causal=causal, norm=NONE)
    ref = attention_ref(q, k, v, causal=causal, softmax=False)
    assert_float_close(y, ref, t, ulps=2, atol=1e-4, rtol=1e-5, what="attention NONE")


# mask dims: a padding mask per batch and key [B, 1, 1, Skv], one per head and query, one shared
MASKS = [(2, 1, 1, 70), (2, 4, 9, 70), (1, 1, 9, 70), (1, 4, 1, 1)]


@pytest.mark.parametrize("mshape", MASKS, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("kind", ["bool", "additive"])
@pytest.mark.parametrize("t", ["f32", "bf16"])
def test_attention_masks_broadcast(device, mshape, kind, t):
    rng = rng_for("attention-mask", mshape, kind, t)
    q, k, v = sample(rng, (2, 4, 9, 32), t), sample(rng, (2, 2, 70, 32), t), sample(rng, (2, 2, 70, 32), t)
    if kind == "bool":
        mask = rng.random(mshape) < 0.7
        mask.reshape(-1)[0] = True
    else:
        mask = rng.uniform(-3, 1, mshape).astype(np.float32).astype(NP_OF[t])
    y, _ = run_attention(device, q, k, v, mask=mask, scale=0.2)
    ref = attention_ref(q, k, v, mask=mask, scale=0.2)
    assert_float_close(y, ref, t, **tol(device, t), what=f"attention mask {mshape} {kind}")


def test_attention_fully_masked_rows_give_zeros(device):
    rng = rng_for("attention-empty")
    q, k, v = sample(rng, (1, 2, 4, 8), "f32"), sample(rng, (1, 2, 5, 8), "f32"), sample(rng, (1, 2, 5, 8), "f32")
    mask = np.ones((1, 1, 4, 5), dtype=bool)
    mask[0, 0, 1, :] = False  # query 1 may attend nothing
    additive = np.zeros((1, 1, 4, 5), dtype=np.float32)
    additive[0, 0, 2, :] = -np.inf  # nor query 2 here
    for m in (mask, additive):
        y, _ = run_attention(device, q, k, v, mask=m)
        assert np.all(y[:, :, 1 if m is mask else 2] == 0), y
        assert_float_close(y, attention_ref(q, k, v, mask=m), "f32", **tol(device, "f32"), what="masked rows")


def test_attention_dynamic_shapes(device):
    profile = {
        n: tensoracle.InputShape.ranged((1, heads, 1, 32), (2, heads, 64, 32), (4, heads, 128, 32))
        for n, heads in (("q", 4), ("k", 2), ("v", 2))
    }
    rng = rng_for("attention-dynamic")

    def graph(network):
        t = {n: network.add_input(n, trt.float16, (-1, 4 if n == "q" else 2, -1, 32)) for n in ("q", "k", "v")}
        layer = network.add_attention(t["q"], t["k"], t["v"], SOFTMAX, True)
        y = layer.get_output(0)
        y.name = "y"
        network.mark_output(y)

    execution = build(graph, profile, device).create_execution()
    for b, sq, skv in [(1, 1, 1), (3, 100, 128), (2, 64, 17)]:
        q = sample(rng, (b, 4, sq, 32), "f16")
        k, v = sample(rng, (b, 2, skv, 32), "f16"), sample(rng, (b, 2, skv, 32), "f16")
        y = execution.run({"q": q, "k": k, "v": v})["y"]
        assert_float_close(y, attention_ref(q, k, v, causal=True), "f16", **tol(device, "f16"),
                           what=f"dynamic {b},{sq},{skv}")


def test_attention_layer_properties_and_plan():
    def graph(network):
        q = network.add_input("q", trt.float32, (1, 2, 3, 4))
        kv = network.add_input("kv", trt.float32, (1, 1, 5, 4))
        m = network.add_input("m", trt.bool, (1, 1, 1, 5))
        layer = network.add_attention(q, kv, kv, SOFTMAX, False)
        assert layer.type == trt.LayerType.ATTENTION and layer.num_inputs == 3 and layer.mask is None
        layer.mask = m
        assert layer.num_inputs == 4 and layer.mask.name == "m"
        layer.decomposable = True
        layer.scale = 0.5
        assert (layer.norm_op, layer.causal, layer.decomposable, layer.scale) == (SOFTMAX, False, True, 0.5)
        with pytest.raises(tensoracle.InvalidArgument, match="causal attention takes no mask"):
            layer.causal = True
        assert layer.causal is False  # the failed setter left the layer as it was
        y = layer.get_output(0)
        y.name = "y"
        network.mark_output(y)

    engine = build(graph, {"q": (1, 2, 3, 4), "kv": (1, 1, 5, 4), "m": (1, 1, 1, 5)}, "cpu")
    attention = [layer for layer in engine.layers() if layer.type == "attention"]
    assert len(attention) == 1 and list(attention[0].inputs) == ["q", "kv", "kv", "m"], [
        (layer.type, list(layer.inputs)) for layer in engine.layers()]


@pytest.mark.parametrize(
    "dims, message",
    [
        ({"q": (1, 3, 4, 8), "k": (1, 2, 5, 8)}, "not a multiple of the key's 2"),
        ({"q": (1, 2, 4, 8), "k": (1, 2, 5, 16)}, "head size 8 differs from the key's 16"),
        ({"q": (2, 2, 4, 8), "k": (1, 2, 5, 8)}, "batch 2 differs"),
        ({"q": (2, 4, 8), "k": (1, 2, 5, 8)}, "rank-4"),
    ],
)
def test_attention_refuses_inconsistent_inputs(dims, message):
    net = tensoracle.Network()
    q = net.add_input("q", trt.float32, dims["q"])
    k = net.add_input("k", trt.float32, dims["k"])
    with pytest.raises(tensoracle.InvalidArgument, match="attention") as info:
        net.add_attention(q, k, k, SOFTMAX, False)
    assert message in str(info.value)


def test_attention_refuses_bad_masks_and_types():
    net = tensoracle.Network()
    q = net.add_input("q", trt.float16, (1, 2, 4, 8))
    k = net.add_input("k", trt.float16, (1, 2, 5, 8))
    k32 = net.add_input("k32", trt.float32, (1, 2, 5, 8))
    bad_masks = [
        (net.add_input("m_int", trt.int32, (1, 1, 4, 5)), "bool or the query's float16"),
        (net.add_input("m_f32", trt.float32, (1, 1, 4, 5)), "bool or the query's float16"),
        (net.add_input("m_queries", trt.bool, (1, 1, 3, 5)), "each must be 1 or"),
        (net.add_input("m_rank", trt.bool, (4, 5)), "rank-4"),
    ]
    good_mask = net.add_input("m", trt.bool, (1, 1, 4, 5))
    with pytest.raises(tensoracle.InvalidArgument, match="input 1 \\(key\\) has type float32"):
        net.add_attention(q, k32, k, SOFTMAX, False)
    layer = net.add_attention(q, k, k, SOFTMAX, False)
    for m, message in bad_masks:
        with pytest.raises(tensoracle.InvalidArgument, match="attention") as info:
            layer.mask = m
        assert message in str(info.value)
        assert layer.mask is None  # the refused mask was not kept
    causal = net.add_attention(q, k, k, SOFTMAX, True)
    with pytest.raises(tensoracle.InvalidArgument, match="causal attention takes no mask"):
        causal.mask = good_mask
    layer.mask = good_mask
    assert layer.mask.name == "m"


# ---- the attention fusion pass (builder::fuse_attention) -----------------------------------


def decomposed_graph(q, k, v, mask, *, scale_op="PROD", mask_first=False, scores_output=False, causal_free=True):
    """MatMul(Q, Kᵀ) -> scale -> + mask -> softmax(last axis) -> MatMul(·, V), as graph code
    writes attention (examples/minilm.py). Returns the graph function; output "y"."""
    E = trt.ElementWiseOperation

    def graph(network):
        dt = trt_type_of(q.dtype)
        t = {n: network.add_input(n, dt, a.shape) for n, a in (("q", q), ("k", k), ("v", v))}
        s = network.add_matrix_multiply(t["q"], trt.MatrixOperation.NONE, t["k"], trt.MatrixOperation.TRANSPOSE)
        s.name = "scores"
        s = s.get_output(0)
        if scale_op:
            h = q.shape[-1]
            c = np.full((1, 1, 1, 1), 1 / math.sqrt(h) if scale_op == "PROD" else math.sqrt(h), dtype=q.dtype)
            layer = network.add_elementwise(s, network.add_constant(c.shape, c).get_output(0), getattr(E, scale_op))
            layer.name = "scale"
            s = layer.get_output(0)
        if mask is not None:
            m = network.add_input("mask", dt, mask.shape)
            layer = network.add_elementwise(m, s, E.SUM) if mask_first else network.add_elementwise(s, m, E.SUM)
            layer.name = "masked"
            s = layer.get_output(0)
        if scores_output:
            s.name = "scores_out"
            network.mark_output(s)
        sm = network.add_softmax(s)
        sm.axes = 1 << 3
        sm.name = "probs"
        pv = network.add_matrix_multiply(sm.get_output(0), trt.MatrixOperation.NONE, t["v"], trt.MatrixOperation.NONE)
        pv.name = "context"
        y = pv.get_output(0)
        y.name = "y"
        network.mark_output(y)

    return graph


@pytest.mark.parametrize("scale_op", ["PROD", "DIV", None])
@pytest.mark.parametrize("with_mask, mask_first", [(True, False), (True, True), (False, False)],
                         ids=["mask", "mask-first", "no-mask"])
@pytest.mark.parametrize("t", ["f32", "f16"])
def test_builder_fuses_decomposed_attention_where_the_backend_gains(device, scale_op, with_mask, mask_first, t):
    rng = rng_for("fusion", scale_op, with_mask, mask_first, t)
    q, k, v = sample(rng, (2, 4, 9, 32), t), sample(rng, (2, 4, 11, 32), t), sample(rng, (2, 4, 11, 32), t)
    mask = None
    if with_mask:
        mask = np.where(rng.random((2, 1, 1, 11)) < 0.8, 0.0, -10000.0).astype(NP_OF[t])
    inputs = {"q": q, "k": k, "v": v, **({"mask": mask} if with_mask else {})}
    graph = decomposed_graph(q, k, v, mask, scale_op=scale_op, mask_first=mask_first)
    engine = build(graph, {n: a.shape for n, a in inputs.items()}, device)
    layers = engine.layers()
    types = [layer.type for layer in layers]
    # where the backend's fused kernel wins (Backend::fuses_attention; FUSES_ATTENTION above)
    if fuses(device, t):
        assert types == ["attention"], [(layer.name, layer.type) for layer in layers]
        expected = ["scores"] + (["scale"] if scale_op else []) + (["masked"] if with_mask else []) + ["probs"]
        assert list(layers[0].fused) == expected
    else:
        assert "attention" not in types, types
    y = engine.create_execution().run(inputs)["y"]
    # the scale constant has the network's type; the node takes its value
    scale = 1.0
    if scale_op == "PROD":
        scale = float(np.asarray(1 / math.sqrt(32), dtype=NP_OF[t]))
    elif scale_op == "DIV":
        scale = 1 / float(np.asarray(math.sqrt(32), dtype=NP_OF[t]))
    ref = attention_ref(q, k, v, mask=mask, scale=scale)
    # the unfused layers round the scores to the network's type between steps
    slack = dict(ulps=2, atol=2e-3) if t == "f16" and "attention" not in types else tol(device, t)
    assert_float_close(y, ref, t, **slack, what="attention")


def test_builder_leaves_attention_whose_scores_are_read_elsewhere():
    # head size 32: the CPU would fuse this attention (where AVX-512 runs) but for the scores'
    # second reader
    rng = rng_for("fusion-negative")
    q, k, v = sample(rng, (1, 2, 4, 32), "f32"), sample(rng, (1, 2, 5, 32), "f32"), sample(rng, (1, 2, 5, 32), "f32")
    graph = decomposed_graph(q, k, v, None, scores_output=True)
    engine = build(graph, {"q": q.shape, "k": k.shape, "v": v.shape}, "cpu")
    assert "attention" not in [layer.type for layer in engine.layers()]
    out = engine.create_execution().run({"q": q, "k": k, "v": v})
    assert_float_close(out["y"], attention_ref(q, k, v, scale=1 / math.sqrt(32)), "f32", ulps=64, atol=2e-6,
                      what="unfused")


@pytest.mark.parametrize("head, baseline", [(24, False), (32, True)], ids=["head-24", "no-avx512"])
def test_the_cpu_keeps_the_layers_where_its_fused_kernel_would_lose(monkeypatch, head, baseline):
    # Head sizes that are no multiple of 16, or a CPU (here: the switch) without the AVX-512
    # products: the fused kernel's BLAS products per tile lose to the layers, so they stay.
    if baseline:
        monkeypatch.setenv("TENSORACLE_ATTENTION_NO_AVX512", "1")
    rng = rng_for("fusion-cpu-loses", head, baseline)
    q, k, v = (sample(rng, (2, 4, 9, head), "f32") for _ in range(3))
    graph = decomposed_graph(q, k, v, None, scale_op="PROD")
    engine = build(graph, {"q": q.shape, "k": k.shape, "v": v.shape}, "cpu")
    assert "attention" not in [layer.type for layer in engine.layers()]
    monkeypatch.delenv("TENSORACLE_ATTENTION_NO_AVX512", raising=False)
    if head == 32 and cpu_runs_wide_attention():  # the same graph fuses once the switch is off
        fused = build(graph, {"q": q.shape, "k": k.shape, "v": v.shape}, "cpu")
        assert [layer.type for layer in fused.layers()] == ["attention"]


def rows_graph(inputs, heads, kv_heads, size, *, key_transposed, split_scale, two_shuffles, with_mask):
    """Attention as exporters and hand-written models write it around the projections: Q, K and
    V rows [B, S, heads·size] split into heads by shuffles, the scores scaled (once, or half on
    Q and half on K), masked, normalized, multiplied by V, and the heads merged back to rows."""
    E = trt.ElementWiseOperation

    def split(network, x, n, perm, name):
        if two_shuffles:  # a reshape, then a transpose (ONNX's Reshape and Transpose)
            r = network.add_shuffle(x)
            r.reshape_dims = (0, 0, n, size)
            r.name = name + ".reshape"
            t = network.add_shuffle(r.get_output(0))
            t.first_transpose = perm
            t.name = name + ".transpose"
            return t.get_output(0)
        s = network.add_shuffle(x)
        s.reshape_dims = (0, 0, n, size)
        s.second_transpose = perm
        s.name = name + ".split"
        return s.get_output(0)

    def scaled(network, x, c, dt, name):
        layer = network.add_elementwise(x, network.add_constant((1, 1, 1, 1), np.full((1, 1, 1, 1), c, dt)).get_output(0),
                                        E.PROD)
        layer.name = name
        return layer.get_output(0)

    def graph(network):
        dt = inputs["xq"].dtype
        t = {n: network.add_input(n, trt_type_of(a.dtype), a.shape) for n, a in inputs.items()}
        q = split(network, t["xq"], heads, (0, 2, 1, 3), "q")
        k = split(network, t["xk"], kv_heads, (0, 2, 3, 1) if key_transposed else (0, 2, 1, 3), "k")
        v = split(network, t["xv"], kv_heads, (0, 2, 1, 3), "v")
        if split_scale:
            q, k = scaled(network, q, size ** -0.25, dt, "q.scale"), scaled(network, k, size ** -0.25, dt, "k.scale")
        op1 = trt.MatrixOperation.NONE if key_transposed else trt.MatrixOperation.TRANSPOSE
        qk = network.add_matrix_multiply(q, trt.MatrixOperation.NONE, k, op1)
        qk.name = "scores"
        s = qk.get_output(0)
        if not split_scale:
            s = scaled(network, s, size ** -0.5, dt, "scale")
        if with_mask:
            layer = network.add_elementwise(s, t["mask"], E.SUM)
            layer.name = "masked"
            s = layer.get_output(0)
        sm = network.add_softmax(s)
        sm.axes = 1 << 3
        sm.name = "probs"
        pv = network.add_matrix_multiply(sm.get_output(0), trt.MatrixOperation.NONE, v, trt.MatrixOperation.NONE)
        pv.name = "context"
        if two_shuffles:
            tr = network.add_shuffle(pv.get_output(0))
            tr.first_transpose = (0, 2, 1, 3)
            tr.name = "out.transpose"
            m = network.add_shuffle(tr.get_output(0))
            m.reshape_dims = (0, 0, heads * size)
            m.name = "out.reshape"
        else:
            m = network.add_shuffle(pv.get_output(0))
            m.first_transpose = (0, 2, 1, 3)
            m.reshape_dims = (0, 0, heads * size)
            m.name = "out.merge"
        y = m.get_output(0)
        y.name = "y"
        network.mark_output(y)

    return graph


@pytest.mark.parametrize("key_transposed, split_scale, two_shuffles",
                         [(False, False, False), (True, True, True), (True, False, False), (False, True, True)],
                         ids=["kT-by-product", "kT-given+split-scale+onnx-style", "kT-given", "split-scale+onnx-style"])
@pytest.mark.parametrize("heads, kv_heads", [(4, 4), (4, 1)], ids=["mha", "mqa"])
@pytest.mark.parametrize("t", ["f32", "f16"])
def test_fused_attention_reads_and_writes_the_projections_rows(device, t, heads, kv_heads, key_transposed, split_scale,
                                                               two_shuffles):
    # Where the backend fuses attention, the shuffles that split the heads out of the rows
    # [B, S, N·H] and merge them back go too: the attention node reads and writes the rows
    # (AttentionParams' sequence-major layout), and the engine is that one node.
    size, b, sq, skv = 32, 2, 9, 70
    rng = rng_for("rows", t, heads, kv_heads, key_transposed, split_scale, two_shuffles)
    inputs = {"xq": sample(rng, (b, sq, heads * size), t), "xk": sample(rng, (b, skv, kv_heads * size), t),
              "xv": sample(rng, (b, skv, kv_heads * size), t)}
    inputs["mask"] = np.where(rng.random((b, 1, 1, skv)) < 0.8, 0.0, -10000.0).astype(NP_OF[t])
    graph = rows_graph(inputs, heads, kv_heads, size, key_transposed=key_transposed, split_scale=split_scale,
                       two_shuffles=two_shuffles, with_mask=True)
    engine = build(graph, {n: a.shape for n, a in inputs.items()}, device)
    layers = engine.layers()
    if fuses(device, t):
        assert [layer.type for layer in layers] == ["attention"], [(layer.name, layer.type) for layer in layers]
        assert "scores" in layers[0].fused and "probs" in layers[0].fused
        assert len(layers[0].fused) == len(set(layers[0].fused))
    else:
        assert "attention" not in [layer.type for layer in layers]
    y = engine.create_execution().run(inputs)["y"]

    def heads_first(x, n):
        return x.reshape(x.shape[0], x.shape[1], n, size).transpose(0, 2, 1, 3)

    scale = float(np.asarray(size ** -0.5, dtype=NP_OF[t]))
    if split_scale:
        scale = float(np.asarray(size ** -0.25, dtype=NP_OF[t])) ** 2
    ref = attention_ref(heads_first(inputs["xq"], heads), heads_first(inputs["xk"], kv_heads),
                        heads_first(inputs["xv"], kv_heads), mask=inputs["mask"], scale=scale)
    ref = ref.transpose(0, 2, 1, 3).reshape(b, sq, heads * size)
    slack = dict(ulps=2, atol=2e-3) if t == "f16" and "attention" not in [la.type for la in layers] else tol(device, t)
    assert_float_close(y, ref, t, **slack, what="attention over rows")


def test_attention_over_rows_keeps_shuffles_whose_results_are_read_elsewhere():
    # the query's heads are also a network output: its split must stay; without it the rows
    # layout is off, and the attention (if fused) reads [B, N, S, H]
    rng = rng_for("rows-negative")
    inputs = {n: sample(rng, (1, 5, 2 * 32), "f32") for n in ("xq", "xk", "xv")}
    base = rows_graph(inputs, 2, 2, 32, key_transposed=False, split_scale=False, two_shuffles=False, with_mask=False)

    def graph(network):
        base(network)
        split = next(network.get_layer(i) for i in range(network.num_layers) if network.get_layer(i).name == "q.split")
        out = split.get_output(0)
        out.name = "q_heads"
        network.mark_output(out)

    engine = build(graph, {n: a.shape for n, a in inputs.items()}, "cpu")
    names = [layer.name for layer in engine.layers()]
    assert "q.split" in names
    outs = engine.create_execution().run(inputs)
    q = inputs["xq"].reshape(1, 5, 2, 32).transpose(0, 2, 1, 3)
    np.testing.assert_array_equal(outs["q_heads"], q)
    k = inputs["xk"].reshape(1, 5, 2, 32).transpose(0, 2, 1, 3)
    v = inputs["xv"].reshape(1, 5, 2, 32).transpose(0, 2, 1, 3)
    ref = attention_ref(q, k, v, scale=float(np.float32(32 ** -0.5))).transpose(0, 2, 1, 3).reshape(1, 5, 64)
    assert_float_close(outs["y"], ref, "f32", ulps=64, atol=2e-6, what="attention")


@pytest.mark.parametrize("with_padding", [False, True], ids=["causal-alone", "causal+padding"])
@pytest.mark.parametrize("t", ["f32", "f16"])
def test_a_causal_mask_written_as_a_constant_becomes_the_causal_flag(device, t, with_padding):
    # GPT-style prefill: a constant mask (0 at and below the diagonal, the type's lowest above),
    # alone or added to a padding mask. Where attention fuses over rows, the node is causal (the
    # kernels skip the keys after each query) with the padding mask, or none.
    import json

    size, heads, b, s = 32, 2, 2, 21
    rng = rng_for("causal-constant", t, with_padding)
    inputs = {n: sample(rng, (b, s, heads * size), t) for n in ("xq", "xk", "xv")}
    lowest = float(np.finfo(NP_OF[t]).min)
    causal = np.triu(np.full((s, s), lowest), 1)[None, None].astype(NP_OF[t])
    padding = np.zeros((b, 1, 1, s), NP_OF[t])
    padding[1, ..., s - 5:] = lowest
    if with_padding:
        inputs["padding"] = padding
    def graph(network):
        E = trt.ElementWiseOperation
        dt = NP_OF[t]
        tensors = {n: network.add_input(n, trt_type_of(a.dtype), a.shape) for n, a in inputs.items()}

        def split(x):
            sh = network.add_shuffle(x)
            sh.reshape_dims = (0, 0, heads, size)
            sh.second_transpose = (0, 2, 1, 3)
            return sh.get_output(0)

        q, k, v = (split(tensors[n]) for n in ("xq", "xk", "xv"))
        scores = network.add_matrix_multiply(q, trt.MatrixOperation.NONE, k, trt.MatrixOperation.TRANSPOSE).get_output(0)
        c = network.add_constant((1, 1, 1, 1), np.full((1, 1, 1, 1), size ** -0.5, dt)).get_output(0)
        scores = network.add_elementwise(scores, c, E.PROD).get_output(0)
        mask = network.add_constant(causal.shape, causal).get_output(0)
        if with_padding:
            mask = network.add_elementwise(mask, tensors["padding"], E.SUM).get_output(0)
        scores = network.add_elementwise(scores, mask, E.SUM).get_output(0)
        sm = network.add_softmax(scores)
        sm.axes = 1 << 3
        pv = network.add_matrix_multiply(sm.get_output(0), trt.MatrixOperation.NONE, v, trt.MatrixOperation.NONE)
        pv.name = "context"
        m = network.add_shuffle(pv.get_output(0))
        m.first_transpose = (0, 2, 1, 3)
        m.reshape_dims = (0, 0, heads * size)
        y = m.get_output(0)
        y.name = "y"
        network.mark_output(y)

    engine = build(graph, {n: a.shape for n, a in inputs.items()}, device)
    nodes = [n for n in json.loads(engine.plan_json())["nodes"] if n["name"] == "context"]
    if fuses(device, t):
        assert nodes and nodes[0]["params"]["causal"] is True and "rows" in nodes[0]["params"], nodes
        assert len(nodes[0]["inputs"]) == (4 if with_padding else 3)
    y = engine.create_execution().run(inputs)["y"]

    def heads_first(x):
        return x.reshape(b, s, heads, size).transpose(0, 2, 1, 3)

    scale = float(np.asarray(size ** -0.5, dtype=NP_OF[t]))
    ref = attention_ref(heads_first(inputs["xq"]), heads_first(inputs["xk"]), heads_first(inputs["xv"]),
                        mask=padding if with_padding else None, causal=True, scale=scale)
    ref = ref.transpose(0, 2, 1, 3).reshape(b, s, heads * size)
    slack = dict(ulps=2, atol=2e-3) if t == "f16" and not fuses(device, t) else tol(device, t)
    assert_float_close(y, ref, t, **slack, what="causal attention")
