#!/usr/bin/env python3
"""torch alone on the GPU: the parts of one fp8 MLP layer (512 x 4096 @ 4096 x 4096), each timed
as 50 launches replayed from a CUDA graph (median of 5 replays): float16 addmm, fp8 _scaled_mm
(cuBLASLt) with and without fast accumulation, GELU, and an fp8 quantize. What the float8 row of
docs/performance.md is measured against.

    python python/bench/torch_fp8_parts.py
"""
import statistics

import torch

torch.backends.cuda.matmul.allow_tf32 = False
dev = "cuda"
M, K, N = 512, 4096, 4096
x = torch.randn(M, K, device=dev, dtype=torch.float16)
w = torch.randn(N, K, device=dev, dtype=torch.float16) * 0.02
b = torch.randn(N, device=dev, dtype=torch.float16)
sa = torch.tensor(x.abs().max().item() / 448, device=dev)
sb = torch.tensor(w.abs().max().item() / 448, device=dev)
x8 = (x / sa).to(torch.float8_e4m3fn)
w8 = (w / sb).to(torch.float8_e4m3fn)
y = torch.empty(M, N, device=dev, dtype=torch.float16)

def t(fn, n=50):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for _ in range(3): fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        for _ in range(n): fn()
    res = []
    for _ in range(5):
        a = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); e.record(); torch.cuda.synchronize()
        res.append(a.elapsed_time(e) * 1000 / n)
    return statistics.median(res)


print("addmm fp16      %.1f us" % t(lambda: torch.addmm(b, x, w.t())))
for fast in (False, True):
    print("scaled_mm fp8 fast=%d %.1f us" % (fast, t(lambda: torch._scaled_mm(x8, w8.t(), scale_a=sa, scale_b=sb, bias=b, out_dtype=torch.float16, use_fast_accum=fast))))
print("gelu fp16       %.1f us" % t(lambda: torch.nn.functional.gelu(y)))
print("quant fp8       %.1f us" % t(lambda: (y / sa).to(torch.float8_e4m3fn)))
