"""Starts `backplane-serve` for a test and stops it after.

    with Server(["--model", "tiny=/path/tiny_cnn.onnx"]) as s:
        s.http_url      # "http://127.0.0.1:PORT"
        s.grpc_target   # "127.0.0.1:PORT"

The server is asked for port 0 (any free port) on both transports and says on
its standard output which ports it took; the harness reads those lines, waits
for GET /v2/health/ready, and on leaving stops the server with SIGTERM,
failing the test if it does not exit cleanly within 20 s.

Environment (set by tests/serve/CMakeLists.txt): BACKPLANE_SERVE (the
binary), BACKPLANE_CLI (`backplane`, for reference outputs),
BACKPLANE_TEST_MODELS (the e2e models directory).
"""
import os
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

PROTO_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "serve",
                         "proto")
SERVE = os.environ.get("BACKPLANE_SERVE", "backplane-serve")
CLI = os.environ.get("BACKPLANE_CLI", "backplane")
MODELS = os.environ.get("BACKPLANE_TEST_MODELS", "")


def model(name):
    """Path of one of the e2e fixture's generated models."""
    return os.path.join(MODELS, name)


class Server:
    def __init__(self, args, threads=1, ready_timeout=120, check_exit=True,
                 require_ready=True):
        self.require_ready = require_ready
        self.args = list(args)
        self.threads = threads
        self.ready_timeout = ready_timeout
        self.check_exit = check_exit
        self.proc = None
        self.http_port = None
        self.grpc_port = None
        self.lines = []
        self._reader = None

    @property
    def http_url(self):
        return "http://127.0.0.1:%d" % self.http_port

    @property
    def grpc_target(self):
        return "127.0.0.1:%d" % self.grpc_port

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def output(self):
        return "\n".join(self.lines)

    def __enter__(self):
        cmd = [SERVE, "--http-port", "0", "--grpc-port", "0", "--host", "127.0.0.1",
               "--threads", str(self.threads)] + self.args
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                m = re.search(r"HTTP on [0-9.]+:(\d+)", line)
                if m:
                    self.http_port = int(m.group(1))
                m = re.search(r"gRPC on [0-9.]+:(\d+)", line)
                if m:
                    self.grpc_port = int(m.group(1))
            if self.proc.poll() is not None:
                self._reader.join(5)
                raise RuntimeError("backplane-serve exited with %d:\n%s"
                                   % (self.proc.returncode, self.output()))
            if self.http_port and self.grpc_port and self._ready():
                return self
            time.sleep(0.05)
        self.__exit__(None, None, None)
        raise RuntimeError("backplane-serve not ready in %d s:\n%s"
                           % (self.ready_timeout, self.output()))

    def _ready(self):
        path = "/v2/health/ready" if self.require_ready else "/v2/health/live"
        try:
            with urllib.request.urlopen(self.http_url + path, timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def __exit__(self, exc_type, exc, tb):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                if exc_type is None and self.check_exit:
                    raise AssertionError("backplane-serve did not stop on SIGTERM in 20 s:\n"
                                         + self.output())
        self._reader.join(5)
        if exc_type is None and self.check_exit and self.proc.returncode != 0:
            raise AssertionError("backplane-serve exited with %d:\n%s"
                                 % (self.proc.returncode, self.output()))


def reference_outputs(model_path, inputs, tmpdir, threads=1):
    """`backplane run`'s outputs for `inputs` ({name: numpy array}), as a dict
    {output name: numpy array}: what the server must return bit for bit."""
    import json
    import numpy as np
    args = [CLI, "run", model_path, "--threads", str(threads), "--output-dir", tmpdir, "--json"]
    for name, value in inputs.items():
        path = os.path.join(tmpdir, "in_%s.npy" % re.sub(r"[^A-Za-z0-9_]", "_", name))
        np.save(path, value)
        args += ["--input", "%s=%s" % (name, path)]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError("backplane run failed:\n" + done.stdout + done.stderr)
    report = json.loads(done.stdout)
    outputs = {}
    for out in report["outputs"]:
        file = re.sub(r"[/\\:]", "_", out["name"]) or "output"
        outputs[out["name"]] = np.load(os.path.join(tmpdir, file + ".npy"))
    return outputs


def grpc_modules(out):
    """The Python modules (messages, service stub) generated into directory
    `out` from the server's proto, as a client generates them."""
    import importlib
    import importlib.util
    import shutil
    import sys
    proto = os.path.join(PROTO_DIR, "grpc_predict_v2.proto")
    if importlib.util.find_spec("grpc_tools"):  # python3-grpc-tools
        cmd = [sys.executable, "-m", "grpc_tools.protoc", "--grpc_python_out=" + out]
    else:
        plugin = shutil.which("grpc_python_plugin")  # protobuf-compiler-grpc
        assert plugin and shutil.which("protoc"), "neither grpc_tools nor protoc+plugin"
        cmd = ["protoc", "--grpc_out=" + out, "--plugin=protoc-gen-grpc=" + plugin]
    subprocess.run(cmd + ["-I", PROTO_DIR, "--python_out=" + out, proto], check=True)
    sys.path.insert(0, out)
    try:
        messages = importlib.import_module("grpc_predict_v2_pb2")
        services = importlib.import_module("grpc_predict_v2_pb2_grpc")
    finally:
        sys.path.remove(out)
    return messages, services


# The protocol's datatype names of the numpy dtypes the tests and the
# benchmark send and receive.
DATATYPES = {"BOOL": "bool", "UINT8": "uint8", "UINT16": "uint16", "UINT32": "uint32",
             "UINT64": "uint64", "INT8": "int8", "INT16": "int16", "INT32": "int32",
             "INT64": "int64", "FP16": "float16", "FP32": "float32", "FP64": "float64"}


def binary_request(inputs, binary_out=True):
    """An infer request in the binary tensor data extension for `inputs`
    ({name: numpy array}): (body, the JSON header's length)."""
    import json
    import numpy as np
    names = {v: k for k, v in DATATYPES.items()}
    header = {"inputs": [{"name": k, "datatype": names[v.dtype.name], "shape": list(v.shape),
                          "parameters": {"binary_data_size": v.nbytes}}
                         for k, v in inputs.items()],
              "parameters": {"binary_data_output": binary_out}}
    text = json.dumps(header, separators=(",", ":")).encode()
    return text + b"".join(np.ascontiguousarray(v).tobytes() for v in inputs.values()), len(text)


def decode_response(headers, body):
    """An infer response, JSON or binary: (its JSON, {output name: array})."""
    import json
    import numpy as np
    n = headers.get("Inference-Header-Content-Length")
    text = body[:int(n)] if n is not None else body
    reply = json.loads(text)
    out, at = {}, len(text)
    for o in reply["outputs"]:
        dtype = np.dtype(DATATYPES[o["datatype"]])
        if "data" in o:
            out[o["name"]] = np.array(o["data"], dtype=dtype).reshape(o["shape"])
        else:
            size = o["parameters"]["binary_data_size"]
            out[o["name"]] = np.frombuffer(body[at:at + size], dtype=dtype).reshape(o["shape"])
            at += size
    assert at == len(body), "bytes left over after the binary outputs"
    return reply, out
