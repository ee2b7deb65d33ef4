"""A MiniLM-shaped sentence encoder (all-MiniLM-L6-v2's architecture) on tensoracle's CPU backend.

The model is a BERT encoder: vocab 30522, 512 positions, 2 token types, hidden 384, 6 layers,
12 heads of 32, intermediate 1536, GELU (erf), LayerNorm eps 1e-12, post-LN, followed by mean
pooling over the tokens the attention mask keeps. The weights are random (deterministic, at
realistic scales), written to safetensors with the same tensor names as the Hugging Face
checkpoint ("embeddings.word_embeddings.weight", "encoder.layer.0.attention.self.query.weight",
...), so `graph()` also reads a real checkpoint's ``model.safetensors``.

The script

1. builds the encoder in plain ``torch.nn`` (:class:`Encoder`) and saves its random weights
   (:func:`save_weights`),
2. defines the same network with TensorRT's Python API from the safetensors file
   (:func:`graph`; ``import tensoracle.trt as trt``) and builds a CPU engine whose batch and
   sequence length are both dynamic (1..32 x 1..512),
3. runs batch 2 x 16 tokens, the second sequence padded after 11 tokens, and prints the
   max abs error of the pooled embeddings against torch (eval mode, fp32); the limit is 1e-4.

    python examples/minilm.py [--dir DIR] [--layers N] [--seq-fixed]

Dynamic sequence length. tensoracle's network API has no shape layer (TensorRT's
``add_shape``) and its slices take only static start/size/stride (no shape-tensor inputs), so
"the first S rows of the position table" cannot be sliced at a runtime S. With ``seq=None``
:func:`graph` instead multiplies the table by a runtime (S x 512) one-hot matrix built from
static-size ops: a FILL slice of a (1, S) row of ones gives m = [i < S] over 512 entries; the
outer product of m with the (1, S+1) row [1, 0, ..., 0], flattened, cropped by 512 at the end
(padding accepts negative amounts on dynamic dims) and reshaped to (512, S) is exactly the
identity's first S columns (the classic "row length S+1 read as S" diagonal trick). The
product is exact in fp32. With a fixed ``seq`` the table is simply sliced.
"""

from __future__ import annotations

import argparse
import math
import pathlib
import sys
import tempfile
from dataclasses import dataclass

import numpy as np
import torch
from safetensors.numpy import load_file
from safetensors.torch import save_file
from torch import nn

import tensoracle
import tensoracle.trt as trt
from tensoracle import BuilderSettings, EngineBuild, InputShape, build_serialized_engine

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bert  # noqa: E402  (examples/bert.py: BertModel's graph, whose pieces this encoder uses)

ReduceOperation = bert.ReduceOperation
PROD = trt.ElementWiseOperation.PROD

MAX_ABS_ERROR = 1e-4  # pooled embeddings, fp32, against torch


@dataclass(frozen=True)
class Config:
    vocab: int = 30522
    max_positions: int = 512
    type_vocab: int = 2
    hidden: int = 384
    layers: int = 6
    heads: int = 12
    intermediate: int = 1536
    eps: float = 1e-12

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


MINILM = Config()


# ----------------------------------------------------------------------------------------
# the torch model


class Embeddings(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.word_embeddings = nn.Embedding(c.vocab, c.hidden)
        self.position_embeddings = nn.Embedding(c.max_positions, c.hidden)
        self.token_type_embeddings = nn.Embedding(c.type_vocab, c.hidden)
        self.LayerNorm = nn.LayerNorm(c.hidden, eps=c.eps)  # noqa: N815  (the checkpoint's name)
        self.dropout = nn.Dropout(0.1)

    def forward(self, input_ids, token_type_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)[None, :]
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions) + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(x))


class SelfAttention(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.heads, self.head_dim = c.heads, c.head_dim
        self.query = nn.Linear(c.hidden, c.hidden)
        self.key = nn.Linear(c.hidden, c.hidden)
        self.value = nn.Linear(c.hidden, c.hidden)
        self.dropout = nn.Dropout(0.1)

    def split(self, x):  # (B, S, H) -> (B, heads, S, head_dim)
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x, additive_mask):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = q @ k.transpose(-1, -2) * (1.0 / math.sqrt(self.head_dim)) + additive_mask
        probs = self.dropout(torch.softmax(scores, dim=-1))
        context = (probs @ v).transpose(1, 2)
        return context.reshape(x.shape)


