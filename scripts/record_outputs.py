"""A pytest plugin that records what every engine run of a test session returned, to compare two
builds of tensoracle bit for bit on the same tests (issue 31: "engines built by the new code
give outputs bit-identical to the old code's").

Each Execution.run's outputs are recorded per test (in call order) as dtype, shape and a SHA-256
of the bytes. Run the same test files against each build, then compare:

    PYTHONPATH=scripts:/tmp/old python -m pytest -p record_outputs --record-outputs=/tmp/old.json \\
        python/tests/test_layers.py ... -m "not gpu"
    PYTHONPATH=scripts python -m pytest -p record_outputs --record-outputs=/tmp/new.json ...
    python scripts/record_outputs.py /tmp/old.json /tmp/new.json

Under pytest-xdist (-n N) each worker writes PATH.gwK and the comparison merges them.

The comparison counts the runs both sessions made (same test, same call index) and lists those
whose bytes differ; tests only one build could run (a newer API) are counted apart.

Timed tactic choice differs between runs, so two builds compared at the default level can differ
where only the timing did. `--record-level N` makes every `BuilderSettings(...)` that does not
name a level use N (1: the heuristic's first tactic, no timing), so both builds choose alike.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import sys

records: dict[str, list] = {}
_current = {"test": None}


def pytest_addoption(parser):
    parser.addoption("--record-outputs", default=None, help="write every engine run's output digests here (JSON)")
    parser.addoption("--record-level", type=int, default=None, help="optimization_level for settings that name none")


def pytest_configure(config):
    if not config.getoption("--record-outputs"):
        return
    import numpy as np
    import tensoracle

    original = tensoracle.Execution.run

    def run(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        test = _current["test"]
        if test is not None:
            entry = {}
            for name in sorted(out):
                a = np.ascontiguousarray(out[name])
                entry[name] = [str(a.dtype), list(a.shape), hashlib.sha256(a.tobytes()).hexdigest()]
            records.setdefault(test, []).append(entry)
        return out

    tensoracle.Execution.run = run

    level = config.getoption("--record-level")
    if level is not None:
        settings = tensoracle.BuilderSettings

        def settings_at_level(*args, **kwargs):
            kwargs.setdefault("optimization_level", level)
            return settings(*args, **kwargs)

        tensoracle.BuilderSettings = settings_at_level


def pytest_runtest_setup(item):
    _current["test"] = item.nodeid


def pytest_runtest_teardown(item):
    _current["test"] = None


def pytest_unconfigure(config):
    path = config.getoption("--record-outputs")
    if path:
        # Under pytest-xdist every worker records its own tests into PATH.<worker>; the
        # comparison merges them.
        worker = os.environ.get("PYTEST_XDIST_WORKER")
        if worker:
            path = f"{path}.{worker}"
        elif not records:
            return  # the controller of an xdist session ran no test itself
        with open(path, "w") as f:
            json.dump(records, f, sort_keys=True)


def load(path: str) -> dict:
    merged: dict = {}
    for part in [path] + sorted(glob.glob(glob.escape(path) + ".gw*")):
        if os.path.exists(part):
            merged.update(json.load(open(part)))
    if not merged:
        sys.exit(f"{path}: no recorded runs (nor {path}.gw* from pytest-xdist workers)")
    return merged


def compare(old_path: str, new_path: str) -> int:
    old = load(old_path)
    new = load(new_path)
    same = differ = 0
    differing = []
    for test in sorted(set(old) & set(new)):
        for i, (a, b) in enumerate(zip(old[test], new[test])):
            if a == b:
                same += 1
            else:
                differ += 1
                differing.append(f"{test} run {i}")
    print(f"runs compared: {same + differ} ({len(set(old) & set(new))} tests); bit-identical: {same}; differing: {differ}")
    print(f"tests recorded by one build only: {len(set(old) ^ set(new))}")
    for line in differing[:50]:
        print("  differs:", line)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(compare(sys.argv[1], sys.argv[2]))
