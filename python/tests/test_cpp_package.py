"""The C++ library inside the Python package: `tensoracle/libtensoracle.so`, linked by the
extension and the command-line program, and the CMake package and pkg-config file beside it
(tensoracle.cmake_prefix_path()), with which a C++ user of a pip-installed tensoracle builds a
program. Builds examples/precision/linear.cpp both ways and runs each program twice (engines
built, then reopened from the cache)."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

import tensoracle

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "precision"
PACKAGE = pathlib.Path(tensoracle.__file__).resolve().parent


def tool(name: str) -> str:
    # CMake and Ninja come from the environment's bin/ (PyPI), beside this Python.
    here = pathlib.Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed (scripts/setup-venv.sh installs it into .venv)")
    return found


def run_twice(program: pathlib.Path, folder: pathlib.Path) -> list[str]:
    summaries = []
    for _ in range(2):
        p = subprocess.run([str(program), "--dir", str(folder)], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        assert "all lower precisions accepted" in p.stdout, p.stdout
        m = re.search(r"\d+ of \d+ engines reopened from the cache, \d+ built", p.stdout)
        assert m, p.stdout
        summaries.append(m.group(0))
    return summaries


EXPECTED = ["0 of 4 engines reopened from the cache, 4 built", "4 of 4 engines reopened from the cache, 0 built"]


def test_the_extension_and_the_program_share_one_library():
    lib = PACKAGE / "libtensoracle.so"
    assert lib.is_file()
    # One file, no versioned copies (a wheel would hold each link as a full copy).
    assert sorted(p.name for p in PACKAGE.glob("libtensoracle.so*")) == ["libtensoracle.so"]
    native = next(PACKAGE.glob("_native*.so"))
    # The extension is small: the core is in the library, not in it.
    assert native.stat().st_size * 10 < lib.stat().st_size
    maps = pathlib.Path("/proc/self/maps").read_text()
    assert str(lib) in maps, "the extension did not load the package's libtensoracle.so"


def test_find_package_from_the_python_package(tmp_path):
    build = tmp_path / "build"
    configure = [tool("cmake"), "-S", str(EXAMPLE), "-B", str(build), "-G", "Ninja",
                 f"-DCMAKE_MAKE_PROGRAM={tool('ninja')}", f"-DCMAKE_PREFIX_PATH={tensoracle.cmake_prefix_path()}"]
    p = subprocess.run(configure, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    p = subprocess.run([tool("cmake"), "--build", str(build)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert run_twice(build / "example_precision_linear", tmp_path / "run") == EXPECTED


def test_pkg_config_from_the_python_package(tmp_path):
    pkg_config = shutil.which("pkg-config") or shutil.which("pkgconf")
    if pkg_config is None:
        pytest.fail("pkg-config is not installed (scripts/apt-packages.txt: pkgconf)")
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(tensoracle.cmake_prefix_path(), "lib", "pkgconfig"))
    flags = subprocess.run([pkg_config, "--cflags", "--libs", "tensoracle"], capture_output=True, text=True,
                           env=env, check=True).stdout.split()
    libdir = subprocess.run([pkg_config, "--variable=libdir", "tensoracle"], capture_output=True, text=True,
                            env=env, check=True).stdout.strip()
    assert pathlib.Path(libdir).resolve() == PACKAGE
    program = tmp_path / "linear"
    p = subprocess.run(["g++", "-std=c++20", "-O1", str(EXAMPLE / "linear.cpp"), "-o", str(program), *flags,
                        f"-Wl,-rpath,{libdir}"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert run_twice(program, tmp_path / "run") == EXPECTED
