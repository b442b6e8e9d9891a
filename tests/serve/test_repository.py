"""Repository control while serving (Triton's model repository extension over
REST): load, unload and reload, a new version swapped in while requests in
flight finish on the old one, and a failed reload that keeps the old one."""
import json
import shutil
import threading
import time

import numpy as np

from serve_harness import Server, model
from test_rest import decode, http, infer_binary, rng_input


def post(s, path):
    status, _, body = http("POST", s.http_url + path, b"")
    return status, (json.loads(body) if body else None)


def test_load_unload_and_reload_a_new_version(tmp_path):
    repo = tmp_path / "repo"
    (repo / "tiny" / "1").mkdir(parents=True)
    shutil.copy(model("tiny_cnn.onnx"), repo / "tiny" / "1" / "model.onnx")
    x = rng_input((1, 3, 32, 32), 1)
    with Server(["--model-repository", str(repo)]) as s:
        reply, first = decode(*infer_binary(s, "tiny", {"input": x}))
        assert reply["model_version"] == "1"

        assert post(s, "/v2/repository/models/tiny/unload")[0] == 200
        assert http("GET", s.http_url + "/v2/models/tiny/ready")[0] == 503
        status, _, body = infer_binary(s, "tiny", {"input": x})
        assert status == 503 and "unloaded" in json.loads(body)["error"]
        index = json.loads(http("POST", s.http_url + "/v2/repository/index", b"{}")[2])
        assert index == [{"name": "tiny", "state": "UNAVAILABLE", "reason": "unloaded"}]

        assert post(s, "/v2/repository/models/tiny/load")[0] == 200
        _, again = decode(*infer_binary(s, "tiny", {"input": x}))
        assert again["output"].tobytes() == first["output"].tobytes()

        # A new version appears: nothing changes until it is asked for.
        (repo / "tiny" / "2").mkdir()
        shutil.copy(model("tiny_cnn.onnx"), repo / "tiny" / "2" / "model.onnx")
        assert decode(*infer_binary(s, "tiny", {"input": x}))[0]["model_version"] == "1"
        assert post(s, "/v2/repository/models/tiny/load")[0] == 200
        status, meta = http("GET", s.http_url + "/v2/models/tiny")[0:3:2]
        assert json.loads(meta)["versions"] == ["2"]
        assert decode(*infer_binary(s, "tiny", {"input": x}))[0]["model_version"] == "2"

        # A broken version 3: the load fails saying why; version 2 serves on.
        (repo / "tiny" / "3").mkdir()
        (repo / "tiny" / "3" / "model.onnx").write_bytes(b"\x08\x07garbage")
        status, err = post(s, "/v2/repository/models/tiny/load")
        assert status == 503 and "version 2 is still served" in err["error"], err
        assert decode(*infer_binary(s, "tiny", {"input": x}))[0]["model_version"] == "2"

        status, err = post(s, "/v2/repository/models/nope/load")
        assert status == 404 and "nope" in err["error"]
        assert post(s, "/v2/repository/models/nope/unload")[0] == 404


def test_requests_in_flight_finish_on_the_version_they_started_on(tmp_path):
    repo = tmp_path / "repo"
    (repo / "enc" / "1").mkdir(parents=True)
    shutil.copy(model("encoder_dyn.onnx"), repo / "enc" / "1" / "model.onnx")
    # A request waits 3 s for a batch to fill: long enough to reload under it.
    (repo / "enc" / "config.json").write_text(json.dumps(
        {"dynamic_batching": {"max_batch_size": 64, "max_queue_delay_us": 3000000}}))
    ids = np.arange(10, dtype=np.int64).reshape(1, 10)
    with Server(["--model-repository", str(repo)]) as s:
        replies = []
        waiting = threading.Thread(
            target=lambda: replies.append(infer_binary(s, "enc", {"input_ids": ids})))
        waiting.start()
        time.sleep(0.3)
        (repo / "enc" / "2").mkdir()
        shutil.copy(model("encoder_dyn.onnx"), repo / "enc" / "2" / "model.onnx")
        assert post(s, "/v2/repository/models/enc/load")[0] == 200
        assert not replies, "the load waited for the request in flight"
        waiting.join(60)
        reply, out = decode(*replies[0])
        assert reply["model_version"] == "1"
        assert out["last_hidden_state"].shape == (1, 10, 64)
        assert decode(*infer_binary(s, "enc", {"input_ids": ids}))[0]["model_version"] == "2"

        replies.clear()
        waiting = threading.Thread(
            target=lambda: replies.append(infer_binary(s, "enc", {"input_ids": ids})))
        waiting.start()
        time.sleep(0.3)
        assert post(s, "/v2/repository/models/enc/unload")[0] == 200
        assert not replies, "the unload waited for the request in flight"
        waiting.join(60)
        reply, _ = decode(*replies[0])
        assert reply["model_version"] == "2"


def test_repository_control_over_grpc(tmp_path):
    import grpc
    from serve_harness import grpc_modules
    pb, rpc = grpc_modules(str(tmp_path))
    repo = tmp_path / "repo"
    (repo / "tiny" / "1").mkdir(parents=True)
    shutil.copy(model("tiny_cnn.onnx"), repo / "tiny" / "1" / "model.onnx")
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "1" / "model.onnx").write_bytes(b"not a model")
    with Server(["--model-repository", str(repo)], require_ready=False) as s:
        stub = rpc.GRPCInferenceServiceStub(grpc.insecure_channel(s.grpc_target))
        index = stub.RepositoryIndex(pb.RepositoryIndexRequest(), timeout=30)
        states = {m.name: (m.version, m.state, bool(m.reason)) for m in index.models}
        assert states == {"tiny": ("1", "READY", False), "broken": ("1", "UNAVAILABLE", True)}
        ready = stub.RepositoryIndex(pb.RepositoryIndexRequest(ready=True), timeout=30)
        assert [m.name for m in ready.models] == ["tiny"]

        stub.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name="tiny"), timeout=30)
        assert not stub.ModelReady(pb.ModelReadyRequest(name="tiny"), timeout=30).ready
        (repo / "tiny" / "2").mkdir()
        shutil.copy(model("tiny_cnn.onnx"), repo / "tiny" / "2" / "model.onnx")
        stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="tiny"), timeout=60)
        meta = stub.ModelMetadata(pb.ModelMetadataRequest(name="tiny"), timeout=30)
        assert list(meta.versions) == ["2"]

        for call, request, code in (
                (stub.RepositoryModelLoad, pb.RepositoryModelLoadRequest(model_name="nope"),
                 grpc.StatusCode.NOT_FOUND),
                (stub.RepositoryModelLoad, pb.RepositoryModelLoadRequest(model_name="broken"),
                 grpc.StatusCode.UNAVAILABLE),
                (stub.RepositoryModelUnload, pb.RepositoryModelUnloadRequest(model_name="nope"),
                 grpc.StatusCode.NOT_FOUND)):
            try:
                call(request, timeout=60)
                raise AssertionError("%s succeeded" % request)
            except grpc.RpcError as e:
                assert e.code() == code, (request, e.code(), e.details())
                assert request.model_name in e.details()
