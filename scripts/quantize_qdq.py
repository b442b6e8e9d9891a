#!/usr/bin/python3
"""Quantizes a float ONNX model to int8, writing the QDQ (or dynamic) format ONNX Runtime's
quantizers write.

Static mode (the default), as onnxruntime.quantization.quantize_static(quant_format=QDQ):
  - weights of Conv (axis 0), Gemm (axis 0 with transB=1, else 1) and MatMul (the last axis)
    become int8 initializers, symmetric per channel (zero point 0, scale = max|w| / 127),
    read through DequantizeLinear with `axis`;
  - a 1-D bias of Conv / Gemm becomes int32 with scale = input scale * weight scale, zero
    point 0, through DequantizeLinear (axis 0 when the weight is per channel);
  - activations (float inputs and outputs of Conv, ConvTranspose, MatMul, Gemm, Add, Mul,
    Concat, MaxPool, AveragePool, GlobalAveragePool, Relu, Clip) get a
    QuantizeLinear -> DequantizeLinear pair with one scale and zero point per tensor
    (uint8 by default, --activation-type int8), calibrated on generated data; every
    consumer of the tensor reads the dequantized value, and a graph output is the
    DequantizeLinear's output (its name unchanged). Other
    constant inputs of those ops (an Add's constant operand, say) are quantized per tensor
    like activations, from their own range.
  Unlike ONNX Runtime's quantizer, Relu and Clip after a quantized op are kept (with their
  own QDQ pairs) rather than removed, and no graph optimisation runs first.

Calibration runs the float model, with the activations to quantize added as graph outputs,
through Backplane on --samples seeded inputs: float inputs are standard normal, integer
inputs uniform in [0, --int-high); dims given as names in the model take --shape. By default
(--calibrate auto) it loads the model once and runs every sample in this process through
Backplane's Python module when it can import it: the build tree's python/ beside the
--backplane CLI (BUILD/bin/backplane -> BUILD/python, the `_backplane` target), else an
installed `backplane` package; otherwise (or with --calibrate cli) it starts `backplane run`
(--backplane) once per sample, which loads and compiles the model each time. Both run the
same backends and give the same ranges. Ranges are the min and max over the samples
(--method minmax, ONNX Runtime's default) or the --percentile of a seeded sample of each
tensor's values (--method percentile); a range always includes 0. Scale = (max - min) /
(qmax - qmin), zero point = round(qmin - min / scale).

Dynamic mode (--dynamic), as onnxruntime.quantization.quantize_dynamic: each MatMul with a
constant 2-D weight becomes
  DynamicQuantizeLinear(A) -> MatMulInteger(A_q, W_q, A_zp, W_zp) -> Cast(float)
  -> Mul(A_scale * W_scale)
with W int8, symmetric per tensor (--per-channel: per column); each Conv with constant
weights becomes the same with ConvInteger, then Add of its bias (as [C, 1...]), with W uint8
of a zero point, per tensor (ONNX Runtime's default for convolutions; --conv-weights int8:
symmetric int8). A tensor several products read is quantized once for them all, as ONNX
Runtime's quantizer does it (a transformer's Q, K and V read one DynamicQuantizeLinear). No
calibration.

Usage: quantize_qdq.py MODEL.onnx OUT.onnx [--backplane build/bin/backplane] [--dynamic]
  [--calibrate auto|python|cli]
Needs numpy and onnx (Debian's /usr/bin/python3).
"""
import argparse
import importlib
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# Ops whose float activations (inputs and output) get QuantizeLinear -> DequantizeLinear.
QDQ_OPS = {"Conv", "ConvTranspose", "MatMul", "Gemm", "Add", "Mul", "Concat", "MaxPool",
           "AveragePool", "GlobalAveragePool", "Relu", "Clip"}
# Of those, the ops whose input 1 is a weight quantized per channel (and input 2 a bias).
WEIGHT_OPS = {"Conv", "ConvTranspose", "MatMul", "Gemm"}
# Inputs that are not tensors to quantize (Clip's min/max, shapes).
NOT_QUANTIZED_INPUTS = {"Clip": {1, 2}}
QRANGE = {TensorProto.UINT8: (0, 255), TensorProto.INT8: (-128, 127)}
NP_TYPE = {TensorProto.UINT8: np.uint8, TensorProto.INT8: np.int8}


