#!/usr/bin/python3
"""The models of `make bench`, generated at bench time, and their FLOP counts.

A benchmark model is either a name of CATALOG (a torchvision 0.14 model with
seeded random weights, exported to ONNX here; one of the models of
scripts/gen_models.py; a detector of scripts/gen_zoo.py at its own image
size, its heads calibrated as the zoo does so that it finds objects; or a
recurrent model built here) or the path of any .onnx file a user brings, for which
a seeded random input is made from the model's first input (symbolic dims
become 1). Each gives MODELS_DIR/NAME.onnx and MODELS_DIR/NAME.input.npy, the
files bench/backplane_bench.cpp and bench/ort_runner.js read.

flops(path) counts the multiply-adds of the model's Conv, ConvTranspose,
MatMul and Gemm nodes and of LSTM/GRU/RNN gates (x2) from ONNX shape inference: the work a matrix unit
does, which the benchmark divides by the latency and compares with the
machine's sgemm rate. Element-wise work, pooling and normalisation are not
counted (they are memory-bound and small in FLOPs); a model whose shapes
cannot be inferred gets None.

quantize(name, onnx_path, out_dir, cli) makes the int8 model of the int8
table (bench/int8_bench.py) from a float one with scripts/quantize_qdq.py:
static QDQ calibrated on a few seeded inputs, or dynamic for the encoder
(QUANTIZED), cached like the float models.
"""
import hashlib
import importlib.util
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OPSET = 17  # LayerNormalization (ConvNeXt, ViT, Swin) is an ONNX op from 17


def _gen_models():
    spec = importlib.util.spec_from_file_location("gen_models", os.path.join(ROOT, "scripts", "gen_models.py"))
    gm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gm)
    return gm


class Entry:
    """One catalog model: family (for the table), torchvision constructor
    (None: scripts/gen_models.py builds it, unless `zoo` or `build` says
    otherwise), input shape, constructor arguments, and whether the output
    is a segmentation dict's "out". zoo: the scripts/gen_zoo.py model made
    at `shape`; build: a function returning the torch module."""

    def __init__(self, family, ctor, shape=(1, 3, 224, 224), kwargs=None, seg=False, zoo=None, build=None):
        self.family, self.ctor, self.shape, self.kwargs, self.seg = family, ctor, shape, kwargs or {}, seg
        self.zoo, self.build = zoo, build


