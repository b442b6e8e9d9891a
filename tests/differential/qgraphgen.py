"""Small random quantized (QDQ) graphs: the int8 groups CpuOneDnn runs as int8
primitives (docs/numerics.md, "Quantized models"), judged by the int8 rule.

A quantized spec is a spec as graphgen.py's (inputs, steps, outputs; the
shrinker edits it the same way) with "quantized": true. Its steps read and
write *quantized values*: uint8 or int8 tensors with one scale and zero
point. "qin" quantizes a float graph input; the others are the groups of the
table in docs/numerics.md, each written as a quantizer writes it
(DequantizeLinear of its operands, the float operator, QuantizeLinear):

  qconv   Conv by int8 weights (symmetric, per tensor or per output channel),
          no/int32/float bias, float activations, then Q; or QLinearConv; or
          ConvTranspose ("transposed", with output_padding)
  qgemm   Gemm/MatMul by constant 2-D int8 weights (through Flatten), or
          QLinearMatMul
  qact    Q -> DQ -> Relu/Clip -> Q, the requantized tail of a group
  qadd    Add of two dequantized tensors; qmul: Mul, broadcast or not
  qpool   MaxPool/AveragePool/GlobalAveragePool/GlobalMaxPool
  qtable  an elementwise function of one dequantized tensor (Sigmoid, Tanh,
          HardSwish, SiLU with its inner QDQ pair...)
  qconcat, qresize  what runs in float between a DQ and a Q (a Concat of one scale
          in and out, "same", moves the integers on CpuOneDnn)
  qmove   Transpose or Reshape between a DQ and a Q (of the input's scale: "same")
  qdyn    DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul [-> Add]:
          float out, from a float graph input; or ConvInteger ("conv"; int8
          weights, or uint8 of a zero point, "u8") [-> Add -> Relu]; "share": the
          DynamicQuantizeLinear of an earlier qdyn of the same input, as ONNX
          Runtime's quantizer quantizes a tensor once for all its products
  dq      DequantizeLinear: a float graph output

Scales come from calibration, as a static quantizer's do: build() first
builds the float graph (no Q/DQ, float weights) and runs it on CpuRef on
inputs drawn like the test's but from another seed; each activation's range
(widened to include 0) gives its scale and zero point (uint8, int8 of zero
point 0, or int8 asymmetric). The test inputs then saturate a little now
and then, as real data does.

The bound of each output is computed while building (`QParams.steps`): a
group's own rounding may differ by one step (the int8 rule; a table of a
quantized graph input by none), and a difference its inputs already carry
is carried through it as far as the operator can move it (`carried`): the
function's largest jump for a table, the largest weight for a product (the
differences of two correct runs are sparse rounding ties), the operands'
scales for the rest. The bounds go into the model's metadata
("differential.quantized"), so a saved .onnx is judged alike.

A quarter of the specs whose inputs share their first dim make it symbolic
(half of those of rank 3 or more their second dim too), as graphgen.py's do
(run_differential.py runs them at other sizes too).
"""
from __future__ import annotations

import json
import math

import numpy as np
from onnx import TensorProto, helper

import graphgen
from graphgen import FLOAT, InvalidSpec

_RANGE = {"uint8": (0, 255), "int8": (-128, 127)}
_NPQ = {"uint8": np.uint8, "int8": np.int8}
_ONNX = {"float32": TensorProto.FLOAT, "uint8": TensorProto.UINT8, "int8": TensorProto.INT8,
         "int32": TensorProto.INT32}
META = "differential.quantized"

# Lipschitz constants of the float activations between a product and its
# QuantizeLinear: how far they can move a difference of their input.
_LIPSCHITZ = {"Relu": 1.0, "Clip": 1.0, "LeakyRelu": 1.0, "Tanh": 1.0, "Sigmoid": 0.25,
              "HardSwish": 1.5, "HardSigmoid": 0.2}
# The functions a table step computes of its dequantized input.
TABLES = ["Sigmoid", "Tanh", "HardSwish", "HardSigmoid", "LeakyRelu", "Relu", "Clip6",
          "silu", "silu_qdq", "hswish_paddle", "tanh_sigmoid", "tanhshrink"]


class QParams:
    """A quantized value: scale, zero point, type, and the largest difference
    (in its integer units) that CpuOneDnn's may have from CpuRef's."""

    def __init__(self, scale, zero, dtype, steps):
        self.scale, self.zero, self.dtype, self.steps = float(scale), int(zero), dtype, steps

    def max_abs(self):
        """The largest |dequantized value|."""
        lo, hi = _RANGE[self.dtype]
        return self.scale * max(abs(lo - self.zero), abs(hi - self.zero))


