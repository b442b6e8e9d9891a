# run_with_ort_values: OrtValues in, OrtValues out.
import backplane as ort
import numpy as np

sess = ort.InferenceSession("squeezenet1_1.onnx", providers=["CPUExecutionProvider"])
x = np.random.default_rng(10).random((1, 3, 224, 224), dtype=np.float32)
outputs = sess.run_with_ort_values(["output"], {"input": ort.OrtValue.ortvalue_from_numpy(x)})
y = outputs[0].numpy()
print(outputs[0].shape(), outputs[0].data_type())

np.savez("result.npz", model="squeezenet1_1.onnx", **{"in.input": x, "out.output": y})