class DenseResidualNorm(nn.Module):
    """dense -> dropout -> + residual -> LayerNorm (BERT's post-LN "output" blocks)."""

    def __init__(self, c: Config, width_in: int):
        super().__init__()
        self.dense = nn.Linear(width_in, c.hidden)
        self.LayerNorm = nn.LayerNorm(c.hidden, eps=c.eps)  # noqa: N815
        self.dropout = nn.Dropout(0.1)

    def forward(self, x, residual):
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class Attention(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.self = SelfAttention(c)
        self.output = DenseResidualNorm(c, c.hidden)

    def forward(self, x, additive_mask):
        return self.output(self.self(x, additive_mask), x)


class Intermediate(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.dense = nn.Linear(c.hidden, c.intermediate)

    def forward(self, x):
        return nn.functional.gelu(self.dense(x))  # the exact (erf) GELU


class Layer(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.attention = Attention(c)
        self.intermediate = Intermediate(c)
        self.output = DenseResidualNorm(c, c.intermediate)

    def forward(self, x, additive_mask):
        x = self.attention(x, additive_mask)
        return self.output(self.intermediate(x), x)


class Stack(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.layer = nn.ModuleList(Layer(c) for _ in range(c.layers))

    def forward(self, x, additive_mask):
        for layer in self.layer:
            x = layer(x, additive_mask)
        return x


class Encoder(nn.Module):
    """BERT encoder + attention-masked mean pooling: (input_ids, attention_mask) -> (B, hidden)."""

    def __init__(self, c: Config = MINILM):
        super().__init__()
        self.config = c
        self.embeddings = Embeddings(c)
        self.encoder = Stack(c)

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        dtype = self.embeddings.word_embeddings.weight.dtype  # float32, or the model's .half()
        mask = attention_mask.to(dtype)
        additive = ((1.0 - mask) * torch.finfo(dtype).min)[:, None, None, :]  # (B, 1, 1, S)
        h = self.encoder(self.embeddings(input_ids, token_type_ids), additive)
        weights = mask[:, :, None]
        return (h * weights).sum(1) / torch.clamp(weights.sum(1), min=1e-9)


def make_model(seed: int = 0, config: Config = MINILM) -> Encoder:
    """The encoder with deterministic random weights at realistic scales, in eval mode.

    Linear and embedding weights: normal, std 0.02 (BERT's initializer), except query and key
    at std 0.06 so that attention is peaked as in a trained model rather than near-uniform.
    Biases: normal, std 0.02 (not zero, so every bias is exercised). LayerNorm: gamma
    1 + N(0, 0.1), beta N(0, 0.05).
    """
    torch.manual_seed(seed)
    model = Encoder(config)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm.weight" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif "LayerNorm.bias" in name:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.02 * torch.randn(p.shape, generator=g))
            else:
                std = 0.06 if (".query." in name or ".key." in name) else 0.02
                p.copy_(std * torch.randn(p.shape, generator=g))
    return model.eval()


def save_weights(path, seed: int = 0, config: Config = MINILM) -> Encoder:
    """Writes make_model(seed, config)'s state_dict to `path` (safetensors); returns the model."""
    model = make_model(seed, config)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return model


# --- the graph function (TensorRT's Python API) --------------------------------------------
def graph(path, batch=None, seq=None, token_type_ids=False, dtype=trt.float32):
    """The encoder as a network definition, from the safetensors file at `path`.

    Inputs "input_ids" and "attention_mask", int32 (B, S); B and S are dynamic (-1) unless
    `batch` / `seq` fix them. Token types are all 0 (the type-0 embedding is added as a
    constant) unless `token_type_ids` asks for a third int32 (B, S) input of that name.
    Output "embedding", of `dtype` (B, hidden): trt.float32, or trt.float16 for an engine whose
    weights and activations are float16 (the padded keys' additive mask then float16's
    minimum). The hidden size, head count (hidden / 32), intermediate size and layer count come
    from the file; the embeddings and layers are examples/bert.py's (BertModel's graph, which
    reads a checkpoint's config.json instead).
    """

    def define(network):
        w = load_file(str(path))
        vocab, hidden = w["embeddings.word_embeddings.weight"].shape
        c = bert.BertConfig(
            vocab=vocab, hidden=hidden, heads=hidden // 32,
            layers=1 + max(int(k.split(".")[2]) for k in w if k.startswith("encoder.layer.")),
            intermediate=w["encoder.layer.0.intermediate.dense.weight"].shape[0], act="gelu", eps=1e-12,
            max_positions=w["embeddings.position_embeddings.weight"].shape[0],
            type_vocab=w["embeddings.token_type_embeddings.weight"].shape[0])
        net = bert.Net(network, w, dtype, c.eps)
        named, reshape, scalar = net.named, net.reshape, net.scalar
        B, S = (-1 if batch is None else batch), (-1 if seq is None else seq)
        input_ids = network.add_input("input_ids", trt.int32, (B, S))
        attention_mask = network.add_input("attention_mask", trt.int32, (B, S))
        types = network.add_input("token_type_ids", trt.int32, (B, S)) if token_type_ids else None
        mask = network.add_cast(attention_mask, dtype).get_output(0)  # (B, S)
        x = bert.embeddings(net, input_ids, mask, seq, types)
        x = bert.encoder(net, c, x, bert.additive_mask(net, mask))

        # mean pooling over the kept tokens: sum(h * mask) / max(sum(mask), 1e-9)
        weighted = named(network.add_elementwise(x, reshape(mask, (0, 0, 1)), PROD), "pooling.weighted")
        total = named(network.add_reduce(weighted, ReduceOperation.SUM, 1 << 1, False), "pooling.total")  # (B, hidden)
        count = named(network.add_reduce(mask, ReduceOperation.SUM, 1 << 1, True), "pooling.count")  # (B, 1)
        count = named(network.add_elementwise(count, scalar(1e-9, 2), trt.ElementWiseOperation.MAX), "pooling.clamp")
        embedding = named(network.add_elementwise(total, count, trt.ElementWiseOperation.DIV), "pooling.mean")
        embedding.name = "embedding"
        network.mark_output(embedding)

    return define


# The runtime-S position rows (a one-hot product), shared with examples/bert.py.
dynamic_rows = bert.dynamic_rows


def sample_inputs(batch: int = 2, seq: int = 16, seed: int = 1, vocab: int = MINILM.vocab) -> dict[str, np.ndarray]:
    """[CLS] tokens [SEP] then padding (id 0): row 0 full, the others shorter (row 1 of 16: 11)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, vocab, (batch, seq)).astype(np.int32)
    mask = np.ones((batch, seq), np.int32)
    for b in range(batch):
        length = max(1, seq - (5 * b) % seq)
        ids[b, 0], ids[b, length - 1] = 101, 102
        ids[b, length:], mask[b, length:] = 0, 0
    return {"input_ids": ids, "attention_mask": mask}


def torch_embeddings(model: Encoder, inputs: dict[str, np.ndarray]) -> np.ndarray:
    with torch.no_grad():
        ids = torch.from_numpy(inputs["input_ids"]).long()
        mask = torch.from_numpy(inputs["attention_mask"])
        types = inputs.get("token_type_ids")
        return model(ids, mask, None if types is None else torch.from_numpy(types).long()).numpy()


def engine_declaration(max_batch: int = 32, max_seq: int = 512, opt=(8, 128), seq=None, token_type_ids=False) -> EngineBuild:
    """Batch 1..max_batch; sequence 1..max_seq, or exactly `seq` when given."""
    if seq is None:
        shape = InputShape.ranged((1, 1), opt, (max_batch, max_seq))
    else:
        shape = InputShape.ranged((1, seq), (opt[0], seq), (max_batch, seq))
    names = ("input_ids", "attention_mask") + (("token_type_ids",) if token_type_ids else ())
    return EngineBuild({name: shape for name in names}, BuilderSettings(device="cpu"))


def build_engine(weights, seq=None, token_type_ids=False, **shapes) -> tensoracle.Engine:
    declaration = engine_declaration(seq=seq, token_type_ids=token_type_ids, **shapes)
    data = build_serialized_engine(graph(str(weights), seq=seq, token_type_ids=token_type_ids), declaration)
    return tensoracle.deserialize_engine(data)


def describe(engine: tensoracle.Engine) -> str:
    """Node counts by type, then each kind of node with fused layers and how often it occurs."""
    import re
    from collections import Counter

    def short(name: str) -> str:  # "encoder.layer.3.output.dense" -> "output.dense"; "elementwise_12" -> "elementwise"
        return re.sub(r"_\d+$", "", re.sub(r"^encoder\.layer\.\d+\.", "", name))

    nodes = Counter(layer.type for layer in engine.layers())
    chains = Counter(
        f"{short(layer.name)} ({layer.type}) + " + " + ".join(short(n).rsplit(".", 1)[-1] for n in layer.fused)
        for layer in engine.layers()
        if layer.fused
    )
    lines = [f"{sum(nodes.values())} nodes: " + ", ".join(f"{n} {t}" for t, n in nodes.most_common())]
    lines += [f"  {n:3} x {chain}" for chain, n in sorted(chains.items(), key=lambda kv: (-kv[1], kv[0]))]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=pathlib.Path, default=None, help="folder for the weights")
    parser.add_argument("--layers", type=int, default=MINILM.layers)
    parser.add_argument("--seq-fixed", action="store_true", help="fix S = 16 in the engine (static position slice)")
    args = parser.parse_args(argv)
    folder = args.dir or pathlib.Path(tempfile.mkdtemp(prefix="tensoracle-minilm-"))
    folder.mkdir(parents=True, exist_ok=True)
    weights = folder / "minilm.safetensors"
    config = Config(layers=args.layers)
    model = save_weights(weights, seed=0, config=config)
    print(f"wrote {weights} ({weights.stat().st_size / 2**20:.1f} MiB, {config.layers} layers)")

    engine = build_engine(weights, seq=16 if args.seq_fixed else None)
    print(describe(engine))
    inputs = sample_inputs(2, 16)
    print("attention_mask:\n" + str(inputs["attention_mask"]))
    result = engine.create_execution().run(inputs)["embedding"]
    expected = torch_embeddings(model, inputs)
    error = float(np.max(np.abs(result.astype(np.float64) - expected)))
    ok = result.shape == expected.shape and np.all(np.isfinite(result)) and error <= MAX_ABS_ERROR
    print(f"embedding {result.shape}: max abs error vs torch {error:.3e} (limit {MAX_ABS_ERROR:g}) "
          f"{'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
