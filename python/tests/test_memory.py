"""A 10,000-run loop does not grow memory (resident set size, which sees the
runtime's allocations as well as Python's)."""
import gc
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import backplane

PAGE = os.sysconf("SC_PAGE_SIZE")
SHAPE = [64, 64]  # 16 KiB in, 16 KiB out: one leaked array a run is 160 MB


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("model") / "relu_add.onnx")
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Add", ["r", "x"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("backends", [["CpuRef"], None], ids=["CpuRef", "default"])
def test_ten_thousand_runs_do_not_grow_memory(model, backends):
    sess = backplane.InferenceSession(model, backends=backends)
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    x_f = np.asfortranarray(x)
    for _ in range(500):  # warm up: sessions, arenas, allocator pools
        sess.run(None, {"x": x})
        sess.run(None, {"x": x_f})
    gc.collect()
    before = rss_bytes()
    for i in range(10_000):
        # Inputs read in place and converted (a Fortran-ordered copy), in turn.
        (y,) = sess.run(None, {"x": x if i % 2 else x_f})
    gc.collect()
    growth = rss_bytes() - before
    np.testing.assert_array_equal(y, np.maximum(x, 0) + x)
    assert growth < 4 << 20, f"RSS grew by {growth} bytes over 10,000 runs"
