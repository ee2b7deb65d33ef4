"""trt.OnnxParser: the API TensorRT programs use, dynamic axes and shape chains against
onnxruntime, external data and what hostile models get (errors, never a crash or a changed
network)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensoracle
from tensoracle import trt

n = helper.make_node


def vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "m", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def parse(m, path=None):
    net = tensoracle.Network()
    p = trt.OnnxParser(net, trt.Logger())
    data = m if isinstance(m, (bytes, bytearray, memoryview)) else m.SerializeToString()
    ok = p.parse(data, path)
    return ok, net, p


def run(net, feeds, ranges=None):
    shapes = {k: tensoracle.InputShape.ranged(*ranges[k]) if ranges and k in ranges else tensoracle.InputShape.fixed(v.shape)
              for k, v in feeds.items()}
    build = tensoracle.EngineBuild(shapes, tensoracle.BuilderSettings(device="cpu"))
    engine = tensoracle.deserialize_engine(tensoracle._native.build_serialized_network(net, build))
    return engine.create_execution().run(feeds)


def ort_run(m, feeds):
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def test_parser_api_as_tensorrt_programs_use_it():
    w = numpy_helper.from_array(np.ones((3, 2), np.float32), "w")
    m = model([n("MatMul", ["x", "w"], ["y"])], [vi("x", [4, 3])], [vi("y", [4, 2])], [w])
    ok, net, p = parse(bytearray(m.SerializeToString()))
    assert ok and p.num_errors == 0 and net.num_inputs == 1 and net.num_outputs == 1
    assert trt.OnnxParser.supports_operator("Conv") and p.supports_operator("MatMul")
    assert not trt.OnnxParser.supports_operator("NonZero")
    assert "Attention" in trt.OnnxParser.supported_operators() and trt.OnnxParser.max_opset() >= 21
    with pytest.raises(tensoracle.InvalidArgument, match="get_error"):
        p.get_error(0)
    assert int(trt.ErrorCode.UNSUPPORTED_NODE) == 8  # TensorRT's values
    ok, _, p = parse(memoryview(b"\x08\x07\x12"))  # bytes that are no model
    assert not ok and p.get_error(0).code() == trt.ErrorCode.MODEL_DESERIALIZE_FAILED
    p.clear_errors()
    assert p.num_errors == 0


def test_a_failed_parse_leaves_the_network_unchanged_and_names_the_node():
    m = model([n("Relu", ["x"], ["r"], name="first"), n("NonZero", ["r"], ["y"], name="second")],
              [vi("x", [3])], [vi("y", [1, None], TensorProto.INT64)])
    net = tensoracle.Network()
    net.add_input("mine", trt.float32, (2,))
    p = trt.OnnxParser(net)
    assert not p.parse(m.SerializeToString(), "model.onnx")
    assert net.num_layers == 0 and net.num_inputs == 1 and net.num_outputs == 0  # (inputs are not layers here)
    e = p.get_error(0)
    assert (e.node(), e.node_name(), e.node_operator(), e.opset(), e.file()) == (1, "second", "NonZero", 17, "model.onnx")
    assert "NonZero" in e.desc() and str(e).startswith("[onnx] model.onnx: node 1 'second' (NonZero, opset 17)")


@pytest.mark.parametrize("opset", [5, 29])
def test_opsets_outside_the_range_are_refused(opset):
    m = model([n("Relu", ["x"], ["y"])], [vi("x", [3])], [vi("y", [3])], opset=opset)
    ok, net, p = parse(m)
    assert not ok and "opset" in p.get_error(0).desc() and p.get_error(0).code() == trt.ErrorCode.UNSUPPORTED_GRAPH


def test_types_without_a_datatype_name_the_node_that_reads_them():
    m = model([n("Abs", ["x"], ["y"], name="a")], [vi("x", [3], TensorProto.DOUBLE)], [vi("y", [3], TensorProto.DOUBLE)])
    ok, _, p = parse(m)
    e = p.get_error(0)
    assert not ok and e.node_operator() == "Abs" and "double" in e.desc() and e.code() == trt.ErrorCode.UNSUPPORTED_NODE_DATATYPE


def test_dynamic_batch_and_a_shape_chain_match_onnxruntime():
    # Shape -> Gather -> Concat -> Reshape with a batch known only at run time: the chain runs as
    # shape tensors in the engine.
    idx = numpy_helper.from_array(np.array([0], np.int64), "idx")
    rest = numpy_helper.from_array(np.array([-1], np.int64), "rest")
    k = numpy_helper.from_array(np.random.default_rng(1).standard_normal((4, 3, 3, 3)).astype(np.float32), "k")
    m = model([
        n("Conv", ["x", "k"], ["c"], pads=[1, 1, 1, 1]),
        n("Shape", ["c"], ["s"]), n("Gather", ["s", "idx"], ["b"], axis=0), n("Concat", ["b", "rest"], ["shape"], axis=0),
        n("Reshape", ["c", "shape"], ["flat"]), n("Softmax", ["flat"], ["y"], axis=-1),
    ], [vi("x", ["batch", 3, 5, 5])], [vi("y", ["batch", 100])], [idx, rest, k])
    ok, net, p = parse(m)
    assert ok, str(p.get_error(0))
    assert tuple(net.get_input(0).shape) == (-1, 3, 5, 5)
    rng = np.random.default_rng(2)
    for batch in (1, 3):
        x = rng.standard_normal((batch, 3, 5, 5)).astype(np.float32)
        got = run(net, {"x": x}, {"x": ((1, 3, 5, 5), (2, 3, 5, 5), (4, 3, 5, 5))})["y"]
        np.testing.assert_allclose(got, ort_run(m, {"x": x})["y"], rtol=1e-5, atol=1e-6)


def test_a_view_whose_batch_is_read_from_the_layers_input_is_a_static_reshape():
    # What exporters write for view(batch, -1, heads, size): the batch read from the input of the
    # projection whose output is reshaped. The parser sees that the projection carries the batch
    # dim through, so the reshape is static ([0, -1, 2, 4]) and needs no shape tensor at run time.
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    idx = numpy_helper.from_array(np.array([0], np.int64), "idx")
    rest = numpy_helper.from_array(np.array([-1, 2, 4], np.int64), "rest")
    m = model([
        n("MatMul", ["x", "w"], ["xw"]), n("Add", ["xw", "b"], ["proj"]),
        n("Shape", ["x"], ["s"]), n("Gather", ["s", "idx"], ["batch"], axis=0),
        n("Concat", ["batch", "rest"], ["shape"], axis=0), n("Reshape", ["proj", "shape"], ["heads"]),
        n("Transpose", ["heads"], ["y"], perm=[0, 2, 1, 3]),
    ], [vi("x", ["batch", "seq", 8])], [vi("y", ["batch", 2, "seq", 4])], [w, b, idx, rest])
    ok, net, p = parse(m)
    assert ok, str(p.get_error(0))
    shuffles = [net.get_layer(i) for i in range(net.num_layers) if net.get_layer(i).type == trt.LayerType.SHUFFLE]
    assert shuffles and all(layer.num_inputs == 1 for layer in shuffles), [layer.name for layer in shuffles]
    for batch, seq in ((1, 3), (3, 5)):
        x = rng.standard_normal((batch, seq, 8)).astype(np.float32)
        got = run(net, {"x": x}, {"x": ((1, 1, 8), (2, 4, 8), (4, 8, 8))})["y"]
        np.testing.assert_allclose(got, ort_run(m, {"x": x})["y"], rtol=1e-5, atol=1e-5)


def test_broadcasting_slices_pads_and_reductions_match_onnxruntime():
    st = numpy_helper.from_array(np.array([1, 100], np.int64), "st")
    en = numpy_helper.from_array(np.array([-1, -100], np.int64), "en")
    steps = numpy_helper.from_array(np.array([1, -2], np.int64), "steps")
    axes = numpy_helper.from_array(np.array([0, 1], np.int64), "axes")
    pads = numpy_helper.from_array(np.array([1, 2, 0, 1], np.int64), "pads")
    raxes = numpy_helper.from_array(np.array([1], np.int64), "raxes")
    m = model([
        n("Add", ["x", "bias"], ["a"]),
        n("Slice", ["a", "st", "en", "axes", "steps"], ["s"]),  # bounds beyond the dims, a negative step
        n("Pad", ["s", "pads"], ["p"], mode="edge"),
        n("ReduceMean", ["p", "raxes"], ["y"], keepdims=0),
    ], [vi("x", [5, 6]), vi("bias", [6])], [vi("y", [None])], [st, en, steps, axes, pads, raxes], opset=18)
    ok, net, p = parse(m)
    assert ok, str(p.get_error(0))
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((5, 6)).astype(np.float32), "bias": rng.standard_normal(6).astype(np.float32)}
    np.testing.assert_allclose(run(net, feeds)["y"], ort_run(m, feeds)["y"], rtol=1e-5, atol=1e-6)


def _external_model(tmp_path, location, *, offset=0, length=None, write=True):
    values = np.arange(6, dtype=np.float32)
    if write:
        (tmp_path / "weights.bin").write_bytes(b"\0" * 8 + values.tobytes())
    t = numpy_helper.from_array(values, "w")
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length or 24))):
        t.external_data.add(key=key, value=value)
    m = model([n("Add", ["x", "w"], ["y"])], [vi("x", [6])], [vi("y", [6])], [t])
    path = tmp_path / "model.onnx"
    path.write_bytes(m.SerializeToString())
    return path, values


def test_external_data_is_read_beside_the_model(tmp_path):
    path, values = _external_model(tmp_path, "weights.bin", offset=8)
    net = tensoracle.Network()
    p = trt.OnnxParser(net)
    assert p.parse_from_file(str(path)), str(p.get_error(0))
    x = np.ones(6, np.float32)
    np.testing.assert_array_equal(run(net, {"x": x})["y"], x + values)
    # bytes without the model's path cannot find it
    ok, _, p = parse(path.read_bytes())
    assert not ok and "parse_from_file" in p.get_error(0).desc()


@pytest.mark.parametrize("location", ["../weights.bin", "/etc/passwd", "sub/../../weights.bin"])
def test_external_data_outside_the_models_folder_is_refused(tmp_path, location):
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "weights.bin").write_bytes(b"\0" * 64)
    path, _ = _external_model(folder, location, write=False)
    net = tensoracle.Network()
    p = trt.OnnxParser(net)
    assert not p.parse_from_file(str(path))
    e = p.get_error(0)
    assert e.code() == trt.ErrorCode.INVALID_VALUE and ("leaves the model's folder" in e.desc() or "absolute" in e.desc())
    assert net.num_layers == 0


@pytest.mark.parametrize("offset,length", [(100, 24), (0, 1000), (8, 20)])
def test_external_data_outside_the_file_is_refused(tmp_path, offset, length):
    path, _ = _external_model(tmp_path, "weights.bin", offset=offset, length=length)
    ok, _, p = parse(path.read_bytes(), str(path))
    assert not ok and p.get_error(0).code() == trt.ErrorCode.INVALID_VALUE and "'w'" in p.get_error(0).desc()


def _raw(dims, data):
    t = TensorProto(name="c", data_type=TensorProto.FLOAT, dims=dims)
    t.raw_data = data
    return t


def test_hostile_models_get_errors(tmp_path):
    x = vi("x", [3])
    cases = {
        "cycle": model([n("Relu", ["b"], ["a"]), n("Relu", ["a"], ["b"])], [x], [vi("b", [3])]),
        "twice": model([n("Relu", ["x"], ["a"]), n("Relu", ["x"], ["a"])], [x], [vi("a", [3])]),
        "no outputs": model([n("Relu", ["x"], ["a"])], [x], []),
        "huge dims": model([n("Relu", ["x"], ["a"])], [x], [vi("a", [3])],
                           [_raw([1 << 40, 1 << 40], b"")]),
        "short raw": model([n("Add", ["x", "c"], ["a"])], [x], [vi("a", [3])],
                           [_raw([3], b"\0" * 8)]),
        "negative axis": model([n("Softmax", ["x"], ["a"], axis=-5)], [x], [vi("a", [3])]),
        "bad perm": model([n("Transpose", ["x"], ["a"], perm=[0, 0])], [vi("x", [2, 2])], [vi("a", [2, 2])]),
        "other domain": model([helper.make_node("Foo", ["x"], ["a"], domain="com.example")], [x], [vi("a", [3])]),
    }
    for name, m in cases.items():
        ok, net, p = parse(m)
        assert not ok, name
        assert p.num_errors >= 1 and net.num_layers == 0, name
        assert str(p.get_error(0)).startswith("[onnx] "), name


def _cli(cli, *args, cwd):
    import subprocess

    return subprocess.run([cli, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_cli_build_imports_saves_and_times(cli, tmp_path):
    k = numpy_helper.from_array(np.random.default_rng(4).standard_normal((2, 3, 3, 3)).astype(np.float32), "k")
    m = model([n("Conv", ["x", "k"], ["c"], pads=[1, 1, 1, 1]), n("Relu", ["c"], ["y"])], [vi("x", ["n", 3, 8, 8])],
              [vi("y", ["n", 2, 8, 8])], [k])
    onnx.save(m, str(tmp_path / "conv.onnx"))
    r = _cli(cli, "build", "--onnx=conv.onnx", "--minShapes=x:1x3x8x8", "--optShapes=x:2x3x8x8", "--maxShapes=x:4x3x8x8",
             "--saveEngine=conv.engine", "--device=cpu", "--iterations=3", "--warmUp=0", "--duration=0", "--dumpProfile",
             "--memPoolSize=workspace:64", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for line in ("parsing conv.onnx", "parsed: ", "building for cpu", "Optimizing the graph: 11 steps",
                 "Choosing tactics: ", "Writing the engine: 1 step in", "saved conv.engine", "latency:", "per layer"):
        assert line in r.stdout, (line, r.stdout)
    engine = tensoracle.load_engine(str(tmp_path / "conv.engine"))
    x = np.random.default_rng(5).standard_normal((3, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(engine.create_execution().run({"x": x})["y"], ort_run(m, {"x": x})["y"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("args,message", [
    ([], "inputs with dynamic dims need shapes: 'x (-1, 3, 8, 8)'"),
    (["--shapes=y:1x3x8x8"], "'y', which is not an input"),
    (["--minShapes=x:1x3x8x8"], "give all of --minShapes, --optShapes and --maxShapes"),
    (["--shapes=x:1x3x8x8", "--memPoolSize=dla:5"], "only the workspace pool"),
])
def test_cli_build_refuses_bad_flags_with_exit_2(cli, tmp_path, args, message):
    k = numpy_helper.from_array(np.ones((2, 3, 3, 3), np.float32), "k")
    onnx.save(model([n("Conv", ["x", "k"], ["y"])], [vi("x", ["n", 3, 8, 8])], [vi("y", ["n", 2, 6, 6])], [k]),
              str(tmp_path / "conv.onnx"))
    r = _cli(cli, "build", "conv.onnx", "--device=cpu", *args, cwd=tmp_path)
    assert r.returncode == 2 and message in r.stderr, r.stderr


@pytest.mark.parametrize("flag,dtype", [("--fp16", np.float16), ("--bf16", None)])
def test_cli_build_fp16_computes_float32_layers_in_half_precision(cli, tmp_path, flag, dtype):
    """trtexec's --fp16 / --bf16 on an ONNX model (weak typing): the convolution computes in the lower
    precision, the engine's input and output stay float32, and the results agree with
    onnxruntime's float32 ones within that precision."""
    k = numpy_helper.from_array(np.random.default_rng(6).standard_normal((4, 3, 3, 3)).astype(np.float32), "k")
    m = model([n("Conv", ["x", "k"], ["c"], pads=[1, 1, 1, 1]), n("Relu", ["c"], ["r"]), n("ReduceSum", ["r"], ["y"], keepdims=0)],
              [vi("x", [2, 3, 8, 8])], [vi("y", [])], [k])
    onnx.save(m, str(tmp_path / "conv.onnx"))
    r = _cli(cli, "build", "conv.onnx", flag, "--saveEngine=conv.engine", "--device=cpu", "--skipInference", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    low = "float16" if flag == "--fp16" else "bfloat16"
    assert f"float32 layers in {low} where they may" in r.stdout
    engine = tensoracle.load_engine(str(tmp_path / "conv.engine"))
    plan = engine.plan_json()
    assert f'"weak_precision":"{low}"' in plan.replace(" ", "")
    assert engine.get_tensor_dtype("x") == trt.float32 and engine.get_tensor_dtype("y") == trt.float32
    x = np.random.default_rng(7).standard_normal((2, 3, 8, 8)).astype(np.float32)
    got = engine.create_execution().run({"x": x})["y"]
    want = ort_run(m, {"x": x})["y"]
    rtol = 4e-3 if flag == "--fp16" else 3e-2  # the reduction stays float32; the convolution's inputs are rounded
    np.testing.assert_allclose(got, want, rtol=rtol)
    assert not np.array_equal(got, want)  # it did compute in the lower precision


def test_cli_build_prints_the_parsers_errors(cli, tmp_path):
    onnx.save(model([n("NonZero", ["x"], ["y"], name="nz")], [vi("x", [3])], [vi("y", [1, None], TensorProto.INT64)]),
              str(tmp_path / "bad.onnx"))
    r = _cli(cli, "build", "bad.onnx", cwd=tmp_path)
    assert r.returncode == 2
    assert "node 0 'nz' (NonZero, opset 17): UNSUPPORTED_NODE" in r.stderr and "could not be imported" in r.stderr


def test_open_engine_takes_an_onnx_file_and_its_external_data_count(tmp_path):
    path, values = _external_model(tmp_path, "weights.bin", offset=8)
    assert [p.name for p in tensoracle.onnx_model_files(str(path))] == ["model.onnx", "weights.bin"]
    build = tensoracle.EngineBuild({"x": tensoracle.InputShape.fixed((6,))}, tensoracle.BuilderSettings(device="cpu"))
    io = tensoracle.EngineIO({"x": tensoracle.TensorSpec(trt.float32, (6,))}, {"y": tensoracle.TensorSpec(trt.float32, (6,))})
    args = dict(name="adder", graph_version="1", weights=[], io=io, cache_dir=str(tmp_path / "cache"))
    first = tensoracle.open_engine(path, build, **args)
    again = tensoracle.open_engine(str(path), build, **args)
    assert first.built and not again.built and first.identity == again.identity
    x = np.ones(6, np.float32)
    np.testing.assert_array_equal(again.create_execution().run({"x": x})["y"], x + values)
    # new weights in the external file: a new identity, a new build
    (tmp_path / "weights.bin").write_bytes(b"\0" * 8 + (2 * values).tobytes())
    changed = tensoracle.open_engine(path, build, **args)
    assert changed.built and changed.identity != first.identity
    np.testing.assert_array_equal(changed.create_execution().run({"x": x})["y"], x + 2 * values)
    bad = tmp_path / "bad.onnx"
    onnx.save(model([n("NonZero", ["x"], ["y"])], [vi("x", [6])], [vi("y", [1, None], TensorProto.INT64)]), str(bad))
    with pytest.raises(tensoracle.InvalidArgument, match="NonZero"):
        tensoracle.open_engine(bad, build, **args)


@pytest.mark.parametrize("half_first", [False, True])
def test_gelu_written_out_becomes_one_activation(half_first):
    # x * 0.5 * (1 + erf(x / sqrt(2))), as exporters write it: the builder's fuse_gelu pass makes
    # it one GELU (erf) activation.
    c = {name: numpy_helper.from_array(np.array(v, np.float32), name)
         for name, v in (("root2", np.sqrt(2.0)), ("one", 1.0), ("half", 0.5))}
    tail = ([n("Mul", ["a", "half"], ["h"]), n("Mul", ["x", "h"], ["y"])] if half_first
            else [n("Mul", ["x", "a"], ["h"]), n("Mul", ["h", "half"], ["y"])])
    m = model([n("Div", ["x", "root2"], ["d"]), n("Erf", ["d"], ["e"]), n("Add", ["e", "one"], ["a"]), *tail],
              [vi("x", [4, 8])], [vi("y", [4, 8])], c.values())
    ok, net, p = parse(m)
    assert ok
    build = tensoracle.EngineBuild({"x": tensoracle.InputShape.fixed((4, 8))}, tensoracle.BuilderSettings(device="cpu"))
    engine = tensoracle.deserialize_engine(tensoracle._native.build_serialized_network(net, build))
    assert [layer.type for layer in engine.layers()] == ["activation"]
    x = np.random.default_rng(6).standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_allclose(engine.create_execution().run({"x": x})["y"], ort_run(m, {"x": x})["y"], rtol=1e-5, atol=1e-6)


def test_names_that_are_not_utf8_are_refused_with_a_readable_error():
    m = model([n("Relu", ["x"], ["y"], name="relu")], [vi("x", [3])], [vi("y", [3])])
    m.graph.node[0].name = "bad\xff"  # protobuf keeps the text; rewrite the bytes below
    data = m.SerializeToString().replace("bad\xff".encode("utf-8"), b"bad\xff\xfe")  # same length
    ok, net, p = parse(data)
    assert not ok and net.num_layers == 0
    e = p.get_error(0)
    assert e.code() == trt.ErrorCode.INVALID_GRAPH and "'bad\\xff\\xfe' is not valid UTF-8" in e.desc()