def qparams(rmin, rmax, qtype):
    """Asymmetric scale and zero point of the range [rmin, rmax] widened to hold 0."""
    qmin, qmax = QRANGE[qtype]
    rmin, rmax = min(float(rmin), 0.0), max(float(rmax), 0.0)
    scale = (rmax - rmin) / (qmax - qmin)
    if scale <= 0 or not np.isfinite(scale):
        return np.float32(1.0), NP_TYPE[qtype](0)
    zp = int(np.clip(round(qmin - rmin / scale), qmin, qmax))
    return np.float32(scale), NP_TYPE[qtype](zp)


def quantize_symmetric(w, axis):
    """int8 values and float32 scales of `w`, symmetric (zero point 0) over [-127, 127],
    per slice along `axis` (None: per tensor)."""
    if axis is None:
        amax = np.array(np.abs(w).max(), dtype=np.float64)
    else:
        other = tuple(i for i in range(w.ndim) if i != axis)
        amax = np.abs(w).max(axis=other).astype(np.float64)
    scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
    shape = [1] * w.ndim
    if axis is not None:
        shape[axis] = -1
    q = np.clip(np.rint(w / scale.reshape(shape)), -127, 127).astype(np.int8)
    return q, scale


class Graph:
    """The float model's graph with lookups used while rewriting it."""

    def __init__(self, model):
        self.model = model
        self.g = model.graph
        self.inits = {t.name: t for t in self.g.initializer}
        self.graph_outputs = {o.name for o in self.g.output}
        self.elem = {}
        inferred = onnx.shape_inference.infer_shapes(model)
        for vi in list(inferred.graph.value_info) + list(inferred.graph.input) + \
                list(inferred.graph.output):
            self.elem[vi.name] = vi.type.tensor_type.elem_type
        for t in self.g.initializer:
            self.elem[t.name] = t.data_type
        self.names = set(self.elem) | {n.name for n in self.g.node}

    def fresh(self, base):
        name, k = base, 1
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        return name

    def is_float(self, name):
        return self.elem.get(name) == TensorProto.FLOAT

    def add_init(self, array, base):
        name = self.fresh(base)
        self.g.initializer.append(numpy_helper.from_array(np.asarray(array), name))
        return name


def weight_axis(node, w):
    if node.op_type in ("Conv",):
        return 0
    if node.op_type == "ConvTranspose":
        return 1 if w.ndim >= 2 else None  # [C, M/group, k...]: output channels on axis 1
    if node.op_type == "Gemm":
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        return 0 if trans_b else 1
    return w.ndim - 1  # MatMul: one scale per output column


def plan_static(gr):
    """What to quantize: activations (per tensor), weights (per channel) and biases."""
    activations, weights, biases, const_acts = [], {}, {}, []
    seen = set()

    def want(name):
        if name and name not in seen and gr.is_float(name):
            seen.add(name)
            (const_acts if name in gr.inits else activations).append(name)

    for node in gr.g.node:
        if node.op_type not in QDQ_OPS:
            continue
        skip = NOT_QUANTIZED_INPUTS.get(node.op_type, set())
        for i, name in enumerate(node.input):
            if i in skip or not name:
                continue
            if node.op_type in WEIGHT_OPS and i == 1 and name in gr.inits:
                w = numpy_helper.to_array(gr.inits[name])
                if w.dtype == np.float32 and w.ndim >= 2:
                    weights.setdefault(name, (node, weight_axis(node, w)))
                    continue
            if node.op_type in ("Conv", "ConvTranspose", "Gemm") and i == 2 and \
                    name in gr.inits and numpy_helper.to_array(gr.inits[name]).ndim == 1:
                biases[(node.name or node.output[0], name)] = node
                continue
            want(name)
        want(node.output[0])
    return activations, const_acts, weights, biases


def calibration_inputs(gr, args, rng):
    """One seeded feed dict per sample: {input name: array}."""
    inits = set(gr.inits)
    shapes = dict(s.split("=", 1) for s in args.shape)
    feeds = []
    for _ in range(args.samples):
        feed = {}
        for vi in gr.g.input:
            if vi.name in inits:
                continue
            dims = []
            for d in vi.type.tensor_type.shape.dim:
                if d.HasField("dim_value"):
                    dims.append(d.dim_value)
                elif d.dim_param and d.dim_param in shapes:
                    dims.append(int(shapes[d.dim_param]))
                else:
                    sys.exit(f"quantize_qdq: input '{vi.name}' has an unnamed or unknown dim; "
                             f"give it with --shape NAME=SIZE")
            elem = vi.type.tensor_type.elem_type
            if elem == TensorProto.FLOAT:
                feed[vi.name] = rng.standard_normal(dims).astype(np.float32)
            elif elem in (TensorProto.INT64, TensorProto.INT32):
                dt = np.int64 if elem == TensorProto.INT64 else np.int32
                feed[vi.name] = rng.integers(0, args.int_high, dims).astype(dt)
            else:
                sys.exit(f"quantize_qdq: cannot generate input '{vi.name}' of type {elem}")
        feeds.append(feed)
    return feeds


