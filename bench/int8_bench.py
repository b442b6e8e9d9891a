#!/usr/bin/python3
"""Quantized models: Backplane int8 against ONNX Runtime int8 and Backplane float (`make bench`).

Each model (`--models`, or BENCH_MODELS for `make bench`: names of
bench/bench_models.py's catalog or paths of .onnx files; default ResNet-50,
MobileNetV2, EfficientNet-B0 and the BERT-style encoder) is generated as
run_bench.py generates it, then quantized by scripts/quantize_qdq.py
(bench_models.quantize: static QDQ calibrated on 4 seeded inputs, the encoder
dynamically, NAME:dynamic or NAME:static to choose; cached by content hash in
BUILD/bench/models). At each thread count three long-lived processes load
their model: backplane_bench (CpuOneDnn from its plugin) on the int8 file,
ort_runner.js (npm onnxruntime-node, intra-op threads = threads) on the same
file, and backplane_bench on the float model. After a warm-up they take turns
of `--block` timed runs on the same input, as in run_bench.py (at 1 thread a
round's turns on one CPU, the next round's on the other), in `--process-sets`
sets of fresh processes. Reported: median latencies; Backplane/ORT int8 and
int8 speedup = Backplane float / Backplane int8, each the median over turns
of a turn's median over its neighbour's (run_bench.paired); geometric means;
the outputs of the first set compared: Backplane int8 against ONNX Runtime
int8 and against CpuRef's run of the int8 file (`backplane run --backends
CpuRef`, the reference arithmetic) as max |difference| in steps of the
output's quantization scale (the scale of the DequantizeLinear that makes
the output, when it is one constant) else as a plain number, and Backplane
int8 against Backplane float relative to max |float| (what quantizing cost).
The header names the CPU's int8 instructions (from /proc/cpuinfo) and the
ISA oneDNN dispatches to (its verbose output).
Writes BUILD/bench/int8_results.md and int8_results.json.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import bench_models  # noqa: E402
import check_cpuref  # noqa: E402
import run_bench  # noqa: E402
from run_bench import Runner, geomean, log, paired  # noqa: E402

# /proc/cpuinfo flags that decide how fast int8 products run, as the table names them.
ISA_FLAGS = [("avx2", "AVX2"), ("avx512f", "AVX-512"), ("avx512_vnni", "AVX512-VNNI"),
             ("avx_vnni", "AVX-VNNI"), ("avx512_bf16", "AVX512-BF16"), ("amx_int8", "AMX-INT8")]


def cpu_isa():
    """The CPU's vector and int8 extensions from /proc/cpuinfo, e.g. "AVX2, AVX-512,
    AVX512-VNNI (int8 dot products: VNNI)"."""
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        return "unknown"
    names = [label for flag, label in ISA_FLAGS if flag in flags]
    if "amx_int8" in flags:
        int8 = "AMX and VNNI"
    elif flags & {"avx512_vnni", "avx_vnni"}:
        int8 = "VNNI"
    else:
        int8 = "no VNNI or AMX (u8 x s8 pairs summed to int16, saturating)"
    return f"{', '.join(names) or 'no AVX2'} (int8 dot products: {int8})"


def onednn_isa(cli, backend_dir, onnx_path):
    """The ISA oneDNN reports in its verbose header for one run of `onnx_path`
    (ONEDNN_MAX_CPU_ISA, if set, lowers it), or "unknown"."""
    env = dict(os.environ, ONEDNN_VERBOSE="1")
    proc = subprocess.run([cli, "--backend-path", backend_dir, "run", onnx_path], env=env,
                          capture_output=True, text=True)
    for line in proc.stdout.splitlines() + proc.stderr.splitlines():
        if ",info,cpu,isa:" in line:
            return line.split(",info,cpu,isa:", 1)[1].strip()
    return "unknown"


def output_scale(qdq_path):
    """The scale of the graph's first output when a DequantizeLinear with one constant
    scale makes it (a static QDQ model), else None."""
    import onnx
    from onnx import numpy_helper
    model = onnx.load(qdq_path, load_external_data=False)
    out = model.graph.output[0].name
    node = next((n for n in model.graph.node if out in n.output), None)
    inits = {t.name: t for t in model.graph.initializer}
    if node is None or node.op_type != "DequantizeLinear" or node.input[1] not in inits:
        return None
    scale = numpy_helper.to_array(inits[node.input[1]])
    return float(scale.reshape(-1)[0]) if scale.size == 1 else None


