#!/usr/bin/env python3
"""Differential testing: small random graphs (graphgen.py) on a fast backend,
with CpuRef behind it for what it rejects, against CpuRef alone, compared
under the numerics policy (backplane.numerics; docs/numerics.md).

  run_differential.py --backend CpuOneDnn --count 2000 --first-seed 1 \\
      --regressions tests/differential/regressions --out DIR
  run_differential.py --backend GpuOcl --backend-config GpuOcl.device=0 \
      --seconds 600                                            # random seeds

--quantized draws int8 (QDQ) graphs instead (qgraphgen.py), each output
judged by the int8 rule with the bound in steps its model's metadata gives;
on CpuOneDnn the run also counts the graphs that ran an int8 step (its plan
report) and fails if none did.

A graph with a symbolic first dim runs at its own size and then, in the same
sessions, at sizes 2, 3, 5, 4, 7 and 6 where CpuRef can run it: each a new
instance of a shape-polymorphic partition, later ones derived from earlier
ones (CpuOneDnn). One with symbolic first two dims (N, T) runs at both
changing together: (2, 3), (3, 5), (5, 2), (4, 7), (7, 4), (6, 6). Each size
is compared as the first is.

--backend-config BACKEND.KEY=VALUE (repeatable) sets a backend's key, as the
CLI's option of that name does (GpuOcl on a CPU OpenCL device needs
GpuOcl.device; docs/performance.md lists the keys).

A failure (outputs outside the policy, or an error CpuRef does not raise)
prints its seed, its steps and the error, is shrunk (shrink.py) to a small
graph that still fails, and is written to DIR as BACKEND-seedSEED.onnx (with
its spec as .json). Rerun one seed with --seed SEED. The committed
regressions (*.onnx) run first, every time; a node named in the model's
metadata "differential.pin" is pinned to CpuRef.

Exit status: 0 all passed; 1 a failure; 77 the backend is not available
here (ctest's skip code; with --require it is a failure instead).
"""
from __future__ import annotations

import argparse
import atexit
import json
import os
import random
import shutil
import sys
import tempfile
import time
import traceback

import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import graphgen  # noqa: E402
import qgraphgen  # noqa: E402
import shrink  # noqa: E402

import backplane  # noqa: E402
from backplane import numerics  # noqa: E402

SKIP = 77


class Checker:
    def __init__(self, backend, threads, workdir, config=None):
        self.backend = backend
        self.threads = threads
        self.config = config or {}
        self.fast_nodes = 0
        self.total_nodes = 0
        self.worst = (0.0, "")  # largest error / bound among passing outputs, and where
        self.current = ""
        self.path = os.path.join(workdir, "graph.onnx")
        # The plan report CpuOneDnn appends to (when it is asked for one):
        # which graphs ran an int8 step.
        self.report = self.config.get(backend, {}).get("plan_report")
        self.ran_int8 = False  # the last graph checked had an int8 step

    def session(self, path, backends, pins=()):
        return backplane.InferenceSession(path, backends=backends,
                                          overrides={p: "CpuRef" for p in pins} or None,
                                          threads=self.threads, backend_config=self.config)

    def check(self, model, pins, feeds):
        """None if the fast backend agrees with CpuRef, else what differs.
        Raises GeneratorError if CpuRef itself cannot run the graph."""
        with open(self.path, "wb") as f:
            f.write(model.SerializeToString())
        data = self.path
        try:
            ref_session = self.session(data, ["CpuRef"])
            ref = ref_session.run(None, feeds)
        except backplane.Error as e:
            raise GeneratorError(f"CpuRef rejects the graph: {e}") from None
        self.ran_int8 = False
        seen = os.path.getsize(self.report) if self.report and os.path.exists(self.report) else 0
        try:
            sess = self.session(data, [self.backend, "CpuRef"], pins)
            got = sess.run(None, feeds)
        except backplane.Error as e:
            return f"{type(e).__name__}: {e}"
        if self.report and os.path.exists(self.report):
            with open(self.report, "rb") as f:
                f.seek(seen)
                self.ran_int8 = b"(int8" in f.read()
        on_fast = sum(len(p.nodes) for p in sess.partitions if p.backend == self.backend)
        self.fast_nodes += on_fast
        self.total_nodes += len(model.graph.node)
        bad = self.compare(model, got, ref, feeds)
        if bad:
            return bad
        # A symbolic dim: the same sessions at other sizes, one after the
        # other, as a model meets lengths it has not seen (each a new instance
        # of a shape-polymorphic partition; from the fourth on the fast backend
        # may derive them). Sizes at which CpuRef cannot run the graph (a
        # constant made for the first size) are not the graph's.
        names = sorted(graphgen.symbolic_dims(model))
        if not names:
            return None
        for sizes in OTHER_SIZES if len(names) == 1 else OTHER_PAIRS:
            dims = dict(zip(names, sizes if len(names) > 1 else [sizes]))
            at = ", ".join(f"{n}={d}" for n, d in dims.items())
            more = graphgen.feeds_for(model, seed=sum(dims.values()), dims=dims)
            try:
                ref = ref_session.run(None, more)
            except backplane.Error:
                continue
            try:
                got = sess.run(None, more)
            except backplane.Error as e:
                return f"at {at}: {type(e).__name__}: {e}"
            bad = self.compare(model, got, ref, more)
            if bad:
                return f"at {at}: {bad}"
        return None

    def compare(self, model, got, ref, feeds):
        """What differs between the fast backend's outputs and CpuRef's, or None."""
        names = [o.name for o in model.graph.output]
        bounds = qgraphgen.bounds_of(model)
        bad = []
        for name, g, r in zip(names, got, ref):
            if name in bounds:  # the int8 rule, in steps (qgraphgen.py)
                ok, what, err, limit = qgraphgen.compare(g, r, bounds[name], feeds, numerics)
                if not ok:
                    bad.append(f"output '{name}': {what}")
                elif err > 0 and limit > 0 and err / limit > self.worst[0]:
                    self.worst = (err / limit, f"{self.current} output '{name}'")
                continue
            c = numerics.compare(g, r)
            if not c.within:
                bad.append(f"output '{name}': {c.describe()}")
            elif not c.exact and c.max_abs_error / c.bound > self.worst[0]:
                self.worst = (c.max_abs_error / c.bound, f"{self.current} output '{name}'")
        return "; ".join(bad) or None


