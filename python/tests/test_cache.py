"""open_engine from Python: build once and reopen, identity, digest memo, EngineIO, corruption,
location, threads, and tensoracle.cache. (Processes: test_cache_processes.py; the CLI:
test_cache_cli.py; every identity field, with a substituted environment: cpp/tests/test_cache.cpp.)"""

from __future__ import annotations

import json
import os
import platform
import threading
import time

import numpy as np
import pytest
from conftest import onednn_version

import tensoracle
import tensoracle.trt as trt
from tensoracle import EngineIO, TensorSpec

import cache_model as cm


@pytest.fixture
def model(tmp_path):
    weights = tmp_path / "linear.safetensors"
    cm.write_weights(weights)

    class Model:
        cache = tmp_path / "cache"
        counter = tmp_path / "calls.txt"

        def open(self, **kwargs):
            kwargs.setdefault("graph", cm.graph(weights, self.counter))
            return cm.open_model(self.cache, weights, **kwargs)

        @property
        def calls(self):
            return cm.calls(self.counter)

    m = Model()
    m.weights = weights
    m.tmp = tmp_path
    return m


def counts():
    return tensoracle.cache.read_counts()


def test_builds_once_then_reopens_without_calling_the_graph(model):
    first = model.open()
    assert first.built and model.calls == 1
    assert first.path.parent == model.cache and first.path.name == f"linear-{first.identity}.engine"
    assert len(first.identity) == 32 and int(first.identity, 16) >= 0
    np.testing.assert_array_equal(cm.run(first), cm.expected())

    again = model.open()
    assert not again.built
    assert model.calls == 1, "the graph function runs only when building"
    assert (again.path, again.identity) == (first.path, first.identity)
    np.testing.assert_array_equal(cm.run(again), cm.expected())
    assert isinstance(again.engine, tensoracle.Engine)
    assert "built=False" in repr(again)


def test_the_reference_signature():
    import inspect  # noqa: F401  (nanobind functions have no inspect signature; check the doc)

    doc = tensoracle.open_engine.__doc__
    for arg in ("graph", "declaration", "*", "name", "graph_version", "weights", "io", "plugins",
                "force_rebuild", "device", "cache_dir"):
        assert arg in doc, arg


def test_arguments_are_keyword_only_and_required(model):
    with pytest.raises(TypeError):
        tensoracle.open_engine(cm.graph(model.weights), cm.declaration(), "linear", "1")
    with pytest.raises(TypeError):  # io is required
        tensoracle.open_engine(cm.graph(model.weights), cm.declaration(), name="linear", graph_version="1",
                               weights=(model.weights,), cache_dir=model.cache)


@pytest.mark.parametrize("field", ["name", "graph_version"])
def test_empty_name_or_version_is_a_value_error_naming_it(model, field):
    with pytest.raises(tensoracle.InvalidArgument, match=f"{field} is empty"):
        model.open(**{field: ""})
    assert model.calls == 0


def test_missing_weight_file_is_file_not_found_naming_it(model, tmp_path):
    with pytest.raises(FileNotFoundError, match="absent.safetensors") as e:
        model.open(weights=(tmp_path / "absent.safetensors",))
    assert "weight file" in str(e.value)
    assert model.calls == 0


def test_graph_function_errors_propagate_and_nothing_is_saved(model):
    def failing(network):
        raise KeyError("no such weight")

    with pytest.raises(KeyError, match="no such weight"):
        model.open(graph=failing)
    assert tensoracle.cache.list(model.cache) == []
    assert not [p for p in model.cache.iterdir() if ".tmp-" in p.name]
    assert model.open().built


# --- identity ----------------------------------------------------------------------------


def identity(model, **kwargs):
    kw = dict(name="linear", graph_version="1", weights=(model.weights,), cache_dir=model.cache)
    decl = kwargs.pop("declaration", cm.declaration())
    kw.update(kwargs)
    return tensoracle.engine_identity(decl, **kw)


def test_identity_is_what_open_engine_uses(model):
    assert identity(model).identity == model.open().identity


@pytest.mark.parametrize(
    "make_change",
    [
        lambda: {"name": "linear-2"},
        lambda: {"graph_version": "2"},
        lambda: {"declaration": cm.declaration(opt_rows=8)},  # input shapes
        lambda: {"declaration": cm.declaration(level=1)},  # builder settings
    ],
    ids=["name", "graph_version", "input_shapes", "builder_settings"],
)
def test_each_caller_field_changes_the_entry(model, make_change):
    change = make_change()  # made here: objects in parametrize lists outlive the interpreter's teardown
    base = model.open()
    other = model.open(**change)
    assert other.built and other.identity != base.identity and other.path != base.path
    assert base.path.exists()
    assert not model.open(**change).built


