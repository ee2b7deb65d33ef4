"""Indexing layers end to end through the public Python API: concatenation, slice (every sample
mode), gather (DEFAULT, ELEMENT, ND), select, padding, resize and einsum, each against NumPy
(np.concatenate, slicing, np.pad, np.take, np.take_along_axis, np.where, np.einsum) or, for
resize, against PyTorch's interpolate.

Every engine-building test takes the `device` fixture ("cpu", and "cuda:0" marked `gpu`).
Known tensoracle bugs would stay visible as strict xfails (search for "xfail"); none is open.
"""

from __future__ import annotations


import ml_dtypes
import numpy as np
import pytest

import tensoracle
import tensoracle._native as native
import tensoracle.trt as trt
from layer_cases import constant, run_network, rng_for


def enum(name: str):
    """An enum by its TensorRT name: from tensoracle.trt, else from the native module (see
    test_trt_exports_the_index_layer_enums)."""
    return getattr(trt, name, None) or getattr(native, name)


SampleMode = enum("SampleMode")
GatherMode = enum("GatherMode")
InterpolationMode = enum("InterpolationMode")
CoordinateTransformation = enum("ResizeCoordinateTransformation")
ResizeSelector = enum("ResizeSelector")
ResizeRoundMode = enum("ResizeRoundMode")

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = {
    "f32": np.dtype(np.float32),
    "f16": np.dtype(np.float16),
    "bf16": BF16,
    "i8": np.dtype(np.int8),
    "u8": np.dtype(np.uint8),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "bool": np.dtype(np.bool_),
}
SIZES = ["u8", "f16", "f32", "i64"]  # one type per element size: 1, 2, 4, 8 bytes


def random_array(rng, shape, name: str) -> np.ndarray:
    dtype = DTYPES[name]
    if name == "bool":
        return rng.integers(0, 2, shape).astype(np.bool_)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), shape, endpoint=True).astype(dtype)
    return rng.uniform(-4, 4, shape).astype(np.float32).astype(dtype)


# ---- enums ----------------------------------------------------------------------------------


def test_trt_exports_the_index_layer_enums():
    for name in ("SampleMode", "GatherMode", "InterpolationMode", "ResizeCoordinateTransformation",
                 "ResizeSelector", "ResizeRoundMode"):
        assert hasattr(trt, name), name


# ---- concatenation --------------------------------------------------------------------------


@pytest.mark.parametrize("name", SIZES + ["bool"])
@pytest.mark.parametrize("rank", [1, 2, 3, 4, 5])
def test_concatenation_default_axis(device, name, rank):
    """Sizes differ along TensorRT's default axis (rank - 3, or 0)."""
    axis = max(0, rank - 3)
    rng = rng_for("concat", name, rank)
    shapes = []
    for n in (2, 1, 3):
        s = [2, 3, 4, 2, 3][:rank]
        s[axis] = n
        shapes.append(tuple(s))
    arrays = {f"x{i}": random_array(rng, s, name) for i, s in enumerate(shapes)}
    y, _ = run_network(device, arrays, lambda n, t: n.add_concatenation([t["x0"], t["x1"], t["x2"]]))
    assert np.array_equal(y, np.concatenate(list(arrays.values()), axis=axis))


@pytest.mark.parametrize("name", SIZES)
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2])
def test_concatenation_set_axis(device, name, axis):
    """Inputs of equal dims, so that the layer is valid before `axis` is set (see below)."""
    rng = rng_for("concat-axis", name, axis)
    arrays = {f"x{i}": random_array(rng, (2, 3, 4), name) for i in range(3)}

    def body(network, t):
        layer = network.add_concatenation([t["x0"], t["x1"], t["x2"]])
        layer.axis = axis
        return layer

    y, _ = run_network(device, arrays, body)
    assert np.array_equal(y, np.concatenate(list(arrays.values()), axis=axis))


def test_concatenation_tensorrt_pattern_non_default_axis(device):
    a = np.ones((2, 3, 4), np.float32)
    b = np.zeros((2, 5, 4), np.float32)

    def body(network, t):
        layer = network.add_concatenation([t["a"], t["b"]])
        layer.axis = 1
        return layer

    y, _ = run_network(device, {"a": a, "b": b}, body)
    assert np.array_equal(y, np.concatenate([a, b], axis=1))


