"""backplane serve driven over gRPC by Node's @grpc/grpc-js, with the service
loaded at run time from serve/proto/grpc_predict_v2.proto by
@grpc/proto-loader (grpc_node_client.js): health, metadata, an inference
with raw contents compared bit for bit with `backplane run`, and a refused
request. scripts/fetch-grpc-node.sh installs the packages (the ctest fixture
serve_grpc_node); without node or them the test fails, it never skips.
"""
import json
import os
import shutil
import subprocess

import grpc
import numpy as np
import pytest

from serve_harness import Server, model, reference_outputs

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join(HERE, "..", "..", "serve", "proto", "grpc_predict_v2.proto")
CLIENT = os.path.join(HERE, "grpc_node_client.js")
MODULES = os.environ.get("BACKPLANE_GRPC_NODE_MODULES", "")


@pytest.fixture(scope="module")
def node():
    exe = shutil.which("node")
    assert exe, "node is not on PATH (scripts/install-deps.sh installs it)"
    for package in ("@grpc/grpc-js", "@grpc/proto-loader"):
        assert os.path.isfile(os.path.join(MODULES, package, "package.json")), (
            "%s is not installed in BACKPLANE_GRPC_NODE_MODULES=%r "
            "(scripts/fetch-grpc-node.sh BUILD_DIR installs it)" % (package, MODULES))
    return exe


@pytest.fixture(scope="module")
def server():
    with Server(["--model", "tiny=" + model("tiny_cnn.onnx"),
                 "--model", "encoder=" + model("encoder_dyn.onnx")]) as s:
        yield s


def run_client(node, target, spec, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    inputs = []
    for i, (name, datatype, value) in enumerate(spec["inputs"]):
        file = tmp_path / ("input_%d.bin" % i)
        file.write_bytes(value.tobytes())
        inputs.append({"name": name, "datatype": datatype, "shape": list(value.shape),
                       "file": str(file)})
    request = dict(spec, inputs=inputs)
    (tmp_path / "request.json").write_text(json.dumps(request))
    env = dict(os.environ, NODE_PATH=MODULES)
    done = subprocess.run([node, CLIENT, target, PROTO, str(tmp_path / "request.json"), str(out)],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((out / "result.json").read_text())


CASES = {
    "tiny": ("tiny_cnn.onnx", "input", "FP32", np.float32, (1, 3, 32, 32), "FP32", [1, 3, 32, 32],
             "output", [1, 10]),
    "encoder": ("encoder_dyn.onnx", "input_ids", "INT64", np.int64, (2, 7), "INT64", [-1, -1],
                "last_hidden_state", [-1, -1, 64]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_node_client(node, server, name, tmp_path):
    (file, input_name, datatype, dtype, shape, meta_type, meta_shape, output_name,
     output_meta_shape) = CASES[name]
    rng = np.random.default_rng(7)
    if dtype == np.int64:
        value = rng.integers(0, 100, size=shape, dtype=np.int64)
    else:
        value = rng.standard_normal(shape).astype(dtype)
    result = run_client(node, server.grpc_target, {
        "model": name, "id": "node-" + name, "outputs": [output_name],
        "inputs": [(input_name, datatype, value)]}, tmp_path)

    ok = grpc.StatusCode.OK.value[0]
    assert result["live"] == {"code": ok, "response": {"live": True}}
    assert result["ready"] == {"code": ok, "response": {"ready": True}}
    assert result["model_ready"] == {"code": ok, "response": {"ready": True}}
    assert result["server_metadata"]["code"] == ok
    assert result["server_metadata"]["response"]["name"] == "backplane"
    meta = result["model_metadata"]
    assert meta["code"] == ok, meta
    assert meta["response"]["name"] == name
    assert meta["response"]["versions"] == ["1"]
    assert meta["response"]["platform"] == "onnx"
    assert meta["response"]["inputs"] == [
        {"name": input_name, "datatype": meta_type, "shape": meta_shape}]
    assert meta["response"]["outputs"] == [
        {"name": output_name, "datatype": "FP32", "shape": output_meta_shape}]
    assert result["unknown_model"]["code"] == grpc.StatusCode.NOT_FOUND.value[0]
    assert "no_such_model" in result["unknown_model"]["details"]

    infer = result["infer"]
    assert infer["code"] == ok, infer
    response = infer["response"]
    assert response["model_name"] == name
    assert response["model_version"] == "1"
    assert response["id"] == "node-" + name
    want = reference_outputs(model(file), {input_name: value}, str(tmp_path))[output_name]
    assert [o["name"] for o in response["outputs"]] == [output_name]
    assert response["outputs"][0]["datatype"] == "FP32"
    assert response["outputs"][0]["shape"] == list(want.shape)
    with open(response["raw_output_contents"][0], "rb") as f:
        got = f.read()
    assert got == want.astype("<f4").tobytes()

    short = result["short_input"]
    assert short["code"] == grpc.StatusCode.INVALID_ARGUMENT.value[0], short
    assert "input '%s'" % input_name in short["details"]
    assert result["after_error"] == {"code": ok, "response": {"ready": True}}
