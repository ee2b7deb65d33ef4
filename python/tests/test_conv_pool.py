"""Convolution, deconvolution and pooling engines against PyTorch (CPU, float64 references).

Each case builds a one-layer engine through the public Python API, runs it on random inputs
and compares with torch.nn.functional on the same inputs (rounded to the engine's type first for
float16/bfloat16). Padding that PyTorch cannot express directly (asymmetric pre/post, SAME_UPPER
and SAME_LOWER, excluded padding in averages) is applied with F.pad, cropping or a count of the
in-bounds elements. Every engine-building test takes the `device` fixture ("cpu", and "cuda:0"
marked `gpu`).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tensoracle
import tensoracle.trt as trt
from layer_cases import rng_for

PM = trt.PaddingMode
PT = trt.PoolingType

NP = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16)}
TRT = {"f32": trt.float32, "f16": trt.float16, "bf16": trt.bfloat16}
# float32: the brief's tolerances; float16/bfloat16: one rounding of a float32 result (1-2 ulp).
TOL = {"f32": (1e-4, 1e-5), "f16": (2e-3, 2e-3), "bf16": (1.6e-2, 1.6e-2)}

CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
DECONV = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
MAXPOOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
AVGPOOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


def rand(rng, shape, dt, scale=1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(NP[dt])


def t64(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


def run_layer(device: str, x: np.ndarray, dt: str, make_layer, nodes: list | None = None) -> np.ndarray:
    """Builds an engine with input "x" and output "y" = make_layer(network, x), runs it on x;
    the engine's nodes (engine.layers()) go into `nodes` when given."""

    def graph(net):
        t = net.add_input("x", TRT[dt], x.shape)
        y = make_layer(net, t).get_output(0)
        y.name = "y"
        net.mark_output(y)

    decl = tensoracle.EngineBuild(
        {"x": tensoracle.InputShape.fixed(x.shape)}, tensoracle.BuilderSettings(device=device)
    )
    engine = tensoracle.deserialize_engine(tensoracle.build_serialized_engine(graph, decl))
    if nodes is not None:
        nodes.extend(engine.layers())
    out = engine.create_execution().run({"x": x})["y"]
    assert out.dtype == NP[dt]
    return out


def check(out: np.ndarray, ref: torch.Tensor, dt: str, what: str = "") -> None:
    ref = ref.numpy()
    assert out.shape == ref.shape, (what, out.shape, ref.shape)
    rtol, atol = TOL[dt]
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=rtol, atol=atol, err_msg=what)


def pad_nd(x: torch.Tensor, pre, post, value=0.0) -> torch.Tensor:
    """F.pad with per-dim (pre, post) for the trailing len(pre) dims."""
    pads = []
    for a, b in zip(reversed(pre), reversed(post)):
        pads += [a, b]
    return F.pad(x, pads, value=value)


def same_pads(size, k, s, d, mode):
    """TensorRT's SAME padding for a forward window: output ceil(in / s)."""
    pre, post = [], []
    for n, kk, ss, dd in zip(size, k, s, d):
        total = max(0, (math.ceil(n / ss) - 1) * ss + dd * (kk - 1) + 1 - n)
        p = total // 2 if mode == PM.SAME_UPPER else total - total // 2
        pre.append(p)
        post.append(total - p)
    return pre, post


def tup(v, n, default):
    return tuple(v) if v is not None else (default,) * n


def case_params(cases: dict, names=None):
    """pytest params of the named cases (grouped ones included: the kernel volume is checked
    against num_groups when the network is built, after num_groups is set)."""
    return list(names if names is not None else cases)


# ==== convolution ===============================================================================

