#!/usr/bin/env python3
"""Write seed corpora for the .pth fuzz targets into FOLDER/pickle (fuzz_pickle: data.pkl
streams) and FOLDER/pth (fuzz_pth: whole checkpoint archives).

    python3 cpp/fuzz/make_pth_seeds.py /tmp/pth-seeds

Python 3 standard library only. The pickles are written by the standard pickler as torch.save
writes them — the same globals, persistent ids and opcodes, protocols 2 to 5 — using stand-in
modules registered under torch's names (nothing of torch is imported or needed). fuzz_pickle
wraps its input in an archive whose storage records data/1 .. data/8 hold 64, 128, ..., 8192
bytes (data/0 is empty); the seeds use those sizes. Hostile and malformed seeds are included.
"""

from __future__ import annotations

import collections
import io
import os
import pickle
import struct
import sys
import types
import zipfile

# ----------------------------------------------------------------------------------------
# stand-ins for torch's picklable names


def _module(name):
    m = types.ModuleType(name)
    sys.modules[name] = m
    return m


_torch = _module("torch")
_utils = _module("torch._utils")
_tensor_mod = _module("torch._tensor")
_storage_mod = _module("torch.storage")


def _function(module, name):
    def f(*args):
        raise RuntimeError("stand-in")

    f.__module__, f.__name__, f.__qualname__ = module.__name__, name, name
    setattr(module, name, f)
    return f


_rebuild_tensor_v2 = _function(_utils, "_rebuild_tensor_v2")
_rebuild_tensor_v3 = _function(_utils, "_rebuild_tensor_v3")
_rebuild_parameter = _function(_utils, "_rebuild_parameter")
_rebuild_from_type_v2 = _function(_tensor_mod, "_rebuild_from_type_v2")


def _class(module, name):
    cls = type(name, (), {"__module__": module.__name__})
    setattr(module, name, cls)
    return cls


STORAGE = {name: _class(_torch, name) for name in (
    "FloatStorage", "DoubleStorage", "HalfStorage", "BFloat16Storage", "LongStorage", "IntStorage",
    "ShortStorage", "CharStorage", "ByteStorage", "BoolStorage", "ComplexFloatStorage")}
STORAGE["UntypedStorage"] = _class(_storage_mod, "UntypedStorage")
TENSOR_CLASS = _class(_tensor_mod, "Tensor")
ITEMSIZE = {"FloatStorage": 4, "DoubleStorage": 8, "HalfStorage": 2, "BFloat16Storage": 2, "LongStorage": 8,
            "IntStorage": 4, "ShortStorage": 2, "CharStorage": 1, "ByteStorage": 1, "BoolStorage": 1,
            "ComplexFloatStorage": 8, "UntypedStorage": 1}


class _Dtype:
    __module__ = "torch"  # the pickler looks the instance up as torch.<name>

    def __init__(self, name):
        self.name = name

    def __reduce__(self):
        return self.name  # pickled as the global torch.<name>


for _n in ("float32", "float16", "bfloat16", "int64", "uint16", "float8_e4m3fn", "float8_e5m2",
           "float8_e8m0fnu", "float4_e2m1fn_x2", "complex128"):
    setattr(_torch, _n, _Dtype(_n))


class _Device:
    def __init__(self, *args):
        self.args = args

    def __reduce__(self):
        return _torch.device, self.args


_torch.device = type("device", (), {"__module__": "torch"})
_torch.Size = type("Size", (tuple,), {"__module__": "torch", "__reduce__": lambda self: (_torch.Size, (tuple(self),))})


class Storage:
    def __init__(self, cls, key, numel):
        self.cls, self.key, self.numel = cls, key, numel


def record_size(key):  # what fuzz_pickle's archive holds
    k = int(key)
    return 0 if k == 0 else 32 << k


class Tensor:
    """Pickles as torch.save pickles a tensor."""

    def __init__(self, cls, key, offset, size, stride, numel=None, dtype=None, parameter=False, v3=False):
        numel = record_size(key) // ITEMSIZE[cls] if numel is None else numel
        self.storage = Storage(STORAGE[cls], key, numel)
        self.args = (offset, tuple(size), tuple(stride), False, collections.OrderedDict())
        self.dtype, self.parameter, self.v3 = dtype, parameter, v3

    def __reduce__(self):
        if self.v3:
            inner = (_rebuild_tensor_v3, (self.storage, *self.args, getattr(_torch, self.dtype)))
        else:
            inner = (_rebuild_tensor_v2, (self.storage, *self.args))
        if self.parameter:
            return _rebuild_parameter, (_Rebuilt(inner), True, collections.OrderedDict())
        return inner


