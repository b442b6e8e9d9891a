#!/usr/bin/python3
"""Writes malformed or invalid models for the error-handling tests (tests/e2e).

Each file is built with onnx.helper and written without onnx.checker (most
would not pass it: that is the point). Files, in --out:

  unknown_op.onnx             node 'n_foo' of op 'FooBar' (no such op)
  missing_input.onnx          node 'n_add' (Add) reads 'ghost', which nothing defines
  wrong_attr_type.onnx        node 'n_conv' (Conv) with 'strides' given as floats
  add_shape_mismatch.onnx     node 'n_add' (Add) of [2,3] and [4,5]
  conv_channel_mismatch.onnx  node 'n_conv' (Conv): input has 3 channels, weight expects 5
  not_onnx_png.onnx           a PNG header followed by junk
  not_onnx_text.onnx          a line of text
  empty.onnx                  zero bytes
  add_ok.onnx                 a valid model (z = x + y, float32 [2,3]) used as a control

Run with /usr/bin/python3 (Debian's onnx). Args: --out DIR.
"""
import argparse
import os
import sys

import numpy as np

import warnings
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    for _alias, _type in (("float", float), ("int", int), ("bool", bool), ("object", object)):
        if not hasattr(np, _alias):
            setattr(np, _alias, _type)

import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

OPSET = 13


def model(nodes, inputs, outputs, initializers=(), name="bad"):
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs),
                              initializer=list(initializers))
    m = helper.make_model(graph, producer_name="backplane-gen_bad_models",
                          opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = 8
    return m


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def build():
    rng = np.random.default_rng(7)
    out = {}

    out["unknown_op.onnx"] = model(
        [helper.make_node("FooBar", ["x"], ["y"], name="n_foo")],
        [f32("x", [1, 4])], [f32("y", [1, 4])])

    out["missing_input.onnx"] = model(
        [helper.make_node("Relu", ["x"], ["r"], name="n_relu"),
         helper.make_node("Add", ["r", "ghost"], ["y"], name="n_add")],
        [f32("x", [2, 3])], [f32("y", [2, 3])])

    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    conv = helper.make_node("Conv", ["x", "w"], ["y"], name="n_conv", kernel_shape=[3, 3])
    conv.attribute.append(helper.make_attribute("strides", [1.0, 1.0]))  # FLOATS, not INTS
    out["wrong_attr_type.onnx"] = model(
        [conv], [f32("x", [1, 3, 8, 8])], [f32("y", [1, 4, 6, 6])], [w])

    out["add_shape_mismatch.onnx"] = model(
        [helper.make_node("Add", ["a", "b"], ["y"], name="n_add")],
        [f32("a", [2, 3]), f32("b", [4, 5])], [f32("y", None)])

    w5 = numpy_helper.from_array(rng.standard_normal((4, 5, 3, 3)).astype(np.float32), "w")
    out["conv_channel_mismatch.onnx"] = model(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="n_conv", kernel_shape=[3, 3])],
        [f32("x", [1, 3, 8, 8])], [f32("y", None)], [w5])

    out["add_ok.onnx"] = model(
        [helper.make_node("Add", ["x", "y"], ["z"], name="n_add")],
        [f32("x", [2, 3]), f32("y", [2, 3])], [f32("z", [2, 3])])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name, m in build().items():
        with open(os.path.join(args.out, name), "wb") as f:
            f.write(m.SerializeToString())
    # The control model must be valid, or the tests built on it prove nothing.
    onnx.checker.check_model(onnx.load(os.path.join(args.out, "add_ok.onnx")))
    with open(os.path.join(args.out, "not_onnx_png.onnx"), "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(256)) * 4)
    with open(os.path.join(args.out, "not_onnx_text.onnx"), "wb") as f:
        f.write(b"this is not an ONNX model, just a line of text\n")
    with open(os.path.join(args.out, "empty.onnx"), "wb") as f:
        pass
    print(f"gen_bad_models: wrote {len(build()) + 3} files to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
