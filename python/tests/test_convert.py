"""tensoracle.convert_pth / inspect_pth and `tensoracle convert` against real torch.save files.

Every checkpoint here is written by torch.save (torch is a test-only dependency); each
converted file is read back with the official safetensors package (or, for dtypes its torch
loader lacks, with tensoracle.safetensors) and compared tensor by tensor, bit for bit, with
torch.load of the original. Hostile checkpoints are proven hostile first (plain pickle runs
their payload in a subprocess) and then shown to do nothing under the converter.
"""

from __future__ import annotations

import io
import json
import math
import os
import pickle
import struct
import subprocess
import sys
import textwrap
import zipfile
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import safetensors
import safetensors.torch as official
import torch

import tensoracle
from tensoracle import safetensors as ts

# ----------------------------------------------------------------------------------------
# helpers


def flatten(obj):
    """(tensors, values): the checkpoint flattened as convert_pth promises, from torch.load."""
    tensors, values = {}, {}

    def contains(o):
        if isinstance(o, torch.Tensor):
            return True
        if isinstance(o, dict):
            return any(contains(v) for v in o.values())
        if isinstance(o, (list, tuple)):
            return any(contains(v) for v in o)
        return False

    def walk(o, path, root=False):
        if isinstance(o, torch.Tensor):
            tensors[path] = o
            return
        if isinstance(o, (dict, list, tuple)) and (root or contains(o)):
            items = o.items() if isinstance(o, dict) else enumerate(o)
            for k, v in items:
                walk(v, f"{path}.{k}" if path else str(k))
            return
        values[path] = o

    walk(obj, "", root=True)
    return tensors, values


_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def raw_bytes(t: torch.Tensor) -> bytes:
    """The tensor's elements in row-major order as bytes, for any dtype and strides (viewed as
    integers of the same width first: torch has no copy kernels for some narrow dtypes)."""
    t = t.detach()
    if t.numel() == 0:
        return b""
    return t.view(_INT_OF_SIZE[t.element_size()]).contiguous().numpy().tobytes()


# dtypes the official torch loader reads back (safetensors 0.8.0 lacks F8_E8M0 and F4 there)
OFFICIAL_TORCH_DTYPES = set(official._TYPES.values())


def load_converted(path):
    """name -> (safetensors dtype name, shape, raw bytes), through the official package when
    its torch loader knows the dtype, else through tensoracle.safetensors."""
    out = {}
    with safetensors.safe_open(str(path), "pt") as f:
        names = list(f.keys())
    with ts.safe_open(str(path)) as f:
        info = {n: f.tensor_info(n) for n in names}
    for n in names:
        dtype, shape = info[n]["dtype"], tuple(info[n]["shape"])
        if dtype in ("F8_E8M0", "F4"):
            data = ts.load_file(str(path))[n]
            raw = data.view(np.uint8).tobytes() if dtype != "F4" else _pack_nibbles(data.view(np.uint8))
        else:
            with safetensors.safe_open(str(path), "pt") as f:
                t = f.get_tensor(n)
            assert tuple(t.shape) == shape
            raw = raw_bytes(t)
        out[n] = (dtype, shape, raw)
    return out


def _pack_nibbles(unpacked: np.ndarray) -> bytes:
    u = unpacked.reshape(-1).astype(np.uint8)
    return ((u[0::2] & 0x0F) | ((u[1::2] & 0x0F) << 4)).astype(np.uint8).tobytes()


ST_NAME = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
    torch.bool: "BOOL", torch.complex64: "C64", torch.uint16: "U16", torch.uint32: "U32",
    torch.uint64: "U64", torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2",
    torch.float8_e4m3fnuz: "F8_E4M3FNUZ", torch.float8_e5m2fnuz: "F8_E5M2FNUZ",
    torch.float8_e8m0fnu: "F8_E8M0", torch.float4_e2m1fn_x2: "F4",
}


def assert_matches_torch(pth, out, key=None, strip_prefix=None):
    """The converted file holds exactly the tensors torch.load gives, bit for bit. (These are
    files the tests wrote: weights_only=False is safe here, and needed — torch's restricted
    unpickler lacks the FRAME opcode of protocols 4 and 5, which tensoracle reads.)"""
    obj = torch.load(pth, weights_only=False)
    if key:
        for part in key.split("."):
            obj = obj[part]
    expected, values = flatten(obj)
    got = load_converted(out)
    names = {}
    for name, t in expected.items():
        if strip_prefix and name.startswith(strip_prefix) and len(name) > len(strip_prefix):
            name = name[len(strip_prefix):]
        names[name] = t
    assert set(got) == set(names)
    for name, t in names.items():
        dtype, shape, raw = got[name]
        assert dtype == ST_NAME[t.dtype], name
        want_shape = tuple(t.shape)
        if t.dtype == torch.float4_e2m1fn_x2:
            want_shape = want_shape[:-1] + (want_shape[-1] * 2,)
        assert shape == want_shape, name
        assert raw == raw_bytes(t.resolve_conj().resolve_neg()), name
    return names, values


