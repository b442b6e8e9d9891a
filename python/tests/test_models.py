"""The e2e models through Python: equal to the C++ API (the CLI, on the same
input) and close to PyTorch, on CpuRef and on the default backends."""
import os

import numpy as np
import pytest

import backplane
from conftest import assert_close_to, model_expected, model_inputs

MODELS = ["tiny_cnn", "resnet18", "mobilenet_v2", "squeezenet1_1", "transformer", "lstm_classifier",
          "encoder_dyn", "lstm_bidir2", "gru_bidir2"]


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("backends", [["CpuRef"], None], ids=["CpuRef", "default"])
def test_model_matches_cpp_and_pytorch(models_dir, cli, tmp_path, name, backends):
    path = os.path.join(models_dir, name + ".onnx")
    sess = backplane.InferenceSession(path, backends=backends)
    inputs = model_inputs(models_dir, name)
    output_names = [o.name for o in sess.get_outputs()]
    got = sess.run(None, inputs)
    assert len(got) == len(output_names)

    # The C++ API (through `backplane run`) on the same input: the same bits.
    cli_args = ["--backends", ",".join(backends)] if backends else []
    cpp = cli.outputs(path, inputs, str(tmp_path / "cli"), *cli_args)
    for n, y in zip(output_names, got):
        assert y.dtype == cpp[n].dtype and y.shape == cpp[n].shape, n
        np.testing.assert_array_equal(y, cpp[n], err_msg=f"{name}: output {n}: Python != C++")

    # PyTorch's output.
    for n, y, e in zip(output_names, got, model_expected(models_dir, name, output_names)):
        assert_close_to(y, e, f"{name} {n} vs PyTorch")

    if backends == ["CpuRef"]:
        assert sess.backends_used == ["CpuRef"]
        assert all(p.backend == "CpuRef" for p in sess.partitions)


def test_resnet18_split_across_backends(models_dir, has_onednn):
    """The README's program: resnet18 on CpuOneDnn with two nodes pinned to CpuRef."""
    if not has_onednn:
        pytest.skip("CpuOneDnn is not built")
    pinned = {n: "CpuRef" for n in ("/avgpool/GlobalAveragePool", "/Flatten", "/fc/Gemm")}
    sess = backplane.InferenceSession(os.path.join(models_dir, "resnet18.onnx"), overrides=pinned)
    assert sess.backends_used == ["CpuOneDnn", "CpuRef"]
    assert [(p.backend, len(p.nodes)) for p in sess.partitions] == [("CpuOneDnn", 46), ("CpuRef", 3)]
    placed = {n: p.backend for p in sess.partitions for n in p.nodes}
    assert all(placed[n] == "CpuRef" for n in pinned)
    assert placed["/conv1/Conv"] == "CpuOneDnn"
    (y,) = sess.run(None, model_inputs(models_dir, "resnet18"))
    assert_close_to(y, model_expected(models_dir, "resnet18", ["output"])[0], "resnet18 split vs PyTorch")


def test_symbolic_dims(models_dir, cli, tmp_path):
    """encoder_dyn has input_ids [batch, seq]: the names come back as strings
    and each run may use other sizes, matching the C++ API at each."""
    path = os.path.join(models_dir, "encoder_dyn.onnx")
    sess = backplane.InferenceSession(path)
    (inp,) = sess.get_inputs()
    (out,) = sess.get_outputs()
    assert inp.name == "input_ids" and inp.shape == ["batch", "seq"] and inp.dtype == np.dtype(np.int64)
    assert out.shape == ["batch", "seq", 64] and out.type == "tensor(float)"
    rng = np.random.default_rng(7)
    for batch, seq in [(1, 5), (2, 17), (1, 5), (3, 1)]:
        ids = rng.integers(0, 50, size=(batch, seq), dtype=np.int64)
        (y,) = sess.run(None, {"input_ids": ids})
        assert y.shape == (batch, seq, 64)
        cpp = cli.outputs(path, {"input_ids": ids}, str(tmp_path / f"{batch}x{seq}"))
        np.testing.assert_array_equal(y, cpp["last_hidden_state"])
    stats = sess.specialization_stats
    assert stats["misses"] == 3 and stats["hits"] >= 1, stats
    # One symbol, one size per run: batch must agree; a fixed dim stays fixed.
    with pytest.raises(backplane.InvalidArgumentError):
        sess.run(None, {"input_ids": np.zeros((2, 3, 1), np.int64)})


