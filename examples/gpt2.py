"""GPT-2 decoders from Hugging Face checkpoints on tensoracle: `config.json` + `model.safetensors`.

:func:`graph` defines transformers' ``GPT2Model`` (the prefill: every position of a prompt at
once, causal attention) with TensorRT's Python API (``import tensoracle.trt as trt``) from a
checkpoint folder as ``save_pretrained`` writes it: the sizes come from ``config.json``
(``n_embd``, ``n_head``, ``n_layer``, ``n_inner``, ``layer_norm_epsilon``, ``n_positions``,
``activation_function``), the weights from ``model.safetensors`` by their Hugging Face names (a
``transformer.`` prefix, as ``GPT2LMHeadModel`` saves, is accepted). GPT-2's ``Conv1D`` stores
its weights as (in, out), so a projection is ``x @ W + b`` without a transpose.

Output ``last_hidden_state`` (B, S, n_embd), what ``GPT2Model(input_ids, attention_mask)``
returns in eval mode. Inputs ``input_ids`` and ``attention_mask`` (int32, B x S; the batch is
dynamic unless fixed, the sequence length S is fixed when the graph is made: the causal mask is
a constant of S x S). Attention is written as its layers — Q, K and V from the three thirds of
``c_attn``, QKᵀ, the scale, the causal and padding mask, softmax, PV — which the builder fuses
into one attention node where the backend's fused kernel is the faster, reading Q, K and V from
one product.

    python examples/gpt2.py CHECKPOINT_DIR [--seq 32] [--batch 2]  # builds, runs, compares with transformers
    python examples/gpt2.py --random [--heads 4 --hidden 256 ...]   # a random GPT2Model written first

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
import tensoracle.trt as trt
from tensoracle import BuilderSettings, EngineBuild, InputShape, build_serialized_engine

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bert import NUMPY_TYPE, Net  # noqa: E402  (the helpers over one network)

MAX_ABS_ERROR = 1e-4  # fp32 outputs against transformers
# config.json's activation_function -> TensorRT's activation
ACTIVATIONS = {"gelu_new": "GELU_TANH", "gelu_pytorch_tanh": "GELU_TANH", "gelu": "GELU_ERF", "relu": "RELU"}


@dataclass(frozen=True)
class GPT2Config:
    """The fields of a GPT-2 config.json the graph needs (transformers' GPT2Config names in comments)."""

    vocab: int = 50257  # vocab_size
    hidden: int = 768  # n_embd
    layers: int = 12  # n_layer
    heads: int = 12  # n_head
    intermediate: int = 3072  # n_inner (None: 4 * n_embd)
    act: str = "gelu_new"  # activation_function
    eps: float = 1e-5  # layer_norm_epsilon
    positions: int = 1024  # n_positions

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @staticmethod
    def from_pretrained(folder) -> GPT2Config:
        """Reads `folder`/config.json; ValueError naming the file and field for what the graph cannot build."""
        path = pathlib.Path(folder) / "config.json"
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            raise ValueError(f"{path}: no such file (a checkpoint folder as save_pretrained writes it)") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not JSON ({e})") from None

        def need(key):
            value = raw.get(key)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{path}: {key!r} is {value!r}, not a positive integer")
            return value

        if raw.get("model_type", "gpt2") != "gpt2":
            raise ValueError(f"{path}: model_type {raw.get('model_type')!r}; this graph builds GPT-2 decoders")
        act = raw.get("activation_function", "gelu_new")
        if act not in ACTIVATIONS:
            raise ValueError(f"{path}: activation_function {act!r}; built: {', '.join(ACTIVATIONS)}")
        for flag in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention"):
            if raw.get(flag, False):
                raise ValueError(f"{path}: {flag} is set; this graph builds GPT-2's plain attention")
        if raw.get("scale_attn_weights", True) is not True:
            raise ValueError(f"{path}: scale_attn_weights is off; this graph scales by 1/sqrt(head size)")
        hidden = need("n_embd")
        inner = raw.get("n_inner") or 4 * hidden
        c = GPT2Config(vocab=need("vocab_size"), hidden=hidden, layers=need("n_layer"), heads=need("n_head"),
                       intermediate=inner, act=act, eps=float(raw.get("layer_norm_epsilon", 1e-5)),
                       positions=need("n_positions"))
        if c.hidden % c.heads:
            raise ValueError(f"{path}: n_embd {c.hidden} is not a multiple of n_head {c.heads}")
        return c


def load_weights(folder) -> dict[str, np.ndarray]:
    """`folder`/model.safetensors by GPT2Model's names (a leading "transformer." dropped)."""
    path = pathlib.Path(folder) / "model.safetensors"
    if not path.exists():
        raise ValueError(f"{path}: no such file")
    w = load_file(str(path))
    if any(k.startswith("transformer.") for k in w):
        w = {k[len("transformer."):]: v for k, v in w.items() if k.startswith("transformer.")}
    return w


def conv1d(net: Net, x, prefix: str, columns=None, name=None):
    """GPT-2's Conv1D: x @ W + b with W stored (in, out); `columns` picks a slice of the outputs.
    The product is named `name` (default: prefix), the bias add `name`.bias."""
    weight, bias = net.weight(prefix + ".weight"), net.weight(prefix + ".bias")
    if columns is not None:
        weight, bias = weight[:, columns], bias[columns]
    name = name or prefix
    y = net.named(net.matmul(x, net.constant(weight[None])), name)
    return net.named(net.network.add_elementwise(y, net.constant(bias[None, None]), trt.ElementWiseOperation.SUM),
                     name + ".bias")


def graph(folder, seq, batch=None, dtype=trt.float32):
    """GPT2Model from the checkpoint `folder` as a network definition for prompts of `seq`
    tokens (see the module's docstring). B is dynamic (-1) unless `batch` fixes it."""
    folder = pathlib.Path(folder)
    c = GPT2Config.from_pretrained(folder)
    if not 1 <= seq <= c.positions:
        raise ValueError(f"seq {seq}: GPT-2 takes 1 to n_positions = {c.positions} tokens")

    def define(network):
        w = load_weights(folder)
        net = Net(network, w, dtype, c.eps)
        SUM, PROD = trt.ElementWiseOperation.SUM, trt.ElementWiseOperation.PROD
        B = -1 if batch is None else batch
        input_ids = network.add_input("input_ids", trt.int32, (B, seq))
        attention_mask = network.add_input("attention_mask", trt.int32, (B, seq))
        words = network.add_gather(net.constant(net.weight("wte.weight")), input_ids, 0).get_output(0)  # (B, S, E)
        positions = net.constant(net.weight("wpe.weight")[:seq][None])  # (1, S, E)
        x = net.named(network.add_elementwise(words, positions, SUM), "embeddings")
        # the additive mask (B, 1, S, S): the float type's minimum above the diagonal and at padded keys
        minimum = float(np.finfo(NUMPY_TYPE[dtype]).min)
        causal = net.constant(np.triu(np.full((seq, seq), minimum), 1)[None, None])
        keep = network.add_cast(attention_mask, dtype).get_output(0)
        padded = network.add_elementwise(net.scalar(1.0, 2), keep, trt.ElementWiseOperation.SUB).get_output(0)
        padding = net.reshape(network.add_elementwise(padded, net.scalar(minimum, 2), PROD).get_output(0), (0, 1, 1, seq))
        # (where a key is both, minimum + minimum is -inf: still a weight of 0; key 0 is never masked)
        mask = net.named(network.add_elementwise(causal, padding, SUM), "mask")
        act = getattr(trt.ActivationType, ACTIVATIONS[c.act])
        E, H = c.hidden, c.head_dim
        for i in range(c.layers):
            p = f"h.{i}"
            a = net.layer_norm(x, f"{p}.ln_1")
            # Q, K and V from the thirds of c_attn (the builder merges the three products again)
            q, k, v = (net.reshape(conv1d(net, a, f"{p}.attn.c_attn", slice(j * E, (j + 1) * E), f"{p}.attn.{n}"),
                                   (0, 0, c.heads, H), second_transpose=(0, 2, 1, 3))
                       for j, n in enumerate(("query", "key", "value")))
            s = net.named(net.matmul(q, k, trt.MatrixOperation.TRANSPOSE), f"{p}.attn.scores")
            s = net.named(network.add_elementwise(s, net.scalar(1.0 / math.sqrt(H), 4), PROD), f"{p}.attn.scale")
            s = net.named(network.add_elementwise(s, mask, SUM), f"{p}.attn.mask")
            softmax = network.add_softmax(s)
            softmax.axes = 1 << 3
            probs = net.named(softmax, f"{p}.attn.softmax")
            context = net.named(net.matmul(probs, v), f"{p}.attn.context")
            context = net.reshape(context, (0, 0, E), first_transpose=(0, 2, 1, 3))
            x = net.named(network.add_elementwise(conv1d(net, context, f"{p}.attn.c_proj"), x, SUM), f"{p}.attn.residual")
            m = net.layer_norm(x, f"{p}.ln_2")
            h = net.named(network.add_activation(conv1d(net, m, f"{p}.mlp.c_fc"), act), f"{p}.mlp.act")
            x = net.named(network.add_elementwise(conv1d(net, h, f"{p}.mlp.c_proj"), x, SUM), f"{p}.mlp.residual")
        x = net.layer_norm(x, "ln_f")
        x.name = "last_hidden_state"
        network.mark_output(x)

    return define


def engine_declaration(seq, max_batch=8, opt_batch=2, device="cpu"):
    shape = InputShape.ranged((1, seq), (min(opt_batch, max_batch), seq), (max_batch, seq))
    return EngineBuild({"input_ids": shape, "attention_mask": shape}, BuilderSettings(device=device))


def sample_inputs(batch=2, seq=16, vocab=50257, seed=1) -> dict[str, np.ndarray]:
    """Random tokens, then padding (id 0, mask 0) at the end: row 0 full, each later row 3 tokens shorter."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, (batch, seq)).astype(np.int32)
    mask = np.ones((batch, seq), np.int32)
    for b in range(batch):
        length = max(1, seq - (3 * b) % seq)
        ids[b, length:], mask[b, length:] = 0, 0
    return {"input_ids": ids, "attention_mask": mask}


def transformers_outputs(folder, inputs) -> np.ndarray:
    """GPT2Model.from_pretrained(folder) in eval mode, fp32 on the CPU: last_hidden_state."""
    import torch
    from transformers import GPT2Model

    model = GPT2Model.from_pretrained(str(folder)).eval()
    with torch.no_grad():
        return model(**{k: torch.from_numpy(v).long() for k, v in inputs.items()}).last_hidden_state.numpy()


def write_random_checkpoint(folder, **sizes) -> pathlib.Path:
    """A random transformers GPT2Model saved with save_pretrained (needs transformers and torch)."""
    import torch
    from transformers import GPT2Config as HFConfig
    from transformers import GPT2Model

    torch.manual_seed(0)
    GPT2Model(HFConfig(**sizes)).eval().save_pretrained(str(folder))
    return pathlib.Path(folder)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", nargs="?", type=pathlib.Path, help="a folder with config.json and model.safetensors")
    parser.add_argument("--random", action="store_true", help="write a random GPT2Model first (sizes below)")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=16)
    args = parser.parse_args(argv)
    folder = args.checkpoint
    if args.random or folder is None:
        folder = folder or pathlib.Path(tempfile.mkdtemp(prefix="tensoracle-gpt2-"))
        write_random_checkpoint(folder, n_embd=args.hidden, n_head=args.heads, n_layer=args.layers, vocab_size=1000,
                                n_positions=max(128, args.seq))
        print(f"wrote a random GPT2Model to {folder}")
    c = GPT2Config.from_pretrained(folder)
    print(f"config: n_embd {c.hidden}, {c.layers} layers, {c.heads} heads of {c.head_dim}, inner {c.intermediate}, {c.act}")
    engine = tensoracle.deserialize_engine(build_serialized_engine(graph(folder, args.seq),
                                                                   engine_declaration(args.seq, max(8, args.batch))))
    fused = sum(layer.type == "attention" for layer in engine.layers())
    print(f"engine: {len(engine.layers())} nodes, {fused} fused attention")
    inputs = sample_inputs(args.batch, args.seq, c.vocab)
    ours = engine.create_execution().run(inputs)["last_hidden_state"]
    theirs = transformers_outputs(folder, inputs)
    err = float(np.abs(ours - theirs).max())
    print(f"last_hidden_state: {ours.shape}, max abs error against transformers {err:.2e}")
    print("OK" if err <= MAX_ABS_ERROR else f"FAILED: above {MAX_ABS_ERROR}")
    return 0 if err <= MAX_ABS_ERROR else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
