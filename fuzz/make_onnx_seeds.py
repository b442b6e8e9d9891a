#!/usr/bin/python3
"""Writes small valid ONNX models, the seeds of the fuzz targets (scripts/fuzz.sh).

Each exercises a different part of the importer and of shape inference:
initializers (raw and typed), Constant nodes, attributes of every kind,
several opsets, and shape-computing subgraphs that constant folding
evaluates. Run with /usr/bin/python3 (Debian's onnx). Args: --out DIR.
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def save(out, name, nodes, inputs, outputs, inits=(), opset=13, domains=()):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)] +
                              [helper.make_opsetid(d, 1) for d in domains])
    model.ir_version = 10 if opset >= 21 else 8
    onnx.save(model, os.path.join(out, name + ".onnx"))


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    out = ap.parse_args().out
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    w = lambda name, *shape: numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    save(out, "seed_conv", [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Add", ["p", "p"], ["y"], name="add"),
    ], [f32("x", [1, 3, 8, 8])], [f32("y", [1, 4, 4, 4])], [w("w", 4, 3, 3, 3), w("b", 4)])

    save(out, "seed_gemm", [
        helper.make_node("Flatten", ["x"], ["f"], name="flat", axis=1),
        helper.make_node("Gemm", ["f", "w", "b"], ["g"], name="gemm", transB=1, alpha=0.5),
        helper.make_node("Softmax", ["g"], ["y"], name="softmax", axis=-1),
    ], [f32("x", [2, 2, 3])], [f32("y", [2, 5])], [w("w", 5, 6), w("b", 5)], opset=11)

    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [3, 4])
    save(out, "seed_reshape", [
        helper.make_node("Shape", ["x"], ["s"], name="shape_of"),
        helper.make_node("Constant", [], ["k"], name="const", value=shape),
        helper.make_node("Reshape", ["x", "k"], ["r"], name="reshape"),
        helper.make_node("Transpose", ["r"], ["t"], name="transpose", perm=[1, 0]),
        helper.make_node("Concat", ["t", "t"], ["c"], name="concat", axis=0),
        helper.make_node("MatMul", ["c", "m"], ["y"], name="matmul"),
        helper.make_node("Cast", ["s"], ["y2"], name="cast", to=TensorProto.FLOAT),
    ], [f32("x", [2, 6])], [f32("y", [8, 2]), f32("y2", [2])], [w("m", 3, 2)])

    save(out, "seed_norm", [
        helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["n"], name="bn", epsilon=1e-5),
        helper.make_node("GlobalAveragePool", ["n"], ["g"], name="gap"),
        helper.make_node("Squeeze", ["g", "axes"], ["q"], name="squeeze"),
        helper.make_node("Unsqueeze", ["q", "axes0"], ["u"], name="unsqueeze"),
        helper.make_node("Mul", ["u", "u"], ["y"], name="mul"),
    ], [f32("x", [1, 2, 4, 4])], [f32("y", [1, 1, 2])],
        [w("s", 2), w("b", 2), w("m", 2), numpy_helper.from_array(np.ones(2, np.float32), "v"),
         numpy_helper.from_array(np.array([2, 3], np.int64), "axes"),
         numpy_helper.from_array(np.array([0], np.int64), "axes0")])

    # A DenseNet layer: CpuOneDnn normalizes the concatenated features in
    # one pass (its concat_norm step), scale and shift stored as constants.
    save(out, "seed_dense", [
        helper.make_node("Conv", ["x", "w0"], ["f0"], name="conv0", pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["f0", "w1"], ["f1"], name="conv1"),
        helper.make_node("Concat", ["f0", "f1"], ["c"], name="concat", axis=1),
        helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"], name="bn"),
        helper.make_node("Relu", ["n"], ["r"], name="relu"),
        helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2"),
    ], [f32("x", [1, 3, 6, 6])], [f32("y", [1, 4, 6, 6])],
        [w("w0", 8, 3, 3, 3), w("w1", 4, 8, 1, 1), w("w2", 4, 12, 1, 1), w("s", 12), w("b", 12),
         w("m", 12), numpy_helper.from_array(np.ones(12, np.float32), "v")])

    # An embedding lookup: CpuOneDnn's gather step reads run-time int64 ids.
    save(out, "seed_embed", [
        helper.make_node("Gather", ["table", "ids"], ["e"], name="embed"),
        helper.make_node("MatMul", ["e", "w"], ["y"], name="project"),
    ], [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3])], [f32("y", [2, 3, 4])],
        [w("table", 10, 4), w("w", 4, 4)])

    save(out, "seed_slice", [
        helper.make_node("Slice", ["x", "st", "en", "ax"], ["s"], name="slice"),
        helper.make_node("Gather", ["s", "idx"], ["g"], name="gather", axis=1),
        helper.make_node("ReduceMean", ["g"], ["r"], name="mean", axes=[1], keepdims=1),
        helper.make_node("Sub", ["g", "r"], ["d"], name="sub"),
        helper.make_node("Tanh", ["d"], ["y"], name="tanh"),
    ], [f32("x", [2, 10])], [f32("y", [2, 3])],
        [numpy_helper.from_array(np.array([1], np.int64), "st"), numpy_helper.from_array(np.array([9], np.int64), "en"),
         numpy_helper.from_array(np.array([1], np.int64), "ax"), numpy_helper.from_array(np.array([0, 2, 4], np.int64), "idx")])

    # Ops whose output shapes come from tensor data (repeats, scales, pads,
    # ranges, target shapes): shape inference must not trust those values.
    i64 = lambda name, values: numpy_helper.from_array(np.array(values, np.int64), name)
    save(out, "seed_data_shapes", [
        helper.make_node("Tile", ["x", "reps"], ["t"], name="tile"),
        helper.make_node("Pad", ["t", "pads"], ["p"], name="pad", mode="constant"),
        helper.make_node("Expand", ["p", "eshape"], ["e"], name="expand"),
        helper.make_node("Resize", ["e", "", "scales"], ["y"], name="resize", mode="nearest"),
    ], [f32("x", [1, 2, 3])], [f32("y", [2, 4, 16])],
        [i64("reps", [1, 2, 2]), i64("pads", [0, 0, 1, 0, 0, 1]), i64("eshape", [2, 1, 1]),
         numpy_helper.from_array(np.array([1.0, 1.0, 2.0], np.float32), "scales")])

    save(out, "seed_range", [
        helper.make_node("Range", ["start", "limit", "delta"], ["r"], name="range"),
        helper.make_node("ConstantOfShape", ["cshape"], ["c"], name="cos",
                         value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.5])),
        helper.make_node("Cast", ["r"], ["rf"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Add", ["rf", "c"], ["a"], name="add"),
        helper.make_node("Add", ["a", "x"], ["y"], name="add_x"),
    ], [f32("x", [5])], [f32("y", [5])],
        [i64("start", 0), i64("limit", 10), i64("delta", 2), i64("cshape", [5])])

    control_flow_seeds(out)
    newer_opset_seeds(out)
    nbits_seeds(out)


def control_flow_seeds(out):
    """If, Loop and Scan with bodies reading the enclosing scope, sequences and
    optionals: the importer's subgraph, scope and type paths."""
    b = lambda name: helper.make_tensor_value_info(name, TensorProto.BOOL, [])
    i64s = lambda name: helper.make_tensor_value_info(name, TensorProto.INT64, [])
    one = numpy_helper.from_array(np.array([1.0], np.float32), "one")

    then_g = helper.make_graph([helper.make_node("Add", ["x", "one"], ["t"], name="add_one")],
                               "then", [], [f32("t", None)])
    else_g = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["e"], name="twice", axis=0)],
                               "else", [], [f32("e", None)])
    save(out, "seed_if", [
        helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then_g, else_branch=else_g),
    ], [b("c"), f32("x", [3])], [f32("y", None)], [one])

    body = helper.make_graph([
        helper.make_node("Cast", ["i"], ["fi"], name="i_float", to=TensorProto.FLOAT),
        helper.make_node("Mul", ["x", "fi"], ["xi"], name="x_times_i"),
        helper.make_node("Add", ["acc_in", "xi"], ["acc_out"], name="accumulate"),
        helper.make_node("Identity", ["c_in"], ["c_out"], name="cond"),
        helper.make_node("Identity", ["acc_out"], ["scan"], name="scan"),
    ], "body", [i64s("i"), b("c_in"), f32("acc_in", [1])],
        [b("c_out"), f32("acc_out", [1]), f32("scan", [1])])
    save(out, "seed_loop", [
        helper.make_node("Loop", ["M", "", "acc0"], ["acc", "accs"], name="loop", body=body),
    ], [i64s("M"), f32("x", [1])], [f32("acc", [1]), f32("accs", None)],
        [numpy_helper.from_array(np.zeros([1], np.float32), "acc0")])

    scan_body = helper.make_graph([
        helper.make_node("Add", ["s_in", "row"], ["s_out"], name="add"),
        helper.make_node("Identity", ["s_out"], ["p"], name="partial"),
    ], "scan_body", [f32("s_in", [2]), f32("row", [2])], [f32("s_out", [2]), f32("p", [2])])
    save(out, "seed_scan", [
        helper.make_node("Scan", ["s0", "x"], ["s", "partial"], name="scan", body=scan_body,
                         num_scan_inputs=1),
    ], [f32("x", [3, 2])], [f32("s", [2]), f32("partial", [3, 2])],
        [numpy_helper.from_array(np.zeros([2], np.float32), "s0")], opset=11)

    seq = helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, None)
    save(out, "seed_sequence", [
        helper.make_node("SequenceInsert", ["seq", "x"], ["y"], name="insert"),
        helper.make_node("SequenceLength", ["y"], ["n"], name="length"),
        helper.make_node("ConcatFromSequence", ["y"], ["z"], name="concat", axis=0),
        helper.make_node("SplitToSequence", ["z"], ["parts"], name="split", axis=0),
        helper.make_node("SequenceAt", ["parts", "n"], ["last"], name="at"),
    ], [seq, f32("x", [2])], [i64s("n"), f32("z", None), f32("last", None)])

    opt = helper.make_value_info("o", helper.make_optional_type_proto(
        helper.make_tensor_type_proto(TensorProto.FLOAT, [2])))
    save(out, "seed_optional", [
        helper.make_node("OptionalHasElement", ["o"], ["has"], name="has"),
        helper.make_node("Optional", [], ["empty"], name="empty",
                         type=helper.make_tensor_type_proto(TensorProto.FLOAT, [])),
        helper.make_node("OptionalGetElement", ["o"], ["v"], name="get"),
        helper.make_node("NonZero", ["v"], ["nz"], name="nonzero"),
    ], [opt], [b("has"), helper.make_tensor_value_info("nz", TensorProto.INT64, [1, None])],
        opset=15)


