#!/usr/bin/python3
"""The Python module behind backplane_bench's line protocol (python_overhead.py).

    python_runner.py MODEL.onnx INPUT.npy THREADS BACKEND_DIR

Prints {"ready", "load_ms"} once the first result exists, then answers
"run K" with {"times_ms": [...]}, each time one `sess.run(None, {name: x})`
as a Python program calls it: the input bound in place, the run, the output
copied into a new array (backplane_bench times set_input + run the same way).
"""
import json
import sys
import time

t0 = time.perf_counter()
import numpy as np  # noqa: E402

import backplane  # noqa: E402


def main():
    model, input_path, threads, backend_dir = sys.argv[1:5]
    x = np.load(input_path)
    sess = backplane.InferenceSession(model, backend_path=backend_dir, threads=int(threads))
    feed = {sess.get_inputs()[0].name: x}
    sess.run(None, feed)
    load_ms = (time.perf_counter() - t0) * 1e3
    print(json.dumps({"ready": True, "load_ms": load_ms, "backends": ",".join(sess.backends_used)}), flush=True)
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        if cmd == "run":
            times = []
            for _ in range(int(arg)):
                s = time.perf_counter()
                sess.run(None, feed)
                times.append((time.perf_counter() - s) * 1e3)
            print(json.dumps({"times_ms": times}), flush=True)
        elif cmd == "quit":
            break


if __name__ == "__main__":
    main()
