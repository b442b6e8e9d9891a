"""backplane serve over REST, driven by curl and Python's urllib: the Open
Inference Protocol's endpoints, JSON and binary tensor data, outputs equal
to `backplane run`'s bit for bit, and requests that must not hurt the server."""
import json
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from serve_harness import (CLI, DATATYPES, SERVE, Server, binary_request, decode_response,
                           model, reference_outputs)

# The protocol's name of each numpy dtype.
DATATYPE = {np.dtype(v): k for k, v in DATATYPES.items()}


def http(method, url, body=None, headers=None):
    """(status, headers, body bytes); never raises on an HTTP error status."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def get_json(url):
    status, _, body = http("GET", url)
    return status, json.loads(body) if body else None


def infer_json(server, name, inputs, outputs=None, request_id=None, binary_out=False):
    body = {"inputs": [{"name": k, "datatype": DATATYPE[v.dtype], "shape": list(v.shape),
                        "data": v.flatten().tolist()} for k, v in inputs.items()]}
    if outputs is not None:
        body["outputs"] = [{"name": o} for o in outputs]
    if request_id is not None:
        body["id"] = request_id
    if binary_out:
        body["parameters"] = {"binary_data_output": True}
    return http("POST", "%s/v2/models/%s/infer" % (server.http_url, name),
                json.dumps(body).encode(), {"Content-Type": "application/json"})


def infer_binary(server, name, inputs, binary_out=True):
    """Triton's binary tensor data extension: JSON header, then raw bytes."""
    body, json_len = binary_request(inputs, binary_out)
    return http("POST", "%s/v2/models/%s/infer" % (server.http_url, name), body,
                {"Content-Type": "application/octet-stream",
                 "Inference-Header-Content-Length": str(json_len)})


def decode(status, headers, body):
    """The outputs of an infer response, JSON or binary, as {name: array}."""
    assert status == 200, body[:2000]
    return decode_response(headers, body)


def assert_bit_equal(got, want):
    assert sorted(got) == sorted(want)
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
        assert got[k].tobytes() == want[k].tobytes(), "output %s differs from backplane run" % k


@pytest.fixture(scope="module")
def server():
    with Server(["--model", "tiny=" + model("tiny_cnn.onnx"),
                 "--model", "mobilenet=" + model("mobilenet_v2.onnx"),
                 "--model", "encoder=" + model("encoder_dyn.onnx"),
                 "--model", "decoder=" + model("decoder_kv.onnx"),
                 "--max-request-bytes", str(4 << 20)]) as s:
        yield s


