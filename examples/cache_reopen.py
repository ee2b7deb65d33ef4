"""Save and reopen an engine with open_engine: the first run builds, every later run — in any
process — reopens the saved engine without calling the graph function.

The script writes a small model's weights (a linear layer and GELU) to safetensors, then runs
``python cache_reopen.py open`` in three fresh processes: the first builds and saves the engine
in the cache folder, the next two reopen it. Each prints whether it built, how long
open_engine took, and the result; finally the folder is listed with tensoracle.cache.

    python examples/cache_reopen.py [--dir DIR]          # the whole demonstration
    python examples/cache_reopen.py open --dir DIR       # one open, as an application would
    tensoracle cache list --dir DIR/cache                # the same listing from the shell
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

import tensoracle
import tensoracle.trt as trt
from tensoracle import BuilderSettings, EngineBuild, EngineIO, InputShape, TensorSpec, open_engine

GRAPH_VERSION = "1"  # raise it whenever graph() below changes


def write_weights(path: pathlib.Path) -> None:
    rng = np.random.default_rng(7)
    tensoracle.safetensors.save_file(
        {"matrix": rng.uniform(-0.25, 0.25, (32, 16)).astype(np.float32),
         "bias": rng.uniform(-0.1, 0.1, (1, 16)).astype(np.float32)},
        str(path),
    )


def graph(weights_path: pathlib.Path):
    def define(network):
        print("  graph function called: building", flush=True)
        weights = tensoracle.safetensors.load_file(str(weights_path))
        x = network.add_input("features", trt.float32, (-1, 32))
        w = network.add_constant((32, 16), weights["matrix"]).get_output(0)
        b = network.add_constant((1, 16), weights["bias"]).get_output(0)
        y = network.add_matrix_multiply(x, trt.MatrixOperation.NONE, w, trt.MatrixOperation.NONE).get_output(0)
        y = network.add_elementwise(y, b, trt.ElementWiseOperation.SUM).get_output(0)
        y = network.add_activation(y, trt.ActivationType.GELU_ERF).get_output(0)
        y.name = "result"
        network.mark_output(y)

    return define


def open_linear(folder: pathlib.Path):
    weights = folder / "linear.safetensors"
    declaration = EngineBuild(
        {"features": InputShape.ranged((1, 32), (16, 32), (64, 32))},
        BuilderSettings(optimization_level=0),
    )
    io = EngineIO(
        {"features": TensorSpec(trt.float32, (-1, 32))},
        {"result": TensorSpec(trt.float32, (-1, 16))},
    )
    return open_engine(
        graph(weights),
        declaration,
        name="linear",
        graph_version=GRAPH_VERSION,
        weights=(weights,),
        io=io,
        cache_dir=folder / "cache",  # omit for $XDG_CACHE_HOME/tensoracle or ~/.cache/tensoracle
    )


def open_once(folder: pathlib.Path) -> None:
    start = time.perf_counter()
    handle = open_linear(folder)
    elapsed = time.perf_counter() - start
    features = np.linspace(-1, 1, 8 * 32, dtype=np.float32).reshape(8, 32)
    result = handle.create_execution().run({"features": features})["result"]
    print(f"  {'built' if handle.built else 'reopened'} {handle.path.name} in {elapsed * 1e3:.1f} ms; "
          f"result[0, :3] = {np.round(result[0, :3], 5).tolist()}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step", nargs="?", choices=["open"], help="one open_engine call (default: the demonstration)")
    ap.add_argument("--dir", type=pathlib.Path, help="work folder (default: a new temporary folder)")
    a = ap.parse_args()
    folder = a.dir or pathlib.Path(tempfile.mkdtemp(prefix="tensoracle-cache-example-"))
    folder.mkdir(parents=True, exist_ok=True)
    if a.step == "open":
        open_once(folder)
        return 0

    write_weights(folder / "linear.safetensors")
    for run in range(1, 4):
        print(f"process {run}:", flush=True)
        subprocess.run([sys.executable, __file__, "open", "--dir", str(folder)], check=True)
    print("cache folder:")
    for entry in tensoracle.cache.list(folder / "cache"):
        print(f"  {entry.name} (graph_version {entry.graph_version}) {entry.identity[:12]} on {entry.device}, "
              f"{entry.size} bytes, last used {entry.last_used:%Y-%m-%d %H:%M:%S} UTC")
    return 0


if __name__ == "__main__":
    sys.exit(main())
