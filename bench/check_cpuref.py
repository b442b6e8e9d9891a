#!/usr/bin/python3
"""CpuOneDnn against CpuRef on the benchmark's models: `make bench-cpuref`.

For each model (the catalog of bench/bench_models.py by default, or
`--models` / BENCH_MODELS: catalog names or .onnx paths) this runs its seeded
input through `backplane run` three times, each in a fresh process: with
`--backends CpuRef` (the reference), and with the default backends (CpuOneDnn
from its plugin) at 1 and at 2 threads, each compiled for its thread count as
`make bench` does (oneDNN may choose other kernels and layouts at another
count). It compares every output: max |CpuOneDnn - CpuRef| / max |CpuRef|
must be at most `--tolerance` (1e-4). Prints one row per model and thread
count and exits 1 if any output is further than that, or if a run fails.
Needs Debian's /usr/bin/python3 (numpy, torch, torchvision, onnx) to generate
the models (cached in BUILD/bench/models, shared with `make bench`).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import bench_models  # noqa: E402
import run_bench  # noqa: E402


def run(cli, backend_dir, model_path, name, input_path, out_dir, threads, backends=None):
    """The outputs of one `backplane run` (name -> array) and the backends
    its plan used."""
    cmd = [cli, "--backend-path", backend_dir, "run", model_path, "--input", f"{name}={input_path}",
           "--output-dir", out_dir, "--threads", str(threads), "--json"]
    if backends:
        cmd += ["--backends", backends]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr.strip()}")
    used = json.loads(done.stdout)["backends_used"]
    outputs = {f[:-4]: np.load(os.path.join(out_dir, f)) for f in sorted(os.listdir(out_dir)) if f.endswith(".npy")}
    return outputs, used


def compare(ours, ref):
    """(worst relative difference, its output's name) over every output."""
    if set(ours) != set(ref):
        raise RuntimeError(f"outputs differ: {sorted(ours)} against CpuRef's {sorted(ref)}")
    worst, where = 0.0, ""
    for k in ref:
        a, b = ours[k].astype(np.float64), ref[k].astype(np.float64)
        if a.shape != b.shape:
            raise RuntimeError(f"output {k}: shape {a.shape} against CpuRef's {b.shape}")
        scale = max(float(np.abs(b).max()) if b.size else 0.0, 1e-30)
        rel = float(np.abs(a - b).max()) / scale if b.size else 0.0
        if not np.isfinite(rel):
            rel = float("inf")
        if rel >= worst:
            worst, where = rel, k
    return worst, where


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--models", default=os.environ.get("BENCH_MODELS") or ",".join(bench_models.DEFAULT))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--tolerance", type=float, default=1e-4)
    args = ap.parse_args()

    build = os.path.abspath(args.build_dir)
    models_dir = os.path.join(build, "bench", "models")
    cli = os.path.join(build, "bin", "backplane")
    backend_dir = os.path.join(build, "lib", "backplane", "backends")
    for p in (cli, os.path.join(backend_dir, "Backplane_CpuOneDnn_backend.so")):
        if not os.path.exists(p):
            sys.exit(f"bench-cpuref: {p} is missing (run `make bench-cpuref`, which builds it)")
    paths = {"models": models_dir, "cli": cli, "backend_dir": backend_dir}
    threads = [int(t) for t in args.threads.split(",") if t]

    files = [run_bench.model_files(m, models_dir) for m in args.models.split(",") if m]  # (generated first)
    print(f"| model | threads | backends | max rel diff to CpuRef | output | within {args.tolerance:g}? |")
    print("|---|---|---|---|---|---|")
    misses = []
    for model, onnx_path, input_path in files:
        name = run_bench.input_name(onnx_path)
        with tempfile.TemporaryDirectory() as tmp:
            ref, used = run(cli, backend_dir, onnx_path, name, input_path, os.path.join(tmp, "ref"), max(threads),
                            "CpuRef")
            if used != ["CpuRef"]:
                raise RuntimeError(f"{model}: the reference run used {used}, not CpuRef alone")
            for t in threads:
                # The .bpk, as make bench runs it; the .onnx for a model that has none.
                bpk = run_bench.compiled(paths, model, onnx_path, input_path, t) or onnx_path
                ours, used = run(cli, backend_dir, bpk, name, input_path, os.path.join(tmp, f"t{t}"), t)
                if "CpuOneDnn" not in used:
                    raise RuntimeError(f"{model}: the default backends ran {used}, without CpuOneDnn (is its "
                                       f"plugin in {backend_dir}?)")
                rel, where = compare(ours, ref)
                ok = rel <= args.tolerance
                if not ok:
                    misses.append(f"{model} at {t} thread(s): {rel:.1e} on {where}")
                print(f"| {model} | {t} | {', '.join(used)} | {rel:.1e} | {where} | {'yes' if ok else '**no**'} |",
                      flush=True)
    if misses:
        print("\nfurther from CpuRef than the tolerance:\n  " + "\n  ".join(misses), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
