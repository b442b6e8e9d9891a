#!/usr/bin/env python3
"""End to end: opset-18 models and models with functions, through `backplane run`.

    opset18_functions_test.py BACKPLANE_CLI WORK_DIR [--backends CpuRef]

onnx 1.12 does not know opset 18, so the models are built with onnx.helper and
the opset import is set by hand; every expected output is computed here with
NumPy (the ONNX 1.13 semantics, written out), or by PyTorch for the exported
model with modules as functions. Each case runs the CLI on its model with its
inputs as .npy files and compares the outputs (rtol 1e-4, atol 1e-5; integers
exactly). Exit status 0 iff every case passes; each failure is printed.
"""
import argparse
import json
import math
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(18)
NP_TO_ONNX = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64,
              np.dtype(np.int32): TensorProto.INT32, np.dtype(np.uint8): TensorProto.UINT8,
              np.dtype(np.int8): TensorProto.INT8, np.dtype(np.uint16): TensorProto.UINT16}


def model(nodes, inputs, outputs, inits=(), opset=18, functions=(), extra_opsets=()):
    """A model of `nodes`; inputs/outputs are (name, ndarray) pairs."""
    g = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, NP_TO_ONNX[a.dtype], a.shape) for n, a in inputs],
        [helper.make_tensor_value_info(n, NP_TO_ONNX[a.dtype], None) for n, a in outputs],
        [numpy_helper.from_array(a, n) for n, a in inits])
    ops = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    m = helper.make_model(g, opset_imports=ops, functions=list(functions))
    m.ir_version = 8
    return m


# ------------------------------------------------------------------ references

def reduce_ref(op, x, axes, keepdims):
    ax = tuple(axes)
    f = {"ReduceMean": lambda: np.mean(x, ax, keepdims=keepdims),
         "ReduceMax": lambda: np.max(x, ax, keepdims=keepdims),
         "ReduceMin": lambda: np.min(x, ax, keepdims=keepdims),
         "ReduceProd": lambda: np.prod(x, ax, keepdims=keepdims),
         "ReduceL1": lambda: np.sum(np.abs(x), ax, keepdims=keepdims),
         "ReduceL2": lambda: np.sqrt(np.sum(x * x, ax, keepdims=keepdims)),
         "ReduceLogSum": lambda: np.log(np.sum(x, ax, keepdims=keepdims)),
         "ReduceSumSquare": lambda: np.sum(x * x, ax, keepdims=keepdims)}[op]
    return f().astype(x.dtype)


def linear_filter(t):
    return max(0.0, 1.0 - abs(t))


def cubic_filter(t, a=-0.75):
    t = abs(t)
    if t <= 1:
        return (a + 2) * t ** 3 - (a + 3) * t ** 2 + 1
    if t < 2:
        return a * t ** 3 - 5 * a * t ** 2 + 8 * a * t - 4 * a
    return 0.0


def resize_1d(x, axis, out_len, scale, mode, antialias):
    """Resize along one axis, half_pixel coordinates, ONNX's filters; with
    antialias and scale < 1 the filter is stretched by 1/scale and normalised."""
    n = x.shape[axis]
    filt = linear_filter if mode == "linear" else cubic_filter
    support = 1 if mode == "linear" else 2
    s = min(scale, 1.0) if antialias else 1.0
    out = np.zeros(x.shape[:axis] + (out_len,) + x.shape[axis + 1:], dtype=np.float64)
    for o in range(out_len):
        c = (o + 0.5) / scale - 0.5
        lo = math.floor(c - support / s) + 1
        hi = math.ceil(c + support / s)
        w, idx = [], []
        for p in range(lo, hi):
            wt = filt((p - c) * s)
            if wt != 0.0:
                w.append(wt)
                idx.append(min(max(p, 0), n - 1))
        w = np.array(w) / sum(w) if antialias else np.array(w)
        if mode == "linear" and not antialias:
            c = min(max(c, 0.0), n - 1)
            i0 = int(math.floor(c))
            i1 = min(i0 + 1, n - 1)
            w, idx = np.array([1 - (c - i0), c - i0]), [i0, i1]
        taken = np.take(x, idx, axis=axis)
        shape = [1] * x.ndim
        shape[axis] = len(w)
        val = np.sum(taken * w.reshape(shape), axis=axis)
        sl = [slice(None)] * x.ndim
        sl[axis] = o
        out[tuple(sl)] = val
    return out


def group_norm_ref(x, groups, scale, bias, eps=1e-5):
    n, c = x.shape[:2]
    g = x.reshape(n, groups, -1).astype(np.float64)
    mean = g.mean(axis=2, keepdims=True)
    var = g.var(axis=2, keepdims=True)
    y = (g - mean) / np.sqrt(var + eps)
    y = y * scale.reshape(1, groups, 1) + bias.reshape(1, groups, 1)
    return y.reshape(x.shape).astype(np.float32)