# The sizes a symbolic dim takes after the graph's own, in this order; two
# (N, T) change together.
OTHER_SIZES = (2, 3, 5, 4, 7, 6)
OTHER_PAIRS = ((2, 3), (3, 5), (5, 2), (4, 7), (7, 4), (6, 6))


class GeneratorError(Exception):
    pass


def pins_of(model):
    for p in model.metadata_props:
        if p.key == "differential.pin":
            return [n for n in p.value.split(",") if n]
    return []


def shrink_and_write(checker, seed, spec, out_dir, log):
    def fails(cand):
        model, pins = graphgen.build(cand)
        try:
            return checker.check(model, pins, graphgen.feeds_for(model)) is not None
        except GeneratorError:
            return False

    small = shrink.shrink(spec, fails, log=log)
    model, pins = graphgen.build(small)
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, f"{checker.backend}-seed{seed}")
    onnx.save(model, base + ".onnx")
    with open(base + ".json", "w") as f:
        json.dump(small, f, indent=1)
    err = checker.check(model, pins, graphgen.feeds_for(model))
    log(f"  minimal graph ({len(model.graph.node)} nodes: "
        f"{', '.join(n.op_type for n in model.graph.node)}) written to {base}.onnx\n"
        f"  its error: {err}")


def available(backend, config):
    try:
        ids = backplane.available_backends(backend_config=config)
    except backplane.Error as e:
        return False, str(e)
    if backend not in ids:
        return False, f"{backend} is not among the registered backends ({', '.join(ids)})"
    return True, ""


