#!/usr/bin/python3
"""Backplane (CpuOneDnn) against ONNX Runtime on real models: `make bench`.

For each model and thread count this starts three long-lived processes, one
after the other so their start-up is not disturbed (in `--process-sets` sets
of fresh processes, one set after the other, the runs shared among them;
which starts first rotates from set to set):
  backplane_bench dynamic  Backplane as an application uses it, CpuOneDnn loaded
                           from Backplane_CpuOneDnn_backend.so
  node ort_runner.js       ONNX Runtime (npm onnxruntime-node) with
                           intraOpNumThreads = threads
  backplane_bench static   the same, CpuOneDnn linked statically
Each reports its load-to-first-result (runtime/library load + model load +
first inference). After a warm-up, the three take turns on the same input
(`--block` timed runs per turn, after one untimed run), so machine noise hits
all of them alike (at 1 thread the three of a round run on one CPU, the next
round on the other: one virtual CPU can be slower than the other for seconds);
each times its own inference. Reported: median latencies,
Backplane/ORT and dynamic/static (each the median over turns of a turn's
median over its neighbour's: the machine's speed changes for seconds at a
time), max |bp - ort| / max |ort| on the outputs, load-to-first-result
and peak and steady RSS (after its timed runs) above the process's RSS before loading (node
itself is ~40 MB).

Then a load table for resnet50 (`--load-model`): compiled with `backplane
compile --external-data` and loaded from the .bpk (checksums at load, and
lazy), against importing the .onnx and against ONNX Runtime's session
creation, in fresh processes.

Models (`--models`, or BENCH_MODELS=a,b,c for `make bench`): names of
bench/bench_models.py's catalog (torchvision 0.14 models across families,
two of scripts/gen_zoo.py's detectors at 320x320, LSTM and GRU taggers and
the BERT-style encoder, seeded random weights, generated here; the default is
all of them) or paths of .onnx files a user brings (one input;
a seeded random input is made for it). Per model also: its partitions and
backends in Backplane, and its achieved GFLOP/s (Conv/MatMul/Gemm work over
the median latency) as a share of oneDNN's sgemm rate measured in the same
run at the same thread count (bench/sgemm_peak.cpp).
Needs Debian's /usr/bin/python3 (numpy, torch, torchvision, onnx), node and npm.
"""
import argparse
import json
import os
import platform
import shutil
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


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def model_files(spec, out_dir):
    """(label, .onnx path, input .npy path) of a catalog name or a user's .onnx path."""
    if spec.endswith(".onnx") or os.sep in spec:
        if not os.path.isfile(spec):
            sys.exit(f"bench: {spec}: no such file")
        onnx_path, input_path = bench_models.user_model(spec, out_dir)
        return os.path.splitext(os.path.basename(spec))[0], onnx_path, input_path
    if spec not in bench_models.CATALOG:
        sys.exit(f"bench: unknown model '{spec}': give a name of bench/bench_models.py's catalog "
                 f"({', '.join(bench_models.CATALOG)}) or the path of an .onnx file")
    onnx_path, input_path = bench_models.generate(spec, out_dir)
    return spec, onnx_path, input_path


def sgemm_peak(paths, threads):
    """oneDNN's sgemm GFLOP/s at `threads` (bench/sgemm_peak.cpp)."""
    out = subprocess.run([paths["sgemm_bin"], str(threads)], check=True, capture_output=True, text=True).stdout
    return json.loads(out)["gflops"]


def ensure_ort(bench_dir):
    prefix = os.path.join(bench_dir, "ort")
    module = os.path.join(prefix, "node_modules", "onnxruntime-node")
    if not os.path.exists(os.path.join(module, "package.json")):
        if shutil.which("npm") is None or shutil.which("node") is None:
            sys.exit("bench: needs node and npm for ONNX Runtime: run `bash scripts/install-deps.sh --bench` first")
        log(f"installing onnxruntime-node into {prefix}")
        os.makedirs(prefix, exist_ok=True)
        if subprocess.run(["npm", "install", "--ignore-scripts", "--no-audit", "--no-fund", "--prefix", prefix,
                           "onnxruntime-node"]).returncode != 0:
            sys.exit("bench: `npm install onnxruntime-node` failed (npm's message above); it needs the npm registry")
    libs = [os.path.join(d, f) for d, _, fs in os.walk(module) for f in fs
            if f.startswith("libonnxruntime.so") and "x64" in d]
    if not libs:
        sys.exit("bench: onnxruntime-node has no linux-x64 libonnxruntime.so")
    with open(os.path.join(module, "package.json")) as f:
        version = json.load(f)["version"]
    return module, version, libs[0]


