"""The self-contained wheel (scripts/build-wheel.sh): built and repaired here, installed into a
fresh virtual environment, it must run the quick start with nothing from the build tree or the
system's -dev packages. NumPy, ml_dtypes and safetensors (the example's dependencies) come from
a folder holding only them; LD_LIBRARY_PATH is empty. Every shared library the package's ELF
files load must then be the wheel's own or one the manylinux policy lets a wheel take from the
system (glibc's, libstdc++, libgcc_s, zlib)."""

from __future__ import annotations

import importlib
import os
import pathlib
import re
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# What manylinux wheels may take from the system (PEP 600's policies, the libraries used here).
SYSTEM = re.compile(r"^(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|libz|ld-linux-x86-64)\.so")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
    dist = tmp_path_factory.mktemp("dist")
    venv = pathlib.Path(sys.executable).parent.parent
    p = subprocess.run(["bash", str(ROOT / "scripts" / "build-wheel.sh"), str(dist), str(venv)], cwd=ROOT,
                       capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stdout + p.stderr
    wheels = list(dist.glob("tensoracle-*-manylinux_*.whl"))
    assert len(wheels) == 1, p.stdout
    return wheels[0]


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("fresh")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    p = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                        "--disable-pip-version-check", str(wheel)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    # The example's Python dependencies, alone in a folder of their own (not this environment's
    # site-packages, which holds the tensoracle under test too).
    deps = root / "deps"
    deps.mkdir()
    for name in ("numpy", "ml_dtypes", "safetensors"):
        folder = pathlib.Path(importlib.import_module(name).__file__).parent
        (deps / name).symlink_to(folder)
        for extra in folder.parent.glob(f"{name}.libs"):  # numpy's bundled OpenBLAS
            (deps / extra.name).symlink_to(extra)
    return root


def fresh_env(root: pathlib.Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "LD_", "TENSORACLE"))}
    env.update(PYTHONPATH=str(root / "deps"), LD_LIBRARY_PATH="", PATH=f"{root / 'venv' / 'bin'}:/usr/bin:/bin")
    return env


def test_the_wheel_carries_what_the_cpu_backend_needs(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    carried = [n for n in names if n.startswith("tensoracle.libs/")]
    assert any("libdnnl" in n for n in carried), carried
    assert any("libgomp" in n for n in carried), carried
    assert "tensoracle/libtensoracle.so" in names
    assert sum(n.startswith("tensoracle/libtensoracle") and n.endswith(".so") for n in names) <= 2  # no copies


def test_the_quick_start_runs_from_a_fresh_environment(installed, tmp_path):
    python = installed / "venv" / "bin" / "python"
    p = subprocess.run([str(python), str(ROOT / "examples" / "precision" / "linear.py"), "--dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=600, env=fresh_env(installed), cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "all lower precisions accepted" in p.stdout, p.stdout
    where = subprocess.run([str(python), "-c", "import tensoracle; print(tensoracle.__file__)"], capture_output=True,
                           text=True, env=fresh_env(installed), check=True).stdout
    assert where.startswith(str(installed / "venv")), where


def test_the_program_runs_from_a_fresh_environment(installed):
    p = subprocess.run([str(installed / "venv" / "bin" / "tensoracle"), "--version"], capture_output=True, text=True,
                       timeout=60, env=fresh_env(installed))
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("tensoracle 0.1.0"), p.stdout
    assert "cpu backend: OpenBLAS" in p.stdout, p.stdout


def test_every_library_loaded_is_the_wheels_or_allowed_from_the_system(installed):
    venv = installed / "venv"
    package = next(venv.glob("lib/python3*/site-packages/tensoracle"))
    files = [package / "libtensoracle.so", next(package.glob("_native*.so")), venv / "bin" / "tensoracle"]
    for f in files:
        out = subprocess.run(["ldd", str(f)], capture_output=True, text=True, env=fresh_env(installed), check=True).stdout
        for line in out.splitlines():
            m = re.match(r"\s*(\S+) => (.*) \(0x", line) or re.match(r"\s*(\S+) => (not found)", line)
            if not m:
                continue
            name, path = m.groups()
            assert path != "not found", f"{f.name}: {name} not found\n{out}"
            assert path.startswith(str(venv)) or SYSTEM.match(name), f"{f.name} loads {name} from {path}\n{out}"
