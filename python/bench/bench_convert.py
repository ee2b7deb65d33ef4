#!/usr/bin/env python3
"""Benchmark: converting a ~1 GiB torch.save checkpoint to safetensors.

    tensoracle      tensoracle.convert_pth(src, dst)            (and the CLI, for reference)
    torch peer      torch.load(src, weights_only=True) + safetensors.torch.save_file(sd, dst)

One run writes a transformer-shaped float32 state dict with torch.save (in a subprocess),
reads it once to warm the page cache, then runs each converter once, each in its own
subprocess, and reports:

  - time: the conversion call alone, measured inside the subprocess (interpreter start-up and
    imports excluded; listed separately), and the subprocess's wall time;
  - peak RSS: the subprocess's ru_maxrss, from os.wait4 on that child alone, started from a
    fresh small Python launcher (a child is charged the peak of the process it was started
    from, so neither this script nor the checkpoint's writer inflate the figures).

Targets (issue 6): tensoracle time <= 0.5x and peak RSS <= 0.25x the torch peer's. The two
outputs are checked to be byte-identical (the peer is given the same metadata, {"format":
"pt"}; both writers lay files out the same way). tensoracle's writer fsyncs its output (it
writes atomically); save_file does not — its dirty pages may still be in flight when its
time stops. Everything written is deleted at the end.

    python python/bench/bench_convert.py                 # ~1 GiB
    python python/bench/bench_convert.py --size-mib 128  # a quick check
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

TARGET_TIME = 0.5
TARGET_RSS = 0.25

# A transformer-shaped state dict of about `size_mib` MiB of float32 (written in a subprocess:
# this process never imports torch, so its children inherit a small address space).
MAKE = r"""
import sys, torch
size_mib, path, hidden = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
torch.manual_seed(0)
budget = size_mib << 20
sd, i = {}, 0
sd["embed_tokens.weight"] = torch.randn(8192, hidden)
budget -= 8192 * hidden * 4
while budget > 0:
    p = f"layers.{i}."
    for name, shape in (("self_attn.qkv_proj.weight", (3 * hidden, hidden)), ("self_attn.o_proj.weight", (hidden, hidden)),
                        ("mlp.up_proj.weight", (4 * hidden, hidden)), ("mlp.down_proj.weight", (hidden, 4 * hidden)),
                        ("input_layernorm.weight", (hidden,)), ("post_attention_layernorm.weight", (hidden,))):
        sd[p + name] = torch.randn(*shape)
        budget -= sd[p + name].numel() * 4
    i += 1
sd["norm.weight"] = torch.ones(hidden)
torch.save(sd, path)
print(len(sd), i)
"""

# Each converter, timed inside its own process (imports excluded).
OURS = r"""
import sys, time, json
t0 = time.perf_counter()
import tensoracle
t1 = time.perf_counter()
r = tensoracle.convert_pth(sys.argv[1], sys.argv[2])
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "convert_s": t2 - t1, "tensors": r["tensors"]}))
"""

PEER = r"""
import sys, time, json
t0 = time.perf_counter()
import torch, safetensors.torch
t1 = time.perf_counter()
sd = torch.load(sys.argv[1], weights_only=True)
t2 = time.perf_counter()
safetensors.torch.save_file(sd, sys.argv[2], metadata={"format": "pt"})
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "convert_s": (t2 - t1) + (t3 - t2), "load_s": t2 - t1, "save_s": t3 - t2,
                  "tensors": len(sd)}))
"""


# Starts the command from a fresh, small Python process and reports the peak RSS of that child
# alone (os.wait4). Linux carries a process's peak RSS across exec, and a child started with
# vfork is charged its parent's peak: starting converters from this script directly would
# count whatever this script ever held.
LAUNCH = r"""
import json, os, subprocess, sys, time
start = time.perf_counter()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE)
out = p.stdout.read()
_, status, usage = os.wait4(p.pid, 0)
print(json.dumps({"status": os.waitstatus_to_exitcode(status), "wall_s": time.perf_counter() - start,
                  "rss_kib": usage.ru_maxrss, "stdout": out.decode()}))