def _tagger(kind):
    """A sequence tagger: a 2-layer bidirectional LSTM or GRU (128 in, 256
    hidden) and a linear layer over every step, as speech and text models
    have."""
    def build():
        import torch

        class Tagger(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.rnn = getattr(torch.nn, kind)(128, 256, num_layers=2, bidirectional=True)
                self.head = torch.nn.Linear(512, 32)

            def forward(self, x):
                return self.head(self.rnn(x)[0])
        return Tagger()
    return build


# The default set covers the families users bring: residual, SE (RegNet-Y,
# EfficientNet, MobileNetV3), depthwise, dense, channel shuffle, inception,
# plain VGG, ConvNeXt, attention (ViT, Swin, the BERT-style encoder),
# segmentation at 320x320, video, detection heads (RoIAlign, NMS),
# recurrent taggers and a batch of 4.
CATALOG = {
    "resnet18": Entry("ResNet", None),
    "resnet50": Entry("ResNet", None),
    "resnet50_b4": Entry("ResNet, batch 4", "resnet50", (4, 3, 224, 224)),
    "resnext50_32x4d": Entry("ResNeXt", "resnext50_32x4d"),
    "mobilenet_v2": Entry("MobileNetV2", None),
    "mobilenet_v3_large": Entry("MobileNetV3 (SE, HardSwish)", "mobilenet_v3_large"),
    "squeezenet1_1": Entry("SqueezeNet", None),
    "regnet_y_800mf": Entry("RegNetY (SE)", "regnet_y_800mf"),
    "efficientnet_b0": Entry("EfficientNet (SE, SiLU)", "efficientnet_b0"),
    "efficientnet_v2_s": Entry("EfficientNetV2", "efficientnet_v2_s"),
    "densenet121": Entry("DenseNet", "densenet121"),
    "shufflenet_v2_x1_0": Entry("ShuffleNetV2", "shufflenet_v2_x1_0"),
    "inception_v3": Entry("Inception", "inception_v3", (1, 3, 299, 299), {"aux_logits": False, "init_weights": True}),
    "googlenet": Entry("Inception (GoogLeNet)", "googlenet", kwargs={"aux_logits": False, "init_weights": True}),
    "vgg16": Entry("VGG", "vgg16"),
    "convnext_tiny": Entry("ConvNeXt", "convnext_tiny"),
    "vit_b_16": Entry("ViT", "vit_b_16"),
    "swin_t": Entry("Swin", "swin_t"),
    "maxvit_t": Entry("MaxViT (einsum attention)", "maxvit_t"),
    "deeplabv3_mobilenet_v3_large": Entry("segmentation 320x320", "deeplabv3_mobilenet_v3_large", (1, 3, 320, 320),
                                          {"aux_loss": False, "weights_backbone": None}, seg=True),
    "r3d_18": Entry("video (3D conv), 8x112x112", "r3d_18", (1, 3, 8, 112, 112)),
    "transformer": Entry("BERT-style encoder", None),
    "ssdlite320": Entry("detection (SSDlite, NMS) 320x320", None, (3, 320, 320),
                        zoo="ssdlite320_mobilenet_v3_large"),
    "fasterrcnn_mobilenet_320": Entry("detection (Faster R-CNN, RoIAlign) 320x320", None, (3, 320, 320),
                                      zoo="fasterrcnn_mobilenet_v3_large_320_fpn"),
    "lstm_tagger": Entry("LSTM, 2 bidirectional layers, 100 steps", None, (100, 1, 128), build=_tagger("LSTM")),
    "gru_tagger": Entry("GRU, 2 bidirectional layers, 100 steps", None, (100, 1, 128), build=_tagger("GRU")),
}
DEFAULT = list(CATALOG)


def family(name):
    return CATALOG[name].family if name in CATALOG else "user model"


# Bump when the generation below changes what a catalog model's files hold.
# 2: batch-norm statistics calibrated (gen_models.randomize_batchnorm),
# zero-initialised layers randomised, float32 conditioning checked.
GENERATION = 2


def _stamp(name):
    """What a generated model depends on: its entry, the opset, this file's
    generation, and the library versions that build and export it."""
    import torch
    import torchvision
    e = CATALOG[name]
    key = f"{name}|{e.ctor}|{e.shape}|{sorted(e.kwargs.items())}|{e.seg}|{e.zoo}|{OPSET}|{GENERATION}|" \
          f"{torch.__version__}|{torchvision.__version__}"
    if e.zoo:
        key += "|" + _gen_zoo()._stamp()
    if e.build:
        key += "|" + hashlib.sha256(open(__file__, "rb").read()).hexdigest()
    return hashlib.sha256(key.encode()).hexdigest()


def _up_to_date(paths, stamp_path, stamp):
    if not all(os.path.exists(p) for p in paths + [stamp_path]):
        return False
    with open(stamp_path) as f:
        return f.read().strip() == stamp


def _gen_zoo():
    spec = importlib.util.spec_from_file_location("gen_zoo", os.path.join(ROOT, "scripts", "gen_zoo.py"))
    gz = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gz)
    return gz


def _generate_zoo(name, entry, out_dir, onnx_path, input_path):
    """gen_zoo.py's model entry.zoo with its one image input at entry.shape,
    written as NAME.onnx and NAME.input.npy."""
    gz = _gen_zoo()
    spec = dict(gz.MODELS[entry.zoo])
    if len(spec["inputs"]) != 1:
        raise RuntimeError(f"bench_models: {name}: the benchmark feeds one input; zoo model "
                           f"{entry.zoo} has {len(spec['inputs'])}")
    spec["name"] = name
    spec["inputs"] = [(spec["inputs"][0][0], tuple(entry.shape))]
    import torch
    torch.set_num_threads(1)
    gz.generate(spec, out_dir, True, gz._stamp())
    os.replace(os.path.join(out_dir, f"{name}.input.{spec['inputs'][0][0]}.npy"), input_path)
    print(f"bench_models: {name}: wrote {onnx_path} (gen_zoo.py's {entry.zoo})", file=sys.stderr)


def _build_torchvision(entry):
    import torch
    import torchvision
    gm = _gen_models()
    torch.manual_seed(0)
    builder = torchvision.models.video if entry.ctor.startswith("r3d") else (
        torchvision.models.segmentation if entry.seg else torchvision.models)
    model = getattr(builder, entry.ctor)(weights=None, **entry.kwargs)
    calib = (2,) + tuple(entry.shape[1:])
    _randomize_zero_layers(model, seed=3)
    gm.randomize_batchnorm(model, calib, seed=1, calibrated=True)
    gm.randomize_layernorm(model, seed=2)
    model.eval()
    if entry.seg:
        class Out(torch.nn.Module):  # the dict's "out" (ONNX has one output)
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, x):
                return self.m(x)["out"]
        model = Out(model).eval()
    return model


