"""examples/precision: the Python program builds, reopens in a new process and accepts every
lower precision by the reference's limits; the C++ program (built by the standalone C++ build,
run by CTest) prints the same table from the same fixture."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "precision" / "linear.py"
ROW = re.compile(r"^(bf16|int8|fp8)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(accepted|REJECTED)$")


def table(output: str) -> dict[str, tuple[str, ...]]:
    return {m.group(1): m.groups()[1:] for line in output.splitlines() if (m := ROW.match(line))}


def cpp_example() -> pathlib.Path | None:
    """The C++ example from $TENSORACLE_CPP_BUILD or the Makefile's build/cpp."""
    for build in (os.environ.get("TENSORACLE_CPP_BUILD"), ROOT / "build" / "cpp"):
        if build:
            path = pathlib.Path(build) / "examples" / "precision" / "example_precision_linear"
            if path.is_file():
                return path
    return None


@pytest.fixture(scope="module")
def python_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("linear-py")
    p = subprocess.run([sys.executable, str(EXAMPLE), "--dir", str(folder)], capture_output=True, text=True, timeout=300)
    return p, folder


def test_python_example_accepts_every_lower_precision(python_run):
    p, folder = python_run
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("built ") == 4
    assert "reopened 4 of 4 engines from the cache (graph function not called)" in p.stdout
    rows = table(p.stdout)
    assert set(rows) == {"bf16", "int8", "fp8"}
    for precision, (max_abs, rel_l2, cosine, outside, atol, l2, verdict) in rows.items():
        assert verdict == "accepted" and outside == "0"
        assert 1e-4 < float(max_abs) <= float(atol) and float(rel_l2) < float(l2) and 0.99 < float(cosine) < 1
    assert len(list((folder / "cache").glob("linear-*.engine"))) == 4


def test_python_example_fails_when_a_limit_is_broken(tmp_path):
    """The gate is real: tighten bf16's limit below its error and the program exits 1."""
    script = (
        "import pathlib, sys; sys.path.insert(0, sys.argv[1]); import linear\n"
        "linear.LIMITS['bf16'] = (1e-4, 0.01)\n"
        "sys.exit(linear.reuse(pathlib.Path(sys.argv[2])))\n"
    )
    subprocess.run([sys.executable, str(EXAMPLE), "build", "--dir", str(tmp_path)], check=True, capture_output=True)
    p = subprocess.run([sys.executable, "-c", script, str(EXAMPLE.parent), str(tmp_path)], capture_output=True, text=True)
    assert p.returncode == 1, p.stdout + p.stderr
    assert table(p.stdout)["bf16"][-1] == "REJECTED" and table(p.stdout)["int8"][-1] == "accepted"


def test_cpp_example_prints_the_same_table(python_run, tmp_path):
    binary = cpp_example()
    if binary is None:
        pytest.skip("the C++ example is not built (make cpp, or set TENSORACLE_CPP_BUILD); CTest runs it there")
    p = subprocess.run([str(binary), "--dir", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert table(p.stdout) == table(python_run[0].stdout)
    # Same weight bytes, same declaration: the C++ program's engines have the Python ones' identities.
    names = lambda folder: sorted(f.name for f in (folder / "cache").glob("*.engine"))  # noqa: E731
    assert names(tmp_path) == names(python_run[1])
