#!/usr/bin/python3
"""4-bit weights: Backplane against ONNX Runtime on the same MatMulNBits model (`make bench`).

The model is a chain of `--layers` MatMulNBits of K = N = `--width` (ONNX Runtime's int4
weight layout: blocks of `--block` along K, packed zero points, seeded weights), what its
4-bit quantizer and LLM builders write for a transformer's linear layers, fed by a 4-bit
embedding table of `--vocab` rows (GatherBlockQuantized, the same blocks along the width;
0: no table, the input is the activations). Per thread count and row count (`--rows`, token
ids: 1 is a decoder's token, more a prompt) two long-lived processes
load it: backplane_bench (CpuOneDnn from its plugin) and ort_runner.js (npm
onnxruntime-node, intra-op threads = threads). After a warm-up they take turns of
`--block-runs` timed runs on the same input, as run_bench.py does. Reported: median
latencies and their ratio, the ready time (load and first run) and the peak resident
memory above each process's own before loading, against the weights' 4-bit size; the
outputs compared (max |difference| over max |ONNX Runtime's|). Writes
BUILD/bench/nbits_results.md and nbits_results.json.
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_bench  # noqa: E402
from run_bench import Runner, log  # noqa: E402


def make_model(path, width, layers, block, vocab, seed):
    """The MatMulNBits chain at `path` (ids [1, rows] through the table, or x [1, rows,
    width] -> y); its weights' bytes."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)
    blocks = -(-width // block)
    nodes, inits, x = [], [], "x"
    if vocab > 0:
        inits += [numpy_helper.from_array(
                      rng.integers(0, 256, size=(vocab, width // 2), dtype=np.uint8), "table"),
                  numpy_helper.from_array(
                      (rng.random((vocab, blocks)) * 0.1).astype(np.float32), "table_scales"),
                  numpy_helper.from_array(
                      rng.integers(0, 256, size=(vocab, -(-blocks // 2)), dtype=np.uint8),
                      "table_zeros")]
        nodes.append(helper.make_node("GatherBlockQuantized",
                                      ["table", "ids", "table_scales", "table_zeros"], ["x"],
                                      domain="com.microsoft", name="embed", block_size=block,
                                      bits=4))
    for i in range(layers):
        q = rng.integers(0, 256, size=(width, blocks, block // 2), dtype=np.uint8)
        s = (rng.random(width * blocks) * 0.5 / width).astype(np.float32)
        z = rng.integers(0, 256, size=(width * -(-blocks // 2),), dtype=np.uint8)
        inits += [numpy_helper.from_array(q, f"B{i}"), numpy_helper.from_array(s, f"S{i}"),
                  numpy_helper.from_array(z, f"Z{i}")]
        nodes.append(helper.make_node("MatMulNBits", [x, f"B{i}", f"S{i}", f"Z{i}"], [f"y{i}"],
                                      domain="com.microsoft", name=f"linear{i}", K=width, N=width,
                                      bits=4, block_size=block))
        x = f"y{i}"
    source = (helper.make_tensor_value_info("ids", TensorProto.INT64, [1, "rows"]) if vocab > 0
              else helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "rows", width]))
    graph = helper.make_graph(
        nodes, "nbits", [source],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    onnx.save(model, path)
    return sum(len(t.raw_data) for t in inits)


def bench_one(args, paths, model, input_path, threads):
    t = str(threads)
    make = {
        "bp": lambda: Runner("backplane", [paths["bench_bin"], "dynamic", model, input_path, t,
                                           paths["backend_dir"]]),
        "ort": lambda: Runner("onnxruntime", ["node", os.path.join(HERE, "ort_runner.js"),
                                              paths["ort_module"], model, input_path, t]),
    }
    runners = {k: make[k]() for k in make}
    try:
        for k in runners:
            runners[k].run(args.warmup)
            time.sleep(args.gap)
        times = {k: [] for k in runners}
        for _ in range(args.turns):
            for k in runners:
                times[k] += runners[k].run(args.block_runs)
                time.sleep(args.gap)
        out = {}
        for k in runners:
            path = os.path.join(paths["out"], f"nbits.{k}.npy")
            runners[k].send(f"save {path}")
            out[k] = np.load(path).astype(np.float64)
        diff = float(np.abs(out["bp"] - out["ort"]).max() / max(np.abs(out["ort"]).max(), 1e-30))
        return {k: {"median_ms": statistics.median(times[k]), "ready_ms": runners[k].load_ms,
                    "peak_mb": runners[k].peak_rss_mb()} for k in runners}, diff
    finally:
        for r in runners.values():
            r.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(os.path.dirname(HERE), "build"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rows", default="1,64", help="tokens (rows): 1 is a decoder step, more a prompt")
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--block", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=32000, help="rows of the 4-bit embedding table")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--block-runs", type=int, default=5)
    ap.add_argument("--gap", type=float, default=0.2)
    args = ap.parse_args()

    build = os.path.abspath(args.build_dir)
    bench_dir = os.path.join(build, "bench")
    paths = {"out": os.path.join(bench_dir, "outputs"),
             "bench_bin": os.path.join(bench_dir, "backplane_bench"),
             "backend_dir": os.path.join(build, "lib", "backplane", "backends")}
    if not os.path.exists(paths["bench_bin"]):
        sys.exit(f"nbits_bench: {paths['bench_bin']} is missing (run `make bench`, which builds it)")
    os.makedirs(paths["out"], exist_ok=True)
    paths["ort_module"], ort_version, _ = run_bench.ensure_ort(bench_dir)
    model = os.path.join(bench_dir, "models",
                         f"nbits_{args.width}x{args.layers}_b{args.block}_v{args.vocab}.onnx")
    os.makedirs(os.path.dirname(model), exist_ok=True)
    weight_mb = make_model(model, args.width, args.layers, args.block, args.vocab, seed=1) / 1e6
    rows_list = [int(r) for r in args.rows.split(",") if r]
    threads_list = [int(t) for t in args.threads.split(",") if t]
    results, lines = [], []
    for rows in rows_list:
        rng = np.random.default_rng(rows)
        if args.vocab > 0:
            input_path = os.path.join(bench_dir, "models", f"nbits_ids_{args.vocab}_{rows}.npy")
            np.save(input_path, rng.integers(0, args.vocab, (1, rows)).astype(np.int64))
        else:
            input_path = os.path.join(bench_dir, "models", f"nbits_x_{args.width}_{rows}.npy")
            np.save(input_path, rng.standard_normal((1, rows, args.width)).astype(np.float32))
        for threads in threads_list:
            log(f"4-bit: {rows} row(s), {threads} thread(s)")
            r, diff = bench_one(args, paths, model, input_path, threads)
            results.append({"rows": rows, "threads": threads, "max_rel_diff": diff, **r})
            bp, ort = r["bp"], r["ort"]
            lines.append(f"| {rows} | {threads} | {bp['median_ms']:.2f} | {ort['median_ms']:.2f} | "
                         f"{bp['median_ms'] / ort['median_ms']:.2f} | {bp['ready_ms']:.0f} / "
                         f"{ort['ready_ms']:.0f} | {bp['peak_mb']:.0f} / {ort['peak_mb']:.0f} | "
                         f"{diff:.1e} |")
    table = (f"a 4-bit embedding table of {args.vocab} x {args.width} (GatherBlockQuantized) "
             f"into " if args.vocab > 0 else "")
    float_mb = (args.layers * args.width + args.vocab) * args.width * 4 / 1e6
    text = "\n".join([
        f"4-bit weights: {table}{args.layers} MatMulNBits of {args.width} x {args.width} (blocks of "
        f"{args.block}, packed zero points; {weight_mb:.0f} MB of 4-bit weights, "
        f"{float_mb:.0f} MB as float32), Backplane (CpuOneDnn) against ONNX Runtime "
        f"{ort_version} on the same file, {os.cpu_count()} logical CPUs; medians of "
        f"{args.turns * args.block_runs} runs taken in alternating turns; ready = load and "
        f"first run; peak = resident MB above each process's own before loading.",
        "",
        "| rows | threads | Backplane ms | ONNX Runtime ms | ratio | ready ms, Backplane / ORT | "
        "peak MB, Backplane / ORT | max diff / max |ORT| |",
        "|---|---|---|---|---|---|---|---|",
        *lines])
    print(text)
    with open(os.path.join(bench_dir, "nbits_results.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(bench_dir, "nbits_results.json"), "w") as f:
        json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
