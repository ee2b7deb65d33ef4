"""Engines end to end from Python: the reference's precision example, engine files across
processes, damaged files, TensorRT-compatible names, and `tensoracle inspect` on engines."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import tensoracle
import tensoracle.trt as trt

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "precision"
sys.path.insert(0, str(EXAMPLES))
import linear  # noqa: E402  (examples/precision/linear.py: the example is the test's fixture)


def build(folder: pathlib.Path) -> None:
    """The example's weights and four engines, as engine files (this module tests files)."""
    linear.write_weights(folder / "linear.safetensors")
    for precision in linear.PRECISIONS:
        graph = linear.graph(str(folder / "linear.safetensors"), precision)
        (folder / f"linear-{precision}.engine").write_bytes(tensoracle.build_serialized_engine(graph, linear.DECLARATION))


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    folder = tmp_path_factory.mktemp("linear")
    build(folder)
    return folder


def run(engine_path: pathlib.Path) -> np.ndarray:
    engine = tensoracle.load_engine(str(engine_path))
    return engine.create_execution().run({"features": linear.features()})["result"]


def test_fp32_engine_matches_numpy(engines):
    weights = linear.load_file(str(engines / "linear.safetensors"))
    expected = linear.features() @ weights["matrix"] + weights["bias"]
    np.testing.assert_allclose(run(engines / "linear-fp32.engine"), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("precision", ["bf16", "int8", "fp8"])
def test_lower_precision_within_the_reference_limits(engines, precision):
    reference = run(engines / "linear-fp32.engine")
    candidate = run(engines / f"linear-{precision}.engine")
    comparison, accepted = linear.gate(candidate, reference, precision)
    max_abs, rel_l2 = comparison.max_absolute_error, comparison.relative_l2_error
    atol, l2 = linear.LIMITS[precision]
    assert accepted, (precision, comparison)
    assert np.all(np.isfinite(candidate))
    assert max_abs <= atol and rel_l2 < l2, (precision, max_abs, rel_l2)
    # A lower precision must differ from fp32: the engine really computed in it.
    assert max_abs > 1e-4


def test_int8_matches_an_exact_quantized_reference(engines):
    weights = linear.load_file(str(engines / "linear.safetensors"))
    x, w, b = linear.features(), weights["matrix"], weights["bias"]
    sx, sw = weights["int8.input_scale"][0], weights["int8.weight_scale"][0]
    qx = np.clip(np.rint(x / sx), -128, 127)  # np.rint rounds half to even
    qw = np.clip(np.rint(w / sw), -128, 127)
    expected = (qx * sx) @ (qw * sw) + b
    np.testing.assert_allclose(run(engines / "linear-int8.engine"), expected, rtol=1e-5, atol=1e-5)


def test_reopened_in_another_process_gives_identical_outputs(engines, tmp_path):
    here = {p: run(engines / f"linear-{p}.engine") for p in linear.PRECISIONS}
    script = (
        "import sys, numpy as np, tensoracle\n"
        "sys.path.insert(0, sys.argv[1]); import linear\n"
        "for p in linear.PRECISIONS:\n"
        "    e = tensoracle.load_engine(sys.argv[2] + f'/linear-{p}.engine')\n"
        "    np.save(sys.argv[3] + f'/{p}.npy', e.create_execution().run({'features': linear.features()})['result'])\n"
    )
    subprocess.run([sys.executable, "-c", script, str(EXAMPLES), str(engines), str(tmp_path)], check=True)
    for p in linear.PRECISIONS:
        assert np.array_equal(np.load(tmp_path / f"{p}.npy"), here[p]), p


def test_bytes_file_and_trt_runtime_open_the_same_engine(engines):
    data = (engines / "linear-int8.engine").read_bytes()
    a = tensoracle.deserialize_engine(data)
    b = trt.Runtime(trt.Logger()).deserialize_cuda_engine(data)
    c = tensoracle.load_engine(str(engines / "linear-int8.engine"))
    d = tensoracle.load_engine(engines / "linear-int8.engine")  # any path-like, as open() takes
    assert a.plan_json() == b.plan_json() == c.plan_json() == d.plan_json()
    assert [t.name for t in a.io_tensors] == ["features", "result"]
    assert a.num_io_tensors == 2 and a.get_tensor_name(1) == "result"
    assert a.io_tensor("result").shape == (16, 16)


def test_damaged_and_truncated_files_are_corrupt(engines, tmp_path):
    data = bytearray((engines / "linear-fp32.engine").read_bytes())
    rng = np.random.default_rng(5)
    for position in sorted(set(rng.integers(0, len(data), 64).tolist()) | {0, 8, len(data) - 1}):
        damaged = bytearray(data)
        damaged[position] ^= 0x40
        with pytest.raises(tensoracle.CorruptEngineError):
            tensoracle.deserialize_engine(bytes(damaged))
    path = tmp_path / "truncated.engine"
    path.write_bytes(bytes(data[: len(data) // 2]))
    with pytest.raises(tensoracle.CorruptEngineError, match="truncated.engine"):
        tensoracle.load_engine(str(path))
    assert issubclass(tensoracle.CorruptEngineError, RuntimeError)


def test_builder_errors_map_to_python_classes():
    def graph(network):
        x = network.add_input("x", trt.float32, (2, 2))
        network.mark_output(network.add_identity(x).get_output(0))

    with pytest.raises(ValueError, match="tf32"):
        tensoracle.BuilderSettings(tf32=True)
    with pytest.raises(ValueError, match="optimization_level 9"):
        tensoracle.BuilderSettings(optimization_level=9)
    decl = tensoracle.EngineBuild({"y": tensoracle.InputShape.fixed((2, 2))})
    with pytest.raises(tensoracle.InvalidArgument, match="names input 'y'"):
        tensoracle.build_serialized_engine(graph, decl)
    decl = tensoracle.EngineBuild({"x": tensoracle.InputShape.fixed((2, 2))}, tensoracle.BuilderSettings(device="cuda:99"))
    with pytest.raises(tensoracle.BuildError):
        tensoracle.build_serialized_engine(graph, decl)
    assert issubclass(tensoracle.BuildError, RuntimeError)

    def failing(network):
        raise KeyError("weights missing")

    with pytest.raises(KeyError, match="weights missing"):
        tensoracle.build_serialized_engine(failing, tensoracle.EngineBuild({}))


def test_cli_version_names_the_format_and_the_backends(cli):
    text = subprocess.run([cli, "--version"], capture_output=True, text=True, check=True).stdout
    lines = text.splitlines()
    assert lines[0] == f"tensoracle {tensoracle.__version__}"
    assert lines[1].startswith("engine format 2, build ")
    assert lines[2].startswith("cpu backend: OpenBLAS ")
    assert lines[3].startswith("cuda backend: "), text  # the device, or why there is none


def test_cli_inspects_engines(engines, cli):
    path = engines / "linear-int8.engine"
    text = subprocess.run([cli, "inspect", str(path)], capture_output=True, text=True, check=True).stdout
    assert "tensoracle engine, version 2" in text
    assert "features" in text and "result" in text
    assert "tactic" in text and "fused:" in text
    assert "memory:" in text
    info = json.loads(subprocess.run([cli, "inspect", "--json", str(path)], capture_output=True, text=True, check=True).stdout)
    assert info["format_version"] == 2
    assert info["target"]["backend"] == "cpu"
    plan = info["plan"]
    assert [io["name"] for io in plan["io"]] == ["features", "result"]
    assert plan["memory"]["arena_bytes"] <= plan["memory"]["naive_bytes"]
    assert any(node["epilogue"] for node in plan["nodes"])
    # Tactics are objects naming their kernel; values carry their layout.
    assert all(node["tactic"]["kernel"].startswith("cpu.") for node in plan["nodes"])
    assert {value["layout"] for value in plan["values"]} == {"linear"}
    damaged = engines / "damaged.engine"
    damaged.write_bytes(path.read_bytes()[:-3])
    result = subprocess.run([cli, "inspect", str(damaged)], capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.startswith("error: ")


@pytest.mark.parametrize(
    "user, expected",
    [
        ({}, {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "2000"}),
        ({"OMP_WAIT_POLICY": "ACTIVE"}, {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": None}),
        ({"OMP_WAIT_POLICY": "passive"}, {"OMP_WAIT_POLICY": "passive", "GOMP_SPINCOUNT": None}),
        ({"GOMP_SPINCOUNT": "0"}, {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "0"}),
    ],
)
def test_import_bounds_the_openmp_spin_unless_the_user_chose_a_policy(user, expected):
    """Importing tensoracle (before libgomp loads) makes waiting CPU threads spin briefly, then
    sleep; a wait policy the user set is kept, and no spin count is added to override it."""
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(user)
    script = "import json, os, tensoracle; print(json.dumps({k: os.environ.get(k) for k in ('OMP_WAIT_POLICY', 'GOMP_SPINCOUNT')}))"
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == expected
