#!/usr/bin/python3
"""GpuOcl rows of `make bench`: a few models on the machine's OpenCL device.

For each model (default resnet18, mobilenet_v2 and the transformer encoder of
bench/bench_models.py) in fresh `backplane run --json` processes:
  - the median latency whole on GpuOcl, beside CpuOneDnn at the same time
    (the CPU backend at --threads; on PoCL the "device" is this same CPU, so
    the comparison says what an OpenCL CPU driver costs, not what a GPU gives);
  - load from the .onnx (import, partition, compile: OpenCL C built) against
    load from a .bpk compiled for GpuOcl (the stored program: nothing built),
    each with an empty PoCL kernel cache (cold) and, for the .onnx, with a
    warm one; ready = runtime created to session made, first result = ready
    + the first inference.
Then host<->device bandwidth (bench/gpuocl_bandwidth.cpp): GpuOcl's copy
slots' blocking write/read at a few sizes.
The device is the one GpuOcl takes by default (a GPU), else OpenCL device 0
named with the configure key `device` (a CPU driver such as PoCL, which
GpuOcl opens only when asked); it is named as the driver names it. Without
GpuOcl or an OpenCL device this says so and writes no rows (exit 0): the
rows are optional.
Writes <build>/bench/gpuocl_results.md and .json.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import bench_models  # noqa: E402


def log(msg):
    print(f"gpuocl bench: {msg}", file=sys.stderr, flush=True)


def run_json(argv, env=None):
    p = subprocess.run(argv, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {p.stderr.strip()[-800:]}")
    try:
        return json.loads(p.stdout)
    except json.JSONDecodeError:
        return json.loads(p.stdout.strip().splitlines()[-1])


def device(cli, config):
    """GpuOcl's selected device with these options, or None."""
    try:
        j = run_json([cli, *config, "backends", "--json"])
    except RuntimeError:
        return None  # e.g. no device 0 to configure
    backends = j["backends"] if isinstance(j, dict) and "backends" in j else j
    for b in backends:
        if b.get("id") == "GpuOcl":
            for d in b.get("devices", []):
                if d.get("selected"):
                    return d
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--models", default="resnet18,mobilenet_v2,transformer")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="CpuOneDnn's threads for its row")
    ap.add_argument("--load-runs", type=int, default=3)
    args = ap.parse_args()

    build = os.path.abspath(args.build_dir)
    bench_dir = os.path.join(build, "bench")
    cli = os.path.join(build, "bin", "backplane")
    cpu_dir = os.path.join(build, "lib", "backplane", "backends")
    bandwidth_bin = os.path.join(bench_dir, "backplane_gpuocl_bandwidth")
    if not os.path.exists(os.path.join(cpu_dir, "Backplane_GpuOcl_backend.so")):
        log("GpuOcl is not built here (OpenCL or CLBlast missing): no GpuOcl rows")
        return 0
    gpu = []
    dev = device(cli, gpu)
    if dev is None:
        gpu = ["--backend-config", "GpuOcl.device=0"]
        dev = device(cli, gpu)
    if dev is None:
        log("GpuOcl has no OpenCL device here: no GpuOcl rows")
        return 0
    name = f"{dev['name']} ({dev['kind']}, vendor {dev['vendor']}, driver {dev['driver_version']}, " \
           f"{dev['compute_units']} compute units)"
    log(f"device: {name}")
    models_dir = os.path.join(bench_dir, "models")
    os.makedirs(models_dir, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="gpuocl_bench.")
    warm_cache = os.path.join(bench_dir, "pocl_cache")
    os.makedirs(warm_cache, exist_ok=True)
    base_env = dict(os.environ, POCL_CACHE_DIR=warm_cache)
    rows = []
    for m in [x for x in args.models.split(",") if x]:
        onnx_path, _ = bench_models.generate(m, models_dir)
        log(f"{m}: latency")
        lat = run_json([cli, *gpu, "run", onnx_path, "--backends", "GpuOcl", "--runs", str(args.runs),
                        "--warmup", str(args.warmup), "--json"], base_env)
        cpu = run_json([cli, "--backend-path", cpu_dir, "run", onnx_path, "--backends", "CpuOneDnn",
                        "--threads", str(args.threads), "--runs", str(args.runs), "--warmup", str(args.warmup),
                        "--json"])
        bpk = os.path.join(scratch, m + ".bpk")
        subprocess.run([cli, *gpu, "compile", onnx_path, "-o", bpk, "--backends", "GpuOcl"], check=True,
                       capture_output=True, env=base_env)
        loads = {"onnx_cold": [], "onnx_warm": [], "bpk_cold": []}
        for i in range(args.load_runs):
            for key, model in (("onnx_cold", onnx_path), ("bpk_cold", bpk), ("onnx_warm", onnx_path)):
                env = dict(base_env)
                if key.endswith("cold"):
                    env["POCL_CACHE_DIR"] = tempfile.mkdtemp(dir=scratch)
                j = run_json([cli, *gpu, "run", model, "--backends", "GpuOcl", "--json"], env)
                if key.startswith("bpk") and j["notes"]:
                    raise RuntimeError(f"{m}.bpk was not used as compiled: {j['notes']}")
                loads[key].append((j["ready_ms"], j["load_ms"]))
        med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for k, v in loads.items()}
        rows.append({"model": m, "gpuocl_ms": lat["latency_ms"]["median"], "cpu_ms": cpu["latency_ms"]["median"],
                     "loads": med})
        log(f"  GpuOcl {rows[-1]['gpuocl_ms']:.1f} ms, CpuOneDnn {rows[-1]['cpu_ms']:.1f} ms; "
            f"ready .onnx cold {med['onnx_cold'][0]:.0f} ms, .bpk cold {med['bpk_cold'][0]:.0f} ms")
    bw = run_json([bandwidth_bin, "20", dev["name"]]) if os.path.exists(bandwidth_bin) else None

    lines = [f"GpuOcl on **{name}**" + (" — PoCL runs OpenCL on this machine's CPU, so these rows measure an "
                                         "OpenCL CPU driver, not a GPU." if dev["kind"] == "cpu" else "."),
             "",
             f"Latency: median of {args.runs} runs after {args.warmup} warm-up, in one `backplane run` process; "
             f"CpuOneDnn at {args.threads} threads beside it.",
             "",
             "| model | GpuOcl ms | CpuOneDnn ms | GpuOcl / CpuOneDnn |",
             "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['gpuocl_ms']:.1f} | {r['cpu_ms']:.1f} | {r['gpuocl_ms'] / r['cpu_ms']:.1f} |")
    lines += ["",
              f"Load on GpuOcl, median of {args.load_runs} fresh processes: ready (runtime created to session made) "
              "/ first result (ready + the first inference), ms. Cold = an empty PoCL kernel cache; GpuOcl's own "
              "program cache off.",
              "",
              "| model | .onnx, cold | .onnx, warm PoCL cache | .bpk, cold |",
              "|---|---|---|---|"]
    for r in rows:
        L = r["loads"]
        lines.append(f"| {r['model']} | {L['onnx_cold'][0]:.0f} / {L['onnx_cold'][1]:.0f} | "
                     f"{L['onnx_warm'][0]:.0f} / {L['onnx_warm'][1]:.0f} | {L['bpk_cold'][0]:.0f} / "
                     f"{L['bpk_cold'][1]:.0f} |")
    if bw:
        lines += ["",
                  f"Host<->device copies (GpuOcl's copy slots' blocking write/read; median of {bw['reps']}), GB/s:",
                  "",
                  "| bytes | to device | from device |",
                  "|---|---|---|"]
        for s in bw["sizes"]:
            lines.append(f"| {s['bytes']:,} | {s['to_device_gbps']:.2f} | {s['from_device_gbps']:.2f} |")
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(bench_dir, "gpuocl_results.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(bench_dir, "gpuocl_results.json"), "w") as f:
        json.dump({"device": dev, "rows": rows, "bandwidth": bw}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
