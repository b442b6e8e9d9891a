#!/usr/bin/python3
"""Generates the end-to-end test models with seeded random weights.

For each model NAME this writes, into --out:
  NAME.onnx          exported with torch.onnx.export (opset 13, constant
                     folding, parameters embedded; static shapes except the
                     symbolic dims of the dynamic-shape models below)
  NAME.input.npy     a seeded input
  NAME.expected.npy  PyTorch's float32 output for that input
  NAME.stamp         hash of this script; files are regenerated when it changes
A model with several inputs or outputs (decoder_kv) has one file per input
and per output instead: NAME.input.INPUT.npy, NAME.expected.OUTPUT.npy.

Models: resnet18, mobilenet_v2, squeezenet1_1 (torchvision, weights=None),
transformer (a BERT-style encoder defined here) and tiny_cnn (a small conv
net, fast enough to be run hundreds of times by the concurrency test).
Dynamic-shape models (issue 13; scripts/torch_reference.py writes their
references at other shapes, from the same modules):
  encoder_dyn  BERT-style encoder, input_ids int64 [batch, seq] ->
               last_hidden_state [batch, seq, 64]; position ids built in the
               graph from seq. Example: batch 3, seq 24.
  decoder_kv   GPT-style decoder with a key/value cache: input_ids [1, new],
               past_key_L / past_value_L [1, 4, past, 16] (L = 0, 1; past may
               be 0) -> logits [1, new, 512], present_key_L / present_value_L
               [1, 4, total, 16] (total = past + new). Example: 3 new tokens
               after a 5-token cache the model computed itself.

Recurrent models (issue 12; generate_recurrent, opset 17, seeded
torch.nn.LSTM/GRU/RNN modules): lstm_bidir2, gru_bidir2 (batch_first),
rnn_bidir2 (bidirectional, 2 layers), rnn_relu, lstm_classifier (an LSTM
with a linear head on the last step).

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
ALL_MODELS = ["resnet18", "mobilenet_v2", "squeezenet1_1", "transformer", "tiny_cnn",
              "encoder_dyn", "decoder_kv", "block_attention"]


def _script_hash():
    with open(os.path.abspath(__file__), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# --------------------------------------------------------------------------
# BatchNorm: non-trivial, seeded statistics that keep activations O(1)
# --------------------------------------------------------------------------

def randomize_batchnorm(model, input_shape, seed, calibrated=False):
    """Gives every BatchNorm random affine parameters and running statistics.

    Purely random running stats make deep nets explode or vanish, so the
    statistics are first measured on seeded random data (cumulative average)
    and then perturbed by seeded random factors: BN still changes the result
    substantially (a wrong BN implementation fails the comparison), but the
    activations stay in a range where float32 comparisons are meaningful.

    calibrated: measure with every other module in eval mode (in train mode
    stochastic depth, in EfficientNet, ConvNeXt and Swin, drops whole residual
    branches, so statistics measured that way are not what the eval-mode model
    sees), and shift each mean by a fraction of that channel's measured
    spread, not by an absolute 0.1: a channel of small spread shifted by 0.1
    leaves the range, and through EfficientNetV2's 40 residual blocks the
    output grows to 1e5, where float32 rounding alone moves it by 30%.
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
        if calibrated:
            for m in model.modules():
                if not isinstance(m, nn.modules.batchnorm._BatchNorm):
                    m.training = False
        for _ in range(4):
            model(torch.randn(*input_shape, generator=g))
        for bn in bns:
            c = bn.num_features
            spread = bn.running_var.sqrt() if calibrated else 1.0
            bn.running_mean.add_(0.1 * spread * torch.randn(c, generator=g))
            bn.running_var.mul_(0.75 + 0.5 * torch.rand(c, generator=g))  # [0.75, 1.25)
            bn.momentum = 0.1
    model.eval()


