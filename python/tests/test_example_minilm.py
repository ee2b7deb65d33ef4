"""examples/minilm.py: a MiniLM-shaped BERT encoder with mean pooling, built from safetensors
with TensorRT's network API, against the same model in torch (fp32, eval mode)."""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tensoracle  # noqa: E402

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))
import minilm  # noqa: E402  (the example is the test's fixture)
from layer_cases import cpu_runs_wide_attention  # noqa: E402

# Two layers keep the test fast; the six-layer configuration runs once below, at 8 tokens.
SMALL = minilm.Config(layers=2)


def max_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    path = tmp_path_factory.mktemp("minilm") / "minilm-2.safetensors"
    model = minilm.save_weights(path, seed=3, config=SMALL)
    return path, model


@pytest.fixture(scope="module")
def dynamic_engine(small):
    return minilm.build_engine(small[0], max_batch=4, max_seq=64, opt=(2, 16))


def run(engine, inputs):
    return engine.create_execution().run(inputs)["embedding"]


def test_padded_batch_matches_torch(small, dynamic_engine):
    inputs = minilm.sample_inputs(2, 16)
    assert inputs["attention_mask"][1].sum() < 16  # the second sequence is padded
    result = run(dynamic_engine, inputs)
    assert result.shape == (2, SMALL.hidden) and result.dtype == np.float32
    error = max_error(result, minilm.torch_embeddings(small[1], inputs))
    assert error <= minilm.MAX_ABS_ERROR, error


def test_one_engine_serves_other_batches_and_lengths(small, dynamic_engine):
    execution = dynamic_engine.create_execution()
    for batch, seq in [(3, 9), (1, 1), (4, 64), (2, 16)]:
        inputs = minilm.sample_inputs(batch, seq, seed=batch * 100 + seq)
        result = execution.run(inputs)["embedding"]
        assert result.shape == (batch, SMALL.hidden)
        error = max_error(result, minilm.torch_embeddings(small[1], inputs))
        assert error <= minilm.MAX_ABS_ERROR, (batch, seq, error)


def test_padded_tokens_do_not_change_the_embedding(dynamic_engine):
    inputs = minilm.sample_inputs(2, 16)
    changed = {k: v.copy() for k, v in inputs.items()}
    padded = inputs["attention_mask"] == 0
    changed["input_ids"][padded] = 7592  # any other token in the padded positions
    a, b = run(dynamic_engine, inputs), run(dynamic_engine, changed)
    assert max_error(a, b) <= 1e-6
    # ... while a kept token does change it
    changed["input_ids"][1, 3] += 1
    assert max_error(run(dynamic_engine, changed)[1], a[1]) > 1e-4


def test_fixed_sequence_length_engine_matches_torch(small):
    engine = minilm.build_engine(small[0], seq=16, max_batch=4, opt=(2, 16))
    inputs = minilm.sample_inputs(2, 16)
    assert max_error(run(engine, inputs), minilm.torch_embeddings(small[1], inputs)) <= minilm.MAX_ABS_ERROR


def test_token_type_ids_input_matches_torch(small):
    engine = minilm.build_engine(small[0], token_type_ids=True, max_batch=4, max_seq=32, opt=(2, 16))
    inputs = minilm.sample_inputs(2, 16)
    inputs["token_type_ids"] = np.zeros((2, 16), np.int32)
    inputs["token_type_ids"][:, 6:] = 1  # a second segment
    expected = minilm.torch_embeddings(small[1], inputs)
    assert max_error(run(engine, inputs), expected) <= minilm.MAX_ABS_ERROR
    assert max_error(expected, minilm.torch_embeddings(small[1], {k: inputs[k] for k in ("input_ids", "attention_mask")})) > 1e-3


def test_matmul_bias_gelu_chains_are_fused(dynamic_engine):
    nodes = {layer.name: layer for layer in dynamic_engine.layers()}
    for i in range(SMALL.layers):
        p = f"encoder.layer.{i}"
        assert nodes[f"{p}.intermediate.dense"].fused == [f"{p}.intermediate.dense.bias", f"{p}.intermediate.gelu"]
        fused_attention = cpu_runs_wide_attention() and SMALL.head_dim % 16 == 0
        for linear in ("attention.self.query", "attention.self.key", "attention.self.value",
                       "attention.output.dense", "output.dense"):
            if fused_attention and linear in ("attention.self.key", "attention.self.value"):
                continue  # merged into the query's product (below)
            node = nodes[f"{p}.{linear}"]
            assert node.type == "matrix_multiply" and f"{p}.{linear}.bias" in node.fused, (linear, node.fused)
        # attention becomes one node where the CPU backend's fused kernel runs its AVX-512
        # products (CpuBackend::fuses_attention: head sizes of 16·k), else it stays as its layers;
        # a fused attention reads Q, K and V from one product (builder::merge_projections) as
        # rows, so the head splits and merges around it go too
        if fused_attention:
            node = nodes[f"{p}.attention.self.context"]
            assert node.type == "attention"
            named = [n for n in node.fused if n.startswith(p)]
            assert named == [f"{p}.attention.self.{n}" for n in ("scores", "scale", "mask", "softmax")], node.fused
            assert len(node.fused) == 4 + 4, node.fused  # and the 3 head splits and the merge
            qkv = nodes[f"{p}.attention.self.query"]
            assert [f"{p}.attention.self.{n}" for n in ("key", "key.bias", "value", "value.bias")] == [
                n for n in qkv.fused if ".key" in n or ".value" in n], qkv.fused
            assert f"{p}.attention.self.key" not in nodes and f"{p}.attention.self.value" not in nodes
        else:
            assert nodes[f"{p}.attention.self.scores"].fused[:1] == [f"{p}.attention.self.scale"]
        # fused layers are no nodes of their own
        assert f"{p}.intermediate.gelu" not in nodes and f"{p}.output.dense.bias" not in nodes


