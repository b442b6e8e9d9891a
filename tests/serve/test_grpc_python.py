"""backplane serve over gRPC, driven by Debian's python3-grpcio with stubs
generated at test time from serve/proto/grpc_predict_v2.proto: health and
metadata (agreeing with REST), inference with raw and with typed contents
compared bit for bit with `backplane run`, requested outputs, deadlines, and
the errors wrong requests get, each followed by a request that succeeds.
"""
import json
import re
import time
import urllib.request

import grpc
import numpy as np
import pytest

from serve_harness import Server, grpc_modules, model, reference_outputs


MODELS = {
    "tiny": "tiny_cnn.onnx",
    "mobilenet": "mobilenet_v2.onnx",
    "transformer": "transformer.onnx",
    "encoder": "encoder_dyn.onnx",
    "decoder": "decoder_kv.onnx",
}


@pytest.fixture(scope="module")
def pb(tmp_path_factory):
    """The generated modules (messages, service stub)."""
    return grpc_modules(str(tmp_path_factory.mktemp("stubs")))


# Every datatype the protocol and Backplane share, passed through Identity:
# what comes back is what was sent. FP16 and BF16 have no typed field, so
# they are a model of their own, sent raw.
TYPED = {
    "BOOL": (np.bool_, "bool_contents", [True, False, True, True, False, False]),
    "INT8": (np.int8, "int_contents", [-128, 127, 0, -1, 5, 6]),
    "INT16": (np.int16, "int_contents", [-32768, 32767, 0, -1, 5, 6]),
    "INT32": (np.int32, "int_contents", [-2**31, 2**31 - 1, 0, -1, 5, 6]),
    "INT64": (np.int64, "int64_contents", [-2**63, 2**63 - 1, 0, -1, 5, 6]),
    "UINT8": (np.uint8, "uint_contents", [0, 255, 1, 2, 3, 4]),
    "UINT16": (np.uint16, "uint_contents", [0, 65535, 1, 2, 3, 4]),
    "UINT32": (np.uint32, "uint_contents", [0, 2**32 - 1, 1, 2, 3, 4]),
    "UINT64": (np.uint64, "uint64_contents", [0, 2**64 - 1, 1, 2, 3, 4]),
    "FP32": (np.float32, "fp32_contents", [1.5, -0.0, float("inf"), 3.4e38, 1e-45, -7.25]),
    "FP64": (np.float64, "fp64_contents", [np.pi, -0.0, float("-inf"), 1e300, 5e-324, 2.5]),
}
# BF16 as its bits: numpy has no bfloat16.
NUMPY = dict({k: v[0] for k, v in TYPED.items()}, FP16=np.float16, BF16=np.uint16)


def identity_model(path, datatypes):
    import onnx
    from onnx import TensorProto, helper
    onnx_type = {"BOOL": TensorProto.BOOL, "INT8": TensorProto.INT8,
                 "INT16": TensorProto.INT16, "INT32": TensorProto.INT32,
                 "INT64": TensorProto.INT64, "UINT8": TensorProto.UINT8,
                 "UINT16": TensorProto.UINT16, "UINT32": TensorProto.UINT32,
                 "UINT64": TensorProto.UINT64, "FP32": TensorProto.FLOAT,
                 "FP64": TensorProto.DOUBLE, "FP16": TensorProto.FLOAT16,
                 "BF16": TensorProto.BFLOAT16}
    graph = helper.make_graph(
        [helper.make_node("Identity", ["in_" + d], ["out_" + d]) for d in datatypes], "identity",
        [helper.make_tensor_value_info("in_" + d, onnx_type[d], [2, 3]) for d in datatypes],
        [helper.make_tensor_value_info("out_" + d, onnx_type[d], [2, 3]) for d in datatypes])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("models")
    args = []
    for name, file in MODELS.items():
        args += ["--model", "%s=%s" % (name, model(file))]
    args += ["--model", "typed=" + identity_model(str(tmp / "typed.onnx"), list(TYPED)),
             "--model", "half=" + identity_model(str(tmp / "half.onnx"), ["FP16", "BF16"])]
    with Server(args) as s:
        yield s


