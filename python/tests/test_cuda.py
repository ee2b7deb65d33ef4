"""The CUDA backend from Python (marker gpu): device tensors bound through DLPack (PyTorch's CUDA
tensors), streams given as objects or ints, CUDA-graph replay, the checks on what is bound, and
run() on NumPy arrays. The per-layer conformance suite (test_layers.py and the others) runs on
CUDA through their `device` fixture."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import tensoracle
import tensoracle.trt as trt

pytestmark = pytest.mark.gpu


def linear_engine(device: str, rows=(1, 16, 64)):
    rng = np.random.default_rng(5)
    w = rng.standard_normal((32, 24)).astype(np.float32) * 0.2
    b = rng.standard_normal((1, 24)).astype(np.float32)

    def graph(net):
        x = net.add_input("x", trt.float32, (-1, 32))
        y = net.add_matrix_multiply(x, trt.MatrixOperation.NONE, net.add_constant(w.shape, w).get_output(0),
                                    trt.MatrixOperation.NONE).get_output(0)
        y = net.add_elementwise(y, net.add_constant(b.shape, b).get_output(0), trt.ElementWiseOperation.SUM).get_output(0)
        y = net.add_activation(y, trt.ActivationType.RELU).get_output(0)
        y.name = "y"
        net.mark_output(y)

    decl = tensoracle.EngineBuild({"x": tensoracle.InputShape.ranged((rows[0], 32), (rows[1], 32), (rows[2], 32))},
                                  tensoracle.BuilderSettings(device=device))
    engine = tensoracle.deserialize_engine(tensoracle.build_serialized_engine(graph, decl))
    return engine, lambda x: np.maximum(x.astype(np.float64) @ w + b, 0)


def test_run_with_numpy_matches_float64():
    engine, ref = linear_engine("cuda:0")
    assert engine.device == "cuda:0"
    assert json.loads(engine.target_json())["backend"] == "cuda"
    ex = engine.create_execution()
    for n in (1, 9, 64):
        x = np.random.default_rng(n).standard_normal((n, 32)).astype(np.float32)
        y = ex.run({"x": x})["y"]
        np.testing.assert_allclose(y, ref(x), atol=1e-5, rtol=0)


def test_auto_device_is_the_gpu_here():
    engine, ref = linear_engine("auto")
    assert engine.device == "cuda:0"
    x = np.random.default_rng(3).standard_normal((16, 32)).astype(np.float32)
    np.testing.assert_allclose(engine.create_execution().run({"x": x})["y"], ref(x), atol=1e-5, rtol=0)


def test_quantized_products_show_their_precision_and_tactic():
    rng = np.random.default_rng(8)
    w = rng.uniform(-0.25, 0.25, (64, 48)).astype(np.float32)
    for qtype, name, top in ((trt.int8, "int8", 127), (trt.fp8, "fp8", 448)):
        def graph(net):
            def qdq(t, scale):
                s = net.add_constant((1,), np.array([scale], np.float32)).get_output(0)
                return net.add_dequantize(net.add_quantize(t, s, qtype).get_output(0), s, trt.float32).get_output(0)
            x = qdq(net.add_input("x", trt.float32, (16, 64)), 1 / top)
            y = net.add_matrix_multiply(x, trt.MatrixOperation.NONE, qdq(net.add_constant(w.shape, w).get_output(0), 0.25 / top),
                                        trt.MatrixOperation.NONE).get_output(0)
            y.name = "y"
            net.mark_output(y)

        results = []
        for device in ("cpu", "cuda:0"):
            decl = tensoracle.EngineBuild({"x": tensoracle.InputShape.fixed((16, 64))}, tensoracle.BuilderSettings(device=device))
            engine = tensoracle.deserialize_engine(tensoracle.build_serialized_engine(graph, decl))
            product = engine.layers()[-1]
            assert (product.type, product.precision) == ("matrix_multiply", name)
            if device != "cpu":
                assert product.tactic.startswith(f"cuda.gemm.cublaslt {name}")
            x = np.random.default_rng(9).uniform(-1, 1, (16, 64)).astype(np.float32)
            results.append(engine.create_execution().run({"x": x})["y"])
        np.testing.assert_allclose(results[1], results[0], atol=2e-3 if name == "fp8" else 2e-5, rtol=0)


@pytest.mark.parametrize("k", [64, 0])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_an_int8_products_bias_is_added_by_its_scale_pass(dtype, k):
    """Q/DQ int8 x @ W^T + b, then GELU: on the GPU the bias is fused into the int8 GEMM's scale
    pass (tactic "cuda.gemm.cublaslt int8 epilogue:1": one epilogue op in the GEMM's own passes), the GELU stays a
    pass of its own, and the result matches the CPU's unfused arithmetic; with K = 0 the sums are
    zeros and the output is GELU(b)."""
    rng = np.random.default_rng(21)
    np_t, trt_t = (np.float32, trt.float32) if dtype == "float32" else (np.float16, trt.float16)
    w = rng.uniform(-0.25, 0.25, (48, k)).astype(np_t)
    b = rng.uniform(-1, 1, (1, 48)).astype(np_t)

    def graph(net):
        def qdq(t, scale):
            s = net.add_constant((1,), np.array([scale], np.float32)).get_output(0)
            return net.add_dequantize(net.add_quantize(t, s, trt.int8).get_output(0), s, trt_t).get_output(0)
        x = qdq(net.add_input("x", trt_t, (16, k)), 1 / 127)
        y = net.add_matrix_multiply(x, trt.MatrixOperation.NONE, qdq(net.add_constant(w.shape, w).get_output(0), 0.25 / 127),
                                    trt.MatrixOperation.TRANSPOSE).get_output(0)
        y = net.add_elementwise(y, net.add_constant(b.shape, b).get_output(0), trt.ElementWiseOperation.SUM).get_output(0)
        y = net.add_activation(y, trt.ActivationType.GELU_ERF).get_output(0)
        y.name = "y"
        net.mark_output(y)

    x = rng.uniform(-1, 1, (16, k)).astype(np_t)
    results = {}
    for device in ("cpu", "cuda:0"):
        decl = tensoracle.EngineBuild({"x": tensoracle.InputShape.fixed((16, k))}, tensoracle.BuilderSettings(device=device))
        engine = tensoracle.deserialize_engine(tensoracle.build_serialized_engine(graph, decl))
        product = [layer for layer in engine.layers() if layer.type == "matrix_multiply"][0]
        assert product.precision == "int8"
        if device != "cpu":
            assert product.tactic.startswith("cuda.gemm.cublaslt int8 epilogue:1"), product.tactic
        results[device] = engine.create_execution().run({"x": x})["y"].astype(np.float32)
    atol, rtol = (2e-5, 0) if dtype == "float32" else (4e-3, 2e-3)  # float16: an ulp or two
    np.testing.assert_allclose(results["cuda:0"], results["cpu"], atol=atol, rtol=rtol)
    if k == 0:
        bias = np.broadcast_to(b.astype(np.float64), (16, 48))
        gelu = 0.5 * bias * (1 + np.vectorize(math.erf)(bias / math.sqrt(2)))
        np.testing.assert_allclose(results["cuda:0"], gelu, atol=atol, rtol=rtol)


CONV_PROBE = """
import json, sys
import numpy as np
import tensoracle, tensoracle.trt as trt
rng = np.random.default_rng(4)
w = rng.uniform(-0.3, 0.3, (16, 8, 3, 3)).astype(np.float32)
b = rng.uniform(-0.5, 0.5, 16).astype(np.float32)
x = rng.uniform(-1, 1, (2, 8, 12, 12)).astype(np.float32)
def graph(net):
    t = net.add_input("x", trt.float32, x.shape)
    layer = net.add_convolution_nd(t, 16, (3, 3), w, b)
    layer.padding_nd = (1, 1)
    y = layer.get_output(0)
    y.name = "y"
    net.mark_output(y)
out = {}
for device in ("cpu", "cuda:0"):
    decl = tensoracle.EngineBuild({"x": tensoracle.InputShape.fixed(x.shape)},
                                  tensoracle.BuilderSettings(device=device, optimization_level=int(sys.argv[1])))
    e = tensoracle.deserialize_engine(tensoracle.build_serialized_engine(graph, decl))
    out[device] = (e.create_execution().run({"x": x})["y"], e.layers()[0].tactic, json.loads(e.target_json()))
err = float(np.abs(out["cuda:0"][0] - out["cpu"][0]).max())
print(json.dumps({"tactic": out["cuda:0"][1], "cudnn": out["cuda:0"][2].get("cudnn"), "err": err}))
"""


@pytest.mark.parametrize("level", [0, 3])
def test_convolutions_run_through_cudnn_unless_told_not_to(level):
    """Where cuDNN opens, a convolution's tactic names its configuration (level 0: cuDNN's first
    choice; level 3: the timed winner, which may be our own path) and the engine target its
    version; TENSORACLE_CUDNN=0 keeps it closed. Both agree with the CPU backend."""
    import os
    import subprocess
    import sys

    def probe(**env):
        done = subprocess.run([sys.executable, "-c", CONV_PROBE, str(level)], capture_output=True, text=True,
                              timeout=300, env={**os.environ, **env})
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    with_dnn, without = probe(), probe(TENSORACLE_CUDNN="0")
    if with_dnn["cudnn"] == 0:
        pytest.skip("cuDNN does not open on this machine")
    assert with_dnn["cudnn"] >= 90000
    if level == 0:
        assert with_dnn["tactic"].startswith("cuda.convolution.cudnn float32 x:2x8x12x12 w:16x8x3x3 "), with_dnn
    assert without == {"tactic": "cuda.convolution", "cudnn": 0, "err": without["err"]}
    assert with_dnn["err"] < 2e-5 and without["err"] < 2e-5, (with_dnn, without)


def test_torch_cuda_tensors_streams_and_graph_replay():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("this torch has no CUDA")
    engine, ref = linear_engine("cuda:0")
    ex = engine.create_execution()
    assert ex.graph_replay is True
    x = torch.randn(16, 32, device="cuda")
    y = torch.empty(16, 24, device="cuda")
    ex.set_tensor_address("x", x)  # sets the input shape from the tensor
    ex.set_tensor_address("y", y)
    stream = torch.cuda.Stream()
    for i in range(4):  # eager, captured, replayed, replayed: each sees the new values
        with torch.cuda.stream(stream):
            x.copy_(torch.randn(16, 32, device="cuda"))
            ex.enqueue(stream)
        stream.synchronize()
        np.testing.assert_allclose(y.cpu().numpy(), ref(x.cpu().numpy()), atol=1e-5, rtol=0, err_msg=f"round {i}")
    ex.graph_replay = False
    ex.execute_async_v3(stream.cuda_stream)
    stream.synchronize()
    np.testing.assert_allclose(y.cpu().numpy(), ref(x.cpu().numpy()), atol=1e-5, rtol=0)


def test_bound_tensors_are_checked():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("this torch has no CUDA")
    engine, _ = linear_engine("cuda:0")
    ex = engine.create_execution()
    with pytest.raises(tensoracle.InvalidArgument, match="dtype is float16"):
        ex.set_tensor_address("x", torch.zeros(4, 32, device="cuda", dtype=torch.float16))
    with pytest.raises(tensoracle.InvalidArgument, match="host memory"):
        ex.set_tensor_address("x", torch.zeros(4, 32))
    with pytest.raises(tensoracle.InvalidArgument, match="C-contiguous"):
        ex.set_tensor_address("x", torch.zeros(32, 4, device="cuda").t())
    ex.set_tensor_address("x", torch.zeros(4, 32, device="cuda"))
    with pytest.raises(tensoracle.InvalidArgument, match=r"not the output's shape \(4, 24\)"):
        ex.set_tensor_address("y", torch.zeros(5, 24, device="cuda"))
    with pytest.raises(tensoracle.InvalidArgument, match="stream"):
        ex.enqueue("not a stream")


def test_unknown_device_is_a_build_error():
    with pytest.raises(tensoracle.BuildError, match="no CUDA device 99"):
        linear_engine("cuda:99")


def test_the_cuda_example_runs():
    import pathlib
    import subprocess
    import sys

    example = pathlib.Path(__file__).resolve().parents[2] / "examples" / "cuda_torch.py"
    done = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith("ok")


def test_cli_bench_per_layer_times_each_node_on_the_device(cli, tmp_path):
    """--per-layer on CUDA: one time per layer, from events between the nodes' launches. The
    large product dominates; the small pointwise nodes after it are not inflated by a wait per
    node (with host waits each took tens of microseconds)."""
    import subprocess

    rng = np.random.default_rng(3)
    w = rng.standard_normal((2048, 2048)).astype(np.float32)

    def graph(net):
        x = net.add_input("x", trt.float32, (2048, 2048))
        t = net.add_matrix_multiply(x, trt.MatrixOperation.NONE, net.add_constant(w.shape, w).get_output(0),
                                    trt.MatrixOperation.NONE).get_output(0)
        t = net.add_softmax(t).get_output(0)
        t = net.add_shuffle(t)
        t.first_transpose = (1, 0)
        t = t.get_output(0)
        t.name = "y"
        net.mark_output(t)

    decl = tensoracle.EngineBuild({"x": tensoracle.InputShape.fixed((2048, 2048))},
                                  tensoracle.BuilderSettings(device="cuda:0", optimization_level=0))
    path = tmp_path / "chain.engine"
    path.write_bytes(tensoracle.build_serialized_engine(graph, decl))
    done = subprocess.run([cli, "bench", str(path), "--iterations", "10", "--per-layer", "--json"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    layers = report["layers"]
    assert [layer["type"] for layer in layers] == ["matrix_multiply", "softmax", "shuffle"]
    assert all(layer["median_ms"] > 0 for layer in layers)
    assert layers[0]["share"] > 0.5  # 2048^3 in float32 (no TF32) against two passes over 16 MiB
    assert sum(layer["median_ms"] for layer in layers) < 2 * report["latency_ms"]["median"] + 0.05


def test_cli_bench_runs_a_cuda_engine(cli, tmp_path):
    import subprocess

    engine, _ = linear_engine("cuda:0")
    path = tmp_path / "linear.engine"
    rows = (1, 16, 64)

    def graph(net):
        x = net.add_input("x", trt.float32, (-1, 32))
        y = net.add_activation(x, trt.ActivationType.RELU).get_output(0)
        y.name = "y"
        net.mark_output(y)

    decl = tensoracle.EngineBuild({"x": tensoracle.InputShape.ranged((rows[0], 32), (rows[1], 32), (rows[2], 32))},
                                  tensoracle.BuilderSettings(device="cuda:0"))
    path.write_bytes(tensoracle.build_serialized_engine(graph, decl))
    done = subprocess.run([cli, "bench", str(path), "--iterations", "20", "--per-layer", "--json"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["device"] == json.loads(engine.target_json())["device"]
    assert 0 < report["latency_ms"]["median"] < 100
    assert report["layers"][0]["tactic"] == "cuda.activation"
