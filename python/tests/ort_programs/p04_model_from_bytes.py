# A model given as bytes (read from a file, a database, a network).
import backplane as ort
import numpy as np

with open("tiny_cnn.onnx", "rb") as f:
    model_bytes = f.read()
sess = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
x = np.random.default_rng(4).random((1, 3, 32, 32), dtype=np.float32)
y = sess.run(None, {"input": x})[0]
print(y.round(3))

np.savez("result.npz", model="tiny_cnn.onnx", **{"in.input": x, "out.output": y})