@pytest.fixture(scope="module")
def stub(pb, server):
    channel = grpc.insecure_channel(server.grpc_target)
    yield pb[1].GRPCInferenceServiceStub(channel)
    channel.close()


def rest(server, path):
    with urllib.request.urlopen(server.http_url + path, timeout=30) as r:
        return json.loads(r.read())


def error_of(call, request):
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=60)
    return info.value.code(), info.value.details()


# ---------------------------------------------------------------- health ---

def test_live_and_ready(pb, stub):
    m = pb[0]
    assert stub.ServerLive(m.ServerLiveRequest()).live
    assert stub.ServerReady(m.ServerReadyRequest()).ready
    assert stub.ModelReady(m.ModelReadyRequest(name="tiny")).ready
    assert stub.ModelReady(m.ModelReadyRequest(name="tiny", version="1")).ready
    assert not stub.ModelReady(m.ModelReadyRequest(name="tiny", version="2")).ready
    assert not stub.ModelReady(m.ModelReadyRequest(name="no_such_model")).ready


# -------------------------------------------------------------- metadata ---

def test_server_metadata_agrees_with_rest(pb, stub, server):
    got = stub.ServerMetadata(pb[0].ServerMetadataRequest())
    assert got.name == "backplane"
    assert got.version
    want = rest(server, "/v2")
    assert (got.name, got.version, list(got.extensions)) == (
        want["name"], want["version"], want.get("extensions", []))


def tensors(meta):
    return [(t.name, t.datatype, list(t.shape)) for t in meta]


@pytest.mark.parametrize("name,inputs,outputs", [
    ("tiny", [("input", "FP32", [1, 3, 32, 32])], [("output", "FP32", [1, 10])]),
    ("transformer", [("input_ids", "INT64", [1, 32])],
     [("last_hidden_state", "FP32", [1, 32, 128])]),
    ("encoder", [("input_ids", "INT64", [-1, -1])],
     [("last_hidden_state", "FP32", [-1, -1, 64])]),
])
def test_model_metadata(pb, stub, server, name, inputs, outputs):
    got = stub.ModelMetadata(pb[0].ModelMetadataRequest(name=name))
    assert got.name == name
    assert list(got.versions) == ["1"]
    assert got.platform == "onnx"
    assert tensors(got.inputs) == [tuple(t) for t in inputs]
    assert tensors(got.outputs) == [tuple(t) for t in outputs]
    # The same answer as GET /v2/models/NAME.
    want = rest(server, "/v2/models/" + name)
    assert got.platform == want["platform"]
    assert list(got.versions) == want["versions"]
    for have, json_side in ((got.inputs, want["inputs"]), (got.outputs, want["outputs"])):
        assert tensors(have) == [(t["name"], t["datatype"], t["shape"]) for t in json_side]
    same = stub.ModelMetadata(pb[0].ModelMetadataRequest(name=name, version="1"))
    assert same == got


def test_model_metadata_unknown(pb, stub):
    code, details = error_of(stub.ModelMetadata, pb[0].ModelMetadataRequest(name="no_such_model"))
    assert code == grpc.StatusCode.NOT_FOUND
    assert "no_such_model" in details
    code, _ = error_of(stub.ModelMetadata, pb[0].ModelMetadataRequest(name="tiny", version="9"))
    assert code == grpc.StatusCode.NOT_FOUND


# ------------------------------------------------------------- inference ---

