"""What outlives what: the session outlives what made it; arrays outlive the
session and the next run."""
import gc
import os

import numpy as np

import backplane


def make_session(models_dir):
    # Everything here (the path string, the bytes, the options) dies on return.
    data = open(os.path.join(models_dir, "tiny_cnn.onnx"), "rb").read()
    options = backplane.RuntimeOptions(threads=1)
    return backplane.InferenceSession(bytes(data), backends=["CpuRef"], options=options)


def test_session_outlives_its_makers(models_dir):
    sess = make_session(models_dir)
    gc.collect()
    x = np.random.default_rng(0).random((1, 3, 32, 32), dtype=np.float32)
    (y,) = sess.run(None, {"input": x})
    (want,) = backplane.InferenceSession(os.path.join(models_dir, "tiny_cnn.onnx"), backends=["CpuRef"]).run(
        None, {"input": x})
    np.testing.assert_array_equal(y, want)


def test_outputs_survive_the_next_run_and_the_session(models_dir):
    sess = make_session(models_dir)
    rng = np.random.default_rng(1)
    x1 = rng.random((1, 3, 32, 32), dtype=np.float32)
    x2 = rng.random((1, 3, 32, 32), dtype=np.float32)
    (y1,) = sess.run(None, {"input": x1})
    keep = y1.copy()
    (y2,) = sess.run(None, {"input": x2})
    assert not np.array_equal(y1, y2)
    np.testing.assert_array_equal(y1, keep)  # the second run did not write into the first's output
    assert y1.flags.owndata and y1.flags.writeable
    # The input is read in place during run only: changing it afterwards
    # changes nothing already returned.
    x1[:] = 0
    np.testing.assert_array_equal(y1, keep)
    del sess
    gc.collect()
    np.testing.assert_array_equal(y1, keep)
    assert float(np.abs(y2).sum()) > 0


def test_many_sessions_come_and_go(models_dir):
    path = os.path.join(models_dir, "tiny_cnn.onnx")
    x = np.ones((1, 3, 32, 32), np.float32)
    outs = [backplane.InferenceSession(path, backends=["CpuRef"]).run(None, {"input": x})[0] for _ in range(20)]
    gc.collect()
    for y in outs[1:]:
        np.testing.assert_array_equal(y, outs[0])
