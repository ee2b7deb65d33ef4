"""BERT encoders from Hugging Face checkpoints on tensoracle: `config.json` + `model.safetensors`.

:func:`graph` defines transformers' ``BertModel`` (the encoder and its pooler) with TensorRT's
Python API (``import tensoracle.trt as trt``) from a checkpoint folder as ``save_pretrained``
writes it: the sizes come from ``config.json`` (hidden size, head count and size, layers,
intermediate size, activation, LayerNorm epsilon, position table), the weights from
``model.safetensors`` by their Hugging Face names (a ``bert.`` prefix, as task models such as
``BertForSequenceClassification`` save, is accepted). Any head count and size: BERT-base (12
heads of 64), MiniLM (12 of 32), BERT-large (16 of 64).

Outputs: ``last_hidden_state`` (B, S, hidden) and ``pooler_output`` (B, hidden), what
``BertModel(input_ids, attention_mask, token_type_ids)`` returns in eval mode. Inputs
``input_ids`` and ``attention_mask`` (int32, B x S; both dynamic unless fixed) and, when asked
for, ``token_type_ids`` (all zeros otherwise). Attention is written as its layers — QKᵀ, the
scale, the additive padding mask, softmax, PV — which the builder fuses into one attention node
where the backend's fused kernel is the faster.

The pieces (:class:`Net`, :func:`embeddings`, :func:`encoder`) are what examples/minilm.py
builds its sentence encoder from.

    python examples/bert.py CHECKPOINT_DIR [--seq 128] [--batch 8]   # builds, runs, compares with transformers
    python examples/bert.py --random [--heads 12 --hidden 768 ...]   # a random BertModel written first

The comparison needs transformers and torch; building and running the engine need neither.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import tempfile
from dataclasses import dataclass

import numpy as np
from safetensors.numpy import load_file

import tensoracle
import tensoracle._native as _native
import tensoracle.trt as trt
from tensoracle import BuilderSettings, EngineBuild, InputShape, build_serialized_engine

# Names TensorRT has in `tensorrt` that tensoracle.trt does not re-export (yet): take them from
# the native module, which carries TensorRT's names and values.
ReduceOperation = getattr(trt, "ReduceOperation", _native.ReduceOperation)
SampleMode = getattr(trt, "SampleMode", _native.SampleMode)

MAX_ABS_ERROR = 1e-4  # fp32 outputs against transformers
NUMPY_TYPE = {trt.float32: np.float32, trt.float16: np.float16}  # the graph's float types
# config.json's hidden_act -> TensorRT's activation ("gelu" is the erf form in transformers)
ACTIVATIONS = {"gelu": "GELU_ERF", "gelu_new": "GELU_TANH", "gelu_pytorch_tanh": "GELU_TANH", "relu": "RELU"}


@dataclass(frozen=True)
class BertConfig:
    """The fields of a BERT config.json the graph needs (transformers' BertConfig names in comments)."""

    vocab: int = 30522  # vocab_size
    hidden: int = 768  # hidden_size
    layers: int = 12  # num_hidden_layers
    heads: int = 12  # num_attention_heads
    intermediate: int = 3072  # intermediate_size
    act: str = "gelu"  # hidden_act
    eps: float = 1e-12  # layer_norm_eps
    max_positions: int = 512  # max_position_embeddings
    type_vocab: int = 2  # type_vocab_size

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @staticmethod
    def from_pretrained(folder) -> BertConfig:
        """Reads `folder`/config.json; ValueError naming the file and field for what the graph cannot build."""
        path = pathlib.Path(folder) / "config.json"
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            raise ValueError(f"{path}: no such file (a checkpoint folder as save_pretrained writes it)") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not JSON ({e})") from None

        def need(key, kind=int):
            if key not in raw:
                raise ValueError(f"{path}: no {key!r}")
            value = raw[key]
            if not isinstance(value, kind) or isinstance(value, bool) or (kind is int and value <= 0):
                raise ValueError(f"{path}: {key!r} is {value!r}, not a positive integer" if kind is int
                                 else f"{path}: {key!r} is {value!r}")
            return value

        if raw.get("model_type", "bert") != "bert":
            raise ValueError(f"{path}: model_type {raw.get('model_type')!r}; this graph builds BERT encoders")
        if raw.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"{path}: position_embedding_type {raw['position_embedding_type']!r}; only 'absolute' is built")
        if raw.get("is_decoder", False) or raw.get("add_cross_attention", False):
            raise ValueError(f"{path}: a decoder (is_decoder / add_cross_attention); this graph builds encoders")
        act = raw.get("hidden_act", "gelu")
        if act not in ACTIVATIONS:
            raise ValueError(f"{path}: hidden_act {act!r}; built: {', '.join(ACTIVATIONS)}")
        c = BertConfig(vocab=need("vocab_size"), hidden=need("hidden_size"), layers=need("num_hidden_layers"),
                       heads=need("num_attention_heads"), intermediate=need("intermediate_size"), act=act,
                       eps=float(raw.get("layer_norm_eps", 1e-12)),
                       max_positions=need("max_position_embeddings"), type_vocab=raw.get("type_vocab_size", 2))
        if c.hidden % c.heads:
            raise ValueError(f"{path}: hidden_size {c.hidden} is not a multiple of num_attention_heads {c.heads}")
        return c