CONV_CASES = {
    # name: (x shape, maps, kernel, stride, dilation, pre, post, groups, mode, bias)
    "3x3_pad1": ((2, 3, 9, 8), 4, (3, 3), None, None, (1, 1), (1, 1), 1, None, True),
    "stride2_dilation2": ((1, 4, 11, 10), 6, (3, 2), (2, 1), (2, 2), (1, 0), (1, 0), 1, None, False),
    "dilated_asymmetric": ((2, 3, 10, 9), 4, (2, 3), (1, 2), (3, 2), (2, 1), (0, 2), 1, None, True),
    "groups2": ((1, 4, 11, 10), 6, (3, 2), (2, 1), (2, 2), (1, 0), (1, 0), 2, None, False),
    "asymmetric_pad": ((1, 3, 7, 9), 5, (3, 3), (2, 2), None, (2, 0), (0, 1), 1, None, True),
    "same_upper": ((1, 3, 9, 10), 4, (4, 3), (2, 3), None, None, None, 1, PM.SAME_UPPER, True),
    "same_lower": ((1, 3, 9, 10), 4, (4, 3), (2, 3), None, None, None, 1, PM.SAME_LOWER, True),
    "depthwise": ((2, 6, 10, 9), 6, (3, 3), (2, 2), None, (1, 1), (1, 1), 6, None, True),
    "depthwise_multiplier": ((1, 4, 8, 8), 8, (5, 3), None, (1, 2), (2, 2), (2, 2), 4, None, True),
    "1x1": ((2, 8, 6, 7), 5, (1, 1), None, None, None, None, 1, None, True),
    "1x1_stride2": ((1, 8, 7, 7), 4, (1, 1), (2, 2), None, None, None, 1, None, False),
    "1d": ((2, 3, 20), 4, (5,), (2,), (2,), (3,), (1,), 1, None, True),
    "3d": ((1, 4, 5, 6, 7), 4, (3, 2, 3), (1, 2, 2), (2, 1, 1), (1, 0, 1), (1, 1, 0), 1, None, True),
    "3d_groups": ((1, 4, 5, 6, 7), 4, (3, 2, 3), (1, 2, 2), (2, 1, 1), (1, 0, 1), (1, 1, 0), 2, None, True),
    "3d_same": ((1, 2, 5, 6, 5), 3, (3, 3, 2), (2, 1, 2), None, None, None, 1, PM.SAME_LOWER, True),
}