def _randomize_zero_layers(model, seed):
    """Seeded random weights for the layers torchvision initialises to zero
    (ViT's classification head): a zero layer makes every runtime's output
    equal whatever the layers before it compute, and the comparison vacuous."""
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d)) and not m.weight.any():
                fan_in = m.weight[0].numel()
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) / fan_in ** 0.5)


def _check_conditioning(name, model, x, y):
    """Raises if float32 rounding alone moves the seeded model's output by
    more than 1e-3 of its scale (float64 against float32 PyTorch): on such a
    model two correct runtimes differ by as much, and the benchmark's
    accuracy column would accuse neither or both."""
    import copy
    import torch
    with torch.no_grad():
        y64 = copy.deepcopy(model).double()(torch.from_numpy(x).double())
    err = float((y.double() - y64).abs().max() / y64.abs().max().clamp_min(1e-30))
    if err > 1e-3:
        raise RuntimeError(f"bench_models: {name}: the seeded model is ill-conditioned in float32 "
                           f"(PyTorch float32 is {err:.1e} of the output's scale from float64)")


def generate(name, out_dir):
    """Writes out_dir/NAME.onnx and NAME.input.npy for a catalog model
    (cached by a stamp of this file and gen_models.py)."""
    entry = CATALOG[name]
    os.makedirs(out_dir, exist_ok=True)
    onnx_path = os.path.join(out_dir, name + ".onnx")
    input_path = os.path.join(out_dir, name + ".input.npy")
    if entry.ctor is None and not entry.zoo and not entry.build:  # one of gen_models.py's, as the tests export it
        gm = _gen_models()
        gm.generate(name, out_dir, gm._script_hash())
        return onnx_path, input_path
    stamp_path = os.path.join(out_dir, name + ".bench.stamp")
    stamp = _stamp(name)
    if _up_to_date([onnx_path, input_path], stamp_path, stamp):
        return onnx_path, input_path
    if entry.zoo:
        _generate_zoo(name, entry, out_dir, onnx_path, input_path)
        with open(stamp_path, "w") as f:
            f.write(stamp + "\n")
        return onnx_path, input_path
    import torch
    torch.set_num_threads(1)
    if entry.build:
        torch.manual_seed(0)
        model = entry.build().eval()
    else:
        model = _build_torchvision(entry)
    x = np.random.default_rng(12345).standard_normal(entry.shape).astype(np.float32)
    with torch.no_grad():
        y = model(torch.from_numpy(x))
    if not torch.isfinite(y).all():
        raise RuntimeError(f"bench_models: {name}: non-finite output from the seeded model")
    _check_conditioning(name, model, x, y)
    tmp = onnx_path + ".tmp"
    torch.onnx.export(model, (torch.from_numpy(x),), tmp, export_params=True, opset_version=OPSET,
                      do_constant_folding=True, input_names=["input"], output_names=["output"])
    os.replace(tmp, onnx_path)
    np.save(input_path, x)
    with open(stamp_path, "w") as f:
        f.write(stamp + "\n")
    print(f"bench_models: {name}: wrote {onnx_path}", file=sys.stderr)
    return onnx_path, input_path


def user_model(path, out_dir):
    """A user's .onnx file: (its path, a seeded input for its first graph
    input written to out_dir). Symbolic dims become 1; integer inputs get
    small values (token ids, indices)."""
    import onnx
    from onnx import TensorProto
    model = onnx.load(path, load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    if not inputs:
        raise SystemExit(f"bench: {path}: the model has no input")
    if len(inputs) > 1:
        raise SystemExit(f"bench: {path}: the benchmark feeds one input; this model has {len(inputs)} "
                         f"({', '.join(i.name for i in inputs)})")
    t = inputs[0].type.tensor_type
    shape = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in t.shape.dim)
    rng = np.random.default_rng(12345)
    if t.elem_type == TensorProto.FLOAT:
        x = rng.standard_normal(shape).astype(np.float32)
    elif t.elem_type == TensorProto.INT64:
        x = rng.integers(0, 100, size=shape, dtype=np.int64)
    else:
        raise SystemExit(f"bench: {path}: input '{inputs[0].name}' has element type "
                         f"{TensorProto.DataType.Name(t.elem_type)}; the benchmark feeds float32 or int64")
    os.makedirs(out_dir, exist_ok=True)
    stem = os.path.splitext(os.path.basename(path))[0]
    input_path = os.path.join(out_dir, stem + ".user.input.npy")
    np.save(input_path, x)
    return os.path.abspath(path), input_path


