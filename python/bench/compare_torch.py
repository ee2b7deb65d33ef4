#!/usr/bin/env python3
"""Benchmark on the GPU: tensoracle's CUDA backend beside PyTorch, in one run, same weights.

Workloads (PERFORMANCE.md's peers):
  linear   16x32 @ 32x16 + bias, float32: the launch-bound case
  mlp      4 x (Linear 4096->4096 + GELU), batch 512, in float32 (no TF32), float16, bfloat16,
           and float8: fp8 e4m3 Q/DQ (per-tensor scales) around each float16 product, which the
           builder folds into fp8 GEMMs; timed against torch in float16 and against our float16
  gemm     8192^3 bfloat16 through an engine, against torch.matmul (cuBLAS) in the same run
  conv     2 x (Conv2d 64->64, 3x3, padding 1, bias + ReLU) on 32 x 64 x 56 x 56 (a ResNet
           stage's shape), float32 (no TF32) and float16, against torch with cudnn.benchmark on
  resnet18 examples/resnet18.py's network (BatchNorm folded by the graph function; torch runs
           the model with its BatchNorms), batch 64 at 224 x 224, float32 and float16
  minilm   examples/minilm.py's encoder (6 layers, hidden 384, 12 heads) with mean pooling,
           batch 32 x 128 tokens (some sequences padded), float32 and float16
  reduce   few outputs over many elements, float32: the sum of 16 M elements ("sum"), the mean
           over the first axis of 262144 x 64 ("colmean")
  attention the attention layer alone against torch's scaled_dot_product_attention (flash
           attention), float16 and bfloat16: BERT-base's (32 x 12 heads x 128 tokens x 64, a
           padding mask added per batch and key) and GPT-2 small's prefill (8 x 12 x 1024 x 64,
           causal)
  bert     transformers' own BertModel at BERT-base size (random weights: hidden 768, 12 layers
           of 12 heads, FFN 3072), batch 32 x --bert-seq tokens with padding, float16, against
           examples/bert.py's graph on the same checkpoint (last_hidden_state compared); with
           --bert-layers also an engine built with attention left as its layers
  gpt2     transformers' own GPT2Model at GPT-2 small's size (random weights: 768, 12 layers of
           12 heads), the prefill of batch 8 x --gpt2-seq tokens (some padded), float16, against
           examples/gpt2.py's graph (causal + padding mask) on the same checkpoint

For every workload and dtype it prints time per iteration (CUDA-event median over rounds of
`--iterations` back-to-back launches) for: tensoracle (enqueue on a stream: eager the first
time, then a replayed CUDA graph), torch eager, torch CUDA graph, and torch.compile (with
--compile, in --compile-mode, reduce-overhead by default: CUDA graphs of compiled kernels; slow
to start), the ratio tensoracle / best torch, and the max |error| against
torch's output. TF32 is off in torch (torch.backends.*.allow_tf32 = False) to compare float32
with float32.

    python python/bench/compare_torch.py                # everything
    python python/bench/compare_torch.py --only mlp --dtypes float16 --compile
    python python/bench/compare_torch.py --only bert --dtypes float16 --compile --bert-seq 128,512
    python python/bench/compare_torch.py --json results.json --save /tmp/engines
    tensoracle bench /tmp/engines/mlp_float16.engine --per-layer
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

import tensoracle
import tensoracle.trt as trt

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
TRT_DTYPE = {torch.float32: trt.float32, torch.float16: trt.float16, torch.bfloat16: trt.bfloat16}
TORCH_DTYPE = {trt.float32: torch.float32, trt.float16: torch.float16, trt.bfloat16: torch.bfloat16,
               trt.int32: torch.int32}
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def cuda_time(fn, iterations: int, rounds: int, stream: torch.cuda.Stream) -> list[float]:
    """Seconds per iteration, one figure per round of `iterations` launches on `stream`."""
    out = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            start.record(stream)
            for _ in range(iterations):
                fn()
            end.record(stream)
        end.synchronize()
        out.append(start.elapsed_time(end) / 1e3 / iterations)
    return out


def torch_graph(fn, stream):
    """fn captured once as a CUDA graph (after a warm-up on a side stream), replayed."""
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        fn()
    return g.replay


def engine_of(layers, x_shape, dtype, fp8_scales=None, level=3):
    """An engine of y = act(x @ W^T + b) per layer, weights from `layers` (torch Linear, act).

    With `fp8_scales` (per layer: the features' and the weight's scale), both operands of each
    product go through fp8 quantize/dequantize, which the builder folds into fp8 GEMMs."""

    def qdq(net, t, scale):
        s = net.add_constant((1,), np.array([scale], dtype=np.float32)).get_output(0)
        q = net.add_quantize(t, s, trt.fp8).get_output(0)
        return net.add_dequantize(q, s, TRT_DTYPE[dtype]).get_output(0)

    def graph(net):
        t = net.add_input("x", TRT_DTYPE[dtype], tuple(x_shape))
        for i, (lin, act) in enumerate(layers):
            w = lin.weight.detach().to(dtype).cpu().contiguous()
            wc = net.add_constant(tuple(w.shape), _np(w)).get_output(0)
            if fp8_scales:
                t, wc = qdq(net, t, fp8_scales[i][0]), qdq(net, wc, fp8_scales[i][1])
            t = net.add_matrix_multiply(t, trt.MatrixOperation.NONE, wc, trt.MatrixOperation.TRANSPOSE).get_output(0)
            if lin.bias is not None:
                b = lin.bias.detach().to(dtype).cpu().reshape(1, -1).contiguous()
                t = net.add_elementwise(t, net.add_constant(tuple(b.shape), _np(b)).get_output(0),
                                        trt.ElementWiseOperation.SUM).get_output(0)
            if act is not None:
                t = net.add_activation(t, act).get_output(0)
        t.name = "y"
        net.mark_output(t)

    decl = tensoracle.EngineBuild({"x": tensoracle.InputShape.fixed(tuple(x_shape))},
                                  tensoracle.BuilderSettings(device="cuda:0", optimization_level=level))
    return tensoracle.build_serialized_engine(graph, decl)


def conv_engine(convs, dtype):
    """A builder of y = relu(conv(x)) per torch Conv2d in `convs` (same weights): (inputs, level) -> engine."""

    def build(inputs, level):
        def graph(net):
            t = net.add_input("x", TRT_DTYPE[dtype], tuple(inputs["x"].shape))
            for c in convs:
                w = c.weight.detach().cpu().contiguous()
                b = c.bias.detach().cpu().contiguous()
                layer = net.add_convolution_nd(t, c.out_channels, c.kernel_size, _np(w), _np(b))
                layer.padding_nd = c.padding
                t = net.add_activation(layer.get_output(0), trt.ActivationType.RELU).get_output(0)
            t.name = "y"
            net.mark_output(t)

        return network_engine(graph, inputs, level)

    return build


def _np(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def examples():
    """The examples' modules (resnet18, minilm; they need the safetensors package)."""
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    import minilm
    import resnet18

    return resnet18, minilm


