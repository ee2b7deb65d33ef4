"""`tensoracle bench`: latency statistics, throughput, memory and the per-layer profile of an
engine file, in text and JSON, and its errors for bad arguments (exit 2, a message naming
what was wrong). Timing values are only checked for consistency, never against a speed."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

import tensoracle
import tensoracle.trt as trt
from layer_cases import constant


@pytest.fixture(scope="module")
def engine_file(tmp_path_factory):
    """x (batch 1..8, opt 4, 16) -> matmul + bias + relu -> softmax; and an int32 index input."""
    rng = np.random.default_rng(3)
    w, b = rng.standard_normal((16, 8)).astype(np.float32), rng.standard_normal((1, 8)).astype(np.float32)

    def graph(net):
        x = net.add_input("x", trt.float32, (-1, 16))
        idx = net.add_input("idx", trt.int32, (2,))
        m = net.add_matrix_multiply(x, trt.MatrixOperation.NONE, constant(net, w), trt.MatrixOperation.NONE)
        m.name = "fc"
        r = net.add_activation(net.add_elementwise(m.get_output(0), constant(net, b), trt.ElementWiseOperation.SUM).get_output(0),
                               trt.ActivationType.RELU)
        s = net.add_softmax(r.get_output(0))
        s.axes = 2
        s.name = "softmax"
        y = s.get_output(0)
        y.name = "y"
        net.mark_output(y)
        g = net.add_gather(x, idx, 1)  # zeros are valid indices
        g.name = "pick"
        g.get_output(0).name = "picked"
        net.mark_output(g.get_output(0))

    decl = tensoracle.EngineBuild(
        {"x": tensoracle.InputShape.ranged((1, 16), (4, 16), (8, 16)), "idx": tensoracle.InputShape.fixed((2,))},
        tensoracle.BuilderSettings(device="cpu"),
    )
    path = tmp_path_factory.mktemp("bench") / "small.engine"
    path.write_bytes(tensoracle.build_serialized_engine(graph, decl))
    return path


def bench(cli, *args, check=True):
    return subprocess.run([cli, "bench", *map(str, args)], capture_output=True, text=True, check=check)


def test_json_report(cli, engine_file):
    report = json.loads(bench(cli, engine_file, "--iterations", 7, "--warmup", 2, "--per-layer", "--json", "--threads", 1).stdout)
    assert report["inputs"] == {"x": [4, 16], "idx": [2]}  # the profile's opt
    assert report["iterations"] == 7 and report["threads"] == 1
    lat = report["latency_ms"]
    assert 0 < lat["min"] <= lat["median"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert lat["min"] <= lat["mean"] <= lat["max"]
    tp = report["throughput"]
    assert tp["batch"] == 4 and tp["items_per_s"] == pytest.approx(4 * tp["inferences_per_s"])
    engine = tensoracle.deserialize_engine(engine_file.read_bytes())
    assert report["memory_bytes"] == {
        "weights": engine.weight_bytes, "activations": engine.activation_bytes, "io": 4 * 16 * 4 + 2 * 4 + 4 * 8 * 4 + 4 * 2 * 4
    }
    names = [layer["name"] for layer in report["layers"]]
    assert names == [layer.name for layer in engine.layers()]
    assert all(layer["median_ms"] >= 0 for layer in report["layers"])
    assert sum(layer["share"] for layer in report["layers"]) == pytest.approx(1.0)
    fc = next(layer for layer in report["layers"] if layer["name"] == "fc")
    assert len(fc["fused"]) == 2


def test_shape_option_and_text_report(cli, engine_file):
    out = bench(cli, engine_file, "--iterations", 3, "--warmup", 0, "--shape", "x=8x16", "--per-layer").stdout
    assert "inputs:     x [8,16], idx [2]" in out
    assert "(batch 8)" in out
    for word in ("latency:", "median", "p90", "p99", "throughput:", "memory:", "per layer", "fc", "softmax"):
        assert word in out


def test_shapes_in_one_flag_as_trtexec_writes_them(cli, engine_file):
    report = json.loads(bench(cli, engine_file, "--iterations", 2, "--warmup", 0, "--shapes", "x:6x16,idx:2", "--json").stdout)
    assert report["inputs"] == {"x": [6, 16], "idx": [2]}
    report = json.loads(bench(cli, engine_file, "--iterations", 2, "--warmup", 0, "--shapes", "x=3x16", "--json").stdout)
    assert report["inputs"]["x"] == [3, 16]


def test_duration_and_warmup_ms_are_minimums(cli, engine_file):
    # At least 0.3 s of timed iterations and 100 ms of warm-up, however fast each one is; and at
    # least --iterations / --warmup of each.
    report = json.loads(bench(cli, engine_file, "--iterations", 2, "--warmup", 1, "--duration", 0.3, "--warmUp", 100,
                              "--json").stdout)
    lat = report["latency_ms"]
    assert report["iterations"] * lat["mean"] >= 0.3e3 * 0.5  # the loop's own overhead is outside the latencies
    assert report["iterations"] > 2 and report["warmup"] > 1
    assert report["throughput"]["inferences_per_s"] * 0.3 <= report["iterations"] * 1.0001
    report = json.loads(bench(cli, engine_file, "--iterations", 5, "--warmup", 3, "--json").stdout)
    assert report["iterations"] == 5 and report["warmup"] == 3


@pytest.mark.parametrize(
    "args,message",
    [
        (("--shapes", "x:2x16,x=3x16"), "the shape of 'x' is given twice"),
        (("--shapes", "x2x16"), "is not NAME:D1xD2x"),
        (("--duration", -1), "--duration in [0, 86400]"),
        (("--warmup-ms", "nan"), "--warmup-ms must be in"),
        (("--shape", "x=9x16"), "outside the profile"),
        (("--shape", "x=4xa"), "'a' is not a dimension"),
        (("--shape", "x"), "write NAME=D1xD2"),
        (("--shape", "nope=1"), "nope"),
        (("--shape", "y=4x8"), "is an output"),
        (("--iterations", 0), "--iterations must be >= 1"),
        (("--threads", -1), "--threads must be >= 0"),
    ],
)
def test_bad_arguments_exit_2(cli, engine_file, args, message):
    r = bench(cli, engine_file, *args, check=False)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: ") and message in r.stderr


def test_not_an_engine_exits_2(cli, tmp_path):
    bad = tmp_path / "bad.engine"
    bad.write_bytes(b"not an engine at all")
    r = bench(cli, bad, check=False)
    assert r.returncode == 2 and "error:" in r.stderr


def foreign_files(tmp_path):
    """Files that are not engines, and what the program must call them."""
    np.save(tmp_path / "a.npy", np.zeros(3, np.float32))
    np.savez(tmp_path / "b.npz", x=np.zeros(2, np.float32))
    (tmp_path / "notes.txt").write_text("weights: see model.pth\n")
    # A serialized ONNX ModelProto begins with ir_version (field 1), then the next field: here
    # graph (field 7), as onnx writes a model without producer fields. Named .bin: the bytes tell.
    (tmp_path / "model.bin").write_bytes(b"\x08\x0e\x3a\x33\x0a\x0c\x0a\x01x\x12\x01y\x22\x04Relu")
    (tmp_path / "folder").mkdir()
    return {
        "a.npy": "is a NumPy array (.npy)",
        "b.npz": "is a NumPy archive (.npz)",
        "notes.txt": "is a text file",
        "model.bin": "is an ONNX model",
        "folder": "is a directory",
        "missing.engine": "no such file",
    }


@pytest.mark.parametrize("command", ["bench", "inspect"])
def test_a_file_of_another_kind_is_named_for_what_it_is(cli, tmp_path, command):
    for name, said in foreign_files(tmp_path).items():
        r = subprocess.run([cli, command, str(tmp_path / name)], capture_output=True, text=True)
        assert r.returncode == 2, (name, r.stdout)
        assert said in r.stderr and name in r.stderr, (name, r.stderr)
        if said != "no such file":
            assert f"{command} reads" in r.stderr, r.stderr