def metadata(path):
    with safetensors.safe_open(str(path), "np") as f:
        return f.metadata()


def run_isolated(code: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


# ----------------------------------------------------------------------------------------
# model state dicts, protocols, layout


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)  # num_batches_tracked: an int64 scalar
        self.lin = torch.nn.Linear(4, 3)
        self.norm = torch.nn.LayerNorm(3)
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(3, 3) for _ in range(2)])
        self.register_buffer("mask", torch.tensor([True, False, True]))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_model_state_dict_every_protocol(tmp_path, protocol):
    torch.manual_seed(protocol)
    sd = Net().state_dict()
    pth = tmp_path / "model.pth"
    torch.save(sd, pth, pickle_protocol=protocol)
    out = tmp_path / "model.safetensors"
    report = tensoracle.convert_pth(pth, out)
    assert report["tensors"] == len(sd)
    names, values = assert_matches_torch(pth, out)
    assert list(names) == list(sd)  # dotted keys as in the state dict
    assert values == {}
    assert metadata(out) == {"format": "pt"}
    info = tensoracle.inspect_pth(pth)
    assert info["pickle_protocol"] == protocol
    assert info["archive"] == "model"
    assert info["byteorder"] == "little"
    assert info["format_version"] == 3
    assert [t["name"] for t in info["tensors"]] == list(sd)
    # the official loader accepts what we wrote, with every key
    assert set(official.load_file(out)) == set(sd)


def test_any_archive_folder_name(tmp_path):
    buf = io.BytesIO()
    torch.save({"w": torch.arange(3.0)}, buf)  # a buffer: torch names the folder "archive"
    odd = tmp_path / "my model.v2.pth"
    odd.write_bytes(buf.getvalue())
    torch.save({"w": torch.arange(3.0)}, tmp_path / "x y.pt")
    for p in (odd, tmp_path / "x y.pt"):
        out = p.with_suffix(".safetensors")
        tensoracle.convert_pth(p, out)
        assert_matches_torch(p, out)
    assert tensoracle.inspect_pth(odd)["archive"] == "archive"
    assert tensoracle.inspect_pth(tmp_path / "x y.pt")["archive"] == "x y"


def test_checkpoint_without_byteorder_record(tmp_path):
    """torch before 1.10 wrote no byteorder record; torch.load then assumes little-endian."""
    full = tmp_path / "full.pth"
    torch.save({"w": torch.arange(6.0).reshape(2, 3)}, full)
    pth = tmp_path / "nobo.pth"
    with zipfile.ZipFile(full) as zin, zipfile.ZipFile(pth, "w", zipfile.ZIP_STORED) as zout:
        for item in zin.infolist():
            if not item.filename.endswith("/byteorder"):
                zout.writestr(item.filename.replace("full/", "nobo/", 1), zin.read(item))
    assert torch.equal(torch.load(pth, weights_only=True)["w"], torch.arange(6.0).reshape(2, 3))
    out = tmp_path / "nobo.safetensors"
    tensoracle.convert_pth(pth, out)
    assert_matches_torch(pth, out)
    assert tensoracle.inspect_pth(pth)["byteorder"] == "little"  # torch's default too


ALL_DTYPES = [d for d in ST_NAME]


def _sample(dtype, shape, seed):
    g = torch.Generator().manual_seed(seed)
    n = int(np.prod(shape)) if shape else 1
    raw = torch.randint(0, 256, (n * torch.empty((), dtype=dtype).element_size(),), dtype=torch.uint8, generator=g)
    if dtype == torch.bool:
        raw = raw % 2
    return raw.view(dtype).reshape(shape)


