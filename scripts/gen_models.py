#!/usr/bin/python3
"""Generates the end-to-end test models with seeded random weights.

For each model NAME this writes, into --out:
  NAME.onnx          exported with torch.onnx.export (opset 13, static shapes,
                     constant folding, parameters embedded)
  NAME.input.npy     a seeded input
  NAME.expected.npy  PyTorch's float32 output for that input
  NAME.stamp         hash of this script; files are regenerated when it changes

Models: resnet18, mobilenet_v2, squeezenet1_1 (torchvision, weights=None),
transformer (a BERT-style encoder defined here) and tiny_cnn (a small conv
net, fast enough to be run hundreds of times by the concurrency test).

Run with Debian's interpreter (/usr/bin/python3): it has numpy, torch,
torchvision and onnx; other interpreters on PATH may not.
"""
import argparse
import hashlib
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

OPSET = 13
ALL_MODELS = ["resnet18", "mobilenet_v2", "squeezenet1_1", "transformer", "tiny_cnn"]


def _script_hash():
    with open(os.path.abspath(__file__), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# --------------------------------------------------------------------------
# BatchNorm: non-trivial, seeded statistics that keep activations O(1)
# --------------------------------------------------------------------------

def randomize_batchnorm(model, input_shape, seed):
    """Gives every BatchNorm random affine parameters and running statistics.

    Purely random running stats make deep nets explode or vanish, so the
    statistics are first measured on seeded random data (cumulative average)
    and then perturbed by seeded random factors: BN still changes the result
    substantially (a wrong BN implementation fails the comparison), but the
    activations stay in a range where float32 comparisons are meaningful.
    """
    g = torch.Generator().manual_seed(seed)
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    with torch.no_grad():
        for bn in bns:
            c = bn.num_features
            bn.weight.copy_(0.5 + torch.rand(c, generator=g))          # [0.5, 1.5)
            bn.bias.copy_(0.2 * torch.randn(c, generator=g))
            bn.reset_running_stats()
            bn.momentum = None  # cumulative moving average
        model.train()
        for _ in range(4):
            model(torch.randn(*input_shape, generator=g))
        for bn in bns:
            c = bn.num_features
            bn.running_mean.add_(0.1 * torch.randn(c, generator=g))
            bn.running_var.mul_(0.75 + 0.5 * torch.rand(c, generator=g))  # [0.75, 1.25)
            bn.momentum = 0.1
    model.eval()


# --------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------

def build_torchvision(name):
    import torchvision
    torch.manual_seed(0)
    ctor = getattr(torchvision.models, name)
    model = ctor(weights=None)
    randomize_batchnorm(model, (8, 3, 224, 224), seed=1)
    model.eval()
    return model


class EncoderLayer(nn.Module):
    """Post-norm BERT layer with explicit attention math (no fused op)."""

    def __init__(self, hidden, heads, ffn):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.q = nn.Linear(hidden, hidden)
        self.k = nn.Linear(hidden, hidden)
        self.v = nn.Linear(hidden, hidden)
        self.o = nn.Linear(hidden, hidden)
        self.ln1 = nn.LayerNorm(hidden, eps=1e-12)
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)
        self.ln2 = nn.LayerNorm(hidden, eps=1e-12)

    def split(self, x, b, s):
        return x.reshape(b, s, self.heads, self.head_dim).transpose(1, 2)  # [b, h, s, d]

    def forward(self, x):
        b, s, hdim = x.shape
        q = self.split(self.q(x), b, s)
        k = self.split(self.k(x), b, s)
        v = self.split(self.v(x), b, s)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        probs = torch.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, hdim)
        x = self.ln1(x + self.o(ctx))
        h = self.fc2(F.gelu(self.fc1(x)))
        return self.ln2(x + h)


class Transformer(nn.Module):
    def __init__(self, vocab=1000, hidden=128, heads=4, layers=2, seq=32, ffn=512):
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Parameter(torch.randn(seq, hidden) * 0.02)
        self.ln = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList([EncoderLayer(hidden, heads, ffn) for _ in range(layers)])

    def forward(self, input_ids):
        x = self.tok(input_ids) + self.pos  # Gather + broadcast Add
        x = self.ln(x)
        for layer in self.layers:
            x = layer(x)
        return x


