"""tensoracle.compare_outputs against the same metrics computed with NumPy in float64: every
dtype (ml_dtypes' bfloat16 and fp8 included), the rules for None, the edge cases (all equal,
zeros, NaN/inf in either array, empty and 0-d arrays, sums that overflow float32), the array
sources (NumPy, buffer protocol, DLPack), and argument errors."""

from __future__ import annotations

import array
import math

import ml_dtypes
import numpy as np
import pytest

import tensoracle

FLOATS = [
    np.float64,
    np.float32,
    np.float16,
    ml_dtypes.bfloat16,
    ml_dtypes.float8_e4m3fn,
    ml_dtypes.float8_e5m2,
    ml_dtypes.float8_e4m3fnuz,
    ml_dtypes.float8_e5m2fnuz,
]
INTEGERS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.bool_]
FIELDS = [
    "shape",
    "dtype",
    "element_count",
    "candidate_nonfinite_count",
    "reference_nonfinite_count",
    "max_absolute_error",
    "relative_l2_error",
    "cosine_similarity",
    "outside_tolerance_count",
    "outside_tolerance_fraction",
]


def numpy_metrics(candidate, reference, atol=None, rtol=None):
    """The metrics the plain NumPy way, in float64."""
    c = np.asarray(candidate).astype(np.float64).ravel()
    r = np.asarray(reference).astype(np.float64).ravel()
    with np.errstate(all="ignore"):  # NaN and inf inputs, overflowing norms: the results say so
        return _numpy_metrics(c, r, atol, rtol)


def _numpy_metrics(c, r, atol, rtol):
    d = c - r
    out = {
        "candidate_nonfinite_count": int(np.count_nonzero(~np.isfinite(c))),
        "reference_nonfinite_count": int(np.count_nonzero(~np.isfinite(r))),
        "max_absolute_error": float(np.max(np.abs(d))) if d.size else None,
        "relative_l2_error": float(np.linalg.norm(d) / np.linalg.norm(r)) if np.linalg.norm(r) else None,
        "cosine_similarity": float(np.dot(c, r) / (np.linalg.norm(c) * np.linalg.norm(r)))
        if np.linalg.norm(c) and np.linalg.norm(r)
        else None,
    }
    if atol is not None and rtol is not None:
        outside = int(np.count_nonzero(~np.isclose(c, r, rtol=rtol, atol=atol)))
        out["outside_tolerance_count"] = outside
        out["outside_tolerance_fraction"] = outside / c.size if c.size else None
    return out


def assert_matches(got, want):
    for key, value in want.items():
        g = getattr(got, key)
        if value is None:
            assert g is None, key
        elif isinstance(value, int):
            assert g == value, key
        else:
            assert g == pytest.approx(value, rel=1e-12, abs=1e-15), key


