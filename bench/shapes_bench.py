#!/usr/bin/python3
"""Dynamic-shape benchmark (issue 13): Backplane against ONNX Runtime, same run.

On the models of scripts/gen_models.py (decoder_kv and encoder_dyn, generated
into BUILD/bench/models, cached), for each thread count, bench/ort_shapes.js
measures with ONNX Runtime (npm onnxruntime-node, installed as run_bench.py
does):
  decoder  per-token latency of a single-token step at cache (past) lengths 1,
           16, 64, 256 (median), and the total time of a greedy generation of
           256 tokens from a 1-token prompt, present_* fed back as past_*
  encoder  10 mixed (batch, seq) shapes in one session, run in turns; median
           per shape, overall median, and each shape's first run

ONNX Runtime's results are checked against PyTorch (the modules of
gen_models.py) before they are reported: its greedy tokens must equal
PyTorch's greedy generation with the cache, and each encoder output must be
within 1e-4 relative of PyTorch's for the same ids (ort_shapes.js's id formula).

Backplane's side is bench/shapes_runner.cpp (backplane_shapes_bench: the
public API, default backends, CpuOneDnn from its plugin, the cache bound
zero-copy between runs as examples/generate does), the same measurements and
JSON layout, plus each model's specialisation counts; its results are
checked against PyTorch the same way. Each model runs in a fresh process per
runtime (a model measured after another in one process inherits its heap and
caches), --repeats rounds (default 3) alternating which runtime goes first;
every figure is the median of the rounds.

For other runtimes: run_ort_shapes() returns ort_shapes.js's JSON object; a
runtime whose bench prints the same object (keys "decoder" {"per_token":
[{"cache_length", "median_ms"}], "generation": {"total_ms", "generated_ids"}}
and "encoder" {"shapes": [{"batch", "seq", "median_ms", "first_ms"}],
"overall_median_ms"}) gets its columns in decoder_table() / encoder_table() by
being added to their `results` dict (one column per runtime, and a ratio to
the first runtime).

Usage: bench/shapes_bench.py [--build-dir build] [--threads 1,2] [--step-runs 50]
       [--gen-runs 5] [--encoder-rounds 20] [--no-check]
Writes BUILD/bench/shapes_results.{md,json}. Needs Debian's /usr/bin/python3
(numpy, torch, onnx), node and npm.
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODELS = ["decoder_kv", "encoder_dyn"]


def log(msg):
    print(f"shapes_bench: {msg}", file=sys.stderr, flush=True)


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gen_models_module():
    return _load("gen_models", os.path.join(ROOT, "scripts", "gen_models.py"))


def gen_models(out_dir):
    """decoder_kv.onnx and encoder_dyn.onnx in out_dir (regenerated only when
    gen_models.py changed); returns their paths by name."""
    gm = gen_models_module()
    os.makedirs(out_dir, exist_ok=True)
    import torch
    torch.set_num_threads(1)
    stamp = gm._script_hash()
    for n in MODELS:
        gm.generate(n, out_dir, stamp)
    return {n: os.path.join(out_dir, n + ".onnx") for n in MODELS}


def run_ort_shapes(module_dir, threads, decoder=None, encoder=None, cache_lengths=(1, 16, 64, 256),
                   step_runs=50, gen_tokens=256, gen_runs=5, prompt_token=1, encoder_shapes=None,
                   encoder_rounds=20, encoder_vocab=None, warmup=5, save_dir=None, env=None):
    """Runs bench/ort_shapes.js once (a fresh node process) and returns its JSON
    object (see the script's header for the measurements and their keys)."""
    argv = ["node", os.path.join(HERE, "ort_shapes.js"), module_dir, str(threads),
            "--cache-lengths", ",".join(str(c) for c in cache_lengths), "--step-runs", str(step_runs),
            "--gen-tokens", str(gen_tokens), "--gen-runs", str(gen_runs), "--prompt-token", str(prompt_token),
            "--encoder-rounds", str(encoder_rounds), "--warmup", str(warmup)]
    if decoder:
        argv += ["--decoder", decoder]
    if encoder:
        argv += ["--encoder", encoder]
    if encoder_shapes:
        argv += ["--encoder-shapes", ",".join(f"{b}x{s}" for b, s in encoder_shapes)]
    if encoder_vocab:
        argv += ["--encoder-vocab", str(encoder_vocab)]
    if save_dir:
        argv += ["--save-dir", save_dir]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"ort_shapes.js failed (status {proc.returncode}): {proc.stderr.strip()}")
    return json.loads(proc.stdout)


