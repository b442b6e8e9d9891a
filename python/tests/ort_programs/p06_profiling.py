# enable_profiling: every run into one Chrome trace, named by end_profiling().
import json

import backplane as ort
import numpy as np

options = ort.SessionOptions()
options.enable_profiling = True
options.profile_file_prefix = "squeezenet"
sess = ort.InferenceSession("squeezenet1_1.onnx", options, providers=["CPUExecutionProvider"])
x = np.random.default_rng(6).random((1, 3, 224, 224), dtype=np.float32)
for _ in range(3):
    y = sess.run(None, {"input": x})[0]
prof_file = sess.end_profiling()
print("trace:", prof_file)
with open(prof_file) as f:
    events = json.load(f)["traceEvents"]
runs = [e for e in events if e.get("ph") == "X" and e.get("cat") == "run"]
print(len(events), "events,", len(runs), "runs")
assert prof_file.startswith("squeezenet_") and len(runs) == 3
# One after the other on one timeline, as ORT writes them.
runs.sort(key=lambda e: e["ts"])
assert all(a["ts"] + a["dur"] <= b["ts"] for a, b in zip(runs, runs[1:])), runs

np.savez("result.npz", model="squeezenet1_1.onnx", **{"in.input": x, "out.output": y})
