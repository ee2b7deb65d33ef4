"""The user guide cannot rot: every page of docs/ (but architecture.md, the internal notes) is
run block by block by docs_runner.py in a fresh folder and a fresh process; its ```cpp blocks
are compiled and run by CTest (checked here against CTest's list when a C++ build exists); the
measured error table of the precision page is what examples/precision/linear.py prints."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from docs_runner import blocks, line_matches, output_matches

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.glob("*.md") if p.name != "architecture.md")
RUNNER = pathlib.Path(__file__).with_name("docs_runner.py")
# The guide's reading order (index.md links them in this order).
ORDER = ["install", "quickstart", "graphs", "tensorrt", "onnx", "engines", "execution", "precision", "compare", "optimization",
         "plugins", "convert", "cli", "errors", "performance"]


def test_the_guide_has_its_pages_in_order():
    assert [p.stem for p in PAGES if p.stem != "index"] == sorted(ORDER)
    index = (DOCS / "index.md").read_text()
    links = re.findall(r"\]\((\w+)\.md\)", index)
    assert [link for link in dict.fromkeys(links) if link in ORDER] == ORDER


def test_pages_link_only_to_pages_that_exist():
    for page in PAGES:
        for target in re.findall(r"\]\(([\w-]+\.md)(?:#[\w-]+)?\)", page.read_text()):
            assert (DOCS / target).exists(), (page.name, target)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_every_block_of_the_page_runs(page, cli, tmp_path):
    run_page(page, cli, tmp_path)


def run_page(page, cli, tmp_path):
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(pathlib.Path(cli).parent), str(pathlib.Path(sys.executable).parent), env["PATH"]])
    env["XDG_CACHE_HOME"] = str(tmp_path / "work" / "cache")
    env["PYTHONPATH"] = ""
    p = subprocess.run([sys.executable, str(RUNNER), str(page), str(tmp_path / "work")], env=env,
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-5000:] + p.stderr[-5000:]


def test_every_block_of_the_readme_runs(cli, tmp_path):
    # The README's "Using it" is a program too: its snippets run in order, their output checked.
    run_page(ROOT / "README.md", cli, tmp_path)


def test_runner_matching_rules():
    assert line_matches("max 0.00472 rel 0.00338", "max 0.00471 rel 0.00339")  # within 2%
    assert not line_matches("max 0.00472", "max 0.00500")
    assert not line_matches("passed", "FAILED")
    assert line_matches("built fp32 engine linear-fp32-....engine", "built fp32 engine linear-fp32-abc123.engine")
    assert output_matches(["a", "...", "z"], ["a", "b", "c", "z"])
    assert output_matches(["a", "...", "z"], ["a", "z"])
    assert not output_matches(["a", "z"], ["a", "b", "z"])
    found = blocks("x\n```python\nprint(1)\n```\n```console\n$ ls\n```\n")
    assert found == [("python", "print(1)\n", 3), ("console", "$ ls\n", 6)]


def test_runner_reports_a_wrong_output(tmp_path):
    page = tmp_path / "bad.md"
    page.write_text("# bad\n\n```console\n$ echo hello\ngoodbye\n```\n")
    p = subprocess.run([sys.executable, str(RUNNER), str(page), str(tmp_path / "w")], capture_output=True, text=True)
    assert p.returncode == 1 and "bad.md:4: `$ echo hello` printed" in p.stderr
    page.write_text("```sh\ntensoracle compare a b\n```\n")
    p = subprocess.run([sys.executable, str(RUNNER), str(page), str(tmp_path / "w")], capture_output=True, text=True)
    assert p.returncode == 1 and "is not run by the tests" in p.stderr
    page.write_text("```python\nassert 1 == 2\n```\n")
    p = subprocess.run([sys.executable, str(RUNNER), str(page), str(tmp_path / "w")], capture_output=True, text=True)
    assert p.returncode == 1 and "AssertionError" in p.stderr


def cpp_build() -> pathlib.Path | None:
    for build in (os.environ.get("TENSORACLE_CPP_BUILD"), ROOT / "build" / "cpp"):
        if build and (pathlib.Path(build) / "CTestTestfile.cmake").exists():
            return pathlib.Path(build)
    return None


def test_ctest_runs_every_cpp_block():
    count = sum(lang == "cpp" for page in PAGES for lang, _, _ in blocks(page.read_text()))
    assert count >= 4  # the guide shows C++ beside Python
    build = cpp_build()
    if build is None:
        pytest.skip("no configured C++ build (make cpp, or set TENSORACLE_CPP_BUILD): CTest runs the C++ blocks there")
    ctest = shutil.which("ctest") or str(pathlib.Path(sys.executable).with_name("ctest"))
    p = subprocess.run([ctest, "--test-dir", str(build), "-N", "-L", "docs"], capture_output=True, text=True, check=True)
    listed = re.findall(r"Test\s+#\d+: (docs\.\S+)", p.stdout)
    if len(listed) != count:
        pytest.fail(f"CTest lists {len(listed)} docs tests but the guide has {count} ```cpp blocks: "
                    f"reconfigure {build} (cmake -S cpp -B {build})")


def test_the_measured_table_is_what_the_example_prints(tmp_path):
    text = (DOCS / "precision.md").read_text()
    rows = dict(re.findall(r"^\| (bf16|int8|fp8) \| ([^\n]+) \|$", text, re.M))
    assert set(rows) == {"bf16", "int8", "fp8"}, "precision.md must keep its measured table"
    p = subprocess.run([sys.executable, str(ROOT / "examples" / "precision" / "linear.py"), "--dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    printed = {m.group(1): m.group(2).split() for line in p.stdout.splitlines()
               if (m := re.match(r"^(bf16|int8|fp8)\s+(.*)$", line))}
    for precision, cells in rows.items():
        documented = [c.strip() for c in cells.split("|")]
        # | max abs error | relative L2 | cosine | outside | atol | L2 limit | result |
        assert line_matches(" ".join(documented), " ".join(printed[precision])), (precision, documented, printed[precision])