def encoder_ids(b, s, vocab):
    """The ids ort_shapes.js feeds for a BxS run (its header's formula)."""
    i = np.arange(b * s, dtype=np.int64)
    return ((i * 7919 + 13 * s + b) % vocab).reshape(b, s)


def run_backplane_shapes(build_dir, threads, decoder=None, encoder=None, cache_lengths=(1, 16, 64, 256),
                         step_runs=50, gen_tokens=256, gen_runs=5, encoder_rounds=20, encoder_vocab=None,
                         warmup=5, save_dir=None):
    """Runs backplane_shapes_bench once (a fresh process) and returns its JSON object."""
    argv = [os.path.join(build_dir, "bench", "backplane_shapes_bench"), str(threads),
            "--cache-lengths", ",".join(str(c) for c in cache_lengths), "--step-runs", str(step_runs),
            "--gen-tokens", str(gen_tokens), "--gen-runs", str(gen_runs),
            "--encoder-rounds", str(encoder_rounds), "--warmup", str(warmup)]
    if decoder:
        argv += ["--decoder", decoder]
    if encoder:
        argv += ["--encoder", encoder]
    if encoder_vocab:
        argv += ["--encoder-vocab", str(encoder_vocab)]
    if save_dir:
        argv += ["--save-dir", save_dir]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"backplane_shapes_bench failed (status {proc.returncode}): {proc.stderr.strip()}")
    return json.loads(proc.stdout)


def check_against_pytorch(result, save_dir, tag="ort", who="ONNX Runtime"):
    """Raises if a runtime's generation or encoder outputs differ from
    PyTorch's; returns the encoder's largest relative difference. `tag`: the
    runtime's encoder output files, encoder_dyn.BxS.TAG.npy in save_dir."""
    import torch
    gm = gen_models_module()
    tr = _load("torch_reference", os.path.join(ROOT, "scripts", "torch_reference.py"))
    torch.set_num_threads(1)
    worst = None
    if "decoder" in result:
        g = result["decoder"]["generation"]
        ids, _, _ = tr.greedy_with_cache(gm.build_decoder_kv(), torch.tensor([[g["prompt_token"]]]), g["tokens"])
        if ids != g["generated_ids"]:
            i = next(i for i, (a, b) in enumerate(zip(ids, g["generated_ids"])) if a != b)
            raise RuntimeError(f"decoder: {who}'s greedy token {i} is {g['generated_ids'][i]}, "
                               f"PyTorch's {ids[i]}")
    if "encoder" in result:
        model = gm.build_encoder_dyn()
        worst = 0.0
        for sh in result["encoder"]["shapes"]:
            b, s = sh["batch"], sh["seq"]
            with torch.no_grad():
                ref = model(torch.from_numpy(encoder_ids(b, s, result["encoder"]["vocab"]))).numpy()
            got = np.load(os.path.join(save_dir, f"encoder_dyn.{b}x{s}.{tag}.npy"))
            rel = float(np.abs(got - ref).max() / np.abs(ref).max())
            if got.shape != ref.shape or not rel <= 1e-4:
                raise RuntimeError(f"encoder {b}x{s}: {who} differs from PyTorch "
                                   f"(shape {list(got.shape)} vs {list(ref.shape)}, rel {rel:.2e})")
            worst = max(worst, rel)
    return worst


def merge_runs(runs):
    """The runs of one runtime at one thread count (each a JSON object with a
    "decoder" or an "encoder" part) as one object: every timing the median
    of the runs that measured it."""
    med = lambda xs: float(np.median(xs))
    merged = {}
    for r in runs:
        for key, value in r.items():
            merged.setdefault(key, value)
    dec = [r["decoder"] for r in runs if "decoder" in r]
    enc = [r["encoder"] for r in runs if "encoder" in r]
    if dec:
        d = json.loads(json.dumps(dec[0]))
        for i, p in enumerate(d["per_token"]):
            p["median_ms"] = med([x["per_token"][i]["median_ms"] for x in dec])
        for k in ("total_ms", "first_total_ms"):
            if k in d["generation"]:
                d["generation"][k] = med([x["generation"][k] for x in dec])
        d["rounds"] = len(dec)
        merged["decoder"] = d
    if enc:
        e = json.loads(json.dumps(enc[0]))
        for i, sh in enumerate(e["shapes"]):
            for k in ("median_ms", "first_ms"):
                sh[k] = med([x["shapes"][i][k] for x in enc])
        e["overall_median_ms"] = med([x["overall_median_ms"] for x in enc])
        e["overall_median_each_round"] = [x["overall_median_ms"] for x in enc]
        e["rounds"] = len(enc)
        merged["encoder"] = e
    return merged


