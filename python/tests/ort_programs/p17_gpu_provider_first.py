# The usual "GPU if there is one" list: providers this build lacks are skipped with a warning.
import warnings

import backplane as ort
import numpy as np

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    sess = ort.InferenceSession("block_attention.onnx",
                                providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
print("warnings:", [str(w.message) for w in caught])
print("using:", sess.get_providers())
x = np.random.default_rng(17).standard_normal((2, 16, 49, 32)).astype(np.float32)
(y,) = sess.run(None, {"input": x})

np.savez("result.npz", model="block_attention.onnx", **{"in.input": x, "out.output": y})
