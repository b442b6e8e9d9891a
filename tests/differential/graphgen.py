"""Small random ONNX graphs for differential testing of a fast backend against CpuRef.

A graph is first a *spec*: plain data (dicts and lists, JSON-able) naming the
inputs, a list of steps and the outputs. ``generate(seed, backend)`` draws a
spec from a seeded numpy generator; ``build(spec)`` turns a spec into an ONNX
model deterministically (constants come from a generator seeded by the spec's
seed, drawn step by step), computing every shape itself. The shrinker
(``shrink.py``) edits specs (drops steps, makes dims smaller) and rebuilds
them, so a step never stores a shape it could derive: a constant names how
it broadcasts (which axes it keeps), not its dims.

The steps are what a fast backend claims and fuses: Conv/MatMul/Gemm with
chains of element-wise ops and activations after them (constants of every
broadcastable shape on either side), BatchNormalization, residual adds,
Concat, Transpose/Reshape, pooling, the decomposed patterns exporters write
(SiLU, GELU, LayerNorm, Paddle's hard-swish), stacks of convolutions
(blocked layouts), a symbolic first dim, or first two (a batch of sequences,
whose rows a product collapses into N x T): shape-polymorphic partitions,
which run_differential.py runs at several sizes,
partition boundaries (an operator only CpuRef has, a node pinned to CpuRef),
and for GpuOcl the integer, boolean and float16 element-wise kernels.

Values are kept where fp32 rounding stays within the numerics policy for a
correct backend: inputs of Sqrt/Log/Reciprocal and denominators are moved
away from 0 (Abs, then Add of c >= 0.5), and Gen.estimate tracks a bound of
each value's magnitude so that Exp, Pow and Sin/Cos are not applied where
they would turn an ulp into a large difference.
"""
from __future__ import annotations

import zlib

import numpy as np
from onnx import TensorProto, helper, numpy_helper

FLOAT = "float32"


class InvalidSpec(Exception):
    """The spec does not make a valid graph (a shrunk spec may not)."""


# ---- building ----------------------------------------------------------------

_NP = {"float32": np.float32, "float16": np.float16, "int32": np.int32, "int64": np.int64,
       "bool": np.bool_}
_ONNX = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16,
         "int32": TensorProto.INT32, "int64": TensorProto.INT64, "bool": TensorProto.BOOL}

# Ops whose input must be kept away from 0 or negatives: the builder puts
# Abs and Add(c >= 0.5) before them (a rounding difference near a pole or a
# branch point is not a bug).
_GUARDED = {"Sqrt", "Log", "Reciprocal"}


class _DryRng:
    """What the dry builder draws constants from: zeros, nothing random."""

    @staticmethod
    def _zeros(size):
        return 0.0 if size is None else np.zeros(size)

    def normal(self, loc=0.0, scale=1.0, size=None):
        return self._zeros(size)

    def uniform(self, low=0.0, high=1.0, size=None):
        return self._zeros(size)

    def integers(self, low, high=None, size=None):
        return 0 if size is None else np.zeros(size, np.int64)

    def random(self, size=None):
        return self._zeros(size)

    def choice(self, a, size=None):
        return self._zeros(size)


def broadcast_shape(var_shape, mask, lead):
    """The constant shape keeping the axes of `mask` (bit i = axis i of the
    variable operand), the rest 1, with `lead` leading axes dropped."""
    rank = len(var_shape)
    dims = [d if (mask >> i) & 1 else 1 for i, d in enumerate(var_shape)]
    return dims[min(lead, rank):]


class Builder:
    """Builds nodes and constants; `dry`: shapes and dtypes only (the
    generator's, step by step)."""

    def __init__(self, spec, dry=False):
        self.spec = spec
        self.dry = dry
        self.opset = spec["opset"]
        self.nodes = []
        self.inits = []
        self.shapes = {}
        self.dtypes = {}
        self.names = 0
        # One generator for the whole build: a step's constants change when
        # an earlier step goes (shrinking), which is fine.
        self.rng = _DryRng() if dry else np.random.default_rng(spec["seed"] & 0xFFFFFFFFFFFF)

    def fresh(self, base="t"):
        self.names += 1
        return f"{base}{self.names}"

    def const(self, array, base="c"):
        name = self.fresh(base)
        if not self.dry:
            self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        self.shapes[name] = tuple(np.asarray(array).shape)
        self.dtypes[name] = str(np.asarray(array).dtype)
        return name

    def node(self, op, inputs, shape, dtype=FLOAT, domain="", **attrs):
        out = self.fresh("v")
        name = f"n{len(self.nodes)}_{op}"
        self.nodes.append(name if self.dry else
                          helper.make_node(op, inputs, [out], name=name, domain=domain, **attrs))
        self.shapes[out] = tuple(int(d) for d in shape)
        self.dtypes[out] = dtype
        return out

    def shape(self, v):
        return self.shapes[v]


def _float_const(rng, shape, kind="normal", dtype=np.float32):
    if kind == "normal":
        a = rng.normal(0.0, 1.0, shape)
    elif kind == "denominator":  # away from 0, either sign
        a = rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)
    elif kind == "positive":
        a = rng.uniform(0.5, 1.5, shape)
    elif kind == "small":
        a = rng.uniform(-0.5, 0.5, shape)
    else:
        raise ValueError(kind)
    return np.asarray(a, dtype=dtype)


def _int_const(rng, shape, dtype, nonzero=False):
    a = rng.integers(-6, 7, shape)
    if nonzero:
        a = np.where(a == 0, 3, a)
    return np.asarray(a, dtype=dtype)


def _operand(b, rng, ref, var, kind, values, dtype):
    """Value name for operand `ref` of a binary step: a value, or a constant
    broadcast against `var` (the other, variable operand)."""
    if isinstance(ref, str):
        return values[ref]
    if ref.get("value") is not None:  # an exact scalar (Paddle's 3 and 6)
        shape = broadcast_shape(b.shape(var), ref["mask"], ref["lead"])
        return b.const(np.full(shape, ref["value"], dtype=_NP[dtype]))
    shape = broadcast_shape(b.shape(var), ref["mask"], ref["lead"])
    if dtype in ("int32", "int64"):
        return b.const(_int_const(rng, shape, _NP[dtype], nonzero=kind == "denominator"))
    if dtype == "bool":
        return b.const(rng.random(shape) < 0.5)
    return b.const(_float_const(rng, shape, kind, _NP[dtype]))


def _guard(b, rng, x, dtype=FLOAT):
    """Abs(x) + c, c in [0.5, 1.5): away from 0, positive."""
    a = b.node("Abs", [x], b.shape(x), dtype)
    c = b.const(np.asarray(rng.uniform(0.5, 1.5), dtype=_NP[dtype]))
    return b.node("Add", [a, c], b.shape(x), dtype)


def _bcast(a, c):
    ra, rc = len(a), len(c)
    r = max(ra, rc)
    a = (1,) * (r - ra) + tuple(a)
    c = (1,) * (r - rc) + tuple(c)
    out = []
    for x, y in zip(a, c):
        if x != y and x != 1 and y != 1:
            raise InvalidSpec(f"shapes {a} and {c} do not broadcast")
        out.append(max(x, y) if x != 0 and y != 0 else 0)
    return tuple(out)


def _conv_out(x, k, s, p0, p1, d):
    o = (x + p0 + p1 - ((k - 1) * d + 1)) // s + 1
    if o < 1:
        raise InvalidSpec("window larger than the input")
    return o