def test_concatenation_with_constants(device):
    # TensorRT's default axis for rank 4: rank - 3 = 1.
    rng = rng_for("concat-default")
    x = random_array(rng, (2, 3, 4, 5), "f32")
    c = random_array(rng, (2, 2, 4, 5), "f32")
    y, _ = run_network(device, {"x": x}, lambda n, t: n.add_concatenation([t["x"], constant(n, c), t["x"]]))
    assert np.array_equal(y, np.concatenate([x, c, x], axis=1))


# ---- slice ----------------------------------------------------------------------------------


def slice_layer(network, x, start, shape, stride, mode, fill=None):
    """A slice in `mode`. The layer is added in bounds (STRICT_BOUNDS is checked at once) and
    then moved; see test_slice_tensorrt_pattern_out_of_bounds_then_mode. The fill constant is
    added first: a layer's inputs must be produced before it."""
    fill_tensor = constant(network, fill) if fill is not None else None
    layer = network.add_slice(x, tuple(0 for _ in start), tuple(1 for _ in start), tuple(1 for _ in start))
    layer.mode = mode
    layer.stride = tuple(stride)
    layer.shape = tuple(shape)
    layer.start = tuple(start)
    if fill_tensor is not None:
        layer.set_input(4, fill_tensor)  # TensorRT's input 4: the FILL value
    return layer


def sample_ref(x: np.ndarray, start, shape, stride, np_mode: str, **kwargs) -> np.ndarray:
    """out[i] = pad(x)[start + i * stride] with NumPy's padding modes."""
    idx = [s + np.arange(n) * st for s, n, st in zip(start, shape, stride)]
    pad = [max(0, -int(min(i.min(), 0)), int(max(i.max(), 0)) - d + 1) if len(i) else 0 for i, d in zip(idx, x.shape)]
    width = [(p, p) for p in pad]
    padded = np.pad(x, width, mode=np_mode, **kwargs)
    return padded[np.ix_(*[i + p for i, p in zip(idx, pad)])]


@pytest.mark.parametrize("name", SIZES)
def test_slice_strict_negative_strides(device, name):
    x = random_array(rng_for("slice", name), (4, 5, 6), name)
    y, _ = run_network(device, {"x": x}, lambda n, t: n.add_slice(t["x"], (3, 0, 5), (2, 3, 3), (-2, 2, -1)))
    assert np.array_equal(y, x[3::-2, 0:5:2, 5:2:-1])


SLICES = [
    ((-4, -7, 9), (5, 9, 7), (2, 3, -2)),
    ((5, 2, -3), (4, 6, 11), (-1, -1, 1)),
    ((-10, 0, 2), (12, 4, 3), (3, 1, 1)),
]


@pytest.mark.parametrize("name", SIZES)
@pytest.mark.parametrize("mode", ["WRAP", "CLAMP", "REFLECT"])
@pytest.mark.parametrize("case", range(len(SLICES)))
def test_slice_modes(device, name, mode, case):
    start, shape, stride = SLICES[case]
    x = random_array(rng_for("slice-mode", name, mode, case), (3, 4, 5), name)
    np_mode = {"WRAP": "wrap", "CLAMP": "edge", "REFLECT": "reflect"}[mode]
    y, _ = run_network(device, {"x": x}, lambda n, t: slice_layer(n, t["x"], start, shape, stride, getattr(SampleMode, mode)))
    assert np.array_equal(y, sample_ref(x, start, shape, stride, np_mode))


@pytest.mark.parametrize("name", SIZES)
@pytest.mark.parametrize("with_value", [False, True])
def test_slice_fill(device, name, with_value):
    start, shape, stride = SLICES[1]
    rng = rng_for("slice-fill", name, with_value)
    x = random_array(rng, (3, 4, 5), name)
    value = random_array(rng, (1,), name) if with_value else np.zeros((1,), DTYPES[name])
    y, _ = run_network(
        device,
        {"x": x},
        lambda n, t: slice_layer(n, t["x"], start, shape, stride, SampleMode.FILL, value if with_value else None),
    )
    assert np.array_equal(y, sample_ref(x, start, shape, stride, "constant", constant_values=value[0]))


def test_slice_reflect_of_one_element(device):
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    y, _ = run_network(device, {"x": x}, lambda n, t: slice_layer(n, t["x"], (-3, -9), (5, 30), (1, 1), SampleMode.REFLECT))
    assert np.array_equal(y, sample_ref(x, (-3, -9), (5, 30), (1, 1), "reflect"))