# Operators that round to a quantized type (docs/numerics.md, "The int8 rule").
QUANTIZERS = {"QuantizeLinear", "QLinearConv", "QLinearMatMul", "DynamicQuantizeLinear",
              "QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearConcat",
              "QLinearAveragePool", "QLinearGlobalAveragePool"}


def int8_rule_steps(qdq_path):
    """The int8 rule's bound on the graph's first output, in steps of its scale: one step per
    quantizing node on the longest path from the inputs to it (each may round the other way
    once a value before it differs), as `backplane validate` applies it."""
    import onnx
    graph = onnx.load(qdq_path, load_external_data=False).graph
    steps = {}
    for node in graph.node:  # ONNX lists nodes in topological order
        k = max((steps.get(v, 0) for v in node.input if v), default=0)
        k += node.op_type in QUANTIZERS
        for v in node.output:
            steps[v] = k
    return steps.get(graph.output[0].name, 0)


def within_rule(r, key):
    """Whether the output's difference to `key`'s is within the int8 rule (static: the
    rule's steps of the output scale; dynamic, float out: the float rule, relative to the
    other's max |output|, with the same steps of nothing else to allow)."""
    diff = r["vs_" + key]
    if r["out_scale"]:
        return diff <= r["rule_steps"] * r["out_scale"] * 1.0001
    return diff <= 1e-4 * r[key + "_max"] + 1e-6


def cpuref_output(paths, int8_path, input_path):
    """The int8 model's first output as CpuRef computes it (one `backplane run`)."""
    import onnx
    out = onnx.load(int8_path, load_external_data=False).graph.output[0].name
    with tempfile.TemporaryDirectory() as d:
        outputs, _ = check_cpuref.run(paths["cli"], paths["backend_dir"], int8_path,
                                      run_bench.input_name(int8_path), input_path, d, 1,
                                      backends="CpuRef")
    return outputs[out].astype(np.float64)


def model_set(spec, paths):
    """(label, mode, float .onnx, int8 .onnx, input .npy) of one --models entry."""
    name, _, mode = spec.partition(":")
    if mode not in ("", "static", "dynamic"):
        sys.exit(f"int8_bench: '{spec}': the mode after ':' is static or dynamic")
    label, float_path, input_path = run_bench.model_files(name, paths["models"])
    mode = mode or bench_models.QUANTIZED.get(label, "static")
    log(f"{label}: its {mode} int8 model (made unless cached)")
    stem = label if label in bench_models.CATALOG else label + ".user"  # a user's own file
    int8_path = bench_models.quantize(stem, float_path, paths["models"], paths["cli"], mode)
    return label, mode, float_path, int8_path, input_path


