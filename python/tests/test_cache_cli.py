"""`tensoracle cache list|verify|prune|clear`: output, exit codes, and what each removes."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

import tensoracle

import cache_model as cm


@pytest.fixture
def filled(tmp_path):
    """A cache folder with two engines: linear (graph_version 1 and 2)."""
    weights, cache = tmp_path / "w.safetensors", tmp_path / "cache"
    cm.write_weights(weights)
    handles = [cm.open_model(cache, weights, graph_version=v) for v in ("1", "2")]
    return cache, weights, handles


def run(cli, *args, env=None):
    return subprocess.run([cli, "cache", *map(str, args)], capture_output=True, text=True, env=env, timeout=60)


def test_list_json_has_every_field(cli, filled):
    cache, _, (a, b) = filled
    r = run(cli, "list", "--json", "--dir", cache)
    assert r.returncode == 0, r.stderr
    entries = json.loads(r.stdout)
    assert [(e["name"], e["graph_version"], e["identity"]) for e in entries] == [
        ("linear", "1", a.identity),
        ("linear", "2", b.identity),
    ]
    e = entries[0]
    assert set(e) == {"name", "graph_version", "identity", "device", "size", "created", "last_used", "path"}
    assert e["device"].startswith("cpu: ") and e["size"] > a.path.stat().st_size and e["path"] == str(a.path)
    assert e["created"].endswith("Z") and e["created"] <= e["last_used"]


def test_list_table(cli, filled):
    cache, _, (a, _) = filled
    r = run(cli, "list", "--dir", cache)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:4] == ["NAME", "VERSION", "IDENTITY", "DEVICE"]
    assert a.identity[:12] in r.stdout and "cpu: " in r.stdout
    assert lines[-1].startswith("2 entries") and str(cache) in lines[-1]
    empty = run(cli, "list", "--dir", cache / "nothing")
    assert empty.returncode == 0 and "no engines" in empty.stdout


def test_list_uses_the_default_folder(cli, filled, tmp_path):
    _, weights, _ = filled
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    h = cm.open_model(tmp_path / "xdg" / "tensoracle", weights, name="in-default")
    r = run(cli, "list", "--json", env=env)
    assert [e["identity"] for e in json.loads(r.stdout)] == [h.identity]


def test_verify_exits_1_naming_the_corrupt_entry(cli, filled):
    cache, _, (a, b) = filled
    r = run(cli, "verify", "--dir", cache)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 entries verified" in r.stdout
    with open(b.path, "r+b") as f:
        f.seek(-8, os.SEEK_END)
        f.write(b"\0\1\2\3\4\5\6\7")
    r = run(cli, "verify", "--dir", cache)
    assert r.returncode == 1
    assert f"CORRUPT       linear (graph_version 2)  {b.path}" in r.stdout
    assert str(b.path) in r.stderr and r.stderr.startswith("error: 1 of 2 entries corrupt")
    assert f"ok            linear (graph_version 1)  {a.path}" in r.stdout


def test_prune_older_than_and_max_size(cli, filled):
    cache, _, (a, b) = filled
    old = time.time() - 10 * 86400
    os.utime(cache / f"linear-{a.identity}.json", (old, old))
    r = run(cli, "prune", "--older-than", 30, "--dir", cache)
    assert r.returncode == 0 and "0 entries removed" in r.stdout
    r = run(cli, "prune", "--older-than", 7.5, "--dir", cache)
    assert r.returncode == 0, r.stderr
    assert "removed linear (graph_version 1)" in r.stdout and "1 entry removed" in r.stdout
    assert not a.path.exists() and b.path.exists()
    r = run(cli, "prune", "--max-size", "1G", "--dir", cache)
    assert "0 entries removed" in r.stdout and b.path.exists()
    r = run(cli, "prune", "--max-size", "0", "--dir", cache)
    assert r.returncode == 0 and not b.path.exists()


def test_clear_by_name_then_everything(cli, filled):
    cache, weights, (a, b) = filled
    other = cm.open_model(cache, weights, name="other")
    r = run(cli, "clear", "--name", "other", "--dir", cache)
    assert r.returncode == 0 and "1 entry removed" in r.stdout
    assert not other.path.exists() and a.path.exists()
    r = run(cli, "clear", "--dir", cache)
    assert r.returncode == 0 and "2 entries removed" in r.stdout
    assert list(cache.iterdir()) == []
    assert tensoracle.cache.list(cache) == []


@pytest.mark.parametrize(
    "args, message",
    [
        (("prune",), "prune needs --older-than DAYS, --max-size SIZE or both"),
        (("prune", "--max-size", "lots"), "size 'lots' is not a size"),
        (("prune", "--older-than", "-1"), "not a number of days"),
        (("frobnicate",), "A subcommand is required"),
        ((), "A subcommand is required"),
    ],
)
def test_bad_usage_exits_2(cli, tmp_path, args, message):
    r = run(cli, *args, "--dir", tmp_path) if args and args[0] != "frobnicate" else run(cli, *args)
    assert r.returncode == 2
    assert r.stderr.startswith("error: ") and message in r.stderr, r.stderr


def test_verify_of_a_folder_that_is_not_there_is_an_error_not_a_pass(cli, tmp_path):
    """A typo in --dir would read as an empty cache: `verify` would pass with 0 entries."""
    sub = "verify"
    r = run(cli, sub, "--dir", tmp_path / "typo")
    assert r.returncode == 2 and "no such folder" in r.stderr and "typo" in r.stderr, r.stderr
    (tmp_path / "file").write_text("x")
    r = run(cli, sub, "--dir", tmp_path / "file")
    assert r.returncode == 2 and "not a folder" in r.stderr, r.stderr
    assert run(cli, sub, "--dir", tmp_path).returncode == 0  # an empty folder is an empty cache
