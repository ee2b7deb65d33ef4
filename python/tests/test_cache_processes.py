"""open_engine across processes: 8 processes opening one missing engine build it once; a
process killed with SIGKILL while building or writing leaves nothing that opens as valid; a
write that fails (file-size limit: EFBIG, the same path as a full disk) leaves nothing."""

from __future__ import annotations

import json
import os
import pathlib
import resource
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import tensoracle

import cache_model as cm

WORKER = pathlib.Path(cm.__file__)


def worker(*args, **popen):
    return subprocess.Popen([sys.executable, str(WORKER), *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **popen)


def result(p, timeout=120):
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def wait_for(predicate, what, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.0005)


def engines(cache: pathlib.Path):
    return sorted(p.name for p in cache.glob("*.engine")) if cache.exists() else []


def temporaries(cache: pathlib.Path):
    return sorted(p.name for p in cache.iterdir() if ".tmp-" in p.name) if cache.exists() else []


def test_eight_processes_opening_a_missing_engine_build_it_once(tmp_path):
    weights, counter, cache, go = tmp_path / "w.safetensors", tmp_path / "calls.txt", tmp_path / "cache", tmp_path / "go"
    cm.write_weights(weights)
    procs = [worker("open", cache, weights, counter, "--ready", tmp_path / f"ready{i}", "--go", go, "--sleep", 0.5)
             for i in range(8)]
    try:
        # All eight are past `import tensoracle` and waiting: release them at once.
        wait_for(lambda: all((tmp_path / f"ready{i}").exists() for i in range(8)), "8 workers")
        go.write_text("go")
        results = [result(p) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert cm.calls(counter) == 1, "the graph function ran once across the 8 processes"
    assert sum(r["built"] for r in results) == 1
    assert len({r["identity"] for r in results}) == 1 and len({r["path"] for r in results}) == 1
    for r in results:
        np.testing.assert_array_equal(np.array(r["value"], np.float32), cm.expected())
    assert temporaries(cache) == []


def test_killed_while_building_leaves_nothing_and_the_next_open_rebuilds(tmp_path):
    weights, counter, cache, marker = (tmp_path / "w.safetensors", tmp_path / "calls.txt", tmp_path / "cache",
                                       tmp_path / "building")
    cm.write_weights(weights)
    p = worker("hang", cache, weights, counter, marker)
    try:
        wait_for(marker.exists, "the graph function to start")
        # The process holds the entry's lock now; kill it there.
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == -signal.SIGKILL
    assert engines(cache) == [] and not list(cache.glob("linear-*.json"))
    h = cm.open_model(cache, weights, counter)  # the kernel released the dead process's lock
    assert h.built and cm.calls(counter) == 2
    np.testing.assert_array_equal(cm.run(h), cm.expected())


def test_killed_while_writing_leaves_nothing_valid_and_temporaries_are_cleaned(tmp_path):
    # 64 MiB of weights: the write and its fsync take long enough to stop the writer midway.
    k, n = 4096, 4096
    weights, counter, cache = tmp_path / "w.safetensors", tmp_path / "calls.txt", tmp_path / "cache"
    cm.write_weights(weights, k, n)
    for attempt in range(3):
        p = worker("open", cache, weights, counter, "--k", k, "--n", n, *(["--force-rebuild"] if attempt else []))
        try:
            wait_for(lambda: [t for t in temporaries(cache) if ".engine.tmp-" in t] or p.poll() is not None,
                     "the engine's temporary file")
            p.send_signal(signal.SIGSTOP)  # frozen mid-write: look before killing
            caught = [t for t in temporaries(cache) if ".engine.tmp-" in t] and engines(cache) == []
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=30)
        finally:
            if p.poll() is None:
                p.kill()
        if caught:
            break
        # The rename won the race (the whole file was written): that entry is complete and
        # valid; try again, replacing it.
        for e in cache.glob("*.engine"):
            e.unlink()
    else:
        pytest.fail("could not stop the writer before its rename in 3 attempts")
    assert p.returncode == -signal.SIGKILL
    leftovers = temporaries(cache)
    assert any(".engine.tmp-" in t for t in leftovers), "the partial file is there, under a temporary name"
    assert engines(cache) == [], "nothing under the entry's name"
    assert tensoracle.cache.list(cache) == []
    h = cm.open_model(cache, weights, counter, k=k, n=n)
    assert h.built
    assert temporaries(cache) == [], "the next build removed the leftovers"
    out = cm.run(h, k)
    np.testing.assert_array_equal(out, cm.expected(k, n))


def limit_file_size():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() then fails with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))


def test_failed_write_leaves_no_partial_file_and_is_not_remembered(tmp_path):
    k, n = 512, 256  # 512 KiB of weights: above the 64 KiB limit
    weights, counter, cache = tmp_path / "w.safetensors", tmp_path / "calls.txt", tmp_path / "cache"
    cm.write_weights(weights, k, n)
    r = result(worker("open", cache, weights, counter, "--k", k, "--n", n, preexec_fn=limit_file_size))
    assert r.get("errno") == 27, r  # EFBIG
    assert ".engine" in r["message"] and str(cache) in r["message"], r["message"]
    assert engines(cache) == [] and not list(cache.glob("linear-*.json")) and temporaries(cache) == []
    assert cm.calls(counter) == 1
    h = cm.open_model(cache, weights, counter, k=k, n=n)
    assert h.built and cm.calls(counter) == 2, "the failed build was not remembered"
    np.testing.assert_array_equal(cm.run(h, k), cm.expected(k, n))


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a 64 KiB tmpfs (a real ENOSPC) needs root; "
                    "test_failed_write_leaves_no_partial_file_and_is_not_remembered covers failed writes")
def test_full_disk_leaves_no_partial_file(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    # mode=0700: a tmpfs is 1777 by default, a folder the cache refuses (others can write it).
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(cache)],
                           capture_output=True, text=True)
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mount.stderr.strip()}")
    try:
        k, n = 512, 256
        weights, counter = tmp_path / "w.safetensors", tmp_path / "calls.txt"
        cm.write_weights(weights, k, n)
        with pytest.raises(OSError) as e:
            cm.open_model(cache, weights, counter, k=k, n=n)
        assert e.value.errno == 28 and ".engine" in str(e.value)  # ENOSPC
        assert engines(cache) == [] and temporaries(cache) == []
    finally:
        subprocess.run(["umount", str(cache)], check=True)