# The int8 table's models and how scripts/quantize_qdq.py quantizes each:
# static QDQ (per-channel int8 weights, per-tensor uint8 activations,
# calibrated) as ONNX Runtime's quantize_static writes it, or dynamic
# (DynamicQuantizeLinear + MatMulInteger) as its quantize_dynamic does for
# transformer encoders. Other models are quantized statically unless named
# NAME:dynamic.
QUANTIZED = {"resnet50": "static", "mobilenet_v2": "static", "efficientnet_b0": "static",
             "transformer": "dynamic"}
QUANTIZE_SAMPLES = 4  # calibration inputs: enough for ranges of seeded random data
QUANTIZE_SEED = 0


def _file_hash(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def quantize(name, onnx_path, out_dir, cli, mode="static"):
    """out_dir/NAME.qdq.onnx (static) or NAME.dynamic.onnx: the float model at
    `onnx_path` quantized by scripts/quantize_qdq.py, calibrated through
    Backplane (`cli`, or the Python module of its build, in process). Cached
    by a stamp of the float model's bytes, the script's and the options: made
    again when any changes, not when only Backplane's build does (its float
    ranges move by rounding at most). Symbolic input dims calibrate at 1."""
    import onnx
    script = os.path.join(ROOT, "scripts", "quantize_qdq.py")
    out_path = os.path.join(out_dir, f"{name}.{'dynamic' if mode == 'dynamic' else 'qdq'}.onnx")
    stamp_path = out_path + ".stamp"
    argv = ["--dynamic"] if mode == "dynamic" else \
        ["--samples", str(QUANTIZE_SAMPLES), "--seed", str(QUANTIZE_SEED)]
    model = onnx.load(onnx_path, load_external_data=False)
    dims = sorted({d.dim_param for i in model.graph.input for d in i.type.tensor_type.shape.dim
                   if d.dim_param})
    argv += [a for d in dims for a in ("--shape", f"{d}=1")]
    stamp = hashlib.sha256(f"{_file_hash(onnx_path)}|{_file_hash(script)}|{argv}".encode()).hexdigest()
    if _up_to_date([out_path], stamp_path, stamp):
        return out_path
    tmp = out_path + ".tmp.onnx"
    proc = subprocess.run([sys.executable, script, onnx_path, tmp, "--backplane", cli] + argv,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"bench_models: {name}: scripts/quantize_qdq.py failed:\n"
                           f"{proc.stdout}{proc.stderr}")
    os.replace(tmp, out_path)
    with open(stamp_path, "w") as f:
        f.write(stamp + "\n")
    for line in proc.stdout.splitlines():
        print(f"bench_models: {name}: {line.replace(tmp, out_path)}", file=sys.stderr)
    return out_path


def flops(path):
    """2 x multiply-adds of Conv/ConvTranspose/MatMul/Gemm and of the gate
    products of LSTM/GRU/RNN, or None when a shape is unknown."""
    import onnx
    model = onnx.shape_inference.infer_shapes(onnx.load(path))
    shapes = {}
    for v in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
        if not v.type.tensor_type.HasField("shape"):
            continue  # rank unknown
        dims = v.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            shapes[v.name] = [d.dim_value for d in dims]
    for i in model.graph.initializer:
        shapes[i.name] = list(i.dims)

    def shape(name):
        if name not in shapes:
            raise KeyError(name)
        return shapes[name]

    total = 0
    try:
        for n in model.graph.node:
            if n.op_type == "Conv":
                w, y = shape(n.input[1]), shape(n.output[0])
                total += int(np.prod(y)) * int(np.prod(w[1:]))
            elif n.op_type == "ConvTranspose":
                x, w = shape(n.input[0]), shape(n.input[1])
                total += int(np.prod(x)) * int(np.prod(w[1:]))
            elif n.op_type == "MatMul":
                a, y = shape(n.input[0]), shape(n.output[0])
                if not a:
                    raise KeyError(n.input[0])
                total += int(np.prod(y)) * a[-1]
            elif n.op_type in ("LSTM", "GRU", "RNN"):
                x, w, r = shape(n.input[0]), shape(n.input[1]), shape(n.input[2])
                total += x[0] * x[1] * (int(np.prod(w)) + int(np.prod(r)))
            elif n.op_type == "Gemm":
                a, y = shape(n.input[0]), shape(n.output[0])
                trans_a = any(at.name == "transA" and at.i for at in n.attribute)
                total += int(np.prod(y)) * (a[0] if trans_a else a[1])
    except KeyError:
        return None
    return 2 * total


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "bench", "models")
    for n in (sys.argv[2].split(",") if len(sys.argv) > 2 else DEFAULT):
        p, _ = generate(n, out)
        f = flops(p)
        print(f"{n}: {f / 1e9:.2f} GFLOP" if f else f"{n}: FLOPs unknown")
