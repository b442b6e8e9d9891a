#!/usr/bin/python3
"""Models saved after ONNX Runtime's graph optimiser, and its fused operators one by one.

A model a user saved after ONNX Runtime's optimiser holds its fusions (FusedConv, FusedGemm,
FusedMatMul, SkipLayerNormalization, LayerNormalization at any opset, ...), which Backplane
rewrites at import into the standard operators they fused (src/onnx/contrib_ops.hpp).

1. Models of the e2e_models fixture saved by ONNX Runtime (onnxruntime-node, level
   "extended", the level whose output ONNX Runtime documents as portable): each file must
   hold the fused operators expected of it (else this test no longer tests them); Backplane
   runs it on its default backends with every node on CpuOneDnn, and on CpuRef for the small
   ones, within the numerics rule of ONNX Runtime's outputs on the same file.
   The same for tiny_cnn and resnet18 quantized to QDQ and the transformer quantized
   dynamically (scripts/quantize_qdq.py), which the optimiser turns into its quantized operators
   (QLinearAdd, QLinearAveragePool, QGemm, DynamicQuantizeMatMul, MatMulIntegerToFloat, ...):
   within 3 steps of the output's scale of ONNX Runtime's outputs. And three corpus models
   of other exporters (tests/corpus/models.json) saved so, on the default backends.
2. One model per fused operator and attribute case, built with onnx.helper (Attention and
   EmbedLayerNormalization as ONNX Runtime's transformer optimiser writes BERT's): Backplane
   on CpuRef and on the default backends within the rule of ONNX Runtime's kernels (its
   optimiser off); for a quantized output, within one step of its scale.
3. A fused operator outside what the rewrite covers (FusedMatMul with transBatchA, FusedConv
   with an activation ONNX has no operator for) fails to load with an error naming the node
   and what is outside; a model of ONNX Runtime's NCHWc layout (level "all"), with one saying
   to save it at level "extended".

The rule: max|got - ref| <= 1e-4 * max|ref| + 1e-6 per output (docs/numerics.md).

Usage: ort_optimized_test.py BACKPLANE_CLI MODELS_DIR ORT_MODULE_DIR WORK_DIR
Fails when node or onnxruntime-node (ORT_MODULE_DIR) is missing.
"""
import json
import os
import shutil
import subprocess
import sys
import zlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ORT_RUN = os.path.join(ROOT, "tests", "corpus", "ort_run.js")
QUANTIZE = os.path.join(ROOT, "scripts", "quantize_qdq.py")

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def save_inputs(work, inputs):
    os.makedirs(work, exist_ok=True)
    files = {}
    for name, array in inputs.items():
        files[name] = os.path.join(work, f"in_{len(files)}.npy")
        np.save(files[name], array)
    return files


