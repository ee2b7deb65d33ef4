#!/usr/bin/env python3
"""Write a seed corpus for fuzz_onnx: small ONNX models (written with the onnx package) that
reach the importer's main paths: initializers in raw and typed form, Constant nodes, shape
chains (Shape -> Gather -> Concat -> Reshape), convolutions and pooling, broadcasting, slices,
pads, reductions, quantization, a few failing models.

    python3 cpp/fuzz/make_onnx_seeds.py /tmp/onnx-seeds
"""
import base64
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "seed", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def seeds():
    n = helper.make_node
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "w")
    yield "matmul_relu", model([n("MatMul", ["x", "w"], ["m"]), n("Relu", ["m"], ["y"])], [vi("x", [2, 3])], [vi("y", [2, 4])], [w])
    typed = helper.make_tensor("b", TensorProto.FLOAT, [4], [1.0, 2.0, 3.0, 4.0])
    yield "gemm_typed", model([n("Gemm", ["x", "w", "b"], ["y"], alpha=0.5, beta=2.0)], [vi("x", [2, 3])], [vi("y", [2, 4])], [w, typed])
    yield "shape_chain", model([
        n("Shape", ["x"], ["s"]),
        n("Constant", [], ["i"], value=numpy_helper.from_array(np.array([0], dtype=np.int64))),
        n("Gather", ["s", "i"], ["b"], axis=0),
        n("Constant", [], ["m1"], value=numpy_helper.from_array(np.array([-1], dtype=np.int64))),
        n("Concat", ["b", "m1"], ["shape"], axis=0),
        n("Reshape", ["x", "shape"], ["y"]),
    ], [vi("x", ["batch", 3, 4])], [vi("y", ["batch", 12])])
    k = numpy_helper.from_array(np.ones((4, 2, 3, 3), dtype=np.float32), "k")
    yield "conv_pool", model([
        n("Conv", ["x", "k"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1]),
        n("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
        n("GlobalAveragePool", ["p"], ["y"]),
    ], [vi("x", [1, 2, 7, 7])], [vi("y", [1, 4, 1, 1])], [k])
    yield "broadcast", model([n("Add", ["x", "z"], ["a"]), n("Where", ["c", "a", "x"], ["y"])],
                             [vi("x", [2, 3]), vi("z", [3]), vi("c", [1, 3], TensorProto.BOOL)], [vi("y", [2, 3])])
    st = numpy_helper.from_array(np.array([1, 0], dtype=np.int64), "st")
    en = numpy_helper.from_array(np.array([-1, 1000], dtype=np.int64), "en")
    pads = numpy_helper.from_array(np.array([0, 1, 0, 2], dtype=np.int64), "pads")
    yield "slice_pad", model([n("Slice", ["x", "st", "en"], ["s"]), n("Pad", ["s", "pads"], ["y"], mode="reflect")],
                             [vi("x", [4, 5])], [vi("y", [2, 8])], [st, en, pads])
    axes = numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")
    yield "reduce_softmax", model([n("ReduceMean", ["x", "axes"], ["r"], keepdims=1), n("Softmax", ["r"], ["y"], axis=0)],
                                  [vi("x", [3, 4])], [vi("y", [3, 1])], [axes], opset=18)
    sc = numpy_helper.from_array(np.array(0.1, dtype=np.float32), "sc")
    zp = numpy_helper.from_array(np.array(0, dtype=np.int8), "zp")
    yield "qdq", model([n("QuantizeLinear", ["x", "sc", "zp"], ["q"]), n("DequantizeLinear", ["q", "sc", "zp"], ["y"])],
                       [vi("x", [2, 3])], [vi("y", [2, 3])], [sc, zp])
    yield "unsupported", model([n("NonZero", ["x"], ["y"])], [vi("x", [3])], [vi("y", [1, -1], TensorProto.INT64)])
    ext = numpy_helper.from_array(np.zeros(3, dtype=np.float32), "e")
    ext.data_location = TensorProto.EXTERNAL
    ext.ClearField("raw_data")
    for key, value in (("location", "../escape.bin"), ("offset", "0"), ("length", "12")):
        ext.external_data.add(key=key, value=value)
    yield "external", model([n("Add", ["x", "e"], ["y"])], [vi("x", [3])], [vi("y", [3])], [ext])
    yield "old_opset", model([n("Unsqueeze", ["x"], ["y"], axes=[0]), ], [vi("x", [3])], [vi("y", [1, 3])], opset=11)


# Inputs fuzz_onnx once stopped on (kept as seeds so that the regressions stay covered): a node
# without an op_type, a Pad whose pads overflow int64, an out-of-range opset at a node without one,
# a pad of INT64_MIN, an input of an unknown type read by a node without an op_type, a Slice
# of a rank-0 tensor, a reshape target built from an empty int64 constant, a node of another
# domain without an op_type and with bytes that are not UTF-8, a Gather of INT64_MIN along an
# axis of unknown size.
REGRESSIONS = [
    "CA46gQIKDQoBeBIBcyIFUm91bmQKKRIBaSIIQ29uc3RhbnQqGgoFdmFsdWUqDggBEAdKCAAAAAAAAACAoAEECh4KAXMKAWkSAWIiBkdhdGhlcioLCgRheGlzGACgAQIKKhICbTIiCENvbnN0YW50KhoKBXZhbHVlKg4IARD/CEoH/////////6ABBAojCgFiCgJtMhIFc2hhcGUiBkNvbmNhdCoLCgRheGlzGACgAQIKFgoBeAoFc2hhcGUSAXkiB1Jlc2hhcGUSBHNlZWRaHAoBeBIXChUIARIRCgcSBWJhdGNoCgIIAwoCCARiGAoBeRITChEIARINCgcSBWJhdGNoCgIIDEIECgAQEQ==",
    "CB461AEKTWFNdWxwZS4IDjoSAXkiCicK//8uCA6FOgEAAyJgeWFQZCpYWFJYWFhYeFhYWCAgICAgICAgICAgICAgICAgYHlhUGQqWFhSWFhYWHhYWFggICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICEgICAnICAgICAgICAgICAgICAgICAgICAgISAgICAgICAgICBYWFhYICAgICAgICAgICAgICAgICAgISAgICcgICAgICAgICAgICAgICAgICAgICAhICAgICAgICAgIFhYWFhYWFhYWFhYDQ0NDQ0NDQ0AABE=",
    "CA46gQIKDQoBeBIBcyIFU2hhcGUKKRIBaSIIQ29uc3RhbnQqGgoFdmFsdWUqDggBEAdKCAAAAAAAAAAAoAEECh4KAXMKAWkSAWIiBkdhdGhlcioLCgRheGlzGACgAQIKKhICbTIiCENvbnN0YW50KhoKBXZhbHVlKg4IARAHSgj//////////6ABBAojCgFiCgJtMhIFc2hhcGUiBkNvbmNhdCoLCgRheGlzGACgAQIKFgoBeAoFc2hhcGUSAXkiB1Jlc2hhcGUSBHNlZWRaHAoBeBIXChUIARIRKgcSICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAwICADYhMKAQViYXRjaAoCCAMKAggEICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICBiGAoBeRITChEIARINCgcSBWJhdGNoCgIIDEIECgAQEQ==",
    "CA461AEKFQoBeAoCc3QKAmVuEgFzIgVTbGljZQolCgFzCgQAAACUEgF5IgNQYWQqEgoEbW9kZSIHcmVmbGVjdKABAxIEc2VlZCoaCAIQB0ICc3RKEAEAAAAAAAAAAAAAAAAAAAAqGggCEAdCAmVuShD//////////+gDAAAAAADlKiwIBBAHQgR4YWRzSiAAAAAAAAAAAAEAAAAAAAAAAAAAAAAAAAACAAAAAAAAAFoTCgF4Eg4KDAgBEgiVAggECgIIBWITCgF5Eg4KDAgBEggKAggCCgIICEIECgAQEQ==",
    "CA461AEKFQoBeAoCc3QKAmVuEgFzIgVTbGljZQolCgFzCgRwYWRzEgF5IgNQYWQqEgoEbW9kZSIHcmVmbGVjdKABAxIEc2VlZCoaCAIQB0ICc3RKEAEAAAAAAAAAAAAAAAAAAAAqGggCEAdCAmVuShD///X//////+gDAAAAAAAAKiwIBBAHQgRwYWRzSiAAAAAAAAAAgAEAAAAAAAAAAAAAAAAAAAACAAAAAAAAAFoTCgF4Eg4KDAgBEggKAggECgIIBWITCgF5Eg4KDAgBEggKAggCCgIICEIECgAQEQ==",
    "CA46ewoOCgF4CgF6EoUAIgNBZGQKEwoBYwoBYQoBeBIBeSIFXmhlcmUSBHNlZWRaEwoBeBIOCgwIfhIICgIIAgoCCANaDwoBegoKEggIARIECgIIA1oTCgFjEg4KDAgJEggKAggBCgIIA2ITCgF5Eg4KDAgBEggKAggCCgIIA0IECgAQEQ==",
    "CA46vQEKMwooeAoBdwoBYhIBeSIER2VtbSoPCgVhbHBoYRUAAAA/oAEBKg4KBGJldGEVAAAAQKABARIEc2VlZCo7CAMIBBABQgF3SjAAAAAAAACAPwAAAEAAAEBAAACAQAAAoEAAAMBAAADgQAAAAEEAABBBAAAgQQAAMEEqGQgEEAEiEAAAgD8AAABAAABAQAAAgEBCAWJaEwoBeBIOCgwIARIICgIIAgoCCANiEwoBeRIOCgwIARIICgIIAgoCCARCBAoAEBE=",
    "CA461AEKFQoBeAoCc3QKAmVuEgFzIgVTbGljZQolCgFzCgRwYWRzEgF5IgNQYWQqEgoEZG1vZSIHcmVmbGVjdKABAxIEc2VlZCoaCAIQB0ICc3RKEAEAAAAAAAAAAAAAAAAAAAAqGggCEAdCAmVuShD//////////+gDAAAAAAAAKiwIBBAHQgRwYWRzSiAAAAAAAAAAAAEAEg0uLi9lc2NhcGUuYmluagsKBm9mZloTCgF4Eg4KDAgBEggKAggECgIIBWITCgF5Eg4KDAgBEggKAggCCgIICEIECgAQEQ==",
    "CA46jgEKCQoBeAoBdxIBbSIGTWF0TXVsCgwKAW0SAXkiBFJlbHUSBHNlZWQqOwgDCAQQAUIBd0owADYAAAAAgD8AAABAAD1AQAAAgEAAAKBAAADAQAAA4EAAAABBAAAQQQAAIEEAADBBWhMKAXgSDgoMCAESCAoCCAIKAggDYhMKAYESDgoMCAESCAoCCAIKAggEQgQKABAA",
]


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, data in seeds():
        with open(os.path.join(out, name + ".onnx"), "wb") as f:
            f.write(data)
    for i, text in enumerate(REGRESSIONS):
        with open(os.path.join(out, f"regression_{i}.onnx"), "wb") as f:
            f.write(base64.b64decode(text))


if __name__ == "__main__":
    main()
