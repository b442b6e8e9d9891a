#!/usr/bin/python3
"""Models of ONNX opsets 19 to 25 against ONNX Runtime.

Backplane reads a model of default-domain opset 19 to 25 as the opset-18 model it is
equivalent to (src/onnx/opset_adapter.hpp). Each case here is a model built with onnx.helper
at one of those opsets, around an operator whose meaning changed after 18 (or one added that
the import maps onto operators it has), one model of ordinary operators at every opset from
19 to 25, and weights of 4 bits: int4 and uint4 tensors, DequantizeLinear in blocks, and ONNX
Runtime's GatherBlockQuantized (src/onnx/matmul_nbits.hpp). Backplane runs each on CpuRef and on the default backends, within the rule of
ONNX Runtime's outputs for the same file (its optimiser off):
max|got - ref| <= 1e-4 * max|ref| + 1e-6 per output (docs/numerics.md). A node whose newer
meaning opset 18 cannot express, and a model above opset 25, fail to load with an error
naming the node (or the opset) and why.

Usage: newer_opsets_test.py BACKPLANE_CLI ORT_MODULE_DIR WORK_DIR
Fails when node or onnxruntime-node (ORT_MODULE_DIR) is missing.
"""
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ort_optimized_test as common  # noqa: E402  (check, ort_run, backplane_run, compare)

F = TensorProto.FLOAT


def model(nodes, inputs, outputs, inits, opset, contrib=False):
    """A model of `nodes` at default-domain `opset`; inputs and outputs as
    (name, elem_type, shape) with None for an open dim; inits as name -> array."""
    g = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(a, n) for n, a in inits.items()])
    imports = [helper.make_opsetid("", opset)]
    if contrib:
        imports.append(helper.make_opsetid("com.microsoft", 1))
    m = helper.make_model(g, opset_imports=imports)
    m.ir_version = 10 if opset >= 23 else 9
    return m


def rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def plain_model(opset, rng):
    """Conv, Relu, Reshape, MatMul, Softmax, Cast and Transpose: operators whose meaning
    did not change after 18."""
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Reshape", ["r", "shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "m"], ["mm"]),
        helper.make_node("Softmax", ["mm"], ["sm"], axis=-1),
        helper.make_node("Cast", ["sm"], ["y"], to=F),
        helper.make_node("Transpose", ["sm"], ["t"], perm=[1, 0]),
    ]
    inits = {"w": rand(rng, 4, 3, 3, 3), "b": rand(rng, 4), "shape": np.array([2, -1], np.int64),
             "m": rand(rng, 4 * 5 * 5, 7)}
    return (model(nodes, [("x", F, [2, 3, 5, 5])], [("y", F, [2, 7]), ("t", F, [7, 2])], inits,
                  opset), {"x": rand(rng, 2, 3, 5, 5)})


