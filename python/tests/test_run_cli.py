"""`tensoracle run`: one execution of an engine file on inputs from .npz / .safetensors / .npy
files or generated ones, outputs summarised, saved (.npz for NumPy, .safetensors for any dtype)
and compared with a second engine on the same inputs; and its errors (exit 2, a message naming
the file, tensor or option). Results are checked against NumPy's own computation."""

from __future__ import annotations

import json
import subprocess

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import tensoracle
import tensoracle.trt as trt
from layer_cases import constant

RNG = np.random.default_rng(7)
W = RNG.standard_normal((16, 8)).astype(np.float32)
B = RNG.standard_normal((1, 8)).astype(np.float32)


def build(path, dtype=np.float32):
    """x (batch 1..8, opt 4, 16) -> y = relu(x @ W + B); idx (int32, 2) -> picked = x[:, idx]."""
    trt_type = trt.float32 if dtype == np.float32 else trt.float16

    def graph(net):
        x = net.add_input("x", trt_type, (-1, 16))
        idx = net.add_input("idx", trt.int32, (2,))
        m = net.add_matrix_multiply(x, trt.MatrixOperation.NONE, constant(net, W.astype(dtype)), trt.MatrixOperation.NONE)
        s = net.add_elementwise(m.get_output(0), constant(net, B.astype(dtype)), trt.ElementWiseOperation.SUM)
        r = net.add_activation(s.get_output(0), trt.ActivationType.RELU)
        r.get_output(0).name = "y"
        net.mark_output(r.get_output(0))
        g = net.add_gather(x, idx, 1)
        g.get_output(0).name = "picked"
        net.mark_output(g.get_output(0))

    decl = tensoracle.EngineBuild(
        {"x": tensoracle.InputShape.ranged((1, 16), (4, 16), (8, 16)), "idx": tensoracle.InputShape.fixed((2,))},
        tensoracle.BuilderSettings(device="cpu"),
    )
    path.write_bytes(tensoracle.build_serialized_engine(graph, decl))
    return path


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    d = tmp_path_factory.mktemp("run")
    return build(d / "fp32.engine"), build(d / "fp16.engine", np.float16)


def run(cli, *args, check=True):
    p = subprocess.run([cli, "run", *map(str, args)], capture_output=True, text=True)
    if check:
        assert p.returncode == 0, p.stdout + p.stderr
    return p


def expected(x, idx):
    return np.maximum(x @ W + B, 0), x[:, idx]


