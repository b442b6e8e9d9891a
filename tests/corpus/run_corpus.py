#!/usr/bin/env python3
"""The model corpus: real third-party ONNX models (tests/corpus/models.json)
run by ONNX Runtime and by Backplane on the same inputs.

Per model: ONNX Runtime (npm onnxruntime-node, through ort_run.js) gives the
reference outputs and its latency; Backplane runs the model on its default
backends (or --backends) at each thread count of --threads, then from a .bpk
made by `backplane compile`, and every output of every run is compared with
ONNX Runtime's under the numerics policy (backplane.numerics). Prints a table
(model, exporter, opset, match, worst error / bound, latency of both) and
exits 1 if any model fails to load, run or match.

The packages come from scripts/fetch-corpus.sh BUILD_DIR (run it first, or
pass --fetch). Needs Debian's /usr/bin/python3 (numpy), node, and the Python
module built into BUILD_DIR/python.

  run_corpus.py --build-dir build [--models a,b] [--backends CpuRef] [--runs 5]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

NUMPY_DTYPES = {"float32": np.float32, "float64": np.float64, "int64": np.int64, "int32": np.int32,
                "bool": np.bool_, "uint8": np.uint8, "int8": np.int8}


def make_input(spec, rng):
    """One input as the manifest describes it (see models.json's "about")."""
    dtype = NUMPY_DTYPES[spec["dtype"]]
    shape = tuple(spec["shape"])
    kind = spec["kind"]
    scale = spec.get("scale", 1.0)
    if kind == "audio":
        x = rng.uniform(-scale, scale, shape)
    elif kind == "image":
        x = (rng.uniform(0.0, 1.0, shape) - 0.5) / 0.5
    elif kind == "normal":
        x = rng.standard_normal(shape) * scale + spec.get("offset", 0.0)
    elif kind == "zeros":
        x = np.zeros(shape)
    elif kind == "value":
        x = np.full(shape, spec["value"])
    else:
        raise ValueError(f"input '{spec['name']}': unknown kind '{kind}'")
    return np.array(x, dtype=dtype, order="C")  # keeps a scalar 0-d


# A .bpk of the corpus is a few times its model at most; a compile that
# writes more fails with EFBIG at this size instead of filling the disk.
BPK_LIMIT_BYTES = 1 << 30


def limit_file_size():
    resource.setrlimit(resource.RLIMIT_FSIZE, (BPK_LIMIT_BYTES, BPK_LIMIT_BYTES))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past it fails, it does not kill


def run_ort(node, module, model_path, work, threads, runs):
    """ONNX Runtime's outputs (name -> array), its run times (ms) and version."""
    proc = subprocess.run([node, os.path.join(HERE, "ort_run.js"), module, model_path, work, str(threads),
                           str(runs)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"ONNX Runtime failed: {proc.stderr.strip()[-2000:]}")
    with open(os.path.join(work, "ort_result.json")) as f:
        result = json.load(f)
    outputs = {o["name"]: np.load(os.path.join(work, o["file"])) for o in result["outputs"]}
    return outputs, result["times_ms"], result.get("version", "")


def assemble(corpus, m):
    """The model file of manifest entry `m`: its path in its package, or, for a package
    that ships a model in chunks (a "resource": its index file and key), the chunks
    joined once into corpus/assembled/<name>.onnx."""
    package = os.path.join(corpus, "packages", m["package"])
    if "resource" not in m:
        return os.path.join(package, m["path"])
    out = os.path.join(corpus, "assembled", m["name"] + ".onnx")
    with open(os.path.join(package, m["resource"]["index"])) as f:
        entry = json.load(f)[m["resource"]["key"]]
    if os.path.exists(out) and os.path.getsize(out) == entry["size"]:
        return out
    os.makedirs(os.path.dirname(out), exist_ok=True)
    folder = os.path.dirname(os.path.join(package, m["resource"]["index"]))
    with open(out + ".part", "wb") as f:
        for chunk in entry["chunks"]:
            with open(os.path.join(folder, chunk["hash"]), "rb") as c:
                data = c.read()
            begin, end = chunk["offsets"]
            if len(data) != end - begin or f.tell() != begin:
                raise RuntimeError(f"{m['name']}: chunk {chunk['hash']} of {m['resource']['key']} "
                                   f"is {len(data)} bytes at {f.tell()}, the index says {begin}..{end}")
            f.write(data)
    if os.path.getsize(out + ".part") != entry["size"]:
        raise RuntimeError(f"{m['name']}: chunks make {os.path.getsize(out + '.part')} bytes, "
                           f"the index says {entry['size']}")
    os.replace(out + ".part", out)
    return out


# Operators that round to an 8-bit type (docs/numerics.md, "The int8 rule").
QUANTIZERS = {"QuantizeLinear", "QLinearConv", "QLinearMatMul", "DynamicQuantizeLinear",
              "QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearConcat",
              "QLinearAveragePool", "QLinearGlobalAveragePool"}


def quantizer_steps(path):
    """Per output name: the quantizing nodes on the longest path to it from the inputs."""
    import onnx
    graph = onnx.load(path, load_external_data=False).graph
    steps = {}
    for node in graph.node:  # ONNX lists nodes in topological order
        k = max((steps.get(v, 0) for v in node.input if v), default=0) + (node.op_type in QUANTIZERS)
        for v in node.output:
            steps[v] = k
    return {o.name: steps.get(o.name, 0) for o in graph.output}


class Verdict:
    """What the runs of one model found.

    `rule` is the model's "compare" entry: "float" (the numerics policy), "float16" (a
    model that computes in float16, which ONNX Runtime rounds after every node and Backplane
    does not: four float16 ulps of the largest output, docs/numerics.md) or "int8" (a
    quantized model: the policy plus one 8-bit step of the output's range per quantizer on
    the longest path to it, as `backplane validate` judges such a float value)."""

    def __init__(self, rule="float", steps=None):
        self.rule = rule
        self.steps = steps or {}
        self.failures = []  # what went wrong, each naming the run
        self.worst = 0.0  # max over outputs and runs of error / bound
        self.worst_text = "-"

    def allowance(self, name, ref):
        if self.rule == "float16" and np.issubdtype(ref.dtype, np.floating) and ref.size:
            return 2.0 ** -9 * float(np.abs(ref).max())
        if self.rule == "int8" and np.issubdtype(ref.dtype, np.floating) and ref.size:
            r = ref[np.isfinite(ref)].astype(np.float64)
            span = (max(float(r.max()), 0.0) - min(float(r.min()), 0.0)) if r.size else 0.0
            return self.steps.get(name, 0) * span / 255
        return 0.0

    def compare(self, numerics, run, got, ref):
        for name, expected in ref.items():
            if name not in got:
                self.failures.append(f"{run}: no output '{name}'")
                continue
            c = numerics.compare(got[name], expected)
            extra = self.allowance(name, expected)
            bound = c.bound + extra
            ratio = (c.max_abs_error / bound if bound > 0 else (0.0 if c.max_abs_error == 0 else np.inf)) \
                if c.comparable else np.inf
            if ratio >= self.worst:
                self.worst = ratio
                self.worst_text = (f"{c.max_abs_error:.1e}/{bound:.1e}" if c.comparable else c.reason)
            if not c.comparable or c.max_abs_error > bound:
                more = f" + {extra:.2e} by the {self.rule} rule" if extra else ""
                self.failures.append(f"{run}: output '{name}': {c.describe()}{more}")


def run_backplane(backplane, path, feeds, threads, backends, runs=0):
    """Backplane's outputs (name -> array), with runs > 0 that many run times (ms), and
    whether the model runs in stages."""
    kwargs = {"threads": threads}
    if backends:
        kwargs["backends"] = backends
    sess = backplane.InferenceSession(path, **kwargs)
    names = [o.name for o in sess.get_outputs()]
    outs = sess.run(None, feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - start) * 1e3)
    return {n: np.asarray(o) for n, o in zip(names, outs)}, times, sess.runs_in_stages


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--manifest", default=os.path.join(HERE, "models.json"))
    ap.add_argument("--models", default="", help="comma-separated names (default: every model)")
    ap.add_argument("--backends", default="", help="Backplane's backends, comma-separated (default: its own)")
    ap.add_argument("--threads", default="1,2", help="Backplane thread counts, comma-separated")
    ap.add_argument("--runs", type=int, default=5, help="timed runs for the latency medians")
    ap.add_argument("--no-bpk", action="store_true", help="skip the runs from a compiled artifact")
    ap.add_argument("--fetch", action="store_true", help="run scripts/fetch-corpus.sh first")
    ap.add_argument("--write", default="", help="also write the table (Markdown) to this file")
    args = ap.parse_args()

    build = os.path.abspath(args.build_dir)
    if args.fetch:
        subprocess.run(["bash", os.path.join(ROOT, "scripts", "fetch-corpus.sh"), build], check=True)
    sys.path.insert(0, os.path.join(build, "python"))
    import backplane  # noqa: E402
    from backplane import numerics  # noqa: E402

    with open(args.manifest) as f:
        manifest = json.load(f)
    corpus = os.path.join(build, "corpus")
    module = os.path.join(corpus, "ort", "node_modules", manifest["reference"]["package"])
    node = shutil.which("node")
    if node is None or not os.path.exists(os.path.join(module, "package.json")):
        sys.exit(f"corpus: needs node and {module}: run scripts/fetch-corpus.sh {build}")
    cli = os.path.join(build, "bin", "backplane")
    backends = [b for b in args.backends.split(",") if b]
    threads = [int(t) for t in args.threads.split(",") if t]
    wanted = [m for m in args.models.split(",") if m]
    models = [m for m in manifest["models"] if not wanted or m["name"] in wanted]
    unknown = set(wanted) - {m["name"] for m in models}
    if unknown:
        sys.exit(f"corpus: no model named {', '.join(sorted(unknown))} in {args.manifest}")

    rows, failed = [], []
    ort_version = ""
    for m in models:
        name = m["name"]
        work = os.path.join(corpus, "runs", name)
        os.makedirs(work, exist_ok=True)
        verdict = Verdict()
        bp_ms = ort_ms = float("nan")
        staged = False
        bpk_state = "-"
        # A model that takes seconds a run is timed fewer times ("runs" in its entry).
        runs = min(args.runs, m.get("runs", args.runs))
        try:
            if not os.path.exists(os.path.join(corpus, "packages", m["package"])):
                raise RuntimeError(f"package {m['package']} is missing: run scripts/fetch-corpus.sh {build}")
            path = assemble(corpus, m)
            if not os.path.exists(path):
                raise RuntimeError(f"{path} is missing: run scripts/fetch-corpus.sh {build}")
            rule = m.get("compare", "float")
            verdict = Verdict(rule, quantizer_steps(path) if rule == "int8" else None)
            rng = np.random.default_rng(zlib.crc32(name.encode()))
            feeds, listed = {}, []
            for k, spec in enumerate(m["inputs"]):
                feeds[spec["name"]] = make_input(spec, rng)
                np.save(os.path.join(work, f"in_{k}.npy"), feeds[spec["name"]])
                listed.append({"name": spec["name"], "file": f"in_{k}.npy"})
            with open(os.path.join(work, "inputs.json"), "w") as f:
                json.dump({"inputs": listed}, f)
            ref, ort_times, ort_version = run_ort(node, module, path, work, max(threads), runs)
            ort_ms = statistics.median(ort_times) if ort_times else float("nan")
            for t in threads:
                run = f"{t} thread{'s' if t > 1 else ''}"
                try:
                    got, times, staged = run_backplane(backplane, path, feeds, t, backends,
                                                       runs if t == max(threads) else 0)
                except backplane.Error as e:
                    verdict.failures.append(f"{run}: {e}")
                    continue
                if times:
                    bp_ms = statistics.median(times)
                verdict.compare(numerics, run, got, ref)
            if staged:
                # A .bpk holds static graphs: control flow runs in stages from the .onnx.
                bpk_state = "n/a (stages)"
            elif not args.no_bpk:
                bpk_state = "yes"
                bpk = os.path.join(work, name + ".bpk")
                cmd = [cli, "compile", path, "-o", bpk] + (["--backends", ",".join(backends)] if backends else [])
                for spec in m["inputs"]:  # the signature the runs use
                    cmd += ["--shape", spec["name"] + "=" + "x".join(str(d) for d in spec["shape"])]
                proc = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=limit_file_size)
                if proc.returncode != 0:
                    verdict.failures.append(f"backplane compile: {(proc.stderr or proc.stdout).strip()[-1500:]}")
                else:
                    try:
                        got, _, _ = run_backplane(backplane, bpk, feeds, max(threads), backends)
                        verdict.compare(numerics, ".bpk", got, ref)
                    except backplane.Error as e:
                        verdict.failures.append(f".bpk: {e}")
        except Exception as e:  # noqa: BLE001 - a model that cannot run is a row, not the end
            verdict.failures.append(str(e))
        ok = not verdict.failures
        rows.append((name, m["exporter"], str(m["opset"]), m["domain"], "yes" if ok else "NO", bpk_state,
                     verdict.worst_text, f"{bp_ms:.2f}", f"{ort_ms:.2f}"))
        print(f"corpus: {name}: {'match' if ok else 'FAILED'}", flush=True)
        for failure in verdict.failures:
            print(f"  {failure}", flush=True)
        if not ok:
            failed.append(name)

    header = ("model", "exporter", "opset", "domain", "match", ".bpk", "max error / bound",
              f"Backplane ms ({max(threads)}t)", f"ORT ms ({max(threads)}t)")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    table = "\n".join(lines)
    print()
    print(f"ONNX Runtime {ort_version} (npm onnxruntime-node); Backplane on "
          f"{','.join(backends) if backends else 'its default backends'}, {args.runs} timed runs each "
          f"(medians); match = every output of the runs at {args.threads} threads"
          f"{'' if args.no_bpk else ' and from a .bpk'} within the numerics policy; "
          f"max error / bound = the worst output's (1 or less matches)")
    print(table)
    if args.write:
        with open(args.write, "w") as f:
            f.write(table + "\n")
    print()
    print(f"corpus: {len(models) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
