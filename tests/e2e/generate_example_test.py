#!/usr/bin/python3
"""examples/generate on decoder_kv: its 64 greedy tokens equal PyTorch's
(scripts/torch_reference.py), with the cache bound zero-copy between runs.

Usage: generate_example_test.py GENERATE_BINARY MODELS_DIR REFERENCES_DIR [BACKENDS]
"""
import subprocess
import sys

import numpy as np


def main():
    binary, models, refs = sys.argv[1:4]
    backends = sys.argv[4] if len(sys.argv) > 4 else ""
    prompt = np.load(f"{refs}/decoder_kv.prompt_ids.npy").reshape(-1).tolist()
    want = np.load(f"{refs}/decoder_kv.generated_ids.npy").reshape(-1).tolist()
    cmd = [binary, f"{models}/decoder_kv.onnx", "--prompt", ",".join(map(str, prompt)),
           "--tokens", str(len(want))]
    if backends:
        cmd += ["--backends", backends]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        print(out.stdout, out.stderr)
        print(f"FAIL: generate exited with {out.returncode}")
        return 1
    lines = {l.split()[0]: l.split()[1:] for l in out.stdout.splitlines() if l.strip()}
    got = [int(t) for t in lines.get("generated", [])]
    if got != want:
        first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        print(out.stdout)
        print(f"FAIL: token {first} differs: got {got[first:first + 5]}, PyTorch {want[first:first + 5]}")
        return 1
    print(out.stdout, end="")
    print(f"generate example ({backends or 'default backends'}): {len(got)} tokens equal PyTorch's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