def rng_input(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_health_and_server_metadata(server):
    assert http("GET", server.http_url + "/v2/health/live")[0] == 200
    assert http("GET", server.http_url + "/v2/health/ready")[0] == 200
    status, meta = get_json(server.http_url + "/v2")
    assert status == 200 and meta["name"] == "backplane"
    assert "binary_tensor_data" in meta["extensions"]


def test_model_metadata_gives_datatypes_and_open_dims(server):
    status, meta = get_json(server.http_url + "/v2/models/tiny")
    assert status == 200
    assert meta["name"] == "tiny" and meta["versions"] == ["1"] and meta["platform"] == "onnx"
    assert meta["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [1, 3, 32, 32]}]
    assert meta["outputs"] == [{"name": "output", "datatype": "FP32", "shape": [1, 10]}]
    status, meta = get_json(server.http_url + "/v2/models/encoder/versions/1")
    assert status == 200
    assert meta["inputs"] == [{"name": "input_ids", "datatype": "INT64", "shape": [-1, -1]}]
    assert meta["outputs"][0]["shape"] == [-1, -1, 64]
    assert http("GET", server.http_url + "/v2/models/tiny/ready")[0] == 200
    assert http("GET", server.http_url + "/v2/models/tiny/versions/1/ready")[0] == 200
    status, err = get_json(server.http_url + "/v2/models/nope")
    assert status == 404 and "nope" in err["error"]
    assert http("GET", server.http_url + "/v2/models/tiny/versions/7/ready")[0] == 404


def test_json_infer_equals_backplane_run(server, tmp_path):
    x = rng_input((1, 3, 32, 32), 1)
    want = reference_outputs(model("tiny_cnn.onnx"), {"input": x}, str(tmp_path))
    reply, got = decode(*infer_json(server, "tiny", {"input": x}, request_id="req-42"))
    assert reply["id"] == "req-42" and reply["model_name"] == "tiny"
    assert reply["model_version"] == "1"
    assert_bit_equal(got, want)


def test_binary_infer_equals_backplane_run(server, tmp_path):
    x = rng_input((1, 3, 224, 224), 2)
    want = reference_outputs(model("mobilenet_v2.onnx"), {"input": x}, str(tmp_path))
    status, headers, body = infer_binary(server, "mobilenet", {"input": x})
    assert headers.get("Content-Type", "").startswith("application/octet-stream")
    _, got = decode(status, headers, body)
    assert_bit_equal(got, want)
    # Binary in, JSON out: the same numbers.
    _, got = decode(*infer_binary(server, "mobilenet", {"input": x}, binary_out=False))
    assert_bit_equal(got, want)


def test_dynamic_shapes_and_requested_outputs(server, tmp_path):
    for seq in (3, 11, 5):
        ids = np.random.default_rng(seq).integers(0, 100, (2, seq)).astype(np.int64)
        want = reference_outputs(model("encoder_dyn.onnx"), {"input_ids": ids},
                                 str(tmp_path))
        _, got = decode(*infer_binary(server, "encoder", {"input_ids": ids}))
        assert_bit_equal(got, want)
    inputs = {"input_ids": np.array([[7, 3]], dtype=np.int64)}
    for kv in ("key_0", "value_0", "key_1", "value_1"):
        inputs["past_" + kv] = rng_input((1, 4, 5, 16), len(inputs))
    want = reference_outputs(model("decoder_kv.onnx"), inputs, str(tmp_path))
    reply, got = decode(*infer_json(server, "decoder", inputs,
                                    outputs=["present_value_1", "logits"]))
    assert [o["name"] for o in reply["outputs"]] == ["present_value_1", "logits"]
    assert_bit_equal(got, {k: want[k] for k in ("present_value_1", "logits")})


def test_curl_drives_it(server, tmp_path):
    x = rng_input((1, 3, 32, 32), 3)
    want = reference_outputs(model("tiny_cnn.onnx"), {"input": x}, str(tmp_path))
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"inputs": [{"name": "input", "datatype": "FP32",
                                               "shape": [1, 3, 32, 32],
                                               "data": x.flatten().tolist()}]}))
    done = subprocess.run(["curl", "-sS", "--fail-with-body", "-H",
                           "Content-Type: application/json", "--data-binary",
                           "@%s" % request, server.http_url + "/v2/models/tiny/infer"],
                          capture_output=True, check=True)
    reply = json.loads(done.stdout)
    got = np.array(reply["outputs"][0]["data"], dtype=np.float32).reshape(1, 10)
    assert got.tobytes() == want["output"].tobytes()
    done = subprocess.run(["curl", "-sS", server.http_url + "/v2/health/ready", "-o",
                           "/dev/null", "-w", "%{http_code}"], capture_output=True, check=True)
    assert done.stdout == b"200"


def good_request_works(server):
    x = rng_input((1, 3, 32, 32), 9)
    status, _, body = infer_binary(server, "tiny", {"input": x})
    assert status == 200, body


def expect_error(response, status, *words):
    got_status, _, body = response
    assert got_status == status, body
    message = json.loads(body)["error"]
    for w in words:
        assert w in message, message
    return message


def with_binary(size, data):
    """A body announcing one input of `size` binary bytes, followed by `data`."""
    header = json.dumps({"inputs": [{"name": "input", "datatype": "FP32",
                                     "shape": [1, 3, 32, 32],
                                     "parameters": {"binary_data_size": size}}]}).encode()
    return header + data, {"Inference-Header-Content-Length": str(len(header))}