def image(shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def tokens(shape, seed=2):
    return np.random.default_rng(seed).integers(0, 100, size=shape, dtype=np.int64)


DATATYPE = {np.dtype(np.float32): "FP32", np.dtype(np.int64): "INT64"}


def infer_request(pb, name, inputs, raw=True, outputs=(), **fields):
    """A ModelInferRequest for {input name: array}, the data raw or typed."""
    m = pb[0]
    request = m.ModelInferRequest(model_name=name, **fields)
    for input_name, value in inputs.items():
        tensor = request.inputs.add(name=input_name, datatype=DATATYPE[value.dtype],
                                    shape=list(value.shape))
        if raw:
            request.raw_input_contents.append(value.astype(value.dtype.newbyteorder("<"))
                                              .tobytes())
        elif value.dtype == np.float32:
            tensor.contents.fp32_contents.extend(value.ravel().tolist())
        else:
            tensor.contents.int64_contents.extend(value.ravel().tolist())
    for output in outputs:
        request.outputs.add(name=output)
    return request


def outputs_of(response):
    """{name: array} from a response's raw_output_contents."""
    assert len(response.raw_output_contents) == len(response.outputs)
    got = {}
    for tensor, raw in zip(response.outputs, response.raw_output_contents):
        assert tensor.datatype == "FP32"
        value = np.frombuffer(raw, dtype="<f4")
        assert value.size == int(np.prod(tensor.shape))
        got[tensor.name] = value.reshape(list(tensor.shape))
    return got


def assert_bit_equal(got, want):
    assert list(got) == list(want)
    for name in want:
        assert got[name].shape == want[name].shape, name
        assert np.array_equal(got[name].view(np.uint32),
                              want[name].astype("<f4").view(np.uint32)), name


INFER_CASES = [
    ("tiny", {"input": image((1, 3, 32, 32))}),
    ("mobilenet", {"input": image((1, 3, 224, 224))}),
    ("transformer", {"input_ids": tokens((1, 32))}),
    ("encoder", {"input_ids": tokens((2, 9))}),
]


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """`backplane run`'s outputs for each of INFER_CASES, computed once."""
    out = {}
    for name, inputs in INFER_CASES:
        tmp = str(tmp_path_factory.mktemp("ref_" + name))
        out[name] = reference_outputs(model(MODELS[name]), inputs, tmp)
    return out


@pytest.mark.parametrize("raw", [True, False], ids=["raw", "typed"])
@pytest.mark.parametrize("name,inputs", INFER_CASES, ids=[c[0] for c in INFER_CASES])
def test_infer_bit_equal_to_backplane_run(pb, stub, references, name, inputs, raw):
    response = stub.ModelInfer(infer_request(pb, name, inputs, raw=raw), timeout=120)
    assert response.model_name == name
    assert response.model_version == "1"
    assert_bit_equal(outputs_of(response), references[name])


def test_id_echoed(pb, stub):
    request = infer_request(pb, "tiny", {"input": image((1, 3, 32, 32))},
                            id="request-42", model_version="1")
    response = stub.ModelInfer(request, timeout=60)
    assert (response.id, response.model_name, response.model_version) == (
        "request-42", "tiny", "1")


def test_requested_outputs(pb, stub, tmp_path):
    inputs = {"input_ids": tokens((1, 3))}
    for i in range(2):
        for kind in ("key", "value"):
            inputs["past_%s_%d" % (kind, i)] = image((1, 4, 2, 16), seed=10 + i)
    want = reference_outputs(model(MODELS["decoder"]), inputs, str(tmp_path))
    assert len(want) == 5
    wanted = ["present_value_1", "logits"]
    response = stub.ModelInfer(infer_request(pb, "decoder", inputs, outputs=wanted), timeout=60)
    # Only those asked for, in the order asked.
    assert_bit_equal(outputs_of(response), {name: want[name] for name in wanted})
    response = stub.ModelInfer(infer_request(pb, "decoder", inputs, raw=False), timeout=60)
    assert_bit_equal(outputs_of(response), want)


def raw_outputs(response):
    """{name: array} for outputs of any datatype."""
    assert len(response.raw_output_contents) == len(response.outputs)
    got = {}
    for tensor, raw in zip(response.outputs, response.raw_output_contents):
        dtype = np.dtype(NUMPY[tensor.datatype]).newbyteorder("<")
        got[tensor.name] = np.frombuffer(raw, dtype=dtype).reshape(list(tensor.shape))
    return got


def typed_request(pb, values):
    request = pb[0].ModelInferRequest(model_name="typed")
    for datatype, (_, field, _) in TYPED.items():
        tensor = request.inputs.add(name="in_" + datatype, datatype=datatype, shape=[2, 3])
        getattr(tensor.contents, field).extend(values[datatype])
    return request


def test_every_datatype_typed_and_raw(pb, stub):
    want = {d: np.array(v, dtype=t).reshape(2, 3) for d, (t, _, v) in TYPED.items()}
    typed = stub.ModelInfer(typed_request(pb, {d: v for d, (_, _, v) in TYPED.items()}),
                            timeout=60)
    raw = pb[0].ModelInferRequest(model_name="typed")
    for datatype, value in want.items():
        raw.inputs.add(name="in_" + datatype, datatype=datatype, shape=[2, 3])
        raw.raw_input_contents.append(value.astype(value.dtype.newbyteorder("<")).tobytes())
    raw = stub.ModelInfer(raw, timeout=60)
    for response in (typed, raw):
        got = raw_outputs(response)
        assert sorted(got) == sorted("out_" + d for d in TYPED)
        for datatype, value in want.items():
            out = got["out_" + datatype]
            assert out.dtype == value.dtype and out.tobytes() == value.tobytes(), datatype


def test_half_datatypes_raw_only(pb, stub):
    values = {"FP16": np.array([1.5, -0.0, np.inf, 65504, 6e-8, -2], np.float16).reshape(2, 3),
              "BF16": np.array([0x3fc0, 0x8000, 0x7f80, 0x7f7f, 1, 0xc000],
                               np.uint16).reshape(2, 3)}
    request = pb[0].ModelInferRequest(model_name="half")
    for datatype, value in values.items():
        request.inputs.add(name="in_" + datatype, datatype=datatype, shape=[2, 3])
        request.raw_input_contents.append(value.astype(value.dtype.newbyteorder("<")).tobytes())
    response = stub.ModelInfer(request, timeout=60)
    assert [(t.name, t.datatype) for t in response.outputs] == [
        ("out_FP16", "FP16"), ("out_BF16", "BF16")]
    got = raw_outputs(response)
    for datatype, value in values.items():
        assert got["out_" + datatype].tobytes() == value.tobytes(), datatype
    request = pb[0].ModelInferRequest(model_name="half")
    for datatype in values:
        tensor = request.inputs.add(name="in_" + datatype, datatype=datatype, shape=[2, 3])
        tensor.contents.fp32_contents.extend([1.0] * 6)
    code, details = error_of(stub.ModelInfer, request)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "input 'in_FP16'" in details and "raw_input_contents" in details


@pytest.mark.parametrize("datatype,value", [
    ("INT8", 128), ("INT8", -129), ("INT16", 40000), ("UINT8", 256), ("UINT16", 65536)])
def test_typed_value_out_of_range(pb, stub, datatype, value):
    values = {d: v for d, (_, _, v) in TYPED.items()}
    values[datatype] = [value] + values[datatype][1:]
    code, details = error_of(stub.ModelInfer, typed_request(pb, values))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "input 'in_%s'" % datatype in details and str(value) in details
    assert stub.ModelInfer(good_tiny(pb), timeout=60).outputs


def test_concurrent_calls(pb, stub, tmp_path):
    from concurrent.futures import ThreadPoolExecutor
    images = [image((1, 3, 32, 32), seed=100 + i) for i in range(4)]
    want = [reference_outputs(model(MODELS["tiny"]), {"input": x}, str(tmp_path))
            for x in images]

    def one(i):
        request = infer_request(pb, "tiny", {"input": images[i % 4]}, id=str(i))
        return stub.ModelInfer(request, timeout=60)

    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(one, range(24)))
    for i, response in enumerate(responses):
        assert response.id == str(i)
        assert_bit_equal(outputs_of(response), want[i % 4])