def ort_run(module, model, files, work, optimization, save=None):
    spec = {"inputs": [{"name": n, "file": os.path.relpath(f, work)} for n, f in files.items()],
            "optimization": optimization}
    if save:
        spec["save_optimized"] = save
    with open(os.path.join(work, "inputs.json"), "w") as f:
        json.dump(spec, f)
    proc = subprocess.run(["node", ORT_RUN, module, model, work, "1", "0"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"ONNX Runtime failed on {model}:\n{proc.stderr}")
    with open(os.path.join(work, "ort_result.json")) as f:
        result = json.load(f)
    return {o["name"]: np.load(os.path.join(work, o["file"])) for o in result["outputs"]}


def backplane_run(cli, model, files, out_dir, backends=None):
    """(outputs, the run's JSON), or (None, stderr) when it fails."""
    shutil.rmtree(out_dir, ignore_errors=True)
    cmd = [cli, "run", model, "--json", "--output-dir", out_dir]
    if backends:
        cmd += ["--backends", backends]
    for name, f in files.items():
        cmd += ["--input", f"{name}={f}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return None, proc.stderr
    outs = {f[:-4]: np.load(os.path.join(out_dir, f)) for f in os.listdir(out_dir)}
    return outs, json.loads(proc.stdout)


def within_rule(got, ref):
    """'' if every output of ref is in got within the rule, else what differs."""
    for name, r in ref.items():
        g = got.get(name)
        if g is None or g.shape != r.shape:
            return f"output {name}: {None if g is None else g.shape} against {r.shape}"
        r64, g64 = r.astype(np.float64), g.astype(np.float64)
        err = float(np.max(np.abs(g64 - r64))) if r.size else 0.0
        bound = 1e-4 * (float(np.max(np.abs(r64))) if r.size else 0.0) + 1e-6
        if not err <= bound:
            return f"output {name}: max error {err:.3g} > {bound:.3g}"
    return ""


def compare(cli, model, files, ref, work, label, backends_list, only_onednn=False,
            judge=within_rule, what="within the rule of ONNX Runtime's outputs"):
    """Backplane on each of backends_list (None: the default backends) against ref:
    judge(outputs, ref) gives what differs ('' for nothing)."""
    for backends in backends_list:
        outs, info = backplane_run(cli, model, files, os.path.join(work, f"bp_{backends or 'default'}"),
                                   backends)
        where = f"{label} on {backends or 'the default backends'}"
        if outs is None:
            check(False, f"{where}: runs ({info.strip()})")
            continue
        why = judge(outs, ref)
        check(not why, f"{where}: {what} {why}")
        if only_onednn and not backends:
            check(info.get("backends_used") == ["CpuOneDnn"],
                  f"{where}: every node on CpuOneDnn (used {info.get('backends_used')})")


# 1. Models saved by ONNX Runtime's optimiser.
SAVED = {
    # model: (inputs, fused operators the saved file must hold, also on CpuRef)
    "tiny_cnn": ({"input": ("float", [1, 3, 32, 32])}, {"FusedConv"}, True),
    "mobilenet_v2": ({"input": ("float", [1, 3, 224, 224])}, {"FusedConv"}, False),
    "resnet18": ({"input": ("float", [1, 3, 224, 224])}, {"FusedConv"}, False),
    "transformer": ({"input_ids": ("ids", [1, 32])},
                    {"SkipLayerNormalization", "FusedMatMul", "Gelu"}, True),
    "encoder_dyn": ({"input_ids": ("ids", [2, 24])}, {"FusedMatMul", "LayerNormalization"}, True),
    "decoder_kv": ({"input_ids": ("ids", [1, 3]), "past_key_0": ("float", [1, 4, 5, 16]),
                    "past_value_0": ("float", [1, 4, 5, 16]), "past_key_1": ("float", [1, 4, 5, 16]),
                    "past_value_1": ("float", [1, 4, 5, 16])},
                   {"FusedMatMul", "LayerNormalization"}, True),
}


# Quantized by scripts/quantize_qdq.py first (static QDQ, or --dynamic), then saved by ONNX
# Runtime, which turns the groups into its quantized operators. Checked against ONNX Runtime's
# outputs on the saved file within 3 steps of the output's scale (each runtime rounds its
# layers' integers its own way; a float output: the float rule).
# Every node must run on CpuOneDnn: the saved files pool and flatten uint8 tensors between
# the quantized operators, and the transformer's quantizes the input of Q, K and V once for
# the three MatMulIntegerToFloat.
SAVED_QUANTIZED = {
    "tiny_cnn": ([], {"input": ("float", [1, 3, 32, 32])},
                 {"QLinearAveragePool", "QLinearGlobalAveragePool", "QGemm"}, True),
    "resnet18": ([], {"input": ("float", [1, 3, 224, 224])}, {"QLinearAdd", "QGemm"}, True),
    "transformer": (["--dynamic"], {"input_ids": ("ids", [1, 32])},
                    {"DynamicQuantizeMatMul", "MatMulIntegerToFloat"}, True),
}


def output_steps(model_path):
    """Per graph output, the scale of the DequantizeLinear that makes it (None: float)."""
    model = onnx.load(model_path)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    steps = {}
    for out in model.graph.output:
        steps[out.name] = None
        for n in model.graph.node:
            if out.name in n.output and n.op_type == "DequantizeLinear" and n.input[1] in inits:
                steps[out.name] = float(np.max(inits[n.input[1]]))
    return steps


def saved_quantized_models(cli, models_dir, module, work):
    for k, (name, (args, spec, expected, only_onednn)) in enumerate(SAVED_QUANTIZED.items()):
        mwork = os.path.join(work, "saved_quantized", name)
        os.makedirs(mwork, exist_ok=True)
        quantized = os.path.join(mwork, f"{name}_quantized.onnx")
        proc = subprocess.run([sys.executable, QUANTIZE, os.path.join(models_dir, f"{name}.onnx"),
                               quantized, "--backplane", cli, "--calibrate", "cli"] + args,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"quantize_qdq.py failed on {name}:\n{proc.stdout}{proc.stderr}")
        files = save_inputs(mwork, make_inputs(spec, 200 + k))
        saved = os.path.join(mwork, f"{name}_ort_extended.onnx")
        ort_run(module, quantized, files, mwork, "extended", save=saved)
        fused = {n.op_type for n in onnx.load(saved).graph.node if n.domain == "com.microsoft"}
        check(expected <= fused, f"{name} quantized: ONNX Runtime's saved model holds "
                                 f"{sorted(expected)} (it holds {sorted(fused)})")
        ref = ort_run(module, saved, files, mwork, "disabled")
        steps = output_steps(quantized)

        def judge(outs, ref):
            for out, r in ref.items():
                step = steps.get(out)
                why = (within_steps({out: outs.get(out)}, {out: r}, step, 3) if step
                       else within_rule({out: outs.get(out)}, {out: r}))
                if why:
                    return why
            return ""
        compare(cli, saved, files, ref, mwork, f"{name} quantized as ONNX Runtime saved it",
                ["CpuRef", None], only_onednn=only_onednn, judge=judge,
                what="within 3 steps of the output's scale (float: the rule) of ONNX Runtime's")


# Corpus models (tests/corpus/models.json, other exporters) saved by ONNX Runtime: FusedConv
# and QuickGelu of PaddleOCR's recogniser, whose FusedMatMul transposes a value no
# value_info describes (its rank followed through the operators before it), tf2onnx's
# FusedConv, and FusedGemm; on the default backends.
SAVED_CORPUS = ["ppocr_v4_rec", "oww_embedding", "oww_alexa"]


def saved_corpus_models(cli, module, work):
    sys.path.insert(0, os.path.join(ROOT, "tests", "corpus"))
    import run_corpus
    corpus = os.path.dirname(os.path.dirname(os.path.dirname(module)))
    with open(os.path.join(ROOT, "tests", "corpus", "models.json")) as f:
        manifest = {m["name"]: m for m in json.load(f)["models"]}
    for name in SAVED_CORPUS:
        m = manifest[name]
        mwork = os.path.join(work, "saved_corpus", name)
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        files = save_inputs(mwork, {i["name"]: run_corpus.make_input(i, rng) for i in m["inputs"]})
        saved = os.path.join(mwork, f"{name}_ort_extended.onnx")
        ort_run(module, os.path.join(corpus, "packages", m["package"], m["path"]), files, mwork,
                "extended", save=saved)
        fused = {n.op_type for n in onnx.load(saved).graph.node if n.domain == "com.microsoft"}
        check(bool(fused), f"{name}: ONNX Runtime's saved model holds its fused operators "
                           f"({sorted(fused)})")
        ref = ort_run(module, saved, files, mwork, "disabled")
        compare(cli, saved, files, ref, mwork, f"{name} as ONNX Runtime saved it", [None])


def make_inputs(spec, seed):
    rng = np.random.default_rng(seed)
    out = {}
    for name, (kind, shape) in spec.items():
        if kind == "ids":
            out[name] = rng.integers(0, 50, size=shape, dtype=np.int64)
        else:
            out[name] = rng.standard_normal(shape).astype(np.float32)
    return out


def saved_models(cli, models_dir, module, work):
    for k, (name, (spec, expected, on_cpuref)) in enumerate(SAVED.items()):
        source = os.path.join(models_dir, f"{name}.onnx")
        mwork = os.path.join(work, "saved", name)
        files = save_inputs(mwork, make_inputs(spec, 100 + k))
        saved = os.path.join(mwork, f"{name}_ort_extended.onnx")
        ort_run(module, source, files, mwork, "extended", save=saved)
        fused = {n.op_type for n in onnx.load(saved).graph.node
                 if n.domain == "com.microsoft" or n.op_type == "LayerNormalization"}
        check(expected <= fused, f"{name}: ONNX Runtime's saved model holds {sorted(expected)} "
                                 f"(it holds {sorted(fused)})")
        ref = ort_run(module, saved, files, mwork, "disabled")
        compare(cli, saved, files, ref, mwork, f"{name} as ONNX Runtime saved it",
                ["CpuRef", None] if on_cpuref else [None], only_onednn=True)


# 2. One model per fused operator.
MS = "com.microsoft"


def rand(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def op_model(node, inputs, outputs, inits, opset=13):
    """inputs, outputs: [(name, shape)]; inits: {name: array}."""
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n, s in outputs],
        [numpy_helper.from_array(a, n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid(MS, 1),
                                                    helper.make_opsetid("com.microsoft.nchwc", 1)])
    model.ir_version = 8
    return model


def op_cases(rng):
    cases = []
    conv_w, conv_b = rand(rng, [6, 4, 3, 3], 0.3), rand(rng, [6])
    for act, params in [("Relu", None), ("Tanh", None), ("Sigmoid", None), ("LeakyRelu", [0.2]),
                        ("Clip", [-0.5, 0.75]), ("HardSigmoid", [0.3, 0.4])]:
        attrs = {"activation": act, "kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
        if params:
            attrs["activation_params"] = params
        node = helper.make_node("FusedConv", ["x", "w", "b"], ["y"], domain=MS, name=f"conv_{act}",
                                **attrs)
        cases.append((f"FusedConv {act}", op_model(node, [("x", [1, 4, 9, 9])], [("y", None)],
                                                   {"w": conv_w, "b": conv_b}),
                      {"x": rand(rng, [1, 4, 9, 9])}))
    node = helper.make_node("FusedConv", ["x", "w", "b", "z"], ["y"], domain=MS, name="conv_sum",
                            activation="Relu", kernel_shape=[3, 3], strides=[2, 2])
    cases.append(("FusedConv Relu of the sum with Z",
                  op_model(node, [("x", [1, 4, 9, 9]), ("z", [1, 6, 4, 4])], [("y", None)],
                           {"w": conv_w, "b": conv_b}),
                  {"x": rand(rng, [1, 4, 9, 9]), "z": rand(rng, [1, 6, 4, 4])}))
    gemm_b, gemm_c = rand(rng, [7, 8], 0.4), rand(rng, [7])
    for act, attrs in [("Relu", {}), ("LeakyRelu", {"activation_alpha": 0.1}),
                       ("Elu", {"activation_alpha": 0.7}), ("Tanh", {}),
                       ("HardSigmoid", {"activation_alpha": 0.25, "activation_beta": 0.45}),
                       ("Sigmoid", {})]:
        node = helper.make_node("FusedGemm", ["a", "bt", "c"], ["y"], domain=MS, name=f"gemm_{act}",
                                activation=act, transB=1, alpha=0.5, beta=2.0, **attrs)
        cases.append((f"FusedGemm {act}", op_model(node, [("a", [5, 8])], [("y", None)],
                                                   {"bt": gemm_b, "c": gemm_c}),
                      {"a": rand(rng, [5, 8])}))
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, name="matmul_tt",
                            transA=1, transB=1, alpha=0.125)
    cases.append(("FusedMatMul transA transB alpha",
                  op_model(node, [("a", [2, 3, 5, 4]), ("b", [2, 3, 6, 5])], [("y", None)], {}),
                  {"a": rand(rng, [2, 3, 5, 4]), "b": rand(rng, [2, 3, 6, 5])}))
    node = helper.make_node("TransposeMatMul", ["a", "b"], ["y"], domain=MS, name="matmul_old",
                            transA=1, alpha=0.5)
    cases.append(("TransposeMatMul (FusedMatMul's older name) transA alpha",
                  op_model(node, [("a", [2, 5, 4]), ("b", [2, 5, 3])], [("y", None)], {}),
                  {"a": rand(rng, [2, 5, 4]), "b": rand(rng, [2, 5, 3])}))
    node = helper.make_node("FusedMatMul", ["a", "w"], ["y"], domain=MS, name="matmul_weight",
                            transB=1)
    cases.append(("FusedMatMul of a weight, transB",
                  op_model(node, [("a", [2, 4, 5])], [("y", None)], {"w": rand(rng, [6, 5])}),
                  {"a": rand(rng, [2, 4, 5])}))
    # b's rank found through the Relu before it (an ONNX Runtime file declares no value_info).
    graph = helper.make_graph(
        [helper.make_node("Relu", ["b"], ["rb"], name="relu"),
         helper.make_node("FusedMatMul", ["a", "rb"], ["y"], domain=MS, name="matmul_found",
                          transB=1, alpha=2.0)],
        "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [3, 4, 5]),
              helper.make_tensor_value_info("b", TensorProto.FLOAT, [3, 6, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    cases.append(("FusedMatMul transB of a value whose rank follows from its producer", model,
                  {"a": rand(rng, [3, 4, 5]), "b": rand(rng, [3, 6, 5])}))
    node = helper.make_node("BiasGelu", ["x", "bias"], ["y"], domain=MS, name="bias_gelu")
    cases.append(("BiasGelu", op_model(node, [("x", [2, 3, 8])], [("y", None)],
                                       {"bias": rand(rng, [8])}), {"x": rand(rng, [2, 3, 8], 2)}))
    node = helper.make_node("FastGelu", ["x", "bias"], ["y"], domain=MS, name="fast_gelu_bias")
    cases.append(("FastGelu with a bias", op_model(node, [("x", [2, 3, 8])], [("y", None)],
                                                   {"bias": rand(rng, [8])}),
                  {"x": rand(rng, [2, 3, 8], 2)}))
    node = helper.make_node("FastGelu", ["x"], ["y"], domain=MS, name="fast_gelu")
    cases.append(("FastGelu", op_model(node, [("x", [2, 3, 8])], [("y", None)], {}),
                  {"x": rand(rng, [2, 3, 8], 2)}))
    for alpha in [None, 1.0]:
        attrs = {} if alpha is None else {"alpha": alpha}
        node = helper.make_node("QuickGelu", ["x"], ["y"], domain=MS, name="quick_gelu", **attrs)
        cases.append((f"QuickGelu alpha {alpha or 'default'}",
                      op_model(node, [("x", [2, 3, 8])], [("y", None)], {}),
                      {"x": rand(rng, [2, 3, 8], 2)}))
    gamma, beta, bias = rand(rng, [8]), rand(rng, [8]), rand(rng, [8])
    node = helper.make_node("SkipLayerNormalization", ["x", "skip", "gamma", "beta", "bias"],
                            ["y", "", "", "sum"], domain=MS, name="skip_ln", epsilon=1e-5)
    cases.append(("SkipLayerNormalization with beta, bias and the sum",
                  op_model(node, [("x", [2, 3, 8]), ("skip", [2, 3, 8])],
                           [("y", None), ("sum", None)], {"gamma": gamma, "beta": beta, "bias": bias}),
                  {"x": rand(rng, [2, 3, 8]), "skip": rand(rng, [2, 3, 8])}))
    node = helper.make_node("SkipLayerNormalization", ["x", "skip", "gamma"], ["y"], domain=MS,
                            name="skip_ln_plain")
    cases.append(("SkipLayerNormalization, default epsilon",
                  op_model(node, [("x", [2, 3, 8]), ("skip", [2, 3, 8])], [("y", None)],
                           {"gamma": gamma}),
                  {"x": rand(rng, [2, 3, 8]), "skip": rand(rng, [2, 3, 8])}))
    node = helper.make_node("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma", "bias"],
                            ["y", "", "", "sum"], domain=MS, name="skip_rms", epsilon=1e-6)
    cases.append(("SkipSimplifiedLayerNormalization with bias and the sum",
                  op_model(node, [("x", [2, 3, 8]), ("skip", [2, 3, 8])],
                           [("y", None), ("sum", None)], {"gamma": gamma, "bias": bias}),
                  {"x": rand(rng, [2, 3, 8]), "skip": rand(rng, [2, 3, 8])}))
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["y", "inv"],
                            name="rms", epsilon=1e-6)
    cases.append(("SimplifiedLayerNormalization and its inv_std_var",
                  op_model(node, [("x", [2, 3, 8])], [("y", None), ("inv", None)],
                           {"scale": gamma}),
                  {"x": rand(rng, [2, 3, 8])}))
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["y"], name="rms_axis1",
                            axis=1)
    cases.append(("SimplifiedLayerNormalization over axis 1 on",
                  op_model(node, [("x", [2, 4, 6])], [("y", None)], {"scale": rand(rng, [4, 6])}),
                  {"x": rand(rng, [2, 4, 6])}))
    node = helper.make_node("LayerNormalization", ["x", "scale", "b"], ["y"], name="ln13",
                            epsilon=1e-6)
    cases.append(("LayerNormalization in an opset-13 model",
                  op_model(node, [("x", [2, 3, 8])], [("y", None)], {"scale": gamma, "b": beta}),
                  {"x": rand(rng, [2, 3, 8])}))
    return cases


def q_model(nodes, inputs, outputs, inits, opset=13):
    """inputs: [(name, elem_type, shape)]; outputs: [(name, elem_type)]."""
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
        [numpy_helper.from_array(a, n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model


def scalar(v, dtype):
    return np.array(v, dtype=dtype)


def quantized_cases(rng):
    """(label, model, inputs, output scale: the int8 rule's step, 0 for an exact integer
    output, None for a float output)."""
    U8, F = TensorProto.UINT8, TensorProto.FLOAT
    cases = []
    q = lambda shape: rng.integers(0, 256, size=shape, dtype=np.uint8)
    s = {"sa": scalar(0.05, np.float32), "za": scalar(120, np.uint8),
         "sb": scalar(0.03, np.float32), "zb": scalar(131, np.uint8),
         "sy": scalar(0.08, np.float32), "zy": scalar(125, np.uint8)}
    for op in ["QLinearAdd", "QLinearMul"]:
        node = helper.make_node(op, ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"],
                                domain=MS, name=op.lower())
        ys = dict(s, sy=scalar(0.08 if op == "QLinearAdd" else 0.3, np.float32))
        cases.append((op, q_model([node], [("a", U8, [2, 3, 4]), ("b", U8, [3, 4])], [("y", U8)],
                                  ys), {"a": q([2, 3, 4]), "b": q([3, 4])}, float(ys["sy"])))
    node = helper.make_node("QLinearConcat", ["sy", "zy", "a", "sa", "za", "b", "sb", "zb"], ["y"],
                            domain=MS, name="qconcat", axis=1)
    cases.append(("QLinearConcat", q_model([node], [("a", U8, [2, 3, 4]), ("b", U8, [2, 5, 4])],
                                           [("y", U8)], s),
                  {"a": q([2, 3, 4]), "b": q([2, 5, 4])}, float(s["sy"])))
    unary = [("QLinearSigmoid", {}, [1, 3, 4, 4], 1 / 256),
             ("QLinearLeakyRelu", {"alpha": 0.15}, [1, 3, 4, 4], 0.05),
             ("QLinearGlobalAveragePool", {}, [1, 3, 5, 5], 0.05),
             ("QLinearAveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]}, [1, 3, 6, 6], 0.05),
             ("QLinearSoftmax", {"axis": -1, "opset": 13}, [2, 3, 7], 1 / 256)]
    for op, attrs, shape, out_scale in unary:
        inits = {"sx": scalar(0.05, np.float32), "zx": scalar(118, np.uint8),
                 "sy": scalar(out_scale, np.float32),
                 "zy": scalar(0 if op == "QLinearSigmoid" else 127, np.uint8)}
        node = helper.make_node(op, ["x", "sx", "zx", "sy", "zy"], ["y"], domain=MS,
                                name=op.lower(), **attrs)
        cases.append((op, q_model([node], [("x", U8, shape)], [("y", U8)], inits),
                      {"x": q(shape)}, out_scale))
    w = rng.integers(-127, 128, size=[8, 6], dtype=np.int8)
    bias = rng.integers(-2000, 2000, size=[6], dtype=np.int32)
    for label, per_column, trans_b, quantized in [("per tensor, quantized output", False, False, True),
                                                  ("per column, transB, float output", True, True, False),
                                                  ("per column, quantized output", True, False, True)]:
        inits = {"sa": scalar(0.04, np.float32), "za": scalar(128, np.uint8),
                 "w": w.T.copy() if trans_b else w, "zw": scalar(0, np.int8),
                 "sw": (rng.uniform(0.005, 0.02, size=[6]).astype(np.float32) if per_column
                        else scalar(0.01, np.float32)), "bias": bias}
        if per_column:
            inits["zw"] = np.zeros([6], np.int8)
        ins = ["a", "sa", "za", "w", "sw", "zw", "bias"]
        if quantized:
            inits.update({"sy": scalar(0.1, np.float32), "zy": scalar(120, np.uint8)})
            ins += ["sy", "zy"]
        node = helper.make_node("QGemm", ins, ["y"], domain=MS, name="qgemm", transB=int(trans_b),
                                alpha=1.0)
        cases.append((f"QGemm {label}", q_model([node], [("a", U8, [5, 8])],
                                                [("y", U8 if quantized else F)], inits),
                      {"a": q([5, 8])}, 0.1 if quantized else None))
    # QuantizeLinear and DequantizeLinear of ONNX Runtime's domain: per tensor, and per axis.
    I8 = TensorProto.INT8
    inits = {"s": scalar(0.02, np.float32), "z": scalar(128, np.uint8),
             "sw": rng.uniform(0.01, 0.03, size=[4]).astype(np.float32),
             "zw": rng.integers(-5, 5, size=[4], dtype=np.int8)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], domain=MS, name="ms_q"),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["y"], domain=MS, name="ms_dq"),
             helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["yw"], domain=MS,
                              name="ms_dq_axis", axis=0)]
    cases.append(("QuantizeLinear and DequantizeLinear of com.microsoft",
                  q_model(nodes, [("x", F, [2, 4, 5]), ("w", I8, [4, 6])], [("y", F), ("yw", F)],
                          inits),
                  {"x": rand(rng, [2, 4, 5]), "w": rng.integers(-128, 128, size=[4, 6], dtype=np.int8)},
                  None))
    # Standard operators on quantized tensors, as QOperator models have them: exact.
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], name="maxpool_u8", kernel_shape=[3, 3],
                              strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Flatten", ["p"], ["y"], name="flatten_u8")]
    cases.append(("MaxPool and Flatten of uint8", q_model(nodes, [("x", U8, [1, 8, 9, 9])],
                                                          [("y", U8)], {}),
                  {"x": q([1, 8, 9, 9])}, 0.0))
    inits = {"sa": scalar(0.04, np.float32), "za": scalar(128, np.uint8), "w": w,
             "sw": rng.uniform(0.005, 0.02, size=[6]).astype(np.float32),
             "bias": rng.standard_normal([6]).astype(np.float32)}
    node = helper.make_node("MatMulIntegerToFloat", ["a", "w", "sa", "sw", "za", "", "bias"], ["y"],
                            domain=MS, name="mm_to_float")
    cases.append(("MatMulIntegerToFloat", q_model([node], [("a", U8, [2, 5, 8])], [("y", F)], inits),
                  {"a": q([2, 5, 8])}, None))
    del inits["sa"], inits["za"]
    node = helper.make_node("DynamicQuantizeMatMul", ["x", "w", "sw", "", "bias"], ["y"], domain=MS,
                            name="dq_matmul")
    cases.append(("DynamicQuantizeMatMul", q_model([node], [("x", F, [2, 5, 8])], [("y", F)], inits),
                  {"x": rng.standard_normal([2, 5, 8]).astype(np.float32)}, None))
    return cases