def test_bad_requests_get_clear_errors_and_the_server_goes_on(server):
    url = server.http_url + "/v2/models/tiny/infer"
    post = lambda body, headers=None: http("POST", url, body, headers or {})
    x = rng_input((1, 3, 32, 32))
    cases = [
        (post(b"{not json"), 400, ["JSON"]),
        (post(b"[1, 2]"), 400, ["JSON object"]),
        (post(json.dumps({"inputs": 5}).encode()), 400, ["inputs"]),
        (infer_json(server, "nope", {"input": x}), 404, ["nope"]),
        (infer_json(server, "tiny", {"inptu": x}), 400, ["inptu", "input"]),
        (infer_json(server, "tiny", {"input": x.astype(np.float16)}), 400, ["FP16", "FP32"]),
        (infer_json(server, "tiny", {"input": x[:, :, :16]}), 400, ["input", "dim 2"]),
        (post(json.dumps({"inputs": []}).encode()), 400, ["'input' is missing"]),
        # Fewer values than the shape has, and values of the wrong kind.
        (post(json.dumps({"inputs": [{"name": "input", "datatype": "FP32",
                                      "shape": [1, 3, 32, 32], "data": [1.0, 2.0]}]}).encode()),
         400, ["input", "2 values"]),
        (post(json.dumps({"inputs": [{"name": "input", "datatype": "FP32",
                                      "shape": [1, 3, 32, 32], "data": ["a"] * 3072}]}).encode()),
         400, ["input", "FP32"]),
        # A shape of 10^12 elements: refused before anything is allocated.
        (post(json.dumps({"inputs": [{"name": "input", "datatype": "FP32",
                                      "shape": [1, 3, 1000000, 333334], "data": [1.0]}]})
              .encode()), 400, ["input"]),
        (http("POST", server.http_url + "/v2/models/encoder/infer",
              json.dumps({"inputs": [{"name": "input_ids", "datatype": "INT64",
                                      "shape": [1000000, 1000000], "data": [1]}]}).encode()),
         400, ["input_ids", "more elements"]),
        # Binary data whose size does not match its header or the shape.
        (post(json.dumps({"inputs": [{"name": "input", "datatype": "FP32",
                                      "shape": [1, 3, 32, 32],
                                      "parameters": {"binary_data_size": 12288}}]}).encode()
              + b"\0" * 100, {"Inference-Header-Content-Length": "x"}), 400,
         ["Inference-Header-Content-Length"]),
        (post(*with_binary(12288, b"\0" * 100)), 400, ["binary_data_size"]),
        (post(*with_binary(100, b"\0" * 100)), 400, ["100 bytes", "12288"]),
        (post(*with_binary(100, b"\0" * 101)), 400, ["101 bytes", "add up to 100"]),
        (post(json.dumps({"inputs": [{"name": "input", "datatype": "FP32",
                                      "shape": [1, 3, 32, 32], "data": x.flatten().tolist()}],
                          "outputs": [{"name": "logits"}]}).encode()), 400, ["logits"]),
    ]
    for response, status, words in cases:
        expect_error(response, status, *words)
        good_request_works(server)
    # Over the body limit (4 MiB here): 413, and the server goes on.
    big = rng_input((1, 3, 640, 640))
    status, _, _ = infer_binary(server, "mobilenet", {"input": big})
    assert status == 413
    good_request_works(server)


def raw_exchange(server, data, read=True):
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=60) as s:
        s.sendall(data)
        if not read:
            return b""
        chunks = []
        while True:
            try:
                c = s.recv(65536)
            except socket.timeout:
                break
            if not c:
                break
            chunks.append(c)
        return b"".join(chunks)