def _ratio_cols(values, names):
    """`values` by runtime name -> the table cells: each value, then each
    runtime's ratio to the first one."""
    cells = [f"{values[n]:.3f}" for n in names]
    cells += [f"{values[n] / values[names[0]]:.2f}" for n in names[1:]]
    return cells


def decoder_table(results, threads_list):
    """results: {runtime name: {threads: JSON object}}; the first runtime is the
    denominator of the ratios."""
    names = list(results)
    head = (["threads", "cache length"] + [f"{n} ms/token" for n in names] + [f"{n}/{names[0]}" for n in names[1:]]
            + [f"{n} first run / steady" for n in names])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for t in threads_list:
        steps = {n: {p["cache_length"]: p for p in results[n][t]["decoder"]["per_token"]} for n in names}
        for length in steps[names[0]]:
            cells = _ratio_cols({n: steps[n][length]["median_ms"] for n in names}, names)
            cells += [f"{steps[n][length]['first_ms'] / steps[n][length]['median_ms']:.1f}" for n in names]
            lines.append("| " + " | ".join([str(t), str(length)] + cells) + " |")
        gen = {n: results[n][t]["decoder"]["generation"] for n in names}
        tokens = gen[names[0]]["tokens"]
        for label, key in ((f"**{tokens} tokens, total ms**", "total_ms"),
                           (f"**first {tokens} tokens, total ms**", "first_total_ms")):
            lines.append("| " + " | ".join([str(t), label] + _ratio_cols(
                {n: gen[n][key] for n in names}, names) + [""] * len(names)) + " |")
    return "\n".join(lines)