def randomize_layernorm(model, seed):
    """Non-trivial LayerNorm affine parameters, as BN above (a LayerNorm that
    ignored them would otherwise still match)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.copy_(0.5 + torch.rand(m.weight.shape, generator=g))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))


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
    randomize_layernorm(model, seed=2)
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


class BlockAttention(nn.Module):
    """Attention within windows written with torch.einsum, as torchvision's
    MaxViT writes it ("bghid,bghjd->bghij", then "bghij,bghjd->bghid"): x
    [batch, windows, tokens, dim]. Exported, each einsum is an Einsum node."""

    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        b, g, n, d = x.shape
        qkv = self.qkv(self.norm(x)).reshape(b, g, n, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(3, 0, 1, 4, 2, 5).unbind(0)
        a = torch.einsum("bghid,bghjd->bghij", q, k).mul(q.shape[-1] ** -0.5).softmax(-1)
        y = torch.einsum("bghij,bghjd->bghid", a, v)
        return x + self.proj(y.permute(0, 1, 3, 2, 4).reshape(b, g, n, d))


def build_block_attention():
    torch.manual_seed(5)
    return nn.Sequential(BlockAttention(), BlockAttention()).eval()


# --------------------------------------------------------------------------
# Dynamic-shape models (issue 13): exported with symbolic dims, so one
# loaded model must serve every batch size, sequence length and cache length.
# --------------------------------------------------------------------------

class EncoderDyn(nn.Module):
    """BERT-style encoder over input_ids [batch, seq], both dims symbolic.

    Position ids are arange(seq) built inside the graph from the input's
    shape (Shape -> Gather -> Range -> Gather in the export), not a [seq,
    hidden] parameter as in `Transformer`, so nothing ties the graph to one
    length. The layers are `EncoderLayer`, whose reshapes take b and s from
    the activations' shape (Shape/Gather/Concat -> Reshape).
    """

    def __init__(self, vocab=1000, hidden=64, heads=4, layers=2, ffn=256, max_pos=512):
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(max_pos, hidden)
        self.ln = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList([EncoderLayer(hidden, heads, ffn) for _ in range(layers)])

    def forward(self, input_ids):
        pos_ids = torch.arange(input_ids.shape[1], dtype=torch.int64, device=input_ids.device)
        x = self.ln(self.tok(input_ids) + self.pos(pos_ids))  # [b, s, h] + [s, h]
        for layer in self.layers:
            x = layer(x)
        return x


ENCODER_DYN = dict(vocab=1000, hidden=64, heads=4, layers=2, ffn=256, max_pos=512)


def build_encoder_dyn():
    torch.manual_seed(4)
    model = EncoderDyn(**ENCODER_DYN)
    randomize_layernorm(model, seed=5)
    model.eval()
    return model


class DecoderLayer(nn.Module):
    """Pre-norm GPT layer whose attention reads and extends a key/value cache.

    k/v of the new tokens are concatenated after the cache along the sequence
    axis; the result is both what attention reads and the layer's `present`
    output, so a caller feeds it back as the next call's `past`.
    """

    def __init__(self, hidden, heads, ffn):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.ln1 = nn.LayerNorm(hidden, eps=1e-5)
        # Separate projections, not one fused qkv Linear + split: the export
        # of split is a Split node, which CpuOneDnn does not run, and every
        # layer's attention would then be cut into several partitions.
        self.q = nn.Linear(hidden, hidden)
        self.k = nn.Linear(hidden, hidden)
        self.v = nn.Linear(hidden, hidden)
        self.o = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden, eps=1e-5)
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)

    def forward(self, x, past_k, past_v, mask_bias):
        b, n, hdim = x.shape
        h = self.ln1(x)
        q, k, v = (t.reshape(b, n, self.heads, self.head_dim).transpose(1, 2)
                   for t in (self.q(h), self.k(h), self.v(h)))
        k = torch.cat([past_k, k], dim=2)  # [b, heads, past + new, head_dim]
        v = torch.cat([past_v, v], dim=2)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + mask_bias
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
        x = x + self.o(ctx.transpose(1, 2).reshape(b, n, hdim))
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return x, k, v


class DecoderKV(nn.Module):
    """GPT-style decoder for token-by-token generation with a KV cache.

    forward(input_ids [1, new], past_key_0, past_value_0, past_key_1, ...)
    -> (logits [1, new, vocab], present_key_0, present_value_0, ...), where
    past_* are [1, heads, past, head_dim] (past may be 0: the prompt call)
    and present_* are [1, heads, past + new, head_dim].

    The new tokens sit at absolute positions past + arange(new), computed in
    the graph from the cache's shape. Causal mask: query i (at past + i) sees
    key j iff j <= past + i, built with Range and Greater on positions, so
    the same graph is right for a prompt (new > 1, past = 0), a single-token
    step (new = 1) and a chunk after a cache (new > 1, past > 0). The mask
    is added to the scores (0 or -1e9) rather than applied with
    masked_fill: that exports as Where, which CpuOneDnn does not run, while
    the additive mask depends on shapes only, so for given shapes it is a
    constant (or a partition input) and the attention stays one partition.
    -1e9, not -inf: a fully masked row (none here: key 0 is always visible)
    would give NaN with -inf.
    """

    def __init__(self, vocab=512, hidden=64, heads=4, layers=2, ffn=256, max_pos=512):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.num_layers = layers
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(max_pos, hidden)
        self.layers = nn.ModuleList([DecoderLayer(hidden, heads, ffn) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(hidden, eps=1e-5)
        self.head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, input_ids, *past):
        new = input_ids.shape[1]
        past_len = past[0].shape[2]
        q_pos = torch.arange(new, dtype=torch.int64, device=input_ids.device) + past_len
        k_pos = torch.arange(past_len + new, dtype=torch.int64, device=input_ids.device)
        masked = k_pos.unsqueeze(0) > q_pos.unsqueeze(1)  # [new, total], broadcast over b, heads
        mask_bias = masked.to(torch.float32) * -1e9
        x = self.tok(input_ids) + self.pos(q_pos)
        present = []
        for i, layer in enumerate(self.layers):
            x, k, v = layer(x, past[2 * i], past[2 * i + 1], mask_bias)
            present += [k, v]
        return (self.head(self.ln_f(x)), *present)

    def input_names(self):
        return ["input_ids"] + [f"past_{kv}_{i}" for i in range(self.num_layers) for kv in ("key", "value")]

    def output_names(self):
        return ["logits"] + [f"present_{kv}_{i}" for i in range(self.num_layers) for kv in ("key", "value")]

    def empty_past(self, batch=1):
        return [torch.zeros(batch, self.heads, 0, self.head_dim) for _ in range(2 * self.num_layers)]


DECODER_KV = dict(vocab=512, hidden=64, heads=4, layers=2, ffn=256, max_pos=512)


def build_decoder_kv():
    torch.manual_seed(6)
    model = DecoderKV(**DECODER_KV)
    randomize_layernorm(model, seed=7)
    with torch.no_grad():
        model.head.weight.mul_(4.0)  # spread the logits: greedy choices are not near-ties
    model.eval()
    return model


def make_input(name):
    """The seeded example of `name`: (inputs as [(name, array)], output names).

    Dynamic-shape models are exported with this example too (the tracer needs
    one), at sizes that differ from each other and from every fixed dim, so
    no exporter heuristic can mistake a symbolic dim for a fixed one.
    """
    rng = np.random.default_rng(12345)
    if name == "transformer":
        return [("input_ids", rng.integers(0, 1000, size=(1, 32), dtype=np.int64))], ["last_hidden_state"]
    if name == "encoder_dyn":
        ids = rng.integers(0, ENCODER_DYN["vocab"], size=(3, 24), dtype=np.int64)
        return [("input_ids", ids)], ["last_hidden_state"]
    if name == "decoder_kv":
        return decoder_kv_example(rng), DecoderKV(**DECODER_KV).output_names()
    if name == "tiny_cnn":
        return [("input", rng.standard_normal((1, 3, 32, 32)).astype(np.float32))], ["output"]
    if name == "block_attention":
        return [("input", rng.standard_normal((2, 16, 49, 32)).astype(np.float32))], ["output"]
    return [("input", rng.standard_normal((1, 3, 224, 224)).astype(np.float32))], ["output"]


def decoder_kv_example(rng, past_len=5, new=3):
    """input_ids of `new` tokens after a cache of `past_len` that the model
    itself computed from a seeded prompt: the hardest case for the mask
    (past > 0 and new > 1), with realistic cache contents."""
    model = build_decoder_kv()
    vocab = DECODER_KV["vocab"]
    prompt = torch.from_numpy(rng.integers(0, vocab, size=(1, past_len), dtype=np.int64))
    with torch.no_grad():
        past = model(prompt, *model.empty_past())[1:]
    ids = rng.integers(0, vocab, size=(1, new), dtype=np.int64)
    return [("input_ids", ids)] + [(n, t.numpy()) for n, t in zip(model.input_names()[1:], past)]


def dynamic_axes(name):
    """Symbolic dims of the export, by input/output name (None: static)."""
    if name == "encoder_dyn":
        return {n: {0: "batch", 1: "seq"} for n in ("input_ids", "last_hidden_state")}
    if name == "decoder_kv":
        m = DecoderKV(**DECODER_KV)
        axes = {"input_ids": {1: "new"}, "logits": {1: "new"}}
        axes.update({n: {2: "past"} for n in m.input_names()[1:]})
        axes.update({n: {2: "total"} for n in m.output_names()[1:]})
        return axes
    return None


def build(name):
    if name == "transformer":
        return build_transformer()
    if name == "encoder_dyn":
        return build_encoder_dyn()
    if name == "decoder_kv":
        return build_decoder_kv()
    if name == "tiny_cnn":
        return build_tiny_cnn()
    if name == "block_attention":
        return build_block_attention()
    return build_torchvision(name)


def data_paths(name, out_dir, in_names, out_names):
    """The example's files: NAME.input.npy / NAME.expected.npy for a model
    with one input and one output (what the tests and the bench read),
    NAME.input.INPUT.npy / NAME.expected.OUTPUT.npy for each otherwise."""
    def path(kind, names):
        if len(in_names) == 1 and len(out_names) == 1:
            return [os.path.join(out_dir, f"{name}.{kind}.npy")]
        return [os.path.join(out_dir, f"{name}.{kind}.{n}.npy") for n in names]
    return path("input", in_names), path("expected", out_names)


def check_symbolic_dims(name, model_proto, axes):
    """Fails if the export lost a symbolic dim (exported as a fixed size)."""
    for v in list(model_proto.graph.input) + list(model_proto.graph.output):
        dims = v.type.tensor_type.shape.dim
        for axis, sym in (axes or {}).get(v.name, {}).items():
            if dims[axis].dim_param != sym:
                raise RuntimeError(f"{name}: '{v.name}' dim {axis} exported as "
                                   f"{dims[axis].dim_param or dims[axis].dim_value}, expected symbol '{sym}'")


def generate(name, out_dir, stamp):
    inputs, out_names = make_input(name)
    in_names = [n for n, _ in inputs]
    onnx_path = os.path.join(out_dir, name + ".onnx")
    input_paths, expected_paths = data_paths(name, out_dir, in_names, out_names)
    stamp_path = os.path.join(out_dir, name + ".stamp")
    paths = [onnx_path, *input_paths, *expected_paths, stamp_path]
    if all(os.path.exists(p) for p in paths):
        with open(stamp_path) as f:
            if f.read().strip() == stamp:
                print(f"gen_models: {name}: up to date")
                return

    model = build(name)
    xs = tuple(torch.from_numpy(x) for _, x in inputs)
    with torch.no_grad():
        ys = model(*xs)
    ys = [y.float().numpy() for y in (ys if isinstance(ys, tuple) else (ys,))]
    if not all(np.all(np.isfinite(y)) for y in ys):
        raise RuntimeError(f"{name}: non-finite reference output")

    tmp = onnx_path + ".tmp"
    axes = dynamic_axes(name)
    torch.onnx.export(model, xs, tmp, export_params=True, opset_version=OPSET,
                      do_constant_folding=True, input_names=in_names,
                      output_names=out_names, dynamic_axes=axes)
    import onnx
    proto = onnx.load(tmp)
    onnx.checker.check_model(proto)
    check_symbolic_dims(name, proto, axes)
    os.replace(tmp, onnx_path)
    for p, (_, x) in zip(input_paths, inputs):
        np.save(p, x)
    for p, y in zip(expected_paths, ys):
        np.save(p, y.astype(np.float32))
    with open(stamp_path, "w") as f:
        f.write(stamp + "\n")
    print(f"gen_models: {name}: wrote {onnx_path} (output {out_names[0]} {list(ys[0].shape)}, "
          f"max|y| {float(np.abs(ys[0]).max()):.4g})")


# --------------------------------------------------------------------------
# Recurrent models (issue 12: any nn.LSTM / nn.GRU / nn.RNN model), exported
# at opset 17: the exporter's ONNX LSTM/GRU/RNN nodes per layer and
# direction, with the Slice/Concat/Squeeze glue between them.
# --------------------------------------------------------------------------

RECURRENT_OPSET = 17
# name: (module kind, constructor kwargs, input shapes by name, output names);
# inputs are x and, when listed, the initial states h0 (and c0).
RECURRENT = {
    "lstm_bidir2": ("LSTM", dict(input_size=8, hidden_size=16, num_layers=2, bidirectional=True),
                    {"x": (7, 3, 8), "h0": (4, 3, 16), "c0": (4, 3, 16)}, ["y", "h_n", "c_n"]),
    "gru_bidir2": ("GRU", dict(input_size=8, hidden_size=12, num_layers=2, bidirectional=True,
                               batch_first=True),
                   {"x": (3, 7, 8), "h0": (4, 3, 12)}, ["y", "h_n"]),
    "rnn_bidir2": ("RNN", dict(input_size=8, hidden_size=10, num_layers=2, bidirectional=True),
                   {"x": (6, 2, 8)}, ["y", "h_n"]),
    "rnn_relu": ("RNN", dict(input_size=5, hidden_size=6, num_layers=1, nonlinearity="relu"),
                 {"x": (5, 2, 5)}, ["y", "h_n"]),
    "lstm_classifier": ("LSTMHead", dict(input_size=16, hidden_size=32, num_layers=1,
                                         batch_first=True),
                        {"x": (2, 9, 16)}, ["logits"]),
}
RECURRENT_MODELS = list(RECURRENT)


class RecurrentNet(nn.Module):
    """One torch.nn recurrent module; returns its outputs as a tuple (output,
    h_n[, c_n]) or, for LSTMHead, a linear head on the last step's output."""

    def __init__(self, kind, kwargs):
        super().__init__()
        self.kind = kind
        self.rnn = getattr(nn, "LSTM" if kind == "LSTMHead" else kind)(**kwargs)
        self.head = nn.Linear(kwargs["hidden_size"], 5) if kind == "LSTMHead" else None

    def forward(self, x, *state):
        if self.kind == "LSTM":
            y, (h, c) = self.rnn(x, tuple(state) if state else None)
            return y, h, c
        if self.kind == "LSTMHead":
            y, _ = self.rnn(x)
            return self.head(y[:, -1])
        y, h = self.rnn(x, state[0] if state else None)
        return y, h


