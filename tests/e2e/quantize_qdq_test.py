#!/usr/bin/python3
"""scripts/quantize_qdq.py on models of the e2e_models fixture, checked end to end.

tiny_cnn, static QDQ, calibrated in process through the build's Python module when the
build has one (CALIBRATION = python), else with `backplane run` (cli), as the script's
output says:
  - the file has per-channel int8 Conv / Gemm weights (DequantizeLinear with `axis`, one
    scale per output channel), int32 biases with scale = input scale * weight scale, and a
    QuantizeLinear -> DequantizeLinear pair on the inputs of every Conv;
  - ONNX Runtime loads and runs it, and Backplane's output is within 3 steps of the output
    scale of ONNX Runtime's (ONNX Runtime runs int8 kernels and requantizes at each layer,
    Backplane dequantizes and computes in float: they may round differently);
  - the quantized output is close to the float model's: max error <= 10% of max|float|;
  - with the Python module, --calibrate cli writes the same model: the same nodes, scales
    within 1e-5 (relative) and integers within 1 (a bias rounded the other way) of the
    in-process calibration's.
transformer, dynamic (DynamicQuantizeLinear + MatMulInteger on the 12 MatMuls of a weight,
one DynamicQuantizeLinear per tensor they read; the attention's two MatMuls of activations
stay float): every node runs on CpuOneDnn, Backplane and ONNX Runtime agree within 1e-3 of
max|output|, and both are within 10% of the float model.
tiny_cnn, dynamic (its 3 Conv as DynamicQuantizeLinear + ConvInteger, weights uint8 of a zero
point, then symmetric int8): every node runs on CpuOneDnn, Backplane and ONNX Runtime agree
within 1e-3 of max|output|, and both are within 10% of the float model.

Usage: quantize_qdq_test.py BACKPLANE_CLI MODELS_DIR ORT_MODULE_DIR WORK_DIR [CALIBRATION]
Fails when node or onnxruntime-node (ORT_MODULE_DIR) is missing.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
QUANTIZE = os.path.join(ROOT, "scripts", "quantize_qdq.py")
ORT_RUN = os.path.join(ROOT, "tests", "corpus", "ort_run.js")

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def run(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def backplane_run(cli, model, inputs, out_dir):
    cmd = [cli, "run", model, "--output-dir", out_dir]
    for name, f in inputs.items():
        cmd += ["--input", f"{name}={f}"]
    run(cmd)
    return {f[:-4]: np.load(os.path.join(out_dir, f)) for f in os.listdir(out_dir)}


def ort_run(module, model, inputs, work):
    os.makedirs(work, exist_ok=True)
    spec = {"inputs": [{"name": n, "file": os.path.relpath(f, work)} for n, f in inputs.items()]}
    with open(os.path.join(work, "inputs.json"), "w") as f:
        json.dump(spec, f)
    run(["node", ORT_RUN, module, model, work, "1", "0"])
    with open(os.path.join(work, "ort_result.json")) as f:
        result = json.load(f)
    return {o["name"]: np.load(os.path.join(work, o["file"])) for o in result["outputs"]}


def inits(model):
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def attr(node, name, default=None):
    return next((onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == name),
                default)


def check_dynamic(what, bp, ort, ref):
    """A dynamically quantized model's one output: Backplane and ONNX Runtime agree within
    1e-3 of max|float output|, and Backplane's is within 10% of the float model's."""
    (out,) = ref
    scale = np.abs(ref[out]).max()
    diff = np.abs(bp[out] - ort[out]).max() / scale
    err = np.abs(bp[out] - ref[out]).max() / scale
    print(f"{what} dynamic: Backplane vs ONNX Runtime {diff:.2e} of max|output|; "
          f"quantized vs float {err:.4f}")
    check(diff <= 1e-3, f"{what}: Backplane agrees with ONNX Runtime ({diff:.2e})")
    check(err <= 0.10, f"{what}: quantized within 10% of float ({err:.4f})")


def check_static_file(path):
    m = onnx.load(path)
    values = inits(m)
    producer = {o: n for n in m.graph.node for o in n.output}
    convs = [n for n in m.graph.node if n.op_type in ("Conv", "Gemm")]
    check(len(convs) == 4, f"tiny_cnn: 3 Conv and 1 Gemm ({len(convs)})")
    for n in convs:
        w_dq = producer.get(n.input[1])
        ok = w_dq is not None and w_dq.op_type == "DequantizeLinear"
        check(ok, f"{n.name}: the weight is read through DequantizeLinear")
        if not ok:
            continue
        qw, ws, wz = (values[i] for i in w_dq.input)
        out_channels = qw.shape[0] if n.op_type == "Conv" or attr(n, "transB", 0) else qw.shape[1]
        check(qw.dtype == np.int8 and wz.dtype == np.int8 and not wz.any(),
              f"{n.name}: int8 weight, zero points 0")
        check(attr(w_dq, "axis") is not None and ws.shape == (out_channels,),
              f"{n.name}: weight per channel, {ws.shape} scales for {out_channels} channels")
        x_dq = producer.get(n.input[0])
        check(x_dq is not None and x_dq.op_type == "DequantizeLinear" and
              producer.get(x_dq.input[0]) is not None and
              producer[x_dq.input[0]].op_type == "QuantizeLinear",
              f"{n.name}: input through QuantizeLinear -> DequantizeLinear")
        if len(n.input) > 2 and n.input[2]:
            b_dq = producer.get(n.input[2])
            ok = b_dq is not None and b_dq.op_type == "DequantizeLinear"
            check(ok, f"{n.name}: bias read through DequantizeLinear")
            if ok and x_dq is not None:
                qb, bs = values[b_dq.input[0]], values[b_dq.input[1]]
                xs = values[x_dq.input[1]]
                check(qb.dtype == np.int32 and np.allclose(bs, xs * ws, rtol=1e-6),
                      f"{n.name}: int32 bias, scale = input scale * weight scale")
    # The scale of the graph output, for the tolerance.
    out_dq = producer[m.graph.output[0].name]
    check(out_dq.op_type == "DequantizeLinear", "the graph output is dequantized")
    return float(values[out_dq.input[1]])


def same_model(a_path, b_path):
    """'' if the two quantized models have the same nodes, float initializers within 1e-5
    (relative) and integer ones within 1; else what differs."""
    a, b = onnx.load(a_path), onnx.load(b_path)
    if [(n.op_type, list(n.input)) for n in a.graph.node] != \
            [(n.op_type, list(n.input)) for n in b.graph.node]:
        return "the nodes differ"
    va, vb = inits(a), inits(b)
    if set(va) != set(vb):
        return "the initializers differ"
    for name, x in va.items():
        y = vb[name]
        if x.dtype != y.dtype or x.shape != y.shape:
            return f"'{name}': {x.dtype}{x.shape} against {y.dtype}{y.shape}"
        if x.dtype.kind == "f":
            if not np.allclose(x, y, rtol=1e-5, atol=0):
                return f"'{name}': {x.ravel()[:4]} against {y.ravel()[:4]}"
        elif np.abs(x.astype(np.int64) - y.astype(np.int64)).max(initial=0) > 1:
            return f"'{name}': integers more than 1 apart"
    return ""


def main():
    cli, models, module, work = sys.argv[1:5]
    calibration = sys.argv[5] if len(sys.argv) > 5 else "cli"
    if shutil.which("node") is None or not os.path.exists(os.path.join(module, "package.json")):
        print(f"FAILED: needs node and onnxruntime-node in {module} "
              "(scripts/fetch-corpus.sh installs it)")
        return 1
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)

    # ---- tiny_cnn, static
    src = os.path.join(models, "tiny_cnn.onnx")
    qdq = os.path.join(work, "tiny_cnn.qdq.onnx")
    said = run([sys.executable, QUANTIZE, src, qdq, "--backplane", cli]).strip()
    print(said)
    how = "in process" if calibration == "python" else "with `backplane run`"
    check(f"samples {how}" in said, f"tiny_cnn: calibrated {how}")
    if calibration == "python":
        qdq_cli = os.path.join(work, "tiny_cnn.qdq.cli.onnx")
        print(run([sys.executable, QUANTIZE, src, qdq_cli, "--backplane", cli,
                   "--calibrate", "cli"]).strip())
        differs = same_model(qdq, qdq_cli)
        check(not differs, "tiny_cnn: in-process and `backplane run` calibration write the "
              f"same model {differs}".rstrip())
    out_scale = check_static_file(qdq)
    x = os.path.join(models, "tiny_cnn.input.npy")
    name = onnx.load(src).graph.input[0].name
    ref = backplane_run(cli, src, {name: x}, os.path.join(work, "bp_float"))
    bp = backplane_run(cli, qdq, {name: x}, os.path.join(work, "bp_qdq"))
    ort = ort_run(module, qdq, {name: x}, os.path.join(work, "ort_qdq"))
    (out,) = ref
    steps = np.abs(bp[out] - ort[out]).max() / out_scale
    err = np.abs(bp[out] - ref[out]).max() / np.abs(ref[out]).max()
    print(f"tiny_cnn static: output scale {out_scale:.4g}; Backplane vs ONNX Runtime "
          f"{steps:.2f} steps; quantized vs float {err:.4f} of max|float|")
    check(steps <= 3, f"tiny_cnn: Backplane within 3 output steps of ONNX Runtime ({steps:.2f})")
    check(err <= 0.10, f"tiny_cnn: quantized within 10% of float ({err:.4f})")
    check(np.argmax(bp[out]) == np.argmax(ref[out]), "tiny_cnn: the same top class as float")

    # ---- transformer, dynamic
    src = os.path.join(models, "transformer.onnx")
    dyn = os.path.join(work, "transformer.dynamic.onnx")
    print(run([sys.executable, QUANTIZE, src, dyn, "--dynamic"]).strip())
    m = onnx.load(dyn)
    ops = [n.op_type for n in m.graph.node]
    consts = set(inits(m))
    left = [n for n in m.graph.node if n.op_type == "MatMul" and set(n.input) & consts]
    producer = {o: n for n in m.graph.node for o in n.output}
    reads = [producer.get(n.input[0]) for n in m.graph.node if n.op_type == "MatMulInteger"]
    check(len(reads) == 12 and not left and
          all(r is not None and r.op_type == "DynamicQuantizeLinear" for r in reads),
          "transformer: the 12 MatMuls of a weight are DynamicQuantizeLinear + "
          f"MatMulInteger ({len(reads)}, {len(left)} left)")
    quantizers = [n.input[0] for n in m.graph.node if n.op_type == "DynamicQuantizeLinear"]
    check(len(set(quantizers)) == len(quantizers) == 8,
          f"transformer: each tensor quantized once for all its MatMuls, as ONNX Runtime's "
          f"quantizer does (Q, K and V read one): {len(quantizers)} DynamicQuantizeLinear")
    plan = run([cli, "partition", dyn])
    check("CpuRef [" not in plan, "transformer dynamic: every node on CpuOneDnn")
    x = os.path.join(models, "transformer.input.npy")
    name = m.graph.input[0].name
    ref = backplane_run(cli, src, {name: x}, os.path.join(work, "bp_float_tr"))
    bp = backplane_run(cli, dyn, {name: x}, os.path.join(work, "bp_dyn"))
    ort = ort_run(module, dyn, {name: x}, os.path.join(work, "ort_dyn"))
    check_dynamic("transformer", bp, ort, ref)

    # ---- tiny_cnn, dynamic: its convolutions as ConvInteger of uint8 weights of a zero
    # point (ONNX Runtime's default) and of symmetric int8 ones. CpuOneDnn's sums are the
    # integers' (docs/numerics.md): ONNX Runtime's to the bit but for the float operators
    # between (pooling, the head), which may round a value quantized again to the next integer.
    src = os.path.join(models, "tiny_cnn.onnx")
    x = os.path.join(models, "tiny_cnn.input.npy")
    name = onnx.load(src).graph.input[0].name
    ref = backplane_run(cli, src, {name: x}, os.path.join(work, "bp_float_dc"))
    for weights in ("uint8", "int8"):
        dyn = os.path.join(work, f"tiny_cnn.dynamic.{weights}.onnx")
        print(run([sys.executable, QUANTIZE, src, dyn, "--dynamic", "--conv-weights",
                   weights]).strip())
        ops = [n.op_type for n in onnx.load(dyn).graph.node]
        check(ops.count("ConvInteger") == 3 and "Conv" not in ops,
              f"tiny_cnn {weights}: its 3 Conv are ConvInteger ({ops.count('ConvInteger')})")
        plan = run([cli, "partition", dyn])
        if "CpuRef [" in plan:
            print(plan)
        check("CpuRef [" not in plan, f"tiny_cnn {weights}: every node on CpuOneDnn")
        bp = backplane_run(cli, dyn, {name: x}, os.path.join(work, f"bp_dc_{weights}"))
        ort = ort_run(module, dyn, {name: x}, os.path.join(work, f"ort_dc_{weights}"))
        check_dynamic(f"tiny_cnn {weights}", bp, ort, ref)

    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
