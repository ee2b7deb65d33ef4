"""`tensoracle cubin produce|inspect` with real NVRTC (the nvidia-cuda-nvrtc wheel of the
`producer` extra; no GPU needed): one cubin per architecture, a manifest whose SHA-256 digests
hashlib agrees with, the kernels (not device functions) read back from each cubin, and clear
errors — a compile error with NVRTC's log and nothing written, a malformed architecture, a
cubin that no longer matches its manifest, a file that is no cubin."""

from __future__ import annotations

import hashlib
import json
import subprocess

import pytest

KERNELS = r"""
__device__ __noinline__ float twice_plus_one(float x) { return x * 2.f + 1.f; }
extern "C" __global__ void add_one(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = twice_plus_one(x[i]) + OFFSET;
}
template <class T> __global__ void scale(T* x, T s) { x[threadIdx.x] *= s; }
template __global__ void scale<float>(float*, float);
"""
ARCHS = ["sm_86", "sm_89", "sm_90", "sm_120"]


def run(cli, *args):
    return subprocess.run([cli, "cubin", *map(str, args)], capture_output=True, text=True, timeout=300)


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "kernels.cu"
    path.write_text(KERNELS)
    return path


def test_produce_writes_a_cubin_per_architecture_and_a_manifest(cli, source, tmp_path):
    out = tmp_path / "cubins"
    p = run(cli, "produce", source, "--arch", ",".join(ARCHS), "-o", out, "-D", "OFFSET=0.5f")
    assert p.returncode == 0, p.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "tensoracle.cubins/1"
    assert manifest["source"] == "kernels.cu"
    assert manifest["source_sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()
    assert manifest["compiler"].startswith("NVRTC 13.")
    assert "-DOFFSET=0.5f" in manifest["flags"] and "-std=c++17" in manifest["flags"]
    assert [c["arch"] for c in manifest["cubins"]] == ARCHS
    for c in manifest["cubins"]:
        data = (out / c["file"]).read_bytes()
        assert c["file"] == f"kernels.{c['arch']}.cubin"
        assert data[:4] == b"\x7fELF" and c["size"] == len(data)
        assert c["sha256"] == hashlib.sha256(data).hexdigest()
        # Kernels only: the template instance by its mangled name; the device function is not one.
        assert c["kernels"] == ["_Z5scaleIfEvPT_S0_", "add_one"]
    listing = run(cli, "inspect", out)
    assert listing.returncode == 0, listing.stderr
    assert "every cubin matches the manifest" in listing.stdout
    one = run(cli, "inspect", out / "kernels.sm_120.cubin", "--json")
    assert one.returncode == 0, one.stderr
    assert json.loads(one.stdout)["arch"] == "sm_120"


def test_a_changed_cubin_fails_inspection(cli, source, tmp_path):
    out = tmp_path / "cubins"
    assert run(cli, "produce", source, "--arch", "sm_90", "-o", out, "-D", "OFFSET=0").returncode == 0
    data = bytearray((out / "kernels.sm_90.cubin").read_bytes())
    data[-1] ^= 0xFF
    (out / "kernels.sm_90.cubin").write_bytes(bytes(data))
    p = run(cli, "inspect", out, "--json")
    assert p.returncode == 1
    problems = json.loads(p.stdout)["problems"]
    assert len(problems) == 1 and "differ from the manifest" in problems[0]
    (out / "kernels.sm_90.cubin").unlink()
    p = run(cli, "inspect", out)
    assert p.returncode == 1 and "kernels.sm_90.cubin" in p.stderr


def test_a_compile_error_shows_nvrtcs_log_and_writes_nothing(cli, tmp_path):
    bad = tmp_path / "broken.cu"
    bad.write_text('extern "C" __global__ void k(float* x) { x[0] = undefined_name; }\n')
    out = tmp_path / "cubins"
    p = run(cli, "produce", bad, "--arch", "sm_86,sm_90", "-o", out)
    assert p.returncode == 2
    assert "broken.cu" in p.stderr and "does not compile for sm_86" in p.stderr and "undefined_name" in p.stderr
    assert not out.exists()


@pytest.mark.parametrize("arch", ["sm_8", "gfx90a", "sm_90x", ""])
def test_a_malformed_architecture_is_refused(cli, source, tmp_path, arch):
    p = run(cli, "produce", source, "--arch", arch, "-o", tmp_path / "out")
    assert p.returncode == 2
    assert "error:" in p.stderr
    assert not (tmp_path / "out").exists()


def test_a_file_that_is_no_cubin_is_a_clear_error(cli, tmp_path):
    junk = tmp_path / "junk.cubin"
    junk.write_bytes(b"\x7fELF" + bytes(100))
    p = run(cli, "inspect", junk)
    assert p.returncode == 2 and "not a valid cubin" in p.stderr and "junk.cubin" in p.stderr
    (tmp_path / "manifest.json").write_text("{not json")
    p = run(cli, "inspect", tmp_path)
    assert p.returncode == 2 and "manifest" in p.stderr
