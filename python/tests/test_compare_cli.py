"""`tensoracle compare` on files NumPy, the official safetensors package and tensoracle write:
tensors matched by name, the same numbers as compare_outputs, exit codes (0 / 1 failed check /
2 bad input), --json and the SVG of --plot."""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy

import tensoracle
import tensoracle.safetensors as tst

SVG = "{http://www.w3.org/2000/svg}"


def run(cli, *args):
    return subprocess.run([cli, "compare", *map(str, args)], capture_output=True, text=True, timeout=120)


def outputs(seed=0, noise=0.01, shape=(32, 16)):
    rng = np.random.default_rng(seed)
    reference = rng.standard_normal(shape).astype(np.float32)
    candidate = (reference + noise * rng.standard_normal(shape)).astype(np.float32)
    return candidate, reference


def metrics_json(cli, *args):
    p = run(cli, *args, "--json")
    assert p.returncode in (0, 1), p.stderr
    return p.returncode, json.loads(p.stdout)


def expect_same(entry, candidate, reference, atol=None, rtol=None):
    want = tensoracle.compare_outputs(candidate, reference, atol=atol, rtol=rtol).to_dict()
    for key, value in want.items():
        got = entry[key]
        if key == "shape":
            assert tuple(got) == value
        else:
            assert got == value, key


def test_npy_files_and_exit_codes(cli, tmp_path):
    candidate, reference = outputs()
    np.save(tmp_path / "c.npy", candidate)
    np.save(tmp_path / "r.npy", reference)
    p = run(cli, tmp_path / "c.npy", tmp_path / "r.npy")
    assert p.returncode == 0, p.stderr
    assert "no tolerances given" in p.stdout and "(32, 16)" in p.stdout and "float32" in p.stdout
    worst = float(np.max(np.abs(candidate.astype(np.float64) - reference)))
    p = run(cli, tmp_path / "c.npy", tmp_path / "r.npy", "--atol", worst, "--rtol", 0)
    assert p.returncode == 0 and "passed: 1 tensor within tolerance" in p.stdout, p.stdout + p.stderr
    p = run(cli, tmp_path / "c.npy", tmp_path / "r.npy", "--atol", worst / 2, "--rtol", 0)
    assert p.returncode == 1 and "FAILED: 1 of 1" in p.stdout, p.stdout + p.stderr
    code, j = metrics_json(cli, tmp_path / "c.npy", tmp_path / "r.npy", "--atol", worst / 2, "--rtol", 0)
    assert code == 1 and j["passed"] is False and j["tensors"][0]["name"] is None
    expect_same(j["tensors"][0], candidate, reference, worst / 2, 0)


def test_npz_stored_and_deflated_matched_by_name(cli, tmp_path):
    c1, r1 = outputs(1)
    c2, r2 = outputs(2, shape=(5,))
    idx = np.arange(6, dtype=np.int64).reshape(2, 3)
    np.savez(tmp_path / "r.npz", logits=r1, scores=r2, index=idx, scalar=np.float64(1.5), empty=np.zeros((0, 2)))
    np.savez_compressed(tmp_path / "c.npz", scores=c2, logits=c1, index=idx + (idx == 4), scalar=np.float64(1.5),
                        empty=np.zeros((0, 2)))
    code, j = metrics_json(cli, tmp_path / "c.npz", tmp_path / "r.npz", "--atol", 0.05, "--rtol", 0.01)
    names = [t["name"] for t in j["tensors"]]
    assert names == sorted(["logits", "scores", "index", "scalar", "empty"])
    by = {t["name"]: t for t in j["tensors"]}
    expect_same(by["logits"], c1, r1, 0.05, 0.01)
    expect_same(by["scores"], c2, r2, 0.05, 0.01)
    expect_same(by["index"], idx + (idx == 4), idx, 0.05, 0.01)
    assert by["index"]["outside_tolerance_count"] == 1 and by["index"]["passed"] is False
    assert by["scalar"]["shape"] == [] and by["scalar"]["max_absolute_error"] == 0.0
    assert by["empty"]["element_count"] == 0 and by["empty"]["outside_tolerance_fraction"] is None
    assert code == 1 and j["passed"] is False


