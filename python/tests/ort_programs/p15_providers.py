# Providers: what is available, what the session uses, and switching.
import backplane as ort
import numpy as np

print("available:", ort.get_available_providers(), "device:", ort.get_device())
sess = ort.InferenceSession("lstm_classifier.onnx", providers=ort.get_available_providers())
print("using:", sess.get_providers(), sess.get_provider_options())
x = np.random.default_rng(15).standard_normal((2, 9, 16)).astype(np.float32)
first = sess.run(None, {"x": x})[0]
sess.set_providers(["CPUExecutionProvider"])
print("now:", sess.get_providers())
logits = sess.run(None, {"x": x})[0]
assert np.allclose(first, logits, rtol=1e-4, atol=1e-5)

np.savez("result.npz", model="lstm_classifier.onnx", **{"in.x": x, "out.logits": logits})