def generate_recurrent(name, out_dir, stamp):
    """Writes NAME.onnx, NAME.input.INPUT.npy, NAME.expected.OUTPUT.npy (or
    NAME.input.npy / NAME.expected.npy for one of each) and NAME.stamp."""
    kind, kwargs, in_shapes, out_names = RECURRENT[name]
    in_names = list(in_shapes)
    onnx_path = os.path.join(out_dir, name + ".onnx")
    input_paths, expected_paths = data_paths(name, out_dir, in_names, out_names)
    stamp_path = os.path.join(out_dir, name + ".stamp")
    if all(os.path.exists(p) for p in [onnx_path, *input_paths, *expected_paths, stamp_path]):
        with open(stamp_path) as f:
            if f.read().strip() == stamp:
                print(f"gen_models: {name}: up to date")
                return
    torch.manual_seed(sum(map(ord, name)))
    model = RecurrentNet(kind, kwargs).eval()
    rng = np.random.default_rng(2024)
    xs = [rng.standard_normal(s).astype(np.float32) for s in in_shapes.values()]
    with torch.no_grad():
        ys = model(*(torch.from_numpy(x) for x in xs))
    ys = [y.numpy() for y in (ys if isinstance(ys, tuple) else (ys,))]
    tmp = onnx_path + ".tmp"
    torch.onnx.export(model, tuple(torch.from_numpy(x) for x in xs), tmp, export_params=True,
                      opset_version=RECURRENT_OPSET, do_constant_folding=True,
                      input_names=in_names, output_names=out_names)
    import onnx
    proto = onnx.load(tmp)
    onnx.checker.check_model(proto)
    ops = {n.op_type for n in proto.graph.node}
    want = "LSTM" if kind == "LSTMHead" else kind
    if want not in ops:
        raise RuntimeError(f"{name}: the export has no {want} node (ops: {sorted(ops)})")
    os.replace(tmp, onnx_path)
    for p, x in zip(input_paths, xs):
        np.save(p, x)
    for p, y in zip(expected_paths, ys):
        np.save(p, y.astype(np.float32))
    with open(stamp_path, "w") as f:
        f.write(stamp + "\n")
    print(f"gen_models: {name}: wrote {onnx_path} ({want} at opset {RECURRENT_OPSET})")


