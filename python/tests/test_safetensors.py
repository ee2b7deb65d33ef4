"""tensoracle.safetensors against the official `safetensors` package (0.8.0) and torch.

Round trips go both ways for every dtype and are compared byte for byte; malformed files are
built by hand; the CLI is run as a subprocess. Everything is small so the file runs in seconds.
"""

from __future__ import annotations

import errno
import json
import os
import struct
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest
import safetensors
import safetensors.numpy as official_np
import safetensors.torch as official_pt
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensoracle
from tensoracle import safetensors as ts

# ----------------------------------------------------------------------------------------
# dtype table: (id, torch dtype, our NumPy dtype, safetensors name, official numpy can read it)

DTYPES = [
    ("float64", torch.float64, np.dtype(np.float64), "F64", True),
    ("float32", torch.float32, np.dtype(np.float32), "F32", True),
    ("float16", torch.float16, np.dtype(np.float16), "F16", True),
    ("bfloat16", torch.bfloat16, np.dtype(ml_dtypes.bfloat16), "BF16", False),
    ("float8_e4m3fn", torch.float8_e4m3fn, np.dtype(ml_dtypes.float8_e4m3fn), "F8_E4M3", False),
    ("float8_e5m2", torch.float8_e5m2, np.dtype(ml_dtypes.float8_e5m2), "F8_E5M2", False),
    ("float8_e8m0fnu", torch.float8_e8m0fnu, np.dtype(ml_dtypes.float8_e8m0fnu), "F8_E8M0", False),
    ("int64", torch.int64, np.dtype(np.int64), "I64", True),
    ("int32", torch.int32, np.dtype(np.int32), "I32", True),
    ("int16", torch.int16, np.dtype(np.int16), "I16", True),
    ("int8", torch.int8, np.dtype(np.int8), "I8", True),
    ("uint64", torch.uint64, np.dtype(np.uint64), "U64", True),
    ("uint32", torch.uint32, np.dtype(np.uint32), "U32", True),
    ("uint16", torch.uint16, np.dtype(np.uint16), "U16", True),
    ("uint8", torch.uint8, np.dtype(np.uint8), "U8", True),
    ("bool", torch.bool, np.dtype(np.bool_), "BOOL", True),
    ("complex64", torch.complex64, np.dtype(np.complex64), "C64", True),
    ("float4_e2m1fn_x2", torch.float4_e2m1fn_x2, np.dtype(ml_dtypes.float4_e2m1fn), "F4", False),
]
DTYPE_IDS = [d[0] for d in DTYPES]
NUMPY_DTYPES = [d for d in DTYPES if d[4]]
F4 = np.dtype(ml_dtypes.float4_e2m1fn)

# Shapes as tensoracle/NumPy see them (F4: one element per nibble).
SHAPES = {"x": (2, 3, 4), "empty": (3, 0, 2), "flat0": (0,), "scalar": ()}

# e2m1 values of the nibbles 0..15 (bit 3 sign, bits 2-1 exponent, bit 0 mantissa).
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)


def _numel(shape):
    return int(np.prod(shape, dtype=np.int64))


def _random_bytes(rng, n, bool_values=False):
    if bool_values:
        return rng.integers(0, 2, n, dtype=np.uint8)
    return rng.integers(0, 256, n, dtype=np.uint8)


def _torch_from_bytes(raw: np.ndarray, tdtype, tshape) -> torch.Tensor:
    if raw.size == 0:
        return torch.empty(tshape, dtype=tdtype)
    t = torch.from_numpy(raw.copy())
    return t.view(tdtype).reshape(tshape)


def _torch_bytes(t: torch.Tensor) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def _unpack_nibbles(packed: np.ndarray) -> np.ndarray:
    out = np.empty(packed.size * 2, np.uint8)
    out[0::2] = packed & 0x0F
    out[1::2] = packed >> 4
    return out


def _pack_nibbles(unpacked: np.ndarray) -> np.ndarray:
    u = unpacked.reshape(-1)
    return (u[0::2] & 0x0F) | ((u[1::2] & 0x0F) << 4)


