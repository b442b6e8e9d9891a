"""8 Python threads calling run on one InferenceSession at once."""
import os
import threading

import numpy as np
import pytest

import backplane

THREADS = 8
RUNS = 6


@pytest.mark.parametrize("backends", [["CpuRef"], None], ids=["CpuRef", "default"])
def test_eight_threads_share_one_session(models_dir, backends):
    sess = backplane.InferenceSession(os.path.join(models_dir, "squeezenet1_1.onnx"), backends=backends)
    rng = np.random.default_rng(3)
    inputs = [rng.random((1, 3, 224, 224), dtype=np.float32) for _ in range(THREADS)]
    # Each thread's answer, computed alone first.
    expected = [sess.run(None, {"input": x})[0] for x in inputs]
    assert sess._pooled_sessions() == 1

    barrier = threading.Barrier(THREADS)
    results = [[] for _ in range(THREADS)]
    errors = []

    def worker(k):
        try:
            barrier.wait()
            for _ in range(RUNS):
                results[k].append(sess.run(None, {"input": inputs[k]})[0])
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for k in range(THREADS):
        assert len(results[k]) == RUNS
        for y in results[k]:
            np.testing.assert_array_equal(y, expected[k])
    # A session is taken from the pool for each run, with the GIL held, and
    # the run itself releases the GIL: more than one session in the pool means
    # runs overlapped, which they could not with the GIL held throughout.
    assert sess._pooled_sessions() > 1
    assert sess._pooled_sessions() <= THREADS
