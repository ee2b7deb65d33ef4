#!/usr/bin/env python3
"""Write a seed corpus for fuzz_safetensors: small valid safetensors files and slightly
invalid ones (one rule broken each), into the folder given as the first argument.

    python3 cpp/fuzz/make_seeds.py /tmp/seeds

Python 3 standard library only.
"""
import json
import os
import struct
import sys

# Bits per element, as the format defines them.
BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32,
    "F64": 64, "I64": 64, "U64": 64, "C64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}


def nbytes(dtype, shape):
    n = 1
    for d in shape:
        n *= d
    return n * BITS[dtype] // 8


def pack(header, data=b"", declared=None):
    """8-byte little-endian length, the header text, the data section."""
    raw = header.encode("utf-8") if isinstance(header, str) else header
    length = len(raw) if declared is None else declared
    return struct.pack("<Q", length) + raw + data


def file_bytes(tensors, metadata=None, pad=True):
    """A valid file: tensors is a list of (name, dtype, shape); data is a byte pattern."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    data = bytearray()
    for i, (name, dtype, shape) in enumerate(tensors):
        size = nbytes(dtype, shape)
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [len(data), len(data) + size]}
        data += bytes((i * 31 + k * 7 + 1) & 0xFF for k in range(size))
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False)
    if pad:
        text += " " * (-len(text.encode("utf-8")) % 8)
    return pack(text, bytes(data))


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def dumps(obj):
    return json.dumps(obj, separators=(",", ":"))


def seeds():
    out = {}
    # --- valid -----------------------------------------------------------------------
    out["valid_empty"] = pack("{}")
    out["valid_one_f32"] = file_bytes([("weight", "F32", [2, 2])])
    out["valid_metadata_two"] = file_bytes(
        [("encoder.weight", "BF16", [2, 3]), ("encoder.bias", "F32", [3])],
        metadata={"format": "pt", "note": "seed"})
    out["valid_empty_metadata"] = file_bytes([("x", "U8", [4])], metadata={})
    out["valid_subbyte"] = file_bytes(
        [("f4", "F4", [2, 3]), ("f6a", "F6_E2M3", [4]), ("f6b", "F6_E3M2", [2, 4]),
         ("e4m3", "F8_E4M3", [3]), ("e8m0", "F8_E8M0", [2])])
    out["valid_scalar_and_empty"] = file_bytes(
        [("scalar", "F64", []), ("empty", "I32", [0, 3]), ("also_empty", "F16", [5, 0])])
    out["valid_all_dtypes"] = file_bytes(
        [("t_" + d.lower(), d, [4]) for d in BITS])
    out["valid_unicode_names"] = file_bytes(
        [("poids.é", "C64", [1]), ("重み", "I64", [2]), ("tab\tname", "BOOL", [3])],
        metadata={"ключ": "значение"})
    out["valid_unpadded"] = file_bytes([("a", "U16", [3]), ("b", "I8", [1])], pad=False)

    # --- slightly invalid (one rule broken each) --------------------------------------
    two = {"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 4, 12)}
    out["bad_overlap"] = pack(dumps(two), bytes(12))
    hole = {"a": entry("F32", [1], 0, 4), "b": entry("F32", [1], 8, 12)}
    out["bad_hole"] = pack(dumps(hole), bytes(12))
    out["bad_trailing_bytes"] = pack(dumps({"a": entry("F32", [1], 0, 4)}), bytes(8))
    out["bad_unknown_dtype"] = pack(dumps({"a": entry("F128", [1], 0, 16)}), bytes(16))
    out["bad_duplicate_key"] = pack(
        '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
        '"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', bytes(2))
    out["bad_negative_dim"] = pack(dumps({"a": entry("F32", [-1], 0, 4)}), bytes(4))
    out["bad_float_dim"] = pack('{"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}',
                                bytes(4))
    out["bad_header_too_long"] = pack("{}", declared=64)
    out["bad_metadata_number"] = pack('{"__metadata__":{"epoch":3}}')
    out["bad_f4_odd"] = pack(dumps({"a": entry("F4", [3], 0, 2)}), bytes(2))
    out["bad_offsets_three"] = pack(
        '{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,1,2]}}', bytes(2))
    out["bad_invalid_utf8"] = pack(b'{"a\xff":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}',
                                   bytes(1))
    return out


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: make_seeds.py OUTPUT_FOLDER\n")
        return 2
    folder = argv[1]
    os.makedirs(folder, exist_ok=True)
    for name, data in seeds().items():
        with open(os.path.join(folder, name + ".safetensors"), "wb") as f:
            f.write(data)
    print("wrote %d seeds to %s" % (len(seeds()), folder))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