def test_message_over_the_limit(pb):
    with Server(["--model", "tiny=" + model(MODELS["tiny"]),
                 "--max-request-bytes", "65536"]) as s:
        with grpc.insecure_channel(s.grpc_target) as channel:
            stub = pb[1].GRPCInferenceServiceStub(channel)
            big = infer_request(pb, "tiny", {"input": image((1, 3, 32, 32))})
            big.id = "x" * 70000
            code, _ = error_of(stub.ModelInfer, big)
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert stub.ModelInfer(good_tiny(pb), timeout=60).outputs


def test_timeout_parameter(pb, stub):
    inputs = {"input": image((1, 3, 32, 32))}
    request = infer_request(pb, "tiny", inputs)
    request.parameters["timeout"].int64_param = 60 * 1000 * 1000
    assert stub.ModelInfer(request, timeout=60).outputs
    # A microsecond is over before the request reaches a session.
    request.parameters["timeout"].int64_param = 1
    code, _ = error_of(stub.ModelInfer, request)
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED
    # Refused as REST refuses them.
    request.parameters["timeout"].int64_param = 0
    code, details = error_of(stub.ModelInfer, request)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "timeout" in details
    request.parameters["timeout"].string_param = "soon"
    code, details = error_of(stub.ModelInfer, request)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "timeout" in details
    del request.parameters["timeout"]
    assert stub.ModelInfer(request, timeout=60).outputs