def conv_case(device, name, dt):
    shape, maps, k, s, d, pre, post, groups, mode, has_bias = CONV_CASES[name]
    n = len(k)
    s, d = tup(s, n, 1), tup(d, n, 1)
    rng = rng_for("conv", name, dt)
    x = rand(rng, shape, dt)
    w = rand(rng, (maps, shape[1] // groups) + k, dt, 1 / math.sqrt(shape[1] // groups * math.prod(k)))
    b = rand(rng, (maps,), dt) if has_bias else None

    def layer(net, t):
        c = net.add_convolution_nd(t, maps, k, w, b)
        c.stride_nd = s
        c.dilation_nd = d
        c.num_groups = groups
        if pre is not None:
            c.pre_padding = pre
            c.post_padding = post
        if mode is not None:
            c.padding_mode = mode
        return c

    out = run_layer(device, x, dt, layer)
    if mode is not None:
        p0, p1 = same_pads(shape[2:], k, s, d, mode)
    else:
        p0, p1 = tup(pre, n, 0), tup(post, n, 0)
    xt = pad_nd(t64(x), p0, p1)
    ref = CONV[n](xt, t64(w), t64(b) if b is not None else None, stride=s, dilation=d, groups=groups)
    check(out, ref, dt, f"conv {name} {dt}")


@pytest.mark.parametrize("name", case_params(CONV_CASES))
def test_convolution_f32(device, name):
    conv_case(device, name, "f32")


NARROW_CONV = ["3x3_pad1", "same_upper", "dilated_asymmetric", "groups2", "depthwise", "1x1", "3d"]


@pytest.mark.parametrize("dt", ["f16", "bf16"])
@pytest.mark.parametrize("name", case_params(CONV_CASES, NARROW_CONV))
def test_convolution_narrow(device, name, dt):
    conv_case(device, name, dt)


ACTS = {  # activation type, alpha, and torch's function of a float64 tensor
    "relu": (trt.ActivationType.RELU, 0.0, F.relu),
    "leaky_relu": (trt.ActivationType.LEAKY_RELU, 0.1, lambda t: F.leaky_relu(t, 0.1)),
    "sigmoid": (trt.ActivationType.SIGMOID, 0.0, torch.sigmoid),
    "gelu_erf": (trt.ActivationType.GELU_ERF, 0.0, F.gelu),
}


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("name", ["3x3_pad1", "depthwise", "1x1_stride2"])
def test_convolution_with_activation(device, name, act, dt):
    """A convolution followed by an activation: the builder fuses the pair into one node (the
    bias and the activation applied by one pass on the GPU), with and without a bias; the
    result is the activation of the rounded convolution."""
    shape, maps, k, s, _, pre, post, groups, _, has_bias = CONV_CASES[name]
    kind, alpha, fn = ACTS[act]
    rng = rng_for("conv_act", name, act, dt)
    x = rand(rng, shape, dt)
    w = rand(rng, (maps, shape[1] // groups) + k, dt, 1 / math.sqrt(shape[1] // groups * math.prod(k)))
    b = rand(rng, (maps,), dt) if has_bias else None
    stride = tup(s, len(k), 1)

    def layer(net, t):
        c = net.add_convolution_nd(t, maps, k, w, b)
        c.stride_nd = stride
        c.num_groups = groups
        if pre is not None:
            c.pre_padding = pre
            c.post_padding = post
        a = net.add_activation(c.get_output(0), kind)
        a.alpha = alpha
        return a

    nodes: list = []
    out = run_layer(device, x, dt, layer, nodes)
    assert len(nodes) == 1 and len(nodes[0].fused) == 1, [(n.name, n.type, n.fused) for n in nodes]
    p0, p1 = tup(pre, len(k), 0), tup(post, len(k), 0)
    conv = F.conv2d(pad_nd(t64(x), p0, p1), t64(w), t64(b) if b is not None else None, stride=stride, groups=groups)
    if dt != "f32":  # the convolution is stored in its type before the activation
        conv = torch.from_numpy(conv.numpy().astype(NP[dt]).astype(np.float64))
    check(out, fn(conv), dt, f"conv {name} + {act} {dt}")


def test_convolution_resnet_stem(device):
    """A ResNet stem-like convolution: 7x7, stride 2, padding 3, 3 -> 16 maps."""
    rng = rng_for("stem")
    x = rand(rng, (2, 3, 64, 64), "f32")
    w = rand(rng, (16, 3, 7, 7), "f32", 0.1)
    b = rand(rng, (16,), "f32")

    def layer(net, t):
        c = net.add_convolution_nd(t, 16, (7, 7), w, b)
        c.stride_nd = (2, 2)
        c.padding_nd = (3, 3)
        return c

    out = run_layer(device, x, "f32", layer)
    check(out, F.conv2d(t64(x), t64(w), t64(b), stride=2, padding=3), "f32", "stem")


# ==== deconvolution =============================================================================

DECONV_CASES = {
    # name: (x shape, maps, kernel, stride, dilation, pre, post, groups, mode, bias)
    "s2_pad1": ((2, 3, 5, 4), 4, (3, 3), (2, 2), None, (1, 1), (1, 1), 1, None, True),
    "asymmetric_dilated": ((1, 4, 4, 5), 6, (3, 2), (2, 3), (2, 1), (2, 0), (0, 1), 1, None, False),
    "groups2": ((1, 4, 4, 5), 6, (3, 2), (2, 3), (2, 1), (2, 0), (0, 1), 2, None, False),
    "k4_s2_pad1": ((1, 4, 6, 6), 3, (4, 4), (2, 2), None, (1, 1), (1, 1), 1, None, True),
    "same_upper": ((1, 2, 5, 4), 3, (5, 4), (2, 2), None, None, None, 1, PM.SAME_UPPER, True),
    "same_lower": ((1, 2, 5, 4), 3, (5, 4), (2, 2), None, None, None, 1, PM.SAME_LOWER, True),
    "depthwise": ((1, 4, 5, 5), 4, (3, 3), (2, 2), None, (1, 1), (0, 0), 4, None, True),
    "1x1": ((2, 6, 4, 5), 3, (1, 1), None, None, None, None, 1, None, True),
    "1d": ((2, 3, 9), 2, (4,), (3,), (2,), (1,), (2,), 1, None, True),
    "3d": ((1, 4, 3, 4, 3), 4, (2, 3, 3), (2, 1, 2), None, (0, 1, 1), (1, 0, 1), 1, None, True),
    "3d_groups": ((1, 4, 3, 4, 3), 4, (2, 3, 3), (2, 1, 2), None, (0, 1, 1), (1, 0, 1), 2, None, True),
    "same_span_below_stride": ((1, 2, 4, 5), 2, (2, 1), (3, 2), None, None, None, 1, PM.SAME_UPPER, True),
}


def deconv_case(device, name, dt):
    shape, maps, k, s, d, pre, post, groups, mode, has_bias = DECONV_CASES[name]
    n = len(k)
    s, d = tup(s, n, 1), tup(d, n, 1)
    rng = rng_for("deconv", name, dt)
    x = rand(rng, shape, dt)
    w = rand(rng, (shape[1], maps // groups) + k, dt, 1 / math.sqrt(shape[1] // groups * math.prod(k)))
    b = rand(rng, (maps,), dt) if has_bias else None

    def layer(net, t):
        c = net.add_deconvolution_nd(t, maps, k, w, b)
        c.stride_nd = s
        c.dilation_nd = d
        c.num_groups = groups
        if pre is not None:
            c.pre_padding = pre
            c.post_padding = post
        if mode is not None:
            c.padding_mode = mode
        return c

    out = run_layer(device, x, dt, layer)
    # The full transposed convolution, then cropped by (pre, post) (padded where SAME asks for
    # more than the full output holds).
    full = DECONV[n](t64(x), t64(w), None, stride=s, dilation=d, groups=groups)
    sizes = []
    for i in range(n):
        span = d[i] * (k[i] - 1) + 1
        if mode is not None:
            total = max(0, span - s[i])
            p0 = total // 2 if mode == PM.SAME_UPPER else total - total // 2
            size = shape[2 + i] * s[i]
        else:
            p0 = pre[i] if pre is not None else 0
            size = full.shape[2 + i] - p0 - (post[i] if post is not None else 0)
        sizes.append((p0, size))
    ref = full
    for i, (p0, size) in enumerate(sizes):
        ref = ref.narrow(2 + i, p0, min(size, ref.shape[2 + i] - p0))
    ref = pad_nd(ref, [0] * n, [size - ref.shape[2 + i] for i, (_, size) in enumerate(sizes)])
    if b is not None:
        ref = ref + t64(b).reshape((1, maps) + (1,) * n)
    check(out, ref, dt, f"deconv {name} {dt}")


@pytest.mark.parametrize("name", case_params(DECONV_CASES))
def test_deconvolution_f32(device, name):
    deconv_case(device, name, "f32")


@pytest.mark.parametrize("dt", ["f16", "bf16"])
@pytest.mark.parametrize("name", case_params(DECONV_CASES, ["s2_pad1", "same_lower", "groups2", "3d"]))
def test_deconvolution_narrow(device, name, dt):
    deconv_case(device, name, dt)


def test_deconvolution_matches_torch_padding_directly(device):
    """Symmetric padding is PyTorch's own `padding` argument."""
    rng = rng_for("deconv-torch")
    x = rand(rng, (2, 4, 6, 5), "f32")
    w = rand(rng, (4, 3, 3, 3), "f32", 0.3)
    b = rand(rng, (3,), "f32")

    def layer(net, t):
        c = net.add_deconvolution_nd(t, 3, (3, 3), w, b)
        c.stride_nd = (2, 2)
        c.padding_nd = (1, 1)
        return c

    out = run_layer(device, x, "f32", layer)
    check(out, F.conv_transpose2d(t64(x), t64(w), t64(b), stride=2, padding=1), "f32", "deconv")


# ==== pooling ===================================================================================

POOL_CASES = {
    # name: (x shape, window, stride, pre, post, mode)
    "2x2_s2": ((2, 3, 8, 9), (2, 2), (2, 2), None, None, None),
    "3x3_s2_pad1": ((1, 3, 9, 8), (3, 3), (2, 2), (1, 1), (1, 1), None),
    "asymmetric_pad": ((1, 2, 7, 9), (3, 4), (1, 2), (2, 0), (0, 3), None),
    "round_up": ((1, 2, 8, 10), (3, 3), (2, 2), (1, 1), (1, 1), PM.EXPLICIT_ROUND_UP),
    "same_upper": ((1, 2, 7, 8), (4, 3), (2, 3), None, None, PM.SAME_UPPER),
    "same_lower": ((1, 2, 7, 8), (4, 3), (2, 3), None, None, PM.SAME_LOWER),
    "1d": ((2, 3, 11), (3,), (2,), (1,), (1,), None),
    "3d": ((1, 2, 5, 6, 7), (2, 3, 2), (2, 1, 2), (1, 1, 0), (0, 1, 1), None),
}

POOL_KINDS = ["max", "avg_excl", "avg_incl", "blend"]


def pool_ref(x: torch.Tensor, kind, k, s, p0, p1, round_up, blend):
    """PyTorch's pooling with explicit (pre, post) padding: max over -inf padding; averages
    from zero-padded sums divided by the in-bounds count or by the window clipped to the
    padded input (ROUND_UP: PyTorch's ceil_mode with symmetric padding)."""
    n = len(k)
    if round_up:
        assert list(p0) == list(p1), "ROUND_UP cases use symmetric padding (PyTorch's ceil_mode)"
        mx = MAXPOOL[n](x, k, s, padding=p0, ceil_mode=True)
        incl = AVGPOOL[n](x, k, s, padding=p0, ceil_mode=True, count_include_pad=True)
        excl = AVGPOOL[n](x, k, s, padding=p0, ceil_mode=True, count_include_pad=False)
    else:
        mx = MAXPOOL[n](pad_nd(x, p0, p1, -math.inf), k, s)
        incl = AVGPOOL[n](pad_nd(x, p0, p1), k, s)
        area = math.prod(k)
        counts = AVGPOOL[n](pad_nd(torch.ones_like(x), p0, p1), k, s) * area
        excl = incl * area / counts
    if kind == "max":
        return mx
    if kind == "avg_excl":
        return excl
    if kind == "avg_incl":
        return incl
    return blend * mx + (1 - blend) * incl


POOL_TYPE = {"max": PT.MAX, "avg_excl": PT.AVERAGE, "avg_incl": PT.AVERAGE, "blend": PT.MAX_AVERAGE_BLEND}
BLEND = 0.3


def pool_layer(name, kind):
    """The layer function pooling `kind` with POOL_CASES[name]'s window, strides and padding."""
    _, k, s, pre, post, mode = POOL_CASES[name]

    def layer(net, t):
        p = net.add_pooling_nd(t, POOL_TYPE[kind], k)
        p.stride_nd = s
        if pre is not None:
            p.pre_padding = pre
            p.post_padding = post
        if mode is not None:
            p.padding_mode = mode
        p.average_count_excludes_padding = kind == "avg_excl"
        if kind == "blend":
            p.blend_factor = BLEND
        return p

    return layer


def pool_case(device, name, kind, dt):
    shape, k, s, pre, post, mode = POOL_CASES[name]
    n = len(k)
    x = rand(rng_for("pool", name, kind, dt), shape, dt)
    out = run_layer(device, x, dt, pool_layer(name, kind))
    if mode in (PM.SAME_UPPER, PM.SAME_LOWER):
        p0, p1 = same_pads(shape[2:], k, s, (1,) * n, mode)
    else:
        p0, p1 = tup(pre, n, 0), tup(post, n, 0)
    ref = pool_ref(t64(x), kind, k, s, p0, p1, mode == PM.EXPLICIT_ROUND_UP, BLEND)
    check(out, ref, dt, f"pool {name} {kind} {dt}")


@pytest.mark.parametrize("kind", POOL_KINDS)
@pytest.mark.parametrize("name", list(POOL_CASES))
def test_pooling_f32(device, name, kind):
    pool_case(device, name, kind, "f32")


@pytest.mark.parametrize("dt", ["f16", "bf16"])
@pytest.mark.parametrize("kind", POOL_KINDS)
@pytest.mark.parametrize("name", ["3x3_s2_pad1", "round_up", "3d"])
def test_pooling_narrow(device, name, kind, dt):
    pool_case(device, name, kind, dt)


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("kind", ["max", "avg_excl", "blend"])
@pytest.mark.parametrize("name", ["2x2_s2", "3x3_s2_pad1", "asymmetric_pad", "1d", "3d"])
def test_pooling_nan_and_inf(device, name, kind, dt):
    """NaN in a window gives NaN (max and average), infinities propagate (+inf and -inf in one
    average window: NaN), in every window path: the fixed 2 x 2 and 3 x 3, a general 2-D window,
    1-D and 3-D."""
    shape, k, s, pre, post, _ = POOL_CASES[name]
    n = len(k)
    rng = rng_for("pool-nan", name, kind, dt)
    x = rand(rng, shape, dt)
    flat = x.reshape(-1)
    picks = rng.choice(flat.size, size=max(3, flat.size // 12), replace=False)
    for j, i in enumerate(picks):
        flat[i] = (np.nan, np.inf, -np.inf)[j % 3]
    out = run_layer(device, x, dt, pool_layer(name, kind))
    ref = pool_ref(t64(x), kind, k, s, tup(pre, n, 0), tup(post, n, 0), False, BLEND)
    assert np.isnan(ref.numpy()).any() and np.isinf(ref.numpy()).any(), "the case must exercise both"
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref.numpy()), err_msg=f"NaN positions {name} {kind}")
    check(out, ref, dt, f"pool {name} {kind} {dt} with NaN/inf")


def test_pooling_padding_nd_matches_torch_directly(device):
    """Symmetric padding through padding_nd, PyTorch's own padding and count_include_pad."""
    x = rand(rng_for("pool-direct"), (2, 4, 10, 9), "f32")
    for excl in (True, False):

        def layer(net, t, excl=excl):
            p = net.add_pooling_nd(t, PT.AVERAGE, (3, 3))
            p.stride_nd = (2, 2)
            p.padding_nd = (1, 1)
            p.average_count_excludes_padding = excl
            return p

        out = run_layer(device, x, "f32", layer)
        ref = F.avg_pool2d(t64(x), 3, 2, padding=1, count_include_pad=not excl)
        check(out, ref, "f32", f"avg excl={excl}")

    def max_layer(net, t):
        p = net.add_pooling_nd(t, PT.MAX, (3, 3))
        p.stride_nd = (2, 2)
        p.padding_nd = (1, 1)
        return p

    check(run_layer(device, x, "f32", max_layer), F.max_pool2d(t64(x), 3, 2, padding=1), "f32", "max")


def test_conv_then_pool_network(device):
    """A small ResNet-like block: conv 3x3 + bias, max pool 3x3/2 pad 1, conv 1x1."""
    rng = rng_for("block")
    x = rand(rng, (2, 3, 16, 16), "f32")
    w1 = rand(rng, (8, 3, 3, 3), "f32", 0.3)
    b1 = rand(rng, (8,), "f32")
    w2 = rand(rng, (4, 8, 1, 1), "f32", 0.3)

    def layer(net, t):
        c1 = net.add_convolution_nd(t, 8, (3, 3), w1, b1)
        c1.padding_nd = (1, 1)
        p = net.add_pooling_nd(c1.get_output(0), PT.MAX, (3, 3))
        p.stride_nd = (2, 2)
        p.padding_nd = (1, 1)
        return net.add_convolution_nd(p.get_output(0), 4, (1, 1), w2, None)

    out = run_layer(device, x, "f32", layer)
    ref = F.conv2d(F.max_pool2d(F.conv2d(t64(x), t64(w1), t64(b1), padding=1), 3, 2, padding=1), t64(w2))
    check(out, ref, "f32", "block")