def _pool_out(x, k, s, p0, p1, ceil):
    span = x + p0 + p1 - k
    if span < 0:
        raise InvalidSpec("pool window larger than the input")
    o = (-(-span // s) if ceil else span // s) + 1
    if ceil and (o - 1) * s >= x + p0:  # the last window starts in the padding
        o -= 1
    return o


def _perm_ok(perm, rank):
    return sorted(perm) == list(range(rank))


def _build_step(b, idx, st, values):
    rng = b.rng
    k = st["k"]
    dtype = st.get("dtype", FLOAT)
    x = values[st["x"]] if "x" in st else None
    if x is not None and k == "act" and b.dtypes[x] != dtype:
        raise InvalidSpec("operand dtype")
    if x is not None and k in ("conv", "bn", "gemm", "matmul", "swish", "gelu", "hswish_paddle",
                               "lnpat", "layernorm", "pool", "gpool", "softmax", "reduce", "pad",
                               "prelu", "resize") and b.dtypes[x] != FLOAT:
        raise InvalidSpec("operand dtype")
    xs = b.shape(x) if x is not None else None

    if k == "conv":
        rank = len(xs)
        if rank < 3 or rank > 5:
            raise InvalidSpec("conv rank")
        sp = rank - 2
        ks, strides, dil = st["ks"][:sp], st["st"][:sp], st["dil"][:sp]
        if len(ks) != sp or len(strides) != sp or len(dil) != sp:
            raise InvalidSpec("conv dims")
        pads = st["pads"][:sp] + st["pads"][sp:sp + sp] if len(st["pads"]) >= 2 * sp else None
        if pads is None or len(pads) != 2 * sp:
            raise InvalidSpec("conv pads")
        g, oc, c = st["group"], st["oc"], xs[1]
        if st.get("depthwise"):
            g = c
            oc = c * max(1, oc // max(c, 1)) if oc >= c else c
        if c % g or oc % g:
            raise InvalidSpec("group")
        w = _float_const(rng, (oc, c // g) + tuple(ks)) / np.float32(np.sqrt(c // g * np.prod(ks)))
        ins = [x, b.const(w.astype(np.float32), "w")]
        if st["bias"]:
            ins.append(b.const(_float_const(rng, (oc,), "small"), "b"))
        attrs = dict(kernel_shape=list(ks), strides=list(strides), dilations=list(dil))
        if st.get("auto_pad"):
            attrs["auto_pad"] = st["auto_pad"]
            if st["auto_pad"] == "VALID":
                out_sp = [_conv_out(xs[2 + i], ks[i], strides[i], 0, 0, dil[i]) for i in range(sp)]
            else:
                out_sp = [-(-xs[2 + i] // strides[i]) for i in range(sp)]
        else:
            attrs["pads"] = list(pads)
            out_sp = [_conv_out(xs[2 + i], ks[i], strides[i], pads[i], pads[sp + i], dil[i])
                      for i in range(sp)]
        if g != 1:
            attrs["group"] = g
        return b.node("Conv", ins, (xs[0], oc) + tuple(out_sp), **attrs)

    if k == "bn":
        if len(xs) < 2:
            raise InvalidSpec("bn rank")
        c = xs[1]
        ins = [x, b.const(_float_const(rng, (c,), "positive")), b.const(_float_const(rng, (c,), "small")),
               b.const(_float_const(rng, (c,), "small")), b.const(_float_const(rng, (c,), "positive"))]
        return b.node("BatchNormalization", ins, xs, epsilon=float(st.get("eps", 1e-5)))

    if k == "gemm":
        if len(xs) != 2:
            raise InvalidSpec("gemm rank")
        m, kk = xs
        n = st["n"]
        wshape = (n, kk) if st["transB"] else (kk, n)
        w = _float_const(rng, wshape) / np.float32(np.sqrt(kk))
        ins = [x, b.const(w, "w")]
        cshape = {"none": None, "n": (n,), "1n": (1, n), "scalar": (), "mn": (m, n)}[st["c"]]
        if cshape is not None:
            ins.append(b.const(_float_const(rng, cshape, "small"), "c"))
        elif b.opset < 11:  # C is required before opset 11
            ins.append(b.const(np.zeros((n,), np.float32), "c"))
        attrs = {}
        if st["transB"]:
            attrs["transB"] = 1
        if st["alpha"] != 1.0:
            attrs["alpha"] = float(st["alpha"])
        if st["beta"] != 1.0 and cshape is not None:
            attrs["beta"] = float(st["beta"])
        return b.node("Gemm", ins, (m, n), **attrs)

    if k == "matmul":
        if len(xs) < 2:
            raise InvalidSpec("matmul rank")
        if "y" in st:
            y = values[st["y"]]
            ys = b.shape(y)
            if len(ys) < 2 or ys[-2] != xs[-1]:
                raise InvalidSpec("matmul dims")
            lead = _bcast(xs[:-2], ys[:-2])
            return b.node("MatMul", [x, y], lead + (xs[-2], ys[-1]))
        kk, n = xs[-1], st["n"]
        wlead = tuple(xs[:-2][len(xs) - 2 - st.get("wbatch", 0):]) if st.get("wbatch") else ()
        w = _float_const(rng, wlead + (kk, n)) / np.float32(np.sqrt(kk))
        return b.node("MatMul", [x, b.const(w, "w")], tuple(xs[:-1]) + (n,))

    if k == "bin":
        op = st["op"]
        refs = [st["a"], st["b"]]
        var = next((values[r] for r in refs if isinstance(r, str)), None)
        if var is None:
            raise InvalidSpec("binary of two constants")
        kinds = ["normal", "normal"]
        if op == "Div":
            kinds[1] = "denominator"
        if op == "Pow":
            kinds = ["positive", "normal"]
        ins = [_operand(b, rng, r, var, kinds[i], values, dtype) for i, r in enumerate(refs)]
        if op == "Div" and isinstance(refs[1], str) and dtype not in ("int32", "int64"):
            ins[1] = _guard(b, rng, ins[1], dtype)
        if op == "Pow" and isinstance(refs[0], str):
            ins[0] = _guard(b, rng, ins[0], dtype)
        if dtype in ("int32", "int64") and op == "Div" and isinstance(refs[1], str):
            raise InvalidSpec("integer division by a variable")
        for v in ins:
            if b.dtypes[v] != dtype:
                raise InvalidSpec("operand dtype")
        shape = _bcast(b.shape(ins[0]), b.shape(ins[1]))
        return b.node(op, ins, shape, dtype)

    if k == "act":
        op = st["op"]
        if op in _GUARDED:
            x = _guard(b, rng, x, dtype)
        a = dict(st.get("attrs", {}))
        ins = [x]
        if op == "Clip":
            lo, hi = st["min"], st["max"]
            if b.opset < 11:
                if lo is not None:
                    a["min"] = float(lo)
                if hi is not None:
                    a["max"] = float(hi)
            else:
                ins.append(b.const(np.asarray(lo, np.float32)) if lo is not None else "")
                if hi is not None:
                    ins.append(b.const(np.asarray(hi, np.float32)))
                while ins and ins[-1] == "":
                    ins.pop()
        if op == "Pow":
            e = st["e"]
            if e != int(e):
                x = _guard(b, rng, x, dtype)
                ins = [x]
            ins.append(b.const(np.asarray(e, np.float32)))
        if op == "HardSwish" and b.opset < 14:
            raise InvalidSpec("HardSwish before opset 14")
        if op == "Mish" and b.opset < 18:
            raise InvalidSpec("Mish before opset 18")
        domain = "com.microsoft" if op == "Gelu" else ""
        return b.node(op, ins, b.shape(x), dtype, domain=domain, **a)

    if k == "swish":  # x * sigmoid(x), either order; Paddle2ONNX's x * sigmoid(beta * x)
        beta = st.get("beta")
        a = x if beta is None else b.node("Mul", [x, b.const(np.asarray(beta, np.float32))], xs)
        s = b.node("Sigmoid", [a], xs)
        ins = [x, s] if st["order"] else [s, x]
        return b.node("Mul", ins, xs)

    if k == "gelu":  # the two orders PyTorch exports
        d = b.node("Div", [x, b.const(np.asarray(1.4142135381698608, np.float32))], xs)
        e = b.node("Erf", [d], xs)
        a = b.node("Add", [e, b.const(np.asarray(1.0, np.float32))], xs)
        if st["order"]:
            m = b.node("Mul", [x, a], xs)
            return b.node("Mul", [m, b.const(np.asarray(0.5, np.float32))], xs)
        h = b.node("Mul", [x, b.const(np.asarray(0.5, np.float32))], xs)
        return b.node("Mul", [h, a], xs)

    if k == "hswish_paddle":
        # HardSwish as exporters write it before opset 14 ("form"): 0
        # Paddle2ONNX's x * clip(x + 3, 0, 6) / 6; 1 x * (clip(x + 3, 0, 6)
        # * 1/6); 2 PyTorch's x * HardSigmoid(x, 1/6, 0.5). "order" swaps
        # the operands of the Add and the Muls.
        form, order = st.get("form", 0), st["order"]
        def mul(p, q):
            return b.node("Mul", [q, p] if order else [p, q], xs)
        if form == 2:
            return mul(x, b.node("HardSigmoid", [x], xs, alpha=1.0 / 6, beta=0.5))
        three = b.const(np.asarray(3.0, np.float32))
        a = b.node("Add", [three, x] if order else [x, three], xs)
        if b.opset < 11:
            c = b.node("Clip", [a], xs, min=0.0, max=6.0)
        else:
            c = b.node("Clip", [a, b.const(np.asarray(0.0, np.float32)),
                                b.const(np.asarray(6.0, np.float32))], xs)
        if form == 1:
            return mul(x, mul(c, b.const(np.asarray(1.0 / 6, np.float32))))
        return b.node("Div", [mul(x, c), b.const(np.asarray(6.0, np.float32))], xs)

    if k in ("lnpat", "layernorm") and xs[-1] < 2:
        # Every element its row's mean: zeros, whose rows a later
        # normalization would divide by sqrt(epsilon) (docs/numerics.md,
        # "Normalizing a constant row").
        raise InvalidSpec("normalizing rows of one element")

    if k == "lnpat":  # PyTorch's decomposed LayerNorm over the last axis
        axes_attr = b.opset < 18
        def rmean(v, shape):
            if axes_attr:
                return b.node("ReduceMean", [v], shape, axes=[-1])
            return b.node("ReduceMean", [v, b.const(np.asarray([-1], np.int64))], shape)
        red = tuple(xs[:-1]) + (1,)
        mu = rmean(x, red)
        d = b.node("Sub", [x, mu], xs)
        p = b.node("Pow", [d, b.const(np.asarray(2.0, np.float32))], xs)
        var = rmean(p, red)
        ve = b.node("Add", [var, b.const(np.asarray(1e-5, np.float32))], red)
        sd = b.node("Sqrt", [ve], red)
        y = b.node("Div", [d, sd], xs)
        if st["affine"]:
            y = b.node("Mul", [y, b.const(_float_const(rng, (xs[-1],), "positive"))], xs)
            y = b.node("Add", [y, b.const(_float_const(rng, (xs[-1],), "small"))], xs)
        return y

    if k == "layernorm":
        if b.opset < 17:
            raise InvalidSpec("LayerNormalization before opset 17")
        c = xs[-1]
        return b.node("LayerNormalization", [x, b.const(_float_const(rng, (c,), "positive")),
                                             b.const(_float_const(rng, (c,), "small"))], xs,
                      axis=-1, epsilon=1e-5)

    if k == "pool":
        attrs, out = pool_window(st, xs, b.opset)
        return b.node(st["op"], [x], out, **attrs)

    if k == "gpool":
        if len(xs) < 3:
            raise InvalidSpec("gpool rank")
        return b.node(st["op"], [x], tuple(xs[:2]) + (1,) * (len(xs) - 2))

    if k == "concat":
        ins = [values[r] for r in st["xs"]]
        shapes = [b.shape(v) for v in ins]
        rank = len(shapes[0])
        axis = st["axis"] if st["axis"] < rank else 1 % rank
        for s in shapes:
            if len(s) != rank or any(s[i] != shapes[0][i] for i in range(rank) if i != axis):
                raise InvalidSpec("concat shapes")
            if b.dtypes[values[st["xs"][0]]] != b.dtypes[values[st["xs"][shapes.index(s)]]]:
                raise InvalidSpec("concat dtypes")
        out = list(shapes[0])
        out[axis] = sum(s[axis] for s in shapes)
        return b.node("Concat", ins, out, b.dtypes[ins[0]], axis=axis)

    if k == "transpose":
        perm = [p for p in st["perm"] if p < len(xs)]
        if not _perm_ok(perm, len(xs)):
            raise InvalidSpec("perm")
        return b.node("Transpose", [x], tuple(xs[p] for p in perm), b.dtypes[x], perm=perm)

    if k == "reshape":
        mode = st["mode"]
        n = int(np.prod(xs))
        if mode == "flat":
            shape = (xs[0], n // max(xs[0], 1)) if xs else (1,)
        elif mode == "merge_last":
            if len(xs) < 2:
                raise InvalidSpec("merge_last rank")
            shape = tuple(xs[:-2]) + (xs[-2] * xs[-1],)
        elif mode == "split_last":
            last = xs[-1]
            f = next((f for f in (2, 3) if last % f == 0 and last > f), None)
            if f is None or len(xs) >= 5:
                raise InvalidSpec("split_last")
            shape = tuple(xs[:-1]) + (f, last // f)
        elif mode == "unsqueeze":
            if len(xs) >= 5:
                raise InvalidSpec("unsqueeze rank")
            shape = (1,) + tuple(xs)
        else:
            raise InvalidSpec(mode)
        if st.get("op") == "Flatten" and mode == "flat":
            return b.node("Flatten", [x], shape, b.dtypes[x], axis=1)
        spec_shape = list(shape)
        if st.get("minus_one") and spec_shape:
            spec_shape[-1] = -1
        return b.node("Reshape", [x, b.const(np.asarray(spec_shape, np.int64), "shape")], shape,
                      b.dtypes[x])

    if k == "softmax":
        rank = len(xs)
        axis = st["axis"] % rank
        if b.opset < 13:
            axis = rank - 1  # the same meaning before and after opset 13
        return b.node("Softmax", [x], xs, axis=axis)

    if k == "reduce":
        rank = len(xs)
        axes = sorted({a % rank for a in st["axes"]})
        keep = st["keep"]
        out = [1 if i in axes else d for i, d in enumerate(xs)] if keep else \
            [d for i, d in enumerate(xs) if i not in axes]
        op = st["op"]
        as_input = b.opset >= 18 or (op == "ReduceSum" and b.opset >= 13)
        if as_input:
            return b.node(op, [x, b.const(np.asarray(axes, np.int64), "axes")], out, keepdims=keep)
        return b.node(op, [x], out, axes=axes, keepdims=keep)

    if k == "pad":
        rank = len(xs)
        if rank < 3:
            raise InvalidSpec("pad rank")
        sp = rank - 2
        before = [0, 0] + st["p"][:sp]
        after = [0, 0] + st["p"][sp:2 * sp]
        if len(before) != rank or len(after) != rank:
            raise InvalidSpec("pad dims")
        out = [d + p + q for d, p, q in zip(xs, before, after)]
        if b.opset < 11:
            return b.node("Pad", [x], out, pads=before + after, mode="constant", value=0.0)
        return b.node("Pad", [x, b.const(np.asarray(before + after, np.int64), "pads")], out)

    if k == "prelu":
        slope = broadcast_shape(xs, st["mask"], st["lead"])
        return b.node("PRelu", [x, b.const(_float_const(rng, slope, "small"))], xs)

    if k == "slice":
        rank = len(xs)
        axis = st["axis"] % rank
        n = xs[axis]
        if n < 2:
            raise InvalidSpec("slice of one")
        start, step = st["start"] % n, st["step"]
        end = min(n, start + max(1, (n - start) // 2 * step) + 1) if step > 1 else n - st["drop"] % n
        if end <= start:
            raise InvalidSpec("empty slice")
        count = len(range(start, end, step))
        out = list(xs)
        out[axis] = count
        ins = [x, b.const(np.asarray([start], np.int64)), b.const(np.asarray([end], np.int64)),
               b.const(np.asarray([axis], np.int64))]
        if step != 1:
            ins.append(b.const(np.asarray([step], np.int64)))
        if b.opset < 10:
            raise InvalidSpec("Slice with inputs before opset 10")
        return b.node("Slice", ins, out, b.dtypes[x])

    if k == "resize":
        if len(xs) != 4 or b.opset < 11:
            raise InvalidSpec("resize")
        f = st["f"]
        out = [xs[0], xs[1], xs[2] * f, xs[3] * f]
        scales = b.const(np.asarray([1, 1, f, f], np.float32), "scales")
        roi = b.const(np.zeros((0,), np.float32), "roi")
        if st["mode"] == "linear":
            return b.node("Resize", [x, roi, scales], out, mode="linear",
                          coordinate_transformation_mode="half_pixel")
        return b.node("Resize", [x, roi, scales], out, mode="nearest",
                      coordinate_transformation_mode="asymmetric", nearest_mode="floor")

    if k == "gather":  # constant indices, negative ones too
        rank = len(xs)
        axis = st["axis"] % rank
        n = xs[axis]
        idx = np.asarray([(i % (2 * n)) - n for i in st["idx"]], np.int64)
        if st.get("scalar"):
            idx = idx[:1].reshape(())
        out = list(xs[:axis]) + list(idx.shape) + list(xs[axis + 1:])
        return b.node("Gather", [x, b.const(idx, "idx")], out, b.dtypes[x], axis=axis)

    if k == "cast":
        return b.node("Cast", [x], xs, st["to"], to=_ONNX[st["to"]])

    if k == "compare":  # comparisons and logic: bool out
        op = st["op"]
        y = values[st["y"]] if isinstance(st["y"], str) else _operand(b, rng, st["y"], x, "normal",
                                                                       values, b.dtypes[x])
        if b.dtypes[y] != b.dtypes[x]:
            raise InvalidSpec("compare dtypes")
        return b.node(op, [x, y], _bcast(xs, b.shape(y)), "bool")

    if k == "not":
        if b.dtypes[x] != "bool":
            raise InvalidSpec("not of non-bool")
        return b.node("Not", [x], xs, "bool")

    if k == "where":
        c, a, y = values[st["c"]], values[st["x"]], values[st["y"]]
        if b.dtypes[c] != "bool" or b.dtypes[a] != b.dtypes[y]:
            raise InvalidSpec("where dtypes")
        shape = _bcast(_bcast(b.shape(c), b.shape(a)), b.shape(y))
        return b.node("Where", [c, a, y], shape, b.dtypes[a])

    raise InvalidSpec(f"unknown step kind {k}")


def pool_window(st, xs, opset):
    """A 2-D MaxPool/AveragePool step's attributes (ks, st, pads, ceil, cip)
    and output shape for input shape xs; InvalidSpec where ONNX does not
    take them."""
    if len(xs) != 4:
        raise InvalidSpec("pool rank")
    ks, strides, pads = st["ks"], st["st"], st["pads"]
    for i in range(2):
        if pads[i] >= ks[i] or pads[2 + i] >= ks[i]:
            raise InvalidSpec("pool pads")
    attrs = dict(kernel_shape=list(ks), strides=list(strides), pads=list(pads))
    if st["ceil"]:
        if opset < 10:
            raise InvalidSpec("ceil_mode before opset 10")
        attrs["ceil_mode"] = 1
    if st["op"] == "AveragePool" and st["cip"]:
        attrs["count_include_pad"] = 1
    out = [_pool_out(xs[2 + i], ks[i], strides[i], pads[i], pads[2 + i], st["ceil"])
           for i in range(2)]
    return attrs, (xs[0], xs[1]) + tuple(out)


def declare_inputs(b, spec):
    """The spec's inputs as (name, shape, dtype), their shapes and dtypes
    recorded in builder b; InvalidSpec for an empty one."""
    out = []
    for inp in spec["inputs"]:
        name = inp["name"]
        shape = tuple(int(d) for d in inp["shape"])
        if any(d < 1 for d in shape):
            raise InvalidSpec("empty input")
        b.shapes[name] = shape
        b.dtypes[name] = inp["dtype"]
        out.append((name, shape, inp["dtype"]))
    return out


def build(spec):
    """The ONNX model of `spec` (raises InvalidSpec) and the names of the
    nodes to pin to CpuRef."""
    if spec.get("quantized"):
        import qgraphgen  # the quantized graphs (qgraphgen.py), built their own way
        return qgraphgen.build(spec)
    b = Builder(spec)
    values = {}
    graph_inputs = []
    for name, shape, dtype in declare_inputs(b, spec):
        values[name] = name
        # A symbolic batch (and length): the partitions are compiled for any
        # (shape-polymorphic where the backend can) and run at this one.
        lead = symbolic_lead(spec)
        dims = ["N", "T"][:lead] + list(shape[lead:])
        graph_inputs.append(helper.make_tensor_value_info(name, _ONNX[dtype], dims))
    pins = []
    for idx, st in enumerate(spec["steps"]):
        first = len(b.nodes)
        try:
            values[st["id"]] = _build_step(b, idx, st, values)
        except KeyError as e:
            raise InvalidSpec(f"step {idx} refers to a missing value {e}") from None
        if st.get("pin") and len(b.nodes) > first:
            pins.append(b.nodes[-1].name)
    outs = []
    for o in spec["outputs"]:
        if o not in values:
            raise InvalidSpec(f"output {o} missing")
        v = values[o]
        if v in [x.name for x in outs] or v in spec_input_names(spec):
            continue
        outs.append(helper.make_tensor_value_info(
            v, _ONNX[b.dtypes[v]], None if spec.get("symbolic") else list(b.shape(v))))
    if not outs:
        raise InvalidSpec("no output")
    for o in outs:
        if any(d < 1 for d in b.shape(o.name)):
            raise InvalidSpec("empty output")
    graph = helper.make_graph(b.nodes, "differential", graph_inputs, outs, b.inits)
    opsets = [helper.make_opsetid("", spec["opset"])]
    if any(n.domain == "com.microsoft" for n in b.nodes):
        opsets.append(helper.make_opsetid("com.microsoft", 1))
    model = helper.make_model(graph, opset_imports=opsets, producer_name="graphgen")
    model.ir_version = 8
    # What a saved graph needs to run as it failed: the nodes pinned to
    # CpuRef, the value of each symbolic dim.
    props = {}
    if pins:
        props["differential.pin"] = ",".join(pins)
    lead = symbolic_lead(spec)
    if lead:
        shape = spec["inputs"][0]["shape"]
        props["differential.dims"] = ",".join(f"{n}={d}" for n, d in zip("NT", shape[:lead]))
    if props:
        helper.set_model_props(model, props)
    return model, pins


def symbolic_lead(spec):
    """How many leading dims of every input are symbolic: 0, 1 (N) or 2 (N, T)."""
    symbolic = spec.get("symbolic")
    return 2 if symbolic == 2 else 1 if symbolic else 0


def spec_input_names(spec):
    return {i["name"] for i in spec["inputs"]}


def symbolic_dims(model):
    """The value of each symbolic dim a saved graph ran at, by name."""
    symbols = {}
    for p in model.metadata_props:
        if p.key == "differential.dims":
            for item in p.value.split(","):
                name, _, value = item.partition("=")
                symbols[name] = int(value)
    return symbols


def feeds_for(model, seed=0, dims=None):
    """Inputs for `model`, from its declared input shapes and dtypes (a
    regression .onnx carries nothing else); `dims` gives symbolic dims other
    values than the graph was made at."""
    rng = np.random.default_rng(seed)
    symbols = symbolic_dims(model)
    symbols.update(dims or {})
    out = {}
    for vi in model.graph.input:
        t = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else symbols.get(d.dim_param, 1)
                 for d in t.shape.dim]
        elem = t.elem_type
        if elem == TensorProto.FLOAT:
            out[vi.name] = rng.normal(0, 1, shape).astype(np.float32)
        elif elem == TensorProto.FLOAT16:
            out[vi.name] = rng.normal(0, 1, shape).astype(np.float16)
        elif elem in (TensorProto.INT32, TensorProto.INT64):
            dt = np.int32 if elem == TensorProto.INT32 else np.int64
            out[vi.name] = rng.integers(-20, 21, shape).astype(dt)
        elif elem == TensorProto.BOOL:
            out[vi.name] = rng.random(shape) < 0.5
        else:
            raise ValueError(f"input {vi.name}: element type {elem}")
    return out


# ---- generating --------------------------------------------------------------

_ACTS = ["Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Elu",
         "Exp", "Abs", "Sqrt", "Pow", "Neg", "Selu", "Softplus", "Mish", "Gelu", "Erf"]
# Operators a fast backend may not take: the node runs on CpuRef between two
# partitions of the fast one.
_BOUNDARY = {"CpuOneDnn": ["Sin", "Log", "Reciprocal", "Cos", "Softsign"],
             "GpuOcl": ["Sin", "Cos", "Softsign"]}
# Largest magnitude (estimated, see Gen.estimate) a value may have before a
# step that would turn fp32 rounding into large differences: Exp of it
# (exp(x) amplifies the absolute error of x; and heavy tails: a later
# convolution that mixes large and small values, then a bounded activation,
# leaves a small output the error of the large ones), Sin/Cos of it (a small
# output from a large argument), a power of it or to it.
_EXP_MAX = 5.0
_PERIODIC_MAX = 8.0
_POW_MAX = 6.0
_BIG = 1e3


class Gen:
    def __init__(self, seed, backend):
        self.seed = seed
        self.backend = backend
        self.rng = np.random.default_rng(seed)
        self.steps = []
        self.vals = {}   # value id -> (shape, dtype), shapes tracked while generating
        self.count = 0
        self.opset = int(self.rng.choice([9, 11, 13, 17, 18], p=[0.1, 0.2, 0.25, 0.25, 0.2]))
        self.b = Builder({"seed": seed, "opset": self.opset}, dry=True)
        self.values = {}
        self.mag = {}    # value id -> estimated largest |value|

    def r(self, n):
        return int(self.rng.integers(n))

    def chance(self, p):
        return bool(self.rng.random() < p)

    def pick(self, seq, p=None):
        if p is None:
            return seq[int(self.rng.integers(len(seq)))]
        return seq[int(self.rng.choice(len(seq), p=p))]

    def add(self, st, shape=None, dtype=None):
        """Appends step `st` (raises InvalidSpec, adding nothing, if it
        does not fit); its value's shape and dtype come from the builder."""
        self.count += 1
        st["id"] = f"s{self.count}"
        v = _build_step(self.b, len(self.steps), st, self.values)
        self.values[st["id"]] = v
        self.mag[st["id"]] = self.estimate(st)
        if self.chance(0.04):
            st["pin"] = True
        self.steps.append(st)
        self.vals[st["id"]] = (self.b.shape(v), self.b.dtypes[v])
        return st["id"]

    def m(self, ref):
        if isinstance(ref, str):
            return self.mag.get(ref, 4.5)
        return abs(ref["value"]) if ref.get("value") is not None else 3.5

    def estimate(self, st):
        """A rough bound of |value| of step st's output, from its inputs'
        (graph inputs are standard normal: 4.5; constants: 3.5)."""
        k, m = st["k"], self.m
        if k == "conv":
            return 2 * m(st["x"]) + 1
        if k == "bn":
            return 3 * m(st["x"]) + 1
        if k in ("gemm", "matmul"):
            return 2 * m(st["x"]) * (m(st["y"]) if "y" in st else 1) + 1
        if k == "bin":
            a, b, op = st["a"], st["b"], st["op"]
            if op in ("Add", "Sub"):
                return m(a) + m(b)
            if op == "Mul":
                return m(a) * m(b)
            if op == "Div":
                return 2 * m(a)
            if op in ("Max", "Min"):
                return max(m(a), m(b))
            if op == "Pow":
                if isinstance(a, str):
                    return (m(a) + 1.5) ** 3
                return 3.0 ** min(m(b), 300)
        if k == "act":
            op, x = st["op"], m(st["x"])
            if op in ("Sigmoid", "Tanh", "HardSigmoid", "Sin", "Cos", "Softsign", "Reciprocal",
                      "Erf"):
                return 2.0
            if op == "Clip":
                if st["min"] is not None and st["max"] is not None:
                    return max(abs(st["min"]), abs(st["max"]))
                return x
            if op == "Exp":
                return float(np.exp(min(x, 300)))
            if op == "Sqrt":
                return float(np.sqrt(x + 1.5))
            if op == "Log":
                return float(np.log(x + 1.5)) + 1
            if op == "Pow":
                return (x + 1.5) ** st["e"]
            return 1.1 * x + 1
        if k in ("lnpat", "layernorm"):
            return 2 * float(np.sqrt(self.vals[st["x"]][0][-1])) + 1
        if k == "softmax":
            return 1.0
        if k == "reduce":
            shape = self.vals[st["x"]][0]
            n = int(np.prod([shape[a % len(shape)] for a in set(st["axes"])]))
            return m(st["x"]) * (n if st["op"] == "ReduceSum" else 1)
        if k == "concat":
            return max(m(r) for r in st["xs"])
        if k == "where":
            return max(m(st["x"]), m(st["y"]))
        if "x" in st:
            return 1.1 * m(st["x"]) + 1
        return 4.5

    def const_ref(self, shape, allow_full=True):
        rank = len(shape)
        choice = self.r(6 if allow_full else 5)
        if choice == 0:   # 0-d
            return {"mask": 0, "lead": rank}
        if choice == 1:   # [1]
            return {"mask": 0, "lead": max(rank - 1, 0)}
        if choice == 2 and rank >= 2:   # per channel, [C,1,1] or [1,C,1,1]
            return {"mask": 2, "lead": self.pick([0, 1])}
        if choice == 3 and rank >= 1:   # the last axis: [W], a row
            return {"mask": 1 << (rank - 1), "lead": self.r(rank)}
        if choice == 4:   # any axes kept
            return {"mask": self.r(1 << rank) if rank else 0, "lead": self.r(rank + 1)}
        return {"mask": (1 << rank) - 1, "lead": self.r(2) if rank else 0}  # full

    def binary(self, x, shape, dtype=FLOAT, other=None, ops=None):
        if ops is None:
            ops = ["Add", "Sub", "Mul", "Div"] * 3 + ["Max", "Min"]
            if dtype == FLOAT and self.m(x) <= _POW_MAX:
                ops.append("Pow")
        if dtype == "float16":  # OpenCL's float division is not exactly rounded
            ops = ["Add", "Sub", "Mul", "Max", "Min"]
        op = self.pick(ops)
        c = other if other is not None else self.const_ref(shape)
        if op == "Pow" and other is None:  # constant exponents, small
            c = dict(c, value=float(self.pick([2.0, 0.5, 1.5])))
        if self.chance(0.5) and not (op == "Pow" and self.m(x) > _PERIODIC_MAX):
            a, bb = c, x
        else:
            a, bb = x, c
        if dtype in ("int32", "int64") and op == "Div" and isinstance(bb, str):
            a, bb = bb, a
        out_shape = shape
        if isinstance(c, str):
            out_shape = np.broadcast_shapes(shape, self.vals[c][0])
        else:
            cs = broadcast_shape(shape, c["mask"], c["lead"])
            out_shape = np.broadcast_shapes(shape, tuple(cs))
        return self.add({"k": "bin", "op": op, "a": a, "b": bb, "dtype": dtype}, out_shape, dtype)

    def activation(self, x, shape, dtype=FLOAT):
        ops = list(_ACTS)
        if self.opset < 14:
            ops.remove("HardSwish")
        if self.opset < 18:
            ops.remove("Mish")
        if self.m(x) > _EXP_MAX:
            ops.remove("Exp")
        if self.m(x) > _BIG:  # bring it back: something bounded
            ops = ["Sigmoid", "Tanh", "HardSigmoid"]
        if self.backend == "GpuOcl" or dtype == "float16":
            ops = [o for o in ops if o not in ("Pow", "Selu", "Mish", "Gelu")]
        if dtype == "float16":
            # What both sides round once from the same float32 value: one
            # float16 ulp (2^-11) is outside the policy, and a transcendental
            # function's float32 results of two correct backends may round
            # to neighbouring float16 values (docs/numerics.md).
            ops = ["Relu", "LeakyRelu", "Abs", "Neg"]
        op = self.pick(ops)
        st = {"k": "act", "op": op, "dtype": dtype, "x": x}
        if op == "LeakyRelu":
            st["attrs"] = {"alpha": float(self.pick([0.01, 0.1, 0.3]))}
        elif op == "Elu":
            st["attrs"] = {"alpha": float(self.pick([1.0, 0.5]))}
        elif op == "HardSigmoid":
            st["attrs"] = {"alpha": float(self.pick([0.2, 1 / 6])), "beta": 0.5}
        elif op == "Clip":
            st["min"], st["max"] = self.pick([(0.0, 6.0), (-1.0, 1.0), (0.0, None), (None, 0.5),
                                               (-0.5, 2.0)])
        elif op == "Pow":
            st["e"] = float(self.pick([2.0, 3.0, 0.5, 1.5] if self.m(x) <= _POW_MAX else [0.5]))
        return self.add(st, shape, dtype)

    def tail(self, x, shape, n):
        """A chain of element-wise steps after x: what fuses into a main op."""
        for _ in range(n):
            r = self.rng.random()
            if r < 0.45:
                x = self.binary(x, shape)
                shape = self.vals[x][0]
            elif r < 0.85:
                x = self.activation(x, shape)
            elif r < 0.92:
                k = self.pick(["swish", "hswish_paddle", "gelu"])
                st = {"k": k, "x": x, "order": self.r(2)}
                if k == "hswish_paddle":
                    st["form"] = self.r(3)
                if k == "swish" and self.r(2):
                    st["beta"] = self.pick([1.0, 0.5, 1.7])
                x = self.add(st, shape)
            else:
                ops = _BOUNDARY[self.backend]
                if self.m(x) > _PERIODIC_MAX:
                    ops = [o for o in ops if o not in ("Sin", "Cos")]
                x = self.add({"k": "act", "op": self.pick(ops), "x": x}, shape)
        return x

    def input(self, shape, dtype=FLOAT):
        name = f"in{len(self.inputs)}"
        self.inputs.append({"name": name, "shape": [int(d) for d in shape], "dtype": dtype})
        self.vals[name] = (tuple(shape), dtype)
        self.values[name] = name
        self.b.shapes[name] = tuple(shape)
        self.b.dtypes[name] = dtype
        return name

    # -- graph families --

    def conv_family(self):
        rank = self.pick([3, 4, 4, 4, 4, 5]) if self.backend == "CpuOneDnn" else self.pick([3, 4, 4])
        small = self.backend == "GpuOcl"
        c = self.pick([1, 3, 7, 13, 16] if small else [1, 3, 7, 13, 16, 17, 32])
        sp = [self.pick([1, 2, 3, 5, 7, 9]) for _ in range(rank - 2)]
        if rank == 5:
            sp = [self.pick([1, 2, 3, 4]) for _ in range(3)]
        shape = (self.pick([1, 1, 2]), c) + tuple(sp)
        x = self.input(shape)
        if self.chance(0.15) and rank >= 3:
            p = [self.r(2) for _ in range(2 * (rank - 2))]
            x = self.add({"k": "pad", "x": x, "p": p},
                         tuple(shape[:2]) + tuple(d + p[i] + p[i + rank - 2] for i, d in enumerate(shape[2:])))
            shape = self.vals[x][0]
        for _ in range(1 + self.r(3)):
            x, shape = self.conv(x, shape)
            if self.chance(0.3):
                x = self.add({"k": "bn", "x": x, "eps": 1e-5}, shape)
            x = self.tail(x, shape, self.r(5))
            shape = self.vals[x][0]
            if self.chance(0.25) and len(shape) == 4:
                x, shape = self.pool(x, shape)
            if self.chance(0.12) and len(shape) == 4:
                # To channels-last and back, element-wise work in between.
                x = self.add({"k": "transpose", "x": x, "perm": [0, 2, 3, 1]})
                x = self.tail(x, self.vals[x][0], self.r(3))
                x = self.add({"k": "transpose", "x": x, "perm": [0, 3, 1, 2]})
                shape = self.vals[x][0]
        return x

    def conv(self, x, shape):
        sp = len(shape) - 2
        c = shape[1]
        k = self.pick([1, 1, 3, 3, 5, 2])
        ks = [k if self.chance(0.8) else self.pick([1, 3]) for _ in range(sp)]
        st = [self.pick([1, 1, 1, 2]) for _ in range(sp)]
        dil = [1 if self.chance(0.85) else 2 for _ in range(sp)]
        pads = [self.r(ks[i] // 2 + 1) if self.chance(0.7) else 0 for i in range(sp)]
        pads = pads + [p if self.chance(0.8) else self.r(ks[i] // 2 + 1) for i, p in enumerate(pads)]
        group = 1
        depthwise = False
        if self.chance(0.15):
            depthwise = True
        elif self.chance(0.1):
            group = self.pick([d for d in (2, 3, 4) if c % d == 0] or [1])
        oc = self.pick([1, 3, 7, 8, 13, 16, 17, 24, 32]) if self.backend != "GpuOcl" else \
            self.pick([1, 3, 7, 8, 13, 16])
        if group > 1:
            oc = group * max(1, oc // group)
        step = {"k": "conv", "x": x, "oc": oc, "ks": ks, "st": st, "dil": dil, "pads": pads,
                "group": group, "bias": self.chance(0.7), "depthwise": depthwise}
        if self.chance(0.1):
            step["auto_pad"] = self.pick(["SAME_UPPER", "SAME_LOWER", "VALID"])
        try:
            y = self.add(step)
        except InvalidSpec:  # the window does not fit: a 1x1 one
            y = self.add({"k": "conv", "x": x, "oc": oc, "ks": [1] * sp, "st": [1] * sp,
                          "dil": [1] * sp, "pads": [0] * (2 * sp), "group": 1, "bias": True})
        return y, self.vals[y][0]

    def pool(self, x, shape):
        if self.chance(0.15):
            # An explicit Pad of zeros, then an AveragePool that counts it
            # (PyTorch's avg_pool2d(padding=1)).
            try:
                p = self.add({"k": "pad", "x": x, "p": [1, 1, 1, 1]})
                y = self.add({"k": "pool", "op": "AveragePool", "x": p, "ks": [3, 3], "st": [1, 1],
                              "pads": [0, 0, 0, 0], "ceil": 0, "cip": 1})
                return y, self.vals[y][0]
            except InvalidSpec:
                pass
        op = self.pick(["MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"])
        if op.startswith("Global"):
            out = tuple(shape[:2]) + (1,) * (len(shape) - 2)
            return self.add({"k": "gpool", "op": op, "x": x}, out), out
        ks = [min(self.pick([2, 3]), d) for d in shape[2:]]
        st = [self.pick([1, 2]) for _ in range(2)]
        pads = [self.r(k) if self.chance(0.4) else 0 for k in ks] * 2
        step = {"k": "pool", "op": op, "x": x, "ks": ks, "st": st, "pads": pads,
                "ceil": int(self.chance(0.2)), "cip": int(self.chance(0.3))}
        try:
            y = self.add(step)
        except InvalidSpec:
            return x, shape
        return y, self.vals[y][0]

    def deep_family(self):
        # Four or more convolutions, a batch of two: CpuOneDnn's blocked
        # layouts (and Winograd where the CPU has it), residual sums and
        # channel concats in blocks.
        c = self.pick([3, 8, 13, 16])
        shape = (2, c, self.pick([4, 5, 7]), self.pick([4, 6, 7]))
        x = self.input(shape)
        for i in range(4 + self.r(2)):
            oc = self.pick([8, 16, 13]) if self.backend != "GpuOcl" else self.pick([8, 5])
            k = self.pick([3, 3, 1])
            step = {"k": "conv", "x": x, "oc": oc, "ks": [k, k], "st": [1, 1], "dil": [1, 1],
                    "pads": [k // 2] * 4, "group": 1, "bias": self.chance(0.7),
                    "depthwise": self.chance(0.15)}
            y = self.add(step)
            if self.chance(0.3):
                y = self.add({"k": "bn", "x": y})
            y = self.tail(y, self.vals[y][0], self.r(3))
            ys = self.vals[y][0]
            r = self.rng.random()
            if r < 0.3 and ys == self.vals[x][0]:
                y = self.add({"k": "bin", "op": "Add", "a": y, "b": x} if self.chance(0.5) else
                             {"k": "bin", "op": "Add", "a": x, "b": y})
                y = self.tail(y, ys, self.r(2))
            elif r < 0.45 and ys[2:] == self.vals[x][0][2:]:
                y = self.add({"k": "concat", "xs": [y, x] if self.chance(0.5) else [x, y], "axis": 1})
                if self.chance(0.5):  # DenseNet: normalize the concatenation (then ReLU)
                    y = self.add({"k": "bn", "x": y})
                    if self.chance(0.7):
                        y = self.add({"k": "act", "op": "Relu", "x": y})
            x = y
        if self.chance(0.3):
            x = self.add({"k": "gpool", "op": "GlobalAveragePool", "x": x})
        return x

    def matmul_family(self):
        rank = self.pick([2, 2, 3, 4])
        m = self.pick([1, 2, 3, 5, 8])
        kk = self.pick([1, 3, 7, 13, 16, 32])
        lead = tuple(self.pick([1, 2, 3]) for _ in range(rank - 2))
        shape = lead + (m, kk)
        x = self.input(shape)
        for _ in range(1 + self.r(2)):
            n = self.pick([1, 3, 7, 13, 16, 24])
            r = self.rng.random()
            if rank == 2 and r < 0.4:
                step = {"k": "gemm", "x": x, "n": n, "transB": self.r(2),
                        "c": self.pick(["none", "n", "1n", "scalar", "mn"]),
                        "alpha": float(self.pick([1.0, 1.0, 0.5])), "beta": float(self.pick([1.0, 1.0, 2.0]))}
                shape = (shape[0], n)
            elif r < 0.8:
                step = {"k": "matmul", "x": x, "n": n}
                if len(shape) > 2 and self.chance(0.3):
                    step["wbatch"] = self.r(len(shape) - 2) + 1
                shape = tuple(shape[:-1]) + (n,)
            else:
                y = self.input(tuple(shape[:-2]) + (shape[-1], n))
                step = {"k": "matmul", "x": x, "y": y}
                shape = tuple(shape[:-1]) + (n,)
            x = self.add(step, shape)
            # Normalizing right after the main op and a bias: a row the tail
            # made (nearly) constant, such as Max(x, c) where every x < c,
            # has a variance of rounding noise, which normalizing blows up.
            if self.chance(0.3):
                x = self.binary(x, shape, ops=["Add", "Sub", "Mul"])
            if self.chance(0.2):
                try:
                    x = self.add({"k": self.pick(["lnpat", "layernorm", "softmax"]), "x": x,
                                  "affine": self.r(2), "axis": -1})
                except InvalidSpec:  # LayerNormalization before opset 17
                    pass
            x = self.tail(x, shape, self.r(4))
            shape = self.vals[x][0]
            rank = len(shape)
        return x

    def misc_family(self):
        rank = self.pick([2, 3, 4])
        shape = tuple(self.pick([1, 2, 3, 4, 5, 6, 7]) for _ in range(rank))
        x = self.input(shape)
        for _ in range(1 + self.r(5)):
            r = self.rng.random()
            rank = len(shape)
            if r < 0.15:
                perm = list(self.rng.permutation(rank))
                x = self.add({"k": "transpose", "x": x, "perm": [int(p) for p in perm]},
                             tuple(shape[p] for p in perm))
            elif r < 0.25:
                mode = self.pick(["flat", "merge_last", "split_last", "unsqueeze"])
                st = {"k": "reshape", "x": x, "mode": mode, "minus_one": self.r(2),
                      "op": self.pick(["Reshape", "Flatten"])}
                try:
                    x = self.add(st)
                except InvalidSpec:
                    continue
            elif r < 0.35:
                x = self.add({"k": "softmax", "x": x, "axis": int(self.r(rank))}, shape)
            elif r < 0.45:
                axes = sorted({int(self.r(rank)) for _ in range(1 + self.r(2))})
                keep = self.r(2) if rank > len(axes) else 1
                out = tuple(1 if i in axes else d for i, d in enumerate(shape)) if keep else \
                    tuple(d for i, d in enumerate(shape) if i not in axes)
                x = self.add({"k": "reduce", "op": self.pick(["ReduceMean", "ReduceSum", "ReduceMax"]),
                              "x": x, "axes": axes, "keep": keep}, out)
            elif r < 0.55:
                # a second branch from an earlier value, joined by Concat
                other = self.tail(x, shape, 1 + self.r(2))
                axis = int(self.r(rank))
                out = list(shape)
                out[axis] *= 2
                x = self.add({"k": "concat", "xs": [x, other] if self.chance(0.5) else [other, x],
                              "axis": axis}, out)
            elif r < 0.65:
                axis = int(self.r(rank))
                if shape[axis] >= 2:
                    st = {"k": "slice", "x": x, "axis": axis, "start": int(self.r(shape[axis])),
                          "step": self.pick([1, 1, 2]), "drop": int(self.r(2))}
                    try:
                        x = self.add(st)
                    except InvalidSpec:
                        pass
            elif r < 0.69 and rank >= 2:
                x = self.add({"k": "gather", "x": x, "axis": int(self.r(rank)),
                              "idx": [int(self.r(50)) for _ in range(1 + self.r(4))],
                              "scalar": self.chance(0.2)})
            elif r < 0.72 and rank == 4:
                f = self.pick([2, 3])
                x = self.add({"k": "resize", "x": x, "f": f, "mode": self.pick(["linear", "nearest"])},
                             (shape[0], shape[1], shape[2] * f, shape[3] * f))
            elif r < 0.78 and rank >= 2:
                c = self.const_ref(shape, allow_full=False)
                x = self.add({"k": "prelu", "x": x, "mask": c["mask"] & ~1, "lead": c["lead"]}, shape)
            else:
                x = self.tail(x, shape, 1 + self.r(3))
            shape = self.vals[x][0]
        return x

    def residual_family(self):
        # Conv -> tail, added back to its own input (or to another branch):
        # the sum post-op, with the residual from either side.
        c = self.pick([3, 7, 8, 13, 16])
        shape = (1, c, self.pick([3, 5, 6]), self.pick([4, 5, 7]))
        x0 = self.input(shape)
        x = x0
        if self.chance(0.5):
            x = self.tail(x, shape, 1)
        step = {"k": "conv", "x": x, "oc": c, "ks": [3, 3], "st": [1, 1], "dil": [1, 1],
                "pads": [1, 1, 1, 1], "group": 1, "bias": self.chance(0.5)}
        y = self.add(step, shape)
        if self.chance(0.3):
            y = self.add({"k": "bn", "x": y}, shape)
        y = self.tail(y, shape, self.r(3))
        shape_y = self.vals[y][0]
        if shape_y != shape:
            return y
        y = self.add({"k": "bin", "op": self.pick(["Add", "Add", "Sub", "Mul"]),
                      "a": y, "b": x0} if self.chance(0.5) else
                     {"k": "bin", "op": "Add", "a": x0, "b": y}, shape)
        return self.tail(y, shape, self.r(3))

    def typed_family(self):
        # Integer Max/Min, LessOrEqual and GreaterOrEqual are opset 12's.
        self.opset = self.b.opset = max(self.opset, 13)
        dtype = self.pick(["int32", "int64", "bool", "float16"])
        shape = tuple(self.pick([1, 2, 3, 5, 7]) for _ in range(self.pick([1, 2, 3])))
        x = self.input(shape, dtype)
        for _ in range(1 + self.r(3)):
            shape, dt = self.vals[x]
            if dt in ("int32", "int64"):
                r = self.rng.random()
                if r < 0.6:
                    x = self.binary(x, shape, dt)
                elif r < 0.8:
                    x = self.add({"k": "compare", "x": x, "op": self.pick(["Equal", "Less", "Greater",
                                                                           "LessOrEqual", "GreaterOrEqual"]),
                                  "y": self.const_ref(shape)}, shape, "bool")
                else:
                    x = self.add({"k": "cast", "x": x, "to": self.pick(["float32", "int64", "int32"])})
            elif dt == "bool":
                r = self.rng.random()
                if r < 0.3:
                    x = self.add({"k": "not", "x": x}, shape, "bool")
                elif r < 0.6:
                    y = self.input(shape, "bool")
                    x = self.add({"k": "compare", "x": x, "y": y, "op": self.pick(["And", "Or", "Xor",
                                                                                   "Equal"])}, shape, "bool")
                elif r < 0.8:
                    a = self.input(shape, FLOAT)
                    b = self.input(shape, FLOAT)
                    x = self.add({"k": "where", "c": x, "x": a, "y": b}, shape, FLOAT)
                else:
                    x = self.add({"k": "cast", "x": x, "to": self.pick(["float32", "int32", "int64"])})
            elif dt == "float16":
                if self.chance(0.6):
                    x = self.binary(x, shape, "float16")
                elif self.chance(0.8):
                    x = self.activation(x, shape, "float16")
                else:
                    x = self.add({"k": "cast", "x": x, "to": "float32"}, shape, FLOAT)
            else:
                x = self.tail(x, shape, 1)
        return x

    def spec_so_far(self):
        return {"seed": self.seed, "backend": self.backend, "opset": self.opset,
                "inputs": self.inputs, "steps": self.steps, "outputs": []}

    def generate(self):
        self.inputs = []
        families = [(self.conv_family, 0.4), (self.matmul_family, 0.2), (self.misc_family, 0.15),
                    (self.residual_family, 0.1), (self.deep_family, 0.15)]
        if self.backend == "GpuOcl":
            families = [(self.conv_family, 0.3), (self.matmul_family, 0.2), (self.misc_family, 0.2),
                        (self.residual_family, 0.1), (self.typed_family, 0.15),
                        (self.deep_family, 0.05)]
        fams, ps = zip(*families)
        ps = np.asarray(ps) / sum(ps)
        family = self.pick(list(fams), p=ps)
        out = family()
        spec = self.spec_so_far()
        # Symbolic where every input's first dim is the same (a batch, or a
        # MatMul's rows) and the graph can be run at other sizes of it.
        firsts = {tuple(i["shape"][:1]) for i in spec["inputs"]}
        if family in (self.conv_family, self.deep_family, self.residual_family, self.matmul_family,
                      self.misc_family) and len(firsts) == 1 and () not in firsts and self.chance(0.25):
            spec["symbolic"] = True
            # The second dim too where every input shares it (a batch of
            # sequences, whose rows a product collapses into N x T).
            seconds = {tuple(i["shape"][:2]) for i in spec["inputs"]}
            if (len(seconds) == 1 and all(len(i["shape"]) >= 3 for i in spec["inputs"])
                    and self.chance(0.5)):
                spec["symbolic"] = 2
        outputs = [out]
        # An intermediate value read outside: the chain cannot fuse past it.
        mids = [s["id"] for s in self.steps[:-1]]
        if mids and self.chance(0.2):
            outputs.append(self.pick(mids))
        spec["outputs"] = outputs
        return spec


def generate(seed, backend="CpuOneDnn", quantized=False):
    """A spec drawn from `seed`; build() of it is valid (else another
    draw from the same seed's generator). `quantized`: a QDQ graph
    (qgraphgen.py) instead of a float one."""
    make = Gen
    if quantized:
        import qgraphgen
        make = qgraphgen.QGen
    for attempt in range(20):
        g = make(seed if attempt == 0 else zlib.crc32(f"{seed}/{attempt}".encode()), backend)
        try:
            spec = g.generate()
            if all(o in spec_input_names(spec) for o in spec["outputs"]):
                continue
            return spec
        except InvalidSpec:
            continue
    raise RuntimeError(f"seed {seed}: no valid graph in 20 draws")


def describe(spec):
    """One line naming the steps (for logs)."""
    parts = []
    for st in spec["steps"]:
        name = st.get("op") or st["k"]
        if st.get("pin"):
            name += "@CpuRef"
        parts.append(name)
    return f"opset {spec['opset']}: " + " -> ".join(parts)