def test_every_dtype_safetensors_holds(tmp_path):
    ck = {}
    for i, d in enumerate(ALL_DTYPES):
        name = str(d).split(".")[1]
        ck[name] = _sample(d, (3, 4), i)
        ck[name + "_scalar"] = _sample(d, (), 100 + i) if d != torch.float4_e2m1fn_x2 else _sample(d, (1,), 100 + i)
        ck[name + "_empty"] = torch.empty((2, 0, 3), dtype=d)
        ck[name + "_view"] = _sample(d, (4, 6), 200 + i)[1:, ::2]  # strided, with an offset
    pth = tmp_path / "dtypes.pth"
    torch.save(ck, pth)
    out = tmp_path / "dtypes.safetensors"
    tensoracle.convert_pth(pth, out)
    assert_matches_torch(pth, out)


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
@pytest.mark.parametrize("dtype", [torch.complex128, torch.complex32, torch.bits8])
def test_dtypes_safetensors_cannot_hold_are_refused(tmp_path, dtype):
    t = torch.zeros(4, dtype=torch.uint8).view(dtype) if dtype == torch.bits8 else torch.zeros(4, dtype=dtype)
    pth = tmp_path / "x.pth"
    torch.save({"w": torch.ones(2), "odd": t}, pth)
    with pytest.raises(tensoracle.UnsupportedError, match=rf"tensor 'odd': dtype {str(dtype)[6:]} has no safetensors"):
        tensoracle.convert_pth(pth, tmp_path / "x.safetensors")
    assert not (tmp_path / "x.safetensors").exists()
    listed = {t["name"]: t for t in tensoracle.inspect_pth(pth)["tensors"]}
    assert listed["odd"]["dtype"] is None and listed["w"]["dtype"] == "F32"


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
def test_quantized_tensors_are_outside_the_allow_list(tmp_path):
    q = torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8)
    pth = tmp_path / "q.pth"
    torch.save({"q": q}, pth)
    with pytest.raises(tensoracle.UnsafeCheckpointError, match=r"'torch\._utils\._rebuild_qtensor' is not in the allow list"):
        tensoracle.convert_pth(pth, tmp_path / "q.safetensors")


def test_shared_storages_and_views(tmp_path):
    torch.manual_seed(0)
    base = torch.randn(6, 8)
    emb = torch.nn.Parameter(torch.randn(5, 4))
    ck = {
        "base": base,
        "rows": base[2:5],                 # offset view, contiguous
        "cols": base[:, 3:7],              # strided
        "t": base.t(),                     # transposed
        "col": base[:, 1],                 # a column: stride 8
        "expanded": base[0].expand(3, 8),  # stride 0
        "embed.weight": emb,               # tied weights: the same Parameter twice
        "lm_head.weight": emb,
        "alone": torch.arange(4),
    }
    pth = tmp_path / "shared.pth"
    torch.save(ck, pth)
    out = tmp_path / "shared.safetensors"
    report = tensoracle.convert_pth(pth, out)
    assert report["shared_storages"] == 2
    assert report["views_made_contiguous"] == 4
    assert_matches_torch(pth, out)
    shared = json.loads(metadata(out)["tensoracle.shared_storage"])
    groups = sorted(sorted(v) for v in shared.values())
    assert groups == [["base", "col", "cols", "expanded", "rows", "t"], ["embed.weight", "lm_head.weight"]]
    assert all(k.startswith("shared/data/") for k in shared)
    info = {t["name"]: t for t in tensoracle.inspect_pth(pth)["tensors"]}
    assert info["embed.weight"]["parameter"] and info["embed.weight"]["requires_grad"]
    assert info["embed.weight"]["shares_storage_with"] == ["lm_head.weight"]
    assert not info["t"]["contiguous"] and info["rows"]["contiguous"]
    assert info["rows"]["storage_offset"] == 16
    # the official loader reads every alias back as its own full tensor
    loaded = official.load_file(out)
    assert torch.equal(loaded["lm_head.weight"], emb.detach())


def test_conjugate_and_negative_views(tmp_path):
    z = torch.randn(4, dtype=torch.complex64)
    w = torch.randn(4, dtype=torch.complex64)
    ck = {"conj": z.conj(), "neg_imag": w.conj().imag}  # torch's conj bit; imag of a conj has the neg bit
    assert ck["conj"].is_conj() and ck["neg_imag"].is_neg()
    pth = tmp_path / "c.pth"
    torch.save(ck, pth)
    out = tmp_path / "c.safetensors"
    tensoracle.convert_pth(pth, out)
    assert_matches_torch(pth, out)  # compared with resolve_conj / resolve_neg


# ----------------------------------------------------------------------------------------
# training checkpoints: key selection, values as metadata, parameters


