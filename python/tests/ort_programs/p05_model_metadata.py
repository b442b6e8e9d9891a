# What the model says about itself.
import backplane as ort
import numpy as np

sess = ort.InferenceSession("tiny_cnn.onnx", providers=["CPUExecutionProvider"])
meta = sess.get_modelmeta()
print("producer:", meta.producer_name, meta.producer_version)
print("graph:", meta.graph_name, "version:", meta.version, "domain:", repr(meta.domain))
print("custom:", meta.custom_metadata_map, "description:", repr(meta.description))
assert meta.producer_name == "pytorch"
x = np.ones((1, 3, 32, 32), dtype=np.float32)
y = sess.run(None, {"input": x})[0]

np.savez("result.npz", model="tiny_cnn.onnx", **{"in.input": x, "out.output": y})
