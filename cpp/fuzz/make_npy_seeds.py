#!/usr/bin/env python3
"""Write a seed corpus for fuzz_npy: small .npy files of every dtype tensoracle reads (C and
Fortran order, format versions 1 to 3, 0-d and empty arrays) and .npz archives of them,
stored and deflated, into the folder given as the first argument.

    python3 cpp/fuzz/make_npy_seeds.py /tmp/npy-seeds

Python 3 standard library only (the files are laid out as numpy.lib.format writes them).
"""
import io
import os
import struct
import sys
import zipfile

DTYPES = ["<f8", "<f4", "<f2", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8", "|b1", "<c8"]


def npy(descr, shape, fortran=False, version=1, data=None):
    size = int(descr[2:])
    n = 1
    for d in shape:
        n *= d
    shape_text = f"({shape[0]},)" if len(shape) == 1 else "(" + ", ".join(str(d) for d in shape) + ")"
    header = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape_text}, }}"
    pre = 10 if version == 1 else 12
    header += " " * ((64 - (pre + len(header) + 1) % 64) % 64) + "\n"
    length = struct.pack("<H", len(header)) if version == 1 else struct.pack("<I", len(header))
    body = bytes((i * 37 + 11) % 256 for i in range(n * size)) if data is None else data
    return b"\x93NUMPY" + bytes([version, 0]) + length + header.encode() + body


def npz(members, method):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=method) as z:
        for name, data in members:
            z.writestr(name + ".npy", data)
    return out.getvalue()


def main(folder):
    os.makedirs(folder, exist_ok=True)
    seeds = {}
    for i, d in enumerate(DTYPES):
        seeds[f"c_{i}.npy"] = npy(d, (2, 3))
    seeds["fortran.npy"] = npy("<f4", (2, 3, 2), fortran=True)
    seeds["v2.npy"] = npy("<i4", (4,), version=2)
    seeds["v3.npy"] = npy("<f8", (1, 1), version=3)
    seeds["scalar.npy"] = npy("<f8", ())
    seeds["empty.npy"] = npy("<f4", (0, 4))
    seeds["nan.npy"] = npy("<f4", (2,), data=struct.pack("<ff", float("nan"), float("inf")))
    members = [("a", npy("<f4", (3,))), ("b", npy("|u1", (2, 2))), ("dir/c", npy("<i8", ()))]
    seeds["stored.npz"] = npz(members, zipfile.ZIP_STORED)
    seeds["deflated.npz"] = npz(members, zipfile.ZIP_DEFLATED)
    for name, data in seeds.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
    print(f"{len(seeds)} seeds in {folder}")


if __name__ == "__main__":
    main(sys.argv[1])
