"""examples/cache_reopen.py runs: three processes, the first builds, the others reopen without
calling the graph function, all with the same result."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "cache_reopen.py"


def test_cache_reopen_example(tmp_path):
    r = subprocess.run([sys.executable, str(EXAMPLE), "--dir", str(tmp_path)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.count("graph function called") == 1
    opens = re.findall(r"^  (built|reopened) (linear-[0-9a-f]{32}\.engine) in .* ms; result\[0, :3\] = (.*)$", out,
                       re.MULTILINE)
    assert [o[0] for o in opens] == ["built", "reopened", "reopened"]
    assert len({o[1] for o in opens}) == 1 and len({o[2] for o in opens}) == 1
    assert "linear (graph_version 1)" in out.split("cache folder:")[1]