def cases(rng):
    """(label, model, inputs[, the model ONNX Runtime's reference comes from])."""
    out = []
    for opset in range(19, 26):
        m, x = plain_model(opset, rng)
        out.append((f"Conv, MatMul, Softmax at opset {opset}", m, x))
    x4 = rand(rng, 2, 6, 5, 4)
    out.append(("Cast with saturate (19)", model(
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16, saturate=1)],
        [("x", F, [2, 3])], [("y", TensorProto.FLOAT16, [2, 3])], {}, 19),
        {"x": rand(rng, 2, 3)}))
    out.append(("QuantizeLinear with output_dtype int8 and no zero point (21)", model(
        [helper.make_node("QuantizeLinear", ["x", "s"], ["q"], output_dtype=TensorProto.INT8),
         helper.make_node("DequantizeLinear", ["q", "s"], ["y"])],
        [("x", F, [2, 6, 5, 4])], [("y", F, [2, 6, 5, 4])],
        {"s": np.array(0.02, np.float32)}, 21), {"x": x4}))
    out.append(("QuantizeLinear per channel with saturate, output_dtype uint8 (21)", model(
        [helper.make_node("QuantizeLinear", ["x", "s"], ["q"], axis=1, saturate=1,
                          output_dtype=TensorProto.UINT8),
         helper.make_node("DequantizeLinear", ["q", "s"], ["y"], axis=1)],
        [("x", F, [2, 6, 5, 4])], [("y", F, [2, 6, 5, 4])],
        {"s": np.linspace(0.01, 0.03, 6).astype(np.float32)}, 21), {"x": x4}))
    q = {"q": rng.integers(0, 256, (3, 4)).astype(np.uint8)}
    dq_init = {"s": np.array(0.05, np.float32), "z": np.array(128, np.uint8)}
    out.append(("DequantizeLinear with output_dtype float32, its scale's (23)", model(
        [helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], output_dtype=F)],
        [("q", TensorProto.UINT8, [3, 4])], [("y", F, [3, 4])], dq_init, 23), q))
    # ONNX Runtime fails on an output type other than the scale's: its reference is the
    # same dequantization followed by a Cast.
    out.append(("DequantizeLinear with output_dtype float16 (23)", model(
        [helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"],
                          output_dtype=TensorProto.FLOAT16)],
        [("q", TensorProto.UINT8, [3, 4])], [("y", TensorProto.FLOAT16, [3, 4])], dq_init, 23),
        q, model([helper.make_node("DequantizeLinear", ["q", "s", "z"], ["f"]),
                  helper.make_node("Cast", ["f"], ["y"], to=TensorProto.FLOAT16)],
                 [("q", TensorProto.UINT8, [3, 4])], [("y", TensorProto.FLOAT16, [3, 4])],
                 dq_init, 23)))
    out.append(("AveragePool with dilations 1 (19)", model(
        [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], dilations=[1, 1],
                          pads=[1, 1, 1, 1], count_include_pad=0)],
        [("x", F, [2, 6, 5, 4])], [("y", F, None)], {}, 19), {"x": x4}))
    for what, extra in [("sizes", {"sizes": np.array([2, 6, 9, 7], np.int64)}),
                        ("scales 2", {"scales": np.array([1, 1, 2, 2], np.float32)})]:
        ins = ["x", "", "scales" if "scales" in extra else "", "sizes" if "sizes" in extra else ""]
        while ins[-1] == "":
            ins.pop()
        out.append((f"Resize half_pixel_symmetric with {what} (19)", model(
            [helper.make_node("Resize", ins, ["y"], mode="linear",
                              coordinate_transformation_mode="half_pixel_symmetric")],
            [("x", F, [2, 6, 5, 4])], [("y", F, None)], extra, 19), {"x": x4}))
    for label, pads, axes in [("on H and W", [0, 0, 1, 2, 0, 0, 2, 1], None),
                              ("on the last axis, wider than it, by axes", [3, 5], [-1]),
                              ("cropping the channels", [0, -1, 0, 0, 0, 2, 0, 0], None)]:
        inits = {"p": np.array(pads, np.int64)}
        ins = ["x", "p"]
        if axes is not None:
            inits["a"] = np.array(axes, np.int64)
            ins += ["", "a"]
        out.append((f"Pad wrap {label} (19)", model(
            [helper.make_node("Pad", ins, ["y"], mode="wrap")],
            [("x", F, [2, 6, 5, 4])], [("y", F, None)], inits, 19), {"x": x4}))
    sig = rand(rng, 2, 16, 1)
    out.append(("DFT with its axis as an input (20)", model(
        [helper.make_node("DFT", ["x", "", "axis"], ["y"])],
        [("x", F, [2, 16, 1])], [("y", F, None)], {"axis": np.array(1, np.int64)}, 20),
        {"x": sig}))
    out.append(("DFT inverse, default axis (20)", model(
        [helper.make_node("DFT", ["x"], ["y"], inverse=1)],
        [("x", F, [2, 16, 2])], [("y", F, None)], {}, 20), {"x": rand(rng, 2, 16, 2)}))
    grid = (rng.random((2, 3, 4, 2)) * 2.2 - 1.1).astype(np.float32)
    for mode in ["linear", "nearest", "cubic"]:
        out.append((f"GridSample mode {mode} (20)", model(
            [helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode)],
            [("x", F, [2, 6, 5, 4]), ("g", F, [2, 3, 4, 2])], [("y", F, None)], {}, 20),
            {"x": x4, "g": grid}))
    for shape in [(2, 6, 5, 4), (3, 6, 7)]:
        out.append((f"GroupNormalization per channel, input {list(shape)} (21)", model(
            [helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3,
                              epsilon=1e-4)],
            [("x", F, list(shape))], [("y", F, list(shape))],
            {"s": rand(rng, 6), "b": rand(rng, 6)}, 21), {"x": rand(rng, *shape) * 3 + 1}))
    for approx in ["none", "tanh"]:
        out.append((f"Gelu approximate={approx} (20)", model(
            [helper.make_node("Gelu", ["x"], ["y"], approximate=approx)],
            [("x", F, [2, 6, 5, 4])], [("y", F, [2, 6, 5, 4])], {}, 20), {"x": x4 * 2}))
    for axis in [-1, 1]:
        out.append((f"RMSNormalization axis {axis} (23)", model(
            [helper.make_node("RMSNormalization", ["x", "s"], ["y"], axis=axis, epsilon=1e-5)],
            [("x", F, [2, 5, 8])], [("y", F, [2, 5, 8])],
            {"s": rand(rng, *([8] if axis == -1 else [5, 8]))}, 23), {"x": rand(rng, 2, 5, 8)}))
    for alpha in [1.0, 0.5]:
        out.append((f"Swish alpha {alpha} (24)", model(
            [helper.make_node("Swish", ["x"], ["y"], alpha=alpha)],
            [("x", F, [2, 6, 5, 4])], [("y", F, [2, 6, 5, 4])], {}, 24), {"x": x4 * 2}))
    out += attention_cases(rng) + rotary_cases(rng) + blocked_cases(rng) + gather_cases(rng)
    # A subgraph's nodes are read at the model's opset too.
    then_g = helper.make_graph([helper.make_node("Gelu", ["x"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", F, [2, 6, 5, 4])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", F, [2, 6, 5, 4])])
    out.append(("If whose branch holds Gelu (20)", model(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
        [("x", F, [2, 6, 5, 4]), ("c", TensorProto.BOOL, [])], [("y", F, [2, 6, 5, 4])], {}, 20),
        {"x": x4, "c": np.array(True)}))
    return out


def attention_cases(rng):
    """ONNX's Attention (23): 4-D and 3-D, grouped heads, past and presents, masks, causal,
    scale and softcap."""
    out = []
    B, S, P, h = 2, 3, 4, 16

    def att(label, heads, kv_heads, three_d, attrs, past=False, mask=None):
        q_shape = [B, S, heads * h] if three_d else [B, heads, S, h]
        kv_shape = [B, S, kv_heads * h] if three_d else [B, kv_heads, S, h]
        ins = [("q", F, q_shape), ("k", F, kv_shape), ("v", F, kv_shape)]
        feeds = {"q": rand(rng, *q_shape), "k": rand(rng, *kv_shape), "v": rand(rng, *kv_shape)}
        names = ["q", "k", "v", "", "", ""]
        outs = [("y", F, None)]
        if mask is not None:
            ins.append(("m", mask.dtype == np.bool_ and TensorProto.BOOL or F, list(mask.shape)))
            feeds["m"] = mask
            names[3] = "m"
        if past:
            for n in ["pk", "pv"]:
                ins.append((n, F, [B, kv_heads, P, h]))
                feeds[n] = rand(rng, B, kv_heads, P, h)
            names[4:6] = ["pk", "pv"]
            outs += [("present_k", F, None), ("present_v", F, None)]
        while names[-1] == "":
            names.pop()
        if three_d:
            attrs = dict(attrs, q_num_heads=heads, kv_num_heads=kv_heads)
        node = helper.make_node("Attention", names, [o[0] for o in outs], **attrs)
        out.append((f"Attention {label} (23)", model([node], ins, outs, {}, 23), feeds))

    T = S + P
    keep = rng.random((B, 1, S, T)) > 0.3
    keep[..., 0] = True  # every query sees a key
    att("4-D, 4 heads", 4, 4, False, {})
    att("3-D, 4 query heads on 2, causal, past and presents", 4, 2, True, {"is_causal": 1},
        past=True)
    att("4-D, one key head (MQA), causal, past", 4, 1, False, {"is_causal": 1}, past=True)
    att("4-D, boolean mask, scale 0.3, past", 2, 2, False, {"scale": 0.3}, past=True, mask=keep)
    att("4-D, float mask [S, T], softcap 2", 2, 2, False, {"softcap": 2.0},
        mask=rand(rng, S, S))
    # Opset 24: keys past each sequence's count are padding.
    q_shape, kv_shape = [B, S, 4 * h], [B, 5, 2 * h]
    node = helper.make_node("Attention", ["q", "k", "v", "", "", "", "n"], ["y"],
                            q_num_heads=4, kv_num_heads=2)
    out.append(("Attention 3-D with nonpad_kv_seqlen (24)", model(
        [node], [("q", F, q_shape), ("k", F, kv_shape), ("v", F, kv_shape),
                 ("n", TensorProto.INT64, [B])], [("y", F, None)], {}, 24),
        {"q": rand(rng, *q_shape), "k": rand(rng, *kv_shape), "v": rand(rng, *kv_shape),
         "n": np.array([5, 2], np.int64)}))
    return out


def rotary_cases(rng):
    """ONNX's RotaryEmbedding (23): 3-D and 4-D, position_ids or caches per token,
    interleaved, partial."""
    out = []
    B, S, N, h, positions = 2, 5, 3, 16, 32

    def rot(label, four_d, interleaved, with_ids, rotary_dim=0):
        half = (rotary_dim or h) // 2
        x_shape = [B, N, S, h] if four_d else [B, S, N * h]
        angles = rng.random((positions, half)).astype(np.float32) * 6.0
        feeds = {"x": rand(rng, *x_shape)}
        ins, inits = [("x", F, x_shape)], {}
        attrs = {"interleaved": int(interleaved)}
        if not four_d:
            attrs["num_heads"] = N
        if rotary_dim:
            attrs["rotary_embedding_dim"] = rotary_dim
        names = ["x", "cos", "sin"]
        if with_ids:
            inits = {"cos": np.cos(angles), "sin": np.sin(angles)}
            ins.append(("ids", TensorProto.INT64, [B, S]))
            feeds["ids"] = rng.integers(0, positions, (B, S)).astype(np.int64)
            names.append("ids")
        else:  # caches of each token, as inputs
            a = rng.random((B, S, half)).astype(np.float32) * 6.0
            ins += [("cos", F, [B, S, half]), ("sin", F, [B, S, half])]
            feeds.update({"cos": np.cos(a), "sin": np.sin(a)})
        node = helper.make_node("RotaryEmbedding", names, ["y"], **attrs)
        out.append((f"RotaryEmbedding {label} (23)",
                    model([node], ins, [("y", F, x_shape)], inits, 23), feeds))

    rot("3-D, position_ids", False, False, True)
    rot("4-D, interleaved, position_ids", True, True, True)
    rot("4-D, caches per token", True, False, False)
    rot("3-D, interleaved, caches per token", False, True, False)
    rot("3-D, first 8 dims of 16", False, False, True, rotary_dim=8)
    return out


def packed_4bit(name, values, signed):
    """A TensorProto of INT4 (22) or UINT4 (21): two values a byte, the first low."""
    flat = (values.astype(np.int16).ravel() & 0xF).astype(np.uint8)
    if flat.size % 2:
        flat = np.append(flat, np.uint8(0))
    t = TensorProto()
    t.name = name
    t.data_type = 22 if signed else 21
    t.dims.extend(values.shape)
    t.raw_data = (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8).tobytes()
    return t


def blocked_cases(rng):
    """MatMul by weights quantized in blocks along K (DequantizeLinear's block_size, 21), as
    ONNX Runtime's 4-bit quantizer writes them in QDQ form: int4 with no zero point, uint4 and
    uint8 with zero points, a K that is not a whole number of blocks. 4-bit ones in blocks of
    16 and more run as MatMulNBits (weights kept 4-bit); the rest are dequantized at import."""
    out = []
    M, N = 3, 6
    for label, K, block, kind in [("int4, blocks of 16", 64, 16, "int4"),
                                  ("uint4 with zero points, blocks of 8, K 20", 20, 8, "uint4"),
                                  ("uint8 with zero points, blocks of 4, on axis 1", 12, 4, "uint8"),
                                  ("int4 with zero points, blocks of 32, K 80", 80, 32, "int4z"),
                                  ("uint4, no zero points, blocks of 64", 128, 64, "uint4n")]:
        axis = 1 if kind == "uint8" else 0
        wshape = (N, K) if axis == 1 else (K, N)
        groups = (K + block - 1) // block
        sshape = (N, groups) if axis == 1 else (groups, N)
        lo, hi = {"int4": (-8, 8), "int4z": (-8, 8), "uint4": (0, 16), "uint4n": (0, 16),
                  "uint8": (0, 256)}[kind]
        q = rng.integers(lo, hi, wshape)
        scale = (rng.random(sshape) * 0.05 + 0.01).astype(np.float32)
        inits = [numpy_helper.from_array(scale, "s")]
        names = ["w", "s"]
        if kind == "int4":
            inits.append(packed_4bit("w", q, True))
        elif kind == "int4z":
            inits += [packed_4bit("w", q, True),
                      packed_4bit("z", rng.integers(-8, 8, sshape), True)]
            names.append("z")
        elif kind == "uint4n":
            inits.append(packed_4bit("w", q, False))
        elif kind == "uint4":
            inits += [packed_4bit("w", q, False),
                      packed_4bit("z", rng.integers(0, 16, sshape), False)]
            names.append("z")
        else:
            inits += [numpy_helper.from_array(q.astype(np.uint8), "w"),
                      numpy_helper.from_array(rng.integers(0, 256, sshape).astype(np.uint8), "z")]
            names.append("z")
        nodes = [helper.make_node("DequantizeLinear", names, ["wf"], axis=axis, block_size=block)]
        if axis == 1:
            nodes.append(helper.make_node("Transpose", ["wf"], ["wt"], perm=[1, 0]))
        nodes.append(helper.make_node("MatMul", ["x", "wt" if axis == 1 else "wf"], ["y"]))
        m = model(nodes, [("x", F, [M, K])], [("y", F, [M, N])], {}, 21)
        m.graph.initializer.extend(inits)
        out.append((f"MatMul by weights quantized in blocks: {label} (21)", m,
                    {"x": rand(rng, M, K)}))
    # int4 per output column, no blocks: an ordinary per-axis DequantizeLinear.
    K = 16
    m = model([helper.make_node("DequantizeLinear", ["w", "s"], ["wf"], axis=1),
               helper.make_node("MatMul", ["x", "wf"], ["y"])],
              [("x", F, [M, K])], [("y", F, [M, N])],
              {"s": (rng.random(N) * 0.05 + 0.01).astype(np.float32)}, 21)
    m.graph.initializer.append(packed_4bit("w", rng.integers(-8, 8, (K, N)), True))
    out.append(("MatMul by int4 weights per column (21)", m, {"x": rand(rng, M, K)}))
    return out


def gather_cases(rng):
    """ONNX Runtime's GatherBlockQuantized (quantized embedding tables): uint8 data packing 4
    or 8 bits, with and without zero points, and int4 and uint4 data on other axes."""
    out = []
    V, D, block = 10, 32, 16
    groups = D // block

    def case(label, data, scales, zp=None, ids=np.int64, negative=False, block_size=block,
             **attrs):
        names = ["data", "ids", "scales"] + (["zp"] if zp is not None else [])
        m = model([helper.make_node("GatherBlockQuantized", names, ["y"], domain="com.microsoft",
                                    block_size=block_size, **attrs)],
                  [("ids", TensorProto.INT32 if ids == np.int32 else TensorProto.INT64, [2, 3])],
                  [("y", F, None)], {}, 21, contrib=True)
        inits = [data, numpy_helper.from_array(scales, "scales")]
        if zp is not None:
            inits.append(zp)
        m.graph.initializer.extend(inits)
        gathered = data.dims[attrs.get("gather_axis", 0)]
        out.append((f"GatherBlockQuantized {label}", m,
                    {"ids": rng.integers(-gathered if negative else 0, gathered, (2, 3)).astype(ids)}))

    def packed_u8(name, values, bits):
        per = 8 // bits
        v = values.reshape(values.shape[0], -1, per).astype(np.uint8)
        b = np.zeros(v.shape[:2], np.uint8)
        for k in range(per):
            b |= v[:, :, k] << (bits * k)
        return numpy_helper.from_array(b, name)

    scales = (rng.random((V, groups)) * 0.05 + 0.01).astype(np.float32)
    case("uint8 packing 4 bits, no zero points", packed_u8("data", rng.integers(0, 16, (V, D)), 4),
         scales, bits=4)
    case("uint8 packing 4 bits, packed zero points",
         packed_u8("data", rng.integers(0, 16, (V, D)), 4), scales,
         packed_u8("zp", rng.integers(0, 16, (V, groups)), 4), bits=4)
    case("uint8 of 8 bits, zero points", numpy_helper.from_array(
        rng.integers(0, 256, (V, D)).astype(np.uint8), "data"), scales,
        numpy_helper.from_array(rng.integers(0, 256, (V, groups)).astype(np.uint8), "zp"), bits=8)
    case("int4 with zero points", packed_4bit("data", rng.integers(-8, 8, (V, D)), True), scales,
         packed_4bit("zp", rng.integers(-8, 8, (V, groups)), True))
    # The 4-bit tables that stay 4-bit (gathered on axis 0, blocks along the width): int4
    # without zero points, uint4 without (0, written out), int32 and negative indices, a
    # width of 40 in blocks of 16 (an odd count of blocks, the last short).
    case("int4 without zero points", packed_4bit("data", rng.integers(-8, 8, (V, D)), True),
         scales)
    case("uint4 without zero points, int32 negative indices",
         packed_4bit("data", rng.integers(0, 16, (V, D)), False), scales, ids=np.int32,
         negative=True)
    case("uint8 packing 4 bits, width 40 in 3 blocks, packed zero points",
         packed_u8("data", rng.integers(0, 16, (V, 40)), 4),
         (rng.random((V, 3)) * 0.05 + 0.01).astype(np.float32),
         numpy_helper.from_array(rng.integers(0, 256, (V, 2)).astype(np.uint8), "zp"),
         bits=4)
    case("uint8 packing 4 bits in blocks of 32, negative indices",
         packed_u8("data", rng.integers(0, 16, (V, 64)), 4),
         (rng.random((V, 2)) * 0.05 + 0.01).astype(np.float32), negative=True, block_size=32,
         bits=4)
    case("uint4 quantized on axis 0, gathered on axis 1",
         packed_4bit("data", rng.integers(0, 16, (D, V)), False),
         (rng.random((groups, V)) * 0.05 + 0.01).astype(np.float32),
         gather_axis=1, quantize_axis=0)
    return out


def refusals(rng):
    """(label, model, what the error must hold)."""
    x = [("x", F, [2, 6, 5, 4])]
    y = [("y", F, None)]
    return [
        ("Pad mode wrap of pads given at run time (19)", model(
            [helper.make_node("Pad", ["x", "p"], ["y"], mode="wrap", name="pad_wrap")],
            x + [("p", TensorProto.INT64, [8])], y, {}, 19),
         ["'pad_wrap'", "Pad", "constant pads"]),
        ("DequantizeLinear blocked, of an input (21)", model(
            [helper.make_node("DequantizeLinear", ["q", "s"], ["y"], axis=1, block_size=2,
                              name="dq_blocked")],
            [("q", TensorProto.INT8, [4, 6])], y, {"s": np.ones((4, 3), np.float32)}, 21),
         ["'dq_blocked'", "DequantizeLinear", "must be constants"]),
        ("QuantizeLinear blocked (21)", model(
            [helper.make_node("QuantizeLinear", ["x", "s"], ["y"], axis=1, block_size=2,
                              name="q_blocked")],
            x, [("y", TensorProto.UINT8, None)], {"s": np.ones((2, 3, 5, 4), np.float32)}, 21),
         ["'q_blocked'", "QuantizeLinear", "block_size 2"]),
        ("Resize half_pixel_symmetric with scales 1.5 (19)", model(
            [helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear", name="resize_hps",
                              coordinate_transformation_mode="half_pixel_symmetric")], x, y,
            {"s": np.array([1, 1, 1.5, 1.5], np.float32)}, 19),
         ["'resize_hps'", "Resize", "half_pixel_symmetric"]),
        ("a model of opset 26", model([helper.make_node("Relu", ["x"], ["y"])], x, y, {}, 26),
         ["opset 26", "1 to 25"]),
    ]


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    cli, module, work = (os.path.abspath(a) for a in sys.argv[1:4])
    if shutil.which("node") is None or not os.path.isdir(module):
        sys.exit(f"needs node and onnxruntime-node at {module} (scripts/fetch-corpus.sh)")
    shutil.rmtree(work, ignore_errors=True)
    rng = np.random.default_rng(19)
    for i, (label, m, inputs, *reference) in enumerate(cases(rng)):
        cwork = os.path.join(work, f"case_{i}")
        os.makedirs(cwork)
        path = os.path.join(cwork, "model.onnx")
        onnx.save(m, path)
        ref_path = path
        if reference:
            ref_path = os.path.join(cwork, "reference.onnx")
            onnx.save(reference[0], ref_path)
        files = common.save_inputs(cwork, inputs)
        ref = common.ort_run(module, ref_path, files, cwork, "disabled")
        common.compare(cli, path, files, ref, cwork, label, ["CpuRef", None])
    for i, (label, m, needles) in enumerate(refusals(rng)):
        cwork = os.path.join(work, f"refused_{i}")
        os.makedirs(cwork)
        path = os.path.join(cwork, "model.onnx")
        onnx.save(m, path)
        feeds = {}
        for v in m.graph.input:  # zeros of each input's declared type and shape
            t = v.type.tensor_type
            feeds[v.name] = np.zeros([d.dim_value for d in t.shape.dim],
                                     onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[t.elem_type])
        files = common.save_inputs(cwork, feeds)
        outs, err = common.backplane_run(cli, path, files, os.path.join(cwork, "out"))
        common.check(outs is None and "error:" in err and all(s in err for s in needles),
                     f"{label}: refused with an error naming {', '.join(needles)} "
                     f"({(err or '').strip()[:300]})")
    if common.failures:
        print(f"{len(common.failures)} failed:\n  " + "\n  ".join(common.failures))
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
