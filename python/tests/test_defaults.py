"""Inputs the model gives a default: an initializer listed among the graph's
inputs (IR version 4 on, as older PyTorch and TensorFlow exporters write
weights). A run that does not feed one takes the model's value; a feed
overrides it, for that run only. The command line and the module agree."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import backplane


def _model(tmp_path):
    w = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "defaults",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = str(tmp_path / "defaults.onnx")
    onnx.save(model, path)
    return path, w


def test_a_run_without_the_input_takes_the_models_value(tmp_path):
    path, w = _model(tmp_path)
    sess = backplane.InferenceSession(path)
    x = np.array([[1.0, -2.0]], dtype=np.float32)
    (y,) = sess.run(None, {"x": x})
    np.testing.assert_allclose(y, x @ w, rtol=1e-6)
    other = np.ones((2, 3), dtype=np.float32)
    (y2,) = sess.run(None, {"x": x, "w": other})
    np.testing.assert_allclose(y2, x @ other, rtol=1e-6)
    # The override was for that run alone.
    (y3,) = sess.run(None, {"x": x})
    np.testing.assert_allclose(y3, x @ w, rtol=1e-6)


def test_the_command_line_does_not_replace_a_default_with_generated_values(tmp_path, cli):
    path, w = _model(tmp_path)
    x = np.array([[0.5, 3.0]], dtype=np.float32)
    got = cli.outputs(path, {"x": x}, str(tmp_path / "out"))
    np.testing.assert_allclose(got["y"], x @ w, rtol=1e-6)