class _Rebuilt:
    def __init__(self, reduced):
        self.reduced = reduced

    def __reduce__(self):
        return self.reduced


class Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", obj.cls, obj.key, "cpu", obj.numel)
        return None


def dumps(obj, protocol):
    buf = io.BytesIO()
    Pickler(buf, protocol=protocol).dump(obj)
    return buf.getvalue()


# ----------------------------------------------------------------------------------------
# the objects


def state_dict():
    sd = collections.OrderedDict()
    sd["layer.weight"] = Tensor("FloatStorage", "3", 0, (8, 8), (8, 1))
    sd["layer.bias"] = Tensor("FloatStorage", "1", 0, (16,), (1,))
    sd["norm.weight"] = Tensor("HalfStorage", "2", 0, (64,), (1,))
    sd["norm.running"] = Tensor("LongStorage", "6", 0, (), ())
    sd["emb"] = Tensor("BFloat16Storage", "4", 0, (16, 16), (16, 1))
    return sd


def views():
    return {
        "base": Tensor("FloatStorage", "3", 0, (8, 8), (8, 1)),
        "t": Tensor("FloatStorage", "3", 0, (8, 8), (1, 8)),
        "slice": Tensor("FloatStorage", "3", 9, (3, 4), (8, 2)),
        "expand": Tensor("FloatStorage", "3", 8, (4, 8), (0, 1)),
        "empty": Tensor("FloatStorage", "0", 0, (0, 4), (4, 1)),
        "p": Tensor("DoubleStorage", "5", 0, (128,), (1,), parameter=True),
        "c": Tensor("ComplexFloatStorage", "4", 0, (8, 4), (1, 8)),
        "mask": Tensor("BoolStorage", "1", 0, (4, 16), (16, 1)),
    }


def narrow_dtypes():
    return {
        "f8": Tensor("UntypedStorage", "2", 0, (128,), (1,), dtype="float8_e4m3fn", v3=True),
        "e5": Tensor("UntypedStorage", "2", 64, (8, 8), (1, 8), dtype="float8_e5m2", v3=True),
        "e8": Tensor("UntypedStorage", "1", 0, (64,), (1,), dtype="float8_e8m0fnu", v3=True),
        "f4": Tensor("UntypedStorage", "3", 0, (16, 16), (16, 1), dtype="float4_e2m1fn_x2", v3=True),
        "u16": Tensor("UntypedStorage", "2", 0, (64,), (1,), dtype="uint16", v3=True),
    }


def unsupported_dtype():
    return {"c128": Tensor("UntypedStorage", "4", 0, (32,), (1,), dtype="complex128", v3=True)}


def training():
    return {
        "model": state_dict(),
        "optimizer": {
            "state": {0: {"step": Tensor("FloatStorage", "1", 0, (), (), numel=16),
                          "exp_avg": Tensor("FloatStorage", "3", 0, (64,), (1,))}},
            "param_groups": [{"lr": 0.001, "betas": (0.9, 0.999), "eps": 1e-8, "params": [0, 1],
                              "amsgrad": False, "foreach": None}],
        },
        "epoch": 12,
        "big": 2**70,
        "neg": -(2**40),
        "config": {"name": "tiny ü", "layers": [4, 8, 2], "nan": float("nan"), "inf": float("-inf"),
                   "set": {1, 2, 3}, "frozen": frozenset({"a"}), "bytes": b"\x00\xff", "slice": slice(1, 5, 2),
                   "complex": 1 + 2j, "dtype": _torch.float16, "device": _Device("cuda", 1),
                   "size": _torch.Size((2, 3)), (1, "k"): "tuple key", 1.5: "float key"},
        "layers": [Tensor("FloatStorage", "1", 0, (4, 4), (4, 1)), None, "x"],
    }


def shared():
    t = Tensor("FloatStorage", "3", 0, (64,), (1,))
    return {"a": t, "b": t, "nested": {"c": t, "d": [t, t]}}


OBJECTS = {"state_dict": state_dict, "views": views, "narrow": narrow_dtypes, "training": training,
           "shared": shared, "complex128": unsupported_dtype}

