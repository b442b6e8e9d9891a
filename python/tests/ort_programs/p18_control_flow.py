# A model with an If: which branch runs depends on the input.
import backplane as ort
import numpy as np

sess = ort.InferenceSession("cf_if.onnx", providers=["CPUExecutionProvider"])
name = sess.get_inputs()[0].name
out = sess.get_outputs()[0].name
for x in (np.linspace(-1, 1, 7).astype(np.float32), np.linspace(1, 2, 5).astype(np.float32)):
    (y,) = sess.run([out], {name: x})
    print(x.shape, "->", y.shape)

np.savez("result.npz", model="cf_if.onnx", **{"in." + name: x, "out." + out: y})
