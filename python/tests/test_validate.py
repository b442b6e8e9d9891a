"""backplane.validate: a plan compared with CpuRef, the first wrong node named.

MockFuse (backends/testing/mock_acc, its directory in BACKPLANE_TESTING_FUSE_DIR)
is wrong only on a Conv fused with the Add of a constant."""
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import backplane


@pytest.fixture(scope="module")
def fuse_dir():
    value = os.environ.get("BACKPLANE_TESTING_FUSE_DIR")
    if not value:
        pytest.exit("BACKPLANE_TESTING_FUSE_DIR is not set (run these tests through ctest)",
                    returncode=2)
    return value


def _model(tmp_path, planted):
    """Conv -> Add(constant) -> Sigmoid; planted=False puts a Relu between
    the Conv and the Add, which MockFuse does not fuse."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array((rng.standard_normal((4, 4, 3, 3)) * 0.2).astype(np.float32), "w")
    c = numpy_helper.from_array(rng.standard_normal((1, 4, 1, 1)).astype(np.float32), "c")
    nodes = [helper.make_node("Conv", ["x", "w"], ["conv_out"], name="conv", pads=[1, 1, 1, 1])]
    last = "conv_out"
    if not planted:
        nodes.append(helper.make_node("Relu", [last], ["relu_out"], name="relu"))
        last = "relu_out"
    nodes.append(helper.make_node("Add", [last, "c"], ["add_out"], name="add"))
    nodes.append(helper.make_node("Sigmoid", ["add_out"], ["y"], name="sigmoid"))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])], [w, c])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / ("planted.onnx" if planted else "right.onnx")
    onnx.save(model, str(path))
    return path


def test_names_the_fused_pair(tmp_path, fuse_dir):
    report = backplane.validate(_model(tmp_path, True), backend_path=fuse_dir)
    assert report["ok"] is False
    wrong = report["wrong_node"]
    assert (wrong["name"], wrong["op_type"], wrong["backend"]) == ("add", "Add", "MockFuse")
    assert wrong["fused_with"] == ["conv"]
    assert [g["op_type"] for g in wrong["group"]] == ["Conv", "Add"]
    assert wrong["tensor"] == "add_out"
    assert wrong["max_abs_error"] > wrong["bound"]
    assert {i["name"]: i["shape"] for i in wrong["inputs"]} == {"conv_out": [1, 4, 6, 6],
                                                               "c": [1, 4, 1, 1]}
    assert report["generated_inputs"] == ["x"]


def test_right_plan_and_given_inputs(tmp_path, fuse_dir):
    x = np.random.default_rng(0).random((1, 4, 6, 6), dtype=np.float32)
    report = backplane.validate(_model(tmp_path, False), inputs={"x": x}, backend_path=fuse_dir)
    assert report["ok"] is True and report["wrong_node"] is None
    assert report["generated_inputs"] == []
    assert "MockFuse" in report["backends"]
    assert all(c["within"] for c in report["checks"])
    # The planted model with the Add pinned to CpuRef is right too.
    report = backplane.validate(_model(tmp_path, True), overrides={"add": "CpuRef"},
                                backend_path=fuse_dir)
    assert report["ok"] is True


def test_find_node_false_only_compares(tmp_path, fuse_dir):
    report = backplane.validate(_model(tmp_path, True), find_node=False, backend_path=fuse_dir)
    assert report["ok"] is False and report["wrong_node"] is None
    assert report["plans"] == 3  # the plan read, CpuRef, the plan compared


def test_errors(tmp_path, fuse_dir):
    missing = tmp_path / "missing.onnx"
    with pytest.raises(backplane.Error, match="missing.onnx"):
        backplane.validate(missing)
    with pytest.raises(backplane.InvalidArgumentError, match="no input of that name"):
        backplane.validate(_model(tmp_path, True), inputs={"nope": np.zeros(1, np.float32)},
                           backend_path=fuse_dir)
    with pytest.raises(TypeError):
        backplane.validate(_model(tmp_path, True), no_such_option=1)
