#!/usr/bin/env python3
"""Writes add_relu_sigmoid.onnx, the model used in docs/writing-a-backend.md:

    y = Sigmoid(Relu(x + w))    x, w, y: float32[2,4]; w is a weight

MyAcc runs Add and Relu; Sigmoid falls back to the next backend (CpuRef).
Needs the onnx and numpy Python packages (Debian: python3-onnx python3-numpy).
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

w = np.linspace(-1.0, 1.0, 8, dtype=np.float32).reshape(2, 4)
graph = helper.make_graph(
    [
        helper.make_node("Add", ["x", "w"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["r"], name="relu"),
        helper.make_node("Sigmoid", ["r"], ["y"], name="sigmoid"),
    ],
    "add_relu_sigmoid",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
    initializer=[numpy_helper.from_array(w, "w")],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="make_model.py")
model.ir_version = 8
onnx.checker.check_model(model)
onnx.save(model, sys.argv[1] if len(sys.argv) > 1 else "add_relu_sigmoid.onnx")
