"""The reference's "Build bf16, int8, and fp8 engines" example, run by tensoracle on the CPU.

The graph function below is the reference's, unchanged but for its import: ``import
tensoracle.trt as trt`` instead of ``import tensorrt as trt``. The script

1. writes the fixture's weights and scales to safetensors (fp32 weights; scales from max-abs),
2. builds the linear layer ``features @ matrix + bias`` as fp32, bf16, int8 and fp8 engines and
   saves each engine file,
3. reopens the saved engines in a second process (``reuse``) — the graph function is not called
   there — runs them on the same inputs, and prints each lower precision's error against fp32
   next to the limits the reference's test uses.

    python examples/linear_precisions.py [--dir DIR]           # build, then reuse in a new process
    python examples/linear_precisions.py build --dir DIR
    python examples/linear_precisions.py reuse --dir DIR
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
from safetensors.numpy import load_file, save_file

import tensoracle
import tensoracle.trt as trt
from tensoracle import BuilderSettings, EngineBuild, InputShape, build_serialized_engine

PRECISIONS = ("fp32", "bf16", "int8", "fp8")
# The reference's test limits (atol with rtol=0, relative L2): twice the errors it observed.
LIMITS = {"bf16": (0.01, 0.01), "int8": (0.02, 0.02), "fp8": (0.12, 0.08)}


def features() -> np.ndarray:
    return np.random.default_rng(11).uniform(-1, 1, (16, 32)).astype(np.float32)


def write_weights(path: pathlib.Path) -> None:
    rng = np.random.default_rng(29)
    matrix = rng.uniform(-0.25, 0.25, (32, 16)).astype(np.float32)
    bias = rng.uniform(-0.1, 0.1, (1, 16)).astype(np.float32)
    weights = {"matrix": matrix, "bias": bias}
    for precision, maximum in (("int8", 127), ("fp8", 448)):
        weights[f"{precision}.input_scale"] = np.array([np.max(np.abs(features())) / maximum], dtype=np.float32)
        weights[f"{precision}.weight_scale"] = np.array([np.max(np.abs(matrix)) / maximum], dtype=np.float32)
    save_file(weights, str(path))


# --- the reference's graph function -------------------------------------------------------
def graph(path, precision):
    def define(network):
        weights = load_file(path)

        def constant(array):
            array = np.ascontiguousarray(array, dtype=np.float32)
            return network.add_constant(array.shape, array).get_output(0)

        features = network.add_input("features", trt.float32, (16, 32))
        matrix = constant(weights["matrix"])
        bias = constant(weights["bias"])
        if precision == "bf16":
            features = network.add_cast(features, trt.bfloat16).get_output(0)
            matrix = network.add_cast(matrix, trt.bfloat16).get_output(0)
            bias = network.add_cast(bias, trt.bfloat16).get_output(0)
        elif precision in ("int8", "fp8"):
            quantized_type = trt.int8 if precision == "int8" else trt.fp8

            def qdq(tensor, key):
                scale = constant(weights[f"{precision}.{key}_scale"])
                quantized = network.add_quantize(tensor, scale, quantized_type).get_output(0)
                return network.add_dequantize(quantized, scale, trt.float32).get_output(0)

            features = qdq(features, "input")
            matrix = qdq(matrix, "weight")
        value = network.add_matrix_multiply(
            features, trt.MatrixOperation.NONE, matrix, trt.MatrixOperation.NONE
        ).get_output(0)
        value = network.add_elementwise(value, bias, trt.ElementWiseOperation.SUM).get_output(0)
        if precision == "bf16":
            value = network.add_cast(value, trt.float32).get_output(0)
        value.name = "result"
        network.mark_output(value)

    return define
# -------------------------------------------------------------------------------------------


def build(folder: pathlib.Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    weights = folder / "linear.safetensors"
    write_weights(weights)
    declaration = EngineBuild({"features": InputShape.fixed((16, 32))}, BuilderSettings(optimization_level=0))
    for precision in PRECISIONS:
        data = build_serialized_engine(graph(str(weights), precision), declaration)
        (folder / f"linear-{precision}.engine").write_bytes(data)
        engine = tensoracle.deserialize_engine(data)
        nodes = ", ".join(layer.type + (f"+{len(layer.fused)} fused" if layer.fused else "") for layer in engine.layers())
        print(f"built {precision:5} engine: {len(data):6} bytes, nodes: {nodes}")


def errors(candidate: np.ndarray, reference: np.ndarray) -> tuple[float, float]:
    difference = candidate.astype(np.float64) - reference.astype(np.float64)
    return float(np.max(np.abs(difference))), float(np.linalg.norm(difference) / np.linalg.norm(reference))


def reuse(folder: pathlib.Path) -> int:
    outputs = {}
    for precision in PRECISIONS:
        engine = tensoracle.load_engine(str(folder / f"linear-{precision}.engine"))
        outputs[precision] = engine.create_execution().run({"features": features()})["result"]
    print(f"reopened {len(outputs)} engines in a new process (graph function not called)")
    print()
    print(f"{'candidate':9} {'max abs error':>14} {'relative L2':>12} {'atol limit':>11} {'L2 limit':>9}  result")
    failed = 0
    for precision in ("bf16", "int8", "fp8"):
        max_abs, rel_l2 = errors(outputs[precision], outputs["fp32"])
        atol, l2 = LIMITS[precision]
        ok = max_abs <= atol and rel_l2 < l2 and np.all(np.isfinite(outputs[precision]))
        failed += not ok
        print(f"{precision:9} {max_abs:14.5f} {rel_l2:12.5f} {atol:11} {l2:9}  {'within limits' if ok else 'OUTSIDE LIMITS'}")
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", nargs="?", choices=("all", "build", "reuse"), default="all")
    parser.add_argument("--dir", type=pathlib.Path, default=None, help="folder for weights and engines")
    args = parser.parse_args(argv)
    folder = args.dir or pathlib.Path(tempfile.mkdtemp(prefix="tensoracle-linear-"))
    if args.step == "build":
        build(folder)
        return 0
    if args.step == "reuse":
        return reuse(folder)
    build(folder)
    return subprocess.call([sys.executable, __file__, "reuse", "--dir", str(folder)])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
