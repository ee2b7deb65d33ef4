"""Read and write safetensors files with NumPy.

    from tensoracle.safetensors import load_file, save_file, safe_open

    save_file({"w": np.ones((2, 3), np.float32)}, "model.safetensors", metadata={"format": "np"})
    tensors = load_file("model.safetensors")            # dict[str, numpy.ndarray]
    with safe_open("model.safetensors") as f:           # lazy: reads only what you ask for
        w = f.get_tensor("w")

Differences from ``safetensors.numpy``:

- Arrays are views of a private copy-on-write memory map: loading costs the header, not the
  file; pages are read when touched; writing to an array never changes the file.
- bf16 and fp8 tensors load as ``ml_dtypes`` arrays (``bfloat16``, ``float8_e4m3fn``,
  ``float8_e5m2``, ``float8_e8m0fnu``); F4 as ``float4_e2m1fn`` (unpacked, one value per
  byte; two values per byte in the file, the first in the low nibble). F6 tensors have no
  agreed unpacked layout: read their bytes with ``safe_open(...).get_bytes(name)``.
- Every file is validated as untrusted input: a malformed file raises
  :class:`tensoracle.FormatError` naming the file, the tensor and the broken rule.
- ``save_file`` is atomic: a temporary file in the same folder, fsync, rename.

Keep a memory-mapped file unchanged while its arrays live: replace it atomically (as
``save_file`` does) instead of rewriting it in place, or touching truncated pages crashes
the process with SIGBUS, as with every memory-mapped reader.
"""

from __future__ import annotations

import os
from typing import Dict, Iterator, Mapping, Optional

import ml_dtypes
import numpy as np

from tensoracle import _native
from tensoracle._native import FormatError, InvalidArgument, UnsupportedError

__all__ = ["load_file", "save_file", "load", "save", "safe_open", "FormatError"]

# safetensors dtype name -> NumPy dtype of one stored element.
_NUMPY_DTYPES = {
    "BOOL": np.dtype(np.bool_),
    "U8": np.dtype(np.uint8),
    "I8": np.dtype(np.int8),
    "U16": np.dtype(np.uint16),
    "I16": np.dtype(np.int16),
    "U32": np.dtype(np.uint32),
    "I32": np.dtype(np.int32),
    "U64": np.dtype(np.uint64),
    "I64": np.dtype(np.int64),
    "F16": np.dtype(np.float16),
    "F32": np.dtype(np.float32),
    "F64": np.dtype(np.float64),
    "C64": np.dtype(np.complex64),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "F8_E8M0": np.dtype(ml_dtypes.float8_e8m0fnu),
    "F8_E4M3FNUZ": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "F8_E5M2FNUZ": np.dtype(ml_dtypes.float8_e5m2fnuz),
}
_F4 = np.dtype(ml_dtypes.float4_e2m1fn)
_NAMES = {dtype: name for name, dtype in _NUMPY_DTYPES.items()}
_NAMES[_F4] = "F4"


def _array(file: "_native.SafetensorsFile", name: str) -> np.ndarray:
    dtype, shape, _, _ = file.info(name)
    raw = file.tensor_bytes(name)
    if dtype == "F4":
        unpacked = np.frombuffer(_native.unpack_f4(raw), dtype=np.uint8).copy()
        return unpacked.view(_F4).reshape(shape)
    if dtype not in _NUMPY_DTYPES:
        raise UnsupportedError(
            f"[safetensors] {file.name}: tensor {name!r} has dtype {dtype}, which has no NumPy "
            f"layout; read its bytes with safe_open(...).get_bytes({name!r})"
        )
    return raw.view(_NUMPY_DTYPES[dtype]).reshape(shape)