def load_weights(folder) -> dict[str, np.ndarray]:
    """`folder`/model.safetensors by BertModel's names (a leading "bert." dropped)."""
    path = pathlib.Path(folder) / "model.safetensors"
    if not path.exists():
        index = pathlib.Path(folder) / "model.safetensors.index.json"
        hint = " (a sharded checkpoint: not read yet)" if index.exists() else ""
        raise ValueError(f"{path}: no such file{hint}")
    w = load_file(str(path))
    if any(k.startswith("bert.") for k in w):
        w = {k[len("bert."):]: v for k, v in w.items() if k.startswith("bert.")}
    return w


class Net:
    """Helpers over one network: constants of the graph's float type, named layers, linears and
    LayerNorms from the weights `w` by their Hugging Face prefixes."""

    def __init__(self, network, w: dict[str, np.ndarray], dtype=trt.float32, eps: float = 1e-12):
        self.network, self.w, self.dtype, self.eps = network, w, dtype, eps

    def weight(self, name: str) -> np.ndarray:
        if name not in self.w:
            raise ValueError(f"the checkpoint has no tensor {name!r}")
        return self.w[name]

    def constant(self, array, shape=None):
        array = np.ascontiguousarray(array, dtype=NUMPY_TYPE[self.dtype])
        if shape is not None:
            array = array.reshape(shape)
        return self.network.add_constant(array.shape, array).get_output(0)

    def scalar(self, value, rank):
        return self.constant(np.array(value), (1,) * rank)

    @staticmethod
    def named(layer, name):
        layer.name = name
        return layer.get_output(0)

    def reshape(self, x, dims, second_transpose=None, first_transpose=None):
        layer = self.network.add_shuffle(x)
        if first_transpose is not None:
            layer.first_transpose = first_transpose
        layer.reshape_dims = dims
        if second_transpose is not None:
            layer.second_transpose = second_transpose
        return layer.get_output(0)

    def matmul(self, a, b, op1=trt.MatrixOperation.NONE):
        return self.network.add_matrix_multiply(a, trt.MatrixOperation.NONE, b, op1)

    def linear(self, x, prefix, rank=3):
        # torch's Linear stores (out, in): y = x @ W^T + b, W^T as a constant of x's rank.
        weight = self.weight(prefix + ".weight").T
        bias = self.weight(prefix + ".bias")
        weight = self.constant(weight.reshape((1,) * (rank - 2) + weight.shape))
        bias = self.constant(bias.reshape((1,) * (rank - 1) + bias.shape))
        y = self.named(self.matmul(x, weight), prefix)
        return self.named(self.network.add_elementwise(y, bias, trt.ElementWiseOperation.SUM), prefix + ".bias")

    def layer_norm(self, x, prefix):
        scale = self.constant(self.weight(prefix + ".weight")[None, None])
        bias = self.constant(self.weight(prefix + ".bias")[None, None])
        norm = self.network.add_normalization(x, scale, bias, 1 << 2)
        norm.epsilon = self.eps
        return self.named(norm, prefix)


