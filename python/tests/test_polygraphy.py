"""NVIDIA's Polygraphy, a TensorRT tool written in Python, on tensoracle (issue 34): with
TENSORACLE_AS_TENSORRT=1 its `import tensorrt` gets tensoracle.trt. `polygraphy convert` builds
an engine from a network script written with Polygraphy's network-API loader (CreateNetwork),
`polygraphy inspect model` reads our engine file, and on a GPU `polygraphy run --trt` runs it
with Polygraphy's own TrtRunner. docs/tensorrt.md records what works."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import tensoracle

pytest.importorskip("polygraphy")

NETWORK_SCRIPT = '''
import numpy as np
import tensorrt as trt
from polygraphy import func
from polygraphy.backend.trt import CreateNetwork


@func.extend(CreateNetwork())
def load_network(builder, network):
    x = network.add_input("x", trt.float32, (2, 3))
    w = network.add_constant((3, 4), np.arange(12, dtype=np.float32).reshape(3, 4)).get_output(0)
    y = network.add_matrix_multiply(x, trt.MatrixOperation.NONE, w, trt.MatrixOperation.NONE).get_output(0)
    y = network.add_activation(y, trt.ActivationType.RELU).get_output(0)
    y.name = "y"
    network.mark_output(y)
'''


def polygraphy(*args, cwd):
    code = "import sys; from polygraphy.tools import main; sys.argv[0] = 'polygraphy'; sys.exit(main())"
    env = {**os.environ, "TENSORACLE_AS_TENSORRT": "1"}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture
def engine_file(tmp_path):
    (tmp_path / "net.py").write_text(NETWORK_SCRIPT)
    r = polygraphy("convert", "net.py", "-o", "net.engine", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Finished engine building" in r.stdout + r.stderr
    return tmp_path / "net.engine"


def test_polygraphy_builds_an_engine_from_its_network_loader(engine_file):
    engine = tensoracle.load_engine(str(engine_file))
    x = np.random.default_rng(3).standard_normal((2, 3)).astype(np.float32)
    y = engine.create_execution().run({"x": x})["y"]
    np.testing.assert_allclose(y, np.maximum(x @ np.arange(12, dtype=np.float32).reshape(3, 4), 0), rtol=1e-6, atol=1e-6)


def test_polygraphy_inspects_our_engine(engine_file):
    r = polygraphy("inspect", "model", str(engine_file), cwd=engine_file.parent)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    for line in ("==== TensorRT Engine ====", "{x [dtype=float32, shape=(2, 3)]}", "{y [dtype=float32, shape=(2, 4)]}",
                 "Tensor: x          (Input), Index: 0 | Shapes: min=(2, 3), opt=(2, 3), max=(2, 3)"):
        assert line in out, (line, out)


@pytest.mark.gpu
def test_polygraphy_runs_our_engine_with_its_trt_runner(engine_file):
    engine = tensoracle.load_engine(str(engine_file))
    assert engine.device.startswith("cuda"), "a machine with a GPU builds for it (config.device 'auto')"
    r = polygraphy("run", str(engine_file), "--model-type", "engine", "--trt", "--save-outputs", "out.json",
                   cwd=engine_file.parent)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASSED" in r.stdout + r.stderr


def test_polygraphy_converts_an_onnx_model_with_fp16(tmp_path):
    from onnx import TensorProto, helper, numpy_helper, save

    w = numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), "w")
    save(helper.make_model(helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "linear",
                                             [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                                             [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w])),
         str(tmp_path / "linear.onnx"))
    r = polygraphy("convert", "linear.onnx", "--fp16", "-o", "linear.engine", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Flags                  | [FP16]" in r.stdout + r.stderr
    engine = tensoracle.load_engine(str(tmp_path / "linear.engine"))
    assert '"weak_precision":"float16"' in engine.plan_json().replace(" ", "")
    x = np.random.default_rng(4).standard_normal((2, 3)).astype(np.float32)
    y = engine.create_execution().run({"x": x})["y"]
    np.testing.assert_allclose(y, x @ np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), rtol=5e-3, atol=5e-3)