def newer_opset_seeds(out):
    """Opsets 19 to 25, read as 18 (src/onnx/opset_adapter.hpp): operators whose meaning
    changed, new ones rewritten at import, int4 weights quantized in blocks."""
    rng = np.random.default_rng(1)
    w = lambda name, *shape: numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
    int4 = onnx.TensorProto()
    int4.name, int4.data_type = "q4", 22
    int4.dims.extend([8, 4])
    int4.raw_data = bytes(range(16))
    save(out, "seed_opset23", [
        helper.make_node("GroupNormalization", ["x", "gs", "gb"], ["g"], name="gn", num_groups=2),
        helper.make_node("Gelu", ["g"], ["ge"], name="gelu", approximate="tanh"),
        helper.make_node("RMSNormalization", ["ge", "rs"], ["r"], name="rms", axis=-1),
        helper.make_node("DequantizeLinear", ["q4", "qs"], ["w"], name="dq", axis=0,
                         block_size=4),
        helper.make_node("MatMul", ["r", "w"], ["m"], name="matmul"),
        helper.make_node("QuantizeLinear", ["m", "ys"], ["mq"], name="q",
                         output_dtype=TensorProto.INT8),
        helper.make_node("DequantizeLinear", ["mq", "ys"], ["y"], name="dq2"),
    ], [f32("x", [1, 4, 8])], [f32("y", [1, 4, 4])],
        [w("gs", 4), w("gb", 4), w("rs", 8), int4,
         numpy_helper.from_array(np.full([2, 4], 0.1, np.float32), "qs"),
         numpy_helper.from_array(np.array(0.05, np.float32), "ys")], opset=23)