def encoder_table(results, threads_list):
    names = list(results)
    head = (["threads", "batch x seq"] + [f"{n} median ms" for n in names] + [f"{n}/{names[0]}" for n in names[1:]]
            + [f"{n} first run ms" for n in names])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for t in threads_list:
        enc = {n: results[n][t]["encoder"] for n in names}
        for k, sh in enumerate(enc[names[0]]["shapes"]):
            cells = _ratio_cols({n: enc[n]["shapes"][k]["median_ms"] for n in names}, names)
            cells += [f"{enc[n]['shapes'][k]['first_ms']:.3f}" for n in names]
            lines.append("| " + " | ".join([str(t), f"{sh['batch']}x{sh['seq']}"] + cells) + " |")
        cells = _ratio_cols({n: enc[n]["overall_median_ms"] for n in names}, names) + [""] * len(names)
        lines.append("| " + " | ".join([str(t), "**all shapes, median**"] + cells) + " |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--step-runs", type=int, default=50, help="timed single-token steps per cache length")
    ap.add_argument("--gen-runs", type=int, default=5, help="timed 256-token generations")
    ap.add_argument("--encoder-rounds", type=int, default=20, help="timed rounds over the 10 encoder shapes")
    ap.add_argument("--repeats", type=int, default=3,
                    help="fresh processes per runtime, model and thread count; each row is their median")
    ap.add_argument("--no-check", action="store_true", help="do not compare ONNX Runtime with PyTorch")
    args = ap.parse_args()

    bench_dir = os.path.join(os.path.abspath(args.build_dir), "bench")
    out_dir = os.path.join(bench_dir, "outputs")
    os.makedirs(out_dir, exist_ok=True)
    log(f"generating models into {bench_dir}/models (cached)")
    models = gen_models(os.path.join(bench_dir, "models"))
    run_bench = _load("run_bench", os.path.join(HERE, "run_bench.py"))
    module, version, lib = run_bench.ensure_ort(bench_dir)
    log(f"ONNX Runtime {version}: {lib}")
    vocab = gen_models_module().ENCODER_DYN["vocab"]

    threads_list = [int(t) for t in args.threads.split(",") if t]
    ort, bp = {}, {}
    checks = {}
    common = dict(decoder=models["decoder_kv"], encoder=models["encoder_dyn"], step_runs=args.step_runs,
                  gen_runs=args.gen_runs, encoder_rounds=args.encoder_rounds, encoder_vocab=vocab,
                  save_dir=out_dir)
    for t in threads_list:
        ort_runs, bp_runs = [], []
        for rep in range(args.repeats):
            # Each model in a fresh process per runtime (a model measured after
            # another in one process inherits its heap and caches), the two
            # runtimes alternating which goes first.
            for part in ("decoder", "encoder"):
                only = dict(common, **{("encoder" if part == "decoder" else "decoder"): None})
                order = ["ort", "bp"] if rep % 2 == 0 else ["bp", "ort"]
                for who in order:
                    log(f"{'ONNX Runtime' if who == 'ort' else 'Backplane'} at {t} thread(s), {part}, "
                        f"round {rep + 1}/{args.repeats}")
                    if who == "ort":
                        ort_runs.append(run_ort_shapes(module, t, **only))
                    else:
                        bp_runs.append(run_backplane_shapes(os.path.abspath(args.build_dir), t, **only))
                if not args.no_check and rep == 0:
                    worst = [check_against_pytorch(ort_runs[-1], out_dir),
                             check_against_pytorch(bp_runs[-1], out_dir, "backplane", "Backplane")]
                    checks[t] = max([checks.get(t, 0.0)] + [w for w in worst if w is not None])
        ort[t], bp[t] = merge_runs(ort_runs), merge_runs(bp_runs)
        if not args.no_check:
            log(f"{t} thread(s): both runtimes' greedy tokens equal PyTorch's; encoder max rel diff "
                f"{checks[t]:.1e}")

    first = ort[threads_list[0]]
    results = {"ORT": ort, "Backplane": bp}
    cold = []
    for t in threads_list:
        d = bp[t]["decoder"]
        cold.append(f"{t} thread(s): Backplane's first generation (each cache length specialised as it "
                    f"comes) took {d['generation']['first_total_ms']:.1f} ms, ONNX Runtime's "
                    f"{ort[t]['decoder']['generation']['first_total_ms']:.1f} ms; specialisations: "
                    f"decoder {d['specializations']}, encoder {bp[t]['encoder']['specializations']}")
    text = "\n".join([
        f"ONNX Runtime {version} (npm onnxruntime-node) and Backplane ({', '.join(bp[threads_list[0]]['backends'])}), "
        f"{os.cpu_count()} logical CPUs, each model in a fresh process per runtime, "
        f"{args.repeats} rounds alternating which runtime goes first; every figure the median of the rounds. "
        f"Decoder "
        f"(decoder_kv: {first['decoder']['layers']} layers, {first['decoder']['heads']} heads x "
        f"{first['decoder']['head_dim']}): one-token step at each cache length, median of {args.step_runs}; "
        f"{first['decoder']['generation']['tokens']} greedy tokens from a 1-token prompt, cache fed back, "
        f"median of {args.gen_runs} after a first generation, which is timed apart; first run / steady: the "
        f"step's first run at that length over its median. Default model options (Backplane keeps "
        f"ModelOptions::max_specializations = 16 shapes)." +
        ("" if args.no_check else " Tokens checked equal to PyTorch's for both."),
        "",
        decoder_table(results, threads_list),
        "",
        *cold,
        "",
        f"Encoder (encoder_dyn): 10 (batch, seq) shapes in one session, in turns, median of "
        f"{args.encoder_rounds} runs each; first run = the shape's first run in the session "
        f"(for Backplane: specialising the model for it)."
        + ("" if args.no_check else
           f" Outputs within {max(checks.values()):.1e} relative of PyTorch's."),
        "",
        encoder_table(results, threads_list),
    ])
    print(text)
    with open(os.path.join(bench_dir, "shapes_results.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(bench_dir, "shapes_results.json"), "w") as f:
        json.dump({"onnxruntime": {str(t): r for t, r in ort.items()},
                   "backplane": {str(t): r for t, r in bp.items()}, "pytorch_check": checks}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