def test_slice_tensorrt_pattern_out_of_bounds_then_mode(device):
    x = np.arange(5, dtype=np.float32)

    def body(network, t):
        layer = network.add_slice(t["x"], (-2,), (9,), (1,))
        layer.mode = SampleMode.WRAP
        return layer

    y, _ = run_network(device, {"x": x}, body)
    assert np.array_equal(y, np.take(x, np.arange(-2, 7), mode="wrap"))


# ---- gather ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SIZES)
@pytest.mark.parametrize("index_type", ["i32", "i64"])
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_gather_default(device, name, index_type, axis):
    rng = rng_for("gather", name, index_type, axis)
    x = random_array(rng, (3, 4, 5), name)
    dim = x.shape[axis]
    idx = rng.integers(-dim, dim, (2, 3)).astype(DTYPES[index_type])
    y, _ = run_network(device, {"x": x, "i": idx}, lambda n, t: n.add_gather(t["x"], t["i"], axis))
    assert np.array_equal(y, np.take(x, idx, axis=axis))


def test_gather_scalar_index_and_constant_indices(device):
    x = random_array(rng_for("gather-scalar"), (4, 6), "f32")
    # (layer_cases.constant would make the 0-d index 1-d: np.ascontiguousarray returns ndim >= 1.)
    y, _ = run_network(
        device, {"x": x}, lambda n, t: n.add_gather(t["x"], n.add_constant((), np.array(-2, np.int32)).get_output(0), 1)
    )
    assert np.array_equal(y, x[:, -2])
    idx = np.array([[3, -1], [0, -4]], np.int64)
    y, _ = run_network(device, {"x": x}, lambda n, t: n.add_gather(t["x"], constant(n, idx), 0))
    assert np.array_equal(y, np.take(x, idx, axis=0))


def test_gather_default_one_elementwise_dim(device):
    rng = rng_for("gather-nb1")
    x = random_array(rng, (3, 5, 4), "f16")
    idx = rng.integers(-5, 5, (3, 6)).astype(np.int64)

    def body(network, t):
        layer = network.add_gather(t["x"], t["i"], 1)
        layer.num_elementwise_dims = 1
        return layer

    y, _ = run_network(device, {"x": x, "i": idx}, body)
    assert np.array_equal(y, np.stack([np.take(x[b], idx[b], axis=0) for b in range(3)]))


def test_gather_elementwise_dim_mismatch_is_refused_before_running():
    def graph(network):
        x = network.add_input("x", trt.float32, (3, 5, 4))
        i = network.add_input("i", trt.int32, (2, 6))
        layer = network.add_gather(x, i, 1)
        layer.num_elementwise_dims = 1  # data dim 0 is 3, indices dim 0 is 2
        y = layer.get_output(0)
        y.name = "y"
        network.mark_output(y)

    shapes = {"x": tensoracle.InputShape.fixed((3, 5, 4)), "i": tensoracle.InputShape.fixed((2, 6))}
    decl = tensoracle.EngineBuild(shapes, tensoracle.BuilderSettings(device="cpu"))
    with pytest.raises(tensoracle.InvalidArgument):
        tensoracle.build_serialized_engine(graph, decl)


@pytest.mark.parametrize("name", SIZES)
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_gather_element(device, name, axis):
    rng = rng_for("gather-element", name, axis)
    x = random_array(rng, (4, 5, 6), name)
    shape = [4, 5, 6]
    shape[axis] = 3
    idx = rng.integers(-x.shape[axis], x.shape[axis], shape).astype(np.int32)

    def body(network, t):
        layer = network.add_gather_v2(t["x"], t["i"], GatherMode.ELEMENT)
        layer.axis = axis
        return layer

    y, _ = run_network(device, {"x": x, "i": idx}, body)
    assert np.array_equal(y, np.take_along_axis(x, np.where(idx < 0, idx + x.shape[axis], idx), axis=axis))


@pytest.mark.parametrize("name", SIZES)
@pytest.mark.parametrize("batch_dims", [0, 1])
def test_gather_nd(device, name, batch_dims):
    rng = rng_for("gather-nd", name, batch_dims)
    x = random_array(rng, (3, 4, 5, 2), name)
    if batch_dims == 0:
        idx = np.stack([rng.integers(-3, 3, (2, 6)), rng.integers(-4, 4, (2, 6))], axis=-1).astype(np.int64)
        ref = x[idx[..., 0], idx[..., 1]]
    else:
        idx = np.stack([rng.integers(-4, 4, (3, 6)), rng.integers(-5, 5, (3, 6))], axis=-1).astype(np.int32)
        ref = np.stack([x[b][idx[b, :, 0], idx[b, :, 1]] for b in range(3)])

    def body(network, t):
        layer = network.add_gather_v2(t["x"], t["i"], GatherMode.ND)
        layer.num_elementwise_dims = batch_dims
        return layer

    y, _ = run_network(device, {"x": x, "i": idx}, body)
    assert np.array_equal(y, ref)


