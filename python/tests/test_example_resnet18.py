"""examples/resnet18.py at a small size: ResNet-18 with folded BatchNorms against PyTorch fp32,
and what the builder fused into each convolution.

The example's graph function is built at 96x96 images (batch 1..2) so that the test stays fast
on a couple of cores; the numerics and the graph's structure are those of the 224x224 model.
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

import tensoracle

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))
import resnet18  # noqa: E402  (the example is the test's fixture)

SIZE = 96
MAX_BATCH = 2
SEED = 0

STEM_RELU = {"conv1": "relu"}
BLOCKS = [f"layer{i}.{b}" for i in range(1, 5) for b in range(2)]
DOWNSAMPLED = ["layer2.0", "layer3.0", "layer4.0"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("resnet18") / "resnet18.safetensors"
    return path, resnet18.save_weights(path, SEED)


def build(path, batch: int):
    """The example's graph at SIZE: batch -1 (dynamic, as the example ships it) over 1..MAX_BATCH,
    or a static batch."""
    lo = 1 if batch < 0 else batch
    hi = MAX_BATCH if batch < 0 else batch
    declaration = tensoracle.EngineBuild(
        {"images": tensoracle.InputShape.ranged((lo, 3, SIZE, SIZE), (hi, 3, SIZE, SIZE), (hi, 3, SIZE, SIZE))},
        tensoracle.BuilderSettings(device="cpu"),
    )
    return tensoracle.deserialize_engine(
        tensoracle.build_serialized_engine(resnet18.graph(path, SIZE, batch), declaration)
    )


@pytest.fixture(scope="module")
def engine(model):
    return build(model[0], -1)


@pytest.fixture(scope="module")
def static_engine(model):
    return build(model[0], 1)


def nodes(engine) -> dict:
    return {layer.name: layer for layer in engine.layers()}


@pytest.mark.parametrize("batch", [1, MAX_BATCH])
def test_logits_match_pytorch_fp32(model, engine, batch):
    _, torch_model = model
    x = resnet18.images(batch, SIZE)
    got = engine.create_execution().run({"images": x})["logits"]
    expected = resnet18.torch_logits(torch_model, x)
    assert got.shape == (batch, resnet18.CLASSES) and got.dtype == np.float32
    assert np.all(np.isfinite(got))
    max_abs, rel = resnet18.errors(got, expected)
    # The logits have a scale of a few units: a wrong fold or a misplaced pad would be far off.
    assert np.std(expected) > 0.5
    assert max_abs <= resnet18.MAX_ABS_ERROR, (max_abs, rel)
    assert np.array_equal(np.argmax(got, 1), np.argmax(expected, 1))


def test_static_batch_engine_gives_the_same_logits(model, engine, static_engine):
    x = resnet18.images(1, SIZE)
    dynamic = engine.create_execution().run({"images": x})["logits"]
    static = static_engine.create_execution().run({"images": x})["logits"]
    np.testing.assert_allclose(static, dynamic, rtol=0, atol=1e-5)


def test_every_conv_followed_by_relu_is_one_node(engine):
    by_name = nodes(engine)
    expected = dict(STEM_RELU)
    expected.update({f"{b}.conv1": f"{b}.relu1" for b in BLOCKS})
    for conv, relu in expected.items():
        assert conv in by_name, (conv, sorted(by_name))
        assert by_name[conv].type == "convolution"
        assert by_name[conv].fused == [relu], (conv, by_name[conv].fused)
    # Nothing else of the model stands alone as an activation node.
    assert not [n for n in by_name.values() if n.type == "activation"]


def shortcut(block: str) -> str:
    """The node whose output is the block's shortcut: its downsample convolution, or the node
    that produced the block's input (the previous block's conv2, or the max pool)."""
    if block in DOWNSAMPLED:
        return f"{block}.downsample"
    i = BLOCKS.index(block)
    return "maxpool" if i == 0 else f"{BLOCKS[i - 1]}.conv2"


def check_residual_fusion(engine) -> None:
    by_name = nodes(engine)
    producer = {n.output: name for name, n in by_name.items()}
    for b in BLOCKS:
        conv2 = by_name.get(f"{b}.conv2")
        assert conv2 is not None and conv2.type == "convolution", (b, sorted(by_name))
        assert conv2.fused == [f"{b}.add", f"{b}.relu2"], (b, conv2.fused)
        # It reads the block's conv1 and, for the fused add, the shortcut.
        read = {producer[v] for v in conv2.inputs if v in producer}
        assert read == {f"{b}.conv1", shortcut(b)}, (b, read)
    for b in DOWNSAMPLED:
        assert by_name[f"{b}.downsample"].type == "convolution"
        assert by_name[f"{b}.downsample"].fused == []
    assert by_name["fc"].fused == ["fc.bias"]
    # Left: 20 convolutions, the max pool, the average pool (reduce) and the fully connected layer.
    types = sorted(n.type for n in by_name.values())
    assert types == ["convolution"] * 20 + ["matrix_multiply", "pooling", "reduce"], types


def test_residual_add_and_relu_fused_into_conv2_static_batch(static_engine):
    check_residual_fusion(static_engine)


def test_residual_add_and_relu_fused_into_conv2_dynamic_batch(engine):
    check_residual_fusion(engine)


def test_activation_memory_is_planned(engine):
    assert 0 < engine.activation_bytes < engine.naive_activation_bytes


def test_float16_graph_matches_pytorch_within_float16_error(model):
    """graph(dtype=trt.float16): the folded weights rounded to float16, float16 activations. The
    logits stay within float16's error of torch's fp32 model and pick the same classes."""
    import tensoracle.trt as trt

    path, torch_model = model
    declaration = tensoracle.EngineBuild({"images": tensoracle.InputShape.fixed((2, 3, SIZE, SIZE))},
                                         tensoracle.BuilderSettings(device="cpu"))
    engine = tensoracle.deserialize_engine(
        tensoracle.build_serialized_engine(resnet18.graph(path, SIZE, 2, trt.float16), declaration))
    x = resnet18.images(2, SIZE)
    got = engine.create_execution().run({"images": x.astype(np.float16)})["logits"]
    assert got.dtype == np.float16 and got.shape == (2, resnet18.CLASSES)
    expected = resnet18.torch_logits(torch_model, x)
    max_abs, _ = resnet18.errors(got.astype(np.float32), expected)
    assert 0 < max_abs <= 5e-2, max_abs
    assert np.array_equal(np.argmax(got, 1), np.argmax(expected, 1))