def _entries(tensors: Mapping[str, np.ndarray]):
    if not isinstance(tensors, Mapping):
        raise InvalidArgument(f"[safetensors] tensors must be a dict of name -> array, got {type(tensors).__name__}")
    entries = []
    for name, value in tensors.items():
        if not isinstance(name, str):
            raise InvalidArgument(f"[safetensors] tensor names must be str, got {name!r}")
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidArgument(f"[safetensors] tensor name {name!r} is not valid Unicode text") from None
        array = np.asarray(value)
        shape = list(array.shape)  # before ascontiguousarray, which makes 0-d arrays 1-d
        dtype = array.dtype.newbyteorder("=") if array.dtype.byteorder == ">" else array.dtype
        if dtype not in _NAMES:
            raise InvalidArgument(
                f"[safetensors] tensor {name!r}: NumPy dtype {array.dtype} has no safetensors dtype"
            )
        array = np.ascontiguousarray(array, dtype=dtype.newbyteorder("<"))
        data = array.reshape(-1).view(np.uint8)
        if dtype == _F4:
            data = np.frombuffer(_native.pack_f4(data), dtype=np.uint8)
        entries.append((name, _NAMES[dtype], shape, data))
    return entries


def _metadata(metadata: Optional[Mapping[str, str]]):
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping):
        raise InvalidArgument(f"[safetensors] metadata must be a dict of str -> str, got {type(metadata).__name__}")
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidArgument(
                f"[safetensors] metadata must map str to str, got {key!r}: {type(value).__name__}"
            )
        try:
            key.encode("utf-8"), value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidArgument(f"[safetensors] metadata entry {key!r} is not valid Unicode text") from None
    return dict(metadata)


def save_file(
    tensors: Mapping[str, np.ndarray],
    filename: "os.PathLike[str] | str",
    metadata: Optional[Mapping[str, str]] = None,
) -> None:
    """Write ``tensors`` (name -> array) atomically to ``filename``, as the official writer lays them out."""
    _native.save_file(os.fspath(filename), _entries(tensors), _metadata(metadata))


def save(tensors: Mapping[str, np.ndarray], metadata: Optional[Mapping[str, str]] = None) -> bytes:
    """The bytes ``save_file`` would write."""
    return _native.serialize(_entries(tensors), _metadata(metadata))


def load_file(filename: "os.PathLike[str] | str") -> Dict[str, np.ndarray]:
    """All tensors of ``filename``, by name (sorted), as writable copy-on-write arrays."""
    file = _native.SafetensorsFile.open(os.fspath(filename))
    return {name: _array(file, name) for name in sorted(file.names())}


def load(data: bytes) -> Dict[str, np.ndarray]:
    """All tensors of a safetensors file held in memory (arrays are read-only views of ``data``)."""
    file = _native.SafetensorsFile.parse(bytes(data))
    return {name: _array(file, name) for name in sorted(file.names())}


class safe_open:
    """Lazy access to one file: ``with safe_open(path) as f: f.get_tensor("w")``.

    ``framework`` must be "np" or "numpy" and ``device`` "cpu"; they exist so that code
    written for the official package's ``safe_open`` runs unchanged.
    """

    def __init__(self, filename: "os.PathLike[str] | str", framework: str = "np", device: str = "cpu"):
        if framework not in ("np", "numpy"):
            raise InvalidArgument(f"[safetensors] framework {framework!r} is not supported: use 'np'")
        if device != "cpu":
            raise InvalidArgument(f"[safetensors] device {device!r} is not supported: use 'cpu'")
        self._file = _native.SafetensorsFile.open(os.fspath(filename))

    def __enter__(self) -> "safe_open":
        return self

    def __exit__(self, *exc) -> None:
        return None

    def keys(self) -> list:
        """Tensor names, sorted."""
        return sorted(self._file.names())

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __contains__(self, name: str) -> bool:
        return self._file.contains(name)

    def metadata(self) -> Optional[Dict[str, str]]:
        """The ``__metadata__`` map, or None when the file has none."""
        return self._file.metadata()

    def _check(self, name: str) -> None:
        if not self._file.contains(name):
            raise KeyError(f"{self._file.name}: no tensor named {name!r}")

    def get_tensor(self, name: str) -> np.ndarray:
        self._check(name)
        return _array(self._file, name)

    def get_bytes(self, name: str) -> np.ndarray:
        """The tensor's stored bytes as a 1-D uint8 array (any dtype, F4 and F6 packed)."""
        self._check(name)
        return self._file.tensor_bytes(name)

    def tensor_info(self, name: str) -> dict:
        """``{"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}``."""
        self._check(name)
        dtype, shape, begin, end = self._file.info(name)
        return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}