def build_transformer():
    torch.manual_seed(0)
    model = Transformer()
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        # Non-trivial LayerNorm affine parameters, as BN above.
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.copy_(0.5 + torch.rand(m.weight.shape, generator=g))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))
    model.eval()
    return model


class TinyCNN(nn.Module):
    """A 10-class classifier on 1x3x32x32 that returns logits.

    bn1 follows a ReLU, so the exporter cannot fold it into the conv and the
    model keeps a real BatchNormalization node; bn2 follows its conv and is
    folded. conv3 is grouped.
    """

    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1, stride=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.conv3 = nn.Conv2d(32, 32, 3, padding=1, groups=4)
        self.fc = nn.Linear(32, classes)

    def forward(self, x):
        x = F.max_pool2d(self.bn1(F.relu(self.conv1(x))), 2)
        x = F.avg_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        x = F.relu(self.conv3(x))
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x)


def build_tiny_cnn():
    torch.manual_seed(0)
    model = TinyCNN()
    with torch.no_grad():
        model.fc.weight.mul_(4.0)  # spread the logits
    randomize_batchnorm(model, (8, 3, 32, 32), seed=3)
    model.eval()
    return model


def make_input(name):
    rng = np.random.default_rng(12345)
    if name == "transformer":
        return rng.integers(0, 1000, size=(1, 32), dtype=np.int64), "input_ids", "last_hidden_state"
    if name == "tiny_cnn":
        return rng.standard_normal((1, 3, 32, 32)).astype(np.float32), "input", "output"
    return rng.standard_normal((1, 3, 224, 224)).astype(np.float32), "input", "output"


def build(name):
    if name == "transformer":
        return build_transformer()
    if name == "tiny_cnn":
        return build_tiny_cnn()
    return build_torchvision(name)


def generate(name, out_dir, stamp):
    onnx_path = os.path.join(out_dir, name + ".onnx")
    input_path = os.path.join(out_dir, name + ".input.npy")
    expected_path = os.path.join(out_dir, name + ".expected.npy")
    stamp_path = os.path.join(out_dir, name + ".stamp")
    paths = (onnx_path, input_path, expected_path, stamp_path)
    if all(os.path.exists(p) for p in paths):
        with open(stamp_path) as f:
            if f.read().strip() == stamp:
                print(f"gen_models: {name}: up to date")
                return

    model = build(name)
    x, in_name, out_name = make_input(name)
    xt = torch.from_numpy(x)
    with torch.no_grad():
        y = model(xt).float().numpy()
    if not np.all(np.isfinite(y)):
        raise RuntimeError(f"{name}: non-finite reference output")

    tmp = onnx_path + ".tmp"
    torch.onnx.export(model, (xt,), tmp, export_params=True, opset_version=OPSET,
                      do_constant_folding=True, input_names=[in_name],
                      output_names=[out_name], dynamic_axes=None)
    import onnx
    onnx.checker.check_model(onnx.load(tmp))
    os.replace(tmp, onnx_path)
    np.save(input_path, x)
    np.save(expected_path, y.astype(np.float32))
    with open(stamp_path, "w") as f:
        f.write(stamp + "\n")
    print(f"gen_models: {name}: wrote {onnx_path} (output {out_name} {list(y.shape)}, "
          f"max|y| {float(np.abs(y).max()):.4g})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--models", nargs="*", default=ALL_MODELS,
                    help="models to generate (default: all); comma- or space-separated")
    args = ap.parse_args()
    names = [n for item in args.models for n in item.split(",") if n]
    for n in names:
        if n not in ALL_MODELS:
            ap.error(f"unknown model '{n}' (known: {', '.join(ALL_MODELS)})")
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    stamp = _script_hash()
    for n in names:
        generate(n, args.out, stamp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
