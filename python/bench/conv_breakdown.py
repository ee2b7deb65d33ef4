#!/usr/bin/env python3
"""Where a convolution node's time goes on the GPU: one Conv2d 64->64, 3x3, padding 1 on
32 x 64 x 56 x 56 (NCHW), with and without its bias and a following ReLU, in float16 and float32;
tensoracle (engine at level 3, a replayed CUDA graph) beside torch (cudnn.benchmark on, TF32
off, a replayed CUDA graph), same weights, same run. Prints per variant both times, the max
|error| against torch, the engine's scratch and the tail of the node's tactic.

    python python/bench/conv_breakdown.py [--iterations 20] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_torch import TRT_DTYPE, _np, cuda_time, torch_graph  # noqa: E402

import tensoracle  # noqa: E402
import tensoracle.trt as trt  # noqa: E402

SHAPE = (32, 64, 56, 56)


def engine_for(w, b, relu, dtype):
    def graph(net):
        t = net.add_input("x", TRT_DTYPE[dtype], SHAPE)
        layer = net.add_convolution_nd(t, 64, (3, 3), _np(w.cpu().contiguous()), None if b is None else _np(b.cpu().contiguous()))
        layer.padding_nd = (1, 1)
        t = layer.get_output(0)
        if relu:
            t = net.add_activation(t, trt.ActivationType.RELU).get_output(0)
        t.name = "y"
        net.mark_output(t)

    decl = tensoracle.EngineBuild({"x": tensoracle.InputShape.fixed(SHAPE)},
                                  tensoracle.BuilderSettings(device="cuda:0", optimization_level=3))
    return tensoracle.deserialize_engine(tensoracle.build_serialized_engine(graph, decl))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    for dtype in (torch.float16, torch.float32):
        torch.manual_seed(0)
        conv = torch.nn.Conv2d(64, 64, 3, padding=1).to(dtype)
        w, bias = conv.weight.detach(), conv.bias.detach()
        wd, bd = w.cuda(), bias.cuda()
        x = torch.randn(SHAPE, device="cuda").to(dtype)
        for with_bias, relu in ((False, False), (True, False), (True, True), (False, True)):
            engine = engine_for(w, bias if with_bias else None, relu, dtype)
            ex = engine.create_execution()
            y = torch.empty(SHAPE, dtype=dtype, device="cuda")
            ex.set_tensor_address("x", x)
            ex.set_tensor_address("y", y)
            stream = torch.cuda.Stream()

            def theirs():
                r = torch.nn.functional.conv2d(x, wd, bd if with_bias else None, padding=1)
                return torch.relu(r) if relu else r

            def ours():
                ex.enqueue(stream)

            with torch.cuda.stream(stream):
                for _ in range(3):
                    ours()
                    ref = theirs()
            stream.synchronize()
            err = (y.float() - ref.float()).abs().max().item()
            replay = torch_graph(theirs, stream)
            t_ours, t_theirs = [], []
            for _ in range(2):  # interleaved
                t_ours += cuda_time(ours, args.iterations, args.rounds, stream)
                t_theirs += cuda_time(replay, args.iterations, args.rounds, stream)
            scratch = json.loads(engine.plan_json())["memory"]["workspace_bytes"]
            tactic = engine.layers()[0].tactic
            print(f"{str(dtype)[6:]:8} bias {with_bias!s:5} relu {relu!s:5}  tensoracle {statistics.median(t_ours) * 1e6:7.1f} us"
                  f"  torch CUDA graph {statistics.median(t_theirs) * 1e6:7.1f} us  max|err| {err:.2e}"
                  f"  scratch {scratch}  tactic ...{tactic[-60:]}", flush=True)


if __name__ == "__main__":
    main()
