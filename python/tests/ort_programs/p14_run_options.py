# RunOptions: a tag and a log level per run.
import backplane as ort
import numpy as np

ort.set_default_logger_severity(3)
sess = ort.InferenceSession("transformer.onnx", providers=["CPUExecutionProvider"])
ro = ort.RunOptions()
ro.log_severity_level = 3
ro.run_tag = "batch-0"
ids = np.random.default_rng(14).integers(0, 1000, size=(1, 32), dtype=np.int64)
(hidden,) = sess.run(None, {"input_ids": ids}, ro)
print(hidden.shape, float(hidden.mean()))
ro.terminate = True
try:
    sess.run(None, {"input_ids": ids}, ro)
    raise SystemExit("a run with terminate set should not run")
except RuntimeError as e:
    print("terminated:", e)

np.savez("result.npz", model="transformer.onnx", **{"in.input_ids": ids, "out.last_hidden_state": hidden})
