"""Dynamic batching in backplane serve: concurrent requests run as one
execution, each gets its own rows back, and what cannot batch is refused or
run alone."""
import json
import re
import shutil
import threading

import numpy as np

from serve_harness import Server, model, reference_outputs
from test_rest import decode, http, infer_binary, metric


def repo_with(tmp_path, name, source, config):
    (tmp_path / "repo" / name / "1").mkdir(parents=True)
    shutil.copy(model(source), tmp_path / "repo" / name / "1" / "model.onnx")
    (tmp_path / "repo" / name / "config.json").write_text(json.dumps(config))
    return str(tmp_path / "repo")


def ids(rows, seq, seed):
    return np.random.default_rng(seed).integers(0, 100, (rows, seq)).astype(np.int64)


def concurrently(server, requests):
    """Sends every request ({input name: array}) at once; their decoded replies, in order."""
    replies = [None] * len(requests)

    def send(i):
        replies[i] = infer_binary(server, "enc", requests[i])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return replies


def test_concurrent_requests_run_as_one_batch_and_get_their_own_rows(tmp_path):
    # A long delay and a batch of exactly the requests sent: they run together.
    repo = repo_with(tmp_path, "enc", "encoder_dyn.onnx",
                     {"dynamic_batching": {"max_batch_size": 8, "max_queue_delay_us": 2000000}})
    with Server(["--model-repository", repo]) as s:
        requests = [{"input_ids": ids(1, 6, i)} for i in range(6)] + \
                   [{"input_ids": ids(2, 6, 10)}]
        replies = concurrently(s, requests)
        row = 0
        for request, reply in zip(requests, replies):
            _, got = decode(*reply)
            n = request["input_ids"].shape[0]
            out = got["last_hidden_state"]
            assert out.shape == (n, 6, 64)
            # The same rows of a run of the whole batch, in whatever order the
            # requests joined it: each reply matches its own input's rows.
            alone = reference_outputs(model("encoder_dyn.onnx"), request, str(tmp_path))
            np.testing.assert_allclose(out, alone["last_hidden_state"], rtol=1e-4, atol=1e-5)
            row += n
        assert row == 8
        text = http("GET", s.http_url + "/metrics")[2].decode()
        assert metric(text, "nv_inference_request_success", "enc") == 7
        assert metric(text, "nv_inference_count", "enc") == 8  # rows
        # One execution: every request waited until the batch was full.
        assert metric(text, "nv_inference_exec_count", "enc") == 1


def test_requests_that_cannot_share_a_batch(tmp_path):
    repo = repo_with(tmp_path, "enc", "encoder_dyn.onnx",
                     {"dynamic_batching": {"max_batch_size": 4, "max_queue_delay_us": 300000}})
    with Server(["--model-repository", repo]) as s:
        # Other sequence lengths never share a batch; more rows than the
        # batch holds run alone.
        requests = [{"input_ids": ids(1, 5, 1)}, {"input_ids": ids(1, 9, 2)},
                    {"input_ids": ids(6, 5, 3)}, {"input_ids": ids(1, 5, 4)}]
        replies = concurrently(s, requests)
        for request, reply in zip(requests, replies):
            _, got = decode(*reply)
            alone = reference_outputs(model("encoder_dyn.onnx"), request, str(tmp_path))
            np.testing.assert_allclose(got["last_hidden_state"], alone["last_hidden_state"],
                                       rtol=1e-4, atol=1e-5)
        text = http("GET", s.http_url + "/metrics")[2].decode()
        assert metric(text, "nv_inference_count", "enc") == 9
        assert metric(text, "nv_inference_exec_count", "enc") >= 3
        # A request alone still runs, after the delay.
        decode(*infer_binary(s, "enc", {"input_ids": ids(1, 5, 5)}))


def test_a_model_without_a_batch_dim_cannot_batch(tmp_path):
    repo = repo_with(tmp_path, "tiny", "tiny_cnn.onnx", {"dynamic_batching": {}})
    with Server(["--model-repository", repo], require_ready=False) as s:
        status, _, body = http("GET", s.http_url + "/v2/models/tiny")
        assert status == 503
        message = json.loads(body)["error"]
        assert "dynamic_batching" in message and "leading" in message


def test_batching_respects_the_queue_bound(tmp_path):
    repo = repo_with(tmp_path, "enc", "encoder_dyn.onnx",
                     {"max_queue_size": 2,
                      "dynamic_batching": {"max_batch_size": 64, "max_queue_delay_us": 1000000}})
    with Server(["--model-repository", repo]) as s:
        replies = concurrently(s, [{"input_ids": ids(1, 5, i)} for i in range(5)])
        statuses = sorted(r[0] for r in replies)
        assert statuses.count(200) == 2 and statuses.count(429) == 3, statuses
        for r in replies:
            if r[0] == 429:
                assert re.search(r"waiting already", json.loads(r[2])["error"])