def within_steps(got, ref, step, steps=1):
    for name, r in ref.items():
        g = got.get(name)
        if g is None or g.shape != r.shape:
            return f"output {name}: {None if g is None else g.shape} against {r.shape}"
        err = float(np.max(np.abs(g.astype(np.float64) - r.astype(np.float64)))) if r.size else 0.0
        if err > steps * (1 if r.dtype in (np.uint8, np.int8) else step) + 1e-6:
            return f"output {name}: max error {err:.3g} > {steps} step(s)"
    return ""


def quantized_ops(cli, module, work):
    rng = np.random.default_rng(13)
    for k, (label, model, inputs, step) in enumerate(quantized_cases(rng)):
        cwork = os.path.join(work, "qops", str(k))
        files = save_inputs(cwork, inputs)
        path = os.path.join(cwork, "model.onnx")
        onnx.save(model, path)
        ref = ort_run(module, path, files, cwork, "disabled")
        if step is None:
            compare(cli, path, files, ref, cwork, label, ["CpuRef", None])
        else:
            compare(cli, path, files, ref, cwork, label, ["CpuRef", None],
                    judge=lambda outs, ref, step=step: within_steps(outs, ref, step, int(step > 0)),
                    what="within one step (0: equal) of ONNX Runtime's integer kernels",
                    only_onednn=True)


