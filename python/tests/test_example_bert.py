"""examples/bert.py: transformers' BertModel built from a checkpoint folder (config.json +
model.safetensors, as save_pretrained writes it) and checked against transformers itself, fp32
on the CPU: several head counts and sizes (fused attention where the backend fuses, layers
elsewhere), padded batches, dynamic and fixed sequence lengths, token types, a task model's
"bert." prefix, the tanh GELU; and clear errors for checkpoints the graph cannot build."""

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
import bert  # noqa: E402  (the example is the test's fixture)
from layer_cases import cpu_runs_wide_attention  # noqa: E402


def checkpoint(folder, **sizes):
    sizes = {"vocab_size": 500, "max_position_embeddings": 40, "num_hidden_layers": 2, **sizes}
    sizes.setdefault("intermediate_size", 2 * sizes["hidden_size"])
    return bert.write_random_checkpoint(folder, **sizes)


def run(folder, inputs, **declaration):
    graph_args = {k: declaration.pop(k) for k in ("seq", "token_type_ids") if k in declaration}
    decl = bert.engine_declaration(max_batch=4, max_seq=40, opt=(2, 16), **graph_args, **declaration)
    engine = tensoracle.deserialize_engine(tensoracle.build_serialized_engine(bert.graph(folder, **graph_args), decl))
    return engine, engine.create_execution().run(inputs)


def assert_matches_transformers(folder, ours, inputs):
    theirs = bert.transformers_outputs(folder, inputs)
    for name in ("last_hidden_state", "pooler_output"):
        assert ours[name].shape == theirs[name].shape, name
        err = float(np.abs(ours[name] - theirs[name]).max())
        assert err <= bert.MAX_ABS_ERROR, (name, err)


@pytest.mark.parametrize("hidden, heads", [(256, 4), (128, 4), (96, 3), (96, 4)],
                         ids=["4x64", "4x32", "3x32", "4x24"])
def test_head_counts_and_sizes_match_transformers(tmp_path, hidden, heads):
    folder = checkpoint(tmp_path, hidden_size=hidden, num_attention_heads=heads)
    inputs = bert.sample_inputs(3, 13, vocab=500)
    engine, ours = run(folder, inputs)
    assert_matches_transformers(folder, ours, inputs)
    fused = [layer for layer in engine.layers() if layer.type == "attention"]
    if cpu_runs_wide_attention() and (hidden // heads) % 16 == 0:
        assert len(fused) == 2 and fused[0].name == "encoder.layer.0.attention.self.context"
    else:
        assert not fused


def test_fixed_sequence_and_token_types(tmp_path):
    folder = checkpoint(tmp_path, hidden_size=128, num_attention_heads=2, type_vocab_size=3)
    inputs = bert.sample_inputs(2, 16, vocab=500)
    inputs["token_type_ids"] = (np.arange(16)[None, :] >= 8).astype(np.int32).repeat(2, 0) * 2
    _, ours = run(folder, inputs, seq=16, token_type_ids=True)
    assert_matches_transformers(folder, ours, inputs)


def test_a_task_models_prefix_and_the_tanh_gelu(tmp_path):
    torch.manual_seed(1)
    config = transformers.BertConfig(vocab_size=300, hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=128, max_position_embeddings=32, hidden_act="gelu_new")
    transformers.BertForSequenceClassification(config).eval().save_pretrained(str(tmp_path))
    names = json.loads((tmp_path / "config.json").read_text())
    assert names["hidden_act"] == "gelu_new"
    inputs = bert.sample_inputs(2, 9, vocab=300)
    _, ours = run(tmp_path, inputs)
    assert_matches_transformers(tmp_path, ours, inputs)


def test_checkpoints_the_graph_cannot_build_are_named(tmp_path):
    with pytest.raises(ValueError, match="config.json: no such file"):
        bert.graph(tmp_path)
    folder = checkpoint(tmp_path / "ok", hidden_size=64, num_attention_heads=2)
    config = json.loads((folder / "config.json").read_text())
    for change, message in [({"model_type": "gpt2"}, "model_type 'gpt2'"),
                            ({"hidden_act": "swish"}, "hidden_act 'swish'"),
                            ({"num_attention_heads": 5}, "not a multiple of num_attention_heads 5"),
                            ({"position_embedding_type": "relative_key"}, "only 'absolute'"),
                            ({"hidden_size": "big"}, "'hidden_size' is 'big'")]:
        (folder / "config.json").write_text(json.dumps({**config, **change}))
        with pytest.raises(ValueError, match=message):
            bert.graph(folder)
    (folder / "config.json").write_text(json.dumps({**config, "vocab_size": 501}))
    with pytest.raises(ValueError, match=r"config.json says \(501, 64\)"):
        run(folder, bert.sample_inputs(1, 4, vocab=500))