@pytest.mark.parametrize("mode", ["DEFAULT", "ELEMENT", "ND"])
@pytest.mark.parametrize("bad", [5, -6, 1 << 40])
def test_gather_out_of_range_index_raises_or_zero_fills(device, mode, bad):
    x = np.arange(30, dtype=np.float32).reshape(5, 6)
    if mode == "DEFAULT":
        idx = np.array([0, bad, 1], np.int64)
    elif mode == "ELEMENT":
        idx = np.zeros((5, 6), np.int64)
        idx[3, 2] = bad
    else:
        idx = np.array([[1, 2], [bad, 0]], np.int64)

    def body(network, t):
        if mode == "DEFAULT":
            return network.add_gather(t["x"], t["i"], 0)
        return network.add_gather_v2(t["x"], t["i"], getattr(GatherMode, mode))

    if device == "cpu":
        with pytest.raises(tensoracle.InvalidArgument, match=rf"gather.*{bad}.*size 5"):
            run_network(device, {"x": x, "i": idx}, body)
        return
    # A GPU kernel cannot raise: what the bad index would have copied is zeros (cuda/kernels.h).
    out, _ = run_network(device, {"x": x, "i": idx}, body)
    if mode == "DEFAULT":
        expected = np.stack([x[0], np.zeros(6, np.float32), x[1]])
    elif mode == "ELEMENT":
        expected = np.tile(x[0], (5, 1))
        expected[3, 2] = 0
    else:
        expected = np.array([x[1, 2], 0], np.float32)
    np.testing.assert_array_equal(out, expected)


# ---- select ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SIZES + ["bool"])
def test_select_broadcast(device, name):
    rng = rng_for("select", name)
    c = rng.integers(0, 2, (2, 1, 5)).astype(np.bool_)
    a = random_array(rng, (1, 3, 5), name)
    b = random_array(rng, (2, 3, 1), name)
    y, _ = run_network(device, {"c": c, "a": a, "b": b}, lambda n, t: n.add_select(t["c"], t["a"], t["b"]))
    assert np.array_equal(y, np.where(c, a, b))


# ---- padding --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SIZES)
@pytest.mark.parametrize(
    "pre,post", [((1, 2), (3, 0)), ((-1, 2), (1, -3)), ((0, 1, -1), (2, -2, 0)), ((2, 0, 0, 1), (0, 1, 1, 0))]
)
def test_padding(device, name, pre, post):
    x = random_array(rng_for("pad", name, pre, post), (2, 3, 4, 5), name)
    y, _ = run_network(device, {"x": x}, lambda n, t: n.add_padding_nd(t["x"], pre, post))
    r, k = x.ndim, len(pre)
    width = [(0, 0)] * (r - k) + [(max(a, 0), max(b, 0)) for a, b in zip(pre, post)]
    ref = np.pad(x, width, mode="constant")
    crop = [slice(None)] * (r - k) + [slice(max(-a, 0), ref.shape[r - k + i] - max(-b, 0)) for i, (a, b) in enumerate(zip(pre, post))]
    assert np.array_equal(y, ref[tuple(crop)])


# ---- resize ---------------------------------------------------------------------------------


def torch_interpolate(x: np.ndarray, size, mode: str, align_corners=None, scale_factor=None) -> np.ndarray:
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    kwargs = {"mode": mode}
    if align_corners is not None:
        kwargs["align_corners"] = align_corners
    if scale_factor is not None:
        kwargs["scale_factor"] = scale_factor
    else:
        kwargs["size"] = size
    return torch.nn.functional.interpolate(t, **kwargs).numpy()


def resize_layer(network, x, mode, ct, *, shape=None, scales=None, rounding=None, selector=None, cubic=None):
    layer = network.add_resize(x)
    layer.resize_mode = mode
    layer.coordinate_transformation = ct
    if rounding is not None:
        layer.nearest_rounding = rounding
    if selector is not None:
        layer.selector_for_single_pixel = selector
    if cubic is not None:
        layer.cubic_coeff = cubic
    if shape is not None:
        layer.shape = tuple(shape)
    if scales is not None:
        layer.scales = list(scales)
    return layer