def test_lying_content_length_harms_no_one(server):
    body = b'{"inputs": []}'
    # Announces more than it sends, then goes away.
    raw_exchange(server, b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Length: 1000000\r\n\r\n" + body, read=False)
    good_request_works(server)
    # Announces less than it sends: the rest is read as a next request, which
    # is not HTTP, and is answered 400.
    reply = raw_exchange(server, b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\n"
                         b"Connection: close\r\nContent-Length: 5\r\n\r\n" + body)
    assert reply.startswith(b"HTTP/1.1 400"), reply[:200]
    good_request_works(server)
    # Announces more than the server takes at all.
    reply = raw_exchange(server, b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\n"
                         b"Connection: close\r\nContent-Length: 99999999999\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    good_request_works(server)


def test_odd_requests_harm_no_one(server):
    """Request lines and bodies no client of the protocol sends: each gets
    an error or a closed connection, never a crash, and the server goes on."""
    odd = [
        (b"OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", None),
        (b"GET http://elsewhere.example/v2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
         None),
        (b"CONNECT elsewhere:443 HTTP/1.1\r\nHost: elsewhere\r\n\r\n", b"HTTP/1.1 400"),
        (b"BREW /v2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", b"HTTP/1.1 400"),
        (b"GET /v2/nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
         b"HTTP/1.1 404"),
        # A chunked body that is not JSON, and chunks that are not chunks.
        (b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
         b"Connection: close\r\n\r\n5\r\n{\"inp\r\n0\r\n\r\n", b"HTTP/1.1 400"),
        (b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
         b"Connection: close\r\n\r\nzz\r\n", b"HTTP/1.1 400"),
        # TLS spoken to the plain port.
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\0" * 100, b"HTTP/1.0 400"),
    ]
    for request, reply_starts in odd:
        reply = raw_exchange(server, request)
        if reply_starts is not None:
            assert reply.startswith(reply_starts), (request[:40], reply[:200])
        good_request_works(server)


def metric(text, name, model_name):
    m = re.search(r'^%s\{[^}]*model="%s"[^}]*\} ([0-9.e+]+)$' % (name, model_name), text,
                  re.M)
    assert m, "no %s for %s in:\n%s" % (name, model_name, text)
    return float(m.group(1))


def test_metrics_count_requests_and_executions():
    with Server(["--model", "tiny=" + model("tiny_cnn.onnx")]) as s:
        x = rng_input((1, 3, 32, 32))
        for _ in range(3):
            decode(*infer_binary(s, "tiny", {"input": x}))
        for _ in range(2):
            assert infer_json(s, "tiny", {"input": x[:, :1]})[0] == 400
        status, headers, body = http("GET", s.http_url + "/metrics")
        assert status == 200 and headers["Content-Type"].startswith("text/plain")
        text = body.decode()
        assert metric(text, "nv_inference_request_success", "tiny") == 3
        assert metric(text, "nv_inference_request_failure", "tiny") == 2
        assert metric(text, "nv_inference_count", "tiny") == 3
        assert metric(text, "nv_inference_exec_count", "tiny") == 3
        assert metric(text, "nv_inference_pending_request_count", "tiny") == 0
        assert metric(text, "nv_inference_compute_infer_duration_us", "tiny") > 0
        assert metric(text, "nv_inference_request_duration_us", "tiny") >= \
            metric(text, "nv_inference_compute_infer_duration_us", "tiny")


def test_model_repository(tmp_path):
    repo = tmp_path / "repo"
    for version in ("1", "3", "12"):
        (repo / "tiny" / version).mkdir(parents=True)
    shutil.copy(model("tiny_cnn.onnx"), repo / "tiny" / "3" / "model.onnx")
    shutil.copy(model("tiny_cnn.onnx"), repo / "tiny" / "12" / "model.onnx")
    (repo / "tiny" / "config.json").write_text(json.dumps(
        {"backends": ["CpuRef"], "instances": 2, "max_queue_size": 8}))
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "1" / "model.onnx").write_bytes(b"not a model")
    (repo / "empty").mkdir()
    with Server(["--model-repository", str(repo)], require_ready=False) as s:
        # Not every model loaded: live, not ready; the loaded one serves.
        assert http("GET", s.http_url + "/v2/health/live")[0] == 200
        assert http("GET", s.http_url + "/v2/health/ready")[0] == 503
        status, meta = get_json(s.http_url + "/v2/models/tiny")
        assert status == 200 and meta["versions"] == ["12"]
        x = rng_input((1, 3, 32, 32), 5)
        np.save(tmp_path / "in_input.npy", x)
        _, got = decode(*infer_binary(s, "tiny", {"input": x}))
        # CpuRef, as config.json asks: equal to CpuRef's own run.
        done = subprocess.run([CLI, "run", model("tiny_cnn.onnx"), "--backends", "CpuRef",
                               "--input", "input=%s" % (tmp_path / "in_input.npy"),
                               "--output-dir", str(tmp_path / "ref")], capture_output=True)
        assert done.returncode == 0, done.stderr
        assert got["output"].tobytes() == np.load(tmp_path / "ref" / "output.npy").tobytes()
        status, err = get_json(s.http_url + "/v2/models/broken")
        assert status == 503 and "broken" in err["error"]
        status, _, body = http("POST", s.http_url + "/v2/repository/index", b"{}")
        index = {e["name"]: e for e in json.loads(body)}
        assert index["tiny"]["state"] == "READY" and index["tiny"]["version"] == "12"
        assert index["broken"]["state"] == "UNAVAILABLE" and index["broken"]["reason"]
        assert index["empty"]["state"] == "UNAVAILABLE"
        assert "model.onnx" in index["empty"]["reason"]


def test_bad_configuration_stops_the_server_with_the_reason(tmp_path):
    repo = tmp_path / "repo"
    (repo / "tiny" / "1").mkdir(parents=True)
    shutil.copy(model("tiny_cnn.onnx"), repo / "tiny" / "1" / "model.onnx")
    (repo / "tiny" / "config.json").write_text('{"instance": 2}')
    done = subprocess.run([SERVE, "--model-repository", str(repo), "--http-port", "0",
                           "--grpc-port", "0"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "config.json" in done.stderr and "instance" in done.stderr
    done = subprocess.run([SERVE, "--model", "tiny", "--http-port", "0", "--grpc-port", "0"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "NAME=PATH" in done.stderr
    done = subprocess.run([SERVE, "--http-port", "0"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1 and "nothing to serve" in done.stderr


def test_backplane_serve_runs_the_server():
    done = subprocess.run([CLI, "serve", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "--model-repository" in done.stdout


def test_timeout_parameter(server):
    x = rng_input((1, 3, 32, 32))

    def with_timeout(value):
        body = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 3, 32, 32],
                            "data": x.flatten().tolist()}], "parameters": {"timeout": value}}
        return http("POST", server.http_url + "/v2/models/tiny/infer", json.dumps(body).encode())

    expect_error(with_timeout(1), 504, "deadline")
    expect_error(with_timeout("soon"), 400, "timeout", "integer")
    expect_error(with_timeout(0), 400, "timeout")
    assert with_timeout(10 ** 18)[0] == 200  # a year or more: no deadline
    assert with_timeout(60 * 10 ** 6)[0] == 200


def test_a_port_in_use_stops_the_second_server(server):
    done = subprocess.run([SERVE, "--model", "tiny=" + model("tiny_cnn.onnx"), "--host",
                           "127.0.0.1", "--http-port", str(server.http_port), "--grpc-port", "0"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "cannot listen" in done.stderr, done.stderr
    good_request_works(server)


def test_chunked_body_over_a_small_limit_is_refused():
    with Server(["--model", "tiny=" + model("tiny_cnn.onnx"), "--max-request-bytes", "2000"]) as s:
        chunk = b"x" * 2500
        reply = raw_exchange(s, b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\n"
                             b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                             + b"%x\r\n" % len(chunk) + chunk + b"\r\n0\r\n\r\n")
        assert reply.startswith(b"HTTP/1.1 413"), reply[:200]


def slow_requests_for(seconds, one):
    """How many requests of `one` seconds each keep an instance busy for `seconds`."""
    return max(2, int(seconds / max(one, 1e-3)) + 1)


def wait_for_pending(s, name, n):
    """Until `n` requests of model `name` are waiting or running."""
    for _ in range(600):
        if metric(http("GET", s.http_url + "/metrics")[2].decode(),
                  "nv_inference_pending_request_count", name) >= n:
            return
        time.sleep(0.01)
    raise AssertionError(f"{n} requests of {name} never pending at once")


def test_a_request_whose_client_went_away_is_not_run():
    with Server(["--model", "enc=" + model("encoder_dyn.onnx")]) as s:
        rng = np.random.default_rng(0)
        slow = rng.integers(0, 100, (16, 512)).astype(np.int64)
        small = rng.integers(0, 100, (1, 7)).astype(np.int64)
        decode(*infer_binary(s, "enc", {"input_ids": small}))  # built, counted once
        # The one instance is kept busy for about a second, however fast the
        # machine, by as many slow requests as that takes; a last request
        # waits behind them and its client gives up and closes.
        decode(*infer_binary(s, "enc", {"input_ids": slow}))  # its shape built
        start = time.monotonic()
        decode(*infer_binary(s, "enc", {"input_ids": slow}))
        n = slow_requests_for(1.0, time.monotonic() - start)
        def run_slow():
            decode(*infer_binary(s, "enc", {"input_ids": slow}))
        busy = [threading.Thread(target=run_slow) for _ in range(n)]
        for t in busy:
            t.start()
        wait_for_pending(s, "enc", n)
        body, json_len = binary_request({"input_ids": small}, True)
        with socket.create_connection(("127.0.0.1", s.http_port), timeout=60) as c:
            c.sendall(b"POST /v2/models/enc/infer HTTP/1.1\r\nHost: x\r\n"
                      b"Inference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n"
                      % (json_len, len(body)) + body)
            time.sleep(0.1)
        for t in busy:
            t.join()
        text = ""
        for _ in range(100):  # the abandoned request's handler answers after the slow ones
            text = http("GET", s.http_url + "/metrics")[2].decode()
            if metric(text, "nv_inference_pending_request_count", "enc") == 0:
                break
            time.sleep(0.05)
        assert metric(text, "nv_inference_exec_count", "enc") == 3 + n, text
        assert metric(text, "nv_inference_request_failure", "enc") == 1, text
        decode(*infer_binary(s, "enc", {"input_ids": small}))
