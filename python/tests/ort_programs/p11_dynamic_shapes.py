# One session, inputs of several shapes (symbolic batch and sequence length).
import backplane as ort
import numpy as np

sess = ort.InferenceSession("encoder_dyn.onnx", providers=["CPUExecutionProvider"])
print([(i.name, i.shape) for i in sess.get_inputs()])
rng = np.random.default_rng(11)
for batch, seq in [(1, 8), (2, 16), (3, 5), (2, 16)]:
    ids = rng.integers(0, 1000, size=(batch, seq), dtype=np.int64)
    (hidden,) = sess.run(None, {"input_ids": ids})
    print(ids.shape, "->", hidden.shape)

np.savez("result.npz", model="encoder_dyn.onnx", **{"in.input_ids": ids, "out.last_hidden_state": hidden})