def embeddings(net: Net, input_ids, mask, seq, token_type_ids=None):
    """word + position + token type embeddings, then LayerNorm: (B, S, hidden). `mask` is the
    float attention mask (B, S) (its dim 1 gives S at run time when `seq` is None);
    `token_type_ids` an int32 (B, S) input, or None for type 0 everywhere."""
    network, SUM = net.network, trt.ElementWiseOperation.SUM
    words = net.named(network.add_gather(net.constant(net.weight("embeddings.word_embeddings.weight")), input_ids, 0),
                      "embeddings.words")
    table_array = net.weight("embeddings.position_embeddings.weight")
    rows, hidden = table_array.shape
    table = net.constant(table_array)
    if seq is not None:  # position ids: a constant arange sliced to S, gathered from the table
        arange = network.add_constant((1, rows), np.arange(rows, dtype=np.int32)).get_output(0)
        ids = net.named(network.add_slice(arange, (0, 0), (1, seq), (1, 1)), "embeddings.position_ids")
        positions = network.add_gather(table, ids, 0).get_output(0)  # (1, S, hidden)
    else:  # S known at run time only: see dynamic_rows
        positions = net.reshape(dynamic_rows(network, table, mask, rows, NUMPY_TYPE[net.dtype]), (1, -1, hidden))
    types = net.weight("embeddings.token_type_embeddings.weight")
    if token_type_ids is not None:
        token_type = network.add_gather(net.constant(types), token_type_ids, 0).get_output(0)  # (B, S, hidden)
    else:
        token_type = net.constant(types[0], (1, 1, hidden))
    x = net.named(network.add_elementwise(words, positions, SUM), "embeddings.positions")
    x = net.named(network.add_elementwise(x, token_type, SUM), "embeddings.token_type")
    return net.layer_norm(x, "embeddings.LayerNorm")


def additive_mask(net: Net, mask):
    """(1 - mask) * the float type's minimum, as (B, 1, 1, S): what transformers adds to the scores."""
    network = net.network
    padded = net.named(network.add_elementwise(net.scalar(1.0, 2), mask, trt.ElementWiseOperation.SUB), "mask.padded")
    minimum = float(np.finfo(NUMPY_TYPE[net.dtype]).min)
    additive = net.named(network.add_elementwise(padded, net.scalar(minimum, 2), trt.ElementWiseOperation.PROD),
                         "mask.additive")
    return net.reshape(additive, (0, 1, 1, -1))


def encoder(net: Net, c: BertConfig, x, additive):
    """The c.layers post-LN transformer layers over x (B, S, hidden)."""
    network = net.network
    SUM, PROD = trt.ElementWiseOperation.SUM, trt.ElementWiseOperation.PROD
    act = getattr(trt.ActivationType, ACTIVATIONS[c.act])
    for i in range(c.layers):
        p = f"encoder.layer.{i}"
        # (B, S, hidden) -> (B, heads, S, head_dim)
        q, k, v = (
            net.reshape(net.linear(x, f"{p}.attention.self.{n}"), (0, 0, c.heads, c.head_dim), second_transpose=(0, 2, 1, 3))
            for n in ("query", "key", "value")
        )
        a = f"{p}.attention.self"
        scores = net.named(net.matmul(q, k, trt.MatrixOperation.TRANSPOSE), a + ".scores")
        scores = net.named(network.add_elementwise(scores, net.scalar(1.0 / math.sqrt(c.head_dim), 4), PROD), a + ".scale")
        scores = net.named(network.add_elementwise(scores, additive, SUM), a + ".mask")
        softmax = network.add_softmax(scores)
        softmax.axes = 1 << 3
        probs = net.named(softmax, a + ".softmax")
        context = net.named(net.matmul(probs, v), a + ".context")
        context = net.reshape(context, (0, 0, c.hidden), first_transpose=(0, 2, 1, 3))  # (B, S, hidden)
        o = f"{p}.attention.output"
        x = net.named(network.add_elementwise(net.linear(context, o + ".dense"), x, SUM), o + ".residual")
        x = net.layer_norm(x, o + ".LayerNorm")
        h = net.named(network.add_activation(net.linear(x, f"{p}.intermediate.dense"), act), f"{p}.intermediate.gelu")
        x = net.named(network.add_elementwise(net.linear(h, f"{p}.output.dense"), x, SUM), f"{p}.output.residual")
        x = net.layer_norm(x, f"{p}.output.LayerNorm")
    return x