def python_module(cli):
    """Backplane's Python module and the backend directory to give it, for in-process
    calibration: the build tree's (BUILD/python beside BUILD/bin/backplane, with
    BUILD/lib/backplane/backends) when `cli` is in one, else an importable `backplane`
    package with its default backends; (None, reason) when there is neither."""
    exe = shutil.which(cli) or cli
    build = os.path.dirname(os.path.dirname(os.path.realpath(exe)))
    backend_dir = os.path.join(build, "lib", "backplane", "backends")
    package = os.path.join(build, "python")
    if os.path.exists(os.path.join(package, "backplane", "__init__.py")):
        sys.path.insert(0, package)
    else:
        backend_dir = None
    try:
        return importlib.import_module("backplane"), backend_dir
    except ImportError as e:
        return None, f"no importable backplane module ({e})"


def runs_in_process(module, backend_dir, path, feeds, outputs):
    """Each sample's `outputs`, one session of the model in this process."""
    kw = {"backend_path": backend_dir} if backend_dir else {}
    sess = module.InferenceSession(path, warm_up=False, **kw)
    for feed in feeds:
        yield sess.run(outputs, feed)


def runs_with_cli(cli, path, feeds, outputs, tmp):
    """Each sample's `outputs`, one `backplane run` process per sample."""
    for k, feed in enumerate(feeds):
        out = os.path.join(tmp, f"out{k}")
        cmd = [cli, "run", path, "--output-dir", out]
        for name, value in feed.items():
            f = os.path.join(tmp, f"in{k}_{len(cmd)}.npy")
            np.save(f, value)
            cmd += ["--input", f"{name}={f}"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"quantize_qdq: calibration run failed: {' '.join(cmd)}\n"
                     f"{proc.stderr}")
        yield [np.load(os.path.join(out, f"{o}.npy")) for o in outputs]


def calibrate(gr, tensors, args):
    """{tensor: (min, max)} of `tensors` over the calibration samples, run by Backplane."""
    # Each tensor is copied to an output of its own, calib_K, so that output files have
    # simple names (the CLI writes NAME.npy).
    model = onnx.ModelProto()
    model.CopyFrom(gr.model)
    for k, name in enumerate(tensors):
        model.graph.node.append(helper.make_node("Identity", [name], [f"calib_{k}"]))
        model.graph.output.append(helper.make_tensor_value_info(f"calib_{k}", TensorProto.FLOAT,
                                                                None))
    outputs = [f"calib_{k}" for k in range(len(tensors))]
    rng = np.random.default_rng(args.seed)
    feeds = calibration_inputs(gr, args, rng)
    pick = np.random.default_rng(args.seed + 1)
    mins = {t: np.inf for t in tensors}
    maxs = {t: -np.inf for t in tensors}
    kept = {t: [] for t in tensors}  # sampled values, for --method percentile
    module, backend_dir = None, None
    if args.calibrate != "cli":
        module, backend_dir = python_module(args.backplane)
        if module is None and args.calibrate == "python":
            sys.exit(f"quantize_qdq: --calibrate python: {backend_dir}")
    with tempfile.TemporaryDirectory(prefix="quantize_qdq_") as tmp:
        path = os.path.join(tmp, "calibration.onnx")
        onnx.save(model, path)
        if module is not None:
            how = "in process (backplane Python module)"
            samples = runs_in_process(module, backend_dir, path, feeds, outputs)
        else:
            how = "with `backplane run`" + (f" ({backend_dir})" if backend_dir else "")
            samples = runs_with_cli(args.backplane, path, feeds, outputs, tmp)
        for values in samples:
            for t, v in zip(tensors, values):
                v = np.asarray(v, dtype=np.float32).ravel()
                mins[t] = min(mins[t], float(v.min()))
                maxs[t] = max(maxs[t], float(v.max()))
                if args.method == "percentile":
                    n = min(v.size, 1 << 16)
                    kept[t].append(pick.choice(v, n, replace=False) if n < v.size else v)
    print(f"quantize_qdq: calibrated {len(tensors)} tensors on {len(feeds)} samples {how}")
    if args.method == "percentile":
        p = args.percentile
        return {t: (float(np.percentile(np.concatenate(kept[t]), 100 - p)),
                    float(np.percentile(np.concatenate(kept[t]), p))) for t in tensors}
    return {t: (mins[t], maxs[t]) for t in tensors}


