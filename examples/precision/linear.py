"""The reference's "Build bf16, int8, and fp8 engines" example, run by tensoracle on the CPU.

A linear layer ``features @ matrix + bias`` is built four times from one graph function — fp32,
bf16 (casts), int8 and fp8 (quantize/dequantize with scales read from safetensors) — and
saved with open_engine under a name per precision. A second process reopens the four engines
from the cache (the graph function is not called there), runs them on the same inputs and
gates each lower precision against the fp32 engine with compare_outputs, using the limits of
the reference's test: no NaN or inf, every element within ``atol`` (``rtol=0``) and a relative
L2 error below the limit. It prints the error table and exits 1 if any precision fails.

The graph function is the reference's, unchanged but for its import (``import
tensoracle.trt as trt`` instead of ``import tensorrt as trt``); so are the fixture's inputs,
weights and max-abs scales. examples/precision/linear.cpp is the same program in C++.

    python examples/precision/linear.py [--dir DIR]     # build, then reuse in a new process
    python examples/precision/linear.py build --dir DIR
    python examples/precision/linear.py reuse --dir DIR
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
from safetensors.numpy import load_file, save_file

import tensoracle.trt as trt
from tensoracle import (
    BuilderSettings,
    EngineBuild,
    EngineIO,
    InputShape,
    TensorSpec,
    compare_outputs,
    open_engine,
)

PRECISIONS = ("fp32", "bf16", "int8", "fp8")
# The reference's test limits: atol (with rtol=0) and relative L2, about twice its errors.
LIMITS = {"bf16": (0.01, 0.01), "int8": (0.02, 0.02), "fp8": (0.12, 0.08)}

DECLARATION = EngineBuild({"features": InputShape.fixed((16, 32))}, BuilderSettings(optimization_level=0))
IO = EngineIO({"features": TensorSpec(trt.float32, (16, 32))}, {"result": TensorSpec(trt.float32, (16, 16))})


def features() -> np.ndarray:
    return np.random.default_rng(11).uniform(-1, 1, (16, 32)).astype(np.float32)


def write_weights(path: pathlib.Path) -> None:
    """fp32 weights and positive fp32 scales in one file (scales from max-abs: a fixture, not a
    calibration recipe)."""
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


def open_linear(folder: pathlib.Path, precision: str):
    """The engine of one precision: built and saved on the first call, reopened afterwards.
    One weight file serves all four graphs, so the name tells the precisions apart."""
    weights = folder / "linear.safetensors"
    return open_engine(
        graph(str(weights), precision),
        DECLARATION,
        name=f"linear-{precision}",
        graph_version="1",
        weights=(str(weights),),
        io=IO,
        cache_dir=str(folder / "cache"),
    )


def gate(candidate: np.ndarray, reference: np.ndarray, precision: str):
    """compare_outputs with the reference's limits: (the comparison, accepted or not)."""
    atol, l2_limit = LIMITS[precision]
    comparison = compare_outputs(candidate, reference, atol=atol, rtol=0)
    accepted = (
        comparison.candidate_nonfinite_count == 0
        and comparison.reference_nonfinite_count == 0
        and comparison.outside_tolerance_count == 0
        and comparison.relative_l2_error is not None
        and comparison.relative_l2_error < l2_limit
    )
    return comparison, accepted


def table_lines(outputs: dict[str, np.ndarray]) -> tuple[list[str], bool]:
    """The error table of each lower precision against fp32 (the C++ example prints the same)."""
    lines = [f"{'candidate':9}  {'max abs error':>13}  {'relative L2':>11}  {'cosine':>8}  {'outside':>7}  "
             f"{'atol':>5}  {'L2 limit':>8}  result"]
    all_accepted = True
    for precision in ("bf16", "int8", "fp8"):
        c, accepted = gate(outputs[precision], outputs["fp32"], precision)
        all_accepted &= accepted
        atol, l2_limit = LIMITS[precision]
        lines.append(
            f"{precision:9}  {c.max_absolute_error:13.3g}  {c.relative_l2_error:11.3g}  {c.cosine_similarity:8.6f}  "
            f"{c.outside_tolerance_count:7d}  {atol:5g}  {l2_limit:8g}  {'accepted' if accepted else 'REJECTED'}"
        )
    return lines, all_accepted


def build(folder: pathlib.Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    write_weights(folder / "linear.safetensors")
    for precision in PRECISIONS:
        handle = open_linear(folder, precision)
        nodes = ", ".join(layer.type + (f"+{len(layer.fused)} fused" if layer.fused else "")
                          for layer in handle.engine.layers())
        print(f"{'built' if handle.built else 'found'} {precision:4} engine {handle.path.name}: {nodes}")


def reuse(folder: pathlib.Path) -> int:
    outputs = {}
    reopened = 0
    for precision in PRECISIONS:
        handle = open_linear(folder, precision)
        reopened += not handle.built
        outputs[precision] = handle.create_execution().run({"features": features()})["result"]
    print(f"reopened {reopened} of {len(PRECISIONS)} engines from the cache (graph function not called)")
    print()
    lines, accepted = table_lines(outputs)
    print("\n".join(lines))
    print()
    print("all lower precisions accepted" if accepted else "some lower precision is outside the limits")
    return 0 if accepted else 1


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", nargs="?", choices=("all", "build", "reuse"), default="all")
    parser.add_argument("--dir", type=pathlib.Path, default=None, help="folder for the weights and the cache")
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
