"""examples/gpt2.py: transformers' GPT2Model (the prefill, causal attention) built from a
checkpoint folder and checked against transformers itself, fp32 on the CPU: head sizes that the
CPU fuses and that it does not, padded batches of several sizes on one engine, an LM model's
"transformer." prefix; the engine's structure where attention fuses (one Q/K/V product, no head
shuffles); and clear errors for checkpoints the graph cannot build."""

from __future__ import annotations

import json
import pathlib
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import tensoracle  # noqa: E402

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))
import gpt2  # noqa: E402  (the example is the test's fixture)
from layer_cases import cpu_runs_wide_attention  # noqa: E402


def checkpoint(folder, **sizes):
    sizes = {"vocab_size": 300, "n_positions": 40, "n_layer": 2, **sizes}
    return gpt2.write_random_checkpoint(folder, **sizes)


def build(folder, seq):
    return tensoracle.deserialize_engine(
        tensoracle.build_serialized_engine(gpt2.graph(folder, seq), gpt2.engine_declaration(seq, max_batch=4)))


@pytest.mark.parametrize("hidden, heads", [(128, 2), (96, 4)], ids=["2x64", "4x24"])
def test_prefill_matches_transformers(tmp_path, hidden, heads):
    folder = checkpoint(tmp_path, n_embd=hidden, n_head=heads)
    engine = build(folder, 13)
    ex = engine.create_execution()
    for batch in (1, 4):
        inputs = gpt2.sample_inputs(batch, 13, vocab=300, seed=batch)
        ours = ex.run(inputs)["last_hidden_state"]
        theirs = gpt2.transformers_outputs(folder, inputs)
        assert ours.shape == theirs.shape == (batch, 13, hidden)
        assert float(np.abs(ours - theirs).max()) <= gpt2.MAX_ABS_ERROR
    nodes = {layer.name: layer for layer in engine.layers()}
    attention = [layer for layer in engine.layers() if layer.type == "attention"]
    if cpu_runs_wide_attention() and (hidden // heads) % 16 == 0:
        # one attention node per layer reading the rows of one Q/K/V product
        assert [layer.name for layer in attention] == [f"h.{i}.attn.context" for i in range(2)]
        for i in range(2):
            assert f"h.{i}.attn.key" in nodes[f"h.{i}.attn.query"].fused
            assert f"h.{i}.attn.key" not in nodes and f"h.{i}.attn.value" not in nodes
        # the one shuffle left is the padding mask's reshape to (B, 1, 1, S)
        assert len([layer for layer in engine.layers() if layer.type == "shuffle"]) == 1
    else:
        assert not attention


def test_an_lm_models_prefix_is_read(tmp_path):
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=300, n_positions=40, n_layer=1, n_embd=64, n_head=2)
    transformers.GPT2LMHeadModel(cfg).eval().save_pretrained(str(tmp_path))
    inputs = gpt2.sample_inputs(2, 9, vocab=300)
    ours = build(tmp_path, 9).create_execution().run(inputs)["last_hidden_state"]
    assert float(np.abs(ours - gpt2.transformers_outputs(tmp_path, inputs)).max()) <= gpt2.MAX_ABS_ERROR


@pytest.mark.parametrize("edit, message", [
    ({"model_type": "bert"}, "model_type 'bert'"),
    ({"activation_function": "swish"}, "activation_function 'swish'"),
    ({"n_head": 3}, "not a multiple of n_head 3"),
    ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx is set"),
    ({"n_layer": 0}, "'n_layer' is 0"),
])
def test_checkpoints_it_cannot_build_are_named(tmp_path, edit, message):
    folder = checkpoint(tmp_path, n_embd=64, n_head=2, n_layer=1)
    config = json.loads((folder / "config.json").read_text())
    config.update(edit)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=message):
        gpt2.graph(folder, 8)


def test_a_prompt_longer_than_the_position_table_is_refused(tmp_path):
    folder = checkpoint(tmp_path, n_embd=64, n_head=2, n_layer=1)
    with pytest.raises(ValueError, match="1 to n_positions = 40"):
        gpt2.graph(folder, 41)
