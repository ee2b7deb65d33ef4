"""tensoracle.info() and `tensoracle --version`: the version, engine format and build, and per
backend whether it runs on this machine (device, libraries) or why not."""

from __future__ import annotations

import subprocess

import pytest

import tensoracle


def test_info_describes_the_build_and_the_backends():
    info = tensoracle.info()
    assert info["version"] == tensoracle.__version__
    assert info["engine_format"] == 2 and len(info["build"]) == 16
    cpu = info["backends"]["cpu"]
    assert cpu["available"] and cpu["device"] == "cpu" and cpu["reason"] is None
    assert "OpenBLAS" in cpu["libraries"] and cpu["libraries"]["OpenBLAS"][0].isdigit()
    cuda = info["backends"]["cuda"]
    if cuda["available"]:
        assert cuda["device"].startswith("cuda:") and "compute capability" in cuda["detail"]
    else:
        assert cuda["device"] is None and cuda["reason"].startswith("[cuda] ")


def test_the_program_prints_the_same(cli):
    info = tensoracle.info()
    out = subprocess.run([cli, "--version"], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == f"tensoracle {info['version']}"
    assert out[1] == f"engine format {info['engine_format']}, build {info['build']}"
    assert out[2].startswith(f"cpu backend: OpenBLAS {info['backends']['cpu']['libraries']['OpenBLAS']}")
    cuda = info["backends"]["cuda"]
    assert out[3] == (f"cuda backend: unavailable ({cuda['reason']})" if not cuda["available"]
                      else f"cuda backend: {cuda['device']} ({cuda['detail']}, cuDNN {cuda['libraries']['cuDNN']})")


@pytest.mark.gpu
def test_a_gpu_machine_reports_its_device():
    cuda = tensoracle.info()["backends"]["cuda"]
    assert cuda["available"], cuda["reason"]