def test_weight_contents_change_the_entry_paths_do_not(model, tmp_path):
    base = model.open()
    moved = tmp_path / "moved.safetensors"
    moved.write_bytes(model.weights.read_bytes())
    assert not model.open(weights=(moved,)).built, "a moved file keeps its engine"
    cm.write_weights(model.weights, scale=2.0)
    changed = model.open()
    assert changed.built and changed.identity != base.identity
    np.testing.assert_array_equal(cm.run(changed), cm.expected(scale=2.0))


def test_identity_text_holds_device_os_arch_format_and_versions(model):
    text = json.loads(identity(model).text)
    assert text["os"] == platform.system()
    assert text["arch"] == platform.machine() == text["target"]["arch"]
    assert text["target"]["backend"] == "cpu" and text["target"]["device"] and isinstance(text["target"]["isa"], list)
    assert text["target"]["onednn"] == onednn_version()  # "" in a build without oneDNN
    assert text["engine_format"] == 2
    assert text["libraries"]["tensoracle"] == tensoracle.__version__
    assert text["libraries"]["openblas"].startswith("OpenBLAS ")
    assert text["weights"] == [{"digest": text["weights"][0]["digest"], "size": model.weights.stat().st_size}]
    assert text["declaration"]["settings"]["device"] == "cpu"


def test_device_auto_and_cpu_share_the_entry(model):
    assert identity(model, device="auto").identity == identity(model, device="cpu").identity
    with pytest.raises(tensoracle.InvalidArgument, match="device 'tpu'"):
        model.open(device="tpu")


def test_missing_plugin_is_a_plugin_library_error_before_anything_opens(model, tmp_path):
    model.open()
    with pytest.raises(tensoracle.PluginLibraryError, match="libmissing.so"):
        model.open(plugins=(tmp_path / "libmissing.so",))
    assert model.calls == 1


def test_a_file_that_is_not_a_plugin_library_is_refused_and_nothing_is_saved(model, tmp_path):
    # Real plugin libraries: test_plugins.py.
    lib = tmp_path / "libplugin.so"
    lib.write_bytes(b"\x7fELF")
    with pytest.raises(tensoracle.PluginLibraryError, match="libplugin.so"):
        model.open(plugins=(lib,))
    assert model.calls == 0
    assert tensoracle.cache.list(model.cache) == []


# --- the digest memo: warm opens read no weights -----------------------------------------


def test_warm_open_reads_no_weights_and_no_engine(model):
    time.sleep(cm.SETTLE_SECONDS)
    assert model.open().built
    before = counts()
    start = time.perf_counter()
    warm = model.open()
    elapsed = time.perf_counter() - start
    after = counts()
    assert not warm.built
    assert after["files_hashed"] == before["files_hashed"]
    assert after["engine_digest_checks"] == before["engine_digest_checks"]
    print(f"warm open_engine: {elapsed * 1e3:.2f} ms")  # -s shows it; not an assertion


def test_touching_a_weight_file_keeps_the_entry_and_rehashes_once(model):
    time.sleep(cm.SETTLE_SECONDS)
    base = model.open()
    os.utime(model.weights)  # same contents, new times
    time.sleep(cm.SETTLE_SECONDS)
    before = counts()["files_hashed"]
    again = model.open()
    assert not again.built and again.identity == base.identity
    assert counts()["files_hashed"] == before + 1
    model.open()
    assert counts()["files_hashed"] == before + 1
    assert model.calls == 1


def test_damaged_memo_is_tolerated(model):
    model.open()
    memo = model.cache / "digests.json"
    for text in ("", "{", "[]", '{"format": "tensoracle.digest-memo", "version": 1, "files": {"x": 1}}', "\x00" * 9):
        memo.write_text(text)
        assert not model.open().built
        assert json.loads(memo.read_text())["format"] == "tensoracle.digest-memo"


# --- EngineIO -------------------------------------------------------------------------------


def test_engine_io_mismatch_lists_every_difference(model):
    wrong = EngineIO(
        {"features": TensorSpec(trt.float16, (-1, 32)), "mask": TensorSpec(trt.bool, (-1, 32))},
        {"result": TensorSpec(trt.float32, (-1, 8)), "extra": TensorSpec(trt.float32, (1,))},
    )
    with pytest.raises(tensoracle.EngineIOError) as e:
        model.open(io=wrong)
    msg = str(e.value)
    assert "4 differences" in msg
    assert "input 'features': type float32 in the engine, float16 declared" in msg
    assert "input 'mask': declared, but the engine has no tensor of that name" in msg
    assert "output 'result': shape (-1, 16) in the engine, (-1, 8) declared" in msg
    assert "output 'extra': declared, but the engine has no tensor of that name" in msg
    assert str(model.cache) in msg and "graph_version" in msg
    assert isinstance(e.value, ValueError) and isinstance(e.value, tensoracle.Error)
    # Checked on a cache hit too; the engine built above was saved.
    with pytest.raises(tensoracle.EngineIOError, match="output 'result': in the engine"):
        model.open(io=EngineIO({"features": TensorSpec(trt.float32, (-1, 32))}, {}))
    assert model.calls == 1
    assert not model.open().built


