#!/usr/bin/env python3
"""Benchmark: transformers' BertModel on the CPU, tensoracle (examples/bert.py's graph of the
checkpoint) against onnxruntime (the same model exported to ONNX), fp32.

The model: a BertModel with random weights (seeded) at BERT-base's size by default (hidden 768,
12 heads of 64, FFN 3072, GELU erf; --layers 12), written with save_pretrained; its outputs
last_hidden_state and pooler_output. Inputs: batch x seq tokens, later rows padded.

  tensoracle   set_cpu_threads(n); examples/bert.py's graph(checkpoint, batch, seq), an engine
               whose profile is the benchmark's shape; timed: execution.enqueue() on buffers
               bound once. Attention is fused where the CPU backend fuses it.
  onnxruntime  torch.onnx.export of the same BertModel (TorchScript exporter, opset 17),
               intra_op_num_threads = n, ORT_ENABLE_ALL (its own attention, LayerNorm and GELU
               fusions); timed: run_with_iobinding on pre-bound OrtValues.

Both outputs must agree with transformers' within 1e-4 (max abs), else exit 1. The peers are
timed in interleaved rounds; the ratio of medians is the figure (issue 32's CPU target: 0.9).

    python python/bench/bench_bert.py                      # BERT-base, batch 1 x 128, 2 threads
    python python/bench/bench_bert.py --batch 8 --layers 2 # a shorter stack
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import sys
import tempfile
import time
import warnings

import numpy as np

import tensoracle  # noqa: I001  (first: its OpenMP settings apply before torch loads libgomp)
from bench_common import Peer, cpu_model, interleaved, load_line

import onnxruntime as ort
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))
import bert  # noqa: E402

TARGET_RATIO = 0.9
OUTPUTS = ("last_hidden_state", "pooler_output")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=5, help="iterations per peer per round")
    args = parser.parse_args(argv)
    n = args.threads
    tensoracle.set_cpu_threads(n)
    torch.set_num_threads(n)
    sizes = dict(hidden_size=args.hidden, num_attention_heads=args.heads, num_hidden_layers=args.layers,
                 intermediate_size=4 * args.hidden)
    print(f"BertModel (hidden {args.hidden}, {args.layers} layers, {args.heads} heads of {args.hidden // args.heads}, "
          f"FFN {4 * args.hidden}), fp32, batch {args.batch} x {args.seq} tokens")
    print(f"cpu: {cpu_model()}, {os.cpu_count()} logical cores; threads n = {n}; {load_line()}")
    print(f"tensoracle {tensoracle.__version__}, onnxruntime {ort.__version__}, torch {torch.__version__}, "
          f"python {platform.python_version()}")
    with tempfile.TemporaryDirectory(prefix="tensoracle-bench-bert-") as tmp:
        folder = bert.write_random_checkpoint(pathlib.Path(tmp) / "bert", **sizes)
        inputs = bert.sample_inputs(args.batch, args.seq, vocab=30522, seed=5)
        reference = bert.transformers_outputs(folder, inputs)

        t0 = time.perf_counter()
        decl = bert.engine_declaration(max_batch=args.batch, max_seq=args.seq, opt=(args.batch, args.seq), seq=args.seq)
        engine = tensoracle.deserialize_engine(tensoracle.build_serialized_engine(bert.graph(folder, seq=args.seq), decl))
        t_build = time.perf_counter() - t0

        t0 = time.perf_counter()
        from transformers import BertModel

        class Wrapped(torch.nn.Module):  # keyword arguments in, the two outputs out
            def __init__(self):
                super().__init__()
                self.bert = BertModel.from_pretrained(str(folder)).eval()

            def forward(self, input_ids, attention_mask):
                out = self.bert(input_ids=input_ids, attention_mask=attention_mask)
                return out.last_hidden_state, out.pooler_output

        onnx_path = pathlib.Path(tmp) / "bert.onnx"
        names = ("input_ids", "attention_mask")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(Wrapped().eval(), tuple(torch.from_numpy(inputs[k]).long() for k in names), str(onnx_path),
                              dynamo=False, opset_version=17, input_names=list(names), output_names=list(OUTPUTS))
        options = ort.SessionOptions()
        options.intra_op_num_threads = n
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
        t_ort = time.perf_counter() - t0
    print(f"setup: tensoracle build {t_build:.1f} s; onnxruntime export + session {t_ort:.1f} s")
    fused = sum(layer.type == "attention" for layer in engine.layers())
    print(f"tensoracle engine: {len(engine.layers())} nodes, {fused} fused attention")

    ours = {k: np.zeros_like(reference[k]) for k in OUTPUTS}
    execution = engine.create_execution()
    for name, array in inputs.items():
        execution.set_tensor_address(name, array.ctypes.data)
    for name, array in ours.items():
        execution.set_tensor_address(name, array.ctypes.data)

    theirs = {k: np.zeros_like(reference[k]) for k in OUTPUTS}
    binding = session.io_binding()
    keep = []
    for name in names:  # the exported model takes int64 ids and mask
        keep.append(ort.OrtValue.ortvalue_from_numpy(inputs[name].astype(np.int64)))
        binding.bind_ortvalue_input(name, keep[-1])
    for name in OUTPUTS:
        keep.append(ort.OrtValue.ortvalue_from_numpy(theirs[name]))
        binding.bind_ortvalue_output(name, keep[-1])
    run_options = ort.RunOptions()
    peers = [Peer("tensoracle  enqueue (bound)", execution.enqueue),
             Peer("onnxruntime run_with_iobinding", lambda: session.run_with_iobinding(binding, run_options))]
    for peer in peers:
        for _ in range(args.warmup):
            peer.fn()
    bad = []
    for k in OUTPUTS:
        for label, got in (("tensoracle", ours[k]), ("onnxruntime", theirs[k])):
            err = float(np.abs(got - reference[k]).max())
            print(f"max abs error {label} vs transformers, {k}: {err:.2e}")
            if not err <= bert.MAX_ABS_ERROR:
                bad.append(f"{label} {k}: {err:.3e}")
    interleaved(peers, args.rounds, args.iterations)
    print()
    print(f"{'peer':36} {'median ms':>10} {'p90 ms':>8}   ({args.rounds * args.iterations} iterations each)")
    for p in peers:
        print(f"{p.label:36} {p.median:10.2f} {p.p90:8.2f}")
    ratio = peers[0].median / peers[1].median
    print(f"\nratio tensoracle / onnxruntime (median): {ratio:.2f}x (target <= {TARGET_RATIO}x): "
          f"{'MET' if ratio <= TARGET_RATIO else 'MISSED'}")
    print(load_line())
    if bad:
        print("FAILED: " + "; ".join(bad))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