# ---------------------------------------------------------------- errors ---

def good_tiny(pb, raw=True):
    return infer_request(pb, "tiny", {"input": image((1, 3, 32, 32))}, raw=raw)


def wrong_model(pb):
    r = good_tiny(pb)
    r.model_name = "no_such_model"
    return r


def wrong_version(pb):
    r = good_tiny(pb)
    r.model_version = "7"
    return r


def wrong_datatype(pb):
    r = infer_request(pb, "tiny", {"input": image((1, 3, 32, 32))})
    r.inputs[0].datatype = "FP64"
    r.raw_input_contents[0] = r.raw_input_contents[0] * 2
    return r


def wrong_shape(pb):
    return infer_request(pb, "tiny", {"input": image((1, 3, 32, 31))})


def wrong_rank(pb):
    return infer_request(pb, "tiny", {"input": image((3, 32, 32))})


def wrong_name(pb):
    r = good_tiny(pb)
    r.inputs[0].name = "pixels"
    return r


def short_bytes(pb):
    r = good_tiny(pb)
    r.raw_input_contents[0] = r.raw_input_contents[0][:-4]
    return r


def long_bytes(pb):
    r = good_tiny(pb)
    r.raw_input_contents[0] = r.raw_input_contents[0] + b"\0"
    return r


def short_typed(pb):
    r = good_tiny(pb, raw=False)
    del r.inputs[0].contents.fp32_contents[-1]
    return r


def typed_in_wrong_field(pb):
    r = good_tiny(pb, raw=False)
    r.inputs[0].contents.int_contents.extend([1] * len(r.inputs[0].contents.fp32_contents))
    r.inputs[0].contents.ClearField("fp32_contents")
    return r


def raw_and_typed(pb):
    r = good_tiny(pb)
    r.inputs[0].contents.fp32_contents.extend([0.0] * (3 * 32 * 32))
    return r


def raw_count(pb):
    r = good_tiny(pb)
    r.raw_input_contents.append(b"\0" * 4)
    return r


def missing_input(pb):
    return pb[0].ModelInferRequest(model_name="tiny")


def no_data(pb):
    r = good_tiny(pb, raw=False)
    r.inputs[0].ClearField("contents")
    return r


def unknown_output(pb):
    r = good_tiny(pb)
    r.outputs.add(name="logits")
    return r


def fp16_typed(pb):
    r = good_tiny(pb, raw=False)
    r.inputs[0].datatype = "FP16"
    return r