def network_engine(graph, inputs: dict, level: int) -> bytes:
    """An engine of `graph` for the fixed shapes of `inputs` (name: torch tensor) on cuda:0."""
    decl = tensoracle.EngineBuild({k: tensoracle.InputShape.fixed(tuple(v.shape)) for k, v in inputs.items()},
                                  tensoracle.BuilderSettings(device="cuda:0", optimization_level=level))
    return tensoracle.build_serialized_engine(graph, decl)


def measure(name, dtype, layers, x, torch_fn, args, results, fp8_scales=None, out="y"):
    """Times `layers` (a list for engine_of, or a builder: (inputs, level) -> engine bytes) on
    input `x` (a tensor named "x", or a dict of named tensors) beside torch_fn, output `out`."""
    stream = torch.cuda.Stream()
    inputs = x if isinstance(x, dict) else {"x": x}
    if callable(layers):  # a builder of its own (conv_engine, network_engine)
        data = layers(inputs, args.level)
    else:
        data = engine_of(layers, tuple(x.shape), dtype, fp8_scales, args.level)
    label = "float8" if fp8_scales else str(dtype).replace("torch.", "")
    if args.save:
        with open(f"{args.save}/{name}_{label}.engine", "wb") as f:
            f.write(data)
    engine = tensoracle.deserialize_engine(data)
    ex = engine.create_execution()
    for k, v in inputs.items():
        ex.set_tensor_address(k, v)
    # every output gets a buffer; `out` is the one compared with torch
    buffers = {}
    for t in engine.io_tensors:
        if t.name not in inputs:
            buffers[t.name] = torch.empty(tuple(ex.get_tensor_shape(t.name)), dtype=TORCH_DTYPE[t.dtype], device="cuda")
            ex.set_tensor_address(t.name, buffers[t.name])
    y = buffers[out]
    ours = lambda: ex.enqueue(stream)  # noqa: E731
    with torch.cuda.stream(stream):
        for _ in range(3):
            ours()
            ref = torch_fn()
    stream.synchronize()
    err = (y.float() - ref.float()).abs().max().item()
    rows = {"tensoracle": ours, "torch eager": torch_fn, "torch CUDA graph": torch_graph(torch_fn, stream)}
    if args.compile:
        compiled = torch.compile(torch_fn, mode=None if args.compile_mode == "default" else args.compile_mode)
        with torch.cuda.stream(stream):
            for _ in range(3):
                compiled()
        rows[f"torch.compile({args.compile_mode})"] = compiled
    times = {k: statistics.median(cuda_time(fn, args.iterations, args.rounds, stream)) for k, fn in rows.items()}
    best_torch = min(v for k, v in times.items() if k != "tensoracle")
    layer_info = engine.layers()
    r = {"workload": name, "dtype": label, "times_us": {k: v * 1e6 for k, v in times.items()},
         "ratio_vs_best_torch": times["tensoracle"] / best_torch, "max_abs_error_vs_torch": err,
         "tactics": sorted({layer.tactic for layer in layer_info}), "nodes": len(layer_info),
         "attention_nodes": sum(layer.type == "attention" for layer in layer_info)}
    fp16 = [o for o in results if o["workload"] == name and o["dtype"] == "float16"]
    if fp8_scales and fp16:
        r["ratio_vs_tensoracle_float16"] = r["times_us"]["tensoracle"] / fp16[0]["times_us"]["tensoracle"]
        print(f"{name} float8: tensoracle fp8 / tensoracle fp16 = {r['ratio_vs_tensoracle_float16']:.3f}")
    results.append(r)
    cells = "  ".join(f"{k} {v * 1e6:9.1f} us" for k, v in times.items())
    print(f"{name:8s} {r['dtype']:9s} {cells}  ratio {r['ratio_vs_best_torch']:.3f}  max|err| {err:.3g}  "
          f"({r['nodes']} nodes, {r['attention_nodes']} attention)", flush=True)


