"""Soak: backplane serve under mixed good and malformed requests, with models
loaded, reloaded and unloaded in between, for a while.

    soak.py [--seconds 600] [--warmup 60]

Passes when the server never crashed, every good request succeeded with the
right output, every malformed one got a 4xx with a message, and the server's
resident memory at the end is within 5% of what it was after the warm-up.
`make soak` runs it for 10 minutes; make test runs a short one."""
import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_harness import Server, model, reference_outputs  # noqa: E402
from test_rest import decode, http, infer_binary, infer_json  # noqa: E402


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS for %d" % pid)


def malformed(s, rng):
    """One request the server must refuse with 4xx; (status, body)."""
    url = s.http_url + "/v2/models/tiny/infer"
    x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    kind = rng.integers(0, 8)
    if kind == 0:
        return http("POST", url, b"{\"inputs\": [")
    if kind == 1:
        return infer_json(s, "tiny", {"input": x[:, :2]})
    if kind == 2:
        return infer_json(s, "tiny", {"wrong": x})
    if kind == 3:
        return infer_json(s, "nope", {"input": x})
    if kind == 4:
        return http("POST", url, json.dumps({"inputs": [{
            "name": "input", "datatype": "FP32", "shape": [1, 3, 100000, 100000],
            "data": [0.0]}]}).encode())
    if kind == 5:
        header = json.dumps({"inputs": [{"name": "input", "datatype": "FP32",
                                         "shape": [1, 3, 32, 32],
                                         "parameters": {"binary_data_size": 999}}]}).encode()
        return http("POST", url, header + b"\0" * 999,
                    {"Inference-Header-Content-Length": str(len(header))})
    if kind == 6:
        return infer_json(s, "tiny", {"input": x.astype(np.float16)})
    return http("POST", url, json.dumps({"inputs": [{
        "name": "input", "datatype": "FP32", "shape": [1, 3, 32, 32],
        "data": x.flatten().tolist()}], "outputs": [{"name": "nothing"}]}).encode())


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--warmup", type=float, default=60)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--no-control", action="store_true",
                    help="no load, reload or unload (to tell their memory from requests')")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="backplane-soak-")
    try:
        repo = os.path.join(tmp, "repo")
        for name, source, config in (
                ("tiny", "tiny_cnn.onnx", {"instances": 2}),
                ("enc", "encoder_dyn.onnx",
                 {"dynamic_batching": {"max_batch_size": 8, "max_queue_delay_us": 2000}}),
                ("swapped", "tiny_cnn.onnx", {}),
                ("churned", "mobilenet_v2.onnx", {})):
            os.makedirs(os.path.join(repo, name, "1"))
            shutil.copy(model(source), os.path.join(repo, name, "1", "model.onnx"))
            with open(os.path.join(repo, name, "config.json"), "w") as f:
                json.dump(config, f)

        rng = np.random.default_rng(0)
        x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
        ids = rng.integers(0, 100, (1, 7)).astype(np.int64)
        want_tiny = reference_outputs(model("tiny_cnn.onnx"), {"input": x}, tmp)["output"]
        want_enc = reference_outputs(model("encoder_dyn.onnx"), {"input_ids": ids},
                                     tmp)["last_hidden_state"]

        stats = {"good": 0, "malformed": 0, "control": 0}
        failures = []
        lock = threading.Lock()
        stop = threading.Event()

        with Server(["--model-repository", repo], threads=1) as s:
            def note_failure(what):
                with lock:
                    failures.append(what)
                stop.set()

            def client(seed):
                r = np.random.default_rng(seed)
                while not stop.is_set():
                    choice = r.integers(0, 10)
                    try:
                        if choice < 4:
                            name = "tiny" if choice < 3 else "swapped"
                            _, out = decode(*infer_binary(s, name, {"input": x}))
                            if out["output"].tobytes() != want_tiny.tobytes():
                                note_failure("%s: wrong output" % name)
                            kind = "good"
                        elif choice < 7:
                            _, out = decode(*infer_binary(s, "enc", {"input_ids": ids}))
                            # Batched with others: equal within the batch's rounding.
                            if not np.allclose(out["last_hidden_state"], want_enc,
                                               rtol=1e-4, atol=1e-5):
                                note_failure("enc: wrong output")
                            kind = "good"
                        else:
                            status, _, body = malformed(s, r)
                            if not 400 <= status < 500 or not json.loads(body).get("error"):
                                note_failure("malformed request answered %d: %r"
                                             % (status, body[:200]))
                            kind = "malformed"
                    except Exception as e:  # a good request that failed, or a dead server
                        note_failure("%s: %r" % ("request", e))
                        return
                    with lock:
                        stats[kind] += 1

            def control():
                # "swapped" is reloaded under traffic (every request must still
                # succeed); "churned", with no traffic, is unloaded and loaded.
                r = random.Random(1)
                while not stop.is_set():
                    for path in ("/v2/repository/models/swapped/load",
                                 "/v2/repository/models/churned/unload",
                                 "/v2/repository/models/churned/load"):
                        status, _, body = http("POST", s.http_url + path, b"")
                        if status != 200:
                            note_failure("%s answered %d: %r" % (path, status, body[:200]))
                            return
                        with lock:
                            stats["control"] += 1
                    # Every model is loaded now: the state memory is compared in.
                    if time.monotonic() - start >= args.warmup:
                        samples.append(rss_kb(s.proc.pid))
                    stop.wait(r.uniform(0.5, 2.0))

            samples = []  # resident KB after each load/unload cycle, after the warm-up
            start = time.monotonic()
            threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
            if not args.no_control:
                threads.append(threading.Thread(target=control))
            for t in threads:
                t.start()
            peak_rss = 0
            next_report = start + 60
            while not stop.is_set() and time.monotonic() - start < args.seconds:
                stop.wait(1.0)
                if s.proc.poll() is not None:
                    note_failure("the server exited with %d" % s.proc.returncode)
                    break
                rss = rss_kb(s.proc.pid)
                peak_rss = max(peak_rss, rss)
                if args.no_control and time.monotonic() - start >= args.warmup:
                    samples.append(rss)
                if time.monotonic() >= next_report:
                    next_report += 60
                    print("soak: %.0f s, RSS %d MB" % (time.monotonic() - start, rss // 1024),
                          flush=True)
            stop.set()
            for t in threads:
                t.join(120)
            elapsed = time.monotonic() - start

        # Resident memory in the same state (every model loaded), averaged
        # over the first and the last quarter of the samples after the
        # warm-up: a reload's freed memory returns when its last request
        # ends, so single samples swing by a model's size either way.
        k = max(1, len(samples) // 4)
        warm_rss = sum(samples[:k]) / k if samples else 0
        end_rss = sum(samples[-k:]) / k if samples else 0
        print("soak: %.0f s, %d good, %d malformed, %d load/unload; RSS after warm-up %.0f MB, "
              "at the end %.0f MB, peak %d MB"
              % (elapsed, stats["good"], stats["malformed"], stats["control"],
                 warm_rss / 1024, end_rss / 1024, peak_rss // 1024))
        if not samples:
            failures.append("no memory sample after the warm-up: run longer than --warmup")
        if failures:
            print("soak: FAILED:\n  " + "\n  ".join(failures[:20]))
            return 1
        if end_rss > warm_rss * 1.05:
            print("soak: FAILED: resident memory grew %.1f%% after the warm-up"
                  % (100.0 * (end_rss / warm_rss - 1)))
            return 1
        if stats["good"] == 0 or stats["malformed"] == 0 or stats["control"] == 0:
            print("soak: FAILED: a kind of request never ran")
            return 1
        print("soak: passed")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
