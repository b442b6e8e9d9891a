#!/usr/bin/python3
"""Generates the ONNX backend test cases (node and simple model tests) from the
installed onnx package, for tests/conformance.

This is the documented `backend-test-tools generate-data -o DIR` command
(onnx.backend.test.cmd_tools.generate_data), run in-process so numpy aliases
can be restored first. Output layout (as the command writes it):

  DIR/node/<case>/model.onnx
  DIR/node/<case>/test_data_set_0/{input_N.pb, output_N.pb}
  DIR/simple/<case>/...                (small multi-node models)
  DIR/real/<case>/data.json            (downloadable models: not used here)

Debian 12's python3-onnx 1.12 predates numpy 1.24, which removed np.float,
np.int, np.bool and np.object; onnx 1.12 still uses them at import time and in
the case generators, so they are restored before onnx is imported.

If the onnx package ships pre-generated node data (onnx/backend/test/data/node),
each generated case is compared with the shipped one and disagreements are
reported (and fail the script). Debian's package does not ship it.

Run with /usr/bin/python3 (Debian's numpy and onnx).
"""
import argparse
import hashlib
import os
import sys
import warnings

import numpy as np

# Must precede `import onnx` (see above).
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # numpy warns when the removed names are probed
    for _alias, _type in (("float", float), ("int", int), ("bool", bool), ("object", object)):
        if not hasattr(np, _alias):
            setattr(np, _alias, _type)

import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402
from onnx.backend.test import cmd_tools  # noqa: E402

STAMP = ".generated"


def _stamp_text(op_type):
    with open(os.path.abspath(__file__), "rb") as f:
        h = hashlib.sha256(f.read()).hexdigest()
    return f"onnx {onnx.__version__} numpy {np.__version__} op_type {op_type} script {h}\n"


def _load_tensor(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def _same_case(gen_dir, ref_dir):
    """Compares one generated case with the shipped one; returns a reason or None."""
    gen_model = onnx.load(os.path.join(gen_dir, "model.onnx"))
    ref_model = onnx.load(os.path.join(ref_dir, "model.onnx"))
    if gen_model.graph.SerializeToString() != ref_model.graph.SerializeToString():
        return "model graph differs"
    for sub in sorted(os.listdir(ref_dir)):
        rsub = os.path.join(ref_dir, sub)
        if not os.path.isdir(rsub):
            continue
        gsub = os.path.join(gen_dir, sub)
        if not os.path.isdir(gsub):
            return f"{sub} missing"
        for name in sorted(os.listdir(rsub)):
            gpath = os.path.join(gsub, name)
            if not os.path.exists(gpath):
                return f"{sub}/{name} missing"
            try:
                a, b = _load_tensor(gpath), _load_tensor(os.path.join(rsub, name))
            except Exception:  # sequences/maps/optionals: compare bytes
                with open(gpath, "rb") as f1, open(os.path.join(rsub, name), "rb") as f2:
                    if f1.read() != f2.read():
                        return f"{sub}/{name} bytes differ"
                continue
            if a.shape != b.shape or a.dtype != b.dtype:
                return f"{sub}/{name} shape/dtype differ"
            if a.dtype.kind in "fc":
                if not np.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True):
                    return f"{sub}/{name} values differ"
            elif not np.array_equal(a, b):
                return f"{sub}/{name} values differ"
    return None


def verify_against_shipped(out_dir):
    shipped = os.path.join(cmd_tools.DATA_DIR, "node")
    if not os.path.isdir(shipped):
        print(f"gen_conformance: onnx {onnx.__version__} ships no node data "
              f"({shipped}); nothing to cross-check")
        return 0
    bad = 0
    checked = 0
    for case in sorted(os.listdir(shipped)):
        gen = os.path.join(out_dir, "node", case)
        if not os.path.isdir(gen):
            # Cases that depend on randomness or were removed are not regenerated.
            continue
        checked += 1
        reason = _same_case(gen, os.path.join(shipped, case))
        if reason:
            bad += 1
            print(f"gen_conformance: MISMATCH {case}: {reason}")
    print(f"gen_conformance: cross-checked {checked} cases with shipped data, {bad} mismatches")
    return bad


def write_tampered(src_dir, out_dir):
    """Copies two cases with one expected value changed just past tolerance.

    The conformance runner must report both as failures; ctest checks that it
    does (conformance_detects_wrong_results), so a harness that compared
    nothing could not pass.
    """
    import shutil
    cases = {
        # float: one element off by 2e-3 relative (rtol is 1e-3)
        "test_add": lambda a: _bump(a, lambda v: v * (1 + 2e-3) + 1e-3),
        # int64: one index off by one (ints compare exactly)
        "test_argmax_default_axis_example": lambda a: _bump(a, lambda v: v + 1),
    }
    for case, change in cases.items():
        src = os.path.join(src_dir, "node", case)
        dst = os.path.join(out_dir, "node", case + "_tampered")
        if os.path.exists(dst):
            shutil.rmtree(dst)
        shutil.copytree(src, dst)
        path = os.path.join(dst, "test_data_set_0", "output_0.pb")
        t = onnx.TensorProto()
        with open(path, "rb") as f:
            t.ParseFromString(f.read())
        a = change(numpy_helper.to_array(t).copy())
        with open(path, "wb") as f:
            f.write(numpy_helper.from_array(a, t.name).SerializeToString())
    print(f"gen_conformance: wrote {len(cases)} tampered cases to {out_dir}/node")


def _bump(a, fn):
    flat = a.reshape(-1)
    flat[0] = fn(flat[0])
    return a


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--out", required=True, help="output directory")
    ap.add_argument("-t", "--op_type", default=None, help="only cases using this op")
    ap.add_argument("--force", action="store_true", help="regenerate even if up to date")
    ap.add_argument("--tampered-out", default=None,
                    help="also write deliberately wrong copies of two cases here (harness self-check)")
    args = ap.parse_args()

    stamp_path = os.path.join(args.out, STAMP)
    stamp = _stamp_text(args.op_type)
    if not args.force and os.path.exists(stamp_path):
        with open(stamp_path) as f:
            if f.read() == stamp:
                n = len(os.listdir(os.path.join(args.out, "node")))
                print(f"gen_conformance: {args.out} up to date ({n} node cases)")
                if args.tampered_out:
                    write_tampered(args.out, args.tampered_out)
                return 0

    os.makedirs(args.out, exist_ok=True)
    if os.path.exists(stamp_path):
        os.remove(stamp_path)
    cmd_tools.generate_data(argparse.Namespace(output=args.out, op_type=args.op_type))
    n_node = len(os.listdir(os.path.join(args.out, "node")))
    print(f"gen_conformance: wrote {n_node} node cases to {args.out}/node")
    if verify_against_shipped(args.out):
        return 1
    with open(stamp_path, "w") as f:
        f.write(stamp)
    if args.tampered_out:
        write_tampered(args.out, args.tampered_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