def bert_workload(args, results):
    """transformers' BertModel (BERT-base, random weights) against examples/bert.py's graph of it."""
    import os
    import tempfile

    from transformers import BertModel

    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    import bert

    folder = tempfile.TemporaryDirectory()
    bert.write_random_checkpoint(folder.name, hidden_size=768, num_attention_heads=12, num_hidden_layers=12,
                                 intermediate_size=3072)
    for name in [n for n in ("float16",) if n in args.dtypes.split(",")]:
        dtype = DTYPES[name]
        model = BertModel.from_pretrained(folder.name, attn_implementation="sdpa").eval().cuda().to(dtype)
        for seq in [int(s) for s in args.bert_seq.split(",")]:
            batch = bert.sample_inputs(args.bert_batch, seq, seed=3)
            ids = torch.from_numpy(batch["input_ids"]).cuda()
            mask = torch.from_numpy(batch["attention_mask"]).cuda()
            ids_long, mask_long = ids.long(), mask.long()
            graph = bert.graph(folder.name, batch=args.bert_batch, seq=seq, dtype=TRT_DTYPE[dtype])
            variants = [("", {})] + ([("-layers", {"TENSORACLE_ATTENTION_KERNEL": "rows"})] if args.bert_layers else [])
            for suffix, env in variants:

                def build(inputs, level, g=graph, env=env):
                    saved = {k: os.environ.get(k) for k in env}
                    os.environ.update(env)
                    try:
                        return network_engine(g, inputs, level)
                    finally:
                        for k, v in saved.items():
                            if v is None:
                                os.environ.pop(k, None)
                            else:
                                os.environ[k] = v

                with torch.no_grad():
                    measure(f"bert{suffix}-{args.bert_batch}x{seq}", dtype, build,
                            {"input_ids": ids, "attention_mask": mask},
                            lambda: model(input_ids=ids_long, attention_mask=mask_long).last_hidden_state, args,
                            results, out="last_hidden_state")


