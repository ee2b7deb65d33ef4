"""Shared fixtures for tensoracle's Python tests."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest


@pytest.fixture(params=["cpu", pytest.param("cuda:0", marks=pytest.mark.gpu)])
def device(request) -> str:
    """The device an engine-building test runs on: the CPU, and cuda:0 (marked gpu)."""
    return request.param


def _find_cli() -> tuple[str | None, list[str]]:
    """The tensoracle CLI to test, and the places looked at (for the failure message)."""
    tried = []
    env = os.environ.get("TENSORACLE_CLI")
    if env:
        tried.append(f"$TENSORACLE_CLI={env}")
        return (env if os.path.isfile(env) and os.access(env, os.X_OK) else None), tried
    found = shutil.which("tensoracle")
    tried.append("'tensoracle' on $PATH")
    if found:
        return found, tried
    beside = Path(sys.executable).with_name("tensoracle")
    tried.append(str(beside))
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside), tried
    return None, tried


@pytest.fixture(scope="session")
def cli() -> str:
    """Path of the `tensoracle` command-line tool; the test fails (never skips) without it."""
    path, tried = _find_cli()
    if path is None:
        pytest.fail(
            "the tensoracle CLI was not found (looked at: " + ", ".join(tried) + "). "
            "Build and install it with `make python`, or point TENSORACLE_CLI at the binary.",
            pytrace=False,
        )
    return path


def cpu_target() -> dict:
    """The CPU backend's target (backend, arch, device, isa, onednn) as engines record it."""
    import json

    import tensoracle
    import tensoracle.trt as trt

    def graph(net):
        x = net.add_input("x", trt.float32, (1,))
        y = net.add_identity(x).get_output(0)
        y.name = "y"
        net.mark_output(y)

    decl = tensoracle.EngineBuild({"x": tensoracle.InputShape.fixed((1,))}, tensoracle.BuilderSettings(device="cpu"))
    return json.loads(tensoracle.deserialize_engine(tensoracle.build_serialized_engine(graph, decl)).target_json())


def onednn_version() -> str:
    """oneDNN's version in this build of tensoracle ("" when built without it)."""
    return cpu_target().get("onednn", "")