class Runner:
    """One benchmark process speaking the line protocol of ort_runner.js / backplane_bench."""

    def __init__(self, name, argv, env=None):
        self.name = name
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
                                     env=env)
        ready = self._read()
        if not ready.get("ready"):
            raise RuntimeError(f"{name}: did not start: {ready}")
        self.load_ms = ready["load_ms"]
        self.base_rss_kb = ready.get("base_rss_kb", 0)  # the process's own RSS before loading
        self.info = ready

    def _status(self, key):
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith(key + ":"):
                        return int(line.split()[1])
        except OSError:
            return None
        return None

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name}: exited (status {self.proc.wait()})")
        return json.loads(line)

    def send(self, cmd):
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return self._read()

    def run(self, k):
        return self.send(f"run {k}")["times_ms"]

    def _tids(self):
        try:
            return os.listdir(f"/proc/{self.proc.pid}/task")
        except OSError:
            return []

    def threads_cpu(self):
        """{thread id: (CPU ticks used, CPU it last ran on)} from /proc."""
        out = {}
        for tid in self._tids():
            try:
                with open(f"/proc/{self.proc.pid}/task/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            # After the command: field 3 (state) is fields[0]; utime, stime
            # are fields 14, 15; processor is field 39.
            out[tid] = (int(fields[11]) + int(fields[12]), int(fields[36]))
        return out

    def pin(self, cpu):
        """Every thread of the process onto `cpu` (threads it makes later
        inherit the mask of the thread that makes them)."""
        for tid in self._tids():
            try:
                os.sched_setaffinity(int(tid), {cpu})
            except OSError:
                pass

    def timed_turn(self, k):
        """`run k`, and the CPUs the threads that worked in it last ran on
        ("0", "0,1", or "" when no thread used a whole tick): a process can
        stay on one (virtual) CPU for its life, and a CPU can be slower than
        the other for a while on a shared host."""
        before = self.threads_cpu()
        times = self.run(k)
        after = self.threads_cpu()
        cpus = sorted({cpu for tid, (ticks, cpu) in after.items() if ticks > before.get(tid, (0, 0))[0]})
        return times, ",".join(str(c) for c in cpus)

    def peak_rss_mb(self):
        return (self._status("VmHWM") - (self.base_rss_kb or 0)) / 1024.0

    def steady_rss_mb(self):
        """Resident memory now (after the timed runs), above the process's own before loading."""
        return (self._status("VmRSS") - (self.base_rss_kb or 0)) / 1024.0

    def close(self):
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
        except OSError:
            pass
        self.proc.wait(timeout=30)


def compiled(paths, model, onnx_path, input_path, threads):
    """MODEL.tN.bpk compiled by `backplane compile --threads N` at the input's
    shape (weights inside; oneDNN may choose other layouts at another thread
    count, and a payload loaded at another count is recompiled), cached by
    mtime: made again when older than the model, the CLI or any backend file
    (a .bpk from an older build may be read, but is not what this build
    compiles). None for a model that cannot be compiled ahead of time (shapes
    that depend on data, as a detector's after NMS): it runs from its .onnx."""
    bpk = os.path.join(paths["models"], f"{model}.t{threads}.bpk")
    shape = ",".join(str(d) for d in np.load(input_path, mmap_mode="r").shape)
    sources = [onnx_path, paths["cli"]] + [os.path.join(paths["backend_dir"], f)
                                           for f in os.listdir(paths["backend_dir"])]
    sources += [os.path.join(d, f) for d in [os.path.join(paths["backend_dir"], "..", "onednn")]
                if os.path.isdir(d) for f in os.listdir(d)]
    if not os.path.exists(bpk) or os.path.getmtime(bpk) < max(os.path.getmtime(f) for f in sources):
        done = subprocess.run([paths["cli"], "--backend-path", paths["backend_dir"], "compile", onnx_path, "-o",
                               bpk, "--threads", str(threads), "--shape", f"{input_name(onnx_path)}={shape}"],
                              capture_output=True, text=True)
        if done.returncode != 0:
            log(f"{model}: no .bpk ({done.stderr.strip().splitlines()[-1] if done.stderr.strip() else 'failed'})")
            return None
    return bpk


def input_name(onnx_path):
    """The model's first input that is not an initializer."""
    import onnx
    model = onnx.load(onnx_path, load_external_data=False)
    constants = {t.name for t in model.graph.initializer}
    return next(i.name for i in model.graph.input if i.name not in constants)


def first_result(paths, model, onnx_path, input_path, threads, processes=5, after=5, budget_s=5.0,
                 most=9):
    """Ready and first-result times of fresh processes loading the compiled
    .bpk, and the first inference over the median of the `after` runs that
    follow it in the same process. Taken from the process with the median
    ratio of at least `processes` of them, and more (up to `most`, odd) while
    they take less than `budget_s` altogether: one first run is one sample,
    and on a small model a few microseconds of this machine's noise are
    several percent of it (the encoder's 0.2 ms run: 1.02-1.13 over 8 fresh
    processes, with no page fault or context switch in its first run). On
    the 2-vCPU VMs this was measured on, one vCPU ran at about two thirds of
    its speed for tens of milliseconds to seconds at a time, unseen by the
    guest's steal time (seen by two OpenMP threads each timing an equal share
    of one loop); runs next to each other in one process share that state, the steady
    median of the alternating turns does not."""
    bpk = compiled(paths, model, onnx_path, input_path, threads)
    if bpk is None:
        return None, None, None, 0
    samples = []
    start = time.monotonic()
    while len(samples) < processes or (len(samples) < most and time.monotonic() - start < budget_s):
        r = Runner("backplane(.bpk)", [paths["bench_bin"], "dynamic", bpk, input_path, str(threads),
                                       paths["backend_dir"]])
        info = r.info
        steady = statistics.median(r.run(after))
        r.close()
        if info.get("notes"):
            raise RuntimeError(f"{model}: the .bpk was not used as compiled: {info['notes']}")
        samples.append((info["first_ms"] / steady, info["ready_ms"], info["load_ms"]))
    if len(samples) % 2 == 0:
        samples.pop()  # an odd count has one median process
    ratio, ready, first = sorted(samples)[len(samples) // 2]
    return ready, first, ratio, len(samples)


def cpuref_share(paths, onnx_path, input_path, threads, warmup=3, runs=10):
    """The share of steady runs' time spent in CpuRef partitions: `backplane
    run --profile` (docs/profiling.md), the first run and `warmup` more left
    out. Run after the timed turns, alone."""
    import onnx
    m = onnx.load(onnx_path, load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    name = next(i.name for i in m.graph.input if i.name not in inits)
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "trace.json")
        subprocess.run([paths["cli"], "--backend-path", paths["backend_dir"], "run", onnx_path,
                        "--input", f"{name}={input_path}", "--threads", str(threads),
                        "--warmup", str(warmup), "--runs", str(runs), "--profile", trace, "--json"],
                       check=True, capture_output=True)
        events = [e for e in json.load(open(trace))["traceEvents"] if e.get("ph") == "X"]
    run_spans = sorted((e for e in events if e["cat"] == "run"), key=lambda e: e["ts"])[1 + warmup:]
    total = sum(r["dur"] for r in run_spans)
    cpuref = sum(e["dur"] for e in events
                 if e["cat"] == "partition" and e.get("args", {}).get("backend") == "CpuRef" and
                 any(r["ts"] <= e["ts"] and e["ts"] + e["dur"] <= r["ts"] + r["dur"] for r in run_spans))
    return cpuref / total if total > 0 else 0.0


def paired(turns, a, b):
    """Median over turns of a's turn median / b's turn median. The turns of
    the runtimes alternate, so a turn and its neighbour see the machine in
    the same state: on this VM a state lasts seconds (a 2-thread run of
    every runtime 1.5 times slower for 2-4 s at a time, several times a
    minute), long enough to take half the turns of one runtime and fewer of
    the other, which moved a ratio of whole-run medians by up to 30% (0.71
    to 1.16 for the same two builds). Paired turns cancel it."""
    return statistics.median(statistics.median(x) / statistics.median(y) for x, y in zip(turns[a], turns[b]))


def bench_one(args, files, threads, paths, first=True):
    model, onnx_path, input_path = files
    t = str(threads)
    bpk_ready, bpk_first, bpk_first_ratio, bpk_processes = None, None, None, 0
    if first:
        bpk_ready, bpk_first, bpk_first_ratio, bpk_processes = first_result(paths, model, onnx_path, input_path,
                                                                             threads)
        time.sleep(args.gap)
    runners = {}
    turns = {"static": [], "bp": [], "ort": []}
    turn_cpus = {k: [] for k in turns}
    first_set = {}
    try:
        # All three run in `process_sets` sets of fresh processes, one set
        # after the other, the runs shared among them: the same build in two
        # processes can differ by 5% for the whole life of each (where its
        # memory lands, which virtual CPU it stays on), which no pairing of
        # turns within one process cancels; every runtime gets as many
        # processes as the others.
        done = 0
        for set_index in range(args.process_sets):
            runs = -(-(args.runs - done) // (args.process_sets - set_index))
            # The static build takes its turn first, so the dynamic build's
            # turn is next to both others'.
            make = {
                "static": lambda: Runner("backplane(static)", [paths["bench_bin"] + "_static", "static", onnx_path,
                                                               input_path, t]),
                "bp": lambda: Runner("backplane(dynamic)", [paths["bench_bin"], "dynamic", onnx_path, input_path, t,
                                                            paths["backend_dir"]]),
                "ort": lambda: Runner("onnxruntime", ["node", os.path.join(HERE, "ort_runner.js"),
                                                      paths["ort_module"], onnx_path, input_path, t]),
            }
            # The process started first in a set runs slower for its life
            # (on this VM, 5-6% median over 8 sets of three identical processes,
            # 1-14% each), so which runtime starts first rotates from set to
            # set. The turns keep their order.
            keys = list(make)
            for k in keys[set_index % 3:] + keys[:set_index % 3]:
                runners[k] = make[k]()
            runners = {k: runners[k] for k in keys}
            # Warm-up: each runtime's runs with a pause after them (a pool
            # that just ran spins), then one untimed round of turns. Every
            # process of a set was idle while the later ones loaded, and a
            # process's first runs after that are slow for a while (on this
            # VM the first one started took 1.5-2x for its warm-up and first
            # two turns when timing began right after the warm-ups).
            for r in runners.values():
                r.run(args.warmup)
                time.sleep(args.gap)
            for r in runners.values():
                r.run(args.block + 1)
                time.sleep(args.gap)
            # Turns of `block` timed runs each, after one untimed run that
            # wakes the runtime's threads again; the runtimes take turns until
            # each has this set's runs.
            while runs > 0:
                k_runs = min(args.block, runs)
                for k, r in runners.items():
                    if threads == 1 and not args.no_pin:
                        # At 1 thread the runtimes of a round share one CPU,
                        # the next round the other: a process stays on the
                        # CPU it woke on, and one CPU of this VM runs up to
                        # 1.6x slower than the other for seconds at a time.
                        r.pin(len(turns[k]) % min(2, os.cpu_count()))
                    times, cpus = r.timed_turn(k_runs + 1)
                    turns[k].append(times[1:])
                    turn_cpus[k].append(cpus)
                    # Let the threads of the runtime that just ran stop
                    # spinning and park before the next one starts (both
                    # pools spin-wait).
                    time.sleep(args.gap)
                runs -= k_runs
                done += k_runs
            if set_index == 0:
                # Outputs, load times and memory: the first set's processes.
                bp, ort = runners["bp"], runners["ort"]
                out = {}
                for k, r in (("bp", bp), ("ort", ort)):
                    path = os.path.join(paths["out"], f"{model}.t{threads}.{k}.npy")
                    r.send(f"save {path}")
                    out[k] = np.load(path).astype(np.float64)
                first_set = {"out": out, "load_ms": bp.load_ms, "ready_ms": bp.info["ready_ms"],
                             "rss_mb": bp.peak_rss_mb(), "steady_rss_mb": bp.steady_rss_mb(),
                             "backends": bp.info.get("backends", ""),
                             "partitions": bp.info.get("partitions"), "ort_load_ms": ort.load_ms,
                             "ort_ready_ms": ort.info["ready_ms"], "ort_first_ms": ort.info["first_ms"],
                             "ort_rss_mb": ort.peak_rss_mb(), "ort_steady_rss_mb": ort.steady_rss_mb()}
            for k in list(runners):
                runners.pop(k).close()
        bp_out, ort_out = first_set["out"]["bp"], first_set["out"]["ort"]
        # A detector's first output has a row per detection: a count that
        # differs is as far apart as outputs get.
        rel = (float(np.abs(bp_out - ort_out).max() / max(np.abs(ort_out).max(), 1e-30))
               if bp_out.shape == ort_out.shape and bp_out.size else
               0.0 if bp_out.shape == ort_out.shape else float("inf"))
        med = {k: statistics.median(x for turn in v for x in turn) for k, v in turns.items()}
        return {
            "model": model, "threads": threads,
            "bp_ms": med["bp"], "ort_ms": med["ort"], "static_ms": med["static"],
            "ratio": paired(turns, "bp", "ort"), "dyn_static": paired(turns, "bp", "static"),
            "turns": len(turns["bp"]), "bpk_processes": bpk_processes,
            # Each runtime's turn medians in order, for results.json: what the
            # paired ratios were taken over.
            "turn_ms": {k: [round(statistics.median(x), 4) for x in v] for k, v in turns.items()},
            # The CPUs each runtime's working threads were on at the end of
            # each turn: where a row's ratio came from when one CPU was slow.
            "turn_cpus": turn_cpus,
            "rel_diff": rel,
            "bp_load_ms": first_set["load_ms"], "ort_load_ms": first_set["ort_load_ms"],
            "bp_ready_ms": first_set["ready_ms"], "ort_ready_ms": first_set["ort_ready_ms"],
            "ort_first_ratio": first_set["ort_first_ms"] / med["ort"],
            "bpk_ready_ms": bpk_ready, "bpk_first_ms": bpk_first, "bpk_first_ratio": bpk_first_ratio,
            "bp_rss_mb": first_set["rss_mb"], "ort_rss_mb": first_set["ort_rss_mb"],
            "bp_steady_rss_mb": first_set["steady_rss_mb"], "ort_steady_rss_mb": first_set["ort_steady_rss_mb"],
            "backends": first_set["backends"], "partitions": first_set["partitions"],
            "runs": args.runs,
        }
    finally:
        for r in runners.values():
            r.close()


def cpu_summary(turn_cpus):
    """How many turns each runtime's working threads ended on each CPU set,
    e.g. "CPUs of the turns: bp 0 x6, 1 x4; static 0 x10; ort 1 x10"."""
    parts = []
    for k, cpus in turn_cpus.items():
        counts = {c: cpus.count(c) for c in sorted(set(cpus))}
        parts.append(f"{k} " + ", ".join(f"{c or '-'} x{n}" for c, n in counts.items()))
    return "CPUs of the turns: " + "; ".join(parts)


def bench_load(args, files, paths):
    """Load to first result of a model compiled (.bpk + .bpd, eager and lazy
    checksums) vs its .onnx file vs ONNX Runtime's session creation, one
    thread, each in `args.load_runs` fresh processes; medians."""
    model, onnx_path, input_path = files
    bpk = os.path.join(paths["models"], model + ".bpk")
    # Compiled for the thread count it is loaded at: oneDNN may choose another
    # kernel, and with it another weights layout, for another count (ResNet-50
    # on a Xeon with AVX-512: layer3's 3x3 convolutions at 1 thread against
    # 2), and the loader then recompiles the partition instead of using it.
    compile_cmd = [paths["cli"], "--backend-path", paths["backend_dir"], "compile", onnx_path, "-o", bpk,
                   "--external-data", os.path.join(paths["models"], model + ".bpd"), "--threads", "1", "--json"]
    report = json.loads(subprocess.run(compile_cmd, check=True, capture_output=True, text=True).stdout)
    variants = [
        ("Backplane .bpk + .bpd (checksums at load)", [paths["bench_bin"], "dynamic", bpk, input_path, "1",
                                                        paths["backend_dir"]]),
        ("Backplane .bpk + .bpd (--lazy-checksums)", [paths["bench_bin"], "dynamic", bpk, input_path, "1",
                                                       paths["backend_dir"], "lazy"]),
        ("Backplane .onnx (import, partition, compile)", [paths["bench_bin"], "dynamic", onnx_path, input_path, "1",
                                                          paths["backend_dir"]]),
        ("ONNX Runtime .onnx (session creation)", ["node", os.path.join(HERE, "ort_runner.js"), paths["ort_module"],
                                                   onnx_path, input_path, "1"]),
    ]
    samples = {name: [] for name, _ in variants}
    for _ in range(args.load_runs):
        for name, argv in variants:  # alternating, fresh processes
            r = Runner(name, argv)
            i = r.info
            if name.startswith("Backplane") and i.get("notes"):
                raise RuntimeError(f"{name}: {i['notes']}")
            samples[name].append((i["ready_ms"], i["load_ms"], (i["ready_rss_kb"] - i["base_rss_kb"]) / 1024.0,
                                  (i["ready_anon_kb"] - i["base_anon_kb"]) / 1024.0, i.get("backends", "")))
            r.close()
            time.sleep(args.gap)
    rows = []
    for name, _ in variants:
        s = samples[name]
        rows.append({"variant": name, "ready_ms": statistics.median(x[0] for x in s),
                     "first_ms": statistics.median(x[1] for x in s), "rss_mb": statistics.median(x[2] for x in s),
                     "anon_mb": statistics.median(x[3] for x in s), "backends": s[0][4]})
    onnx_ready = rows[2]["ready_ms"]
    for r in rows:
        r["speedup"] = onnx_ready / r["ready_ms"]
    return {"model": model, "runs": args.load_runs, "bpk_bytes": report["file_bytes"],
            "bpd_bytes": report["external_bytes"], "rows": rows}


def load_table(load):
    lines = [
        f"Load of {load['model']} at 1 thread, median of {load['runs']} fresh processes each (alternating): "
        f".bpk {load['bpk_bytes'] / 1e6:.1f} MB + .bpd {load['bpd_bytes'] / 1e6:.1f} MB, compiled by "
        "`backplane compile --external-data`. Ready = runtime created, model loaded, session made; first result = "
        "ready + the first inference. RSS = resident memory above the process's own before loading, with the "
        "session ready (all pages, incl. the mapped file's); private = RssAnon (without mapped files).",
        "",
        "| load | ready ms | first result ms | .onnx ready / this ready | RSS after load MB | private MB | backends |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in load["rows"]:
        lines.append(f"| {r['variant']} | {r['ready_ms']:.1f} | {r['first_ms']:.1f} | {r['speedup']:.1f}x | "
                     f"{r['rss_mb']:.0f} | {r['anon_mb']:.0f} | {r['backends'] or 'ONNX Runtime CPU'} |")
    return "\n".join(lines)


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def geomean(xs):
    return float(np.exp(np.mean(np.log(xs)))) if xs else float("nan")


def by(rows, key):
    """(value of `key`, its rows, their geometric-mean ratio, the worst row), per value."""
    for k in sorted({r[key] for r in rows}):
        sel = [r for r in rows if r[key] == k]
        yield k, sel, geomean([r["ratio"] for r in sel]), max(sel, key=lambda r: r["ratio"])


def table(results, ort_version, args, peaks):
    peak_text = ", ".join(f"{t} thread(s) {g:.0f}" for t, g in sorted(peaks.items()))
    lines = [
        f"Machine: {cpu_model()}, {os.cpu_count()} logical CPUs; ONNX Runtime {ort_version} (npm onnxruntime-node); "
        f"{results[0]['runs'] if results else 0} timed runs each after {args.warmup} warm-up, in alternating turns of "
        f"{args.block} (each turn after one untimed run, {args.gap:g} s between turns), in {args.process_sets} "
        "set(s) of fresh processes (Backplane's two builds and ONNX Runtime; which starts first rotates) one after "
        "the other, sharing the runs"
        f"{'' if args.no_pin else '; at 1 thread the runtimes of a round of turns on one CPU, the next round on the other'}"
        "; median latency. "
        "Backplane/ORT and dynamic/static: the median over the turns of the ratio of a turn's median to the "
        "median of the other runtime's turn next to it (the machine's speed changes for seconds at a time; "
        "neighbouring turns share it). "
        f"oneDNN sgemm rate in this run (GFLOP/s): {peak_text}. GFLOP/s = 2 x the multiply-adds of the model's "
        "Conv/MatMul/Gemm nodes / Backplane's median latency; share = that / the sgemm rate at the same thread count. "
        "CpuRef share: the part of a steady run's time in CpuRef partitions, from `backplane run --profile` "
        "(docs/profiling.md).",
        "",
        "| model | family | threads | Backplane ms | ORT ms | Backplane/ORT | max rel diff | partitions | backends | "
        "CpuRef share | GFLOP | Backplane GFLOP/s | share of sgemm peak | static ms | dynamic/static |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        gf = r.get("gflop")
        rate = gf / (r["bp_ms"] / 1e3) if gf else None
        share = f"{rate / peaks[r['threads']]:.0%}" if rate and peaks.get(r["threads"]) else "-"
        lines.append(
            f"| {r['model']} | {r['family']} | {r['threads']} | {r['bp_ms']:.2f} | {r['ort_ms']:.2f} | "
            f"{r['ratio']:.2f} | {r['rel_diff']:.1e} | {r['partitions']} | {r['backends']} | "
            f"{r['cpuref_share']:.1%} | {f'{gf:.2f}' if gf else '-'} | {f'{rate:.1f}' if rate else '-'} | {share} | "
            f"{r['static_ms']:.2f} | {r['dyn_static']:.3f} |")
    for t, rows, mean, worst in by(results, "threads"):
        lines.append(f"| **geometric mean, {len(rows)} models** | | {t} | | | **{mean:.2f}** "
                     f"| | | | | | | | | {geomean([r['dyn_static'] for r in rows]):.3f} |")
        lines.append(f"| worst: {worst['model']} | | {t} | | | {worst['ratio']:.2f} | | | | | | | | | |")
    lines += [
        "",
        "Loading and memory, same processes:",
        "",
        "| model | threads | load-to-first Backplane ms | load-to-first ORT ms | peak RSS Backplane MB | "
        "peak RSS ORT MB | steady RSS Backplane MB | steady RSS ORT MB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(f"| {r['model']} | {r['threads']} | {r['bp_load_ms']:.0f} | {r['ort_load_ms']:.0f} | "
                     f"{r['bp_rss_mb']:.0f} | {r['ort_rss_mb']:.0f} | {r['bp_steady_rss_mb']:.0f} | "
                     f"{r['ort_steady_rss_mb']:.0f} |")
    lines += [
        "",
        "Time to first result, fresh processes (ms from before the runtime is created / ONNX Runtime's library is "
        "loaded): ready = model loaded and session made; first = ready + the first inference. First run / steady = "
        "the first inference from the .bpk over the median of the 5 runs after it in the same process; the .bpk "
        "columns are the one with the median of that ratio of 5 to 9 fresh processes (as many as fit in 5 s, an "
        "odd count). ORT first run / steady: ONNX Runtime's first inference after its session is made over the "
        "median of its timed runs, for comparison (one process).",
        "",
        "| model | threads | .onnx ready | .onnx first | .bpk ready | .bpk first | ORT ready | ORT first | "
        ".onnx first / ORT first | .bpk first / ORT first | first run / steady (.bpk) | ORT first run / steady |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if r["bpk_first_ms"] is None:
            continue
        lines.append(
            f"| {r['model']} | {r['threads']} | {r['bp_ready_ms']:.0f} | {r['bp_load_ms']:.0f} | "
            f"{r['bpk_ready_ms']:.0f} | {r['bpk_first_ms']:.0f} | {r['ort_ready_ms']:.0f} | {r['ort_load_ms']:.0f} | "
            f"{r['bp_load_ms'] / r['ort_load_ms']:.2f} | {r['bpk_first_ms'] / r['ort_load_ms']:.2f} | "
            f"{r['bpk_first_ratio']:.2f} | {r['ort_first_ratio']:.2f} |")
    return "\n".join(lines)


class Busy:
    """N processes that keep a CPU busy each (a shell loop), for the
    contended mode: the same for both runtimes, which take turns as always."""

    def __init__(self, n):
        self.procs = [subprocess.Popen(["/bin/sh", "-c", "while :; do :; done"]) for _ in range(n)]

    def __enter__(self):
        time.sleep(0.5)  # let the scheduler see them
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.wait()


def contended_table(rows):
    lines = [
        "Contended: the same alternating protocol with busy processes beside both runtimes (each a shell loop "
        "holding one CPU); median latency; Backplane/ORT over paired turns as above.",
        "",
        "| model | threads | busy processes | Backplane ms | ORT ms | Backplane/ORT | max rel diff |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['model']} | {r['threads']} | {r['busy']} | {r['bp_ms']:.2f} | {r['ort_ms']:.2f} | "
                     f"{r['ratio']:.2f} | {r['rel_diff']:.1e} |")
    for b, sel, mean, worst in by(rows, "busy"):
        lines.append(f"| **geometric mean, {len(sel)} models** | | {b} | | | **{mean:.2f}** "
                     f"| worst: {worst['model']} {worst['ratio']:.2f} |")
    return "\n".join(lines)


def chart(results, path):
    """Backplane / ONNX Runtime per model: steady latency, and first result
    from .onnx and from .bpk; one panel per thread count (matplotlib)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    threads = sorted({r["threads"] for r in results})
    fig, axes = plt.subplots(1, len(threads), figsize=(6 * len(threads), 0.32 * len(results) / len(threads) + 1.6),
                             sharey=True, squeeze=False)
    series = [("steady latency", lambda r: r["ratio"]),
              ("first result, .onnx", lambda r: r["bp_load_ms"] / r["ort_load_ms"]),
              ("first result, .bpk",  # none where a .bpk does not apply: no bar
               lambda r: r["bpk_first_ms"] / r["ort_load_ms"] if r["bpk_first_ms"] else float("nan"))]
    for ax, t in zip(axes[0], threads):
        rows = [r for r in results if r["threads"] == t]
        ys = np.arange(len(rows))
        for k, (label, f) in enumerate(series):
            ax.barh(ys + (k - 1) * 0.27, [f(r) for r in rows], height=0.27, label=label)
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_yticks(ys, [r["model"] for r in rows])
        ax.invert_yaxis()
        ax.set_title(f"{t} thread(s): Backplane / ONNX Runtime (lower is better)")
        ax.grid(axis="x", which="both", alpha=0.3)
    axes[0][0].legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def write_doc(path, text):
    begin, end = "<!-- bench:begin -->", "<!-- bench:end -->"
    with open(path) as f:
        doc = f.read()
    if begin not in doc or end not in doc:
        sys.exit(f"bench: {path} has no {begin} ... {end} section")
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    with open(path, "w") as f:
        f.write(head + begin + "\n" + text + "\n" + end + tail)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--models", default=os.environ.get("BENCH_MODELS") or ",".join(bench_models.DEFAULT),
                    help="comma-separated catalog names (bench/bench_models.py) or .onnx paths "
                         "(default: BENCH_MODELS, else the whole catalog)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--block", type=int, default=3,
                    help="timed runs per turn (1: every timed run follows the other runtime's turn, i.e. starts "
                         "with parked threads)")
    ap.add_argument("--process-sets", type=int, default=3,
                    help="sets of fresh processes (Backplane dynamic and static, ONNX Runtime) the runs are shared "
                         "among, one set after the other")
    ap.add_argument("--no-pin", action="store_true",
                    help="at 1 thread, leave each process on the CPU the kernel chooses (by default the three "
                         "runtimes of a round of turns share one CPU, the next round the other)")
    ap.add_argument("--gap", type=float, default=0.2,
                    help="seconds between alternating runs (ORT's threads spin-wait after a run; "
                         "shorter gaps let that spinning slow the next runtime)")
    ap.add_argument("--busy", default="1,2",
                    help="contended mode: busy-process counts to run beside both runtimes (empty: none)")
    ap.add_argument("--contended-models",
                    default="densenet121,regnet_y_800mf,googlenet,efficientnet_b0,resnet50,mobilenet_v3_large,"
                            "vit_b_16,transformer",
                    help="models of the contended mode")
    ap.add_argument("--contended-threads", type=int, default=2)
    ap.add_argument("--load-model", default="resnet50",
                    help="model of the load table (.bpk vs .onnx vs ONNX Runtime); empty: no load table")
    ap.add_argument("--load-runs", type=int, default=5)
    ap.add_argument("--write-doc", metavar="MD", help="replace the bench section of this Markdown file")
    args = ap.parse_args()
    if args.runs < 30:
        log("note: fewer than 30 timed runs")

    try:  # the chart at the end: fail now, not after the whole run
        import matplotlib  # noqa: F401
    except ImportError:
        sys.exit("bench: matplotlib is missing (scripts/install-deps.sh --bench, which `make bench` runs)")

    build = os.path.abspath(args.build_dir)
    bench_dir = os.path.join(build, "bench")
    paths = {
        "models": os.path.join(bench_dir, "models"),
        "out": os.path.join(bench_dir, "outputs"),
        "bench_bin": os.path.join(bench_dir, "backplane_bench"),
        "backend_dir": os.path.join(build, "lib", "backplane", "backends"),
        "cli": os.path.join(build, "bin", "backplane"),
        "sgemm_bin": os.path.join(bench_dir, "backplane_sgemm_peak"),
    }
    for p in (paths["bench_bin"], paths["bench_bin"] + "_static", paths["cli"], paths["sgemm_bin"],
              os.path.join(paths["backend_dir"], "Backplane_CpuOneDnn_backend.so")):
        if not os.path.exists(p):
            sys.exit(f"bench: {p} is missing (run `make bench`, which builds it)")
    os.makedirs(paths["out"], exist_ok=True)
    specs = [m for m in args.models.split(",") if m]
    log(f"generating models into {paths['models']} (cached)")
    models = [model_files(m, paths["models"]) for m in specs]
    paths["ort_module"], ort_version, ort_lib = ensure_ort(bench_dir)
    log(f"ONNX Runtime {ort_version}: {ort_lib}")
    thread_counts = [int(t) for t in args.threads.split(",") if t]
    peaks = {}
    for threads in thread_counts:
        peaks[threads] = sgemm_peak(paths, threads)
        log(f"oneDNN sgemm at {threads} thread(s): {peaks[threads]:.1f} GFLOP/s")

    results = []
    for files in models:
        gflop = bench_models.flops(files[1])
        for threads in thread_counts:
            log(f"{files[0]} at {threads} thread(s)")
            r = bench_one(args, files, threads, paths)
            log(f"{files[0]} at {threads} thread(s): Backplane/ORT {r['ratio']:.2f}, dynamic/static "
                f"{r['dyn_static']:.3f}; {cpu_summary(r['turn_cpus'])}")
            r["cpuref_share"] = cpuref_share(paths, files[1], files[2], threads)
            r["family"] = bench_models.family(files[0])
            r["gflop"] = gflop / 1e9 if gflop else None
            results.append(r)
            log(f"  Backplane {r['bp_ms']:.2f} ms, ORT {r['ort_ms']:.2f} ms: {r['ratio']:.2f}")
    text = table(results, ort_version, args, peaks)
    contended = []
    busy_counts = [int(b) for b in args.busy.split(",") if b]
    if busy_counts:
        cmodels = [model_files(m, paths["models"]) for m in args.contended_models.split(",") if m]
        for b in busy_counts:
            with Busy(b):
                for files in cmodels:
                    log(f"{files[0]} at {args.contended_threads} thread(s) beside {b} busy process(es)")
                    r = bench_one(args, files, args.contended_threads, paths, first=False)
                    r["busy"] = b
                    contended.append(r)
                    log(f"  Backplane {r['bp_ms']:.2f} ms, ORT {r['ort_ms']:.2f} ms: {r['ratio']:.2f}")
        text += "\n\n" + contended_table(contended)
    load = None
    if args.load_model:
        log(f"load of {args.load_model}: .bpk vs .onnx vs ONNX Runtime")
        load = bench_load(args, model_files(args.load_model, paths["models"]), paths)
        text += "\n\n" + load_table(load)
    print(text)
    with open(os.path.join(bench_dir, "results.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(bench_dir, "results.json"), "w") as f:
        json.dump({"latency": results, "contended": contended, "load": load, "sgemm_gflops": peaks}, f, indent=1)
    chart_path = os.path.join(bench_dir, "ratios.png")
    if results:  # (a contended-only run has no latency rows to chart)
        chart(results, chart_path)
        log(f"chart: {chart_path}")
    if args.write_doc and not results:
        log("--write-doc: no latency rows, the document is left as it is")
    elif args.write_doc:
        image = os.path.join(os.path.dirname(os.path.abspath(args.write_doc)), "images", "bench-ratios.png")
        os.makedirs(os.path.dirname(image), exist_ok=True)
        shutil.copyfile(chart_path, image)
        write_doc(args.write_doc, text + "\n\n![Backplane / ONNX Runtime per model](images/bench-ratios.png)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
