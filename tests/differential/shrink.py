"""Shrinking a failing spec (graphgen.py) to a small one that still fails.

Greedy: try each candidate edit in turn (the earliest failing output alone,
a step dropped and its readers wired to its input, a pin removed, a dim made
smaller, a parameter made plainer) and keep the first one that still fails;
repeat until no edit does or the budget of tries is spent.
"""
from __future__ import annotations

import copy

import graphgen

_REF_KEYS = ("x", "y", "a", "b", "c")


def _refs(st):
    out = []
    for k in _REF_KEYS:
        if isinstance(st.get(k), str):
            out.append(st[k])
    out += [r for r in st.get("xs", []) if isinstance(r, str)]
    return out


def _rename(st, old, new):
    for k in _REF_KEYS:
        if st.get(k) == old:
            st[k] = new
    if "xs" in st:
        st["xs"] = [new if r == old else r for r in st["xs"]]


def prune(spec):
    """Drops the steps and inputs no output depends on."""
    need = set(spec["outputs"])
    for st in reversed(spec["steps"]):
        if st["id"] in need:
            need.update(_refs(st))
    spec["steps"] = [st for st in spec["steps"] if st["id"] in need]
    spec["inputs"] = [i for i in spec["inputs"] if i["name"] in need]
    return spec


def _primary(st):
    refs = _refs(st)
    return refs[0] if refs else None


def candidates(spec):
    # The earliest step whose value alone still fails: a prefix of the graph.
    if len(spec["outputs"]) > 1 or len(spec["steps"]) > 1:
        for st in spec["steps"]:
            if [st["id"]] != spec["outputs"]:
                yield prune(dict(copy.deepcopy(spec), outputs=[st["id"]]))
    # One step dropped, its readers reading its input.
    for i, st in enumerate(spec["steps"]):
        p = _primary(st)
        if p is None:
            continue
        c = copy.deepcopy(spec)
        del c["steps"][i]
        for later in c["steps"][i:]:
            _rename(later, st["id"], p)
        c["outputs"] = list(dict.fromkeys(p if o == st["id"] else o for o in c["outputs"]))
        yield prune(c)
    for i, st in enumerate(spec["steps"]):
        if st.get("pin"):
            c = copy.deepcopy(spec)
            del c["steps"][i]["pin"]
            yield c
    # Smaller inputs.
    for i, inp in enumerate(spec["inputs"]):
        for d, n in enumerate(inp["shape"]):
            for smaller in sorted({1, n // 2, n - 1}):
                if 1 <= smaller < n:
                    c = copy.deepcopy(spec)
                    c["inputs"][i]["shape"][d] = smaller
                    yield c
    # Plainer parameters.
    plain = {"oc": 1, "n": 1, "group": 1, "depthwise": False, "bias": False, "auto_pad": None,
             "ceil": 0, "cip": 0, "wbatch": 0, "transB": 0, "alpha": 1.0, "beta": 1.0, "c": "none",
             "affine": 0, "acts": [], "pc": False, "qlinear": False, "wzp": False, "same": False}
    for i, st in enumerate(spec["steps"]):
        for key, value in plain.items():
            if key in st and st[key] != value and not (key == "c" and st["k"] != "gemm"):
                c = copy.deepcopy(spec)
                c["steps"][i][key] = value
                yield c
        for key, value in (("ks", 1), ("st", 1), ("dil", 1), ("pads", 0)):
            if key in st and any(v != value for v in st[key]):
                c = copy.deepcopy(spec)
                c["steps"][i][key] = [value] * len(st[key])
                yield c
        for key in ("a", "b", "y"):
            ref = st.get(key)
            if isinstance(ref, dict) and (ref["mask"] != 0 or ref["lead"] != 0):
                c = copy.deepcopy(spec)
                c["steps"][i][key] = dict(ref, mask=0, lead=99)  # a 0-d constant
                yield c


def shrink(spec, fails, budget=400, log=None):
    """The smallest spec found that still `fails` (a predicate on specs)."""
    best = prune(copy.deepcopy(spec))
    tries = 0
    progress = True
    while progress and tries < budget:
        progress = False
        for cand in candidates(best):
            if tries >= budget:
                break
            try:
                graphgen.build(cand)
            except graphgen.InvalidSpec:
                continue
            tries += 1
            if fails(cand):
                if log and len(cand["steps"]) < len(best["steps"]):
                    log(f"  shrunk to {len(cand['steps'])} steps: {graphgen.describe(cand)}")
                best = cand
                progress = True
                break
    return best