# Hand-written streams: hostile, malformed, or odd but valid.
RAW = {
    "hostile_system": b"\x80\x02cposix\nsystem\nX\x05\x00\x00\x00touch\x85R.",
    "hostile_eval": b"\x80\x02c__builtin__\neval\nX\x01\x00\x00\x001\x85R.",
    "hostile_getattr": b"\x80\x02c__builtin__\ngetattr\nc__builtin__\n__import__\nX\x02\x00\x00\x00os\x85RX\x06\x00\x00\x00system\x86R.",
    "hostile_dotted": b"\x80\x04\x8c\x05torch\x8c\x17serialization.os.system\x93.",
    "hostile_inst": b"\x80\x02(X\x01\x00\x00\x00aios\nsystem\n.",
    "hostile_newobj": b"\x80\x02ccollections\nOrderedDict\n)\x81.",
    "hostile_ext": b"\x80\x02\x82\x01.",
    "hostile_build": b"\x80\x02]}b.",
    "hostile_pid": b"\x80\x02(X\x06\x00\x00\x00moduleX\x01\x00\x00\x00xtQ.",
    "memo_cycle": b"\x80\x02}q\x00X\x01\x00\x00\x00ah\x00s.",
    "list_cycle": b"\x80\x02}X\x01\x00\x00\x00l]q\x00h\x00as.",
    "deep_tuple": b"\x80\x02}X\x01\x00\x00\x00x]" + b"\x85" * 400 + b"s.",
    "truncated": b"\x80\x02}(X\x01\x00\x00\x00a",
    "proto5_buffers": b"\x80\x05\x97.",
    "frame": b"\x80\x04\x95\x03\x00\x00\x00\x00\x00\x00\x00}\x94.",
    "conj": (b"\x80\x02}X\x01\x00\x00\x00cctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\n"
             b"ComplexFloatStorage\nX\x01\x00\x00\x004X\x03\x00\x00\x00cpuK@tQK\x00K\x08\x85K\x01\x85\x89"
             b"ccollections\nOrderedDict\n)R}X\x04\x00\x00\x00conj\x88stRs."),
}


# ----------------------------------------------------------------------------------------
# archives


def archive(pkl: bytes, name="archive", byteorder="little", keys=range(9), extra=(), compression=zipfile.ZIP_STORED,
            force_zip64=False) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as z:
        def put(rec, data):
            with z.open(f"{name}/{rec}", "w", force_zip64=force_zip64) as f:
                f.write(data)

        put("data.pkl", pkl)
        put(".format_version", b"1")
        put(".storage_alignment", b"64")
        if byteorder:
            put("byteorder", byteorder.encode())
        for k in keys:
            put(f"data/{k}", bytes((i * 131 + k) & 0xFF for i in range(record_size(str(k)))))
        put("version", b"3\n")
        for rec, data in extra:
            put(rec, data)
    return buf.getvalue()


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    out = argv[1]
    os.makedirs(os.path.join(out, "pickle"), exist_ok=True)
    os.makedirs(os.path.join(out, "pth"), exist_ok=True)
    pickles = {}
    for name, make in OBJECTS.items():
        for protocol in (2, 3, 4, 5):
            pickles[f"{name}_p{protocol}"] = dumps(make(), protocol)
    pickles.update(RAW)
    for name, data in pickles.items():
        with open(os.path.join(out, "pickle", name), "wb") as f:
            f.write(data)

    pth = {f"{name}.pth": archive(data) for name, data in pickles.items()}
    good = pickles["training_p2"]
    pth["zip64.pth"] = archive(good, force_zip64=True)
    pth["big_endian.pth"] = archive(pickles["views_p4"], byteorder="big")
    pth["no_byteorder.pth"] = archive(good, byteorder="")
    pth["folder_name.pth"] = archive(good, name="my model.v2")
    pth["torchscript.pth"] = archive(good, extra=[("constants.pkl", b"\x80\x02)."), ("code/m.py", b"x")])
    pth["deflated.pth"] = archive(good, compression=zipfile.ZIP_DEFLATED)
    pth["missing_record.pth"] = archive(good, keys=range(3))
    full = archive(good)
    pth["truncated.pth"] = full[: len(full) // 2]
    pth["legacy.pth"] = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19.\x80\x02M\xe9\x03." + good
    for name, data in pth.items():
        with open(os.path.join(out, "pth", name), "wb") as f:
            f.write(data)
    print(f"{len(pickles)} pickle seeds, {len(pth)} archive seeds in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