def dynamic_rows(network, table, like, rows, numpy_type=np.float32):
    """The first S rows of the constant `table` (rows x width), S being `like`'s dim 1 at run time.

    No shape layer, no dynamic slice: table^T's first S columns are picked by a one-hot
    (rows x S) matrix E with E[r, c] = [r == c], and E is built with static-size ops only.
    """
    SUM, PROD = trt.ElementWiseOperation.SUM, trt.ElementWiseOperation.PROD

    def out(layer):
        return layer.get_output(0)

    def const(values, shape):
        array = np.asarray(values, dtype=numpy_type).reshape(shape)
        return out(network.add_constant(array.shape, array))

    def reshape(x, dims):
        layer = network.add_shuffle(x)
        layer.reshape_dims = dims
        return out(layer)

    # a (1, S) row of ones: row 0 of `like` (B >= 1), times 0, plus 1
    row = out(network.add_gather(like, out(network.add_constant((1,), np.zeros(1, np.int32))), 0))
    ones = out(network.add_elementwise(out(network.add_elementwise(row, const(0, (1, 1)), PROD)), const(1, (1, 1)), SUM))
    # m[r] = [r < S] for r < rows: a FILL slice (zeros beyond the input) of the row of ones
    fill = network.add_slice(ones, (0, 0), (1, rows), (1, 1))
    fill.mode = SampleMode.FILL
    m = reshape(out(fill), (rows, 1))
    # e = [1, 0, ..., 0] of length S + 1: 1 - (the row of ones padded by one zero in front)
    padded = out(network.add_padding_nd(ones, (1,), (0,)))
    e = out(network.add_elementwise(const(1, (1, 1)), padded, trt.ElementWiseOperation.SUB))
    # (rows, S+1) with ones at [r, 0] for r < S; flat, they sit at r * (S + 1). Dropping the
    # last `rows` elements and reading the rest as (rows, S) puts them at [r, r].
    grid = reshape(out(network.add_elementwise(m, e, PROD)), (1, -1))
    cropped = out(network.add_padding_nd(grid, (0,), (-rows,)))
    onehot = reshape(cropped, (rows, -1))  # (rows, S)
    # (S, width) = onehot^T @ table
    return out(network.add_matrix_multiply(onehot, trt.MatrixOperation.TRANSPOSE, table, trt.MatrixOperation.NONE))


def graph(folder, batch=None, seq=None, dtype=trt.float32, token_type_ids=False):
    """BertModel from the checkpoint `folder` as a network definition (see the module's docstring).
    B and S are dynamic (-1) unless `batch` / `seq` fix them."""
    folder = pathlib.Path(folder)
    c = BertConfig.from_pretrained(folder)

    def define(network):
        w = load_weights(folder)
        net = Net(network, w, dtype, c.eps)
        got = w.get("embeddings.word_embeddings.weight")
        if got is None or got.shape != (c.vocab, c.hidden):
            raise ValueError(f"{folder}: embeddings.word_embeddings.weight is "
                             f"{None if got is None else got.shape}, config.json says ({c.vocab}, {c.hidden})")
        B, S = (-1 if batch is None else batch), (-1 if seq is None else seq)
        input_ids = network.add_input("input_ids", trt.int32, (B, S))
        attention_mask = network.add_input("attention_mask", trt.int32, (B, S))
        types = network.add_input("token_type_ids", trt.int32, (B, S)) if token_type_ids else None
        mask = network.add_cast(attention_mask, dtype).get_output(0)  # (B, S)
        x = embeddings(net, input_ids, mask, seq, types)
        x = encoder(net, c, x, additive_mask(net, mask))
        x.name = "last_hidden_state"
        network.mark_output(x)
        # the pooler: tanh(dense(the first token's state))
        first = network.add_gather(x, network.add_constant((1,), np.zeros(1, np.int32)).get_output(0), 1)
        first = net.reshape(net.named(first, "pooler.first"), (0, c.hidden))  # (B, hidden)
        pooled = net.linear(first, "pooler.dense", rank=2)
        pooled = net.named(network.add_activation(pooled, trt.ActivationType.TANH), "pooler.tanh")
        pooled.name = "pooler_output"
        network.mark_output(pooled)

    return define