def gpt2_workload(args, results):
    """transformers' GPT2Model (GPT-2 small, random weights) against examples/gpt2.py's graph of it."""
    import tempfile

    from transformers import GPT2Model

    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    import gpt2

    folder = tempfile.TemporaryDirectory()
    gpt2.write_random_checkpoint(folder.name, n_embd=768, n_head=12, n_layer=12, n_positions=max(1024, args.gpt2_seq))
    for name in [n for n in ("float16",) if n in args.dtypes.split(",")]:
        dtype = DTYPES[name]
        model = GPT2Model.from_pretrained(folder.name, attn_implementation="sdpa").eval().cuda().to(dtype)
        seq = args.gpt2_seq
        batch = gpt2.sample_inputs(8, seq, seed=3)
        ids = torch.from_numpy(batch["input_ids"]).cuda()
        mask = torch.from_numpy(batch["attention_mask"]).cuda()
        ids_long, mask_long = ids.long(), mask.long()
        graph = gpt2.graph(folder.name, seq, batch=8, dtype=TRT_DTYPE[dtype])
        with torch.no_grad():
            measure(f"gpt2-8x{seq}", dtype, lambda inputs, level, g=graph: network_engine(g, inputs, level),
                    {"input_ids": ids, "attention_mask": mask},
                    lambda: model(input_ids=ids_long, attention_mask=mask_long).last_hidden_state, args, results,
                    out="last_hidden_state")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    workloads = ["linear", "mlp", "gemm", "conv", "resnet18", "minilm", "reduce", "attention", "bert", "gpt2"]
    p.add_argument("--only", choices=workloads, action="append")
    p.add_argument("--dtypes", default="float32,float16,bfloat16,float8",
                   help="mlp types (resnet18 and minilm: float32 and float16 among them); float8: fp8 Q/DQ around "
                        "each float16 product, timed against torch in float16")
    p.add_argument("--iterations", type=int, default=50)
    p.add_argument("--level", type=int, default=3,
                   help="the engines' optimization level (from 2: cuBLASLt's 8 best guesses timed per GEMM)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--compile", action="store_true", help="also time torch.compile (minutes to compile)")
    p.add_argument("--compile-mode", default="reduce-overhead", choices=["reduce-overhead", "default", "max-autotune"],
                   help="torch.compile's mode (default: reduce-overhead, the peer PERFORMANCE.md names)")
    p.add_argument("--bert-seq", default="128", help="bert: sequence lengths (comma-separated), batch 32 each")
    p.add_argument("--bert-batch", type=int, default=32)
    p.add_argument("--gpt2-seq", type=int, default=1024, help="gpt2: prompt length (batch 8)")
    p.add_argument("--bert-layers", action="store_true",
                   help="bert: also build the engine with attention as its layers (TENSORACLE_ATTENTION_KERNEL=rows "
                        "while building: the builder then keeps the layers)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--save", metavar="DIR", help="also write each engine to DIR (for tensoracle bench --per-layer)")
    p.add_argument("--commit", help="the commit to print (default: git describe of this checkout)")
    args = p.parse_args()
    only = set(args.only or workloads)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    # "-dirty" when the checkout differs from its commit (as a copied working tree may)
    commit = args.commit or subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                                           text=True).stdout.strip()
    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | tensoracle {tensoracle.__version__} "
          f"| commit {commit or '?'} | {time.strftime('%Y-%m-%d')} | optimization level {args.level}")
    results: list[dict] = []
    if "linear" in only:
        lin = torch.nn.Linear(32, 16).cuda()
        x = torch.randn(16, 32, device="cuda")
        measure("linear", torch.float32, [(lin, None)], x, lambda: lin(x), args, results)
    if "mlp" in only:
        for name in args.dtypes.split(","):
            fp8 = name == "float8"
            dtype = torch.float16 if fp8 else DTYPES[name]
            lins = [torch.nn.Linear(4096, 4096).cuda().to(dtype) for _ in range(4)]
            model = torch.nn.Sequential(*[m for lin in lins for m in (lin, torch.nn.GELU())])
            x = torch.randn(512, 4096, device="cuda", dtype=dtype)
            scales = None
            with torch.no_grad():
                if fp8:  # per-tensor scales from the maxima of this input's features and of each weight
                    scales, t = [], x
                    for lin in lins:
                        scales.append((t.abs().max().item() / 448, lin.weight.abs().max().item() / 448))
                        t = torch.nn.functional.gelu(lin(t))
                measure("mlp", dtype, [(lin, trt.ActivationType.GELU_ERF) for lin in lins], x, lambda: model(x), args,
                        results, scales)
    if "gemm" in only:
        n = 8192
        lin = torch.nn.Linear(n, n, bias=False).cuda().to(torch.bfloat16)
        x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        w = lin.weight
        before = len(results)
        with torch.no_grad():
            measure("gemm", torch.bfloat16, [(lin, None)], x, lambda: x @ w.t(), args, results)
        for r in results[before:]:
            flops = 2 * n**3
            r["tflops"] = {k: flops / (v * 1e-6) / 1e12 for k, v in r["times_us"].items()}
            print("gemm TFLOPS: " + "  ".join(f"{k} {v:.0f}" for k, v in r["tflops"].items()))
    if "conv" in only:
        torch.backends.cudnn.benchmark = True  # torch's best convolution algorithms, timed
        for name in ["float32", "float16"]:
            dtype = DTYPES[name]
            convs = [torch.nn.Conv2d(64, 64, 3, padding=1).cuda().to(dtype) for _ in range(2)]
            model = torch.nn.Sequential(*[m for c in convs for m in (c, torch.nn.ReLU())])
            x = torch.randn(32, 64, 56, 56, device="cuda", dtype=dtype)
            with torch.no_grad():
                measure("conv", dtype, conv_engine(convs, dtype), x, lambda: model(x), args, results)
    if only & {"resnet18", "minilm"}:
        import tempfile

        resnet_module, minilm_module = examples()
        torch.backends.cudnn.benchmark = True
        folder = tempfile.TemporaryDirectory()
        for name in [n for n in ("float32", "float16") if n in args.dtypes.split(",")]:
            dtype = DTYPES[name]
            if "resnet18" in only:
                path = f"{folder.name}/resnet18.safetensors"
                model = resnet_module.save_weights(path, seed=0).cuda().to(dtype)
                x = torch.randn(64, 3, 224, 224, device="cuda", dtype=dtype)
                graph = resnet_module.graph(path, 224, 64, TRT_DTYPE[dtype])
                with torch.no_grad():
                    measure("resnet18", dtype, lambda inputs, level, g=graph: network_engine(g, inputs, level),
                            {"images": x}, lambda: model(x), args, results, out="logits")
            if "minilm" in only:
                path = f"{folder.name}/minilm.safetensors"
                model = minilm_module.save_weights(path, seed=0).cuda().to(dtype)
                batch = minilm_module.sample_inputs(batch=32, seq=128)
                ids = torch.from_numpy(batch["input_ids"]).cuda()
                mask = torch.from_numpy(batch["attention_mask"]).cuda()
                ids_long = ids.long()
                graph = minilm_module.graph(path, batch=32, seq=128, dtype=TRT_DTYPE[dtype])
                with torch.no_grad():
                    measure("minilm", dtype, lambda inputs, level, g=graph: network_engine(g, inputs, level),
                            {"input_ids": ids, "attention_mask": mask}, lambda: model(ids_long, mask), args, results,
                            out="embedding")
    if "reduce" in only:
        for name, shape, op, axes, fn in [("sum", (1 << 24,), trt.ReduceOperation.SUM, 1, lambda t: t.sum()),
                                          ("colmean", (1 << 18, 64), trt.ReduceOperation.AVG, 1, lambda t: t.mean(0))]:
            x = torch.randn(*shape, device="cuda")

            def graph(net, shape=shape, op=op, axes=axes):
                y = net.add_reduce(net.add_input("x", trt.float32, shape), op, axes, False).get_output(0)
                y.name = "y"
                net.mark_output(y)

            measure(name, torch.float32, lambda inputs, level, g=graph: network_engine(g, inputs, level), x,
                    lambda x=x, fn=fn: fn(x), args, results)
    if "attention" in only:
        sdpa = torch.nn.functional.scaled_dot_product_attention
        for name in [n for n in ("float16", "bfloat16") if n in args.dtypes.split(",")]:
            dtype = DTYPES[name]
            for label, (b, n, s, h), causal in [("bert", (32, 12, 128, 64), False), ("gpt2", (8, 12, 1024, 64), True)]:
                q, k, v = (torch.randn(b, n, s, h, device="cuda", dtype=dtype) for _ in range(3))
                inputs = {"q": q, "k": k, "v": v}
                mask = None
                if not causal:  # the last 0..31 keys of each sequence are padding
                    keep = torch.arange(s, device="cuda")[None, :] < (s - torch.randint(0, 32, (b, 1), device="cuda"))
                    mask = torch.where(keep, 0.0, -10000.0).to(dtype).reshape(b, 1, 1, s)
                    inputs["mask"] = mask

                def graph(net, causal=causal, dtype=dtype, with_mask=mask is not None, shape=(b, n, s, h)):
                    t = {x: net.add_input(x, TRT_DTYPE[dtype], shape) for x in ("q", "k", "v")}
                    layer = net.add_attention(t["q"], t["k"], t["v"], trt.AttentionNormalizationOp.SOFTMAX, causal)
                    if with_mask:
                        layer.mask = net.add_input("mask", TRT_DTYPE[dtype], (shape[0], 1, 1, shape[2]))
                    layer.scale = shape[3] ** -0.5
                    y = layer.get_output(0)
                    y.name = "y"
                    net.mark_output(y)

                with torch.no_grad():
                    measure(f"attention-{label}", dtype, lambda inputs, level, g=graph: network_engine(g, inputs, level),
                            inputs, lambda q=q, k=k, v=v, m=mask, c=causal: sdpa(q, k, v, attn_mask=m, is_causal=c),
                            args, results)
    if "bert" in only:
        bert_workload(args, results)
    if "gpt2" in only:
        gpt2_workload(args, results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "commit": commit,
                       "date": time.strftime("%Y-%m-%d"), "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