def test_tensor_spec_and_engine_io_values():
    spec = TensorSpec(trt.float32, (16, 32))
    assert spec.dtype == trt.float32 and spec.shape == (16, 32)
    assert spec == TensorSpec(trt.float32, [16, 32])
    io = EngineIO({"features": spec}, {"result": TensorSpec(trt.float32, (16, 16))})
    assert io.inputs["features"] == spec
    assert "result" in repr(io)


# --- corruption and force_rebuild ----------------------------------------------------------


def flip(path, at):
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x5A]))


def test_damaged_entry_names_the_file_and_force_rebuild(model):
    h = model.open()
    flip(h.path, h.path.stat().st_size - 8)
    with pytest.raises(tensoracle.CorruptEngineError) as e:
        model.open()
    assert str(h.path) in str(e.value) and "force_rebuild=True" in str(e.value)
    rebuilt = model.open(force_rebuild=True)
    assert rebuilt.built and model.calls == 2
    np.testing.assert_array_equal(cm.run(rebuilt), cm.expected())
    assert not model.open().built


def test_force_rebuild_replaces_an_intact_entry_in_use(model):
    h = model.open()
    inode = h.path.stat().st_ino
    rebuilt = model.open(force_rebuild=True)
    assert rebuilt.built and model.calls == 2
    assert h.path.stat().st_ino != inode
    np.testing.assert_array_equal(cm.run(h), cm.expected())  # still mapped, still works


def test_truncated_and_empty_entries_are_corrupt(model):
    h = model.open()
    os.truncate(h.path, 100)
    with pytest.raises(tensoracle.CorruptEngineError):
        model.open()
    os.truncate(h.path, 0)
    with pytest.raises(tensoracle.CorruptEngineError, match="force_rebuild=True"):
        model.open()
    assert model.open(force_rebuild=True).built


# --- location ------------------------------------------------------------------------------


def test_location_xdg_then_home(model, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tensoracle.default_cache_dir() == tmp_path / "xdg" / "tensoracle"
    h = model.open(cache_dir=None)
    assert h.path.parent == tmp_path / "xdg" / "tensoracle"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert tensoracle.default_cache_dir() == tmp_path / "home" / ".cache" / "tensoracle"
    assert tensoracle.cache.default_dir() == tensoracle.default_cache_dir()
    h = model.open(cache_dir=None)
    assert h.built and h.path.parent == tmp_path / "home" / ".cache" / "tensoracle"
    assert model.open().path.parent == model.cache, "cache_dir overrides both"


# --- threads -------------------------------------------------------------------------------


def test_threads_opening_a_missing_engine_build_it_once(model):
    results, errors = [], []

    def work():
        try:
            h = model.open(graph=cm.graph(model.weights, model.counter, sleep=0.3))
            results.append((h.built, cm.run(h)))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert model.calls == 1
    assert sum(built for built, _ in results) == 1
    for _, value in results:
        np.testing.assert_array_equal(value, cm.expected())


# --- tensoracle.cache ------------------------------------------------------------------------


def test_cache_module_list_verify_prune_clear(model):
    a = model.open()
    b = model.open(graph_version="2")
    entries = tensoracle.cache.list(model.cache)
    assert [(e.name, e.graph_version, e.identity) for e in entries] == [
        ("linear", "1", a.identity),
        ("linear", "2", b.identity),
    ]
    e = entries[0]
    assert e.path == a.path and e.size > a.path.stat().st_size and e.device.startswith("cpu: ")
    assert e.created.tzinfo is not None and e.created <= e.last_used
    assert all(c.ok for c in tensoracle.cache.verify(model.cache))

    flip(b.path, b.path.stat().st_size - 8)
    checks = tensoracle.cache.verify(model.cache)
    assert [c.health for c in checks] == ["ok", "corrupt"]
    assert "digest" in checks[1].problem

    old = time.time() - 40 * 86400
    os.utime(model.cache / f"linear-{a.identity}.json", (old, old))
    removed = tensoracle.cache.prune(older_than_days=30, cache_dir=model.cache)
    assert [r.identity for r in removed] == [a.identity]
    assert tensoracle.cache.prune(max_size="1G", cache_dir=model.cache) == []
    assert [r.identity for r in tensoracle.cache.prune(max_size=0, cache_dir=model.cache)] == [b.identity]
    model.open(name="x")
    model.open(name="y")
    assert [r.name for r in tensoracle.cache.clear(name="x", cache_dir=model.cache)] == ["x"]
    assert [r.name for r in tensoracle.cache.clear(cache_dir=model.cache)] == ["y"]
    assert list(model.cache.iterdir()) == []
    with pytest.raises(tensoracle.InvalidArgument, match="give older_than"):
        tensoracle.cache.prune(cache_dir=model.cache)
    with pytest.raises(ValueError, match="'5Q' is not a size"):
        tensoracle.cache.prune(max_size="5Q", cache_dir=model.cache)
    assert tensoracle.cache.parse_size("1.5GiB") == 3 << 29