@pytest.mark.parametrize("name", ["cf_if", "cf_loop", "cf_while"])
def test_control_flow_models_run_in_stages(models_dir, name):
    """Models with If/Loop run in stages; each case's inputs give PyTorch's outputs."""
    sess = backplane.InferenceSession(os.path.join(models_dir, name + ".onnx"))
    assert sess.runs_in_stages and sess.partitions == []
    assert "stage" in sess.describe_plan().lower()
    inputs, outputs = sess.get_inputs(), sess.get_outputs()
    for case in range(3):
        feed = {i.name: np.load(os.path.join(models_dir, f"{name}.case{case}.input{k}.npy"))
                for k, i in enumerate(inputs)}
        got = sess.run(None, feed)
        for k, (o, y) in enumerate(zip(outputs, got)):
            expected = np.load(os.path.join(models_dir, f"{name}.case{case}.expected{k}.npy"))
            assert y.dtype == expected.dtype, (name, case, o.name)
            assert_close_to(y, expected, f"{name} case {case} {o.name}")


def test_the_split_example_runs(models_dir, has_onednn):
    """examples/python/resnet18_split.py, as a user runs it."""
    if not has_onednn:
        pytest.skip("CpuOneDnn is not built")
    import subprocess
    import sys
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python", "resnet18_split.py")
    p = subprocess.run([sys.executable, example, os.path.join(models_dir, "resnet18.onnx")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "[('CpuOneDnn', 46), ('CpuRef', 3)] ['CpuOneDnn', 'CpuRef']"
    assert lines[1].startswith("(1, 1000) ")


def test_model_options_shape_the_specialisations(models_dir):
    path = os.path.join(models_dir, "encoder_dyn.onnx")
    assert backplane.InferenceSession(path).partitions == []  # planned at the first run
    sess = backplane.InferenceSession(path, input_shapes={"input_ids": [1, 8]}, max_specializations=1)
    assert sess.partitions and sess.specialization_stats["builds"] == 1  # planned at load
    assert sess.specialization_stats["capacity"] == 1
    for seq in (8, 9, 8):
        (y,) = sess.run(None, {"input_ids": np.zeros((1, seq), np.int64)})
        assert y.shape == (1, seq, 64)
    stats = sess.specialization_stats
    # Length 9 is a shape variant of 8 (kept beside it, 32 per max_specializations).
    assert stats["builds"] == 2 and stats["hits"] == 2, stats
    assert stats["cached"] == 2 and stats["variants"] == 1 and stats["evictions"] == 0, stats


def _llama_style_block(path, rng, grouped, hidden=64, heads=4):
    """One decoder block as ONNX Runtime's LLM tools write it: SimplifiedLayerNormalization,
    4-bit MatMulNBits projections, then RotaryEmbedding of q and k and MultiHeadAttention with
    past and present (unidirectional), or (grouped) GroupQueryAttention with its rotary
    embeddings and two key/value heads, then SkipSimplifiedLayerNormalization."""
    from onnx import TensorProto, helper, numpy_helper
    import onnx

    head, block = hidden // heads, 32
    ms = "com.microsoft"

    def nbits(name, n):  # 4-bit weights [N, K / block, block / 2], scales, packed zero points
        q = rng.integers(0, 16, size=[n, hidden // block, block]).astype(np.uint8)
        zp = rng.integers(0, 16, size=[n, 2]).astype(np.uint8)
        return {name: (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8),
                name + "_scales": rng.uniform(0.005, 0.02, [n * hidden // block]).astype(np.float32),
                name + "_zp": (zp[:, 0] | (zp[:, 1] << 4)).astype(np.uint8)}

    angles = np.arange(512)[:, None] * (10000.0 ** (-np.arange(head // 2) / (head / 2)))[None, :]
    inits = {"gamma": rng.uniform(0.5, 1.5, [hidden]).astype(np.float32),
             "cos": np.cos(angles).astype(np.float32), "sin": np.sin(angles).astype(np.float32)}
    nodes = [helper.make_node("SimplifiedLayerNormalization", ["x", "gamma"], ["normed"],
                              epsilon=1e-5, axis=-1)]
    kv_heads = 2 if grouped else heads
    for p in ("q", "k", "v"):
        inits.update(nbits("w" + p, hidden if p == "q" else kv_heads * head))
        nodes.append(helper.make_node("MatMulNBits", ["normed", "w" + p, f"w{p}_scales", f"w{p}_zp"],
                                      [p + "0"], domain=ms, K=hidden,
                                      N=hidden if p == "q" else kv_heads * head, bits=4,
                                      block_size=block))
    if grouped:
        nodes.append(helper.make_node("GroupQueryAttention",
                                      ["q0", "k0", "v0", "past_key", "past_value", "seqlens_k",
                                       "total_length", "cos", "sin"],
                                      ["attended", "present_key", "present_value"], domain=ms,
                                      num_heads=heads, kv_num_heads=kv_heads, do_rotary=1))
        positions = [helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, [1]),
                     helper.make_tensor_value_info("total_length", TensorProto.INT32, [])]
    else:
        for p in ("q", "k"):
            nodes.append(helper.make_node("RotaryEmbedding", [p + "0", "positions", "cos", "sin"],
                                          [p], domain=ms))
        nodes.append(helper.make_node("MultiHeadAttention", ["q", "k", "v0", "", "", "",
                                                             "past_key", "past_value"],
                                      ["attended", "present_key", "present_value"], domain=ms,
                                      num_heads=heads, unidirectional=1))
        positions = [helper.make_tensor_value_info("positions", TensorProto.INT64, [1, "S"])]
    nodes.append(helper.make_node("SkipSimplifiedLayerNormalization", ["attended", "x", "gamma"],
                                  ["y"], domain=ms, epsilon=1e-5))
    graph = helper.make_graph(
        nodes, "block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "S", hidden])] + positions +
        [helper.make_tensor_value_info("past_key", TensorProto.FLOAT, [1, kv_heads, "P", head]),
         helper.make_tensor_value_info("past_value", TensorProto.FLOAT, [1, kv_heads, "P", head])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
         for n in ("y", "present_key", "present_value")],
        [numpy_helper.from_array(a, n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(ms, 1)])
    model.ir_version = 8
    onnx.save(model, path)
    return kv_heads, head


@pytest.mark.parametrize("grouped", [False, True], ids=["MultiHeadAttention", "GroupQueryAttention"])
def test_llama_style_decode_loop_matches_cpuref(tmp_path, grouped):
    """ONNX Runtime's LLM operators are rewritten at import (src/onnx/contrib_ops.hpp,
    matmul_nbits.hpp); a generation feeding each step's present back as the next past, a new
    cache length every step, runs within the rule of CpuRef, whole on CpuOneDnn but for
    GroupQueryAttention's placing of each sequence's keys (ScatterElements) and positions."""
    rng = np.random.default_rng(3)
    path = str(tmp_path / "block.onnx")
    kv_heads, head = _llama_style_block(path, rng, grouped)
    fast = backplane.InferenceSession(path)
    ref = backplane.InferenceSession(path, backends=["CpuRef"])
    past = {"past_key": np.zeros([1, kv_heads, 0, head], np.float32),
            "past_value": np.zeros([1, kv_heads, 0, head], np.float32)}
    for step in range(24):
        length = past["past_key"].shape[2]
        new = 5 if step == 0 else 1
        feed = dict(past, x=rng.standard_normal([1, new, 64]).astype(np.float32))
        if grouped:
            feed.update(seqlens_k=np.array([length + new - 1], np.int32),
                        total_length=np.array(length + new, np.int32))
        else:
            feed.update(positions=np.arange(length, length + new, dtype=np.int64)[None, :])
        got, expected = fast.run(None, feed), ref.run(None, feed)
        for name, y, e in zip(("y", "present_key", "present_value"), got, expected):
            assert_close_to(y, e, f"step {step} ({length} cached): {name}")
        assert got[1].shape == (1, kv_heads, length + new, head)
        past = {"past_key": got[1], "past_value": got[2]}
    if not grouped:
        assert fast.backends_used == ["CpuOneDnn"]