SIZES_2D = [(8, 12), (2, 3), (7, 5), (9, 13)]


@pytest.mark.parametrize("size", SIZES_2D)
@pytest.mark.parametrize("name", ["f32", "u8", "i64"])
def test_resize_nearest_like_torch(device, size, name):
    x = random_array(rng_for("nearest", size, name), (2, 3, 4, 6), name)
    out = (2, 3) + size
    y, _ = run_network(
        device,
        {"x": x},
        lambda n, t: resize_layer(
            n, t["x"], InterpolationMode.NEAREST, CoordinateTransformation.ASYMMETRIC, shape=out, rounding=ResizeRoundMode.FLOOR
        ),
    )
    ref = torch_interpolate(x.astype(np.float32), size, "nearest")
    assert np.array_equal(y.astype(np.float32), ref)


@pytest.mark.parametrize("size", SIZES_2D)
def test_resize_nearest_exact_like_torch(device, size):
    x = random_array(rng_for("nearest-exact", size), (2, 3, 4, 6), "f32")
    out = (2, 3) + size
    y, _ = run_network(
        device,
        {"x": x},
        lambda n, t: resize_layer(
            n, t["x"], InterpolationMode.NEAREST, CoordinateTransformation.HALF_PIXEL, shape=out, rounding=ResizeRoundMode.HALF_UP
        ),
    )
    assert np.array_equal(y, torch_interpolate(x, size, "nearest-exact"))


@pytest.mark.parametrize("rounding", ["HALF_UP", "HALF_DOWN", "FLOOR", "CEIL"])
@pytest.mark.parametrize("ct", ["ALIGN_CORNERS", "ASYMMETRIC", "HALF_PIXEL"])
@pytest.mark.parametrize("selector", ["FORMULA", "UPPER"])
def test_resize_nearest_modes(device, rounding, ct, selector):
    """Every rounding and transformation against ONNX Resize's formulas (1-D, exact ties)."""
    x = np.arange(6, dtype=np.float32).reshape(1, 6) * 10
    for out in (9, 4, 1):
        y, _ = run_network(
            device,
            {"x": x},
            lambda n, t: resize_layer(
                n,
                t["x"],
                InterpolationMode.NEAREST,
                getattr(CoordinateTransformation, ct),
                shape=(1, out),
                rounding=getattr(ResizeRoundMode, rounding),
                selector=getattr(ResizeSelector, selector),
            ),
        )
        o = np.arange(out, dtype=np.float64)
        if out == 1 and selector == "UPPER":
            pos = np.zeros(1)
        elif ct == "ALIGN_CORNERS":
            pos = o * 5 / (out - 1) if out > 1 else np.zeros(1)
        elif ct == "ASYMMETRIC":
            pos = o * 6 / out
        else:
            pos = (o + 0.5) * 6 / out - 0.5
        fl = np.floor(pos)
        r = {
            "HALF_UP": np.where(pos - fl >= 0.5, fl + 1, fl),
            "HALF_DOWN": np.where(pos - fl > 0.5, fl + 1, fl),
            "FLOOR": fl,
            "CEIL": np.ceil(pos),
        }[rounding]
        ref = x[:, np.clip(r, 0, 5).astype(int)]
        assert np.array_equal(y, ref), (out, y, ref)


