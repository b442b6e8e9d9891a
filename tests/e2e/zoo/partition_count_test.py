#!/usr/bin/python3
"""Checks that zoo classification models run in few CpuOneDnn partitions
(issue 14: no fragmentation): `backplane partition --json` with CpuOneDnn
then CpuRef, at the shape of the zoo's input, must give at most --max
partitions, every one on CpuOneDnn.

  partition_count_test.py --cli BACKPLANE --data DIR [--backend-path DIR]
      [--max 3] MODEL...

One line per model: `NAME  pass|FAIL  N partition(s) by backend`. Exit 1 if
any model fails (a model whose data is missing fails too).
"""
import argparse
import collections
import json
import os
import subprocess
import sys

import numpy as np


def count(args, model):
    """(partitions per backend, error) of one model."""
    inputs = json.load(open(os.path.join(args.data, model + ".json")))["inputs"]
    cmd = [args.cli]
    if args.backend_path:
        cmd += ["--backend-path", args.backend_path]
    cmd += ["partition", "--json", "--backends", "CpuOneDnn,CpuRef"]
    for name in inputs:
        shape = np.load(os.path.join(args.data, "%s.input.%s.npy" % (model, name)),
                        mmap_mode="r").shape
        cmd += ["--shape", "%s=%s" % (name, ",".join(str(d) for d in shape))]
    cmd.append(os.path.join(args.data, model + ".onnx"))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        return None, (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[0]
    parts = json.loads(p.stdout).get("partitions", [])
    return collections.Counter(part["backend"] for part in parts), None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--backend-path")
    ap.add_argument("--max", type=int, default=3)
    ap.add_argument("models", nargs="+")
    args = ap.parse_args()
    failed = 0
    for model in args.models:
        try:
            by_backend, error = count(args, model)
        except (OSError, ValueError, KeyError) as e:
            by_backend, error = None, "no data: %s" % e
        if error is not None:
            ok, detail = False, error
        else:
            total = sum(by_backend.values())
            ok = 0 < total <= args.max and set(by_backend) == {"CpuOneDnn"}
            detail = "%d partition(s): %s" % (total, dict(by_backend))
        failed += not ok
        print("%-30s %s  %s" % (model, "pass" if ok else "FAIL", detail))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