def test_inputs_from_npz_outputs_to_npz(cli, engines, tmp_path):
    x = RNG.uniform(-1, 1, (3, 16)).astype(np.float32)
    idx = np.array([5, 0], dtype=np.int32)
    np.savez(tmp_path / "in.npz", x=x, idx=idx)
    p = run(cli, engines[0], "--inputs", tmp_path / "in.npz", "--save-outputs", tmp_path / "out.npz")
    assert f"input:   x float32 (3, 16) (from {tmp_path / 'in.npz'})" in p.stdout
    assert "output:  y float32 (3, 8): min " in p.stdout
    out = np.load(tmp_path / "out.npz")
    y, picked = expected(x, idx)
    np.testing.assert_allclose(out["y"], y, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(out["picked"], picked)
    assert sorted(out.files) == ["picked", "y"]


def test_named_npy_inputs_and_trtexec_spellings(cli, engines, tmp_path):
    x = RNG.uniform(-1, 1, (5, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "idx.npy", np.array([1, 2], dtype=np.int32))
    run(cli, engines[0], "--loadInputs", f"x={tmp_path / 'x.npy'}", "--load-inputs", f"idx={tmp_path / 'idx.npy'}",
        "--exportOutput", tmp_path / "out.safetensors")
    out = load_file(tmp_path / "out.safetensors")
    np.testing.assert_allclose(out["y"], expected(x, [1, 2])[0], rtol=1e-5, atol=1e-5)


def test_generated_inputs_are_saved_and_replay_to_the_same_outputs(cli, engines, tmp_path):
    first = json.loads(run(cli, engines[0], "--shape", "x=6x16", "--seed", 3, "--save-inputs", tmp_path / "in.npz",
                           "--save-outputs", tmp_path / "out1.npz", "--json").stdout)
    assert first["inputs"]["x"] == {"dtype": "float32", "shape": [6, 16], "source": "generated"}
    assert first["outputs"]["y"]["shape"] == [6, 8]
    saved = np.load(tmp_path / "in.npz")
    assert saved["x"].shape == (6, 16) and saved["x"].min() >= -1 and saved["x"].max() < 1
    np.testing.assert_array_equal(saved["idx"], [0, 0])  # integer inputs are zeros
    run(cli, engines[0], "--inputs", tmp_path / "in.npz", "--save-outputs", tmp_path / "out2.npz")
    a, b = np.load(tmp_path / "out1.npz"), np.load(tmp_path / "out2.npz")
    np.testing.assert_array_equal(a["y"], b["y"])
    np.testing.assert_allclose(a["y"], expected(saved["x"], [0, 0])[0], rtol=1e-5, atol=1e-5)
    # The saved outputs are what `tensoracle compare` reads.
    c = subprocess.run([cli, "compare", tmp_path / "out1.npz", tmp_path / "out2.npz", "--atol", "0", "--rtol", "0"],
                       capture_output=True, text=True)
    assert c.returncode == 0 and "passed" in c.stdout, c.stdout + c.stderr


def test_compare_with_a_second_engine(cli, engines, tmp_path):
    fp32, _ = engines
    other = build(tmp_path / "again.engine")
    p = run(cli, other, "--compare-with", fp32, "--atol", "0", "--rtol", "0")
    assert "passed: all 2 tensors within tolerance" in p.stdout, p.stdout
    report = json.loads(run(cli, other, "--compare-with", fp32, "--json").stdout.split("\n}\n")[1] + "\n}")
    assert {t["name"] for t in report["tensors"]} == {"y", "picked"}


def test_compare_with_an_engine_of_other_input_types_is_refused(cli, engines):
    fp32, fp16 = engines
    p = run(cli, fp16, "--compare-with", fp32, check=False)
    assert p.returncode == 2
    assert "is not an input of" in p.stderr and "same type" in p.stderr, p.stderr


def test_outside_tolerance_exits_1(cli, tmp_path):
    a = build(tmp_path / "a.engine")
    global W
    saved, W = W, W + 0.01
    try:
        b = build(tmp_path / "b.engine")
    finally:
        W = saved
    p = run(cli, b, "--compare-with", a, "--atol", "1e-4", "--rtol", "0", check=False)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "FAILED: 1 of 2 outside tolerance or not finite: 'y'" in p.stdout


def test_fp16_outputs_save_to_npz_and_bf16_needs_safetensors(cli, engines, tmp_path):
    _, fp16 = engines
    run(cli, fp16, "--save-outputs", tmp_path / "out.npz")
    assert np.load(tmp_path / "out.npz")["y"].dtype == np.float16
    x = RNG.uniform(-1, 1, (2, 16)).astype(ml_dtypes.bfloat16)
    save_file({"x": x, "idx": np.zeros(2, np.int32)}, tmp_path / "bf16.safetensors")
    p = run(cli, fp16, "--inputs", tmp_path / "bf16.safetensors", check=False)
    assert p.returncode == 2 and "'x' is bfloat16, but the engine's input is float16" in p.stderr, p.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--inputs", "nowhere.npz"], "no such file: nowhere.npz"),
        (["--inputs", "{text}"], "is a text file"),
        (["--inputs", "{npz_extra}"], "holds 'z', which is not an input of the engine (its inputs: 'x', 'idx')"),
        (["--inputs", "{npy}"], "the engine has 2 inputs ('x', 'idx'); write NAME="),
        (["--inputs", "{x64}"], "'x' is float64, but the engine's input is float32"),
        (["--inputs", "{npz}", "--shape", "x=7x16"], "gives that input the shape (3, 16)"),
        (["--inputs", "x={flat}"], "'x' has the shape (32,), of rank 1; the engine's input has rank 2 (its profile: (1, 16) to (8, 16))"),
        (["--shape", "x=9x16"], "input 'x': shape (9, 16) is outside the profile min (1, 16), max (8, 16)"),
        (["--shape", "y=2x8"], "'y' is an output, not an input"),
        (["--save-outputs", "{tmp}/out.txt"], "name the file .npz"),
        (["--atol", "0.1"], "--atol without --rtol"),
        (["--atol", "0.1", "--rtol", "0"], "apply to --compare-with"),
        (["--compare-with", "{text}"], "is a text file"),
    ],
)
def test_errors_name_what_is_wrong(cli, engines, tmp_path, args, message):
    (tmp_path / "notes.txt").write_text("hello\n")
    np.savez(tmp_path / "extra.npz", x=np.zeros((2, 16), np.float32), z=np.zeros(2, np.float32))
    np.savez(tmp_path / "ok.npz", x=np.zeros((3, 16), np.float32), idx=np.zeros(2, np.int32))
    np.save(tmp_path / "one.npy", np.zeros((2, 16), np.float32))
    np.savez(tmp_path / "x64.npz", x=np.zeros((2, 16), np.float64))
    np.save(tmp_path / "flat.npy", np.zeros(32, np.float32))
    files = {"text": tmp_path / "notes.txt", "npz_extra": tmp_path / "extra.npz", "npy": tmp_path / "one.npy",
             "x64": tmp_path / "x64.npz", "npz": tmp_path / "ok.npz", "tmp": tmp_path, "flat": tmp_path / "flat.npy"}
    p = run(cli, engines[0], *[a.format(**files) for a in args], check=False)
    assert p.returncode == 2, p.stdout + p.stderr
    assert message in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and not list(tmp_path.glob("*.tmp*"))


