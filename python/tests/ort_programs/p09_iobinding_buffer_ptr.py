# IO binding through raw pointers, as code that owns its buffers writes it.
import backplane as ort
import numpy as np

session = ort.InferenceSession("tiny_cnn.onnx", providers=["CPUExecutionProvider"])
x = np.random.default_rng(9).random((1, 3, 32, 32), dtype=np.float32)
y = np.empty((1, 10), dtype=np.float32)
io_binding = session.io_binding()
io_binding.bind_input(name="input", device_type="cpu", device_id=0, element_type=np.float32,
                      shape=x.shape, buffer_ptr=x.ctypes.data)
io_binding.bind_output(name="output", device_type="cpu", device_id=0, element_type=np.float32,
                       shape=y.shape, buffer_ptr=y.ctypes.data)
session.run_with_iobinding(io_binding)
print(y)

np.savez("result.npz", model="tiny_cnn.onnx", **{"in.input": x, "out.output": y})