def training_checkpoint():
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    sched.step()
    return {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "epoch": 12,
        "best_loss": 0.123456789,
        "config": {"name": "tiny", "layers": [4, 8, 2], "dropout": None, "amp": False, "betas": (0.9, 0.95),
                   "tags": ("a", "b"), "nested": {"deep": {"x": 1.5e-7, "big": 2**70}}},
        "first_param": next(model.parameters()),  # an nn.Parameter itself
    }


def test_training_checkpoint(tmp_path):
    ck = training_checkpoint()
    pth = tmp_path / "train.pth"
    torch.save(ck, pth)
    out = tmp_path / "train.safetensors"
    tensoracle.convert_pth(pth, out)
    names, values = assert_matches_torch(pth, out)
    assert "optimizer.state.0.exp_avg" in names and "optimizer.state.0.step" in names
    assert "first_param" in names
    meta = metadata(out)
    assert set(meta) == {"format", "tensoracle.shared_storage"} | set(values)
    shared = list(json.loads(meta["tensoracle.shared_storage"]).values())
    assert shared == [["model.0.weight", "first_param"]]  # the Parameter and the state dict's entry
    for key, value in values.items():
        assert json.loads(meta[key]) == json.loads(json.dumps(value)), key
    assert json.loads(meta["optimizer.param_groups"])[0]["betas"] == [0.9, 0.95]
    assert meta["best_loss"] == "0.123456789" and meta["epoch"] == "12"
    assert json.loads(meta["config"])["nested"]["deep"]["big"] == 2**70


def test_key_and_strip_prefix(tmp_path):
    torch.manual_seed(2)
    wrapped = torch.nn.DataParallel(torch.nn.Linear(3, 2))  # keys "module.weight", "module.bias"
    pth = tmp_path / "ddp.pth"
    torch.save({"state_dict": wrapped.state_dict(), "epoch": 3, "extra": {"w": torch.ones(1)}}, pth)
    out = tmp_path / "ddp.safetensors"
    tensoracle.convert_pth(pth, out, key="state_dict", strip_prefix="module.")
    assert_matches_torch(pth, out, key="state_dict", strip_prefix="module.")
    assert set(official.load_file(out)) == {"weight", "bias"}
    assert metadata(out) == {"format": "pt"}  # epoch is outside the selection
    tensoracle.convert_pth(pth, out, key="extra", overwrite=True)
    assert set(official.load_file(out)) == {"w"}
    with pytest.raises(tensoracle.InvalidArgument, match=r"no key 'model' in the checkpoint \(its keys: 'state_dict', 'epoch', 'extra'\)"):
        tensoracle.convert_pth(pth, tmp_path / "no.safetensors", key="model")
    with pytest.raises(tensoracle.InvalidArgument, match="'epoch' is a int"):
        tensoracle.convert_pth(pth, tmp_path / "no.safetensors", key="epoch")
    assert not (tmp_path / "no.safetensors").exists()


def test_values_of_every_kind(tmp_path):
    ck = {
        "w": torch.ones(1),
        "floats": [0.1, 1.0, 1e16, 1e-5, -0.0, 123456789.0],
        "specials": [math.inf, -math.inf],
        "nan": math.nan,
        "dtype": torch.float16,
        "device": torch.device("cuda", 1),
        "size": torch.Size([2, 3]),
        "set": {3, 1, 2},
        "bytes": b"\x00\xffab",
        "unicode": "ünïcødé \"quoted\" \n",
        "int_keys": {1: "a", 2: "b"},
    }
    pth = tmp_path / "v.pth"
    torch.save(ck, pth)
    out = tmp_path / "v.safetensors"
    tensoracle.convert_pth(pth, out)
    meta = metadata(out)
    assert json.loads(meta["floats"]) == ck["floats"]
    assert meta["floats"] == json.dumps(ck["floats"], separators=(",", ":"))  # Python's float repr
    assert json.loads(meta["specials"]) == [math.inf, -math.inf]  # Python's json reads these
    assert math.isnan(json.loads(meta["nan"]))
    assert json.loads(meta["dtype"]) == "torch.float16"
    assert json.loads(meta["device"]) == "cuda:1"
    assert json.loads(meta["size"]) == [2, 3]
    assert sorted(json.loads(meta["set"])) == [1, 2, 3]
    assert json.loads(meta["bytes"]) == {"__bytes__": "00ff6162"}
    assert json.loads(meta["unicode"]) == ck["unicode"]
    assert json.loads(meta["int_keys"]) == {"1": "a", "2": "b"}