def quantize_static(model, args):
    gr = Graph(model)
    activations, const_acts, weights, biases = plan_static(gr)
    ranges = calibrate(gr, activations, args) if activations else {}
    act_type = TensorProto.INT8 if args.activation_type == "int8" else TensorProto.UINT8
    for name in const_acts:
        v = numpy_helper.to_array(gr.inits[name])
        ranges[name] = (float(v.min()), float(v.max()))
    params = {t: qparams(lo, hi, act_type) for t, (lo, hi) in ranges.items()}

    new_nodes = []  # (position, node): inserted before the node at `position`
    rename = {}     # tensor -> its dequantized name, for every consumer
    nodes = list(gr.g.node)

    def dq_node(src, scale_name, zp_name, out, axis=None):
        kw = {"axis": axis} if axis is not None else {}
        return helper.make_node("DequantizeLinear", [src, scale_name, zp_name], [out],
                                name=gr.fresh(out + "_node"), **kw)

    # Activations: x -> QuantizeLinear -> DequantizeLinear -> every consumer.
    # A graph output keeps its name on the DequantizeLinear's output; its producer writes
    # NAME_QuantizeInput instead.
    producer = {o: i for i, n in enumerate(nodes) for o in n.output}
    for t in activations:
        scale, zp = params[t]
        s_name = gr.add_init(scale, t + "_scale")
        z_name = gr.add_init(zp, t + "_zero_point")
        q, dq = gr.fresh(t + "_QuantizeLinear_Output"), gr.fresh(t + "_DequantizeLinear_Output")
        pos = producer[t] + 1 if t in producer else 0
        src = t
        if t in gr.graph_outputs and t in producer:
            src, dq = gr.fresh(t + "_QuantizeInput"), t
            prod = nodes[producer[t]]
            prod.output[list(prod.output).index(t)] = src
        new_nodes.append((pos, helper.make_node("QuantizeLinear", [src, s_name, z_name], [q],
                                                name=gr.fresh(t + "_QuantizeLinear"))))
        new_nodes.append((pos, dq_node(q, s_name, z_name, dq)))
        rename[t] = dq
    # Constant operands quantized like activations: a quantized initializer + DequantizeLinear.
    for t in const_acts:
        scale, zp = params[t]
        v = numpy_helper.to_array(gr.inits[t])
        lo, hi = QRANGE[act_type]
        qv = np.clip(np.rint(v / scale) + int(zp), lo, hi).astype(NP_TYPE[act_type])
        q_name = gr.add_init(qv, t + "_quantized")
        s_name = gr.add_init(scale, t + "_scale")
        z_name = gr.add_init(zp, t + "_zero_point")
        dq = gr.fresh(t + "_DequantizeLinear_Output")
        new_nodes.append((0, dq_node(q_name, s_name, z_name, dq)))
        rename[t] = dq
    # Weights: int8 per channel, symmetric.
    weight_scale = {}
    for w_name, (node, axis) in weights.items():
        w = numpy_helper.to_array(gr.inits[w_name])
        qw, scale = quantize_symmetric(w, axis)
        q_name = gr.add_init(qw, w_name + "_quantized")
        s_name = gr.add_init(scale, w_name + "_scale")
        z_name = gr.add_init(np.zeros(scale.shape, np.int8), w_name + "_zero_point")
        dq = gr.fresh(w_name + "_DequantizeLinear_Output")
        new_nodes.append((0, dq_node(q_name, s_name, z_name, dq, axis)))
        rename[w_name] = dq
        weight_scale[w_name] = (scale, axis)
    # Biases: int32, scale = input scale * weight scale; they stay float when the op's input
    # or weight is not quantized.
    bias_rename = {}
    for (key, b_name), node in biases.items():
        x, w = node.input[0], node.input[1]
        if x not in params or w not in weight_scale:
            continue
        scale = (params[x][0] * weight_scale[w][0]).astype(np.float32)
        b = numpy_helper.to_array(gr.inits[b_name]).astype(np.float64)
        if scale.ndim and scale.shape != b.shape:
            continue  # a grouped ConvTranspose's per-channel weight scale does not fit
        qb = np.clip(np.rint(b / scale), -2**31, 2**31 - 1).astype(np.int32)
        q_name = gr.add_init(qb, b_name + "_quantized")
        s_name = gr.add_init(scale, b_name + "_scale")
        z_name = gr.add_init(np.zeros(scale.shape, np.int32), b_name + "_zero_point")
        dq = gr.fresh(b_name + "_DequantizeLinear_Output")
        new_nodes.append((0, dq_node(q_name, s_name, z_name, dq, 0 if scale.ndim else None)))
        bias_rename[(key, b_name)] = dq

    for node in nodes:
        key = node.name or node.output[0]
        for i, name in enumerate(node.input):
            if (key, name) in bias_rename and i == 2:
                node.input[i] = bias_rename[(key, name)]
            elif name in rename:
                node.input[i] = rename[name]
    out = []
    for k, node in enumerate(nodes):
        out += [n for p, n in new_nodes if p == k]
        out.append(node)
    out += [n for p, n in new_nodes if p == len(nodes)]
    del gr.g.node[:]
    gr.g.node.extend(out)
    drop_unused_initializers(gr.g)
    return model


