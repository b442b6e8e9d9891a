"""A 10,000-run loop does not grow memory (resident set size, which sees the
runtime's allocations as well as Python's)."""
import gc
import os

import numpy as np
import pytest

import backplane

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


@pytest.mark.parametrize("backends", [["CpuRef"], None], ids=["CpuRef", "default"])
def test_ten_thousand_runs_do_not_grow_memory(models_dir, backends):
    sess = backplane.InferenceSession(os.path.join(models_dir, "tiny_cnn.onnx"), backends=backends)
    x = np.random.default_rng(0).random((1, 3, 32, 32), dtype=np.float32)
    out_bytes = sess.run(None, {"input": x})[0].nbytes
    for _ in range(500):  # warm up: sessions, arenas, allocator pools
        sess.run(None, {"input": x})
    gc.collect()
    before = rss_bytes()
    for i in range(10_000):
        (y,) = sess.run(None, {"input": x})
        if i % 2:  # inputs both read in place and converted
            sess.run(None, {"input": x.tolist() if i % 1000 == 1 else x.astype(np.float32, order="F")})
    gc.collect()
    growth = rss_bytes() - before
    # Leaking one output (or one converted input) per run would add at least
    # 10,000 * out_bytes; allow a small fraction of that plus allocator noise.
    assert growth < max(2 << 20, 10_000 * out_bytes // 4), f"RSS grew by {growth} bytes over 10,000 runs"