def test_safetensors_against_npz_and_narrow_types(cli, tmp_path):
    c, r = outputs(3)
    safetensors.numpy.save_file({"out": c}, str(tmp_path / "c.safetensors"))  # the official writer
    np.savez(tmp_path / "r.npz", out=r)
    code, j = metrics_json(cli, tmp_path / "c.safetensors", tmp_path / "r.npz")
    assert code == 0 and j["passed"] is None and j["atol"] is None
    expect_same(j["tensors"][0], c, r)
    # bfloat16 and fp8 live in safetensors files (np.save cannot keep them).
    for dtype in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, np.float16):
        tst.save_file({"out": c.astype(dtype)}, tmp_path / "c16.safetensors")
        tst.save_file({"out": r.astype(dtype)}, tmp_path / "r16.safetensors")
        code, j = metrics_json(cli, tmp_path / "c16.safetensors", tmp_path / "r16.safetensors", "--atol", 0.1, "--rtol", 0.1)
        assert j["tensors"][0]["dtype"] == np.dtype(dtype).name
        expect_same(j["tensors"][0], c.astype(dtype), r.astype(dtype), 0.1, 0.1)


def test_one_npy_against_a_file_of_one_tensor(cli, tmp_path):
    c, r = outputs(4)
    np.save(tmp_path / "c.npy", c)
    tst.save_file({"result": r}, tmp_path / "r.safetensors")
    code, j = metrics_json(cli, tmp_path / "c.npy", tmp_path / "r.safetensors")
    assert code == 0 and j["tensors"][0]["name"] == "result"
    tst.save_file({"result": r, "other": r}, tmp_path / "two.safetensors")
    p = run(cli, tmp_path / "c.npy", tmp_path / "two.safetensors")
    assert p.returncode == 2 and "holds one unnamed array" in p.stderr and "holds 2 tensors" in p.stderr


def test_nonfinite_values_fail_only_with_tolerances(cli, tmp_path):
    c, r = outputs(5)
    c[3, 4] = np.nan
    np.save(tmp_path / "c.npy", c)
    np.save(tmp_path / "r.npy", r)
    assert run(cli, tmp_path / "c.npy", tmp_path / "r.npy").returncode == 0
    p = run(cli, tmp_path / "c.npy", tmp_path / "r.npy", "--atol", 10, "--rtol", 10)
    assert p.returncode == 1 and "not finite" in p.stdout
    code, j = metrics_json(cli, tmp_path / "c.npy", tmp_path / "r.npy", "--atol", 10, "--rtol", 10)
    t = j["tensors"][0]
    assert t["candidate_nonfinite_count"] == 1 and t["max_absolute_error"] is None and t["passed"] is False


def test_bad_input_exits_2_with_a_message(cli, tmp_path):
    c, r = outputs(6)
    np.save(tmp_path / "c.npy", c)
    np.save(tmp_path / "r.npy", r)
    np.save(tmp_path / "r64.npy", r.astype(np.float64))
    np.save(tmp_path / "rt.npy", r.T.copy())
    np.savez(tmp_path / "a.npz", x=c, y=c)
    np.savez(tmp_path / "b.npz", x=r, z=r)
    np.save(tmp_path / "bf16.npy", c.astype(ml_dtypes.bfloat16))
    (tmp_path / "junk.bin").write_bytes(b"not an array file at all")
    cases = [
        ((tmp_path / "c.npy", tmp_path / "r.npy", "--atol", 0.1), "--atol without --rtol"),
        ((tmp_path / "c.npy", tmp_path / "r.npy", "--rtol", 0.1), "--rtol without --atol"),
        ((tmp_path / "c.npy", tmp_path / "r.npy", "--atol", -1, "--rtol", 0), "atol must be >= 0"),
        ((tmp_path / "c.npy", tmp_path / "r64.npy"),
         f"[compare] {tmp_path / 'c.npy'} vs {tmp_path / 'r64.npy'}: dtype mismatch: candidate float32, reference float64"),
        ((tmp_path / "c.npy", tmp_path / "rt.npy"), "shape mismatch: candidate (32, 16), reference (16, 32)"),
        ((tmp_path / "a.npz", tmp_path / "b.npz"), "only in " + str(tmp_path / "a.npz") + ": 'y'"),
        ((tmp_path / "bf16.npy", tmp_path / "bf16.npy"), "np.save writes ml_dtypes' bfloat16"),
        ((tmp_path / "junk.bin", tmp_path / "r.npy"), "[safetensors] " + str(tmp_path / "junk.bin")),
        ((tmp_path / "missing.npy", tmp_path / "r.npy"), "missing.npy"),
        ((tmp_path / "c.npy",), "REFERENCE is required"),
    ]
    for args, words in cases:
        p = run(cli, *args)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert p.stderr.startswith("error: ") and words in p.stderr, (words, p.stderr)
    np.savez(tmp_path / "ab.npz", x=c, y=c.T.copy())
    np.savez(tmp_path / "ab2.npz", x=r, y=r)
    p = run(cli, tmp_path / "ab.npz", tmp_path / "ab2.npz")
    assert p.returncode == 2, p.stderr
    assert f"[compare] {tmp_path / 'ab.npz'} vs {tmp_path / 'ab2.npz'}, tensor 'y': shape mismatch" in p.stderr


