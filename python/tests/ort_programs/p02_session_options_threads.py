# Threads and graph optimisation set through SessionOptions.
import backplane as ort
import numpy as np

so = ort.SessionOptions()
so.intra_op_num_threads = 2
so.inter_op_num_threads = 1
so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
so.add_session_config_entry("session.intra_op.allow_spinning", "0")
sess = ort.InferenceSession("resnet18.onnx", sess_options=so, providers=["CPUExecutionProvider"])
x = np.random.default_rng(2).standard_normal((1, 3, 224, 224)).astype(np.float32)
(y,) = sess.run(None, {"input": x})
print("class:", int(y.argmax()), "allow_spinning:", so.get_session_config_entry("session.intra_op.allow_spinning"))

np.savez("result.npz", model="resnet18.onnx", **{"in.input": x, "out.output": y})