def _make_pair(rng, row, shape):
    """(torch tensor, our NumPy array) holding the same random bits, for one dtype and shape."""
    _, tdtype, ndtype, name, _ = row
    n = _numel(shape)
    if name == "F4":
        assert n % 2 == 0
        packed = _random_bytes(rng, n // 2)
        tshape = shape[:-1] + (shape[-1] // 2,) if shape else ()
        t = _torch_from_bytes(packed, tdtype, tshape)
        a = _unpack_nibbles(packed).view(F4).reshape(shape)
        return t, a
    raw = _random_bytes(rng, n * ndtype.itemsize, bool_values=(name == "BOOL"))
    t = _torch_from_bytes(raw, tdtype, shape)
    a = raw.view(ndtype).reshape(shape)
    return t, a


def _header(path_or_bytes) -> dict:
    data = path_or_bytes if isinstance(path_or_bytes, bytes) else open(path_or_bytes, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + n])


def _file(header, data=b"", length=None) -> bytes:
    """A safetensors file built by hand: 8-byte LE length, header bytes, data."""
    if isinstance(header, (dict, list)):
        header = json.dumps(header, ensure_ascii=False).encode()
    elif isinstance(header, str):
        header = header.encode()
    n = len(header) if length is None else length
    return struct.pack("<Q", n) + header + data


def _entry(dtype="F32", shape=(1,), offsets=(0, 4)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


# ----------------------------------------------------------------------------------------
# official writer -> tensoracle reader


@pytest.mark.parametrize("row", DTYPES, ids=DTYPE_IDS)
def test_official_torch_file_loads_bit_exact(tmp_path, row):
    _, tdtype, ndtype, name, _ = row
    rng = np.random.default_rng(1234)
    shapes = {k: s for k, s in SHAPES.items() if not (name == "F4" and s == ())}
    pairs = {k: _make_pair(rng, row, s) for k, s in shapes.items()}
    path = tmp_path / "official.safetensors"
    official_pt.save_file({k: t for k, (t, _) in pairs.items()}, str(path))
    header = _header(path)

    loaded = ts.load_file(path)
    assert sorted(loaded) == sorted(pairs)
    for key, (t, expected) in pairs.items():
        arr = loaded[key]
        assert header[key]["dtype"] == name
        assert arr.dtype == ndtype, key
        assert arr.shape == shapes[key], key
        assert list(arr.shape) == header[key]["shape"]
        if name == "F4":
            packed = np.frombuffer(_torch_bytes(t), np.uint8)
            nibbles = _unpack_nibbles(packed)
            # low nibble first, then high nibble
            assert np.array_equal(arr.reshape(-1).view(np.uint8), nibbles), key
            np.testing.assert_array_equal(arr.astype(np.float32).reshape(-1), E2M1[nibbles])
        else:
            assert arr.tobytes() == _torch_bytes(t), key
            assert arr.tobytes() == expected.tobytes(), key
            if name in ("BF16", "F8_E4M3", "F8_E5M2", "F8_E8M0") and arr.size:
                # the ml_dtypes values are torch's values (NaNs in the same places)
                np.testing.assert_array_equal(
                    arr.astype(np.float32), t.float().numpy(), err_msg=key
                )


@pytest.mark.parametrize("row", NUMPY_DTYPES, ids=[d[0] for d in NUMPY_DTYPES])
def test_official_numpy_file_loads_bit_exact(tmp_path, row):
    rng = np.random.default_rng(99)
    arrays = {k: _make_pair(rng, row, s)[1] for k, s in SHAPES.items()}
    path = tmp_path / "official_np.safetensors"
    official_np.save_file(arrays, str(path), metadata={"format": "np"})
    loaded = ts.load_file(path)
    assert sorted(loaded) == sorted(arrays)
    for key, expected in arrays.items():
        assert loaded[key].dtype == expected.dtype
        assert loaded[key].shape == expected.shape
        assert loaded[key].tobytes() == expected.tobytes()


def test_official_metadata_is_read(tmp_path):
    meta = {"format": "pt", "author": "Zoë Ångström", "emoji": "🦀 ok", "empty": "", "json": '{"a": [1]}'}
    path = tmp_path / "m.safetensors"
    official_pt.save_file({"w": torch.ones(2)}, str(path), metadata=meta)
    with ts.safe_open(path) as f:
        assert f.metadata() == meta
    no_meta = tmp_path / "n.safetensors"
    official_pt.save_file({"w": torch.ones(2)}, str(no_meta))
    with ts.safe_open(no_meta) as f:
        assert f.metadata() is None


# ----------------------------------------------------------------------------------------
# tensoracle writer -> official reader

OUR_SHAPES = {k: s for k, s in SHAPES.items() if s != ()}  # 0-d: see test_zero_dim_*


@pytest.mark.parametrize("row", DTYPES, ids=DTYPE_IDS)
def test_our_file_loads_in_official_torch_bit_exact(tmp_path, row):
    _, tdtype, ndtype, name, _ = row
    rng = np.random.default_rng(4321)
    pairs = {k: _make_pair(rng, row, s) for k, s in OUR_SHAPES.items()}
    path = tmp_path / "ours.safetensors"
    ts.save_file({k: a for k, (_, a) in pairs.items()}, path, metadata={"format": "pt"})
    header = _header(path)
    loaded = official_pt.load_file(str(path))
    assert sorted(loaded) == sorted(pairs)
    for key, (t, a) in pairs.items():
        got = loaded[key]
        assert header[key]["dtype"] == name
        assert header[key]["shape"] == list(a.shape)
        assert got.dtype == tdtype, key
        assert tuple(got.shape) == tuple(t.shape), key
        assert _torch_bytes(got) == _torch_bytes(t), key
        if name == "F4":
            assert _torch_bytes(got) == _pack_nibbles(a.view(np.uint8)).astype(np.uint8).tobytes()


@pytest.mark.parametrize("row", NUMPY_DTYPES, ids=[d[0] for d in NUMPY_DTYPES])
def test_our_file_loads_in_official_numpy_bit_exact(tmp_path, row):
    rng = np.random.default_rng(5)
    arrays = {k: _make_pair(rng, row, s)[1] for k, s in OUR_SHAPES.items()}
    path = tmp_path / "ours_np.safetensors"
    ts.save_file(arrays, path)
    loaded = official_np.load_file(str(path))
    assert sorted(loaded) == sorted(arrays)
    for key, a in arrays.items():
        assert loaded[key].dtype == a.dtype
        assert loaded[key].shape == a.shape
        assert loaded[key].tobytes() == a.tobytes()


@pytest.mark.parametrize(
    "value",
    [np.array(3.5, np.float32), np.array(True), np.array(-7, np.int64), np.array(1.5, ml_dtypes.bfloat16)],
    ids=["f32", "bool", "i64", "bf16"],
)
def test_zero_dim_tensor_keeps_shape(tmp_path, value):
    """A 0-d array must be written with shape [] (as the official writer does), not [1]."""
    path = tmp_path / "scalar.safetensors"
    ts.save_file({"s": value}, path)
    assert _header(path)["s"]["shape"] == []
    assert ts.load_file(path)["s"].shape == ()
    got = official_pt.load_file(str(path))["s"]
    assert tuple(got.shape) == ()
    assert ts.load_file(path)["s"].tobytes() == value.tobytes()


def test_metadata_round_trip_to_official(tmp_path):
    meta = {"format": "np", "ünïcödé": "värde ✓", "zh": "张量", "newline": "a\nb\t\"q\"\\", "empty": ""}
    path = tmp_path / "meta.safetensors"
    ts.save_file({"w": np.arange(4, dtype=np.float32)}, path, metadata=meta)
    with safetensors.safe_open(str(path), "np") as f:
        assert f.metadata() == meta
    with ts.safe_open(path) as f:
        assert f.metadata() == meta


def test_non_contiguous_and_big_endian_inputs_are_written_correctly(tmp_path):
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    inputs = {
        "transposed": base.T,
        "strided": base[:, ::2],
        "fortran": np.asfortranarray(base),
        "reversed": base[::-1, ::-1],
        "be_f32": base.astype(">f4"),
        "be_f64_t": base.astype(">f8").T,
        "be_i16": np.arange(-5, 5, dtype=">i2"),
        "be_u32": np.arange(7, dtype=">u4") * 0x01020304,
        "be_c64": (np.arange(3) + 1j * np.arange(3)).astype(">c8"),
        "bf16_t": base.astype(ml_dtypes.bfloat16).T,
    }
    path = tmp_path / "layout.safetensors"
    ts.save_file(inputs, path)
    official = official_pt.load_file(str(path))
    ours = ts.load_file(path)
    for key, value in inputs.items():
        expected = np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<"))
        assert ours[key].shape == value.shape, key
        assert ours[key].dtype == expected.dtype, key
        assert ours[key].tobytes() == expected.tobytes(), key
        assert np.array_equal(ours[key], value), key
        assert _torch_bytes(official[key]) == expected.tobytes(), key
    official_numpy = official_np.load_file(str(path))
    for key in ("transposed", "be_f32", "be_f64_t", "be_i16", "be_u32", "be_c64"):
        assert np.array_equal(official_numpy[key], inputs[key]), key


# ----------------------------------------------------------------------------------------
# byte-identical output


def _numpy_identity_tensors():
    rng = np.random.default_rng(7)
    tensors = {}
    for row in NUMPY_DTYPES:
        tensors[f"t_{row[0]}"] = _make_pair(rng, row, (3, 5))[1]
    tensors["empty"] = np.zeros((3, 0, 2), np.float64)
    tensors["flat0"] = np.zeros((0,), np.int8)
    tensors["ünï/name.weight"] = np.ones(3, np.float16)
    tensors['quote"back\\slash\ttab\x01'] = np.ones(2, np.int32)
    tensors["a"] = np.ones(1, np.uint8)  # sorts with the other 1-byte types by name
    return tensors


@pytest.mark.parametrize("metadata", [None, {"format": "np"}, {"clé": "välue ✓"}], ids=["none", "one", "unicode"])
def test_save_bytes_identical_to_official_numpy(metadata):
    tensors = _numpy_identity_tensors()
    assert ts.save(tensors, metadata) == official_np.save(tensors, metadata)


@pytest.mark.parametrize("metadata", [None, {"format": "pt"}], ids=["none", "one"])
def test_save_bytes_identical_to_official_torch(metadata):
    rng = np.random.default_rng(8)
    torch_tensors, our_tensors = {}, {}
    for row in DTYPES:
        shape = (2, 4)
        t, a = _make_pair(rng, row, shape)
        torch_tensors[f"t_{row[0]}"] = t
        our_tensors[f"t_{row[0]}"] = a
    t, a = _make_pair(rng, DTYPES[3], (0, 3))  # empty bf16
    torch_tensors["z_empty_bf16"], our_tensors["z_empty_bf16"] = t, a
    assert ts.save(our_tensors, metadata) == official_pt.save(torch_tensors, metadata)


def test_save_file_bytes_equal_save(tmp_path):
    tensors = _numpy_identity_tensors()
    path = tmp_path / "same.safetensors"
    ts.save_file(tensors, path, metadata={"format": "np"})
    assert path.read_bytes() == ts.save(tensors, {"format": "np"})
    official = tmp_path / "official.safetensors"
    official_np.save_file(tensors, str(official), metadata={"format": "np"})
    assert path.read_bytes() == official.read_bytes()


def test_save_zero_dim_bytes_identical_to_official():
    tensors = {"s": np.array(2.5, np.float32), "v": np.arange(3, dtype=np.float32)}
    assert ts.save(tensors) == official_np.save(tensors)


def test_save_empty_metadata_identical_to_official():
    """metadata={} is "at most one entry": the official writer emits "__metadata__":{}."""
    tensors = {"w": np.ones(2, np.float32)}
    assert ts.save(tensors, {}) == official_np.save(tensors, {})


# ----------------------------------------------------------------------------------------
# Python API


def test_load_file_arrays_are_writable_copy_on_write(tmp_path):
    path = tmp_path / "cow.safetensors"
    tensors = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.arange(4, dtype=np.int64)}
    ts.save_file(tensors, path)
    before = path.read_bytes()
    loaded = ts.load_file(path)
    for key, arr in loaded.items():
        assert arr.flags.writeable, key
        arr[...] = 0  # must not raise, must not reach the file
        assert not arr.any()
    with ts.safe_open(path) as f:
        g = f.get_tensor("w")
        assert g.flags.writeable
        g += 100
    assert path.read_bytes() == before
    again = ts.load_file(path)
    for key, value in tensors.items():
        assert np.array_equal(again[key], value)


def test_load_file_f4_is_writable(tmp_path):
    path = tmp_path / "f4.safetensors"
    ts.save_file({"q": np.arange(8, dtype=np.uint8).view(F4)}, path)
    before = path.read_bytes()
    q = ts.load_file(path)["q"]
    assert q.flags.writeable
    q[:] = q[::-1]
    assert path.read_bytes() == before


def test_safe_open_api(tmp_path):
    path = tmp_path / "api.safetensors"
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.array([1, -2], np.int16)
    ts.save_file({"w": w, "b": b}, path, metadata={"k": "v", "ключ": "значение"})
    raw = path.read_bytes()
    header = _header(raw)
    with ts.safe_open(path) as f:
        assert f.keys() == ["b", "w"]
        assert list(f) == ["b", "w"]
        assert "w" in f and "b" in f and "nope" not in f
        assert f.metadata() == {"k": "v", "ключ": "значение"}
        assert np.array_equal(f.get_tensor("w"), w)
        assert f.get_tensor("w").dtype == np.float32
        info = f.tensor_info("w")
        assert info == {"dtype": "F32", "shape": [3, 4], "data_offsets": header["w"]["data_offsets"]}
        assert f.tensor_info("b") == {"dtype": "I16", "shape": [2], "data_offsets": header["b"]["data_offsets"]}
        data_start = 8 + struct.unpack("<Q", raw[:8])[0]
        got = f.get_bytes("b")
        assert got.dtype == np.uint8 and got.ndim == 1
        begin, end = info["data_offsets"]
        assert f.get_bytes("w").tobytes() == raw[data_start + begin : data_start + end]
        assert got.tobytes() == b.tobytes()
        for method in (f.get_tensor, f.get_bytes, f.tensor_info):
            with pytest.raises(KeyError):
                method("missing")
    with pytest.raises(tensoracle.InvalidArgument):
        ts.safe_open(path, framework="pt")
    with pytest.raises(tensoracle.InvalidArgument):
        ts.safe_open(path, device="cuda")
    assert sorted(ts.load_file(str(path))) == ["b", "w"]  # str paths too
    with ts.safe_open(path, framework="numpy") as f:
        assert f.keys() == ["b", "w"]


def _f6_file() -> bytes:
    # F6_E2M3: 4 elements in 3 bytes. NumPy cannot produce this dtype, so write it by hand.
    header = {
        "__metadata__": {"format": "mx"},
        "f6": _entry("F6_E2M3", (2, 4), (0, 6)),
        "u8": _entry("U8", (2,), (6, 8)),
    }
    return _file(header, bytes([0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 7, 8]))


def test_f6_tensor_unsupported_but_bytes_readable(tmp_path):
    path = tmp_path / "f6.safetensors"
    path.write_bytes(_f6_file())
    with ts.safe_open(path) as f:
        assert f.keys() == ["f6", "u8"]
        assert f.tensor_info("f6") == {"dtype": "F6_E2M3", "shape": [2, 4], "data_offsets": [0, 6]}
        with pytest.raises(tensoracle.UnsupportedError) as exc:
            f.get_tensor("f6")
        assert "get_bytes" in str(exc.value)
        assert f.get_bytes("f6").tobytes() == bytes([0x11, 0x22, 0x33, 0x44, 0x55, 0x66])
        assert f.get_tensor("u8").tolist() == [7, 8]
    with pytest.raises(tensoracle.UnsupportedError):
        ts.load_file(path)
    # the official reader accepts the file too
    with safetensors.safe_open(str(path), "np") as f:
        assert sorted(f.keys()) == ["f6", "u8"]


def test_load_from_bytes():
    tensors = {"a": np.arange(5, dtype=np.float64), "b": np.array([[1, 2]], np.uint8)}
    data = ts.save(tensors, {"x": "y"})
    loaded = ts.load(data)
    assert sorted(loaded) == ["a", "b"]
    for k, v in tensors.items():
        assert loaded[k].dtype == v.dtype and np.array_equal(loaded[k], v)
    assert ts.load(bytearray(data))["a"].tolist() == list(range(5))
    loaded_official = official_np.load(data)
    assert np.array_equal(loaded_official["a"], tensors["a"])
    with pytest.raises(tensoracle.FormatError, match=r"^\[safetensors\] <bytes>: "):
        ts.load(data[:-1])


def test_metadata_none_writes_no_metadata_entry(tmp_path):
    data = ts.save({"a": np.ones(1, np.float32)}, None)
    assert "__metadata__" not in _header(data)
    path = tmp_path / "nometa.safetensors"
    ts.save_file({"a": np.ones(1, np.float32)}, path)
    assert "__metadata__" not in _header(path)
    with ts.safe_open(path) as f:
        assert f.metadata() is None


@pytest.mark.parametrize(
    "metadata",
    [{"k": 1}, {"k": None}, {"k": b"bytes"}, {1: "v"}, {"ok": "v", "bad": 2.0}],
    ids=["int", "none", "bytes", "int-key", "float"],
)
def test_non_str_metadata_is_invalid_argument(tmp_path, metadata):
    with pytest.raises(tensoracle.InvalidArgument):
        ts.save({"a": np.ones(1, np.float32)}, metadata)
    path = tmp_path / "x.safetensors"
    with pytest.raises(tensoracle.InvalidArgument):
        ts.save_file({"a": np.ones(1, np.float32)}, path, metadata)
    assert not path.exists()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "value",
    [
        np.zeros(2, np.complex128),
        np.array([object(), 1], dtype=object),
        np.array(["ab", "c"]),
        np.zeros(2, "datetime64[s]"),
        np.zeros(2, [("x", "<i4")]),
    ],
    ids=["complex128", "object", "str", "datetime64", "structured"],
)
def test_unsupported_numpy_dtype_is_invalid_argument(tmp_path, value):
    with pytest.raises(tensoracle.InvalidArgument, match="has no safetensors dtype"):
        ts.save({"a": value})
    with pytest.raises(tensoracle.InvalidArgument):
        ts.save_file({"a": value}, tmp_path / "x.safetensors")
    assert os.listdir(tmp_path) == []


