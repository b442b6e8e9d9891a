# Greedy generation with a key/value cache: each step's present_* fed back as past_*.
import backplane as ort
import numpy as np

sess = ort.InferenceSession("decoder_kv.onnx", providers=["CPUExecutionProvider"])
past_names = [i.name for i in sess.get_inputs() if i.name.startswith("past_")]
output_names = [o.name for o in sess.get_outputs()]
past = {n: np.zeros((1, 4, 0, 16), dtype=np.float32) for n in past_names}
token = np.array([[1]], dtype=np.int64)
generated = []
for step in range(12):
    feeds = {"input_ids": token, **past}
    outputs = dict(zip(output_names, sess.run(output_names, feeds)))
    token = outputs["logits"][:, -1:].argmax(-1).astype(np.int64)
    generated.append(int(token[0, 0]))
    past = {n: outputs["present_" + n[len("past_"):]] for n in past_names}
print("generated:", generated)

np.savez("result.npz", model="decoder_kv.onnx", **{"in." + k: v for k, v in feeds.items()},
         **{"out." + k: v for k, v in outputs.items()})