def bert_cases(rng):
    """Attention and EmbedLayerNormalization, as ONNX Runtime's transformer optimiser writes
    BERT's self-attention and embeddings."""
    F, I32 = TensorProto.FLOAT, TensorProto.INT32
    cases = []
    inits = {"w": rand(rng, [16, 48], 0.3), "b": rand(rng, [48], 0.1)}
    mask2 = np.ones([2, 5], np.int32)
    mask2[1, 3:] = 0
    mask3 = (rng.uniform(size=[2, 5, 5]) > 0.3).astype(np.int32)
    mask3[:, :, 0] = 1
    for label, extra_inputs, feeds, attrs in [
            ("Attention", [], {}, {}),
            ("Attention with a [B, T] mask", [("mask", I32, [2, 5])], {"mask": mask2},
             {"scale": 0.3}),
            ("Attention with a [B, S, T] mask and an attention bias",
             [("mask", I32, [2, 5, 5]), ("bias", F, [2, 4, 5, 5])],
             {"mask": mask3, "bias": rand(rng, [2, 4, 5, 5])}, {"mask_filter_value": -1000.0})]:
        names = ["x", "w", "b"] + [n for n, _, _ in extra_inputs]
        if len(extra_inputs) == 2:
            names = ["x", "w", "b", "mask", "", "bias"]
        node = helper.make_node("Attention", names, ["y"], domain=MS, name="attention",
                                num_heads=4, **attrs)
        cases.append((label, q_model([node], [("x", F, [2, 5, 16])] + extra_inputs, [("y", F)],
                                     inits), dict({"x": rand(rng, [2, 5, 16])}, **feeds)))
    inits = {"word": rand(rng, [30, 16]), "pos": rand(rng, [10, 16]), "seg": rand(rng, [2, 16]),
             "gamma": rand(rng, [16]), "beta": rand(rng, [16])}
    ids = rng.integers(0, 30, size=[2, 5]).astype(np.int32)
    segments = rng.integers(0, 2, size=[2, 5]).astype(np.int32)
    node = helper.make_node("EmbedLayerNormalization",
                            ["ids", "segments", "word", "pos", "seg", "gamma", "beta", "mask"],
                            ["y", "mask_index", "sum"], domain=MS, name="embed", epsilon=1e-6)
    cases.append(("EmbedLayerNormalization with segments, a mask and the sum",
                  q_model([node], [("ids", I32, [2, 5]), ("segments", I32, [2, 5]),
                                   ("mask", I32, [2, 5])],
                          [("y", F), ("mask_index", I32), ("sum", F)], inits),
                  {"ids": ids, "segments": segments, "mask": mask2}))
    del inits["seg"]
    node = helper.make_node("EmbedLayerNormalization", ["ids", "", "word", "pos", "", "gamma", "beta"],
                            ["y", "mask_index"], domain=MS, name="embed_plain")
    cases.append(("EmbedLayerNormalization, words and positions only",
                  q_model([node], [("ids", I32, [2, 5])], [("y", F), ("mask_index", I32)], inits),
                  {"ids": ids}))
    return cases


