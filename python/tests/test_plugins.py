"""Plugins from Python: the example RMSNorm plugin (examples/plugins/rmsnorm_plugin.cpp, compiled
here with the system's C++ compiler against cpp/include alone) in engines built, saved and
reopened in other processes and compared with the same network of standard layers; fields from
NumPy arrays, numbers, str and bytes; and libraries that are missing, foreign, of another ABI
version or changed after loading — each a clear error."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tensoracle
import tensoracle.trt as trt

ROOT = Path(__file__).resolve().parents[2]
NS = "tensoracle.examples"


def compiler(kind: str) -> str:
    name = os.environ.get("CXX" if kind == "c++" else "CC") or shutil.which(kind) or shutil.which(
        "g++" if kind == "c++" else "gcc")
    if not name:
        pytest.fail(f"no {kind} compiler: the plugin tests compile their libraries", pytrace=False)
    return name


def compile_library(source: Path | str, out: Path, language: str = "c++") -> Path:
    args = [compiler(language), "-shared", "-fPIC", "-O1", f"-I{ROOT / 'cpp' / 'include'}", "-o", str(out)]
    if language == "c++":
        args.insert(1, "-std=c++17")
    if isinstance(source, str):
        src = out.with_suffix(".c" if language == "c" else ".cpp")
        src.write_text(source)
        source = src
    subprocess.run([*args, str(source)], check=True, capture_output=True, text=True, timeout=300)
    return out


@pytest.fixture(scope="session")
def rmsnorm_lib(tmp_path_factory) -> Path:
    return compile_library(ROOT / "examples" / "plugins" / "rmsnorm_plugin.cpp",
                           tmp_path_factory.mktemp("plugins") / "librmsnorm.so")


def rmsnorm_reference(x, w, eps):
    x = x.astype(np.float64)
    return (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w).astype(np.float32)


SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import tensoracle
    import tensoracle.trt as trt

    lib, cache = sys.argv[1], sys.argv[2]
    w = np.linspace(-1, 1, 16, dtype=np.float32)

    def plugin_graph(net):
        x = net.add_input("x", trt.float32, (-1, 16))
        weight = net.add_constant((16,), w).get_output(0)
        fields = trt.PluginFieldCollection([trt.PluginField("epsilon", np.array([0.25], np.float32), trt.PluginFieldType.FLOAT32)])
        y = net.add_plugin("RMSNorm", "1", [x, weight], fields, namespace="tensoracle.examples").get_output(0)
        y.name = "y"
        net.mark_output(y)

    def layers_graph(net):
        x = net.add_input("x", trt.float32, (-1, 16))
        weight = net.add_constant((1, 16), w.reshape(1, 16)).get_output(0)
        eps = net.add_constant((1, 1), np.array([[0.25]], np.float32)).get_output(0)
        sq = net.add_elementwise(x, x, trt.ElementWiseOperation.PROD).get_output(0)
        mean = net.add_reduce(sq, trt.ReduceOperation.AVG, 2, True).get_output(0)
        var = net.add_elementwise(mean, eps, trt.ElementWiseOperation.SUM).get_output(0)
        inv = net.add_unary(net.add_unary(var, trt.UnaryOperation.SQRT).get_output(0), trt.UnaryOperation.RECIP).get_output(0)
        y = net.add_elementwise(net.add_elementwise(x, inv, trt.ElementWiseOperation.PROD).get_output(0), weight,
                                trt.ElementWiseOperation.PROD).get_output(0)
        y.name = "y"
        net.mark_output(y)

    decl = tensoracle.EngineBuild({"x": tensoracle.InputShape.ranged((1, 16), (4, 16), (8, 16))},
                                  tensoracle.BuilderSettings(optimization_level=0, device="cpu"))
    io = tensoracle.EngineIO({"x": tensoracle.TensorSpec(trt.float32, (-1, 16))}, {"y": tensoracle.TensorSpec(trt.float32, (-1, 16))})
    a = tensoracle.open_engine(plugin_graph, decl, name="rms-plugin", graph_version="1", weights=(), io=io,
                               plugins=(lib,), cache_dir=cache)
    b = tensoracle.open_engine(layers_graph, decl, name="rms-layers", graph_version="1", weights=(), io=io, cache_dir=cache)
    x = np.random.default_rng(5).uniform(-2, 2, (6, 16)).astype(np.float32)
    ya = a.create_execution().run({"x": x})["y"]
    yb = b.create_execution().run({"x": x})["y"]
    ref = (x.astype(np.float64) / np.sqrt(np.mean(x.astype(np.float64) ** 2, -1, keepdims=True) + 0.25) * w).astype(np.float32)
    print(json.dumps({"built": [a.built, b.built], "identity": a.identity, "plugin_vs_layers": float(np.abs(ya - yb).max()),
                      "plugin_vs_numpy": float(np.abs(ya - ref).max())}))
    """
)