def test_no_torch_needed(tmp_path):
    pth = tmp_path / "m.pth"
    torch.save(Net().state_dict(), pth)
    r = run_isolated(f"""
        import sys
        sys.modules["torch"] = None  # any import of torch now fails
        import tensoracle
        print(tensoracle.convert_pth({str(pth)!r}, {str(tmp_path / 'm.safetensors')!r})["tensors"])
        assert "torch" not in [m for m in sys.modules if sys.modules[m] is not None]
    """, tmp_path)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) == len(Net().state_dict())
    assert_matches_torch(pth, tmp_path / "m.safetensors")


@pytest.mark.parametrize("target", [torch.float32, torch.float16, torch.bfloat16])
def test_dtype_option_rounds_as_torch(tmp_path, target):
    torch.manual_seed(3)
    special = torch.tensor([0.0, -0.0, 1e-8, 6e-5, 65504.0, 65520.0, 1e30, -1e-40, math.inf, -math.inf, 1 / 3])
    ck = {
        "f32": torch.cat([torch.randn(1000) * 100, special]),
        "f64": torch.randn(500, dtype=torch.float64) * 1e3,
        "f16": torch.randn(300).half(),
        "bf16": torch.randn(300).bfloat16(),
        "view": torch.randn(20, 30)[:, ::3],
        "ints": torch.arange(5),
        "fp8": torch.randn(8).to(torch.float8_e4m3fn),
    }
    pth = tmp_path / "c.pth"
    torch.save(ck, pth)
    out = tmp_path / "c.safetensors"
    name = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}[target]
    tensoracle.convert_pth(pth, out, dtype=name)
    got = load_converted(out)
    for k, t in ck.items():
        want = t.to(target) if t.is_floating_point() and t.dtype != torch.float8_e4m3fn else t
        assert got[k][0] == ST_NAME[want.dtype], k
        assert got[k][2] == raw_bytes(want), k


# ----------------------------------------------------------------------------------------
# hostile checkpoints: refused, with no side effect


class Reduce:
    """An object whose unpickling calls fn(*args)."""

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


def hostile_pickles(marker: Path):
    touch = f"open({str(marker)!r}, 'w').close()"
    getattr_chain = (  # getattr(__import__('os'), 'system')('touch MARKER'), in raw opcodes
        b"\x80\x02c__builtin__\ngetattr\nc__builtin__\n__import__\nX\x02\x00\x00\x00os\x85R"
        + b"X\x06\x00\x00\x00system\x86R"
        + b"X" + struct.pack("<I", len(f"touch {marker}")) + f"touch {marker}".encode() + b"\x85R."
    )
    dotted = (  # protocol 4 walks dotted names: torch.serialization.os.system
        b"\x80\x04\x8c\x05torch\x8c\x17serialization.os.system\x93"
        + b"\x8c" + bytes([len(f"touch {marker}")]) + f"touch {marker}".encode() + b"\x85R."
    )
    return {
        "os.system": pickle.dumps({"w": Reduce(os.system, f"touch {marker}")}, protocol=2),
        "eval": pickle.dumps({"w": Reduce(eval, touch)}, protocol=2),
        "exec": pickle.dumps(Reduce(exec, touch), protocol=4),
        "getattr chain": getattr_chain,
        "dotted name": dotted,
    }


