# optimized_model_filepath: save the optimised model, load it in a later session.
import os

import backplane as ort
import numpy as np

so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
so.optimized_model_filepath = "resnet18.optimized.onnx"
ort.InferenceSession("resnet18.onnx", so, providers=["CPUExecutionProvider"])
assert os.path.getsize("resnet18.optimized.onnx") > 0
sess = ort.InferenceSession("resnet18.optimized.onnx", providers=["CPUExecutionProvider"])
x = np.random.default_rng(16).random((1, 3, 224, 224), dtype=np.float32)
(y,) = sess.run(None, {"input": x})
print(int(y.argmax()))

np.savez("result.npz", model="resnet18.onnx", **{"in.input": x, "out.output": y})