def decoder_cases(rng):
    """Attention as ONNX Runtime's optimiser writes GPT-2's (unidirectional, past and present),
    MultiHeadAttention in each input form, and RotaryEmbedding."""
    F, I32, I64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64
    cases = []
    inits = {"w": rand(rng, [16, 48], 0.3), "b": rand(rng, [48], 0.1)}
    mask = np.ones([2, 8], np.int32)
    mask[0, :2] = 0
    node = helper.make_node("Attention", ["x", "w", "b", "mask", "past"], ["y", "present"],
                            domain=MS, name="gpt2_attention", num_heads=4, unidirectional=1)
    cases.append(("Attention, unidirectional, with a mask, past and present",
                  q_model([node], [("x", F, [2, 3, 16]), ("mask", I32, [2, 8]),
                                   ("past", F, [2, 2, 4, 5, 4])], [("y", F), ("present", F)], inits),
                  {"x": rand(rng, [2, 3, 16]), "mask": mask, "past": rand(rng, [2, 2, 4, 5, 4])}))
    node = helper.make_node("Attention", ["x", "w", "b"], ["y", "present"], domain=MS,
                            name="first_step", num_heads=4, unidirectional=1)
    cases.append(("Attention, unidirectional, present without a past",
                  q_model([node], [("x", F, [1, 5, 16])], [("y", F), ("present", F)], inits),
                  {"x": rand(rng, [1, 5, 16])}))

    def mha(label, inputs, feeds, outputs=("y",), inits=None, **attrs):
        names = [n for n, _, _ in inputs]
        node = helper.make_node("MultiHeadAttention", names, list(outputs), domain=MS, name="mha",
                                num_heads=4, **attrs)
        declared = [(n, t, s) for n, t, s in inputs if n and n not in (inits or {})]
        cases.append((label, q_model([node], declared, [(o, F) for o in outputs], inits or {}),
                      feeds))

    kmask = np.ones([2, 6], np.int32)
    kmask[1, 4:] = 0
    mha("MultiHeadAttention, query, key and value with a bias and a key padding mask",
        [("q", F, [2, 4, 16]), ("k", F, [2, 6, 16]), ("v", F, [2, 6, 16]), ("bias", F, [48]),
         ("kmask", I32, [2, 6])],
        {"q": rand(rng, [2, 4, 16]), "k": rand(rng, [2, 6, 16]), "v": rand(rng, [2, 6, 16]),
         "kmask": kmask}, inits={"bias": rand(rng, [48], 0.1)})
    mha("MultiHeadAttention, unidirectional, with past and present",
        [("q", F, [1, 3, 16]), ("k", F, [1, 3, 16]), ("v", F, [1, 3, 16]), ("", F, None),
         ("", F, None), ("", F, None), ("past_k", F, [1, 4, 5, 4]), ("past_v", F, [1, 4, 5, 4])],
        {"q": rand(rng, [1, 3, 16]), "k": rand(rng, [1, 3, 16]), "v": rand(rng, [1, 3, 16]),
         "past_k": rand(rng, [1, 4, 5, 4]), "past_v": rand(rng, [1, 4, 5, 4])},
        outputs=("y", "present_k", "present_v"), unidirectional=1)
    # ONNX Runtime runs packed QKV and KV on GPUs only: the reference is its output for the
    # same tensors unpacked (a query, key and value [B, L, N·h] each).
    qkv, abias = rand(rng, [2, 5, 4, 3, 4]), rand(rng, [1, 4, 5, 5])
    mha("MultiHeadAttention, packed QKV with an attention bias",
        [("q", F, [2, 5, 16]), ("k", F, [2, 5, 16]), ("v", F, [2, 5, 16]), ("", F, None),
         ("", F, None), ("abias", F, [1, 4, 5, 5])],
        {"q": qkv[:, :, :, 0].reshape(2, 5, 16), "k": qkv[:, :, :, 1].reshape(2, 5, 16),
         "v": qkv[:, :, :, 2].reshape(2, 5, 16), "abias": abias})
    mha("MultiHeadAttention, packed QKV with an attention bias",
        [("qkv", F, [2, 5, 4, 3, 4]), ("", F, None), ("", F, None), ("", F, None),
         ("", F, None), ("abias", F, [1, 4, 5, 5])], {"qkv": qkv, "abias": abias})
    cases[-1] += (cases.pop(-2)[1:],)
    q, kv = rand(rng, [2, 3, 16]), rand(rng, [2, 6, 4, 2, 4])
    mha("MultiHeadAttention, packed KV", [("q", F, [2, 3, 16]), ("k", F, [2, 6, 16]),
                                          ("v", F, [2, 6, 16])],
        {"q": q, "k": kv[:, :, :, 0].reshape(2, 6, 16), "v": kv[:, :, :, 1].reshape(2, 6, 16)})
    mha("MultiHeadAttention, packed KV", [("q", F, [2, 3, 16]), ("kv", F, [2, 6, 4, 2, 4])],
        {"q": q, "kv": kv})
    cases[-1] += (cases.pop(-2)[1:],)
    mha("MultiHeadAttention, key and value already in heads, with a scale",
        [("q", F, [2, 3, 16]), ("k", F, [2, 4, 6, 4]), ("v", F, [2, 4, 6, 4])],
        {"q": rand(rng, [2, 3, 16]), "k": rand(rng, [2, 4, 6, 4]), "v": rand(rng, [2, 4, 6, 4])},
        scale=0.4)

    # GroupQueryAttention: 4 query heads on 2 key/value heads of 16.
    angles = np.arange(16)[:, None] * (10000.0 ** (-np.arange(8) / 8.0))[None, :]
    tables = {"cos": np.cos(angles).astype(np.float32), "sin": np.sin(angles).astype(np.float32)}

    def gqa(label, batch, new, past, lengths, packed=False, **attrs):
        names = ["qkv" if packed else "q", "" if packed else "k", "" if packed else "v",
                 "past_k", "past_v", "seqlens", "total"]
        inputs = [("qkv", F, [batch, new, 128])] if packed else [
            ("q", F, [batch, new, 64]), ("k", F, [batch, new, 32]), ("v", F, [batch, new, 32])]
        inputs += [("past_k", F, [batch, 2, past, 16]), ("past_v", F, [batch, 2, past, 16]),
                   ("seqlens", I32, [batch]), ("total", I32, [])]
        inits = {}
        if attrs.get("do_rotary"):
            names += ["cos", "sin"]
            inits = tables
        outputs = ["y", "present_k", "present_v"]
        node = helper.make_node("GroupQueryAttention", names, outputs, domain=MS, name="gqa",
                                num_heads=4, kv_num_heads=2, **attrs)
        feeds = {n: rand(rng, shape) for n, _, shape in inputs if n not in ("seqlens", "total")}
        feeds["seqlens"] = np.array(lengths, np.int32) - 1
        feeds["total"] = np.array(max(lengths), np.int32)

        def judge(outs, ref):  # a present's rows past its sequence's length are unspecified
            why = within_rule(outs, {"y": ref["y"]})
            for o in outputs[1:]:
                if why or outs.get(o) is None or outs[o].shape != ref[o].shape:
                    return why or within_rule(outs, ref)
                for b, n in enumerate(lengths):
                    why = within_rule({o: outs[o][b, :, :n]}, {o: ref[o][b, :, :n]})
                    if why:
                        return f"sequence {b}: {why}"
            return ""
        cases.append((label, q_model([node], inputs, [(o, F) for o in outputs], inits), feeds,
                      None, judge))

    gqa("GroupQueryAttention, a step of two sequences, rotary", 2, 1, 5, [6, 6], do_rotary=1)
    gqa("GroupQueryAttention, the first prompt, interleaved rotary", 1, 4, 0, [4], do_rotary=1,
        rotary_interleaved=1)
    gqa("GroupQueryAttention, a step of sequences of different lengths", 2, 1, 6, [7, 4],
        do_rotary=1)
    gqa("GroupQueryAttention, packed QKV, three tokens after four, a local window", 1, 3, 4, [7],
        packed=True, local_window_size=2, scale=0.3)

    angles = np.arange(12)[:, None] * (10000.0 ** (-np.arange(4) / 4.0))[None, :]
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    for label, shape, ids, attrs, tables in [
            ("RotaryEmbedding [B, S, N·h], positions [B, S]", [2, 3, 16],
             rng.integers(0, 12, size=[2, 3]).astype(np.int64), {}, (cos, sin)),
            ("RotaryEmbedding [B, N, S, h] interleaved, one position offset", [1, 2, 3, 8],
             np.array([4], np.int64), {"interleaved": 1}, (cos, sin)),
            ("RotaryEmbedding of part of each head (rotary_embedding_dim)", [1, 3, 16],
             np.array([[0, 1, 2]], np.int64), {"num_heads": 2, "rotary_embedding_dim": 4},
             (cos[:, :2].copy(), sin[:, :2].copy()))]:
        node = helper.make_node("RotaryEmbedding", ["x", "ids", "cos", "sin"], ["y"], domain=MS,
                                name="rope", **attrs)
        cases.append((label, q_model([node], [("x", F, shape), ("ids", I64, list(ids.shape))],
                                     [("y", F)], {"cos": tables[0], "sin": tables[1]}),
                      {"x": rand(rng, shape), "ids": ids}))
    return cases