def replace_data_pkl(src: Path, dst: Path, payload: bytes):
    """A real checkpoint with its data.pkl swapped; every other record kept."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for item in zin.infolist():
            data = payload if item.filename.endswith("/data.pkl") else zin.read(item)
            zout.writestr(item.filename, data)


@pytest.mark.parametrize("kind", ["os.system", "eval", "exec", "getattr chain", "dotted name"])
def test_hostile_pickles_are_refused_without_side_effects(tmp_path, cli, kind):
    proof_marker = tmp_path / "proof"
    marker = tmp_path / "marker"
    real = tmp_path / "real.pth"
    torch.save({"w": torch.ones(3)}, real)

    # 1. The payload really runs under plain unpickling (the test could fail).
    proof = tmp_path / "proof.pth"
    replace_data_pkl(real, proof, hostile_pickles(proof_marker)[kind])
    r = run_isolated(f"""
        import torch
        try:
            torch.load({str(proof)!r}, weights_only=False)
        except Exception:
            pass
    """, tmp_path)
    assert proof_marker.exists(), f"the {kind} payload did not run under torch.load: {r.stderr}"

    # 2. The converter refuses it and runs nothing, from Python and from the CLI.
    evil = tmp_path / "evil.pth"
    replace_data_pkl(real, evil, hostile_pickles(marker)[kind])
    out = tmp_path / "out.safetensors"
    with pytest.raises(tensoracle.UnsafeCheckpointError, match=r"evil\.pth: real/data\.pkl: .*not in the allow list"):
        tensoracle.convert_pth(evil, out)
    with pytest.raises(tensoracle.UnsafeCheckpointError):
        tensoracle.inspect_pth(evil)
    r = subprocess.run([cli, "convert", str(evil), str(out)], capture_output=True, text=True)
    assert r.returncode == 2
    assert "not in the allow list" in r.stderr
    assert not marker.exists()
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil.pth", "proof", "proof.pth", "real.pth"]


def test_hostile_object_inside_a_real_checkpoint(tmp_path):
    marker = tmp_path / "marker"
    pth = tmp_path / "mixed.pth"
    torch.save({"w": torch.ones(2), "config": Reduce(os.system, f"touch {marker}")}, pth)
    with pytest.raises(tensoracle.UnsafeCheckpointError, match=r"global 'posix\.system' is not in the allow list"):
        tensoracle.convert_pth(pth, tmp_path / "out.safetensors")
    assert not marker.exists() and not (tmp_path / "out.safetensors").exists()
    # torch's own weights_only loader refuses it too: the allow lists agree on this
    with pytest.raises(pickle.UnpicklingError):
        torch.load(pth, weights_only=True)


# ----------------------------------------------------------------------------------------
# damaged and foreign files


def test_truncated_and_garbage_archives(tmp_path):
    pth = tmp_path / "m.pth"
    torch.save(training_checkpoint(), pth)
    data = pth.read_bytes()
    bad = tmp_path / "bad.pth"
    cuts = sorted({0, 1, 3, 4, 30, len(data) // 2, len(data) - 23, len(data) - 1} | set(range(0, len(data), len(data) // 25)))
    for n in cuts:
        bad.write_bytes(data[:n])
        with pytest.raises(tensoracle.FormatError):
            tensoracle.convert_pth(bad, tmp_path / "out.safetensors")
    rng = np.random.default_rng(0)
    for size in (10, 1000, 100_000):
        bad.write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
        with pytest.raises(tensoracle.FormatError):
            tensoracle.convert_pth(bad, tmp_path / "out.safetensors")
    bad.write_bytes(b"PK\x03\x04" + bytes(200))  # starts like a zip, is not one
    with pytest.raises(tensoracle.FormatError, match="zip"):
        tensoracle.convert_pth(bad, tmp_path / "out.safetensors")
    # data.pkl cut short inside a well-formed archive
    replace_data_pkl(pth, bad, zipfile.ZipFile(pth).read("m/data.pkl")[:-40])
    with pytest.raises(tensoracle.FormatError, match="truncated"):
        tensoracle.convert_pth(bad, tmp_path / "out.safetensors")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.pth", "m.pth"]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_legacy_and_torchscript_are_refused_with_advice(tmp_path):
    legacy = tmp_path / "legacy.pth"
    torch.save({"w": torch.ones(2)}, legacy, _use_new_zipfile_serialization=False)
    with pytest.raises(tensoracle.UnsupportedError, match=r"legacy checkpoint format .* torch\.save"):
        tensoracle.convert_pth(legacy, tmp_path / "out.safetensors")
    script = tmp_path / "script.pt"
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), script)
    with pytest.raises(tensoracle.UnsupportedError, match=r"TorchScript .*torch\.jit\.load.*state_dict"):
        tensoracle.convert_pth(script, tmp_path / "out.safetensors")
    plain = tmp_path / "plain.pkl"
    plain.write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(tensoracle.UnsupportedError, match="bare pickle"):
        tensoracle.convert_pth(plain, tmp_path / "out.safetensors")


def test_big_endian_checkpoint(tmp_path):
    """torch writes the byteorder record; a big-endian machine's checkpoint has big-endian
    storages. Made here by swapping each storage by its element size: torch.load reads it back
    to the original (so the file is what torch expects), and so does the converter."""
    torch.manual_seed(4)
    ck = {"f32": torch.randn(3, 4), "i64": torch.arange(5) * 2**40, "f16": torch.randn(4).half(),
          "c64": torch.randn(3, dtype=torch.complex64), "u8": torch.arange(7, dtype=torch.uint8),
          "view": torch.randn(4, 4).t()}
    pth = tmp_path / "le.pth"
    torch.save(ck, pth)
    big = tmp_path / "be.pth"
    unit = {}
    for line in pickle_storages(pth):
        unit[line[0]] = line[1]
    with zipfile.ZipFile(pth) as zin, zipfile.ZipFile(big, "w", zipfile.ZIP_STORED) as zout:
        for item in zin.infolist():
            data = zin.read(item)
            name = item.filename.replace("le/", "be/", 1)
            if name.endswith("/byteorder"):
                data = b"big"
            key = name.split("/data/")[-1] if "/data/" in name else None
            if key in unit and unit[key] > 1:
                data = np.frombuffer(data, np.uint8).reshape(-1, unit[key])[:, ::-1].tobytes()
            zout.writestr(name, data)
    back = torch.load(big, weights_only=True)
    for k in ck:
        assert torch.equal(back[k], ck[k]), k
    out = tmp_path / "be.safetensors"
    report = tensoracle.convert_pth(big, out)
    assert report["byte_swapped"]
    assert tensoracle.inspect_pth(big)["byteorder"] == "big"
    got = official.load_file(out)
    for k in ck:
        assert torch.equal(got[k], ck[k].contiguous()), k


def pickle_storages(pth):
    """(key, byte-swap unit) of every storage record: from inspect_pth's storage names and dtypes."""
    units = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "C64": 4}
    out = []
    for t in tensoracle.inspect_pth(pth)["tensors"]:
        out.append((t["storage"].split("/data/")[-1], units.get(t["dtype"], 1)))
    return out