def test_a_one_input_engine_takes_an_unnamed_npy(cli, tmp_path):
    def graph(net):
        x = net.add_input("x", trt.float32, (2, 3))
        y = net.add_unary(x, trt.UnaryOperation.EXP).get_output(0)
        y.name = "y"
        net.mark_output(y)

    engine = tmp_path / "exp.engine"
    engine.write_bytes(tensoracle.build_serialized_engine(
        graph, tensoracle.EngineBuild({"x": tensoracle.InputShape.fixed((2, 3))}, tensoracle.BuilderSettings(device="cpu"))))
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 6
    np.save(tmp_path / "x.npy", x)
    run(cli, engine, "--inputs", tmp_path / "x.npy", "--save-outputs", tmp_path / "y.npz")
    np.testing.assert_allclose(np.load(tmp_path / "y.npz")["y"], np.exp(x), rtol=1e-6)


@pytest.mark.parametrize("command", ["run", "bench"])
def test_a_shape_that_clashes_with_the_defaults_names_them(cli, tmp_path, command):
    # Two inputs that must agree: giving one a shape leaves the other at its opt shape, and the
    # clash is reported with the inputs that kept their default and the flag that sets them all.
    def graph(net):
        x = net.add_input("x", trt.float32, (-1, 16))
        y = net.add_input("y", trt.float32, (-1, 16))
        z = net.add_elementwise(x, y, trt.ElementWiseOperation.SUM).get_output(0)
        z.name = "z"
        net.mark_output(z)

    ranged = tensoracle.InputShape.ranged((1, 16), (4, 16), (8, 16))
    engine = tmp_path / "two.engine"
    engine.write_bytes(tensoracle.build_serialized_engine(
        graph, tensoracle.EngineBuild({"x": ranged, "y": ranged}, tensoracle.BuilderSettings(device="cpu"))))
    extra = ["--iterations", "2"] if command == "bench" else []
    p = subprocess.run([cli, command, str(engine), "--shape", "x=2x16", *extra], capture_output=True, text=True)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "opt shape: y (4, 16); give every input's shape with " + command + " --shapes" in p.stderr, p.stderr
    p = subprocess.run([cli, command, str(engine), "--shapes", "x:2x16,y:2x16", *extra], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
