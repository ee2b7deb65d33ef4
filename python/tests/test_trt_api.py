"""docs/tensorrt.md is trt_api.py's table of TensorRT 10's Python API against tensoracle.trt,
generated from the module: a name added to or removed from tensoracle.trt changes the table,
and this test fails until the page is regenerated (`python python/tests/trt_api.py --write-docs`)."""

from __future__ import annotations

import trt_api


def test_the_page_is_the_modules_table():
    text = trt_api.DOCS.read_text()
    start, end = text.index(trt_api.BEGIN), text.index(trt_api.END) + len(trt_api.END)
    assert text[start:end] + "\n" == trt_api.table(), "docs/tensorrt.md is stale: run python/tests/trt_api.py --write-docs"


def test_statuses_follow_the_module(monkeypatch):
    import tensoracle.trt as trt

    assert trt_api.status(trt, "Builder") == "same"
    assert trt_api.status(trt, "add_grid_sample") == "absent: " + trt_api.LATER  # not on the module
    assert trt_api.status(trt.INetworkDefinition, "add_scatter").startswith("differs: ")
    assert trt_api.status(trt.INetworkDefinition, "add_grid_sample").startswith("absent: ")
    assert trt_api.status(trt.INetworkDefinition, "add_loop").startswith("differs: ")
    # a name that appears on the module turns "same" (or "differs")
    monkeypatch.setattr(trt, "add_grid_sample", object(), raising=False)
    assert trt_api.status(trt, "add_grid_sample") == "same"


def test_every_listed_absence_has_a_reason_and_no_name_is_listed_twice():
    names = trt_api.MODULE + trt_api.ENUMS + trt_api.LAYERS
    assert len(names) == len(set(names))
    for members in trt_api.MEMBERS.values():
        assert len(members) == len(set(members))
    table = trt_api.table()
    assert "absent: not yet" not in table, "give each absent name its reason in trt_api.ABSENT"


def _python(code, **env):
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def test_import_tensorrt_gives_tensoracle_only_when_asked():
    """The opt-in: TENSORACLE_AS_TENSORRT=1 (a .pth hook installed with the package) or
    register_as_tensorrt() make `import tensorrt` give tensoracle.trt; nothing does by default."""
    code = "import tensorrt, tensoracle.trt; assert tensorrt is tensoracle.trt; print(tensorrt.Builder.__module__)"
    r = _python(code, TENSORACLE_AS_TENSORRT="1")
    assert r.returncode == 0 and r.stdout.strip() == "tensoracle.trt", r.stderr
    r = _python("import tensorrt", TENSORACLE_AS_TENSORRT="0")
    assert r.returncode != 0 and "No module named 'tensorrt'" in r.stderr
    r = _python("import tensoracle.trt as t, tensorrt; assert t.register_as_tensorrt() is tensorrt is t")
    assert r.returncode != 0  # not registered yet at `import tensorrt`
    r = _python("import tensoracle.trt as t; t.register_as_tensorrt(); import tensorrt; assert tensorrt is t")
    assert r.returncode == 0, r.stderr
    r = _python("import sys, types; sys.modules['tensorrt'] = types.ModuleType('tensorrt'); import tensoracle.trt as t; "
                "t.register_as_tensorrt()")
    assert r.returncode != 0 and "already imported" in r.stderr
