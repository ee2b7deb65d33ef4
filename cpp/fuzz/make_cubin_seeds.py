#!/usr/bin/env python3
"""Seeds for fuzz_cubin: minimal CUDA ELF files (ELF header, section-name and symbol string
tables, a symbol table with kernels and device functions) for a few architectures and both
flag layouts (CUDA ELF ABI 8 and older).

    python3 cpp/fuzz/make_cubin_seeds.py DIR
"""
import pathlib
import struct
import sys


def cuda_elf(sm, kernels, helpers=(), abi=8):
    names = list(kernels) + list(helpers)
    strtab = b"\0" + b"".join(n.encode() + b"\0" for n in names)
    shstrtab = b"\0.shstrtab\0.strtab\0.symtab\0"
    body = bytearray(64)
    shstr_off = len(body)
    body += shstrtab
    str_off = len(body)
    body += strtab
    sym_off = len(body)
    body += bytes(24)
    at = 1
    for i, n in enumerate(names):
        body += struct.pack("<IBBHQQ", at, 0x12, 0x10 if i < len(kernels) else 0, 0, 0, 0)
        at += len(n) + 1
    sh_off = len(body)
    sections = [(0, 0, 0, 0, 0, 0), (1, 3, shstr_off, len(shstrtab), 0, 0), (11, 3, str_off, len(strtab), 0, 0),
                (19, 2, sym_off, 24 * (1 + len(names)), 2, 24)]
    for name, typ, off, size, link, entsize in sections:
        body += struct.pack("<IIQQQQIIQQ", name, typ, 0, 0, off, size, link, 0, 0, entsize)
    flags = (sm << 8) | 0x6000004 if abi >= 8 else sm
    header = b"\x7fELF" + bytes([2, 1, 1, 0x41, abi]) + bytes(7)
    header += struct.pack("<HHIQQQIHHHHHH", 2, 190, 1, 0, 0, sh_off, flags, 64, 56, 0, 64, 4, 1)
    body[:64] = header
    return bytes(body)


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    (out / "sm90.cubin").write_bytes(cuda_elf(90, ["add_one", "_Z5scaleIfEvPT_S0_"], ["$add_one$_Z6helperf"]))
    (out / "sm120.cubin").write_bytes(cuda_elf(120, ["k"]))
    (out / "sm75_abi7.cubin").write_bytes(cuda_elf(75, ["k"], abi=7))
    (out / "empty.cubin").write_bytes(cuda_elf(86, []))


if __name__ == "__main__":
    main()