"""


def run_measured(cmd):
    """(wall seconds, peak RSS MiB, stdout) of one child process."""
    r = subprocess.run([sys.executable, "-c", LAUNCH, *cmd], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"launcher failed:\n{r.stderr}")
    m = json.loads(r.stdout)
    if m["status"] != 0:
        raise SystemExit(f"{cmd[:3]} failed (status {m['status']}):\n{r.stderr}")
    return m["wall_s"], m["rss_kib"] / 1024, m["stdout"]


def file_digest(path):
    h = hashlib.sha256()
    buf = bytearray(1 << 20)  # small reads: this process stays small (see LAUNCH)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(memoryview(buf)[:n])
    return h.hexdigest()


def warm(path):
    buf = bytearray(1 << 20)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass


def machine():
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), cpu)
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",) * 3
    return affinity, cpu, load


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--dir", default=None, help="folder for the files (default: system temp)")
    args = ap.parse_args(argv)
    py = sys.executable
    cli = shutil.which("tensoracle") or os.path.join(os.path.dirname(py), "tensoracle")

    nproc, cpu, load = machine()
    print("machine")
    print(f"  nproc          {nproc}")
    print(f"  cpu            {cpu}")
    print(f"  load average   {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (before the run)")
    print(f"  os             {platform.system()} {platform.release()} {platform.machine()}")
    versions = subprocess.run([py, "-c", "import torch, safetensors, tensoracle; print(torch.__version__, "
                               "safetensors.__version__, tensoracle.__version__)"], capture_output=True, text=True)
    print(f"  versions       torch, safetensors, tensoracle: {versions.stdout.strip()}")

    work = tempfile.mkdtemp(prefix="tensoracle-bench-convert-", dir=args.dir)
    try:
        src = os.path.join(work, "model.pth")
        t = time.perf_counter()
        made = subprocess.run([py, "-c", MAKE, str(args.size_mib), src, str(args.hidden)], capture_output=True, text=True)
        if made.returncode:
            raise SystemExit(made.stderr)
        tensors, layers = made.stdout.split()
        size = os.path.getsize(src)
        print("checkpoint")
        print(f"  {size:,} bytes ({size / 2**20:.0f} MiB), {tensors} float32 tensors ({layers} layers, hidden "
              f"{args.hidden}), written by torch.save in {time.perf_counter() - t:.1f} s")
        warm(src)
        print("  page cache warmed (read once); one run of each converter, each in its own process")
        print()

        rows = {}
        outs = {}
        for label, cmd in (
            ("tensoracle.convert_pth", [py, "-c", OURS]),
            ("torch.load + save_file", [py, "-c", PEER]),
            ("tensoracle CLI", [cli, "convert"]),
        ):
            dst = os.path.join(work, label.split()[0].replace(".", "_") + ".safetensors")
            os.sync()  # earlier outputs' dirty pages are not this run's to flush
            wall, rss, out = run_measured([*cmd, src, dst] if cmd[0] != cli else [cli, "convert", src, dst])
            info = json.loads(out) if out.strip().startswith("{") else {}
            rows[label] = (info.get("convert_s", wall), info.get("import_s"), wall, rss, info)
            outs[label] = dst

        ours_t, _, _, ours_rss, _ = rows["tensoracle.convert_pth"]
        peer_t, _, _, peer_rss, peer = rows["torch.load + save_file"]
        print(f"{'converter':26} {'convert':>9} {'imports':>9} {'process':>9} {'peak RSS':>10}")
        for label, (conv, imp, wall, rss, _) in rows.items():
            imp_s = f"{imp:8.2f}s" if imp is not None else f"{'-':>9}"
            print(f"{label:26} {conv:8.2f}s {imp_s} {wall:8.2f}s {rss:7.0f} MiB")
        print(f"  (torch peer: load {peer['load_s']:.2f} s + save_file {peer['save_s']:.2f} s; CLI row: process wall time)")
        print()
        t_ratio, r_ratio = ours_t / peer_t, ours_rss / peer_rss
        print(f"time ratio      {t_ratio:.3f}x  (target <= {TARGET_TIME}x: {'met' if t_ratio <= TARGET_TIME else 'MISSED'})")
        print(f"peak RSS ratio  {r_ratio:.3f}x  (target <= {TARGET_RSS}x: {'met' if r_ratio <= TARGET_RSS else 'MISSED'})")
        same = file_digest(outs["tensoracle.convert_pth"]) == file_digest(outs["torch.load + save_file"])
        print(f"outputs         {'byte-identical' if same else 'DIFFER'} (tensoracle vs the official writer)")
        if load[0] != "?" and load[0] > nproc * 0.5:
            print(f"note            the machine was loaded (load average {load[0]:.1f} on {nproc} cores): "
                  "times are noisy")
        return 0 if same else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