def qparams(lo, hi, dtype, symmetric):
    """Scale and zero point for values in [lo, hi], as ONNX Runtime's
    quantizer computes them (the range widened to include 0)."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if not math.isfinite(lo) or not math.isfinite(hi):
        raise InvalidSpec("calibrated range not finite")
    if hi - lo < 1e-6:
        return 1.0, 0 if dtype == "uint8" or symmetric else -128
    qlo, qhi = _RANGE[dtype]
    if dtype == "int8" and symmetric:
        return float(np.float32(max(-lo, hi) / 127.0)), 0
    scale = float(np.float32((hi - lo) / (qhi - qlo)))
    zero = int(np.clip(np.rint(qlo - lo / scale), qlo, qhi))
    return scale, zero


def carried(delta):
    """How many integer steps two roundings of values `delta` steps apart
    can differ by."""
    return 0 if delta <= 1e-12 else int(math.floor(delta + 1e-9)) + 1


class QBuilder(graphgen.Builder):
    """graphgen.Builder with quantization. mode "calib": the float graph (Q
    and DQ are the identity, weights float) whose values `calib` names;
    "real": the QDQ graph with scales from `ranges`; "dry": shapes only."""

    def __init__(self, spec, mode, ranges=None):
        super().__init__(spec, dry=mode == "dry")
        self.mode = mode
        self.ranges = ranges or {}
        self.q = {}       # quantized value name -> QParams
        self.calib = {}   # range key -> float value name
        self.exact = set()  # the quantized graph inputs: the same bytes on both sides
        self.dynamic = {}   # qdyn output -> (its float input, largest weight scale)
        self.quantizers = {}  # qdyn input -> its DynamicQuantizeLinear's outputs
        self.q_float = {}   # dq output -> QParams of what it dequantizes
        self.key = ""

    def keyed(self, j):
        return f"{self.key}.{j}"

    def quantize(self, v, j, dtype, symmetric, steps=0, fixed=None):
        """QuantizeLinear of float value v with the scale of its calibrated
        range (key j of this step), or `fixed` (scale, zero)."""
        if self.mode == "calib":
            self.calib[self.keyed(j)] = v
            return v
        if fixed is not None:
            scale, zero = fixed
        else:
            lo, hi = self.ranges.get(self.keyed(j), (-1.0, 1.0))
            scale, zero = qparams(lo, hi, dtype, symmetric)
        s = self.const(np.asarray(scale, np.float32), "s")
        z = self.const(np.asarray(zero, _NPQ[dtype]), "z")
        y = self.node("QuantizeLinear", [v, s, z], self.shape(v), dtype)
        self.q[y] = QParams(scale, zero, dtype, steps)
        return y

    def dequantize(self, y):
        if self.mode == "calib":
            return y
        p = self.qp(y)
        s = self.const(np.asarray(p.scale, np.float32), "s")
        z = self.const(np.asarray(p.zero, _NPQ[p.dtype]), "z")
        return self.node("DequantizeLinear", [y, s, z], self.shape(y))

    def qp(self, y):
        if self.mode == "calib":
            return QParams(1.0, 0, "uint8", 0)
        if y not in self.q:
            raise InvalidSpec(f"{y} is not a quantized value")
        return self.q[y]

    def weights(self, w, axis, per_channel):
        """Constant int8 weights for float `w`, symmetric, one scale per index
        of `axis` or one in all; (DQ'd value or the int8 constant, scales,
        int8 weights). In calib mode the float weights themselves."""
        if per_channel:
            other = tuple(i for i in range(w.ndim) if i != axis)
            scales = np.abs(w).max(axis=other) / 127.0
        else:
            scales = np.asarray([np.abs(w).max() / 127.0])
        scales = np.where(scales > 0, scales, 1.0).astype(np.float32)
        shape = [1] * w.ndim
        shape[axis] = -1
        wq = np.clip(np.rint(w / (scales.reshape(shape) if per_channel else scales[0])),
                     -127, 127).astype(np.int8)
        if self.mode == "calib":
            return self.const(w.astype(np.float32), "w"), scales, wq
        return self.const(wq, "wq"), scales, wq

    def dq_weights(self, wq_name, scales, axis, zero_point=True):
        if self.mode == "calib":
            return wq_name
        per_channel = len(scales) > 1
        ins = [wq_name, self.const(scales if per_channel else np.asarray(scales[0]), "ws")]
        if zero_point:
            ins.append(self.const(np.zeros(scales.shape if per_channel else (), np.int8), "wz"))
        attrs = {"axis": axis} if per_channel else {}
        return self.node("DequantizeLinear", ins, self.shape(wq_name), **attrs)


def _bias(b, rng, kind, n, x_scale, w_scales, axis=0):
    """A bias of n values: none, float, or int32 in units of x_scale *
    w_scale, dequantized; (name or None)."""
    if not kind:
        return None
    real = rng.uniform(-0.5, 0.5, (n,)).astype(np.float32)
    if kind == "float" or b.mode == "calib":
        return b.const(real, "b")
    scale = (np.float32(x_scale) * w_scales).astype(np.float32)
    bq = np.rint(real / (scale if len(scale) > 1 else scale[0])).astype(np.int32)
    ins = [b.const(bq, "bq"), b.const(scale if len(scale) > 1 else np.asarray(scale[0]), "bs")]
    return b.node("DequantizeLinear", ins, (n,), **({"axis": axis} if len(scale) > 1 else {}))


def _acts(b, v, acts):
    """Float activations; their Lipschitz product."""
    lip = 1.0
    for a in acts:
        if a == "Clip":
            v = b.node("Clip", [v, b.const(np.asarray(0.0, np.float32)),
                                b.const(np.asarray(6.0, np.float32))], b.shape(v))
        elif a == "LeakyRelu":
            v = b.node("LeakyRelu", [v], b.shape(v), alpha=0.1)
        elif a == "HardSigmoid":
            v = b.node("HardSigmoid", [v], b.shape(v), alpha=0.2, beta=0.5)
        elif a == "HardSwish" and b.opset < 14:
            raise InvalidSpec("HardSwish before opset 14")
        else:
            v = b.node(a, [v], b.shape(v))
        lip *= _LIPSCHITZ[a]
    return v, lip


def _table_nodes(b, x, f, inner):
    """The float nodes of table function f of float value x; `inner(v)`
    quantizes and dequantizes v (SiLU's inner pair)."""
    s = b.shape(x)
    c = lambda v: b.const(np.asarray(v, np.float32))  # noqa: E731
    if f in ("Sigmoid", "Tanh", "Relu"):
        return b.node(f, [x], s)
    if f == "HardSwish":
        if b.opset < 14:
            raise InvalidSpec("HardSwish before opset 14")
        return b.node(f, [x], s)
    if f == "HardSigmoid":
        return b.node(f, [x], s, alpha=0.2, beta=0.5)
    if f == "LeakyRelu":
        return b.node(f, [x], s, alpha=0.1)
    if f == "Clip6":
        return b.node("Clip", [x, c(0.0), c(6.0)], s)
    if f == "silu":
        return b.node("Mul", [x, b.node("Sigmoid", [x], s)], s)
    if f == "silu_qdq":
        return b.node("Mul", [x, inner(b.node("Sigmoid", [x], s))], s)
    if f == "hswish_paddle":
        a = b.node("Clip", [b.node("Add", [x, c(3.0)], s), c(0.0), c(6.0)], s)
        return b.node("Div", [b.node("Mul", [x, a], s), c(6.0)], s)
    if f == "tanh_sigmoid":
        return b.node("Mul", [b.node("Tanh", [x], s), b.node("Sigmoid", [x], s)], s)
    if f == "tanhshrink":
        return b.node("Sub", [x, b.node("Tanh", [x], s)], s)
    raise InvalidSpec(f"table {f}")


def _table_values(f, x, inner_q):
    """Table function f of float32 array x, CpuRef's order of operations
    (an estimate: used only to bound how far it carries a difference)."""
    x = x.astype(np.float32)
    sig = lambda v: (1.0 / (1.0 + np.exp(-v.astype(np.float64)))).astype(np.float32)  # noqa
    if f == "Sigmoid":
        return sig(x)
    if f == "Tanh":
        return np.tanh(x)
    if f == "Relu":
        return np.maximum(x, 0)
    if f == "HardSwish":
        return x * np.clip(x / 6 + 0.5, 0, 1)
    if f == "HardSigmoid":
        return np.clip(0.2 * x + 0.5, 0, 1)
    if f == "LeakyRelu":
        return np.where(x >= 0, x, np.float32(0.1) * x)
    if f == "Clip6":
        return np.clip(x, 0, 6)
    if f == "silu":
        return x * sig(x)
    if f == "silu_qdq":
        s, z, dt = inner_q
        lo, hi = _RANGE[dt]
        q = np.clip(np.rint(sig(x) / np.float32(s)) + z, lo, hi)
        return x * ((q - z) * np.float32(s)).astype(np.float32)
    if f == "hswish_paddle":
        return x * np.clip(x + 3, 0, 6) / 6
    if f == "tanh_sigmoid":
        return np.tanh(x) * sig(x)
    if f == "tanhshrink":
        return x - np.tanh(x)
    raise InvalidSpec(f"table {f}")


def table_carry(f, xp, yp, inner_q):
    """How far table f (input xp, output yp) carries a difference of xp.steps:
    its largest jump over that many input steps, plus one for the estimate."""
    if xp.steps == 0 or yp.dtype not in _RANGE:
        return 0
    lo, hi = _RANGE[xp.dtype]
    q = np.arange(lo, hi + 1, dtype=np.float32)
    y = _table_values(f, ((q - xp.zero) * np.float32(xp.scale)).astype(np.float32), inner_q)
    ylo, yhi = _RANGE[yp.dtype]
    t = np.clip(np.rint(y / np.float32(yp.scale)) + yp.zero, ylo, yhi)
    d = min(int(math.ceil(xp.steps)), len(t) - 1)
    jump = max(float(np.abs(t[k:] - t[:-k]).max()) for k in range(1, d + 1))
    return int(jump) + 1


def _qlinear_inputs(b, x, xp, wname, scales, ys, yz, dtype):
    """QLinearConv's and QLinearMatMul's first eight inputs: x and its scale and
    zero point, the int8 weights and theirs (zero), the output's."""
    def scale(v):
        return b.const(np.asarray(v, np.float32), "s")
    return [x, scale(xp.scale), b.const(np.asarray(xp.zero, _NPQ[xp.dtype]), "z"), wname,
            b.const(scales if len(scales) > 1 else np.asarray(scales[0]), "ws"),
            b.const(np.zeros(scales.shape if len(scales) > 1 else (), np.int8), "wz"),
            scale(ys), b.const(np.asarray(yz, _NPQ[dtype]), "z")]


def _product_carry(wq, scales):
    """The largest w_scale * |w| of any one weight: how far a product moves
    per unit of difference in one input element. Differences between two
    correct runs are rounding ties, sparse: the bound takes at most one
    in the elements any one output reads (docs/numerics.md)."""
    return float((np.abs(wq.astype(np.float64)).max() * scales.astype(np.float64).max()))


def _conv_attrs(st, xs):
    rank = len(xs)
    if rank < 3 or rank > 5:
        raise InvalidSpec("conv rank")
    sp = rank - 2
    ks, strides, dil = st["ks"][:sp], st["st"][:sp], st["dil"][:sp]
    if len(ks) != sp or len(strides) != sp or len(dil) != sp or len(st["pads"]) < 2 * sp:
        raise InvalidSpec("conv dims")
    pads = st["pads"][:sp] + st["pads"][sp:2 * sp]
    g, oc, c = st["group"], st["oc"], xs[1]
    if st.get("depthwise"):
        g = c
        oc = c * max(1, oc // c) if oc >= c else c
    if c % g or oc % g:
        raise InvalidSpec("group")
    out = [graphgen._conv_out(xs[2 + i], ks[i], strides[i], pads[i], pads[sp + i], dil[i])
           for i in range(sp)]
    attrs = dict(kernel_shape=list(ks), strides=list(strides), dilations=list(dil),
                 pads=list(pads))
    if g != 1:
        attrs["group"] = g
    return g, oc, attrs, (xs[0], oc) + tuple(out)


def _step(b, idx, st, values, graph_inputs):
    rng = b.rng
    k = st["k"]
    b.key = str(idx)
    dt, sym = st.get("dt", "uint8"), bool(st.get("sym"))
    x = values[st["x"]] if "x" in st else None

    if k == "qin":  # a float graph input, quantized: identical on both sides
        if st["x"] not in graph_inputs:
            raise InvalidSpec("qin of a computed value")
        y = b.quantize(x, 0, dt, sym, steps=0)
        b.exact.add(y)
        return y

    if k == "qdyn":
        if st["x"] not in graph_inputs or b.dtypes[x] != FLOAT:
            raise InvalidSpec("qdyn of a computed value")
        xs = b.shape(x)
        conv = bool(st.get("conv"))
        if len(xs) < (3 if conv else 2):
            raise InvalidSpec("qdyn rank")
        if conv:  # ConvInteger: weights [oc, c / group, kernel...]
            g, n, attrs, out = _conv_attrs(st, xs)
            fan_in = xs[1] // g * int(np.prod(attrs["kernel_shape"]))
            w = (rng.normal(0, 1, (n, xs[1] // g) + tuple(attrs["kernel_shape"])) /
                 np.sqrt(fan_in)).astype(np.float32)
            axis = 0
        else:
            kk, n = xs[-1], st["n"]
            w = (rng.normal(0, 1, (kk, n)) / np.sqrt(kk)).astype(np.float32)
            attrs, out, axis = {}, tuple(xs[:-1]) + (n,), 1
        wzp = None
        if conv and st.get("u8") and b.mode != "calib":
            # uint8 weights of one zero point, as ONNX Runtime's dynamic
            # quantizer wrote them by default: their range widened to 0.
            lo, hi = min(0.0, float(w.min())), max(0.0, float(w.max()))
            scale = (hi - lo) / 255.0 if hi > lo else 1.0
            zero = int(np.clip(np.rint(-lo / scale), 0, 255))
            wq = np.clip(np.rint(w / scale) + zero, 0, 255).astype(np.uint8)
            wname, scales = b.const(wq, "wq"), np.asarray([scale], np.float32)
            wzp = b.const(np.asarray(zero, np.uint8))
        else:
            wname, scales, _ = b.weights(w, axis if conv else 1, st.get("pc", False))
            if st.get("wzp"):
                wzp = b.const(np.zeros(scales.shape if len(scales) > 1 else (), np.int8))
        bias = rng.uniform(-0.5, 0.5, (n,)).astype(np.float32) if st.get("bias") else None
        # A per-channel constant of a convolution's result: [n, 1, ...].
        channel_shape = (n,) + (1,) * (len(out) - 2) if conv else (n,)
        if b.mode == "calib":
            y = b.node("Conv" if conv else "MatMul", [x, wname], out, **attrs)
        else:
            names = b.quantizers.get(x) if st.get("share") else None
            if names is None:
                names = [b.fresh("v") for _ in range(3)]
                b.quantizers[x] = names
                if not b.dry:
                    b.nodes.append(helper.make_node("DynamicQuantizeLinear", [x], names,
                                                    name=f"n{len(b.nodes)}_DynamicQuantizeLinear"))
                else:
                    b.nodes.append("dyn")
            xq, xsc, xz = names
            b.shapes.update({xq: xs, xsc: (), xz: ()})
            b.dtypes.update({xq: "uint8", xsc: FLOAT, xz: "uint8"})
            ins = [xq, wname, xz] + ([wzp] if wzp is not None else [])
            acc = b.node("ConvInteger" if conv else "MatMulInteger", ins, out, "int32", **attrs)
            cast = b.node("Cast", [acc], out, to=TensorProto.FLOAT)
            per = len(scales) > 1
            ws = b.const(scales.reshape(channel_shape) if per else np.asarray(scales[0]), "ws")
            prod = b.node("Mul", [xsc, ws], channel_shape if per else ())
            y = b.node("Mul", [cast, prod], out)
        if bias is not None:
            y = b.node("Add", [y, b.const(bias.reshape(channel_shape), "b")], out)
        if conv and st.get("relu"):
            y = b.node("Relu", [y], out)
        b.dynamic[y] = (st["x"], float(scales.max()))
        return y

    if k == "dq":
        if b.mode != "calib":
            b.qp(x)
        y = b.dequantize(x)
        if b.mode != "calib":
            b.q_float[y] = b.qp(x)
        return y

    # The rest read quantized values and write one.
    operands = [values[r] for r in ([st["x"]] if "x" in st else []) +
                [st[r] for r in ("a", "b") if r in st] + st.get("xs", [])]
    ps = [b.qp(v) for v in operands]  # raises InvalidSpec for a float operand

    if k == "qconv" and st.get("transposed"):  # ConvTranspose: weights [C_in, C_out / group, ...]
        xs = b.shape(x)
        if st.get("qlinear") or st.get("depthwise"):
            raise InvalidSpec("transposed: no QLinear or depthwise form")
        g, oc, attrs, _ = _conv_attrs(st, xs)
        sp = len(xs) - 2
        opad = [min(p, s - 1) for p, s in zip(st.get("opad", [0] * sp), attrs["strides"])]
        out = [(xs[2 + i] - 1) * attrs["strides"][i] + opad[i] +
               (attrs["kernel_shape"][i] - 1) * attrs["dilations"][i] + 1 -
               attrs["pads"][i] - attrs["pads"][sp + i] for i in range(sp)]
        if min(out) < 1:
            raise InvalidSpec("transposed output")
        if any(opad):
            attrs["output_padding"] = opad
        fan = xs[1] // g * int(np.prod(st["ks"][:sp]))
        w = (rng.normal(0, 1, (xs[1], oc // g) + tuple(st["ks"][:sp])) /
             np.sqrt(fan)).astype(np.float32)
        wname, scales, wq = b.weights(w, 1, st.get("pc", False) and g == 1)
        xp = ps[0]
        ins = [b.dequantize(x), b.dq_weights(wname, scales, 1)]
        bias = _bias(b, rng, st.get("bias"), oc, xp.scale, scales)
        if bias is not None:
            ins.append(bias)
        v, lip = _acts(b, b.node("ConvTranspose", ins, (xs[0], oc) + tuple(out), **attrs),
                       st.get("acts", []))
        return _finish(b, v, dt, sym, [xp.steps * xp.scale * lip * _product_carry(wq, scales)])

    if k == "qconv":
        xs = b.shape(x)
        g, oc, attrs, oshape = _conv_attrs(st, xs)
        sp = len(xs) - 2
        fan = xs[1] // g * int(np.prod(st["ks"][:sp]))
        w = (rng.normal(0, 1, (oc, xs[1] // g) + tuple(st["ks"][:sp])) /
             np.sqrt(fan)).astype(np.float32)
        wname, scales, wq = b.weights(w, 0, st.get("pc", False))
        xp = ps[0]
        if st.get("qlinear"):
            if st.get("acts"):
                raise InvalidSpec("activations in QLinearConv")
            if st.get("bias") == "float":
                raise InvalidSpec("QLinearConv takes an int32 bias")
            real = rng.uniform(-0.5, 0.5, (oc,)).astype(np.float32) if st.get("bias") else None
            if b.mode == "calib":
                ins = [x, wname] + ([b.const(real, "b")] if real is not None else [])
                return b.quantize(b.node("Conv", ins, oshape, **attrs), 0, dt, sym)
            lo, hi = b.ranges.get(b.keyed(0), (-1.0, 1.0))
            ys, yz = qparams(lo, hi, dt, sym)
            ins = _qlinear_inputs(b, x, xp, wname, scales, ys, yz, dt)
            if real is not None:
                ins.append(b.const(np.rint(real / (np.float32(xp.scale) * scales)).astype(np.int32)
                                   if len(scales) > 1 else
                                   np.rint(real / np.float32(xp.scale * scales[0]))
                                   .astype(np.int32), "bq"))
            y = b.node("QLinearConv", ins, oshape, dt, **attrs)
            delta = xp.steps * xp.scale * _product_carry(wq, scales) / ys
            b.q[y] = QParams(ys, yz, dt, 1 + carried(delta))
            return y
        ins = [b.dequantize(x), b.dq_weights(wname, scales, 0)]
        bias = _bias(b, rng, st.get("bias"), oc, xp.scale, scales)
        if bias is not None:
            ins.append(bias)
        v, lip = _acts(b, b.node("Conv", ins, oshape, **attrs), st.get("acts", []))
        return _finish(b, v, dt, sym, [xp.steps * xp.scale * lip * _product_carry(wq, scales)])

    if k == "qgemm":
        xs = b.shape(x)
        op = st["op"]
        flat = st.get("flat") and len(xs) > 2
        if flat:
            xs = (xs[0], int(np.prod(xs[1:])))
        if op in ("Gemm",) and len(xs) != 2:
            raise InvalidSpec("Gemm rank")
        if len(xs) < 2:
            raise InvalidSpec("matmul rank")
        kk, n = xs[-1], st["n"]
        trans = op == "Gemm" and st.get("transB")
        w = (rng.normal(0, 1, (n, kk) if trans else (kk, n)) / np.sqrt(kk)).astype(np.float32)
        axis = 0 if trans else 1
        wname, scales, wq = b.weights(w, axis, st.get("pc", False))
        xp = ps[0]
        oshape = tuple(xs[:-1]) + (n,)
        if op == "QLinearMatMul":
            if flat or st.get("acts") or st.get("bias"):
                raise InvalidSpec("QLinearMatMul takes none of these")
            if b.mode == "calib":
                return b.quantize(b.node("MatMul", [x, wname], oshape), 0, dt, sym)
            lo, hi = b.ranges.get(b.keyed(0), (-1.0, 1.0))
            ys, yz = qparams(lo, hi, dt, sym)
            ins = _qlinear_inputs(b, x, xp, wname, scales, ys, yz, dt)
            y = b.node("QLinearMatMul", ins, oshape, dt)
            delta = xp.steps * xp.scale * _product_carry(wq, scales) / ys
            b.q[y] = QParams(ys, yz, dt, 1 + carried(delta))
            return y
        v = b.dequantize(x)
        if flat:
            v = b.node("Flatten", [v], xs, axis=1)
        ins = [v, b.dq_weights(wname, scales, axis)]
        if op == "Gemm":
            bias = _bias(b, rng, st.get("bias"), n, xp.scale, scales)
            if bias is not None:
                ins.append(bias)
            v = b.node("Gemm", ins, oshape, **({"transB": 1} if trans else {}))
        else:
            if st.get("bias"):
                raise InvalidSpec("MatMul has no bias")
            v = b.node("MatMul", ins, oshape)
        v, lip = _acts(b, v, st.get("acts", []))
        return _finish(b, v, dt, sym, [xp.steps * xp.scale * lip * _product_carry(wq, scales)])

    if k == "qact":  # DQ -> Relu/Clip -> Q: a group's requantized tail, or a table
        v = b.dequantize(x)
        if st["op"] == "Relu":
            v = b.node("Relu", [v], b.shape(v))
        else:
            v = b.node("Clip", [v, b.const(np.asarray(st["min"], np.float32)),
                                b.const(np.asarray(st["max"], np.float32))], b.shape(v))
        return _finish(b, v, dt, sym, [ps[0].steps * ps[0].scale])

    if k in ("qadd", "qmul"):
        a, c = values[st["a"]], values[st["b"]]
        shape = graphgen._bcast(b.shape(a), b.shape(c))
        if k == "qadd" and (b.shape(a) != shape or b.shape(c) != shape):
            raise InvalidSpec("qadd of a broadcast")
        da, dc = b.dequantize(a), (b.dequantize(c) if c != a else None)
        dc = da if dc is None else dc
        v = b.node("Add" if k == "qadd" else "Mul", [da, dc], shape)
        pa, pc = ps
        if k == "qadd":
            err = [pa.steps * pa.scale + pc.steps * pc.scale]
        else:
            ea, ec = pa.steps * pa.scale, pc.steps * pc.scale
            err = [ea * pc.max_abs() + ec * pa.max_abs() + ea * ec]
        return _finish(b, v, dt, sym, err)

    if k == "qpool":
        xs = b.shape(x)
        op = st["op"]
        v = b.dequantize(x)
        if op.startswith("Global"):
            if len(xs) < 3:
                raise InvalidSpec("gpool rank")
            v = b.node(op, [v], tuple(xs[:2]) + (1,) * (len(xs) - 2))
        else:
            attrs, out = graphgen.pool_window(st, xs, b.opset)
            v = b.node(op, [v], out, **attrs)
        # A quantizer gives a max pooling its input's scale; "same" does.
        fixed = None
        if st.get("same") and b.mode != "calib":
            fixed = (ps[0].scale, ps[0].zero)
            if ps[0].dtype != dt:
                raise InvalidSpec("same scale, another type")
        return _finish(b, v, dt, sym, [ps[0].steps * ps[0].scale], fixed=fixed)

    if k == "qtable":
        f = st["f"]
        xp = ps[0]
        v = b.dequantize(x)
        inner = {}

        def inner_qdq(u):  # sigmoid's own pair: uint8, zero point 0, calibrated
            q = b.quantize(u, 1, "uint8", False)
            if b.mode != "calib":
                p = b.q[q]
                inner["q"] = (p.scale, p.zero, p.dtype)
            return b.dequantize(q)

        v = _table_nodes(b, v, f, inner_qdq)
        if b.mode == "calib":
            return b.quantize(v, 0, dt, sym)
        y = b.quantize(v, 0, dt, sym)
        # A table is exact: of a quantized graph input, no difference. Not
        # SiLU without its inner pair: CpuOneDnn runs that as a float Swish.
        # Elsewhere the table may merge with another, or not form (a value
        # read outside): one step of its own.
        own = 0 if x in b.exact and f != "silu" else 1
        b.q[y].steps = own + table_carry(f, xp, b.q[y], inner.get("q"))
        return y

    if k == "qconcat":
        ins = [values[r] for r in st["xs"]]
        shapes = [b.shape(v) for v in ins]
        rank = len(shapes[0])
        axis = st["axis"] % rank
        for s in shapes:
            if len(s) != rank or any(s[i] != shapes[0][i] for i in range(rank) if i != axis):
                raise InvalidSpec("concat shapes")
        o = list(shapes[0])
        o[axis] = sum(s[axis] for s in shapes)
        v = b.node("Concat", [b.dequantize(u) for u in ins], o, axis=axis)
        return _finish(b, v, dt, sym, [p.steps * p.scale for p in ps], fixed=_same(b, st, ps, dt))

    if k == "qmove":  # Transpose or Reshape, quantized again as its input (integers moved)
        xs = b.shape(x)
        if st["op"] == "Transpose":
            perm = [i % len(xs) for i in st["perm"]]
            if sorted(perm) != list(range(len(xs))):
                raise InvalidSpec("transpose perm")
            v = b.node("Transpose", [b.dequantize(x)], tuple(xs[i] for i in perm), perm=perm)
        else:
            flat = int(np.prod(xs[1:]))
            shape = b.const(np.asarray([xs[0], -1], np.int64), "shape")
            v = b.node("Reshape", [b.dequantize(x), shape], (xs[0], flat))
        return _finish(b, v, dt, sym, [ps[0].steps * ps[0].scale], fixed=_same(b, st, ps, dt))

    if k == "qresize":
        xs = b.shape(x)
        if len(xs) != 4:
            raise InvalidSpec("resize rank")
        f = st["f"]
        scales = b.const(np.asarray([1, 1, f, f], np.float32), "scales")
        roi = b.const(np.zeros((0,), np.float32), "roi")
        v = b.node("Resize", [b.dequantize(x), roi, scales], (xs[0], xs[1], xs[2] * f, xs[3] * f),
                   mode="nearest", coordinate_transformation_mode="asymmetric",
                   nearest_mode="floor")
        return _finish(b, v, dt, sym, [ps[0].steps * ps[0].scale])

    raise InvalidSpec(f"unknown step kind {k}")


def _same(b, st, ps, dtype):
    """With st["same"]: the (scale, zero) of the operands, which must all have
    them and the step's type (a quantizer gives a Concat or Transpose its
    input's), for the Q after the step; else None (calibrated)."""
    if not st.get("same") or b.mode == "calib":
        return None
    if any((p.scale, p.zero, p.dtype) != (ps[0].scale, ps[0].zero, dtype) for p in ps):
        raise InvalidSpec("same scale: the operands differ")
    return ps[0].scale, ps[0].zero


def _finish(b, v, dtype, symmetric, errors, fixed=None):
    """Q of v, whose float value differs by at most max(errors) (absolute)
    between the two runs: one step of its own, and what that carries."""
    if b.mode == "calib":
        return b.quantize(v, 0, dtype, symmetric)
    y = b.quantize(v, 0, dtype, symmetric, fixed=fixed)
    b.q[y].steps = 1 + carried(max(errors) / b.q[y].scale)
    return y


def _build(spec, mode, ranges=None):
    b = QBuilder(spec, mode, ranges)
    values = {}
    graph_inputs = []
    for name, shape, dtype in graphgen.declare_inputs(b, spec):
        values[name] = name
        graph_inputs.append(helper.make_tensor_value_info(name, _ONNX[dtype], list(shape)))
    names = graphgen.spec_input_names(spec)
    for idx, st in enumerate(spec["steps"]):
        try:
            values[st["id"]] = _step(b, idx, st, values, names)
        except KeyError as e:
            raise InvalidSpec(f"step {idx} refers to a missing value {e}") from None
    return b, values, graph_inputs


def _model(b, graph_inputs, outs, props):
    graph = helper.make_graph(b.nodes, "differential_int8", graph_inputs, outs, b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", b.opset)],
                              producer_name="graphgen")
    model.ir_version = 8
    if props:
        helper.set_model_props(model, props)
    return model


def calibrate(spec):
    """The range of every value a QuantizeLinear of `spec` quantizes: the float
    graph on CpuRef, on inputs from another seed than the test's."""
    import backplane  # only here: generating specs needs no runtime

    b, values, graph_inputs = _build(spec, "calib")
    wanted = sorted(set(b.calib.values()) - graphgen.spec_input_names(spec))
    outs = [helper.make_tensor_value_info(v, TensorProto.FLOAT, list(b.shape(v)))
            for v in wanted]
    feeds = {}
    if outs:
        model = _model(b, graph_inputs, outs, {})
        feeds = graphgen.feeds_for(model, seed=1)
        try:
            got = backplane.InferenceSession(model.SerializeToString(),
                                             backends=["CpuRef"]).run(wanted, feeds)
        except backplane.Error as e:
            raise InvalidSpec(f"CpuRef cannot calibrate the float graph: {e}") from None
        found = dict(zip(wanted, got))
    else:
        found = {}
    if not feeds:
        rng = np.random.default_rng(1)
        feeds = {i["name"]: rng.normal(0, 1, i["shape"]).astype(np.float32)
                 for i in spec["inputs"]}
    found.update(feeds)
    ranges = {}
    for key, v in b.calib.items():
        a = np.asarray(found[v], np.float64)
        ranges[key] = (float(a.min()), float(a.max())) if a.size else (0.0, 0.0)
    return ranges


def build(spec):
    """The QDQ model of quantized `spec` (raises InvalidSpec) and its pins
    (none). Its metadata "differential.quantized" gives each output's bound."""
    _build(spec, "dry")  # an invalid spec fails here, before calibrating
    ranges = calibrate(spec)
    b, values, graph_inputs = _build(spec, "real", ranges)
    outs, bounds = [], {}
    dynamic, q_float = b.dynamic, b.q_float
    for o in spec["outputs"]:
        if o not in values:
            raise InvalidSpec(f"output {o} missing")
        v = values[o]
        if v in bounds or o in graphgen.spec_input_names(spec):
            continue
        if v in b.q:
            bounds[v] = {"steps": b.q[v].steps}
        elif v in q_float:
            bounds[v] = {"steps": q_float[v].steps, "scale": q_float[v].scale}
        elif v in dynamic:
            bounds[v] = {"dynamic": dynamic[v][0], "w_scale": dynamic[v][1]}
        else:
            raise InvalidSpec(f"output {o} has no bound")
        outs.append(helper.make_tensor_value_info(v, _ONNX[b.dtypes[v]], list(b.shape(v))))
    if not outs:
        raise InvalidSpec("no output")
    props = {META: json.dumps(bounds, sort_keys=True)}
    lead = graphgen.symbolic_lead(spec)
    if lead:
        # A symbolic batch (and length), as graphgen.build makes them
        # (run_differential.py runs the graph at other sizes of them too).
        graph_inputs = [helper.make_tensor_value_info(
            i.name, i.type.tensor_type.elem_type,
            ["N", "T"][:lead] + [d.dim_value for d in i.type.tensor_type.shape.dim][lead:])
            for i in graph_inputs]
        outs = [helper.make_tensor_value_info(o.name, o.type.tensor_type.elem_type, None)
                for o in outs]
        shape = spec["inputs"][0]["shape"]
        props["differential.dims"] = ",".join(f"{n}={d}" for n, d in zip("NT", shape[:lead]))
    return _model(b, graph_inputs, outs, props), []


def bounds_of(model):
    """Output name -> its bound (build()'s metadata), {} for a float graph."""
    for p in model.metadata_props:
        if p.key == META:
            return json.loads(p.value)
    return {}


def compare(got, ref, bound, feeds, numerics):
    """Compares a quantized graph's output under the int8 rule: uint8/int8
    in integer steps; a dequantized one within steps * scale more than the
    float rule; a dynamic product within one unit of its accumulator
    (x_scale * w_scale, x_scale from the input as DynamicQuantizeLinear
    computes it) more than the float rule."""
    got, ref = np.asarray(got), np.asarray(ref)
    c = numerics.compare(got, ref)
    if not c.comparable:
        return False, c.reason, math.inf, 0.0
    if "dynamic" in bound:
        x = np.asarray(feeds[bound["dynamic"]], np.float32)
        x_scale = (max(0.0, float(x.max())) - min(0.0, float(x.min()))) / 255.0
        allowed = x_scale * bound["w_scale"]
    elif "scale" in bound:
        allowed = bound["steps"] * bound["scale"]
    else:
        err = np.abs(got.astype(np.int64) - ref.astype(np.int64))
        worst = int(err.max()) if err.size else 0
        at = np.unravel_index(int(np.argmax(err)), err.shape) if err.size else ()
        return (worst <= bound["steps"], f"max|got-ref| {worst} steps at {[int(i) for i in at]}, "
                f"bound {bound['steps']} steps", worst, bound["steps"])
    limit = c.bound + allowed
    return (c.max_abs_error <= limit, f"max|got-ref| {c.max_abs_error:.3e} at "
            f"{list(c.worst_index)}, bound {limit:.2e} ({allowed:.2e} of quantization steps)",
            c.max_abs_error, limit)


# ---- generating --------------------------------------------------------------

class QGen(graphgen.Gen):
    """Draws a quantized spec: graphgen.Gen's helpers, QBuilder's steps."""

    def __init__(self, seed, backend):
        super().__init__(seed, backend)
        # Per-axis DequantizeLinear is opset 13's; HardSwish 14's.
        self.opset = int(self.pick([13, 17, 17]))
        self.b = QBuilder({"seed": seed, "opset": self.opset}, "dry")
        self.quantized = []  # the quantized values so far

    def add(self, st, shape=None, dtype=None):
        self.count += 1
        st["id"] = f"s{self.count}"
        v = _step(self.b, len(self.steps), st, self.values, {i["name"] for i in self.inputs})
        self.values[st["id"]] = v
        self.steps.append(st)
        self.vals[st["id"]] = (self.b.shape(v), self.b.dtypes[v])
        if self.b.dtypes[v] in _RANGE:
            self.quantized.append(st["id"])
        return st["id"]

    def try_add(self, st, fallback):
        try:
            return self.add(st)
        except InvalidSpec:
            self.count -= 1
            return fallback

    def keep_type(self, st, x):
        """The step's type is x's (a quantizer keeps it where it keeps the scale)."""
        st["dt"], st["sym"] = self.b.q[self.values[x]].dtype, False
        return st

    def qtype(self, st):
        """Activations uint8 mostly (a quantizer's default), else int8 with
        or without a zero point."""
        st["dt"] = "uint8" if self.chance(0.65) else "int8"
        st["sym"] = st["dt"] == "int8" and self.chance(0.5)
        return st

    def acts(self):
        if self.chance(0.45):
            return []
        ops = ["Relu", "Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid"]
        if self.opset >= 14:
            ops.append("HardSwish")
        return [self.pick(ops) for _ in range(1 if self.chance(0.8) else 2)]

    def qin(self, shape):
        return self.add(self.qtype({"k": "qin", "x": self.input(shape)}))

    def qconv(self, x):
        shape = self.vals[x][0]
        sp = len(shape) - 2
        c = shape[1]
        k = self.pick([1, 1, 3, 3, 5, 2])
        ks = [k if self.chance(0.8) else self.pick([1, 3]) for _ in range(sp)]
        pads = [self.r(ks[i] // 2 + 1) if self.chance(0.7) else 0 for i in range(sp)]
        pads = pads + [p if self.chance(0.8) else self.r(ks[i] // 2 + 1)
                       for i, p in enumerate(pads)]
        group, depthwise = 1, self.chance(0.15)
        if not depthwise and self.chance(0.1):
            group = self.pick([d for d in (2, 3, 4) if c % d == 0] or [1])
        oc = self.pick([1, 3, 7, 8, 13, 16, 17, 24, 32])
        if group > 1:
            oc = group * max(1, oc // group)
        qlinear = self.chance(0.15)
        st = self.qtype({"k": "qconv", "x": x, "oc": oc, "ks": ks,
                         "st": [self.pick([1, 1, 1, 2]) for _ in range(sp)],
                         "dil": [1 if self.chance(0.85) else 2 for _ in range(sp)], "pads": pads,
                         "group": group, "depthwise": depthwise, "pc": self.chance(0.7),
                         "bias": self.pick([False, "int32", "int32", "float"]),
                         "acts": [] if qlinear else self.acts(), "qlinear": qlinear})
        if qlinear and st["bias"] == "float":
            st["bias"] = "int32"
        if not qlinear and not depthwise and self.chance(0.12):  # ConvTranspose
            st["transposed"] = True
            st["opad"] = [self.r(2) for _ in range(sp)]
        one = dict(st, ks=[1] * sp, st=[1] * sp, dil=[1] * sp, pads=[0] * (2 * sp), group=1,
                   depthwise=False)
        return self.try_add(st, None) or self.add(one)

    def qgemm(self, x, flat=False):
        shape = self.vals[x][0]
        rank = 2 if flat else len(shape)
        op = self.pick(["Gemm", "MatMul", "MatMul", "QLinearMatMul"] if rank == 2 else
                       ["MatMul", "MatMul", "QLinearMatMul"])
        st = self.qtype({"k": "qgemm", "x": x, "op": op, "n": self.pick([1, 3, 7, 13, 16, 24, 33]),
                         "transB": self.r(2) if op == "Gemm" else 0, "pc": self.chance(0.6),
                         "flat": flat, "bias": False, "acts": []})
        if op == "Gemm":
            st["bias"] = self.pick([False, "int32", "float"])
        if op != "QLinearMatMul":
            st["acts"] = self.acts()
        return self.add(st)

    def qact(self, x):
        st = self.qtype({"k": "qact", "x": x, "op": self.pick(["Relu", "Clip"])})
        st["min"], st["max"] = self.pick([(0.0, 6.0), (-1.0, 1.0), (0.0, 1.0)])
        return self.add(st)

    def qtable(self, x):
        fs = [f for f in TABLES if f != "HardSwish" or self.opset >= 14]
        return self.add(self.qtype({"k": "qtable", "x": x, "f": self.pick(fs)}))

    def qpool(self, x):
        shape = self.vals[x][0]
        ops = ["GlobalAveragePool", "GlobalMaxPool"]
        if len(shape) == 4:
            ops += ["MaxPool", "MaxPool", "AveragePool", "AveragePool"]
        op = self.pick(ops)
        st = {"k": "qpool", "op": op, "x": x}
        if self.chance(0.6):  # the input's type (a quantizer keeps it)
            st["dt"], st["sym"] = self.b.q[self.values[x]].dtype, False
            st["same"] = op.endswith("MaxPool") and self.chance(0.7)
        else:
            self.qtype(st)
        if not op.startswith("Global"):
            ks = [min(self.pick([2, 3]), d) for d in shape[2:]]
            st.update(ks=ks, st=[self.pick([1, 2]) for _ in range(2)],
                      pads=[self.r(k) if self.chance(0.4) else 0 for k in ks] * 2,
                      ceil=int(self.chance(0.2)), cip=int(self.chance(0.3)))
        return self.try_add(st, x)

    def squeeze_excite(self, x):
        """x * sigmoid(conv(gap(x))): the broadcast Mul's operand uint8 or
        int8 of zero point 0, as a quantizer gives a sigmoid."""
        c = self.vals[x][0][1]
        g = self.add(self.qtype({"k": "qpool", "op": "GlobalAveragePool", "x": x}))
        h = self.add(self.qtype({"k": "qconv", "x": g, "oc": c, "ks": [1, 1], "st": [1, 1],
                                 "dil": [1, 1], "pads": [0] * 4, "group": 1, "depthwise": False,
                                 "pc": self.chance(0.7), "bias": "int32", "acts": [],
                                 "qlinear": False}))
        s = self.add({"k": "qtable", "x": h, "f": "Sigmoid", "dt": self.pick(["uint8", "int8"]),
                      "sym": True})
        return self.add(self.qtype({"k": "qmul", "a": x, "b": s} if self.chance(0.7) else
                                   {"k": "qmul", "a": s, "b": x}))

    def conv_family(self):
        rank = self.pick([3, 4, 4, 4, 4, 5])
        c = self.pick([1, 3, 7, 13, 16, 17, 32])
        sp = [self.pick([1, 2, 3, 5, 7, 9]) for _ in range(rank - 2)]
        if rank == 5:
            sp = [self.pick([1, 2, 3, 4]) for _ in range(3)]
        x = self.qin((self.pick([1, 1, 2]), c) + tuple(sp))
        for _ in range(1 + self.r(3)):
            before = x
            if self.chance(0.2):  # a residual block: the sum of two int8 values
                x = self.try_add(self.qtype(
                    {"k": "qconv", "x": x, "oc": c, "ks": [3] * len(sp), "st": [1] * len(sp),
                     "dil": [1] * len(sp), "pads": [1] * (2 * len(sp)), "group": 1,
                     "depthwise": False, "pc": True, "bias": "int32", "acts": self.acts(),
                     "qlinear": False}), x)
                if self.chance(0.3):
                    x = self.qact(x)
                x = self.add(self.qtype({"k": "qadd", "a": x, "b": before}))
                continue
            x = self.qconv(x)
            if self.chance(0.3):
                x = self.qact(x)
            if self.chance(0.2):
                x = self.qpool(x)
            if self.chance(0.15):
                x = self.qtable(x)
            shape = self.vals[x][0]
            r = self.rng.random()
            if r < 0.2 and shape == self.vals[before][0]:
                x = self.add(self.qtype({"k": "qadd", "a": x, "b": before} if self.chance(0.5)
                                        else {"k": "qadd", "a": before, "b": x}))
            elif r < 0.3 and len(shape) == 4:
                x = self.squeeze_excite(x)
            elif r < 0.37 and shape[2:] == self.vals[before][0][2:] and shape[0] == \
                    self.vals[before][0][0]:
                x = self.add(self.qtype({"k": "qconcat", "xs": [x, before], "axis": 1}))
            elif r < 0.4:  # one scale in and out, as a quantizer writes them
                x = self.try_add(self.keep_type({"k": "qconcat", "xs": [x, x], "axis": 1,
                                                 "same": True}, x), x)
            elif r < 0.45 and len(shape) == 4:
                x = self.add(self.qtype({"k": "qresize", "x": x, "f": self.pick([2, 3])}))
            elif r < 0.52:
                st = {"k": "qmove", "x": x, "same": self.chance(0.8)}
                if len(shape) >= 3 and self.chance(0.5):
                    st.update(op="Transpose", perm=[0] + [2 + i for i in range(len(shape) - 2)]
                              + [1])
                else:
                    st["op"] = "Reshape"
                x = self.try_add(self.keep_type(st, x), x)
        if self.chance(0.25):  # a classifier's head
            x = self.add(self.qtype({"k": "qpool", "op": "GlobalAveragePool", "x": x}))
            x = self.qgemm(x, flat=True)
        return x

    def matmul_family(self):
        rank = self.pick([2, 2, 3])
        shape = tuple(self.pick([1, 2, 3]) for _ in range(rank - 2)) + \
            (self.pick([1, 2, 3, 5, 8]), self.pick([1, 3, 7, 13, 16, 32, 40]))
        x = self.qin(shape)
        for _ in range(1 + self.r(2)):
            x = self.qgemm(x)
            if self.chance(0.25):
                x = self.qact(x)
            if self.chance(0.2):
                x = self.qtable(x)
        return x

    def table_family(self):
        shape = tuple(self.pick([1, 2, 3, 5, 7, 16]) for _ in range(self.pick([1, 2, 3, 4])))
        x = self.qin(shape)
        y = self.qtable(x)
        r = self.rng.random()
        if r < 0.3:
            y = self.qtable(y)
        elif r < 0.5:
            y = self.add(self.qtype({"k": self.pick(["qadd", "qmul"]), "a": x, "b": y}))
        elif r < 0.6:
            y = self.add(self.qtype({"k": "qmul", "a": y, "b": y}))
        return y

    def dynamic_family(self):
        if self.chance(0.5):  # ConvInteger
            rank = self.pick([3, 4, 4, 4])
            c = self.pick([1, 3, 8, 16, 19])
            sp = [self.pick([1, 3, 6, 9]) for _ in range(rank - 2)]
            x = self.input((self.pick([1, 1, 2]), c) + tuple(sp))
            ks = [self.pick([1, 1, 3]) for _ in sp]
            return self.add({"k": "qdyn", "x": x, "conv": True, "oc": self.pick([1, 4, 16, 24]),
                             "ks": ks, "st": [self.pick([1, 1, 2]) for _ in sp],
                             "dil": [1] * len(sp), "pads": [k // 2 for k in ks] * 2,
                             "group": self.pick([1, 1, 1, c]), "depthwise": False,
                             "pc": self.chance(0.3), "u8": self.chance(0.5),
                             "bias": self.chance(0.7), "wzp": self.chance(0.5),
                             "relu": self.chance(0.5)})
        rank = self.pick([2, 2, 3])
        shape = tuple(self.pick([1, 2, 3]) for _ in range(rank - 2)) + \
            (self.pick([1, 2, 5, 8]), self.pick([1, 3, 7, 16, 32, 40]))
        x = self.input(shape)
        y = self.add({"k": "qdyn", "x": x, "n": self.pick([1, 3, 7, 13, 16, 24, 33]),
                      "pc": self.chance(0.4), "bias": self.chance(0.7),
                      "wzp": self.chance(0.5)})
        for _ in range(self.pick([0, 0, 1, 2])):  # more products of one quantizer (Q, K, V)
            self.extra_outputs.append(
                self.add({"k": "qdyn", "x": x, "n": self.pick([1, 3, 7, 16, 33]),
                          "pc": self.chance(0.4), "bias": self.chance(0.7),
                          "wzp": self.chance(0.5), "share": True}))
        return y

    def generate(self):
        self.inputs = []
        self.extra_outputs = []
        families = [(self.conv_family, 0.5), (self.matmul_family, 0.2),
                    (self.table_family, 0.15), (self.dynamic_family, 0.15)]
        fams, ps = zip(*families)
        ps = np.asarray(ps) / sum(ps)
        out = self.pick(list(fams), p=ps)()
        outputs = [out]
        # A float output, dequantized, now and then.
        if out in self.quantized and self.chance(0.25):
            outputs = [self.add({"k": "dq", "x": out})]
        outputs += self.extra_outputs
        # An intermediate value read outside: its own (tighter) bound, and a
        # chain that cannot fuse past it.
        mids = [s for s in self.quantized if s != out and self.steps[0]["id"] != s]
        if mids and self.chance(0.3):
            outputs.append(self.pick(mids))
        spec = self.spec_so_far()
        spec["quantized"] = True
        spec["outputs"] = outputs
        firsts = {tuple(i["shape"][:1]) for i in spec["inputs"]}
        if len(firsts) == 1 and () not in firsts and self.chance(0.25):
            spec["symbolic"] = True
            # The second dim too where every input shares it (a batch of
            # sequences, whose rows a product collapses into N x T).
            seconds = {tuple(i["shape"][:2]) for i in spec["inputs"]}
            if (len(seconds) == 1 and all(len(i["shape"]) >= 3 for i in spec["inputs"])
                    and self.chance(0.5)):
                spec["symbolic"] = 2
        return spec