def nbits_seeds(out):
    """4-bit weights kept 4-bit: a 4-bit embedding table (GatherBlockQuantized) added to the
    input, a MatMulNBits with packed zero points and a bias, and a MatMul by int4 weights
    dequantized in blocks of 16 (ONNX Runtime's QDQ form), which the import turns into one."""
    rng = np.random.default_rng(2)
    K, N, block = 32, 4, 16
    int4 = onnx.TensorProto()
    int4.name, int4.data_type = "q4", 22
    int4.dims.extend([K, N])
    int4.raw_data = rng.integers(0, 256, K * N // 2, dtype=np.uint8).tobytes()
    u8 = lambda name, *shape: numpy_helper.from_array(
        rng.integers(0, 256, shape, dtype=np.uint8), name)
    f = lambda name, *shape: numpy_helper.from_array(
        (rng.random(shape) * 0.1).astype(np.float32), name)
    save(out, "seed_nbits", [
        helper.make_node("GatherBlockQuantized", ["T", "ids", "TS", "TZ"], ["e"], name="embed",
                         domain="com.microsoft", block_size=block, bits=4),
        helper.make_node("Add", ["x", "e"], ["xe"], name="add"),
        helper.make_node("MatMulNBits", ["xe", "B", "S", "Z", "", "bias"], ["m"], name="nbits",
                         domain="com.microsoft", K=K, N=N, bits=4, block_size=block),
        helper.make_node("DequantizeLinear", ["q4", "qs"], ["w"], name="dq", axis=0,
                         block_size=block),
        helper.make_node("Concat", ["m", "m", "m", "m", "m", "m", "m", "m"], ["c"], name="cat",
                         axis=-1),
        helper.make_node("MatMul", ["c", "w"], ["y"], name="matmul"),
    ], [f32("x", [1, 2, K]), helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 2])],
        [f32("y", [1, 2, N])],
        [u8("B", N, K // block, block // 2), f("S", N * K // block), u8("Z", N), f("bias", N),
         int4, f("qs", K // block, N), u8("T", 6, K // 2), f("TS", 6, K // block), u8("TZ", 6, 1)],
        opset=21, domains=["com.microsoft"])


if __name__ == "__main__":
    main()