@pytest.mark.parametrize("size", SIZES_2D)
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_resize_linear_cubic_like_torch(device, size, align_corners, mode):
    x = random_array(rng_for("interp", size, align_corners, mode), (2, 3, 5, 6), "f32")
    ct = CoordinateTransformation.ALIGN_CORNERS if align_corners else CoordinateTransformation.HALF_PIXEL
    im = InterpolationMode.LINEAR if mode == "bilinear" else InterpolationMode.CUBIC
    y, _ = run_network(
        device, {"x": x}, lambda n, t: resize_layer(n, t["x"], im, ct, shape=(2, 3) + size, cubic=-0.75)
    )
    np.testing.assert_allclose(y, torch_interpolate(x, size, mode, align_corners), rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("name", ["f16", "bf16"])
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_resize_narrow_floats(device, name, mode):
    x = random_array(rng_for("interp-narrow", name, mode), (1, 2, 5, 6), name)
    im = InterpolationMode.LINEAR if mode == "bilinear" else InterpolationMode.CUBIC
    y, _ = run_network(
        device, {"x": x}, lambda n, t: resize_layer(n, t["x"], im, CoordinateTransformation.HALF_PIXEL, shape=(1, 2, 9, 11))
    )
    assert y.dtype == DTYPES[name]
    ref = torch_interpolate(x.astype(np.float32), (9, 11), mode, False)
    # Computed in float32 and rounded once: within half an ulp of the narrow type (+ float32 noise).
    ulp = np.spacing(np.abs(ref).astype(DTYPES[name])).astype(np.float32)
    assert np.all(np.abs(y.astype(np.float32) - ref) <= ulp * 0.5 + 1e-4)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic", "nearest"])
def test_resize_scales_like_torch(device, mode):
    x = random_array(rng_for("scales", mode), (1, 2, 5, 6), "f32")
    im = {"bilinear": InterpolationMode.LINEAR, "bicubic": InterpolationMode.CUBIC, "nearest": InterpolationMode.NEAREST}[mode]
    ct = CoordinateTransformation.ASYMMETRIC if mode == "nearest" else CoordinateTransformation.HALF_PIXEL
    y, _ = run_network(
        device,
        {"x": x},
        lambda n, t: resize_layer(n, t["x"], im, ct, scales=(1, 1, 2, 3), rounding=ResizeRoundMode.FLOOR),
    )
    assert y.shape == (1, 2, 10, 18)
    ref = torch_interpolate(x, None, mode, None if mode == "nearest" else False, scale_factor=(2.0, 3.0))
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=2e-5)


def test_resize_linear_over_three_dims(device):
    """Trilinear (5-D input) with half-pixel coordinates, like torch's 'trilinear'."""
    x = random_array(rng_for("trilinear"), (1, 2, 3, 4, 5), "f32")
    y, _ = run_network(
        device,
        {"x": x},
        lambda n, t: resize_layer(n, t["x"], InterpolationMode.LINEAR, CoordinateTransformation.HALF_PIXEL, shape=(1, 2, 5, 7, 4)),
    )
    np.testing.assert_allclose(y, torch_interpolate(x, (5, 7, 4), "trilinear", False), rtol=1e-5, atol=2e-5)


# ---- einsum ---------------------------------------------------------------------------------

EQUATIONS = [
    ("bhqd,bhkd->bhqk", [(2, 3, 5, 8), (2, 3, 7, 8)]),
    ("bhqk,bhkd->bhqd", [(2, 3, 5, 7), (2, 3, 7, 8)]),
    ("bsd,de->bse", [(2, 5, 6), (6, 4)]),
    ("bij,bjk->bik", [(3, 4, 5), (3, 5, 6)]),
    ("ij,jk->ik", [(4, 5), (5, 6)]),
    ("bi,bj->bij", [(3, 4), (3, 5)]),
    ("i,i->", [(17,), (17,)]),
    ("ki,kj->ij", [(5, 4), (5, 6)]),
    ("bqhd,bkhd->bhqk", [(2, 5, 3, 4), (2, 6, 3, 4)]),
    ("ik,kj->", [(3, 4), (4, 5)]),
    ("ij->ji", [(4, 5)]),
    ("ij->i", [(4, 5)]),
    ("ii->i", [(5, 5)]),
    ("ii->", [(5, 5)]),
]


@pytest.mark.parametrize("name", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("equation,shapes", EQUATIONS, ids=[e for e, _ in EQUATIONS])
def test_einsum(device, name, equation, shapes):
    rng = rng_for("einsum", equation, name)
    arrays = {f"x{i}": random_array(rng, s, name) for i, s in enumerate(shapes)}
    y, _ = run_network(device, arrays, lambda n, t: n.add_einsum([t[k] for k in arrays], equation))
    assert y.dtype == DTYPES[name]
    ref = np.einsum(equation, *[a.astype(np.float64) for a in arrays.values()])
    terms = np.einsum(equation, *[np.abs(a.astype(np.float64)) for a in arrays.values()])
    if name == "f32":
        tol = 1e-5 * terms + 1e-6
    else:  # rounded once to the narrow type (half an ulp) after a float32 computation
        tol = np.spacing(np.abs(ref).astype(DTYPES[name])).astype(np.float64) * 0.5 + 1e-5 * terms + 1e-6
    assert np.all(np.abs(y.astype(np.float64) - ref) <= tol)