def _zip64_repack(src: Path, dst: Path, hole: int):
    """src's entries behind an unreferenced `hole`-byte record (a sparse hole), so every real
    record lies past 4 GiB: zip64 extra fields for their offsets, zip64 end records."""
    entries = []
    with zipfile.ZipFile(src) as z, open(dst, "wb") as f:
        prefix = z.namelist()[0].split("/")[0]
        names = [f"{prefix}/data/hole"] + z.namelist()

        def local(name, size):
            off = f.tell()
            f.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, 0, 0, 0, 0, 0xFFFFFFFF, 0xFFFFFFFF, len(name), 20))
            f.write(name.encode() + struct.pack("<HHQQ", 1, 16, size, size))
            return off

        for name in names:
            if name.endswith("/data/hole"):
                off = local(name, hole)
                f.seek(hole, os.SEEK_CUR)
                entries.append((name, hole, 0, off))
            else:
                data = z.read(name)
                off = local(name, len(data))
                f.write(data)
                entries.append((name, len(data), zipfile.crc32(data), off))
        cd = f.tell()
        for name, size, crc, off in entries:
            f.write(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 0, 0, 0, crc, 0xFFFFFFFF, 0xFFFFFFFF,
                                len(name), 28, 0, 0, 0, 0, 0xFFFFFFFF))
            f.write(name.encode() + struct.pack("<HHQQQ", 1, 24, size, size, off))
        cd_size = f.tell() - cd
        z64 = f.tell()
        f.write(struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, len(entries), len(entries), cd_size, cd))
        f.write(struct.pack("<IIQI", 0x07064B50, 0, z64, 1))
        f.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), cd_size, 0xFFFFFFFF, 0))


def test_zip64_past_four_gib(tmp_path):
    pth = tmp_path / "small.pth"
    torch.manual_seed(5)
    torch.save({"w": torch.randn(64, 64), "b": torch.arange(10)}, pth)
    big = tmp_path / "big.pth"
    _zip64_repack(pth, big, hole=(4 << 30) + (300 << 20))
    assert big.stat().st_size > 4 << 30
    # torch reads the repacked archive (it is a valid zip64 checkpoint) ...
    back = torch.load(big, weights_only=True)
    assert torch.equal(back["w"], torch.load(pth, weights_only=True)["w"])
    # ... and so does the converter, reading only the records it needs
    out = tmp_path / "big.safetensors"
    tensoracle.convert_pth(big, out)
    assert_matches_torch(pth, out)


# ----------------------------------------------------------------------------------------
# streaming: memory does not grow with the checkpoint


# Starts `cmd` from a small Python process and prints the peak RSS (KiB) of that child alone
# (os.wait4). A child forked straight from the test process would count the test's own
# hundreds of MiB: Linux carries a process's peak RSS across exec.
_MEASURE = """
import os, subprocess, sys
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(p.pid, 0)
sys.exit(os.waitstatus_to_exitcode(status) or print(usage.ru_maxrss))
"""