def run_script(tmp_path, lib, cache) -> dict:
    script = tmp_path / "open_rms.py"
    script.write_text(SCRIPT)
    p = subprocess.run([sys.executable, str(script), str(lib), str(cache)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_a_plugin_engine_is_built_reopened_in_another_process_and_matches_standard_layers(rmsnorm_lib, tmp_path):
    first = run_script(tmp_path, rmsnorm_lib, tmp_path / "cache")
    second = run_script(tmp_path, rmsnorm_lib, tmp_path / "cache")
    assert first["built"] == [True, True]
    assert second["built"] == [False, False], "the second process reopens both engines"
    assert second["identity"] == first["identity"]
    for r in (first, second):
        assert r["plugin_vs_layers"] < 1e-5
        assert r["plugin_vs_numpy"] < 1e-5


def test_a_changed_library_selects_another_engine_in_a_new_process(rmsnorm_lib, tmp_path):
    lib = tmp_path / "librms.so"
    shutil.copy(rmsnorm_lib, lib)
    first = run_script(tmp_path, lib, tmp_path / "cache")
    with open(lib, "ab") as f:  # still a valid shared library, other bytes
        f.write(b"a rebuilt library")
    changed = run_script(tmp_path, lib, tmp_path / "cache")
    again = run_script(tmp_path, lib, tmp_path / "cache")
    assert first["built"][0] and changed["built"][0] and not again["built"][0]
    assert changed["identity"] != first["identity"]


def test_fields_from_dicts_numbers_and_plugin_fields(rmsnorm_lib):
    tensoracle.load_plugin_libraries([rmsnorm_lib])
    x = np.random.default_rng(1).uniform(-1, 1, (3, 8)).astype(np.float32)
    w = np.full((8,), 2.0, np.float32)
    for fields in ({"epsilon": 0.5},  # a Python float: the schema says float32
                   [tensoracle.PluginField("epsilon", 0.5)],
                   trt.PluginFieldCollection([trt.PluginField("epsilon", np.float32(0.5), trt.PluginFieldType.FLOAT32)])):
        def graph(net, fields=fields):
            xi = net.add_input("x", trt.float32, (3, 8))
            wt = net.add_constant((8,), w).get_output(0)
            layer = net.add_plugin("RMSNorm", "1", [xi, wt], fields, namespace=NS)
            assert isinstance(layer, trt.IPluginLayer)
            assert (layer.creator_name, layer.creator_version, layer.plugin_namespace) == ("RMSNorm", "1", NS)
            assert layer.type == trt.LayerType.PLUGIN
            y = layer.get_output(0)
            y.name = "y"
            net.mark_output(y)

        decl = tensoracle.EngineBuild({"x": tensoracle.InputShape.fixed((3, 8))}, tensoracle.BuilderSettings(device="cpu"))
        engine = tensoracle.deserialize_engine(tensoracle.build_serialized_engine(graph, decl, plugins=[rmsnorm_lib]))
        y = engine.create_execution().run({"x": x})["y"]
        np.testing.assert_allclose(y, rmsnorm_reference(x, w, 0.5), atol=1e-5)


def test_bad_fields_are_invalid_arguments(rmsnorm_lib):
    tensoracle.load_plugin_libraries([rmsnorm_lib])
    net = tensoracle.Network()
    x = net.add_input("x", trt.float32, (2, 4))
    w = net.add_constant((4,), np.ones(4, np.float32)).get_output(0)
    cases = [({"epsilon": "small"}, "a str is given for a float32 field"),
             ({"eps": 1e-6}, "unknown field 'eps'"),
             ({"epsilon": [1e-6, 2e-6]}, "has 2 elements"),
             ({"epsilon": -1.0}, "epsilon must be finite and >= 0"),
             ([tensoracle.PluginField("epsilon", np.array([1], np.int64), tensoracle.PluginFieldType.INT64)], "is int64")]
    for fields, message in cases:
        with pytest.raises(tensoracle.InvalidArgument, match=message):
            net.add_plugin("RMSNorm", "1", [x, w], fields, namespace=NS)
    with pytest.raises(tensoracle.InvalidArgument, match="takes 2 inputs"):
        net.add_plugin("RMSNorm", "1", [x], {}, namespace=NS)
    with pytest.raises(tensoracle.InvalidArgument, match=r"'nowhere::Missing/1' is not registered.*plugins="):
        net.add_plugin("Missing", "1", [x], {}, namespace="nowhere")


def test_registered_creators_describe_their_schema(rmsnorm_lib):
    info = tensoracle.load_plugin_libraries([rmsnorm_lib])[0]
    assert info.digest.startswith("xxh3-128:") and info.size == rmsnorm_lib.stat().st_size
    assert info.creators == ["tensoracle.examples::RMSNorm/1"]
    [c] = [c for c in tensoracle.registered_plugin_creators() if c.name == "RMSNorm"]
    assert (c.plugin_namespace, c.version) == (NS, "1")
    assert [(f.name, f.type, f.count) for f in c.fields] == [("epsilon", tensoracle.PluginFieldType.FLOAT32, 1)]


def test_an_engine_reopens_only_where_its_plugin_library_is_loaded(rmsnorm_lib, tmp_path):
    tensoracle.load_plugin_libraries([rmsnorm_lib])

    def graph(net):
        x = net.add_input("x", trt.float32, (2, 4))
        w = net.add_constant((4,), np.ones(4, np.float32)).get_output(0)
        y = net.add_plugin("RMSNorm", "1", [x, w], {"epsilon": 1e-3}, namespace=NS).get_output(0)
        y.name = "y"
        net.mark_output(y)

    decl = tensoracle.EngineBuild({"x": tensoracle.InputShape.fixed((2, 4))}, tensoracle.BuilderSettings(device="cpu"))
    path = tmp_path / "rms.engine"
    path.write_bytes(tensoracle.build_serialized_engine(graph, decl))
    code = textwrap.dedent(f"""
        import numpy as np, tensoracle
        try:
            tensoracle.load_engine({str(path)!r})
        except tensoracle.PluginLibraryError as e:
            print("refused:", e)
        e = tensoracle.load_engine({str(path)!r}, plugins=[{str(rmsnorm_lib)!r}])
        print("ran:", e.create_execution().run({{"x": np.ones((2, 4), np.float32)}})["y"].tolist())
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "refused: [engine]" in p.stdout and "needs plugin creator 'tensoracle.examples::RMSNorm/1'" in p.stdout
    assert "plugins=" in p.stdout
    ran = [line for line in p.stdout.splitlines() if line.startswith("ran:")]
    assert ran and np.allclose(eval(ran[0][4:]), 1 / np.sqrt(1 + 1e-3))  # noqa: S307  (our own output)


NO_CREATORS = "int something_else(void) { return 1; }\n"
BAD_ABI = textwrap.dedent("""
    #include "tensoracle/plugin.h"
    static int32_t create(const TensoraclePluginCreator* c, const TensoraclePluginField* f, int32_t n,
                          TensoraclePlugin** p, char* e, size_t es) { (void)c; (void)f; (void)n; (void)p; (void)e; (void)es; return 1; }
    static const TensoraclePluginCreator k = {TENSORACLE_PLUGIN_ABI_VERSION + 1, "Future", "1", "", 0, 0, 0, create};
    static const TensoraclePluginCreator* const all[] = {&k};
    TENSORACLE_PLUGIN_EXPORT const TensoraclePluginCreator* const* getCreators(int32_t* n) { *n = 1; return all; }
""")


def test_bad_libraries_are_plugin_library_errors_naming_the_file(tmp_path):
    cases = [
        (tmp_path / "libmissing.so", "No such file"),
        (compile_library(NO_CREATORS, tmp_path / "libnocreators.so", "c"), "does not export getCreators"),
        (compile_library(BAD_ABI, tmp_path / "libfuture.so", "c"), "ABI version 2"),
    ]
    text = tmp_path / "libtext.so"
    text.write_text("not a library")
    cases.append((text, "cannot load the plugin library"))
    for lib, message in cases:
        with pytest.raises(tensoracle.PluginLibraryError, match=message) as e:
            tensoracle.load_plugin_libraries([lib])
        assert lib.name in str(e.value)

    def graph(net):
        raise AssertionError("the graph function must not run when a plugin library is bad")

    decl = tensoracle.EngineBuild({"x": tensoracle.InputShape.fixed((1,))})
    with pytest.raises(tensoracle.PluginLibraryError, match="libnocreators.so"):
        tensoracle.build_serialized_engine(graph, decl, plugins=[tmp_path / "libnocreators.so"])


def test_a_library_changed_after_loading_is_refused_in_this_process(rmsnorm_lib, tmp_path):
    lib = tmp_path / "libchanging.so"
    shutil.copy(rmsnorm_lib, lib)
    tensoracle.load_plugin_libraries([lib])  # the same bytes as the example: the same library
    with open(lib, "ab") as f:
        f.write(b"changed")
    with pytest.raises(tensoracle.PluginLibraryError, match="changed on disk after it was loaded"):
        tensoracle.load_plugin_libraries([lib])


def test_cli_bench_loads_the_plugins_an_engine_needs(rmsnorm_lib, tmp_path, cli):
    """`tensoracle bench --plugins LIB` times an engine with plugin layers; without the library
    the engine does not open, and the message names the creator and how to pass its library."""
    w = np.linspace(-1, 1, 16, dtype=np.float32)

    def graph(net):
        x = net.add_input("x", trt.float32, (4, 16))
        weight = net.add_constant((16,), w).get_output(0)
        fields = trt.PluginFieldCollection([trt.PluginField("epsilon", np.array([0.25], np.float32), trt.PluginFieldType.FLOAT32)])
        y = net.add_plugin("RMSNorm", "1", [x, weight], fields, namespace="tensoracle.examples").get_output(0)
        y.name = "y"
        net.mark_output(y)

    decl = tensoracle.EngineBuild({"x": tensoracle.InputShape.fixed((4, 16))}, tensoracle.BuilderSettings(device="cpu"))
    path = tmp_path / "rms.engine"
    path.write_bytes(tensoracle.build_serialized_engine(graph, decl, plugins=[rmsnorm_lib]))
    done = subprocess.run([cli, "bench", str(path), "--iterations", "5", "--json", "--plugins", str(rmsnorm_lib)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["latency_ms"]["median"] > 0
    missing = subprocess.run([cli, "bench", str(path), "--iterations", "5"], capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2
    assert "RMSNorm" in missing.stderr and "--plugins" in missing.stderr, missing.stderr
