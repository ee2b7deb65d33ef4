#!/usr/bin/env python3
"""tensoracle on the GPU beside PyTorch: an engine built for cuda:0 runs on torch's CUDA tensors
(bound through DLPack, no copies) on a torch stream, and after the first call replays a CUDA
graph. Prints the error against torch's own result and the time per call of both.

    python examples/cuda_torch.py          # needs an NVIDIA GPU, torch with CUDA
"""

import time

import numpy as np
import torch

import tensoracle
import tensoracle.trt as trt

torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32 on both sides
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda().eval()


def graph(net):
    t = net.add_input("x", trt.float32, (-1, 256))
    for layer in (model[0], model[2]):
        w = layer.weight.detach().cpu().numpy()
        b = layer.bias.detach().cpu().numpy().reshape(1, -1)
        t = net.add_matrix_multiply(t, trt.MatrixOperation.NONE, net.add_constant(w.shape, w).get_output(0),
                                    trt.MatrixOperation.TRANSPOSE).get_output(0)
        t = net.add_elementwise(t, net.add_constant(b.shape, b).get_output(0), trt.ElementWiseOperation.SUM).get_output(0)
        if layer is model[0]:
            t = net.add_activation(t, trt.ActivationType.RELU).get_output(0)
    t.name = "logits"
    net.mark_output(t)


declaration = tensoracle.EngineBuild({"x": tensoracle.InputShape.ranged((1, 256), (32, 256), (128, 256))},
                                     tensoracle.BuilderSettings(device="cuda:0"))
engine = tensoracle.deserialize_engine(tensoracle.build_serialized_engine(graph, declaration))
print("engine on", engine.device, "| nodes:", ", ".join(f"{layer.name} ({layer.tactic})" for layer in engine.layers()))

execution = engine.create_execution()
x = torch.randn(32, 256, device="cuda")
logits = torch.empty(32, 10, device="cuda")
execution.set_tensor_address("x", x)  # the input's shape comes from the tensor
execution.set_tensor_address("logits", logits)
stream = torch.cuda.Stream()
with torch.no_grad(), torch.cuda.stream(stream):
    for _ in range(3):  # eager, then recorded as a CUDA graph, then replayed
        execution.enqueue(stream)
    expected = model(x)
stream.synchronize()
error = (logits - expected).abs().max().item()
print(f"max |tensoracle - torch| = {error:.2e}")
assert error < 1e-4, error


def per_call(fn, n=200):
    with torch.cuda.stream(stream):
        fn()
        stream.synchronize()
        start = time.perf_counter()
        for _ in range(n):
            fn()
        stream.synchronize()
    return (time.perf_counter() - start) / n


with torch.no_grad():
    ours = per_call(lambda: execution.enqueue(stream))
    theirs = per_call(lambda: model(x))
print(f"per call: tensoracle {ours * 1e6:.1f} us, torch eager {theirs * 1e6:.1f} us ({ours / theirs:.2f}x)")
print("ok")