def quantize_asymmetric_u8(w):
    """uint8 values, scale and zero point of `w` per tensor, its range widened to 0."""
    lo, hi = min(0.0, float(w.min())), max(0.0, float(w.max()))
    scale = np.float32((hi - lo) / 255.0 if hi > lo else 1.0)
    zero = np.uint8(np.clip(np.rint(-lo / scale), 0, 255))
    q = np.clip(np.rint(w / scale) + zero, 0, 255).astype(np.uint8)
    return q, scale, zero


def dynamic_input(gr, a, quantized):
    """The DynamicQuantizeLinear outputs of float tensor `a` and the nodes to add: one
    DynamicQuantizeLinear per tensor, shared by all its products, as ONNX Runtime's
    quantizer writes it (a transformer's Q, K and V read one)."""
    if a in quantized:
        return quantized[a], []
    names = (gr.fresh(a + "_quantized"), gr.fresh(a + "_scale"), gr.fresh(a + "_zero_point"))
    quantized[a] = names
    return names, [helper.make_node("DynamicQuantizeLinear", [a], list(names),
                                    name=gr.fresh(a + "_QuantizeLinear"))]


def dynamic_conv(gr, node, args, quantized):
    """The nodes of Conv `node` quantized at run time, or None to keep it."""
    w_name = node.input[1]
    w = numpy_helper.to_array(gr.inits[w_name]) if w_name in gr.inits else None
    if w is None or w.dtype != np.float32 or w.ndim < 3 or not gr.is_float(node.input[0]):
        return None
    bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
    if bias is not None and bias not in gr.inits:
        return None
    base = node.name or node.output[0]
    if args.conv_weights == "int8":
        qw, w_scale = quantize_symmetric(w, None)
        wz = np.zeros((), np.int8)
    else:
        qw, w_scale, wz = quantize_asymmetric_u8(w)
    wq = gr.add_init(qw, w_name + "_quantized")
    ws = gr.add_init(np.asarray(w_scale, np.float32), w_name + "_scale")
    wzp = gr.add_init(np.asarray(wz), w_name + "_zero_point")
    (aq, a_s, az), nodes = dynamic_input(gr, node.input[0], quantized)
    conv, cast, scale, scaled = (gr.fresh(base + "_output_quantized"),
                                 gr.fresh(base + "_output_quantized_cast_output"),
                                 gr.fresh(base + "_scales_mul_output"),
                                 gr.fresh(base + "_output_scaled"))
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    nodes += [
        helper.make_node("Mul", [a_s, ws], [scale], name=gr.fresh(base + "_scales_mul")),
        helper.make_node("ConvInteger", [aq, wq, az, wzp], [conv], name=gr.fresh(base + "_quant"),
                         **attrs),
        helper.make_node("Cast", [conv], [cast], to=TensorProto.FLOAT,
                         name=gr.fresh(base + "_output_quantized_cast")),
    ]
    if bias is None:
        nodes.append(helper.make_node("Mul", [cast, scale], [node.output[0]],
                                      name=gr.fresh(base + "_output_scale_mul")))
        return nodes
    b = numpy_helper.to_array(gr.inits[bias]).astype(np.float32)
    shaped = gr.add_init(b.reshape((-1,) + (1,) * (w.ndim - 2)), bias + "_reshaped")
    nodes += [helper.make_node("Mul", [cast, scale], [scaled],
                               name=gr.fresh(base + "_output_scale_mul")),
              helper.make_node("Add", [scaled, shaped], [node.output[0]],
                               name=gr.fresh(base + "_bias_add"))]
    return nodes