def bench_one(args, files, threads, paths, ref):
    """Alternating turns of Backplane int8, ONNX Runtime int8 and Backplane float; `ref`:
    CpuRef's output of the int8 model."""
    label, mode, float_path, int8_path, input_path = files
    t = str(threads)
    make = {
        "bp": lambda: Runner("backplane int8", [paths["bench_bin"], "dynamic", int8_path,
                                                input_path, t, paths["backend_dir"]]),
        "ort": lambda: Runner("onnxruntime int8", ["node", os.path.join(HERE, "ort_runner.js"),
                                                   paths["ort_module"], int8_path, input_path, t]),
        "float": lambda: Runner("backplane float", [paths["bench_bin"], "dynamic", float_path,
                                                    input_path, t, paths["backend_dir"]]),
    }
    keys = list(make)
    turns = {k: [] for k in keys}
    first = {}
    done = 0
    for set_index in range(args.process_sets):
        runs = -(-(args.runs - done) // (args.process_sets - set_index))
        runners = {}
        try:
            # Which process starts first rotates from set to set (run_bench.py: the first
            # one started runs slower for its life on this kind of VM).
            for k in keys[set_index % 3:] + keys[:set_index % 3]:
                runners[k] = make[k]()
            for k in keys:
                runners[k].run(args.warmup)
                time.sleep(args.gap)
            for k in keys:
                runners[k].run(args.block + 1)
                time.sleep(args.gap)
            while runs > 0:
                k_runs = min(args.block, runs)
                for k in keys:
                    if threads == 1 and not args.no_pin:
                        runners[k].pin(len(turns[k]) % min(2, os.cpu_count()))
                    times, _ = runners[k].timed_turn(k_runs + 1)
                    turns[k].append(times[1:])
                    time.sleep(args.gap)
                runs -= k_runs
                done += k_runs
            if set_index == 0:
                out = {}
                for k in keys:
                    path = os.path.join(paths["out"], f"{label}.int8.t{threads}.{k}.npy")
                    runners[k].send(f"save {path}")
                    out[k] = np.load(path).astype(np.float64)
                first = {"out": out, "partitions": runners["bp"].info.get("partitions"),
                         "backends": runners["bp"].info.get("backends", "")}
        finally:
            for r in runners.values():
                r.close()
    out = first["out"]
    med = {k: statistics.median(x for turn in v for x in turn) for k, v in turns.items()}
    return {
        "model": label, "mode": mode, "threads": threads, "runs": args.runs,
        "bp_ms": med["bp"], "ort_ms": med["ort"], "float_ms": med["float"],
        "ratio": paired(turns, "bp", "ort"),
        "speedup": paired(turns, "float", "bp"),
        "out_scale": output_scale(int8_path),
        "rule_steps": int8_rule_steps(int8_path),
        "vs_ort": float(np.abs(out["bp"] - out["ort"]).max()),
        "ort_max": float(np.abs(out["ort"]).max()),
        "vs_cpuref": float(np.abs(out["bp"] - ref).max()),
        "cpuref_max": float(np.abs(ref).max()),
        "int8_vs_float": float(np.abs(out["bp"] - out["float"]).max() /
                               max(float(np.abs(out["float"]).max()), 1e-30)),
        "partitions": first["partitions"], "backends": first["backends"],
        "turn_ms": {k: [round(statistics.median(x), 4) for x in v] for k, v in turns.items()},
    }


def diff_text(r, key):
    """max |difference| in steps of the output's scale, else plainly and relative to the
    other's max |output|."""
    diff, peak = r["vs_" + key], r[key + "_max"]
    if r["out_scale"]:
        return f"{diff / r['out_scale']:.2f} steps"
    return f"{diff:.1e} ({diff / max(peak, 1e-30):.1e} of max)"


def table(rows, header):
    lines = header + [
        "",
        "| model | quantization | threads | Backplane int8 ms | ORT int8 ms | "
        "Backplane/ORT int8 | Backplane float ms | int8 speedup over float | output scale | "
        "int8 rule bound | Backplane vs ORT int8 output | Backplane vs CpuRef int8 output | "
        "int8 vs float output | partitions | backends |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        scale = f"{r['out_scale']:.3g}" if r["out_scale"] else "-"
        rule = f"{r['rule_steps']} steps" if r["out_scale"] else "float rule"
        lines.append(
            f"| {r['model']} | {r['mode']} | {r['threads']} | {r['bp_ms']:.2f} | "
            f"{r['ort_ms']:.2f} | {r['ratio']:.2f} | {r['float_ms']:.2f} | {r['speedup']:.2f}x | "
            f"{scale} | {rule} | {diff_text(r, 'ort')} | {diff_text(r, 'cpuref')} | "
            f"{r['int8_vs_float']:.1e} | {r['partitions']} | {r['backends']} |")
    verdicts = []
    for t, sel, mean, worst in run_bench.by(rows, "threads"):
        speed = geomean([r["speedup"] for r in sel])
        lines.append(f"| **geometric mean, {len(sel)} models** | | {t} | | | **{mean:.2f}** | | "
                     f"**{speed:.2f}x** | | | | | | | |")
        lines.append(f"| worst: {worst['model']} | | {t} | | | {worst['ratio']:.2f} "
                     "| | | | | | | | |")
        slow = [r for r in sel if r["ratio"] > 1.10]
        static = [r for r in sel if r["mode"] == "static"]
        no_gain = [r for r in static if r["speedup"] < 1.5]
        outside = [r for r in sel if not (within_rule(r, "cpuref") and within_rule(r, "ort"))]
        if mean > 0.90 or slow or no_gain or outside:
            verdicts.append(f"at {t} thread(s) the geometric mean is {mean:.2f}, {len(slow)} of "
                            f"{len(sel)} rows are above 1.10, {len(no_gain)} of {len(static)} "
                            f"static rows gain less than 1.5x, {len(outside)} rows' outputs are "
                            "outside the int8 rule")
    if not rows:
        return "\n".join(lines)
    lines += [
        "",
        "Targets: Backplane/ORT int8 geometric mean at most 0.90 at each thread count and no row "
        "above 1.10; int8 at least 1.5x faster than Backplane float on each static (QDQ) model; "
        "every output within the int8 rule of CpuRef's and of ONNX Runtime's (the rule's bound: "
        "one step of the output's scale per quantizing node on the longest path to it). "
        + ("This run meets them." if not verdicts else
           "Not met: " + "; ".join(verdicts) + "."),
    ]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--models", default=os.environ.get("BENCH_MODELS") or
                    ",".join(bench_models.QUANTIZED),
                    help="comma-separated catalog names (bench/bench_models.py) or .onnx paths, "
                         "each quantized statically unless NAME:dynamic (default: BENCH_MODELS, "
                         "else " + ",".join(bench_models.QUANTIZED) + ")")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=30, help="timed runs per runtime")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--block", type=int, default=3, help="timed runs per turn")
    ap.add_argument("--process-sets", type=int, default=2,
                    help="sets of fresh processes the runs are shared among, one after the other")
    ap.add_argument("--no-pin", action="store_true",
                    help="at 1 thread, leave each process on the CPU the kernel chooses")
    ap.add_argument("--gap", type=float, default=0.2,
                    help="seconds between turns (ONNX Runtime's threads spin-wait after a run)")
    args = ap.parse_args()

    build = os.path.abspath(args.build_dir)
    bench_dir = os.path.join(build, "bench")
    paths = {
        "models": os.path.join(bench_dir, "models"),
        "out": os.path.join(bench_dir, "outputs"),
        "bench_bin": os.path.join(bench_dir, "backplane_bench"),
        "backend_dir": os.path.join(build, "lib", "backplane", "backends"),
        "cli": os.path.join(build, "bin", "backplane"),
    }
    for p in (paths["bench_bin"], paths["cli"],
              os.path.join(paths["backend_dir"], "Backplane_CpuOneDnn_backend.so")):
        if not os.path.exists(p):
            sys.exit(f"int8_bench: {p} is missing (run `make bench`, which builds it)")
    os.makedirs(paths["out"], exist_ok=True)
    log(f"int8: generating and quantizing models into {paths['models']} (cached)")
    models = [model_set(m, paths) for m in args.models.split(",") if m]
    paths["ort_module"], ort_version, _ = run_bench.ensure_ort(bench_dir)
    isa = cpu_isa()
    dnnl_isa = onednn_isa(paths["cli"], paths["backend_dir"],
                          min((m[2] for m in models), key=os.path.getsize))
    rows = []
    for files in models:
        ref = cpuref_output(paths, files[3], files[4])
        for threads in [int(t) for t in args.threads.split(",") if t]:
            log(f"int8: {files[0]} at {threads} thread(s)")
            r = bench_one(args, files, threads, paths, ref)
            log(f"  Backplane int8 {r['bp_ms']:.2f} ms, ORT int8 {r['ort_ms']:.2f} ms "
                f"({r['ratio']:.2f}), Backplane float {r['float_ms']:.2f} ms "
                f"({r['speedup']:.2f}x)")
            rows.append(r)
    header = [
        f"Quantized models. Machine: {run_bench.cpu_model()}, {os.cpu_count()} logical CPUs; "
        f"ISA: {isa}; oneDNN dispatches to: {dnnl_isa}. ONNX Runtime {ort_version} (npm "
        "onnxruntime-node) runs the same int8 file. Models quantized by scripts/quantize_qdq.py: "
        "static = QDQ, per-channel int8 weights, per-tensor uint8 activations calibrated on "
        f"{bench_models.QUANTIZE_SAMPLES} seeded inputs; dynamic = DynamicQuantizeLinear + "
        f"MatMulInteger. {args.runs} timed runs each after {args.warmup} warm-up, in alternating "
        f"turns of {args.block} (Backplane int8, ORT int8, Backplane float), in "
        f"{args.process_sets} set(s) of fresh processes; median latency. Backplane/ORT and the "
        "speedup (float ms / int8 ms) are medians over the turns of a turn's ratio to its "
        "neighbour's. Outputs: max |Backplane int8 - ORT int8| and max |Backplane int8 - "
        "CpuRef int8| (`backplane run --backends CpuRef`) in steps of the output's quantization "
        "scale (static) or plainly (dynamic); int8 vs float: max |Backplane int8 - Backplane "
        "float| / max |float|. Partitions and backends: Backplane's int8 model.",
    ]
    text = table(rows, header)
    print(text)
    with open(os.path.join(bench_dir, "int8_results.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(bench_dir, "int8_results.json"), "w") as f:
        json.dump({"isa": isa, "onednn_isa": dnnl_isa, "ort_version": ort_version, "rows": rows},
                  f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