def engine_declaration(max_batch=32, max_seq=512, opt=(8, 128), seq=None, token_type_ids=False, device="cpu"):
    """Batch 1..max_batch; sequence 1..max_seq, or exactly `seq` when given."""
    if seq is None:
        shape = InputShape.ranged((1, 1), opt, (max_batch, max_seq))
    else:
        shape = InputShape.ranged((1, seq), (min(opt[0], max_batch), seq), (max_batch, seq))
    names = ("input_ids", "attention_mask") + (("token_type_ids",) if token_type_ids else ())
    return EngineBuild({name: shape for name in names}, BuilderSettings(device=device))


def sample_inputs(batch=2, seq=16, vocab=30522, seed=1) -> dict[str, np.ndarray]:
    """[CLS] tokens [SEP] then padding (id 0): row 0 full, each later row 5 tokens shorter."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(min(1000, vocab - 1), vocab, (batch, seq)).astype(np.int32)
    mask = np.ones((batch, seq), np.int32)
    for b in range(batch):
        length = max(1, seq - (5 * b) % seq)
        ids[b, 0], ids[b, length - 1] = min(101, vocab - 1), min(102, vocab - 1)
        ids[b, length:], mask[b, length:] = 0, 0
    return {"input_ids": ids, "attention_mask": mask}


def transformers_outputs(folder, inputs) -> dict[str, np.ndarray]:
    """BertModel.from_pretrained(folder) in eval mode, fp32 on the CPU, on the same inputs."""
    import torch
    from transformers import BertModel

    model = BertModel.from_pretrained(str(folder)).eval()
    with torch.no_grad():
        out = model(**{k: torch.from_numpy(v).long() for k, v in inputs.items()})
    return {"last_hidden_state": out.last_hidden_state.numpy(), "pooler_output": out.pooler_output.numpy()}


def write_random_checkpoint(folder, **sizes) -> pathlib.Path:
    """A random transformers BertModel saved with save_pretrained (needs transformers and torch)."""
    import torch
    from transformers import BertConfig as HFConfig
    from transformers import BertModel

    torch.manual_seed(0)
    BertModel(HFConfig(**sizes)).eval().save_pretrained(str(folder))
    return pathlib.Path(folder)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", nargs="?", type=pathlib.Path, help="a folder with config.json and model.safetensors")
    parser.add_argument("--random", action="store_true", help="write a random BertModel first (sizes below)")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=16)
    args = parser.parse_args(argv)
    folder = args.checkpoint
    if args.random or folder is None:
        folder = folder or pathlib.Path(tempfile.mkdtemp(prefix="tensoracle-bert-"))
        write_random_checkpoint(folder, hidden_size=args.hidden, num_attention_heads=args.heads,
                                num_hidden_layers=args.layers, intermediate_size=4 * args.hidden)
        print(f"wrote a random BertModel to {folder}")
    c = BertConfig.from_pretrained(folder)
    print(f"config: hidden {c.hidden}, {c.layers} layers, {c.heads} heads of {c.head_dim}, "
          f"intermediate {c.intermediate}, {c.act}")
    engine = tensoracle.deserialize_engine(build_serialized_engine(graph(folder), engine_declaration()))
    fused = sum(layer.type == "attention" for layer in engine.layers())
    print(f"engine: {len(engine.layers())} nodes, {fused} fused attention")
    inputs = sample_inputs(args.batch, args.seq, c.vocab)
    ours = engine.create_execution().run(inputs)
    theirs = transformers_outputs(folder, inputs)
    worst = 0.0
    for name in ("last_hidden_state", "pooler_output"):
        err = float(np.abs(ours[name] - theirs[name]).max())
        worst = max(worst, err)
        print(f"{name}: {ours[name].shape}, max abs error against transformers {err:.2e}")
    print("OK" if worst <= MAX_ABS_ERROR else f"FAILED: above {MAX_ABS_ERROR}")
    return 0 if worst <= MAX_ABS_ERROR else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
