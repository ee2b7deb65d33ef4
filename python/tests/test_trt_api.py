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
    assert trt_api.status(trt, "add_loop") == "absent: " + trt_api.LOOPS  # not on the module
    assert trt_api.status(trt.INetworkDefinition, "add_scatter").startswith("differs: ")
    assert trt_api.status(trt.INetworkDefinition, "add_loop").startswith("absent: ")
    # a name that appears on the module turns "same" (or "differs")
    monkeypatch.setattr(trt, "add_loop", object(), raising=False)
    assert trt_api.status(trt, "add_loop") == "same"


def test_every_listed_absence_has_a_reason_and_no_name_is_listed_twice():
    names = trt_api.MODULE + trt_api.ENUMS + trt_api.LAYERS
    assert len(names) == len(set(names))
    for members in trt_api.MEMBERS.values():
        assert len(members) == len(set(members))
    table = trt_api.table()
    assert "absent: not yet" not in table, "give each absent name its reason in trt_api.ABSENT"