def center_crop_pad_ref(x, shape, axes):
    out_shape = list(x.shape)
    for k, a in enumerate(axes):
        out_shape[a] = shape[k]
    y = np.zeros(out_shape, dtype=x.dtype)
    src = [slice(None)] * x.ndim
    dst = [slice(None)] * x.ndim
    for k, a in enumerate(axes):
        d, s = x.shape[a], shape[k]
        if s <= d:
            src[a] = slice((d - s) // 2, (d - s) // 2 + s)
        else:
            dst[a] = slice((s - d) // 2, (s - d) // 2 + d)
    y[tuple(dst)] = x[tuple(src)]
    return y


def col2im_ref(x, image, block, dil, pads, strides):
    n, ck, _ = x.shape
    k = int(np.prod(block))
    c = ck // k
    nd = len(image)
    nblocks = [(image[d] + pads[d] + pads[d + nd] - (dil[d] * (block[d] - 1) + 1)) // strides[d] + 1
               for d in range(nd)]
    y = np.zeros((n, c) + tuple(image), dtype=np.float64)
    for kk in np.ndindex(*block):
        kidx = int(np.ravel_multi_index(kk, block))
        for ll in np.ndindex(*nblocks):
            lidx = int(np.ravel_multi_index(ll, nblocks))
            pos = [ll[d] * strides[d] - pads[d] + kk[d] * dil[d] for d in range(nd)]
            if all(0 <= pos[d] < image[d] for d in range(nd)):
                y[(slice(None), slice(None)) + tuple(pos)] += x[:, np.arange(c) * k + kidx, lidx]
    return y.astype(x.dtype)


# ------------------------------------------------------------------ cases

def cases():
    x = RNG.uniform(0.5, 2.0, (2, 3, 4)).astype(np.float32)
    for op in ["ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
               "ReduceLogSum", "ReduceSumSquare"]:
        for axes, keep in [([1], 1), ([0, -1], 0)]:
            yield (f"{op}_axes{axes}_keep{keep}",
                   model([helper.make_node(op, ["x", "axes"], ["y"], keepdims=keep)],
                         [("x", x)], [("y", x)], [("axes", np.array(axes, np.int64))]),
                   {"x": x}, [reduce_ref(op, x, axes, keep)])
    yield ("ReduceMean_no_axes_noop",
           model([helper.make_node("ReduceMean", ["x"], ["y"], noop_with_empty_axes=1)],
                 [("x", x)], [("y", x)]), {"x": x}, [x])
    yield ("ReduceMax_no_axes_all",
           model([helper.make_node("ReduceMax", ["x"], ["y"], keepdims=0)],
                 [("x", x)], [("y", x)]), {"x": x}, [np.max(x).astype(np.float32)])

    s = RNG.standard_normal((2, 7)).astype(np.float32)
    yield ("Split_num_outputs",
           model([helper.make_node("Split", ["s"], ["a", "b", "c"], axis=1, num_outputs=3)],
                 [("s", s)], [("a", s), ("b", s), ("c", s)]),
           {"s": s}, [s[:, 0:3], s[:, 3:6], s[:, 6:7]])

    p = RNG.standard_normal((2, 3, 2)).astype(np.float32)
    padded = np.pad(p, [(0, 0), (1, 2), (0, 0)], constant_values=5.0)
    yield ("Pad_axes",
           model([helper.make_node("Pad", ["p", "pads", "v", "axes"], ["y"])],
                 [("p", p)], [("y", p)],
                 [("pads", np.array([1, 2], np.int64)), ("v", np.array(5.0, np.float32)),
                  ("axes", np.array([1], np.int64))]),
           {"p": p}, [padded])
    yield ("Pad_axes_reflect_negative_axis",
           model([helper.make_node("Pad", ["p", "pads", "", "axes"], ["y"], mode="reflect")],
                 [("p", p)], [("y", p)],
                 [("pads", np.array([1, 1], np.int64)), ("axes", np.array([-2], np.int64))]),
           {"p": p}, [np.pad(p, [(0, 0), (1, 1), (0, 0)], mode="reflect")])

    img = RNG.standard_normal((1, 2, 12, 10)).astype(np.float32)
    for mode in ["linear", "cubic"]:
        ref = resize_1d(resize_1d(img, 2, 4, 1 / 3, mode, True), 3, 5, 0.5, mode, True)
        yield (f"Resize_antialias_{mode}",
               model([helper.make_node("Resize", ["img", "", "scales"], ["y"], mode=mode,
                                       antialias=1, axes=[2, 3])],
                     [("img", img)], [("y", img)],
                     [("scales", np.array([1 / 3, 0.5], np.float32))]),
               {"img": img}, [ref.astype(np.float32)])
    # not_larger: one scale, min(7/12, 9/10) = 7/12, so sizes (7, round(5.83) = 6), and
    # the coordinates of both axes map through 7/12 (not 6/10).
    ref = resize_1d(resize_1d(img, 2, 7, 7 / 12, "linear", False), 3, 6, 7 / 12, "linear", False)
    yield ("Resize_keep_aspect_not_larger",
           model([helper.make_node("Resize", ["img", "", "", "sizes"], ["y"], mode="linear",
                                   keep_aspect_ratio_policy="not_larger", axes=[2, 3])],
                 [("img", img)], [("y", img)], [("sizes", np.array([7, 9], np.int64))]),
           {"img": img}, [ref.astype(np.float32)])

    gx = RNG.standard_normal((2, 4, 3, 3)).astype(np.float32)
    gs = np.array([1.5, -0.5], np.float32)
    gb = np.array([0.25, 2.0], np.float32)
    yield ("GroupNormalization",
           model([helper.make_node("GroupNormalization", ["gx", "gs", "gb"], ["y"], num_groups=2,
                                   epsilon=1e-3)],
                 [("gx", gx)], [("y", gx)], [("gs", gs), ("gb", gb)]),
           {"gx": gx}, [group_norm_ref(gx, 2, gs, gb, 1e-3)])

    cx = RNG.standard_normal((2, 5, 4)).astype(np.float32)
    yield ("CenterCropPad",
           model([helper.make_node("CenterCropPad", ["cx", "shape"], ["y"], axes=[1, 2])],
                 [("cx", cx)], [("y", cx)], [("shape", np.array([2, 7], np.int64))]),
           {"cx": cx}, [center_crop_pad_ref(cx, [2, 7], [1, 2])])

    image, block, dil, pads, strides = [5, 6], [2, 3], [1, 2], [1, 0, 1, 1], [2, 1]
    nb = [(image[d] + pads[d] + pads[d + 2] - (dil[d] * (block[d] - 1) + 1)) // strides[d] + 1
          for d in range(2)]
    col = RNG.standard_normal((1, 2 * 6, nb[0] * nb[1])).astype(np.float32)
    yield ("Col2Im",
           model([helper.make_node("Col2Im", ["col", "image", "block"], ["y"], dilations=dil,
                                   pads=pads, strides=strides)],
                 [("col", col)], [("y", col)],
                 [("image", np.array(image, np.int64)), ("block", np.array(block, np.int64))]),
           {"col": col}, [col2im_ref(col, image, block, dil, pads, strides)])

    a = RNG.integers(0, 255, (3, 4), dtype=np.uint8)
    b = RNG.integers(0, 255, (4,), dtype=np.uint8)
    for op, f in [("BitwiseAnd", np.bitwise_and), ("BitwiseOr", np.bitwise_or),
                  ("BitwiseXor", np.bitwise_xor)]:
        yield (op, model([helper.make_node(op, ["a", "b"], ["y"])], [("a", a), ("b", b)],
                         [("y", a)]), {"a": a, "b": b}, [f(a, b)])
    i = RNG.integers(-1000, 1000, (5,), dtype=np.int32)
    yield ("BitwiseNot", model([helper.make_node("BitwiseNot", ["i"], ["y"])], [("i", i)],
                               [("y", i)]), {"i": i}, [np.invert(i)])
    m = np.array([-30, -2, -0.5, 0, 0.5, 3, 40], np.float32)
    yield ("Mish", model([helper.make_node("Mish", ["m"], ["y"])], [("m", m)], [("y", m)]),
           {"m": m}, [(m * np.tanh(np.log1p(np.exp(m.astype(np.float64))))).astype(np.float32)])

    yield from function_cases()


def function_cases():
    # A model-local function called twice with different attribute values.
    body = [helper.make_node("Constant", [], ["a"], value_float=0.0),
            helper.make_node("Mul", ["X", "a"], ["t"]),
            helper.make_node("Add", ["t", "B"], ["Y"])]
    body[0].attribute[0].ref_attr_name = "alpha"
    fn = helper.make_function("test.fn", "ScaleAdd", ["X", "B"], ["Y"], body,
                              [helper.make_opsetid("", 17)], ["alpha"])
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    bias = RNG.standard_normal((3,)).astype(np.float32)
    nodes = [helper.make_node("ScaleAdd", ["x", "bias"], ["h"], domain="test.fn", alpha=2.0),
             helper.make_node("ScaleAdd", ["h", "bias"], ["y"], domain="test.fn", alpha=-3.0)]
    yield ("local_function_twice",
           model(nodes, [("x", x)], [("y", x)], [("bias", bias)], opset=17, functions=[fn],
                 extra_opsets=[("test.fn", 1)]),
           {"x": x}, [((x * 2 + bias) * -3 + bias).astype(np.float32)])
    # The same at opset 18.
    yield ("local_function_twice_opset18",
           model(nodes, [("x", x)], [("y", x)], [("bias", bias)], opset=18, functions=[fn],
                 extra_opsets=[("test.fn", 1)]),
           {"x": x}, [((x * 2 + bias) * -3 + bias).astype(np.float32)])
    # An op known through libonnx's body unless a kernel exists: both agree.
    c = np.array([-2, -0.5, 0, 1.5], np.float32)
    yield ("Celu_body_or_kernel",
           model([helper.make_node("Celu", ["c"], ["y"], alpha=1.5)], [("c", c)], [("y", c)],
                 opset=17),
           {"c": c}, [(np.maximum(0, c) + np.minimum(0, 1.5 * (np.exp(c / 1.5) - 1)))
                      .astype(np.float32)])
    # At opset 18 through a body that imports opset 13 (ReduceMean's axes an
    # attribute there, an input at 18), unless a kernel exists.
    v = RNG.standard_normal((2, 3, 2, 2)).astype(np.float32)
    mean = v.mean(axis=(0, 2, 3), keepdims=True)
    std = np.sqrt(((v - mean) ** 2).mean(axis=(0, 2, 3), keepdims=True))
    yield ("MeanVarianceNormalization_opset18",
           model([helper.make_node("MeanVarianceNormalization", ["v"], ["y"])], [("v", v)],
                 [("y", v)], opset=18),
           {"v": v}, [((v - mean) / (std + 1e-9)).astype(np.float32)])
    yield from torch_function_case()


def torch_function_case():
    try:
        import io
        import torch
    except ImportError:  # torch is a test dependency; say so rather than skip silently
        raise SystemExit("error: torch is needed for the exported-function case")

    class Block(torch.nn.Module):
        def __init__(self, n):
            super().__init__()
            self.lin = torch.nn.Linear(n, n)
            self.norm = torch.nn.LayerNorm(n)

        def forward(self, x):
            return torch.relu(self.norm(self.lin(x))) + x

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = Block(8)
            self.b = Block(8)

        def forward(self, x):
            return self.b(self.a(x))

    torch.manual_seed(0)
    net = Net().eval()
    x = torch.randn(3, 8)
    buf = io.BytesIO()
    torch.onnx.export(net, (x,), buf, opset_version=17, input_names=["x"], output_names=["y"],
                      export_modules_as_functions={Block})
    m = onnx.load_from_string(buf.getvalue())
    assert len(m.functions) > 0, "the exporter wrote no functions"
    with torch.no_grad():
        want = net(x).numpy()
    yield ("torch_export_modules_as_functions", m, {"x": x.numpy()}, [want])


# ------------------------------------------------------------------ runner

def run_case(cli, work, name, m, inputs, expected, backends):
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "model.onnx")
    onnx.save(m, path)
    cmd = [cli, "run", path, "--output-dir", os.path.join(d, "out"), "--json"]
    if backends:
        cmd += ["--backends", backends]
    for k, v in inputs.items():
        np.save(os.path.join(d, k + ".npy"), v)
        cmd += ["--input", f"{k}={os.path.join(d, k + '.npy')}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        return f"exit {r.returncode}: {r.stderr.strip()}"
    outputs = json.loads(r.stdout)["outputs"]
    if len(outputs) != len(expected):
        return f"{len(outputs)} outputs, expected {len(expected)}"
    for o, want in zip(outputs, expected):
        got = np.load(os.path.join(d, "out", o["name"] + ".npy"))
        want = np.asarray(want)
        if got.shape != want.shape or got.dtype != want.dtype:
            return f"output {o['name']}: {got.dtype}{got.shape}, expected {want.dtype}{want.shape}"
        if want.dtype.kind == "f":
            if not np.allclose(got, want, rtol=1e-4, atol=1e-5):
                return (f"output {o['name']}: max abs difference "
                        f"{np.max(np.abs(got - want))}\n got {got.ravel()[:8]}\n want "
                        f"{want.ravel()[:8]}")
        elif not np.array_equal(got, want):
            return f"output {o['name']}: differs\n got {got.ravel()[:8]}\n want {want.ravel()[:8]}"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cli")
    ap.add_argument("work")
    ap.add_argument("--backends", default="CpuRef")
    ap.add_argument("--filter", default="")
    args = ap.parse_args()
    failed = 0
    total = 0
    for name, m, inputs, expected in cases():
        if args.filter not in name:
            continue
        total += 1
        err = run_case(args.cli, args.work, name, m, inputs, expected, args.backends)
        print(("FAIL " if err else "pass ") + name + (": " + err if err else ""))
        failed += err is not None
    print(f"{total - failed} of {total} passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