def run_regressions(checker, folder, log):
    failed = 0
    files = sorted(f for f in os.listdir(folder) if f.endswith(".onnx")) if folder else []
    for f in files:
        model = onnx.load(os.path.join(folder, f))
        checker.current = f"regression {f}"
        try:
            err = checker.check(model, pins_of(model), graphgen.feeds_for(model))
        except GeneratorError as e:
            err = str(e)
        if err:
            failed += 1
            log(f"FAIL regression {f}: {err}")
    log(f"{checker.backend}: {len(files) - failed}/{len(files)} regression graphs pass")
    return failed


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="CpuOneDnn")
    ap.add_argument("--count", type=int, default=0, help="graphs to run (seeds FIRST..FIRST+COUNT-1)")
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--seed", type=int, action="append", default=[], help="run this seed (repeatable)")
    ap.add_argument("--seconds", type=float, default=0, help="run random seeds for this long")
    ap.add_argument("--regressions", default="", help="folder of committed regression graphs")
    ap.add_argument("--out", default="differential-failures", help="where shrunk failures go")
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument("--require", action="store_true", help="fail (not skip) if the backend is absent")
    ap.add_argument("--max-failures", type=int, default=5, help="stop after this many")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--backend-config", action="append", default=[], metavar="BACKEND.KEY=VALUE",
                    help="a backend's setting (repeatable)")
    ap.add_argument("--quantized", action="store_true",
                    help="quantized (QDQ) graphs, judged by the int8 rule (qgraphgen.py)")
    ap.add_argument("--print-model", action="store_true", help="print each graph's steps")
    ap.add_argument("--seed-file", default="",
                    help="write each seed here before running it (what a crash leaves behind)")
    args = ap.parse_args()

    def log(msg):
        print(msg, flush=True)

    config = {}
    for setting in args.backend_config:
        target, _, value = setting.partition("=")
        backend, _, key = target.partition(".")
        if not backend or not key or "=" not in setting:
            ap.error(f"--backend-config '{setting}' is not BACKEND.KEY=VALUE")
        config.setdefault(backend, {})[key] = value
    ok, why = available(args.backend, config)
    if not ok:
        log(f"run_differential: {args.backend} is not available here: {why}")
        return 1 if args.require else SKIP

    # Each graph is written to a file the sessions load: in memory where
    # the system has a tmpfs for it.
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    workdir = tempfile.mkdtemp(prefix="backplane-differential-", dir=shm)
    atexit.register(shutil.rmtree, workdir, True)
    if args.quantized and args.backend == "CpuOneDnn":
        # Its plan report marks int8 steps: how many graphs ran one.
        config.setdefault("CpuOneDnn", {}).setdefault("plan_report",
                                                      os.path.join(workdir, "plan.tsv"))
    checker = Checker(args.backend, args.threads, workdir, config)
    failures = run_regressions(checker, args.regressions, log)

    if args.seed:
        seeds = iter(args.seed)
    elif args.seconds > 0:
        base = random.SystemRandom().randrange(1 << 40)
        log(f"{args.backend}: random seeds from {base} for {args.seconds:g} s")
        seeds = (base + i for i in range(1 << 62))
    else:
        seeds = iter(range(args.first_seed, args.first_seed + args.count))

    start = time.monotonic()
    graphs = generator_errors = int8_graphs = 0
    last = None
    for seed in seeds:
        if args.seconds > 0 and time.monotonic() - start > args.seconds:
            break
        last = seed
        if args.seed_file:
            with open(args.seed_file, "w") as f:
                f.write(f"{seed}\n")
        spec = graphgen.generate(seed, args.backend, quantized=args.quantized)
        checker.current = f"seed {seed}"
        if args.print_model:
            log(f"seed {seed}: {graphgen.describe(spec)}")
        try:
            # A quantized spec's build runs its calibration, which may refuse it.
            model, pins = graphgen.build(spec)
            err = checker.check(model, pins, graphgen.feeds_for(model))
        except (GeneratorError, graphgen.InvalidSpec) as e:
            generator_errors += 1
            log(f"GENERATOR seed {seed}: {e}\n  {graphgen.describe(spec)}")
            continue
        except Exception:
            log(f"CRASH seed {seed}: {graphgen.describe(spec)}")
            traceback.print_exc()
            return 1
        finally:
            graphs += 1
        int8_graphs += checker.ran_int8
        if err:
            failures += 1
            log(f"FAIL {args.backend} seed {seed}: {err}\n  graph: {graphgen.describe(spec)}")
            if not args.no_shrink:
                shrink_and_write(checker, seed, spec, args.out, log)
            if failures >= args.max_failures:
                log(f"stopping after {failures} failures")
                break
    took = time.monotonic() - start
    share = checker.fast_nodes / max(checker.total_nodes, 1)
    span = f", last seed {last}" if args.seconds > 0 and last is not None else ""
    log(f"{args.backend}: {graphs} graphs in {took:.1f} s, {failures} failures, "
        f"{generator_errors} invalid graphs; {100 * share:.0f}% of nodes ran on {args.backend}{span}")
    if checker.worst[0] > 0:
        log(f"{args.backend}: largest error of a passing output: {checker.worst[0]:.3f} of the bound "
            f"({checker.worst[1]})")
    if checker.report:
        log(f"{args.backend}: {int8_graphs} of {graphs} graphs ran an int8 step")
    if graphs and checker.fast_nodes == 0:
        log(f"FAIL {args.backend} ran no node of any graph")
        return 1
    if args.quantized and checker.report and graphs and int8_graphs == 0:
        log(f"FAIL {args.backend} ran no int8 step in any graph")
        return 1
    return 1 if failures or generator_errors else 0


if __name__ == "__main__":
    sys.exit(main())
