# Symbolic dims fixed in the session options.
import backplane as ort
import numpy as np

so = ort.SessionOptions()
so.add_free_dimension_override_by_name("batch", 2)
so.add_free_dimension_override_by_name("seq", 16)
sess = ort.InferenceSession("encoder_dyn.onnx", so, providers=["CPUExecutionProvider"])
ids = np.random.default_rng(12).integers(0, 1000, size=(2, 16), dtype=np.int64)
(hidden,) = sess.run(None, {"input_ids": ids})
try:
    sess.run(None, {"input_ids": ids[:1]})
    raise SystemExit("a batch of 1 should have been refused")
except Exception as e:  # ORT raises its own error type here
    print("refused:", e)

np.savez("result.npz", model="encoder_dyn.onnx", **{"in.input_ids": ids, "out.last_hidden_state": hidden})