def sample(dtype, shape, seed, noise):
    rng = np.random.default_rng(seed)
    reference = rng.uniform(-4, 4, shape)
    candidate = reference + noise * rng.standard_normal(shape)
    return candidate.astype(dtype), reference.astype(dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_float_metrics_match_numpy(dtype):
    candidate, reference = sample(dtype, (37, 53), seed=1, noise=0.05)
    atol, rtol = 0.02, 0.01
    got = tensoracle.compare_outputs(candidate, reference, atol=atol, rtol=rtol)
    want = numpy_metrics(candidate, reference, atol, rtol)
    assert_matches(got, want)
    assert got.shape == (37, 53) and got.element_count == 37 * 53
    assert got.dtype == np.dtype(dtype)
    assert got.max_absolute_error > 0 and 0 < want["outside_tolerance_count"] < got.element_count


@pytest.mark.parametrize("dtype", INTEGERS, ids=lambda d: np.dtype(d).name)
def test_integer_arrays_count_tolerances_only(dtype):
    rng = np.random.default_rng(2)
    info = np.iinfo(dtype) if dtype is not np.bool_ else None
    if info is None:
        reference = rng.integers(0, 2, 500).astype(bool)
        candidate = reference.copy()
        candidate[::7] = ~candidate[::7]
    else:
        reference = rng.integers(info.min, info.max, 500, dtype=dtype, endpoint=True)
        candidate = reference.copy()
        candidate[::7] = candidate[::7] // 2
    atol = 0 if info is None else 1
    got = tensoracle.compare_outputs(candidate, reference, atol=atol, rtol=0)
    assert got.candidate_nonfinite_count == 0 and got.reference_nonfinite_count == 0
    assert got.max_absolute_error is None and got.relative_l2_error is None and got.cosine_similarity is None
    want = numpy_metrics(candidate, reference, atol, 0)
    assert got.outside_tolerance_count == want["outside_tolerance_count"] > 0
    assert got.outside_tolerance_fraction == want["outside_tolerance_fraction"]
    assert got.dtype == np.dtype(dtype)


def test_all_equal():
    a = np.linspace(-3, 3, 1001, dtype=np.float32)
    got = tensoracle.compare_outputs(a, a.copy(), atol=0, rtol=0)
    assert got.max_absolute_error == 0 and got.relative_l2_error == 0 and got.cosine_similarity == 1.0
    assert got.outside_tolerance_count == 0 and got.outside_tolerance_fraction == 0.0


def test_zeros():
    zeros, ones = np.zeros(8, np.float32), np.ones(8, np.float32)
    got = tensoracle.compare_outputs(ones, zeros)  # the reference's norm is 0
    assert got.max_absolute_error == 1.0
    assert got.relative_l2_error is None and got.cosine_similarity is None
    got = tensoracle.compare_outputs(zeros, ones)  # the candidate's norm is 0
    assert got.relative_l2_error == 1.0 and got.cosine_similarity is None
    got = tensoracle.compare_outputs(zeros, zeros, atol=0, rtol=0)
    assert got.max_absolute_error == 0 and got.relative_l2_error is None and got.outside_tolerance_count == 0


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("where", ["candidate", "reference", "both"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e5m2])
def test_nonfinite_values_leave_only_counts(bad, where, dtype):
    candidate, reference = sample(np.float64, (100,), seed=3, noise=0.01)
    if where in ("candidate", "both"):
        candidate[[5, 50]] = bad
    if where in ("reference", "both"):
        reference[7] = bad
    candidate, reference = candidate.astype(dtype), reference.astype(dtype)
    got = tensoracle.compare_outputs(candidate, reference, atol=1, rtol=1)
    want = numpy_metrics(candidate, reference)
    assert got.candidate_nonfinite_count == want["candidate_nonfinite_count"] == (2 if where != "reference" else 0)
    assert got.reference_nonfinite_count == want["reference_nonfinite_count"] == (1 if where != "candidate" else 0)
    for field in FIELDS[5:]:
        assert getattr(got, field) is None, field


def test_fp8_e4m3fn_nan_is_nonfinite():
    a = np.array([1.0, np.nan], dtype=ml_dtypes.float8_e4m3fn)  # e4m3fn has NaN but no inf
    assert tensoracle.compare_outputs(a, a).candidate_nonfinite_count == 1


@pytest.mark.parametrize("shape", [(0,), (0, 3), (4, 0, 2)])
def test_empty_arrays(shape):
    e = np.zeros(shape, np.float32)
    got = tensoracle.compare_outputs(e, e, atol=0.1, rtol=0.1)
    assert got.element_count == 0 and got.shape == shape
    assert got.max_absolute_error is None and got.relative_l2_error is None and got.cosine_similarity is None
    assert got.outside_tolerance_count == 0 and got.outside_tolerance_fraction is None


def test_zero_d_arrays():
    got = tensoracle.compare_outputs(np.float32(2.5), np.array(2.0, np.float32))
    assert got.shape == () and got.element_count == 1 and got.max_absolute_error == 0.5


def test_sums_that_overflow_float32():
    reference = np.full(10_000, 3e30, np.float32)
    candidate = (reference * np.float32(1.001)).astype(np.float32)
    with np.errstate(over="ignore"):
        assert not np.isfinite(np.sum(reference * reference))  # NumPy's float32 sum overflows
    got = tensoracle.compare_outputs(candidate, reference, atol=1e28, rtol=0)
    assert_matches(got, numpy_metrics(candidate, reference, 1e28, 0))
    assert got.relative_l2_error == pytest.approx(0.001, rel=1e-3)


@pytest.mark.parametrize("scale", [1e200, 1e-200])
def test_float64_sums_that_overflow_or_underflow_float64(scale):
    candidate, reference = sample(np.float64, (1000,), seed=4, noise=0.01)
    got = tensoracle.compare_outputs(candidate * scale, reference * scale)
    want = numpy_metrics(candidate, reference)  # the metrics are scale-free
    assert got.relative_l2_error == pytest.approx(want["relative_l2_error"], rel=1e-12)
    assert got.cosine_similarity == pytest.approx(want["cosine_similarity"], rel=1e-12)
    # NumPy's own float64 norms overflow or underflow here.
    with np.errstate(all="ignore"):
        naive = np.linalg.norm(candidate * scale - reference * scale) / np.linalg.norm(reference * scale)
    assert not math.isfinite(naive) or naive == 0


def test_tolerance_needs_both():
    a, b = np.array([1.0, 2.0]), np.array([1.0, 2.5])
    for kwargs in ({}, {"atol": 0.1}, {"rtol": 0.1}):
        got = tensoracle.compare_outputs(a, b, **kwargs)
        assert got.outside_tolerance_count is None and got.outside_tolerance_fraction is None
    assert tensoracle.compare_outputs(a, b, atol=0.1, rtol=0).outside_tolerance_count == 1
    assert tensoracle.compare_outputs(a, b, 0.5, 0).outside_tolerance_count == 0  # positional, boundary inside


def test_isclose_boundaries_match_numpy():
    rng = np.random.default_rng(5)
    reference = rng.uniform(-1, 1, 20_000)
    candidate = reference + np.round(rng.uniform(-4, 4, 20_000)) * 0.25  # errors on a grid of 1/4
    for atol, rtol in ((0.25, 0.0), (0.5, 0.5), (0.0, 1.0), (1.0, 0.25)):
        got = tensoracle.compare_outputs(candidate, reference, atol=atol, rtol=rtol)
        assert got.outside_tolerance_count == np.count_nonzero(~np.isclose(candidate, reference, rtol=rtol, atol=atol))


def test_large_array_and_thread_count_independence():
    candidate, reference = sample(np.float32, (3_000_001,), seed=6, noise=1e-3)
    before = tensoracle.cpu_threads()
    try:
        results = []
        for threads in (1, 2, 3):
            tensoracle.set_cpu_threads(threads)
            results.append(tensoracle.compare_outputs(candidate, reference, atol=1e-3, rtol=1e-3).to_dict())
    finally:
        tensoracle.set_cpu_threads(before)
    assert results[0] == results[1] == results[2]  # bit for bit
    got = tensoracle.compare_outputs(candidate, reference, atol=1e-3, rtol=1e-3)
    assert_matches(got, numpy_metrics(candidate, reference, 1e-3, 1e-3))


def test_array_layouts():
    candidate, reference = sample(np.float32, (40, 30), seed=7, noise=0.1)
    want = numpy_metrics(candidate.T, reference.T, 0.05, 0)
    assert_matches(tensoracle.compare_outputs(candidate.T, reference.T, atol=0.05, rtol=0), want)  # not contiguous
    assert_matches(tensoracle.compare_outputs(np.asfortranarray(candidate.T), reference.T, atol=0.05, rtol=0), want)
    big = candidate.T.astype(">f4")
    assert_matches(tensoracle.compare_outputs(big, reference.T.astype(">f4"), atol=0.05, rtol=0), want)
    frozen = reference.T.copy()
    frozen.flags.writeable = False
    assert_matches(tensoracle.compare_outputs(candidate.T, frozen, atol=0.05, rtol=0), want)
    want_strided = numpy_metrics(candidate[::3, 1::2], reference[::3, 1::2])
    assert_matches(tensoracle.compare_outputs(candidate[::3, 1::2], reference[::3, 1::2]), want_strided)


def test_buffer_protocol_and_sequences():
    a = array.array("f", [1.0, 2.0, 3.0])
    b = array.array("f", [1.0, 2.5, 3.0])
    got = tensoracle.compare_outputs(a, memoryview(b), atol=0.1, rtol=0)
    assert got.dtype == np.float32 and got.outside_tolerance_count == 1 and got.max_absolute_error == 0.5
    assert tensoracle.compare_outputs([1.0, 2.0], [1.0, 2.0]).dtype == np.float64


class DLPackOnly:
    """An object that offers its data through DLPack and nothing else."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_dlpack_producers():
    candidate, reference = sample(np.float32, (16, 8), seed=8, noise=0.01)
    want = numpy_metrics(candidate, reference, 0.01, 0)
    assert not hasattr(DLPackOnly(candidate), "__array__")
    assert_matches(tensoracle.compare_outputs(DLPackOnly(candidate), DLPackOnly(reference), atol=0.01, rtol=0), want)
    # Not row-major: read through NumPy instead.
    want_t = numpy_metrics(candidate.T, reference.T)
    assert_matches(tensoracle.compare_outputs(DLPackOnly(candidate.T), DLPackOnly(reference.T)), want_t)


def test_torch_tensors_including_bfloat16():
    torch = pytest.importorskip("torch", reason="torch (the CPU build) is a test dependency")
    candidate, reference = sample(np.float32, (16, 8), seed=9, noise=0.01)
    c, r = torch.from_numpy(candidate), torch.from_numpy(reference)
    assert_matches(tensoracle.compare_outputs(c, r), numpy_metrics(candidate, reference))
    cb, rb = c.to(torch.bfloat16), r.to(torch.bfloat16)
    got = tensoracle.compare_outputs(cb, rb, atol=0.01, rtol=0)
    want = numpy_metrics(cb.float().numpy(), rb.float().numpy(), 0.01, 0)  # bf16 values are exact in float32
    assert_matches(got, want)
    assert got.dtype == np.dtype(ml_dtypes.bfloat16)
    assert_matches(tensoracle.compare_outputs(c.T, r.T), numpy_metrics(candidate.T, reference.T))  # strided
    with pytest.raises(tensoracle.InvalidArgument, match="candidate .*must also be contiguous"):
        tensoracle.compare_outputs(cb.t(), rb.t())  # strided bf16: NumPy cannot read it, so it is refused


def test_argument_errors():
    a = np.zeros((2, 3), np.float32)
    with pytest.raises(tensoracle.InvalidArgument, match=r"shape mismatch: candidate \(2, 3\), reference \(3, 2\)"):
        tensoracle.compare_outputs(a, a.T.copy())
    with pytest.raises(ValueError, match="dtype mismatch: candidate float32, reference float16"):
        tensoracle.compare_outputs(a, a.astype(np.float16))
    for atol, rtol in ((-1.0, 0.0), (0.0, -1e-9), (math.nan, 0.0), (0.0, math.nan)):
        with pytest.raises(tensoracle.InvalidArgument, match="must be >= 0"):
            tensoracle.compare_outputs(a, a, atol=atol, rtol=rtol)
    with pytest.raises(tensoracle.InvalidArgument, match="atol must be >= 0"):
        tensoracle.compare_outputs(a, a, atol=-1.0)  # checked even alone
    with pytest.raises(tensoracle.InvalidArgument, match="NumPy dtype complex128 is not supported"):
        tensoracle.compare_outputs(np.zeros(2, complex), np.zeros(2, complex))
    with pytest.raises(tensoracle.InvalidArgument, match="candidate .* not a numeric array"):
        tensoracle.compare_outputs([object()], [1.0])
    with pytest.raises(tensoracle.InvalidArgument, match="reference .* cannot be read as an array"):
        tensoracle.compare_outputs([1.0, 2.0], [[1.0], [2.0, 3.0]])
    with pytest.raises(TypeError):
        tensoracle.compare_outputs(a, a, atol="0.1")


def test_result_object():
    candidate, reference = sample(np.float32, (5, 4), seed=10, noise=0.1)
    got = tensoracle.compare_outputs(candidate, reference, atol=0.1, rtol=0.0)
    d = got.to_dict()
    assert list(d) == FIELDS
    assert d["dtype"] == "float32" and d["shape"] == (5, 4)
    assert isinstance(got, tensoracle.OutputComparison)
    assert "OutputComparison(shape=(5, 4), dtype='float32'" in repr(got)
    with pytest.raises(AttributeError):
        got.max_absolute_error = 0.0
    for field in FIELDS:
        assert getattr(got, field) == d[field] or field == "dtype"


def test_avx2_and_baseline_kernels_agree_bit_for_bit(tmp_path):
    """On x86 the kernel runs as AVX2 where the CPU has it; TENSORACLE_COMPARE_NO_AVX2 forces the
    baseline build of the same loop. Lanes and rounding are the same, so are the results."""
    import json
    import os
    import subprocess
    import sys

    candidate, reference = sample(np.float32, (1_000_003,), seed=11, noise=1e-2)
    np.save(tmp_path / "c.npy", candidate)
    np.save(tmp_path / "r.npy", reference)
    script = (
        "import json, sys, numpy as np, tensoracle\n"
        "c, r = np.load(sys.argv[1]), np.load(sys.argv[2])\n"
        "d = tensoracle.compare_outputs(c, r, atol=1e-3, rtol=1e-3).to_dict()\n"
        "d['bits'] = [float(d[k]).hex() for k in ('max_absolute_error', 'relative_l2_error', 'cosine_similarity')]\n"
        "d['dtype'] = str(d['dtype'])\n"
        "print(json.dumps(d))\n"
    )
    results = []
    for extra in ({}, {"TENSORACLE_COMPARE_NO_AVX2": "1"}):
        env = dict(os.environ, **extra)
        out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "c.npy"), str(tmp_path / "r.npy")],
                             env=env, check=True, capture_output=True, text=True).stdout
        results.append(json.loads(out))
    assert results[0] == results[1]