# --------------------------------------------------------------------------
# Control flow (issue 12): torch.jit.script models with if / for / while,
# exported with their If and Loop nodes (a Python list becomes sequence ops).
# Each has several seeded cases that take different paths through it.
#   cf_if     x [n] -> cat(x, 2x) [2n] if sum(x) > 0 else x - 1 [n]
#   cf_loop   x [steps, 4] -> h [4], stack of every step's h [steps, 4]: an RNN
#             cell over the rows (the trip count is the number of rows)
#   cf_while  x [3], limit [] -> x grown until |x|_1 >= limit, and the count
# Files: NAME.onnx, NAME.caseK.inputI.npy, NAME.caseK.expectedJ.npy (I, J:
# input and output positions), NAME.stamp.
# --------------------------------------------------------------------------

CONTROL_FLOW_MODELS = ["cf_if", "cf_loop", "cf_while"]


class CfIf(nn.Module):
    def forward(self, x):
        if bool(x.sum() > 0):
            y = torch.cat([x, x * 2.0], 0)
        else:
            y = x - 1.0
        return y


class CfLoop(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4) * 0.5)

    def forward(self, x):
        h = torch.zeros(x.size(1))
        ys = []
        for i in range(x.size(0)):
            h = torch.tanh(torch.matmul(h, self.w) + x[i])
            ys.append(h)
        return h, torch.stack(ys)


