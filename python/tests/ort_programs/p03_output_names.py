# Outputs asked for by name, their declared shapes and types read first.
import backplane as ort
import numpy as np

sess = ort.InferenceSession("mobilenet_v2.onnx", providers=["CPUExecutionProvider"])
for o in sess.get_outputs():
    print(o.name, o.shape, o.type)
output_name = sess.get_outputs()[0].name
x = np.random.default_rng(3).random((1, 3, 224, 224), dtype=np.float32)
result = sess.run([output_name], {sess.get_inputs()[0].name: x})
assert result[0].shape == (1, 1000)

np.savez("result.npz", model="mobilenet_v2.onnx", **{"in.input": x, "out." + output_name: result[0]})
