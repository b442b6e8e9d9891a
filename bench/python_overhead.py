#!/usr/bin/python3
"""Per-run overhead of the Python module over the C++ API (`make bench`).

For mobilenet_v2 and the transformer encoder (bench/bench_models.py), at each
thread count: backplane_bench (the C++ API: set_input + run, CpuOneDnn loaded
as a plugin) and python_runner.py (backplane.InferenceSession.run: input bound
in place, run with the GIL released, output copied) load the same model and
take turns on the same input, `--block` timed runs a turn, so machine noise
hits both alike. Prints both medians and the overhead: the median over the
rounds of (Python's block median / the C++ block median just before it) - 1,
which pairs measurements made moments apart (on a busy machine the medians
alone drift more than the overhead). The target is under 3 %. A one-node
model (Relu on 4096 floats) shows the fixed cost per run in microseconds.
"""
import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_models  # noqa: E402
from run_bench import Runner  # noqa: E402


def one_node_model(out_dir):
    """out_dir/one_node.onnx: y = Relu(x), float32 [1, 32, 128], and its input."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper
    os.makedirs(out_dir, exist_ok=True)
    onnx_path = os.path.join(out_dir, "one_node.onnx")
    input_path = os.path.join(out_dir, "one_node.input.npy")
    shape = [1, 32, 128]
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "one_node",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), onnx_path)
    np.save(input_path, np.random.default_rng(0).standard_normal(shape).astype(np.float32))
    return onnx_path, input_path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--models", default="mobilenet_v2,transformer,one_node")
    ap.add_argument("--threads", default="1")
    ap.add_argument("--runs", type=int, default=150, help="timed runs per process and model")
    ap.add_argument("--block", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    build = os.path.abspath(args.build_dir)
    models_dir = os.path.join(build, "bench", "models")
    bench_bin = os.path.join(build, "bench", "backplane_bench")
    backend_dir = os.path.join(build, "lib", "backplane", "backends")
    python_dir = os.path.join(build, "python")
    for p in (bench_bin, os.path.join(python_dir, "backplane")):
        if not os.path.exists(p):
            sys.exit(f"python_overhead: {p} is missing (build the targets bench_tools and _backplane)")
    env = dict(os.environ, PYTHONPATH=python_dir)

    rows = []
    for name in args.models.split(","):
        if name == "one_node":
            onnx_path, input_path = one_node_model(models_dir)
        else:
            onnx_path, input_path = bench_models.generate(name, models_dir)
        for threads in [int(t) for t in args.threads.split(",")]:
            argv_tail = [onnx_path, input_path, str(threads), backend_dir]
            cpp = Runner("C++", [bench_bin, "dynamic"] + argv_tail)
            py = Runner("Python", ["/usr/bin/python3", os.path.join(HERE, "python_runner.py")] + argv_tail, env=env)
            times = {"C++": [], "Python": []}
            ratios = []
            try:
                for r in (cpp, py):
                    r.run(args.warmup)
                while len(times["Python"]) < args.runs:
                    block = {}
                    for r in (cpp, py):
                        block[r.name] = r.run(args.block)
                        times[r.name] += block[r.name]
                    ratios.append(statistics.median(block["Python"]) / statistics.median(block["C++"]))
            finally:
                cpp.close()
                py.close()
            c, p = statistics.median(times["C++"]), statistics.median(times["Python"])
            rows.append((name, threads, c, p, (statistics.median(ratios) - 1.0) * 100.0))
            print(f"python_overhead: {name} t{threads}: C++ {c:.3f} ms, Python {p:.3f} ms", file=sys.stderr)

    print("\nPer-run overhead of Python over the C++ API (median latency, CpuOneDnn; target < 3 %)\n")
    print("| model | threads | C++ API ms | Python ms | overhead | Python - C++ |")
    print("|---|---|---|---|---|---|")
    for name, threads, c, p, pct in rows:
        print(f"| {name} | {threads} | {c:.4f} | {p:.4f} | {pct:+.2f} % | {(p - c) * 1e3:+.1f} us |")


if __name__ == "__main__":
    main()
