"""`backplane validate` (tools/cmd_validate.cpp) against backends with planted bugs.

MockFuse (backends/testing/mock_acc) is right on every op alone but "fuses" a
Conv with the Add of a constant that alone reads its output, and reads that
constant back to front; MockWrong is wrong on one op alone (a broadcasting
Add). validate must name the node, its backend and its group, on a small
model and on a ~500-node one, exit 0 on a right plan, print JSON with the
documented fields, and keep the CLI's exit statuses (1 failure, 2 usage).

usage: validate_test.py BACKPLANE_CLI MOCKFUSE_DIR MOCKWRONG_DIR
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CLI, FUSE_DIR, WRONG_DIR = sys.argv[1:4]
rng = np.random.default_rng(7)
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAIL:", what)


def validate(*args):
    p = subprocess.run([CLI, "validate", *map(str, args)], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    return p


def const(name, shape, scale=1.0):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


class Builder:
    """A chain of 4-channel 8x8 feature maps."""

    def __init__(self):
        self.nodes, self.inits, self.count, self.last = [], [], 0, "x"

    def fresh(self, prefix):
        self.count += 1
        return f"{prefix}_{self.count}"

    def conv(self):
        name = self.fresh("conv")
        w, b = const(name + "_w", (4, 4, 3, 3), 0.15), const(name + "_b", (4,), 0.1)
        self.inits += [w, b]
        self.nodes.append(helper.make_node("Conv", [self.last, w.name, b.name], [name + "_out"],
                                           name=name, pads=[1, 1, 1, 1]))
        self.last = name + "_out"
        return name

    def unary(self, op):
        name = self.fresh(op.lower())
        self.nodes.append(helper.make_node(op, [self.last], [name + "_out"], name=name))
        self.last = name + "_out"
        return name

    def add_constant(self):
        name = self.fresh("bias")
        c = const(name + "_c", (1, 4, 1, 1))
        self.inits.append(c)
        self.nodes.append(helper.make_node("Add", [self.last, c.name], [name + "_out"], name=name))
        self.last = name + "_out"
        return name

    def add(self, other):
        name = self.fresh("residual")
        self.nodes.append(helper.make_node("Add", [self.last, other], [name + "_out"], name=name))
        self.last = name + "_out"
        return name

    def save(self, path):
        graph = helper.make_graph(
            self.nodes, "validate_test",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
            [helper.make_tensor_value_info(self.last, TensorProto.FLOAT, [1, 4, 8, 8])],
            self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        onnx.save(model, path)


def block(b, planted):
    """Conv, Relu, Add(constant), Add(residual), Sigmoid; the planted block
    has the Add of the constant right after the Conv (MockFuse's bug)."""
    start = b.last
    conv = b.conv()
    if planted:
        add = b.add_constant()
        b.unary("Relu")
    else:
        b.unary("Relu")
        add = b.add_constant()
    b.add(start)
    b.unary("Sigmoid")  # not MockAcc's: a partition edge
    return conv, add


with tempfile.TemporaryDirectory() as tmp:
    # A small model with the planted pair in its second block.
    small = Builder()
    block(small, False)
    small_conv, small_add = block(small, True)
    block(small, False)
    small_path = os.path.join(tmp, "small.onnx")
    small.save(small_path)

    p = validate(small_path, "--backend-path", FUSE_DIR)
    print(p.stdout, p.stderr)
    check(p.returncode == 1, f"small: a wrong plan exits 1 (got {p.returncode})")
    check(f"'{small_add}' (Add) on MockFuse" in p.stdout, "small: the text names the Add and backend")
    check(f"with '{small_conv}' (Conv)" in p.stdout, "small: the text names the fused Conv")
    check("error    " in p.stdout and "max|got-ref|" in p.stdout, "small: the text gives the error")
    check(p.stderr == "", "small: a difference is a report, not an error")

    p = validate(small_path, "--backend-path", FUSE_DIR, "--json")
    try:
        j = json.loads(p.stdout)
    except json.JSONDecodeError as e:
        j = {}
        check(False, f"small --json: not JSON ({e}): {p.stdout!r}")
    check(p.returncode == 1, "small --json: exits 1")
    for field in ("model", "ok", "backends", "nodes", "nodes_off_cpuref", "partitions",
                  "generated_inputs", "checked", "differ", "checks", "wrong_node", "plans",
                  "seconds", "note"):
        check(field in j, f"small --json: field '{field}'")
    w = j.get("wrong_node") or {}
    check(j.get("ok") is False, "small --json: ok is false")
    check(w.get("name") == small_add and w.get("op_type") == "Add", "small --json: the node")
    check(w.get("backend") == "MockFuse", "small --json: the backend")
    check(w.get("fused_with") == [small_conv], f"small --json: fused_with {w.get('fused_with')}")
    check([g["name"] for g in w.get("group", [])] == [small_conv, small_add],
          "small --json: the group, in execution order")
    ins = {i["name"]: i for i in w.get("inputs", [])}
    check(ins.get(small_conv + "_out", {}).get("shape") == [1, 4, 8, 8]
          and ins.get(small_add + "_c", {}).get("constant") is True
          and ins.get(small_add + "_c", {}).get("shape") == [1, 4, 1, 1],
          f"small --json: input shapes and the constant: {ins}")
    check([o["dtype"] for o in w.get("outputs", [])] == ["float32"], "small --json: output dtype")
    check(w.get("tensor") == small_add + "_out" and w.get("max_abs_error", 0) > w.get("bound", 1),
          "small --json: the wrong tensor and its error")
    check(j.get("generated_inputs") == ["x"], "small --json: the input was generated")
    check(any(c["model_output"] for c in j.get("checks", [])), "small --json: outputs checked")
    check(any(not c["model_output"] for c in j.get("checks", [])),
          "small --json: tensors crossing partition edges checked")

    # The same model with the Add pinned to CpuRef is right (--override), and
    # so is a given input (--input).
    x = rng.random((1, 4, 8, 8), dtype=np.float32)
    np.save(os.path.join(tmp, "x.npy"), x)
    p = validate(small_path, "--backend-path", FUSE_DIR, "--override", f"{small_add}=CpuRef",
                 "--input", f"x={os.path.join(tmp, 'x.npy')}", "--json")
    j = json.loads(p.stdout) if p.returncode in (0, 1) and p.stdout else {}
    check(p.returncode == 0 and j.get("ok") is True and j.get("wrong_node") is None,
          f"override: a right plan exits 0 ({p.returncode}, {p.stderr})")
    check(j.get("generated_inputs") == [], "--input: nothing generated")

    # A model without the pattern is right on MockFuse.
    right = Builder()
    for _ in range(3):
        block(right, False)
    right_path = os.path.join(tmp, "right.onnx")
    right.save(right_path)
    p = validate(right_path, "--backend-path", FUSE_DIR)
    print(p.stdout, p.stderr)
    check(p.returncode == 0 and "all match" in p.stdout, f"right: exits 0 ({p.returncode})")
    check("MockFuse" in p.stdout, "right: the plan used MockFuse")

    # A node wrong on its own (MockWrong's broadcasting Add): no group.
    p = validate(small_path, "--backend-path", WRONG_DIR, "--backends", "MockWrong,CpuRef", "--json")
    j = json.loads(p.stdout) if p.stdout else {}
    w = j.get("wrong_node") or {}
    first_add = [n.name for n in small.nodes if n.op_type == "Add" and n.input[1].endswith("_c")][0]
    check(p.returncode == 1 and w.get("name") == first_add and w.get("fused_with") == []
          and w.get("backend") == "MockWrong",
          f"MockWrong: the first broadcasting Add, alone ({w.get('name')}, {w.get('fused_with')})")

    # ~500 nodes, the planted pair deep inside.
    big = Builder()
    planted_at = 71
    for k in range(100):
        conv, add = block(big, k == planted_at)
        if k == planted_at:
            big_conv, big_add = conv, add
    big_path = os.path.join(tmp, "big.onnx")
    big.save(big_path)
    t0 = time.monotonic()
    p = validate(big_path, "--backend-path", FUSE_DIR, "--json")
    seconds = time.monotonic() - t0
    j = json.loads(p.stdout) if p.stdout else {}
    w = j.get("wrong_node") or {}
    print(f"big: {len(big.nodes)} nodes, {j.get('nodes_off_cpuref')} off CpuRef, "
          f"{j.get('partitions')} partitions: found {w.get('name')} with {w.get('fused_with')} "
          f"in {j.get('plans')} plans, {seconds:.2f} s (requirement: < 10 s)")
    check(len(big.nodes) == 500, "big: 500 nodes")
    check(p.returncode == 1 and w.get("name") == big_add and w.get("fused_with") == [big_conv],
          f"big: names {big_add} fused with {big_conv} ({p.stderr})")

    # Errors: an unreadable model (exit 1, the file named), usage (exit 2).
    missing = os.path.join(tmp, "missing.onnx")
    p = validate(missing)
    check(p.returncode == 1 and p.stderr.startswith("error: ") and missing in p.stderr,
          f"missing model: exit 1 naming the file ({p.returncode}: {p.stderr})")
    garbage = os.path.join(tmp, "garbage.onnx")
    with open(garbage, "w") as f:
        f.write("not a model")
    p = validate(garbage)
    check(p.returncode == 1 and garbage in p.stderr, f"garbage model: exit 1 ({p.stderr})")
    p = validate()
    check(p.returncode == 2 and p.stderr.startswith("error: "), f"no model: exit 2 ({p.returncode})")
    p = validate(small_path, "--no-such-option")
    check(p.returncode == 2, f"unknown option: exit 2 ({p.returncode})")
    p = validate(small_path, "--override", "nobackend")
    check(p.returncode == 1 and "NODE=BACKEND" in p.stderr, "a malformed --override: exit 1")
    p = validate(small_path, "--backend-path", FUSE_DIR, "--override", "no_such_node=CpuRef")
    check(p.returncode == 1 and "no_such_node" in p.stderr, "an unknown node: exit 1, named")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("all checks passed")
