#!/usr/bin/python3
"""Threads across backends: a model whose partitions alternate between CpuRef
and CpuOneDnn, with and without the host thread pool and the partition-edge
yield of API 1.5 (docs/performance.md, "Threads across backends").

The model is torchvision's ResNet-18 (seeded random weights, 1x3x224x224),
placed three ways with `backplane run --override`:
  - every Relu on CpuRef: the run alternates between oneDNN convolutions and
    light CpuRef element-wise partitions at every Relu (many edges);
  - the convolutions of layer2 on CpuRef: fewer edges, heavy CpuRef work
    (its GEMM on the pool);
  - whole on CpuOneDnn: no edge, so the edge yield must cost nothing (the
    flag is never set).

Configurations, switched by environment variables of the runtime:
  before  BACKPLANE_THREAD_POOL=0 BACKPLANE_EDGE_YIELD=0: CpuRef on the
          calling thread alone, OpenMP workers spin on after each oneDNN
          partition (the behaviour before API 1.5)
  pool    BACKPLANE_EDGE_YIELD=0: CpuRef on the host pool, no yield at edges
  after   the defaults: the pool, whose workers stop spinning at each edge;
          the edge flag reaches CpuOneDnn, which does nothing with it
          (releasing its OpenMP team, omp_pause_resource_all, cost more than
          the spin it saves with libgomp)

Each round runs every configuration once (`backplane run --runs N`, median
latency), the order rotated from round to round (A/B/C, B/C/A, ...) so that
a change in the machine's load hits every configuration alike; the table
gives the median over rounds and the range. `--busy 1` runs the same beside
one busy process (`sh -c 'while :; do :; done'`). The load average before
and after is printed: other work on the machine shows there.

  bench/edges_bench.py --backplane build/bin/backplane [--rounds 5] [--busy 0,1]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CONFIGS = {
    "before": {"BACKPLANE_THREAD_POOL": "0", "BACKPLANE_EDGE_YIELD": "0"},
    "pool": {"BACKPLANE_EDGE_YIELD": "0"},
    "after": {},
}


def make_model(path):
    """Writes the model if needed; the names of its Relu nodes and of its
    layer2 Conv nodes."""
    import onnx
    import torch
    import torchvision

    if not os.path.exists(path):
        torch.manual_seed(0)
        model = torchvision.models.resnet18().eval()
        torch.onnx.export(model, torch.randn(1, 3, 224, 224), path, opset_version=17,
                          input_names=["input"], output_names=["logits"])
    graph = onnx.load(path).graph
    relus = [n.name for n in graph.node if n.op_type == "Relu"]
    convs = [n.name for n in graph.node if n.op_type == "Conv" and n.name.startswith("/layer2/")]
    return relus, convs


def run_once(args, model, overrides, config):
    env = {k: v for k, v in os.environ.items() if k not in ("BACKPLANE_THREAD_POOL", "BACKPLANE_EDGE_YIELD")}
    env.update(CONFIGS[config])
    cmd = [args.backplane, "run", model, "--threads", str(args.threads), "--runs", str(args.runs),
           "--warmup", str(args.warmup), "--json"]
    for node in overrides:
        cmd += ["--override", node + "=CpuRef"]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    report = json.loads(out)
    return report["latency_ms"]["median"], len(report["partitions"])


def measure(args, model, overrides, configs):
    rounds = {c: [] for c in configs}
    partitions = None
    for r in range(args.rounds):
        order = configs[r % len(configs):] + configs[:r % len(configs)]
        for c in order:
            ms, partitions = run_once(args, model, overrides, c)
            rounds[c].append(ms)
    return rounds, partitions


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backplane", required=True, help="the backplane command line")
    p.add_argument("--work", default=None, help="where the model is written (default: a temporary directory)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--busy", default="0,1", help="busy processes beside the benchmark, e.g. 0,1")
    args = p.parse_args()

    work = args.work or tempfile.mkdtemp(prefix="edges_bench_")
    model = os.path.join(work, "resnet18.onnx")
    relus, convs = make_model(model)
    print(f"load average before: {os.getloadavg()}", file=sys.stderr)
    rows = []
    for busy in [int(b) for b in args.busy.split(",")]:
        spinners = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(busy)]
        try:
            alt, alt_parts = measure(args, model, relus, list(CONFIGS))
            heavy, heavy_parts = measure(args, model, convs, list(CONFIGS))
            whole, whole_parts = measure(args, model, [], ["pool", "after"])
        finally:
            for s in spinners:
                s.kill()
                s.wait()
        for c, v in alt.items():
            rows.append((busy, f"ResNet-18, Relu on CpuRef ({alt_parts} partitions)", c, v))
        for c, v in heavy.items():
            rows.append((busy, f"ResNet-18, layer2 Convs on CpuRef ({heavy_parts} partitions)", c, v))
        for c, v in whole.items():
            rows.append((busy, f"ResNet-18 whole on CpuOneDnn ({whole_parts} partition)",
                         "no edge yield" if c == "pool" else c, v))
    print(f"load average after: {os.getloadavg()}", file=sys.stderr)

    print(f"| busy processes | model | configuration | median ms (range over {args.rounds} rounds) |")
    print("|---|---|---|---|")
    for busy, name, c, v in rows:
        print(f"| {busy} | {name} | {c} | {statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f}) |")


if __name__ == "__main__":
    main()