def pack_bits(q, bits):
    """uint8 values of `bits` bits along the last axis, packed lowest bits first."""
    per = 8 // bits
    q = q.reshape(q.shape[:-1] + (q.shape[-1] // per, per)).astype(np.uint8)
    return sum((q[..., t] << (t * bits)) for t in range(per)).astype(np.uint8)


def nbits_cases(rng):
    """MatMulNBits, weights quantized in blocks along K as ONNX Runtime's int4 quantizer
    writes them: packed zero points or float ones or none, a bias, K not a multiple of the
    block."""
    F = TensorProto.FLOAT
    cases = []
    # 4 bits with packed or no zero points run whole at 4 bits (CpuOneDnn's loop: a
    # token's few rows converted in registers in blocks of 32 and more, more rows through
    # a dequantized panel); the others are dequantized at import.
    for label, k, n, bits, block, zero_points, bias, rows in [
            ("MatMulNBits 4 bits, packed zero points, a bias, K past the last block",
             40, 12, 4, 16, "packed", True, [2, 3]),
            ("MatMulNBits 8 bits, no zero points", 64, 10, 8, 32, None, False, [2, 3]),
            ("MatMulNBits 2 bits, packed zero points", 32, 8, 2, 16, "packed", False, [2, 3]),
            ("MatMulNBits 4 bits, float zero points", 32, 8, 4, 32, "float", True, [2, 3]),
            ("MatMulNBits 4 bits, blocks of 32, an odd number of packed zero points, one row",
             96, 40, 4, 32, "packed", True, [1, 1]),
            ("MatMulNBits 4 bits, blocks of 64, no zero points, 14 rows, N past a panel",
             128, 300, 4, 64, None, False, [2, 7]),
            ("MatMulNBits 4 bits, blocks of 128, K past the last block, 3 rows",
             200, 33, 4, 128, "packed", True, [1, 3])]:
        blocks = (k + block - 1) // block
        q = rng.integers(0, 2 ** bits, size=[n, blocks, block])
        inits = {"B": pack_bits(q, bits), "scales": rng.uniform(0.01, 0.1, [n * blocks])
                 .astype(np.float32)}
        names = ["a", "B", "scales"]
        if zero_points == "packed":
            zp = rng.integers(0, 2 ** bits, size=[n, -(-blocks * bits // 8) * 8 // bits])
            inits["zp"] = pack_bits(zp, bits).reshape(-1)
            names.append("zp")
        elif zero_points == "float":
            inits["zp"] = rng.uniform(0, 2 ** bits, [n * blocks]).astype(np.float32)
            names.append("zp")
        if bias:
            inits["bias"] = rand(rng, [n])
            names += [""] * (5 - len(names)) + ["bias"]
        node = helper.make_node("MatMulNBits", names, ["y"], domain=MS, name="nbits", K=k, N=n,
                                bits=bits, block_size=block)
        cases.append((label, q_model([node], [("a", F, rows + [k])], [("y", F)], inits),
                      {"a": rand(rng, rows + [k])}))
    return cases


# Cases that run whole on CpuOneDnn (an attention's int32 mask's Cast included; a rotary
# embedding's gathers of int64 positions).
WHOLE_ON_ONEDNN = ("Attention", "MultiHeadAttention", "RotaryEmbedding [B, S, N·h], positions",
                   "MatMulNBits")


def fused_ops(cli, module, work):
    rng = np.random.default_rng(7)
    for k, case in enumerate(op_cases(rng) + bert_cases(rng) + decoder_cases(rng) +
                             nbits_cases(rng)):
        # (label, model, inputs[, (the model and inputs ONNX Runtime runs instead) or None
        # [, judge(outputs, reference)]])
        label, model, inputs = case[:3]
        cwork = os.path.join(work, "ops", str(k))
        files = save_inputs(cwork, inputs)
        path = os.path.join(cwork, "model.onnx")
        onnx.save(model, path)
        if len(case) > 3 and case[3] is not None:
            ref_work = os.path.join(cwork, "reference")
            ref_files = save_inputs(ref_work, case[3][1])
            onnx.save(case[3][0], os.path.join(ref_work, "model.onnx"))
            ref = ort_run(module, os.path.join(ref_work, "model.onnx"), ref_files, ref_work,
                          "disabled")
        else:
            ref = ort_run(module, path, files, cwork, "disabled")
        # An attention runs whole on CpuOneDnn, its mask's Cast of int32 included.
        compare(cli, path, files, ref, cwork, label, ["CpuRef", None],
                only_onednn=label.startswith(WHOLE_ON_ONEDNN),
                judge=case[4] if len(case) > 4 else within_rule)


# 3. Outside the rewrite: a clear error naming the node.
def refused(cli, work):
    rng = np.random.default_rng(11)
    cases = [
        ("FusedMatMul with transBatchA",
         helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, name="batch_trans",
                          transBatchA=1), [("a", [2, 3, 4]), ("b", [3, 4, 5])], "batch_trans",
         "transBatchA"),
        ("FusedConv with an activation ONNX has no operator for",
         helper.make_node("FusedConv", ["a", "b"], ["y"], domain=MS, name="odd_activation",
                          activation="Swish", kernel_shape=[1, 1]),
         [("a", [1, 4, 5, 5]), ("b", [4, 4, 1, 1])], "odd_activation", "'Swish'"),
    ]
    cases.append(("MultiHeadAttention with key lengths as its mask",
                  helper.make_node("MultiHeadAttention", ["q", "k", "v", "", "lengths"], ["y"],
                                   domain=MS, name="key_lengths", num_heads=2),
                  [("q", [1, 2, 8]), ("k", [1, 2, 8]), ("v", [1, 2, 8]), ("lengths", [1])],
                  "key_lengths", "key_padding_mask"))
    cases.append(("MatMulNBits whose weights are no constant",
                  helper.make_node("MatMulNBits", ["a", "b", "s"], ["y"], domain=MS,
                                   name="fed_weights", K=16, N=4, bits=4, block_size=16),
                  [("a", [1, 16]), ("b", [4, 1, 8]), ("s", [4])], "fed_weights",
                  "B must be a constant"))
    nchwc = helper.make_node("Conv", ["a", "b"], ["y"], domain="com.microsoft.nchwc",
                             name="blocked_conv", kernel_shape=[1, 1])
    cases.append(("A model saved at level 'all' (NCHWc)", nchwc,
                  [("a", [1, 8, 5, 5]), ("b", [8, 8, 1, 1])], "blocked_conv", "'extended'"))
    for k, (label, node, inputs, name, reason) in enumerate(cases):
        cwork = os.path.join(work, "refused", str(k))
        files = save_inputs(cwork, {n: rand(rng, s) for n, s in inputs})
        path = os.path.join(cwork, "model.onnx")
        onnx.save(op_model(node, inputs, [("y", None)], {}), path)
        outs, err = backplane_run(cli, path, files, os.path.join(cwork, "out"))
        check(outs is None and "error:" in err and f"'{name}'" in err and node.op_type in err
              and reason in err, f"{label}: refused with an error naming the node and "
                                 f"{reason} ({(err or '').strip()[:300]})")


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    cli, models_dir, module, work = (os.path.abspath(a) for a in sys.argv[1:5])
    if shutil.which("node") is None or not os.path.isdir(module):
        sys.exit(f"needs node and onnxruntime-node at {module} (scripts/fetch-corpus.sh)")
    shutil.rmtree(work, ignore_errors=True)
    saved_models(cli, models_dir, module, work)
    saved_quantized_models(cli, models_dir, module, work)
    saved_corpus_models(cli, module, work)
    fused_ops(cli, module, work)
    quantized_ops(cli, module, work)
    refused(cli, work)
    if failures:
        print(f"{len(failures)} failed:\n  " + "\n  ".join(failures))
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