def quantize_dynamic(model, args):
    gr = Graph(model)
    out = []
    quantized = {}  # float tensor -> its DynamicQuantizeLinear's outputs
    for node in gr.g.node:
        if node.op_type == "Conv":
            nodes = dynamic_conv(gr, node, args, quantized)
            out += nodes if nodes is not None else [node]
            continue
        w_name = node.input[1] if node.op_type == "MatMul" else None
        w = numpy_helper.to_array(gr.inits[w_name]) if w_name in gr.inits else None
        if w is None or w.dtype != np.float32 or w.ndim != 2 or not gr.is_float(node.input[0]):
            out.append(node)
            continue
        base = node.name or node.output[0]
        qw, w_scale = quantize_symmetric(w, 1 if args.per_channel else None)
        wq = gr.add_init(qw, w_name + "_quantized")
        ws = gr.add_init(w_scale, w_name + "_scale")
        wz = gr.add_init(np.zeros(w_scale.shape, np.int8), w_name + "_zero_point")
        (aq, a_s, az), nodes = dynamic_input(gr, node.input[0], quantized)
        mm, cast, scale = (gr.fresh(base + "_output_quantized"),
                           gr.fresh(base + "_output_quantized_cast_output"),
                           gr.fresh(base + "_scales_mul_output"))
        out += nodes + [
            helper.make_node("MatMulInteger", [aq, wq, az, wz], [mm],
                             name=gr.fresh(base + "_quant")),
            helper.make_node("Cast", [mm], [cast], to=TensorProto.FLOAT,
                             name=gr.fresh(base + "_output_quantized_cast")),
            helper.make_node("Mul", [a_s, ws], [scale], name=gr.fresh(base + "_scales_mul")),
            helper.make_node("Mul", [cast, scale], [node.output[0]],
                             name=gr.fresh(base + "_output_scale_mul")),
        ]
    del gr.g.node[:]
    gr.g.node.extend(out)
    drop_unused_initializers(gr.g)
    return model


def drop_unused_initializers(g):
    used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    keep = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)
    inputs = [i for i in g.input if i.name in used or i.name not in {t.name for t in keep}]
    del g.input[:]
    g.input.extend(inputs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--dynamic", action="store_true",
                    help="dynamic quantization (DynamicQuantizeLinear + MatMulInteger or ConvInteger)")
    ap.add_argument("--conv-weights", choices=["uint8", "int8"], default="uint8",
                    help="--dynamic: convolution weights uint8 of a zero point (ONNX Runtime's "
                         "default) or symmetric int8")
    ap.add_argument("--per-channel", action="store_true",
                    help="--dynamic: one weight scale per output column")
    ap.add_argument("--backplane", default="backplane", help="the `backplane` CLI")
    ap.add_argument("--calibrate", choices=["auto", "python", "cli"], default="auto",
                    help="run the calibration samples in this process through Backplane's "
                         "Python module (python), one `backplane run` each (cli), or the first "
                         "when the module can be imported (auto)")
    ap.add_argument("--samples", type=int, default=8, help="calibration inputs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--method", choices=["minmax", "percentile"], default="minmax")
    ap.add_argument("--percentile", type=float, default=99.99)
    ap.add_argument("--activation-type", choices=["uint8", "int8"], default="uint8")
    ap.add_argument("--shape", action="append", default=[],
                    help="size of a named input dim for calibration, NAME=SIZE (repeatable)")
    ap.add_argument("--int-high", type=int, default=100,
                    help="integer inputs are drawn uniform in [0, INT_HIGH)")
    args = ap.parse_args()
    model = onnx.load(args.model)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < 13:
        sys.exit(f"quantize_qdq: {args.model} is opset {opset}; per-channel "
                 "DequantizeLinear needs opset 13 or later")
    model = quantize_dynamic(model, args) if args.dynamic else quantize_static(model, args)
    model.producer_name = "backplane-quantize_qdq"
    onnx.checker.check_model(model)
    onnx.save(model, args.out)
    counts = {}
    for n in model.graph.node:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    print(f"quantize_qdq: wrote {args.out}: " +
          ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