def _peak_rss_mib(cmd) -> float:
    r = subprocess.run([sys.executable, "-c", _MEASURE, *cmd], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return int(r.stdout) / 1024


def test_memory_stays_below_largest_tensor_plus_64_mib(tmp_path, cli):
    largest = 8 << 20
    ck = {f"layer{i}.weight": torch.full((largest // 4,), float(i)) for i in range(40)}  # 320 MiB
    ck["big_view"] = torch.arange(2 << 20, dtype=torch.float32).reshape(1024, 2048).t()  # 8 MiB, transposed
    pth = tmp_path / "big.pth"
    torch.save(ck, pth)
    total_mib = pth.stat().st_size / 2**20
    baseline = _peak_rss_mib([cli, "inspect", str(pth)])  # the process and the pickle, no data
    bound = baseline + largest / 2**20 + 64
    assert total_mib > bound  # a converter that held the file would fail here
    out = tmp_path / "out.safetensors"
    peak = _peak_rss_mib([cli, "convert", str(pth), str(out)])
    assert peak <= bound, f"peak {peak:.0f} MiB > bound {bound:.0f} MiB ({total_mib:.0f} MiB checkpoint)"
    assert_matches_torch(pth, out)
    # the same through the buffered path (every tensor cast, chunk by chunk)
    peak = _peak_rss_mib([cli, "convert", str(pth), str(out), "--force", "--dtype", "bfloat16"])
    assert peak <= bound, f"peak {peak:.0f} MiB > bound {bound:.0f} MiB with --dtype bfloat16"
    with safetensors.safe_open(str(out), "pt") as f:
        for name in ("layer39.weight", "big_view"):
            assert torch.equal(f.get_tensor(name), ck[name].to(torch.bfloat16)), name


# ----------------------------------------------------------------------------------------
# command line


def test_cli_convert_and_inspect(tmp_path, cli):
    pth = tmp_path / "m.pth"
    torch.save({"state_dict": {"module.w": torch.ones(2, 3), "module.b": torch.zeros(3)}, "epoch": 4}, pth)
    out = tmp_path / "m.safetensors"
    r = subprocess.run([cli, "convert", str(pth), str(out), "--key", "state_dict", "--strip-prefix", "module.",
                        "--dtype", "float16"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "2 tensors" in r.stdout
    got = official.load_file(out)
    assert set(got) == {"w", "b"} and got["w"].dtype == torch.float16
    r = subprocess.run([cli, "convert", str(pth), str(out)], capture_output=True, text=True)
    assert r.returncode == 2 and "already exists" in r.stderr and "--force" in r.stderr
    assert official.load_file(out)["w"].dtype == torch.float16  # untouched
    r = subprocess.run([cli, "convert", str(pth), str(out), "--force"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert set(official.load_file(out)) == {"state_dict.module.w", "state_dict.module.b"}
    r = subprocess.run([cli, "convert", str(pth), str(out), "--force", "--dtype", "float64"], capture_output=True, text=True)
    assert r.returncode == 2 and "--dtype must be keep, float32, float16 or bfloat16" in r.stderr

    r = subprocess.run([cli, "inspect", str(pth)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "torch checkpoint (zip)" in r.stdout and "state_dict.module.w" in r.stdout and "epoch: 4" in r.stdout
    r = subprocess.run([cli, "inspect", str(pth), "--json"], capture_output=True, text=True)
    j = json.loads(r.stdout)
    assert j["format"] == "torch checkpoint"
    assert [t["name"] for t in j["tensors"]] == ["state_dict.module.w", "state_dict.module.b"]
    assert j["tensors"][0]["shape"] == [2, 3] and j["tensors"][0]["dtype"] == "F32"
    assert j["values"] == {"epoch": "4"}


def test_cli_inspect_tells_safetensors_from_pickles(tmp_path, cli):
    """A safetensors header of 128 bytes puts 0x80 first, as a pickle's PROTO opcode does."""
    header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    header += b" " * (128 - len(header))
    st = tmp_path / "small.safetensors"
    st.write_bytes(struct.pack("<Q", len(header)) + header + struct.pack("<f", 1.5))
    assert st.read_bytes()[0] == 0x80
    r = subprocess.run([cli, "inspect", str(st)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "format:   safetensors" in r.stdout
    legacy = tmp_path / "legacy.pth"
    torch.save({"w": torch.ones(1)}, legacy, _use_new_zipfile_serialization=False)
    r = subprocess.run([cli, "inspect", str(legacy)], capture_output=True, text=True)
    assert r.returncode == 2 and "legacy checkpoint format" in r.stderr

