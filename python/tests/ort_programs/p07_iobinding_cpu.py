# IO binding: the input bound from a numpy array, the output left to the runtime.
import backplane as ort
import numpy as np

session = ort.InferenceSession("resnet18.onnx", providers=["CPUExecutionProvider"])
x = np.random.default_rng(7).random((1, 3, 224, 224), dtype=np.float32)
io_binding = session.io_binding()
io_binding.bind_cpu_input("input", x)
io_binding.bind_output("output")
session.run_with_iobinding(io_binding)
y = io_binding.copy_outputs_to_cpu()[0]
print(y.shape, int(y.argmax()))

np.savez("result.npz", model="resnet18.onnx", **{"in.input": x, "out.output": y})