def test_bad_tensor_arguments():
    with pytest.raises(tensoracle.InvalidArgument):
        ts.save([("a", np.ones(1))])
    with pytest.raises(tensoracle.InvalidArgument):
        ts.save({1: np.ones(1)})
    with pytest.raises(tensoracle.InvalidArgument, match="reserved"):
        ts.save({"__metadata__": np.ones(1)})
    with pytest.raises(tensoracle.InvalidArgument, match="even number"):
        ts.save({"q": np.zeros(3, F4)})


def test_empty_tensor_name_round_trips_like_the_official_package():
    """The format allows "" as a name and the official writer accepts it; so do we."""
    tensors = {"": np.ones(1, np.float32), "x": np.zeros(2, np.float32)}
    data = ts.save(tensors)
    assert data == official_np.save(tensors)
    loaded = ts.load(data)
    assert sorted(loaded) == ["", "x"]
    assert np.array_equal(loaded[""], tensors[""])


def test_error_classes():
    assert issubclass(tensoracle.FormatError, ValueError)
    assert issubclass(tensoracle.FormatError, tensoracle.Error)
    assert issubclass(tensoracle.InvalidArgument, ValueError)
    assert issubclass(tensoracle.InvalidArgument, tensoracle.Error)
    assert issubclass(tensoracle.UnsupportedError, tensoracle.Error)
    assert not issubclass(tensoracle.FormatError, tensoracle.InvalidArgument)
    assert ts.FormatError is tensoracle.FormatError
    assert tensoracle.FormatError.__module__ == "tensoracle"