def test_static_shapes_also_fuse_the_residual_adds(small):
    engine = tensoracle.deserialize_engine(
        tensoracle.build_serialized_engine(
            minilm.graph(str(small[0]), batch=2, seq=16),
            tensoracle.EngineBuild(
                {name: tensoracle.InputShape.fixed((2, 16)) for name in ("input_ids", "attention_mask")},
                tensoracle.BuilderSettings(device="cpu"),
            ),
        )
    )
    nodes = {layer.name: layer for layer in engine.layers()}
    p = "encoder.layer.0"
    assert nodes[f"{p}.output.dense"].fused == [f"{p}.output.dense.bias", f"{p}.output.residual"]
    assert nodes[f"{p}.attention.output.dense"].fused == [f"{p}.attention.output.dense.bias", f"{p}.attention.output.residual"]
    inputs = minilm.sample_inputs(2, 16)
    assert max_error(run(engine, inputs), minilm.torch_embeddings(small[1], inputs)) <= minilm.MAX_ABS_ERROR


def test_full_six_layer_config_matches_torch(tmp_path):
    path = tmp_path / "minilm.safetensors"
    model = minilm.save_weights(path, seed=0)
    assert model.config == minilm.MINILM and len(model.encoder.layer) == 6
    engine = minilm.build_engine(path, max_batch=2, max_seq=8, opt=(2, 8))
    assert sum(layer.type == "normalization" for layer in engine.layers()) == 1 + 2 * 6
    inputs = minilm.sample_inputs(2, 8)
    assert inputs["attention_mask"][1].sum() < 8
    error = max_error(run(engine, inputs), minilm.torch_embeddings(model, inputs))
    assert error <= minilm.MAX_ABS_ERROR, error


def test_position_rows_are_exact_for_any_length():
    """minilm.dynamic_rows: the first S rows of a table at a runtime S, bit-exact."""
    import tensoracle.trt as trt

    table = np.random.default_rng(0).standard_normal((512, 8)).astype(np.float32)

    def graph(network):
        like = network.add_cast(network.add_input("x", trt.int32, (-1, -1)), trt.float32).get_output(0)
        rows = minilm.dynamic_rows(network, network.add_constant(table.shape, table).get_output(0), like, 512)
        rows.name = "rows"
        network.mark_output(rows)

    decl = tensoracle.EngineBuild({"x": tensoracle.InputShape.ranged((1, 1), (1, 16), (3, 512))},
                                  tensoracle.BuilderSettings(device="cpu"))
    execution = tensoracle.deserialize_engine(tensoracle.build_serialized_engine(graph, decl)).create_execution()
    for batch, seq in [(1, 1), (3, 2), (2, 37), (1, 511), (2, 512)]:
        rows = execution.run({"x": np.zeros((batch, seq), np.int32)})["rows"]
        assert rows.shape == (seq, 8) and np.array_equal(rows, table[:seq]), (batch, seq)


def test_example_main_runs(tmp_path, capsys):
    assert minilm.main(["--layers", "1", "--dir", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "max abs error vs torch" in text and "OK" in text
    assert "intermediate.dense (matrix_multiply) + bias + gelu" in text


def test_float16_graph_matches_the_torch_model_in_float16(small):
    """graph(dtype=trt.float16): float16 weights and activations (the additive mask at float16's
    minimum). Against torch's fp32 model its error is float16's; torch's own float16 model (the
    example's Encoder after .half()) lands within the same distance."""
    import tensoracle.trt as trt

    declaration = minilm.engine_declaration(max_batch=2, seq=16, opt=(2, 16))
    engine = tensoracle.deserialize_engine(
        tensoracle.build_serialized_engine(minilm.graph(str(small[0]), seq=16, dtype=trt.float16), declaration))
    inputs = minilm.sample_inputs(2, 16)
    result = run(engine, inputs)
    assert result.shape == (2, SMALL.hidden) and result.dtype == np.float16
    reference = minilm.torch_embeddings(small[1], inputs)
    half = minilm.make_model(3, SMALL).half()
    with torch.no_grad():
        torch_half = half(torch.from_numpy(inputs["input_ids"]).long(), torch.from_numpy(inputs["attention_mask"])).float()
    ours, theirs = max_error(result, reference), max_error(torch_half.numpy(), reference)
    assert 0 < ours <= 2e-2 and ours <= 4 * theirs + 1e-3, (ours, theirs)
