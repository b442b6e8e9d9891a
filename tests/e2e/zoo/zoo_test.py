#!/usr/bin/python3
"""Runs zoo models (scripts/gen_zoo.py) with the `backplane` command and
compares every output with PyTorch's.

  zoo_test.py --cli BACKPLANE --data DIR MODEL...    exit 1 if any fails
  zoo_test.py --cli BACKPLANE --data DIR --all       every model DIR holds
      [--backends A,B] [--backend-path DIR] [--quiet]

One line per model: `NAME  pass|FAIL  family  seconds  detail`; a failure's
detail is the first error (`backplane run`'s `error:` line, which names the
node and the op, or the first output that differs).

Tolerances: the numerics policy (docs/numerics.md). Tensors: max|got - ref|
<= 1e-4 * max|ref| + 1e-6 over each output (an element near 0 is the
difference of terms of the output's scale, so its error is judged against
that scale, not against itself). Integer outputs must be equal.

Detections (boxes, labels, scores and per-detection masks/keypoints) are
compared as sets, since NMS may order ties differently: each expected
detection is matched one to one with a detection of the same label whose
score and box are within the tolerance above (scale: the largest box
coordinate, the largest score); per-detection outputs of matched pairs are
then compared with the output's tolerance. A detection left unmatched is a
failure unless its score lies within the score tolerance of a cut-off (the
model's score threshold, or the lowest kept score when the model returned
its maximum number of detections), where 1e-5 differences legitimately
decide whether it is kept. A passing detector's detail says how close its
worst matched pair came: the largest score or box difference as a fraction
of what the tolerance allows.
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

RTOL = 1e-4  # the numerics policy's relative term
ATOL = 1e-6  # and its absolute one


class Mismatch(Exception):
    pass


def tol_of(ref):
    ref = np.asarray(ref, dtype=np.float64)
    fin = ref[np.isfinite(ref)]
    scale = float(np.max(np.abs(fin))) if fin.size else 0.0
    return RTOL * scale + ATOL


def compare_tensor(name, got, want, atol=None):
    if got.shape != want.shape:
        raise Mismatch(f"output '{name}': shape {list(got.shape)}, PyTorch {list(want.shape)}")
    if want.dtype.kind in "iub":
        if got.dtype.kind not in "iub":
            raise Mismatch(f"output '{name}': dtype {got.dtype}, PyTorch {want.dtype}")
        bad = np.flatnonzero(got.astype(np.int64).ravel() != want.astype(np.int64).ravel())
        if bad.size:
            i = bad[0]
            raise Mismatch(f"output '{name}': {bad.size} element(s) differ, first at flat index {i}: "
                           f"{got.ravel()[i]} vs PyTorch {want.ravel()[i]}")
        return 0.0
    g = got.astype(np.float64)
    w = want.astype(np.float64)
    if atol is None:
        atol = tol_of(w)
    if not np.array_equal(np.isfinite(g), np.isfinite(w)):
        i = int(np.flatnonzero(np.isfinite(g).ravel() != np.isfinite(w).ravel())[0])
        raise Mismatch(f"output '{name}': non-finite mismatch at flat index {i}: "
                       f"{g.ravel()[i]} vs PyTorch {w.ravel()[i]}")
    fin = np.isfinite(w)
    diff = np.where(fin, np.abs(g - w), 0.0)
    over = np.flatnonzero((diff > atol).ravel())
    worst = float(np.max(diff)) / atol if diff.size and atol else 0.0
    if over.size:
        i = over[np.argmax(diff.ravel()[over])]
        raise Mismatch(f"output '{name}': {over.size} of {w.size} element(s) out of tolerance; "
                       f"worst at flat index {i}: {g.ravel()[i]:.7g} vs PyTorch {w.ravel()[i]:.7g} "
                       f"(max |diff| {float(np.max(diff)):.3g}, allowed {atol:.3g})")
    return worst


def compare_detections(meta, got, want):
    """got/want: dicts name -> array. Returns a short summary."""
    det = meta.get("detection", {})
    thresh = float(det.get("score_thresh", 0.0))
    cap = int(det.get("max_detections", 0))
    wb, wl, ws = want["boxes"], want["labels"], want["scores"]
    gb, gl, gs = got["boxes"], got["labels"], got["scores"]
    for n, g in (("boxes", gb), ("labels", gl), ("scores", gs)):
        if g.ndim != want[n].ndim or g.shape[1:] != want[n].shape[1:]:
            raise Mismatch(f"output '{n}': shape {list(g.shape)}, PyTorch {list(want[n].shape)}")
        # Integer labels against float scores: outputs swapped by their
        # names would otherwise show up as detections that match nothing.
        if (g.dtype.kind in "iub") != (want[n].dtype.kind in "iub"):
            raise Mismatch(f"output '{n}': dtype {g.dtype}, PyTorch {want[n].dtype}")
    if not (len(gb) == len(gl) == len(gs)):
        raise Mismatch(f"boxes/labels/scores disagree on the count: {len(gb)}/{len(gl)}/{len(gs)}")
    box_tol = tol_of(np.concatenate([wb.ravel(), gb.ravel()]))
    score_tol = max(tol_of(ws), RTOL * thresh, 1e-6)

    def near_cut(score, scores):
        if abs(score - thresh) <= score_tol:
            return True
        return cap and len(scores) >= cap and abs(score - float(np.min(scores))) <= score_tol

    used = np.zeros(len(gb), dtype=bool)
    pairs = []
    margin = 0.0
    unmatched_want = []
    for i in np.argsort(-ws, kind="stable"):
        best, best_err = -1, None
        for j in range(len(gb)):
            if used[j] or int(gl[j]) != int(wl[i]):
                continue
            if abs(float(gs[j]) - float(ws[i])) > RTOL * abs(float(ws[i])) + score_tol:
                continue
            err = np.abs(gb[j].astype(np.float64) - wb[i])
            if np.all(err <= RTOL * np.abs(wb[i]) + box_tol):
                e = float(np.max(err))
                if best_err is None or e < best_err:
                    best, best_err = j, e
        if best < 0:
            unmatched_want.append(i)
        else:
            used[best] = True
            pairs.append((i, best))
            # How close the pair came to the tolerance (score, then box).
            j = best
            margin = max(margin, abs(float(gs[j]) - float(ws[i])) /
                         (RTOL * abs(float(ws[i])) + score_tol),
                         float(np.max(np.abs(gb[j].astype(np.float64) - wb[i]) /
                                      (RTOL * np.abs(wb[i]) + box_tol))))
    for i in unmatched_want:
        if not near_cut(float(ws[i]), ws):
            raise Mismatch(f"PyTorch's detection {i} (label {int(wl[i])}, score {float(ws[i]):.6f}, "
                           f"box {np.round(wb[i], 3).tolist()}) has no match among {len(gb)} "
                           f"detection(s)")
    for j in np.flatnonzero(~used):
        if not near_cut(float(gs[j]), gs):
            raise Mismatch(f"extra detection {j} (label {int(gl[j])}, score {float(gs[j]):.6f}, "
                           f"box {np.round(gb[j], 3).tolist()}) that PyTorch does not have")
    # Per-detection outputs (masks, keypoints): compared on matched pairs.
    for n in meta["outputs"]:
        if n in ("boxes", "labels", "scores"):
            continue
        g, w = got[n], want[n]
        if g.shape[1:] != w.shape[1:] or len(g) != len(gb):
            raise Mismatch(f"output '{n}': shape {list(g.shape)}, PyTorch {list(w.shape)}")
        atol = tol_of(w)
        for i, j in pairs:
            try:
                compare_tensor(f"{n}[{i}]", g[j], w[i], atol=atol)
            except Mismatch as e:
                raise Mismatch(f"{e} (detection matched to PyTorch's {i})") from None
    if len(ws) == 0:
        raise Mismatch("PyTorch returned no detections: the comparison would prove nothing "
                       "(lower the score threshold in gen_zoo.py)")
    return (f"{len(pairs)} of {len(ws)} detections matched"
            + (f", {len(ws) - len(pairs)} at a cut-off" if len(pairs) != len(ws) else "")
            + f"; worst difference {margin:.2g} of the tolerance")


def self_test():
    """The comparisons reject what they must: without this, a comparison
    that accepts everything would make every zoo entry pass."""
    rng = np.random.default_rng(0)
    checks = []

    def expect(what, fn, should_pass):
        try:
            fn()
            ok = should_pass
        except Mismatch:
            ok = not should_pass
        checks.append(ok)
        print(f"{'ok  ' if ok else 'FAIL'} {what}")

    w = rng.standard_normal((2, 50)).astype(np.float32)
    expect("equal tensors pass", lambda: compare_tensor("t", w.copy(), w), True)
    expect("a 1e-5 relative change passes", lambda: compare_tensor("t", w * (1 + 1e-5), w), True)
    bad = w.copy()
    bad[1, 7] += 1e-3 * np.max(np.abs(w))
    expect("one element off by 1e-3 of the scale fails", lambda: compare_tensor("t", bad, w), False)
    expect("a different shape fails", lambda: compare_tensor("t", w.reshape(4, 25), w), False)
    nan = w.copy()
    nan[0, 0] = np.nan
    expect("a NaN fails", lambda: compare_tensor("t", nan, w), False)
    expect("integers must be equal",
           lambda: compare_tensor("i", np.array([1, 2, 4]), np.array([1, 2, 3])), False)

    meta = {"outputs": ["boxes", "labels", "scores", "masks"],
            "detection": {"score_thresh": 0.3, "max_detections": 50}}
    n = 6
    boxes = np.sort(rng.random((n, 4)).astype(np.float32) * 100, axis=1)
    want = {"boxes": boxes, "labels": np.array([1, 2, 1, 3, 2, 1]),
            "scores": np.array([0.9, 0.8, 0.8, 0.7, 0.5, 0.3000001], dtype=np.float32),
            "masks": rng.random((n, 1, 4, 4)).astype(np.float32)}

    def variant(perm=None, drop=None, **change):
        got = {k: v.copy() for k, v in want.items()}
        for k, (i, v) in change.items():
            got[k][i] = v
        if perm is not None:
            got = {k: v[perm] for k, v in got.items()}
        if drop is not None:
            got = {k: np.delete(v, drop, axis=0) for k, v in got.items()}
        return lambda: compare_detections(meta, got, want)

    expect("detections in another order (tied scores) pass", variant(perm=[0, 2, 1, 3, 5, 4]), True)
    expect("a box moved by 1% fails", variant(boxes=(3, boxes[3] + 1.0)), False)
    expect("a changed label fails", variant(labels=(0, 7)), False)
    expect("float labels (outputs swapped by name) fail",
           lambda: compare_detections(meta, dict(want, labels=want["labels"].astype(np.float32)),
                                      want), False)
    expect("a changed score fails", variant(scores=(1, 0.75)), False)
    expect("a missing detection fails", variant(drop=1), False)
    expect("a missing detection at the threshold passes", variant(drop=5), True)
    expect("a wrong mask of a matched detection fails",
           variant(masks=(2, want["masks"][2] + 0.01)), False)
    expect("no detections at all fails (nothing compared)",
           lambda: compare_detections(meta, {k: v[:0] for k, v in want.items()},
                                      {k: v[:0] for k, v in want.items()}), False)
    print(f"self test: {sum(checks)} of {len(checks)} checks as expected")
    return 0 if all(checks) else 1


def op_types(path):
    """Op types of a model, subgraphs (If/Loop/Scan bodies) included."""
    import onnx
    ops = set()

    def walk(g):
        for n in g.node:
            ops.add(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}")
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
                for sub in a.graphs:
                    walk(sub)
    walk(onnx.load(path, load_external_data=False).graph)
    return ops


def first_error(stderr):
    lines = [l.strip() for l in stderr.splitlines() if l.strip()]
    for l in lines:
        if l.startswith("error:"):
            return l
    return lines[-1] if lines else "(no message)"


def run_model(args, name):
    """Returns (ok, detail, seconds)."""
    data = args.data
    with open(os.path.join(data, name + ".json")) as f:
        meta = json.load(f)
    out_dir = tempfile.mkdtemp(prefix=f"zoo_{name}.")
    try:
        cmd = [args.cli, "run", os.path.join(data, name + ".onnx"), "--output-dir", out_dir,
               "--json", "--log-level", "error"]
        for n in meta["inputs"]:
            cmd += ["--input", f"{n}={os.path.join(data, f'{name}.input.{n}.npy')}"]
        if args.backends:
            cmd += ["--backends", args.backends]
        if args.backend_path:
            cmd = [args.cli, "--backend-path", args.backend_path] + cmd[1:]
        t0 = time.time()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            return False, f"timed out after {args.timeout} s", time.time() - t0, meta
        secs = time.time() - t0
        if p.returncode != 0:
            return False, first_error(p.stderr), secs, meta
        try:
            used = json.loads(p.stdout).get("backends_used", [])
        except ValueError:
            return False, f"stdout is not one JSON object: {p.stdout[:200]!r}", secs, meta
        got, want = {}, {}
        for n in meta["outputs"]:
            path = os.path.join(out_dir, n + ".npy")
            if not os.path.exists(path):
                return False, f"output '{n}' was not written", secs, meta
            got[n] = np.load(path)
            want[n] = np.load(os.path.join(data, f"{name}.expected.{n}.npy"))
        try:
            if meta["compare"] == "detection":
                detail = compare_detections(meta, got, want)
            else:
                worst = max(compare_tensor(n, got[n], want[n]) for n in meta["outputs"])
                detail = f"max |diff| / max |ref| = {worst:.2g}"
        except Mismatch as e:
            return False, str(e), secs, meta
        return True, f"{detail}; backends {','.join(used)}", secs, meta
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--self-test", action="store_true",
                    help="check that the comparisons reject wrong outputs, then exit")
    ap.add_argument("--cli", help="the backplane executable")
    ap.add_argument("--data", help="gen_zoo.py's output directory")
    ap.add_argument("--backends", default="", help="--backends for `run` (default: the runtime's)")
    ap.add_argument("--backend-path", default="", help="--backend-path for `run`")
    ap.add_argument("--all", action="store_true", help="every model in --data")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per model")
    ap.add_argument("--ops", action="store_true",
                    help="after the table, each failing model's op types that no passing model has")
    ap.add_argument("models", nargs="*")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if not args.cli or not args.data:
        ap.error("--cli and --data are required")
    names = list(args.models)
    if args.all:
        names += sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(args.data, "*.json")))
    if not names:
        ap.error("name models or pass --all")
    failed = []
    passed = []
    for name in names:
        if not os.path.exists(os.path.join(args.data, name + ".json")):
            print(f"{name:40s} FAIL  -              -  not generated (gen_zoo.py failed?)", flush=True)
            failed.append(name)
            continue
        ok, detail, secs, meta = run_model(args, name)
        (passed if ok else failed).append(name)
        print(f"{name:40s} {'pass' if ok else 'FAIL'}  {meta['family']:14s} {secs:6.1f}s  {detail}",
              flush=True)
    print(f"{len(passed)} passed, {len(failed)} failed")
    if args.ops and failed:
        # The first error hides the next: list what else a failing model
        # needs that the passing ones never exercised.
        seen = set()
        for n in passed:
            seen |= op_types(os.path.join(args.data, n + ".onnx"))
        for n in failed:
            path = os.path.join(args.data, n + ".onnx")
            if os.path.exists(path):
                print(f"{n}: ops no passing model has: {', '.join(sorted(op_types(path) - seen)) or '-'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