ERRORS = [
    (wrong_model, grpc.StatusCode.NOT_FOUND, "no_such_model"),
    (wrong_version, grpc.StatusCode.NOT_FOUND, "'7'"),
    (wrong_datatype, grpc.StatusCode.INVALID_ARGUMENT, "input 'input'"),
    (wrong_shape, grpc.StatusCode.INVALID_ARGUMENT, "input 'input'"),
    (wrong_rank, grpc.StatusCode.INVALID_ARGUMENT, "input 'input'"),
    (wrong_name, grpc.StatusCode.INVALID_ARGUMENT, "'pixels'"),
    (short_bytes, grpc.StatusCode.INVALID_ARGUMENT, "input 'input'"),
    (long_bytes, grpc.StatusCode.INVALID_ARGUMENT, "input 'input'"),
    (short_typed, grpc.StatusCode.INVALID_ARGUMENT, "input 'input'"),
    (typed_in_wrong_field, grpc.StatusCode.INVALID_ARGUMENT, "input 'input'"),
    (raw_and_typed, grpc.StatusCode.INVALID_ARGUMENT, "input 'input'"),
    (raw_count, grpc.StatusCode.INVALID_ARGUMENT, "raw_input_contents"),
    (missing_input, grpc.StatusCode.INVALID_ARGUMENT, "input 'input'"),
    (no_data, grpc.StatusCode.INVALID_ARGUMENT, "input 'input'"),
    (unknown_output, grpc.StatusCode.INVALID_ARGUMENT, "'logits'"),
    (fp16_typed, grpc.StatusCode.INVALID_ARGUMENT, "input 'input'"),
]


@pytest.mark.parametrize("make,code,names", ERRORS, ids=[e[0].__name__ for e in ERRORS])
def test_error_then_good_request(pb, stub, make, code, names):
    got_code, details = error_of(stub.ModelInfer, make(pb))
    assert got_code == code, details
    assert names in details
    response = stub.ModelInfer(good_tiny(pb), timeout=60)
    assert [o.name for o in response.outputs] == ["output"]


def test_a_cancelled_call_is_not_run(pb):
    def exec_count(s, name):
        with urllib.request.urlopen(s.http_url + "/metrics", timeout=30) as r:
            text = r.read().decode()
        m = re.search(r'^nv_inference_exec_count\{[^}]*model="%s"[^}]*\} ([0-9.e+]+)$' % name,
                      text, re.M)
        assert m, text
        return float(m.group(1))

    def pending(s, name):
        with urllib.request.urlopen(s.http_url + "/metrics", timeout=30) as r:
            text = r.read().decode()
        m = re.search(r'^nv_inference_pending_request_count\{[^}]*model="%s"[^}]*\} ([0-9.e+]+)$'
                      % name, text, re.M)
        assert m, text
        return float(m.group(1))

    with Server(["--model", "enc=" + model("encoder_dyn.onnx")]) as s:
        channel = grpc.insecure_channel(s.grpc_target)
        stub = pb[1].GRPCInferenceServiceStub(channel)
        rng = np.random.default_rng(0)
        slow = infer_request(pb, "enc", {"input_ids": rng.integers(0, 100, (16, 512))})
        small = infer_request(pb, "enc", {"input_ids": rng.integers(0, 100, (1, 7))})
        stub.ModelInfer(small, timeout=60)
        # The one instance is kept busy for about a second, however fast the
        # machine, by as many slow calls as that takes; a last call waits
        # behind them and is cancelled by its client.
        stub.ModelInfer(slow, timeout=60)  # its shape built
        start = time.monotonic()
        stub.ModelInfer(slow, timeout=60)
        n = max(2, int(1.0 / max(time.monotonic() - start, 1e-3)) + 1)
        busy = [stub.ModelInfer.future(slow, timeout=60) for _ in range(n)]
        for _ in range(600):
            if pending(s, "enc") >= n:
                break
            time.sleep(0.01)
        waiting = stub.ModelInfer.future(small, timeout=60)
        time.sleep(0.1)
        assert waiting.cancel()
        assert all(b.result().outputs for b in busy)
        assert stub.ModelInfer(small, timeout=60).outputs
        # The first, the two timing the slow shape, the slow ones and the last.
        assert exec_count(s, "enc") == 4 + n
        channel.close()
