#!/usr/bin/python3
"""torchvision's roi_align, exported as gen_zoo.py exports it, runs in
Backplane as in PyTorch.

  roi_align_test.py --cli BACKPLANE [--backend-path DIR]

Every R-CNN of the zoo pools its regions with roi_align(aligned=False), and
torchvision 0.14's export of it (opset 11, no coordinate mode) means
half_pixel at opset 17: the regions were sampled half a pixel off.
gen_zoo.register_roi_align_opset16 exports the mode. This test exports
small roi_align modules (aligned False and True; regions under a pixel,
across the border, on the second image of a batch) at opset 17 with that
symbolic, runs them with `backplane run` and compares with PyTorch (1e-5
relative). It also exports aligned=False with torchvision's own symbolic
and requires that file to differ from PyTorch: the comparison sees the
half-pixel shift, so it would catch the export going wrong again.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import torch
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "scripts"))
import gen_zoo  # noqa: E402

OPSET = gen_zoo.OPSET
RTOL = 1e-5


class RoiAlign(torch.nn.Module):
    def __init__(self, aligned):
        super().__init__()
        self.aligned = aligned

    def forward(self, x, rois):
        return torchvision.ops.roi_align(x, rois, output_size=(7, 5), spatial_scale=0.25,
                                         sampling_ratio=2, aligned=self.aligned)


def inputs():
    g = torch.Generator().manual_seed(12)
    x = torch.randn(2, 3, 16, 20, generator=g)
    # (batch, x1, y1, x2, y2) in image coordinates (spatial_scale 1/4).
    rois = torch.tensor([[0, 4.0, 8.0, 60.0, 40.0],
                         [1, 10.5, 3.25, 12.0, 5.0],     # under a pixel at 1/4
                         [1, -12.0, 30.0, 90.0, 75.0],   # across the border
                         [0, 33.3, 17.7, 47.9, 61.1]])
    return x, rois


def run(cli, backend_path, model, x, rois, work):
    path = os.path.join(work, "roi_align.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x, rois), path, opset_version=OPSET,
                          input_names=["x", "rois"], output_names=["y"])
    np.save(os.path.join(work, "x.npy"), x.numpy())
    np.save(os.path.join(work, "rois.npy"), rois.numpy())
    out = os.path.join(work, "out")
    cmd = [cli] + (["--backend-path", backend_path] if backend_path else []) + [
        "run", path, "--input", f"x={os.path.join(work, 'x.npy')}",
        "--input", f"rois={os.path.join(work, 'rois.npy')}", "--output-dir", out,
        "--log-level", "error"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"backplane run failed: {p.stderr.strip()}")
    return np.load(os.path.join(out, "y.npy"))


def worst(got, want):
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cli", required=True, help="the backplane executable")
    ap.add_argument("--backend-path", default="", help="--backend-path for `run`")
    a = ap.parse_args()
    x, rois = inputs()
    work = tempfile.mkdtemp(prefix="roi_align_test.")
    ok = True
    try:
        # torchvision 0.14's own export first: the opset-16 symbolic, once
        # registered, stays for the rest of the process.
        want = RoiAlign(False)(x, rois).numpy()
        err = worst(run(a.cli, a.backend_path, RoiAlign(False), x, rois, work), want)
        seen = err > 100 * RTOL
        print(f"{'ok  ' if seen else 'FAIL'} torchvision 0.14's export (half_pixel by default) "
              f"differs from PyTorch: {err:.3g}")
        ok &= seen
        gen_zoo.register_roi_align_opset16()
        for aligned in (False, True):
            model = RoiAlign(aligned)
            want = model(x, rois).numpy()
            err = worst(run(a.cli, a.backend_path, model, x, rois, work), want)
            good = err <= RTOL
            print(f"{'ok  ' if good else 'FAIL'} aligned={aligned}: max |diff| / max |ref| = "
                  f"{err:.3g} (allowed {RTOL:g})")
            ok &= good
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