class CfWhile(nn.Module):
    def forward(self, x, limit):
        n = torch.zeros([], dtype=torch.long)
        while bool(x.abs().sum() < limit):
            x = x * 1.5 + 0.1
            n = n + 1
        return x, n


def control_flow_cases(name):
    """The module and its seeded cases (tuples of input arrays)."""
    rng = np.random.default_rng(2024)
    f32 = lambda *shape: rng.standard_normal(shape).astype(np.float32)
    if name == "cf_if":
        pos, neg = np.abs(f32(3)) + 0.1, -np.abs(f32(5)) - 0.1
        return CfIf(), [(pos,), (neg,), (np.abs(f32(2)),)]
    if name == "cf_loop":
        torch.manual_seed(11)
        return CfLoop(), [(f32(5, 4),), (f32(1, 4),), (f32(9, 4),)]
    limit = lambda v: np.array(v, np.float32)
    return CfWhile(), [(f32(3), limit(20.0)), (f32(3), limit(0.0)), (f32(3) * 0.01, limit(5.0))]


def generate_control_flow(name, out_dir, stamp):
    module, cases = control_flow_cases(name)
    module.eval()
    onnx_path = os.path.join(out_dir, name + ".onnx")
    stamp_path = os.path.join(out_dir, name + ".stamp")
    if os.path.exists(onnx_path) and os.path.exists(stamp_path):
        with open(stamp_path) as f:
            if f.read().strip() == stamp:
                print(f"gen_models: {name}: up to date")
                return
    scripted = torch.jit.script(module)
    tmp = onnx_path + ".tmp"
    example = tuple(torch.from_numpy(x) for x in cases[0])
    # Every input dim symbolic: the cases differ in shape (and so in paths).
    in_names = [f"in{i}" for i in range(len(example))]
    axes = {n: {d: f"{n}_d{d}" for d in range(x.dim())} for n, x in zip(in_names, example)}
    torch.onnx.export(scripted, example, tmp, export_params=True, opset_version=OPSET,
                      input_names=in_names, dynamic_axes=axes)
    import onnx
    onnx.checker.check_model(onnx.load(tmp))
    os.replace(tmp, onnx_path)
    for k, case in enumerate(cases):
        with torch.no_grad():
            ys = scripted(*(torch.from_numpy(x) for x in case))
        ys = ys if isinstance(ys, tuple) else (ys,)
        for i, x in enumerate(case):
            np.save(os.path.join(out_dir, f"{name}.case{k}.input{i}.npy"), x)
        for j, y in enumerate(ys):
            np.save(os.path.join(out_dir, f"{name}.case{k}.expected{j}.npy"), y.numpy())
    with open(stamp_path, "w") as f:
        f.write(stamp + "\n")
    print(f"gen_models: {name}: wrote {onnx_path} ({len(cases)} cases)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--models", nargs="*", default=ALL_MODELS + RECURRENT_MODELS + CONTROL_FLOW_MODELS,
                    help="models to generate (default: all); comma- or space-separated")
    args = ap.parse_args()
    names = [n for item in args.models for n in item.split(",") if n]
    for n in names:
        known = ALL_MODELS + RECURRENT_MODELS + CONTROL_FLOW_MODELS
        if n not in known:
            ap.error(f"unknown model '{n}' (known: {', '.join(known)})")
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    stamp = _script_hash()
    for n in names:
        if n in RECURRENT_MODELS:
            generate_recurrent(n, args.out, stamp)
        elif n in CONTROL_FLOW_MODELS:
            generate_control_flow(n, args.out, stamp)
        else:
            generate(n, args.out, stamp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