def test_fortran_order_npy(cli, tmp_path):
    c, r = outputs(7)
    np.save(tmp_path / "c.npy", np.asfortranarray(c))
    np.save(tmp_path / "r.npy", r)
    assert b"'fortran_order': True" in (tmp_path / "c.npy").read_bytes()[:128]
    code, j = metrics_json(cli, tmp_path / "c.npy", tmp_path / "r.npy")
    expect_same(j["tensors"][0], c, r)


def parse_svg(path):
    root = ET.parse(path).getroot()
    assert root.tag == SVG + "svg" and float(root.get("width")) > 0 and float(root.get("height")) > 0
    return root


def test_plot_is_a_readable_svg(cli, tmp_path):
    c1, r1 = outputs(8, noise=0.02)
    big_c, big_r = outputs(9, noise=0.02, shape=(300, 200))
    np.savez(tmp_path / "c.npz", small=c1, big=big_c)
    np.savez(tmp_path / "r.npz", small=r1, big=big_r)
    svg = tmp_path / "errors.svg"
    code, j = metrics_json(cli, tmp_path / "c.npz", tmp_path / "r.npz", "--atol", 0.02, "--rtol", 0.01, "--plot", svg)
    assert j["plot"] == str(svg)
    root = parse_svg(svg)
    groups = root.findall(SVG + "g")
    assert len(groups) == 2
    texts = ["".join(t.itertext()) for t in root.iter(SVG + "text")]
    assert any("tensor 'small'" in t for t in texts) and any("tensor 'big'" in t for t in texts)
    assert any("|r|  (reference magnitude)" in t for t in texts)
    by = {t["name"]: t for t in j["tensors"]}
    for g, name, n in ((groups[0], "big", 60_000), (groups[1], "small", 512)):
        circles = g.findall(SVG + "circle")
        bars = [r for r in g.findall(SVG + "rect") if r.get("class") == "bar"]
        # Each bar's tooltip starts with its count; the counts cover every element.
        assert sum(int(b.find(SVG + "title").text.split(":")[0]) for b in bars) == n
        assert len(g.findall(SVG + "line[@class='tolerance']")) == 1
        red = sum(ci.get("class") == "out" for ci in circles)
        if n <= 2000:  # every pair is drawn: the red ones are exactly those outside
            assert len(circles) == n and red == by[name]["outside_tolerance_count"]
        else:  # a sample plus the largest errors, which are all outside here
            assert len(circles) <= 2000 and red >= 200
    # Without tolerances there is no tolerance line, and the text output names the plot.
    p = run(cli, tmp_path / "c.npz", tmp_path / "r.npz", "--plot", tmp_path / "plain.svg")
    assert p.returncode == 0 and f"plot: {tmp_path / 'plain.svg'}" in p.stdout
    assert not parse_svg(tmp_path / "plain.svg").findall(f".//{SVG}line[@class='tolerance']")
