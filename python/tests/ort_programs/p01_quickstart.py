# The first program of ONNX Runtime's Python tutorial: load, look at the input, run.
import backplane as ort
import numpy as np

sess = ort.InferenceSession("squeezenet1_1.onnx", providers=["CPUExecutionProvider"])
input_name = sess.get_inputs()[0].name
print("input:", input_name, sess.get_inputs()[0].shape, sess.get_inputs()[0].type)
x = np.random.default_rng(1).random((1, 3, 224, 224), dtype=np.float32)
outputs = sess.run(None, {input_name: x})
print("top-5:", np.argsort(outputs[0][0])[::-1][:5])

np.savez("result.npz", model="squeezenet1_1.onnx", **{"in." + input_name: x, "out.output": outputs[0]})
