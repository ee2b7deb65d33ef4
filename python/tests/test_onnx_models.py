"""Real models exported to ONNX here, with both of torch's exporters (TorchScript's and
dynamo's), imported with trt.OnnxParser and run on the CPU against onnxruntime on the same
file: transformers' BERT and GPT-2 (small random configurations, dynamic batch and sequence
axes), at two shapes of one profile."""

from __future__ import annotations

import warnings

import numpy as np
import onnxruntime as ort
import pytest

import tensoracle
from tensoracle import trt

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


class Outputs(torch.nn.Module):
    """The model's tensors as a tuple (the exporters take plain outputs)."""

    def __init__(self, model, names):
        super().__init__()
        self.model, self.names = model, names

    def forward(self, input_ids, attention_mask):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask)
        return tuple(getattr(out, n) for n in self.names)


def bert():
    cfg = transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                  vocab_size=500)
    return transformers.BertModel(cfg).eval(), ["last_hidden_state", "pooler_output"]


def gpt2():
    cfg = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=500, n_positions=128, use_cache=False)
    return transformers.GPT2Model(cfg).eval(), ["last_hidden_state"]


def export(model, names, path, dynamo):
    wrapped = Outputs(model, names)
    ids = torch.randint(0, 500, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.long)
    axes = {0: "batch", 1: "sequence"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            dims = {0: torch.export.Dim("batch", max=64), 1: torch.export.Dim("sequence", max=128)}
            torch.onnx.export(wrapped, (ids, mask), path, input_names=["input_ids", "attention_mask"], output_names=names,
                              dynamo=True, dynamic_shapes={"input_ids": dims, "attention_mask": dims})
        else:
            torch.onnx.export(wrapped, (ids, mask), path, input_names=["input_ids", "attention_mask"], output_names=names,
                              dynamo=False, opset_version=17,
                              dynamic_axes={"input_ids": axes, "attention_mask": axes, **{n: {0: "batch"} for n in names}})


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("make", [bert, gpt2], ids=["bert", "gpt2"])
def test_exported_transformer_matches_onnxruntime(tmp_path, make, dynamo):
    torch.manual_seed(0)
    model, names = make()
    path = str(tmp_path / "model.onnx")
    export(model, names, path, dynamo)
    net = tensoracle.Network()
    parser = trt.OnnxParser(net, trt.Logger())
    assert parser.parse_from_file(path), [str(parser.get_error(i)) for i in range(parser.num_errors)]
    assert [tuple(net.get_input(i).shape) for i in range(net.num_inputs)] == [(-1, -1)] * 2
    profile = tensoracle.InputShape.ranged((1, 1), (2, 16), (4, 32))
    build = tensoracle.EngineBuild({"input_ids": profile, "attention_mask": profile}, tensoracle.BuilderSettings(device="cpu"))
    engine = tensoracle.deserialize_engine(tensoracle._native.build_serialized_network(net, build))
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for batch, seq in ((1, 5), (3, 32)):
        ids = rng.integers(0, 500, (batch, seq), dtype=np.int64)
        mask = np.ones((batch, seq), np.int64)
        mask[-1, seq // 2:] = 0  # padding in the last sequence
        feeds = {"input_ids": ids, "attention_mask": mask}
        got = engine.create_execution().run(feeds)
        want = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
        for name in names:
            err = np.abs(got[name] - want[name]).max() / np.abs(want[name]).max()
            assert err <= 1e-4, f"{name} at {(batch, seq)}: max relative error {err:.2e}"
