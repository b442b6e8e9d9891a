#!/usr/bin/python3
"""Makes the demo model used by `make demo` (scripts/demo.sh).

Writes, into --out (default: models/ of the repository):
  demo.onnx          a small CNN classifier on 1x3x32x32 (conv/bn/relu/pool x3,
                     global pool, gemm, softmax; 10 classes), seeded random
                     weights (not trained), opset 13, ~100 KB
  demo_input.npy     a seeded 1x3x32x32 float32 input
  demo_expected.npy  PyTorch's float32 output for it (the demo compares)

Deterministic: the same torch version writes the same numbers. Run with
/usr/bin/python3 (Debian's torch and onnx).
"""
import argparse
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class DemoNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.conv3 = nn.Conv2d(32, 64, 3, padding=1)
        self.bn3 = nn.BatchNorm2d(64)
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)   # 16x16x16
        x = F.max_pool2d(self.bn2(F.relu(self.conv2(x))), 2)   # 32x8x8 (BN after ReLU stays a node)
        x = F.relu(self.bn3(self.conv3(x)))                     # 64x8x8
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)       # 64
        return torch.softmax(self.fc(x), dim=1)


def build():
    torch.manual_seed(0)
    model = DemoNet()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        model.fc.weight.mul_(6.0)  # a confident, readable top-5
        bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
        for bn in bns:
            bn.weight.copy_(0.5 + torch.rand(bn.num_features, generator=g))
            bn.bias.copy_(0.2 * torch.randn(bn.num_features, generator=g))
            bn.reset_running_stats()
            bn.momentum = None
        model.train()
        for _ in range(4):
            model(torch.randn(8, 3, 32, 32, generator=g))
        for bn in bns:
            bn.running_var.mul_(0.75 + 0.5 * torch.rand(bn.num_features, generator=g))
            bn.momentum = 0.1
    model.eval()
    return model


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(here, "..", "models"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)

    model = build()
    x = np.random.default_rng(2024).standard_normal((1, 3, 32, 32)).astype(np.float32)
    with torch.no_grad():
        y = model(torch.from_numpy(x)).numpy().astype(np.float32)

    onnx_path = os.path.join(args.out, "demo.onnx")
    torch.onnx.export(model, (torch.from_numpy(x),), onnx_path, export_params=True, opset_version=13,
                      do_constant_folding=True, input_names=["input"], output_names=["probabilities"])
    import onnx
    onnx.checker.check_model(onnx.load(onnx_path))
    np.save(os.path.join(args.out, "demo_input.npy"), x)
    np.save(os.path.join(args.out, "demo_expected.npy"), y)
    top = np.argsort(-y[0])[:5]
    print(f"make_demo_model: wrote {onnx_path} ({os.path.getsize(onnx_path)} bytes); "
          f"top-5 classes {top.tolist()} p={np.round(y[0][top], 4).tolist()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