def test_missing_file_is_file_not_found(tmp_path):
    missing = tmp_path / "nope.safetensors"
    for call in (ts.load_file, ts.safe_open):
        with pytest.raises(FileNotFoundError) as exc:
            call(missing)
        assert exc.value.filename == str(missing)
        assert exc.value.errno == errno.ENOENT


def test_directory_is_not_a_safetensors_file(tmp_path):
    with pytest.raises(tensoracle.FormatError, match="not a regular file") as exc:
        ts.load_file(tmp_path)
    assert str(exc.value).startswith(f"[safetensors] {tmp_path}: ")


def test_empty_tensor_with_huge_dims_raises_tensoracle_error():
    """A file the parser accepts (numel 0) whose shape NumPy cannot represent must still fail
    with a tensoracle error, not a bare ValueError from numpy.reshape."""
    data = _file({"a": _entry("F32", (0, 2**62, 2**62), (0, 0))})
    with pytest.raises(tensoracle.Error):
        ts.load(data)


# ----------------------------------------------------------------------------------------
# hostile files


def _case(name, data, phrase, official_rejects=True):
    return pytest.param(data, phrase, official_rejects, id=name)


HOSTILE = [
    _case("too-short", b"\x01\x02\x03", "shorter than the 8-byte header length"),
    _case("header-too-long", struct.pack("<Q", 100_000_001) + b"{}", "exceeds the limit of 100000000 bytes"),
    _case("header-length-max", struct.pack("<Q", 2**64 - 1) + b"{}", "exceeds the limit of 100000000 bytes"),
    _case("header-beyond-eof", _file("{}", length=64), "extends beyond the end of the file"),
    _case("empty-header", _file(""), "header does not start with '{'"),
    _case("header-is-array", _file("[]"), "header does not start with '{'"),
    # The official 0.8.0 accepts leading whitespace before the JSON object.
    _case("leading-space", _file(" {}"), "header does not start with '{'", official_rejects=False),
    _case("invalid-json", _file('{"a":'), "header is not valid JSON"),
    _case("trailing-garbage", _file("{} x"), "header is not valid JSON"),
    _case(
        "invalid-utf8",
        _file(b'{"\xff":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', b"\0" * 4),
        "ill-formed UTF-8",
    ),
    _case(
        "raw-nul",
        _file(b'{"a\x00":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', b"\0" * 4),
        "header holds a NUL byte at byte 3",
    ),
    _case(
        "lone-surrogate",
        _file('{"\\ud800":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', b"\0" * 4),
        "header is not valid JSON",
    ),
    # The official 0.8.0 accepts a duplicate tensor name (the last entry wins).
    _case(
        "duplicate-tensor",
        _file('{"a":' + json.dumps(_entry()) + ',"a":' + json.dumps(_entry()) + "}", b"\0" * 4),
        "duplicate key 'a' in the header",
        official_rejects=False,
    ),
    # The official 0.8.0 accepts a duplicate metadata key (the last value wins).
    _case(
        "duplicate-metadata-key",
        _file('{"__metadata__":{"k":"1","k":"2"}}'),
        "__metadata__: duplicate key 'k'",
        official_rejects=False,
    ),
    _case(
        "duplicate-metadata",
        _file('{"__metadata__":{},"__metadata__":{}}'),
        "duplicate key '__metadata__' in the header",
    ),
    _case(
        "overlap",
        _file({"a": _entry(offsets=(0, 4)), "b": _entry(offsets=(2, 6))}, b"\0" * 6),
        "overlaps tensor 'a'",
    ),
    _case(
        "empty-inside-other",
        _file({"a": _entry(shape=(2,), offsets=(0, 8)), "b": _entry(shape=(0,), offsets=(4, 4))}, b"\0" * 8),
        "overlaps tensor 'a'",
    ),
    _case(
        "hole",
        _file({"a": _entry(offsets=(0, 4)), "b": _entry(offsets=(8, 12))}, b"\0" * 12),
        "belong to no tensor (a hole before tensor 'b')",
    ),
    _case(
        "hole-escaped-name",
        _file({"a": _entry(offsets=(0, 4)), "b\x01\u00e9": _entry(offsets=(8, 12))}, b"\0" * 12),
        "a hole before tensor 'b\\x01\u00e9'",
    ),
    _case("trailing-bytes", _file({"a": _entry()}, b"\0" * 8), "trailing bytes after the last tensor"),
    _case("data-without-tensors", _file({}, b"\0" * 4), "trailing bytes after the last tensor"),
    _case(
        "beyond-data",
        _file({"a": _entry(shape=(2,), offsets=(0, 8))}, b"\0" * 4),
        "extend beyond the data section (4 bytes)",
    ),
    _case("bad-dtype", _file({"a": _entry(dtype="F33")}, b"\0" * 4), "unknown dtype 'F33'"),
    _case(
        "size-mismatch",
        _file({"a": _entry(shape=(2,))}, b"\0" * 4),
        "hold 4 bytes, but shape [2] of F32 needs 8",
    ),
    _case("negative-dim", _file({"a": _entry(shape=(-1,))}, b"\0" * 4), "shape has negative dimension -1"),
    _case("float-dim", _file({"a": _entry(shape=(1.0,))}, b"\0" * 4), "is not an integer in [0, 2^63)"),
    _case(
        "dim-2^63",
        _file({"a": _entry(shape=(2**63,))}, b"\0" * 4),
        "overflows a signed 64-bit integer",
    ),
    _case(
        "offset-2^64",
        _file({"a": _entry(offsets=(0, 2**64))}, b"\0" * 4),
        "is not an integer in [0, 2^64)",
    ),
    _case(
        "shape-overflow",
        _file({"a": _entry(shape=(2**62, 2**62))}, b"\0" * 4),
        "overflows 64-bit",
    ),
    _case("end-before-begin", _file({"a": _entry(offsets=(4, 0))}, b"\0" * 4), "end before begin"),
    _case("three-offsets", _file({"a": _entry(offsets=(0, 4, 4))}, b"\0" * 4), "data_offsets has more than 2 entries"),
    _case("one-offset", _file({"a": _entry(offsets=(4,))}, b"\0" * 4), "data_offsets has 1 entries, not 2"),
    _case(
        "missing-field",
        _file({"a": {"dtype": "F32", "shape": [1]}}, b"\0" * 4),
        "missing field 'data_offsets'",
    ),
    # The official 0.8.0 ignores unknown fields in a tensor entry.
    _case(
        "unknown-field",
        _file({"a": {**_entry(), "extra": 1}}, b"\0" * 4),
        "unknown field 'extra'",
        official_rejects=False,
    ),
    _case("entry-not-object", _file({"a": 5}), "entry is a number, not an object"),
    _case(
        "dtype-null",
        _file({"a": {"dtype": None, "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4),
        "dtype is null, not a string",
    ),
    _case(
        "metadata-value-number",
        _file({"__metadata__": {"k": 1}}),
        "value is a number, not a string",
    ),
    _case(
        "metadata-value-object",
        _file({"__metadata__": {"k": {"x": "y"}}}),
        "value is an object, not a string",
    ),
    # The official 0.8.0 accepts "__metadata__": null (as no metadata).
    _case(
        "metadata-null",
        _file({"__metadata__": None}),
        "__metadata__ is null, not an object of strings",
        official_rejects=False,
    ),
    _case(
        "f4-partial-byte",
        _file({"a": _entry(dtype="F4", shape=(3,), offsets=(0, 2))}, b"\0" * 2),
        "do not fill whole bytes",
    ),
]


def _official_rejects(path) -> bool:
    try:
        with safetensors.safe_open(str(path), "np") as f:
            list(f.keys())
    except Exception:  # noqa: BLE001 - any refusal counts
        return True
    return False


@pytest.mark.parametrize("data, phrase, official_rejects", HOSTILE)
def test_hostile_file_is_rejected(tmp_path, data, phrase, official_rejects):
    path = tmp_path / "hostile.safetensors"
    path.write_bytes(data)
    for call in (ts.load_file, ts.safe_open):
        with pytest.raises(tensoracle.FormatError) as exc:
            call(path)
        message = str(exc.value)
        assert message.startswith(f"[safetensors] {path}: "), message
        assert phrase in message, message
    with pytest.raises(tensoracle.FormatError) as exc:
        ts.load(data)
    assert str(exc.value).startswith("[safetensors] <bytes>: ")
    assert phrase in str(exc.value)
    assert _official_rejects(path) == official_rejects


def test_hostile_cases_are_many_and_distinct():
    assert len(HOSTILE) >= 10
    assert len({p.values[0] for p in HOSTILE}) == len(HOSTILE)


# ----------------------------------------------------------------------------------------
# mutation fuzzing


def _mutation_seed() -> bytes:
    # No F8 dtypes: a mutation turning "F8_E5M2" into "F6_E3M2" would be a valid F6 file,
    # which load() rightly refuses with UnsupportedError.
    tensors = {
        "embed.weight": np.arange(12, dtype=np.float32).reshape(3, 4),
        "ids": np.array([1, -2, 3], np.int64),
        "norm": np.ones(4, ml_dtypes.bfloat16),
        "mask": np.array([True, False, True]),
        "q": np.arange(4, dtype=np.uint8).view(F4),
        "h": np.array([0.5, 2.0], np.float16),
        "empty": np.zeros((2, 0), np.uint8),
    }
    return ts.save(tensors, {"format": "np"})


SEED = _mutation_seed()
TOKENS = [b'"', b"{", b"}", b"[", b"]", b",", b":", b"-1", b"0", b"1e3", b"99999999999999999999",
          b"\\u0000", b"\\ud800", b"\xff", b"\xc3", b" ", b"null", b'"F4"', b'"__metadata__"']

_POS = st.integers(0, 4 * len(SEED))
MUTATION = st.one_of(
    st.tuples(st.just("flip"), _POS, st.integers(0, 7)),
    st.tuples(st.just("set"), _POS, st.integers(0, 255)),
    st.tuples(st.just("truncate"), _POS),
    st.tuples(st.just("insert"), _POS, st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("token"), _POS, st.sampled_from(TOKENS)),
    st.tuples(st.just("delete"), _POS, st.integers(1, 16)),
    st.tuples(st.just("length"), st.integers(0, 2**64 - 1)),
    st.tuples(st.just("length-delta"), st.integers(-16, 16)),
)


def _mutate(data: bytes, ops, header_only=False) -> bytes:
    b = bytearray(data)
    for op in ops:
        kind = op[0]
        if kind == "length":
            if header_only:
                continue
            b[:8] = struct.pack("<Q", op[1]) if len(b) >= 8 else struct.pack("<Q", op[1])[: len(b)]
            continue
        if kind == "length-delta":
            if len(b) >= 8 and not header_only:
                (n,) = struct.unpack("<Q", bytes(b[:8]))
                b[:8] = struct.pack("<Q", (n + op[1]) % 2**64)
            continue
        pos = op[1] % (len(b) + 1)
        if kind == "flip" and pos < len(b):
            b[pos] ^= 1 << op[2]
        elif kind == "set" and pos < len(b):
            b[pos] = op[2]
        elif kind == "truncate":
            del b[pos:]
        elif kind in ("insert", "token"):
            b[pos:pos] = op[2]
        elif kind == "delete":
            del b[pos : pos + op[2]]
    return bytes(b)


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(MUTATION, min_size=1, max_size=4), st.booleans())
def test_mutated_files_load_or_raise_format_error(ops, header_only):
    if header_only:
        # Mutate the JSON only and re-frame it with a correct length, so that the mutation
        # reaches the header's validation instead of failing the framing checks.
        (n,) = struct.unpack("<Q", SEED[:8])
        data = _file(_mutate(SEED[8 : 8 + n], ops, header_only=True), SEED[8 + n :])
    else:
        data = _mutate(SEED, ops)
    try:
        loaded = ts.load(data)
    except tensoracle.FormatError as e:
        assert str(e).startswith("[safetensors] <bytes>: ")
        return
    for arr in loaded.values():
        arr.tobytes()  # touch every byte


def test_mutation_seed_is_valid():
    loaded = ts.load(SEED)
    assert len(loaded) == 7
    # the official parser accepts it too (its bytes loaders lack F4, so deserialize only)
    assert sorted(name for name, _ in safetensors.deserialize(SEED)) == sorted(loaded)


# ----------------------------------------------------------------------------------------
# atomic write


_CHILD = textwrap.dedent(
    """
    import resource, signal, sys
    import numpy as np
    from tensoracle.safetensors import save_file
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    limit = 1 << 20
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    try:
        save_file({"big": np.ones(1 << 20, np.float32)}, sys.argv[1])  # 4 MiB
    except OSError as e:
        print("OSError", e.errno, type(e).__name__)
        sys.exit(0)
    except BaseException as e:
        print("other", type(e).__name__, e)
        sys.exit(3)
    print("saved")
    sys.exit(4)
    """
)


def test_atomic_write_failure_keeps_old_file(tmp_path):
    path = tmp_path / "model.safetensors"
    ts.save_file({"small": np.arange(4, dtype=np.float32)}, path, metadata={"v": "1"})
    before = path.read_bytes()
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout.split()[:2] == ["OSError", str(errno.EFBIG)], proc.stdout
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["model.safetensors"]


def test_atomic_write_success_replaces_file(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"old content")
    ts.save_file({"w": np.ones(3, np.float32)}, path)
    assert np.array_equal(ts.load_file(path)["w"], np.ones(3, np.float32))
    assert os.listdir(tmp_path) == ["model.safetensors"]


def test_save_into_missing_folder_is_oserror(tmp_path):
    with pytest.raises(FileNotFoundError):
        ts.save_file({"w": np.ones(1, np.float32)}, tmp_path / "no" / "such.safetensors")


# ----------------------------------------------------------------------------------------
# CLI


def _run(cli, *args):
    return subprocess.run([cli, *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def inspected_file(tmp_path):
    path = tmp_path / "inspect.safetensors"
    tensors = {
        "encoder.weight": np.zeros((4, 3), np.float32),
        "bias": np.zeros(5, ml_dtypes.bfloat16),
        "ids": np.zeros((2, 0, 3), np.int64),
        "q": np.zeros(6, F4),
    }
    meta = {"format": "np", "note": "héllo wörld"}
    ts.save_file(tensors, path, metadata=meta)
    return path, meta


def test_cli_inspect_text(cli, inspected_file):
    path, meta = inspected_file
    proc = _run(cli, "inspect", str(path))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert str(path) in out
    lines = out.splitlines()
    with ts.safe_open(path) as f:
        for name in f.keys():
            info = f.tensor_info(name)
            row = [ln for ln in lines if ln.split() and ln.split()[0] == name]
            assert len(row) == 1, (name, out)
            assert info["dtype"] in row[0].split()
            assert "[" + ", ".join(map(str, info["shape"])) + "]" in row[0]
    for key, value in meta.items():
        assert f"{key}: {value}" in out


def test_cli_inspect_json(cli, inspected_file):
    path, meta = inspected_file
    proc = _run(cli, "inspect", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    raw = path.read_bytes()
    (header_size,) = struct.unpack("<Q", raw[:8])
    header = _header(raw)
    assert doc["file"] == str(path)
    assert doc["format"] == "safetensors"
    assert doc["file_size"] == len(raw)
    assert doc["header_size"] == header_size
    assert doc["metadata"] == meta
    names = [t["name"] for t in doc["tensors"]]
    assert sorted(names) == sorted(k for k in header if k != "__metadata__")
    for t in doc["tensors"]:
        assert set(t) == {"name", "dtype", "shape", "bytes", "data_offsets", "file_offset"}
        entry = header[t["name"]]
        assert t["dtype"] == entry["dtype"]
        assert t["shape"] == entry["shape"]
        assert t["data_offsets"] == entry["data_offsets"]
        assert t["bytes"] == entry["data_offsets"][1] - entry["data_offsets"][0]
        assert t["file_offset"] == 8 + header_size + entry["data_offsets"][0]
    offsets = [tuple(t["data_offsets"]) for t in doc["tensors"]]
    assert offsets == sorted(offsets)  # data-offset order


def test_cli_inspect_json_without_metadata(cli, tmp_path):
    path = tmp_path / "plain.safetensors"
    ts.save_file({"w": np.ones(2, np.float64)}, path)
    doc = json.loads(_run(cli, "inspect", str(path), "--json").stdout)
    assert doc["metadata"] is None
    assert doc["tensors"][0]["file_offset"] + 16 == doc["file_size"]


def test_cli_errors(cli, tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(_file({"a": _entry(offsets=(0, 4)), "b": _entry(offsets=(8, 12))}, b"\0" * 12))
    for args in (["inspect", str(bad)], ["inspect", str(bad), "--json"]):
        proc = _run(cli, *args)
        assert proc.returncode == 2
        assert proc.stderr.startswith("error: "), proc.stderr
        assert "a hole before tensor 'b'" in proc.stderr
        assert proc.stdout == ""
    missing = _run(cli, "inspect", str(tmp_path / "missing.safetensors"))
    assert missing.returncode == 2
    assert missing.stderr.startswith("error: ")
    assert "missing.safetensors" in missing.stderr
    none = _run(cli)
    assert none.returncode == 2
    assert none.stderr.startswith("error: ")
    no_file = _run(cli, "inspect")
    assert no_file.returncode == 2
    assert no_file.stderr.startswith("error: ")
