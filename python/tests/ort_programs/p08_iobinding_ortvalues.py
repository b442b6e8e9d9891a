# IO binding with OrtValues: the output written into memory allocated beforehand.
import backplane as ort
import numpy as np

session = ort.InferenceSession("mobilenet_v2.onnx", providers=["CPUExecutionProvider"])
x = np.random.default_rng(8).random((1, 3, 224, 224), dtype=np.float32)
x_ortvalue = ort.OrtValue.ortvalue_from_numpy(x, "cpu", 0)
y_ortvalue = ort.OrtValue.ortvalue_from_shape_and_type([1, 1000], np.float32, "cpu", 0)
print(x_ortvalue.device_name(), x_ortvalue.shape(), x_ortvalue.data_type())
io_binding = session.io_binding()
io_binding.bind_ortvalue_input("input", x_ortvalue)
io_binding.bind_ortvalue_output("output", y_ortvalue)
session.run_with_iobinding(io_binding)
y = y_ortvalue.numpy()
assert io_binding.get_outputs()[0].numpy() is y  # written in place, not copied

np.savez("result.npz", model="mobilenet_v2.onnx", **{"in.input": x, "out.output": y})
