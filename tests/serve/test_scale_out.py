"""backplane serve scaled out: three replicas behind Debian's nginx, which runs
deploy/nginx/backplane.conf as shipped (its upstreams, retries and timeouts;
only the addresses and ports are this machine's), under REST and gRPC load
while one replica crashes (SIGKILL) and then another stops (SIGTERM).

Every request ends before the client's timeout (none hangs), with the right
answer bit for bit or with an error; a request that failed succeeds when
retried through nginx; nginx keeps answering readiness and inference from the
replicas left and marks the dead one down (its passive health check); a
request in flight on the replica being stopped still gets its answer, and
that replica exits cleanly.

Needs nginx (Debian's package `nginx`) and python3-grpcio with grpc_tools or
protoc and grpc_python_plugin.
"""
import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

import grpc
import numpy as np
import pytest

from serve_harness import Server, grpc_modules, model, reference_outputs

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
NGINX_CONF = os.path.join(ROOT, "deploy", "nginx", "backplane.conf")

# A client gives up on a request after this long: a request that takes it
# is a hang.
CLIENT_TIMEOUT = 10
HTTP_THREADS = 8
GRPC_THREADS = 4
# Retries of a failed request, each through nginx.
RETRIES = 3
SEEDS = 4
INFER_PATH = "/v2/models/tiny/infer"
GRPC_INFER_PATH = "/inference.GRPCInferenceService/ModelInfer"


def nginx_binary():
    path = shutil.which("nginx") or "/usr/sbin/nginx"
    assert os.path.exists(path), "nginx is not installed (Debian: apt-get install nginx)"
    return path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def refuses(port):
    """Whether nothing listens on 127.0.0.1:port."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


# ------------------------------------------------------------------ nginx ---

def site_config(replicas, listen_http, listen_grpc):
    """deploy/nginx/backplane.conf with its upstream servers replaced by the
    replicas' addresses (in order) and its listeners by loopback ports;
    everything else as shipped. Comments are dropped."""
    with open(NGINX_CONF) as f:
        text = "\n".join(line.split("#", 1)[0] for line in f.read().split("\n"))
    rest = re.findall(r"\bproxy_pass\s+http://(\w+)\s*;", text)
    grpc_ = re.findall(r"\bgrpc_pass\s+grpc://(\w+)\s*;", text)
    assert len(rest) == 1 and len(grpc_) == 1, (rest, grpc_)
    ports = {rest[0]: [r.http_port for r in replicas], grpc_[0]: [r.grpc_port for r in replicas]}

    def upstream(m):
        name, body = m.group(1), m.group(2)
        assert name in ports, "upstream %s is used by neither proxy_pass nor grpc_pass" % name
        addresses = iter("127.0.0.1:%d" % p for p in ports.pop(name))
        body, n = re.subn(r"^(\s*server\s+)[^\s;]+", lambda s: s.group(1) + next(addresses),
                          body, flags=re.M)
        assert n == len(replicas), "upstream %s has %d servers, not %d" % (name, n, len(replicas))
        return "upstream %s {%s}" % (name, body)

    text = re.sub(r"\bupstream\s+(\w+)\s*\{([^}]*)\}", upstream, text)
    assert not ports, "no upstream block for %s" % sorted(ports)

    # Each listen belongs to the server block that follows it up to the next
    # listen: the one with grpc_pass gets the gRPC port.
    listens = list(re.finditer(r"^(\s*listen\s+)(\S+?)(\s[^;]*)?;", text, re.M))
    assert len(listens) == 2, "expected two listen directives, found %d" % len(listens)
    out, at = [], 0
    for i, m in enumerate(listens):
        end = listens[i + 1].start() if i + 1 < len(listens) else len(text)
        port = listen_grpc if "grpc_pass" in text[m.end():end] else listen_http
        out += [text[at:m.start()], "%s127.0.0.1:%d%s;" % (m.group(1), port, m.group(3) or "")]
        at = m.end()
    out.append(text[at:])
    text = "".join(out)
    assert "127.0.0.1:%d " % listen_grpc in text and "127.0.0.1:%d;" % listen_http in text
    return text


# $upstream_addr and $upstream_status list every replica a request was sent
# to, in order: a request retried elsewhere shows both.
LOG_FORMAT = "$msec|$server_port|$status|$request_uri|$upstream_status|$upstream_addr"


def main_config(tmp, site):
    temp = "".join("    %s_temp_path %s;\n" % (k, os.path.join(tmp, k))
                   for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    # As root, nginx's workers would run as nobody, which cannot open the
    # temporary directories (large request bodies go there) inside tmp.
    user = "user root;\n" if os.geteuid() == 0 else ""
    return ("%(user)sworker_processes 1;\n"
            "error_log %(t)s/error.log warn;\n"
            "pid %(t)s/nginx.pid;\n"
            "events { worker_connections 1024; }\n"
            "http {\n"
            "    log_format backplane '%(fmt)s';\n"
            "    access_log %(t)s/access.log backplane;\n"
            "%(temp)s"
            "    include %(site)s;\n"
            "}\n") % {"user": user, "t": tmp, "fmt": LOG_FORMAT, "temp": temp, "site": site}


def _parent_death_signal():
    """A preexec_fn giving the child SIGTERM when this process dies (a test
    killed on its timeout leaves no nginx behind); resolved before the fork."""
    try:
        import ctypes
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (ImportError, OSError, AttributeError):
        return None
    return lambda: prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


class Nginx:
    """nginx in the foreground (daemon off) with its files in `tmp`."""

    def __init__(self, tmp, replicas):
        self.tmp = tmp
        self.replicas = replicas
        self.proc = None
        self.http_port = self.grpc_port = None

    def start(self):
        for _ in range(3):  # a port picked as free may be taken before nginx binds it
            self.http_port, self.grpc_port = free_port(), free_port()
            site = os.path.join(self.tmp, "backplane.conf")
            with open(site, "w") as f:
                f.write(site_config(self.replicas, self.http_port, self.grpc_port))
            conf = os.path.join(self.tmp, "nginx.conf")
            with open(conf, "w") as f:
                f.write(main_config(self.tmp, site))
            with open(os.path.join(self.tmp, "nginx.out"), "ab") as out:
                self.proc = subprocess.Popen(
                    [nginx_binary(), "-p", self.tmp, "-c", conf,
                     "-e", os.path.join(self.tmp, "error.log"), "-g", "daemon off;"],
                    stdout=out, stderr=subprocess.STDOUT, preexec_fn=_parent_death_signal())
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and self.proc.poll() is None:
                if not refuses(self.http_port) and not refuses(self.grpc_port):
                    return self
                time.sleep(0.05)
            self.stop()
            if "Address already in use" not in self.logs():
                break
        raise RuntimeError("nginx did not start:\n" + self.logs())

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def read(self, name):
        try:
            with open(os.path.join(self.tmp, name), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def logs(self):
        """nginx's output and error log, less the notes on each large request
        body it buffered to a file."""
        return self.read("nginx.out") + "".join(
            line for line in self.read("error.log").splitlines(True)
            if "buffered to a temporary file" not in line)

    def access(self):
        """[(time, server port, status, uri, [upstream statuses], [upstream addresses])]"""
        def split(s):
            return [x.strip() for x in re.split(r"[,:]\s", s) if x.strip() != "-"]
        rows = []
        for line in self.read("access.log").splitlines():
            msec, port, status, uri, ustatus, uaddr = line.split("|", 5)
            rows.append((float(msec), int(port), int(status), uri, split(ustatus), split(uaddr)))
        return rows


# ---------------------------------------------------------------- clients ---

@pytest.fixture(scope="module")
def pb(tmp_path_factory):
    """The generated modules (messages, service stub)."""
    return grpc_modules(str(tmp_path_factory.mktemp("stubs")))


def image(seed):
    return np.random.default_rng(1000 + seed).standard_normal((1, 3, 32, 32)).astype(np.float32)


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    """[(input, `backplane run`'s output)] for SEEDS different images."""
    out = []
    for seed in range(SEEDS):
        x = image(seed)
        tmp = str(tmp_path_factory.mktemp("ref%d" % seed))
        out.append((x, reference_outputs(model("tiny_cnn.onnx"), {"input": x}, tmp)["output"]))
    return out


def binary_body(x):
    header = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": list(x.shape),
                                     "parameters": {"binary_data_size": x.nbytes}}],
                         "parameters": {"binary_data_output": True}}).encode()
    return header + x.tobytes(), {"Content-Type": "application/octet-stream",
                                  "Inference-Header-Content-Length": str(len(header))}


def json_body(x):
    body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": list(x.shape),
                                   "data": x.ravel().tolist()}]}).encode()
    return body, {"Content-Type": "application/json"}


def decode_http(status, headers, body):
    """The output of a REST infer response (binary or JSON) as float32."""
    if status != 200:
        raise ValueError("status %d" % status)
    n = headers.get("Inference-Header-Content-Length")
    text = body[:int(n)] if n is not None else body
    reply = json.loads(text)
    [out] = reply["outputs"]
    assert out["name"] == "output" and out["datatype"] == "FP32", out
    if "data" in out:
        value = np.array(out["data"], dtype=np.float64).astype(np.float32)
    else:
        assert len(body) == len(text) + out["parameters"]["binary_data_size"]
        value = np.frombuffer(body[len(text):], dtype="<f4")
    return value.reshape(out["shape"])


def same_bits(got, want):
    return got.shape == want.shape and got.tobytes() == want.astype("<f4").tobytes()


class HttpClient:
    """REST inference through one keep-alive connection, reopened after an error."""

    def __init__(self, port, cases, use_json):
        self.port = port
        self.conn = None
        self.bodies = [(json_body if use_json else binary_body)(x) for x, _ in cases]
        self.wants = [want for _, want in cases]

    def infer(self, i):
        """(outcome, detail): "ok", "wrong" (a 200 with another answer),
        "error" (an error status or a broken connection) or "timeout"."""
        body, headers = self.bodies[i]
        try:
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port,
                                                       timeout=CLIENT_TIMEOUT)
            self.conn.request("POST", INFER_PATH, body, headers)
            r = self.conn.getresponse()
            data = r.read()
            if r.status != 200:
                return "error", "HTTP %d %s" % (r.status, data[:200])
            try:
                got = decode_http(r.status, r.headers, data)
            except Exception as e:  # noqa: BLE001 - an unreadable 200 is a wrong answer
                return "wrong", "undecodable 200: %r" % e
            if not same_bits(got, self.wants[i]):
                return "wrong", "output differs from backplane run: %r" % got
            return "ok", ""
        except socket.timeout:
            self.close()
            return "timeout", "no answer in %d s" % CLIENT_TIMEOUT
        except (OSError, http.client.HTTPException) as e:
            self.close()
            return "error", "%s: %s" % (type(e).__name__, e)

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class GrpcClient:
    """ModelInfer through one channel."""

    def __init__(self, pb, port, cases):
        self.channel = grpc.insecure_channel("127.0.0.1:%d" % port)
        self.stub = pb[1].GRPCInferenceServiceStub(self.channel)
        self.requests = []
        for x, _ in cases:
            r = pb[0].ModelInferRequest(model_name="tiny")
            r.inputs.add(name="input", datatype="FP32", shape=list(x.shape))
            r.raw_input_contents.append(x.astype("<f4").tobytes())
            self.requests.append(r)
        self.wants = [want for _, want in cases]

    def infer(self, i):
        try:
            response = self.stub.ModelInfer(self.requests[i], timeout=CLIENT_TIMEOUT)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                return "timeout", "no answer in %d s: %s" % (CLIENT_TIMEOUT, e.details())
            return "error", "%s: %s" % (e.code(), e.details())
        if [(o.name, o.datatype) for o in response.outputs] != [("output", "FP32")] or \
                len(response.raw_output_contents) != 1:
            return "wrong", "unexpected outputs: %r" % response.outputs
        got = np.frombuffer(response.raw_output_contents[0], dtype="<f4")
        if got.size != int(np.prod(response.outputs[0].shape)):
            return "wrong", "%d values for shape %r" % (got.size, response.outputs[0].shape)
        if not same_bits(got.reshape(list(response.outputs[0].shape)), self.wants[i]):
            return "wrong", "output differs from backplane run: %r" % got
        return "ok", ""

    def close(self):
        self.channel.close()


class ReadyClient:
    """GET /v2/health/ready through one keep-alive connection, every 20 ms."""

    def __init__(self, port):
        self.port = port
        self.conn = None

    def infer(self, i):
        time.sleep(0.02)
        try:
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port,
                                                       timeout=CLIENT_TIMEOUT)
            self.conn.request("GET", "/v2/health/ready")
            r = self.conn.getresponse()
            r.read()
            return ("ok", "") if r.status == 200 else ("error", "HTTP %d" % r.status)
        except socket.timeout:
            self.close()
            return "timeout", "no answer in %d s" % CLIENT_TIMEOUT
        except (OSError, http.client.HTTPException) as e:
            self.close()
            return "error", "%s: %s" % (type(e).__name__, e)

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def http_get(url):
    """The status of GET url, or the exception's text when there is none."""
    try:
        with urllib.request.urlopen(url, timeout=CLIENT_TIMEOUT) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, OSError) as e:
        return "%s: %s" % (type(e).__name__, e)


# --------------------------------------------------------------- fixtures ---

@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Three replicas serving tiny_cnn.onnx with one thread each, and nginx
    before them; nginx is stopped and every replica left is stopped after."""
    tmp = str(tmp_path_factory.mktemp("nginx"))
    with contextlib.ExitStack() as stack:
        replicas = [stack.enter_context(Server(["--model", "tiny=" + model("tiny_cnn.onnx")],
                                               threads=1))
                    for _ in range(3)]
        nginx = Nginx(tmp, replicas)
        stack.callback(nginx.stop)
        nginx.start()
        yield nginx


# ------------------------------------------------------------------ tests ---

def test_rest_and_grpc_through_nginx(cluster, pb, cases):
    base = "http://127.0.0.1:%d" % cluster.http_port
    assert http_get(base + "/v2/health/ready") == 200
    with urllib.request.urlopen(base + "/v2/models/tiny", timeout=CLIENT_TIMEOUT) as r:
        meta = json.loads(r.read())
    assert meta["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [1, 3, 32, 32]}]
    # The replicas' own counters are not served through the balancer.
    assert http_get(base + "/metrics") == 404
    for use_json in (False, True):
        client = HttpClient(cluster.http_port, cases, use_json)
        try:
            for i in range(len(cases)):
                assert client.infer(i) == ("ok", ""), ("json" if use_json else "binary", i)
        finally:
            client.close()
    client = GrpcClient(pb, cluster.grpc_port, cases)
    try:
        assert client.stub.ServerReady(pb[0].ServerReadyRequest(), timeout=CLIENT_TIMEOUT).ready
        got = client.stub.ModelMetadata(pb[0].ModelMetadataRequest(name="tiny"),
                                        timeout=CLIENT_TIMEOUT)
        assert [(t.name, t.datatype, list(t.shape)) for t in got.inputs] == [
            ("input", "FP32", [1, 3, 32, 32])]
        for i in range(len(cases)):
            assert client.infer(i) == ("ok", ""), i
    finally:
        client.close()


class Load:
    """Client threads sending inference requests through nginx until stopped,
    each request's outcome recorded with its retries."""

    def __init__(self, pb, nginx, cases):
        self.records = []  # (kind, thread, start, end, outcome, detail, [(outcome, detail)])
        self.stopping = threading.Event()
        self.threads = []
        for t in range(HTTP_THREADS):
            self.threads.append(threading.Thread(
                target=self.run, daemon=True,
                args=("http", t, lambda t=t: HttpClient(nginx.http_port, cases, t % 2 == 1))))
        for t in range(GRPC_THREADS):
            self.threads.append(threading.Thread(
                target=self.run, daemon=True,
                args=("grpc", t, lambda: GrpcClient(pb, nginx.grpc_port, cases))))
        self.threads.append(threading.Thread(
            target=self.run, daemon=True, args=("ready", 0, lambda: ReadyClient(nginx.http_port))))

    def run(self, kind, t, make_client):
        client = make_client()
        n = t
        try:
            while not self.stopping.is_set():
                i = n % SEEDS
                n += 1
                start = time.time()
                outcome, detail = client.infer(i)
                end = time.time()
                retries = []
                while outcome == "error" and len(retries) < RETRIES and (
                        not retries or retries[-1][0] == "error"):
                    retries.append(client.infer(i))
                self.records.append((kind, t, start, end, outcome, detail, retries))
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.records.append((kind, t, time.time(), time.time(), "crash", repr(e), []))
        finally:
            client.close()

    def start(self):
        for t in self.threads:
            t.start()

    def stop(self):
        self.stopping.set()
        # A thread waits at most CLIENT_TIMEOUT per try.
        deadline = time.monotonic() + CLIENT_TIMEOUT * (RETRIES + 2)
        for t in self.threads:
            t.join(max(0.1, deadline - time.monotonic()))
        return [t.name for t in self.threads if t.is_alive()]

    def ok_since(self, when):
        """{kind: requests answered right that started after `when`}"""
        counts = {"http": 0, "grpc": 0}
        for kind, _, start, _, outcome, _, _ in list(self.records):
            if start > when and outcome == "ok" and kind in counts:
                counts[kind] += 1
        return counts

    def wait_for_ok(self, when, n, what):
        """Waits until each kind has n right answers to requests started after
        `when`: progress, so that each phase has load in it."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            counts = self.ok_since(when)
            if min(counts.values()) >= n:
                return
            time.sleep(0.05)
        raise AssertionError("%s: only %r right answers through nginx in 30 s"
                             % (what, self.ok_since(when)))


def check_through_balancer(nginx, client_http, client_grpc, gone, what):
    """After replica `gone` has exited: readiness through nginx answers 200,
    the replica itself answers nothing, and a burst of requests through nginx
    all succeed."""
    base = "http://127.0.0.1:%d" % nginx.http_port
    ready = [http_get(base + "/v2/health/ready") for _ in range(10)]
    assert ready == [200] * 10, "%s: GET /v2/health/ready through nginx: %r" % (what, ready)
    direct = http_get(gone.http_url + "/v2/health/ready")
    assert direct != 200 and isinstance(direct, str), (
        "%s: the replica answered GET /v2/health/ready directly: %r" % (what, direct))
    burst = [client_http.infer(i % SEEDS) for i in range(50)]
    burst += [client_grpc.infer(i % SEEDS) for i in range(20)]
    bad = [(i, r) for i, r in enumerate(burst) if r != ("ok", "")]
    assert not bad, "%s: requests through nginx failed: %r" % (what, bad[:5])


def in_flight_across_sigterm(replica, body, headers, want):
    """Starts an inference request directly on `replica`, sends it SIGTERM
    with the request half sent, waits until its REST listener is closed, then
    sends the rest: the answer must still come, and right."""
    conn = http.client.HTTPConnection("127.0.0.1", replica.http_port, timeout=CLIENT_TIMEOUT)
    try:
        # An answered request first: the server has accepted this connection
        # and is waiting on it for the next request.
        conn.request("GET", "/v2/health/ready")
        r = conn.getresponse()
        r.read()
        assert r.status == 200
        conn.putrequest("POST", INFER_PATH)
        for k, v in dict(headers, **{"Content-Length": str(len(body))}).items():
            conn.putheader(k, v)
        conn.endheaders()
        half = len(body) // 2
        conn.send(body[:half])
        replica.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        while not refuses(replica.http_port):
            assert replica.proc.poll() is None, (
                "the replica exited with a request in flight:\n" + replica.output())
            assert time.monotonic() < deadline, (
                "the replica's REST port still accepts 20 s after SIGTERM:\n" + replica.output())
            time.sleep(0.02)
        conn.send(body[half:])
        r = conn.getresponse()
        data = r.read()
        got = decode_http(r.status, r.headers, data)
        assert same_bits(got, want), "the request in flight across SIGTERM got %r" % got
    finally:
        conn.close()


def test_replicas_crash_and_stop_under_load(cluster, pb, cases):
    nginx = cluster
    crashed, stopped, _ = nginx.replicas
    load = Load(pb, nginx, cases)
    client_http = HttpClient(nginx.http_port, cases, use_json=False)
    client_grpc = GrpcClient(pb, nginx.grpc_port, cases)
    events = {}
    try:
        t0 = time.time()
        load.start()
        load.wait_for_ok(t0, 30, "before the crash")

        # A crash: nothing of the replica is left to answer.
        crashed.check_exit = False
        events["kill"] = time.time()
        crashed.proc.send_signal(signal.SIGKILL)
        crashed.proc.wait(20)
        check_through_balancer(nginx, client_http, client_grpc, crashed, "after SIGKILL")
        load.wait_for_ok(time.time(), 30, "after the crash")

        # A graceful stop of a second replica while it has a request in
        # flight, the load still running.
        events["term"] = time.time()
        body, headers = binary_body(cases[0][0])
        in_flight_across_sigterm(stopped, body, headers, cases[0][1])
        try:
            stopped.proc.wait(20)
        except subprocess.TimeoutExpired:
            raise AssertionError("the replica did not exit 20 s after SIGTERM:\n"
                                 + stopped.output())
        assert stopped.proc.returncode == 0, stopped.output()
        check_through_balancer(nginx, client_http, client_grpc, stopped, "after SIGTERM")
        load.wait_for_ok(time.time(), 30, "after the stop")
    finally:
        hung_threads = load.stop()
        client_http.close()
        client_grpc.close()
    assert not hung_threads, "client threads still waiting: %r" % hung_threads

    records = load.records
    summary = {}
    for kind, _, start, _, outcome, _, retries in records:
        phase = ("before" if start < events["kill"] else
                 "after kill" if start < events["term"] else "after term")
        key = (kind, phase, outcome, retries[-1][0] if retries else "")
        summary[key] = summary.get(key, 0) + 1
    report = "outcomes (kind, phase, outcome, last retry): %r; slowest first try %.3f s" % (
        summary, max(r[3] - r[2] for r in records))
    for r in records:
        if r[4] != "ok":
            report += "\n  %s %s at %+.3f s after the crash: %s; retries %r" % (
                r[0], r[4], r[2] - events["kill"], r[5], [o for o, _ in r[6]])
    print(report)
    where = "\n%s\nnginx:\n%s" % (report, nginx.logs()[-3000:])

    crashes = [r for r in records if r[4] == "crash"]
    assert not crashes, "a client thread failed: %r%s" % (crashes, where)
    # (1) No request hung, first try or retry.
    hung = [r for r in records if r[4] == "timeout" or any(o == "timeout" for o, _ in r[6])]
    assert not hung, "requests hit the client's %d s timeout: %r%s" % (
        CLIENT_TIMEOUT, hung[:5], where)
    # (2) Each answered right or failed with an error, never a wrong answer.
    wrong = [r for r in records if r[4] == "wrong" or any(o == "wrong" for o, _ in r[6])]
    assert not wrong, "wrong answers: %r%s" % (wrong[:5], where)
    assert all(r[4] in ("ok", "error") for r in records)
    # (3) Each request that failed succeeded when retried through nginx.
    unretried = [r for r in records if r[4] == "error" and r[6][-1][0] != "ok"]
    assert not unretried, "failed requests still failing after %d retries: %r%s" % (
        RETRIES, unretried[:5], where)
    # (4) Readiness through nginx answered 200 all along: a replica that
    # fails is retried past and left out.
    ready = [r for r in records if r[0] == "ready"]
    assert ready and all(r[4] == "ok" for r in ready), (
        "GET /v2/health/ready through nginx failed: %r%s"
        % ([r for r in ready if r[4] != "ok"][:5], where))

    # What nginx did: before the crash it balanced over all three replicas on
    # both fronts; after it, requests sent to the dead replica went on to
    # another and succeeded; and it marked the dead one down.
    log = nginx.access()
    assert log, "nginx logged no requests" + where
    for port, addresses in ((nginx.http_port, [r.http_port for r in nginx.replicas]),
                            (nginx.grpc_port, [r.grpc_port for r in nginx.replicas])):
        used = {row[5][0] for row in log if row[1] == port and row[0] < events["kill"]
                and row[3] in (INFER_PATH, GRPC_INFER_PATH) and row[5]}
        want = {"127.0.0.1:%d" % a for a in addresses}
        assert want <= used, "nginx port %d sent inference to %r only%s" % (port, used, where)
    dead = "127.0.0.1:%d" % crashed.http_port
    failed_over = [row for row in log if row[0] > events["kill"] and row[1] == nginx.http_port
                   and row[2] == 200 and len(row[5]) >= 2 and row[5][0] == dead]
    assert failed_over, "no request sent to the crashed replica went on to another" + where
    assert re.search(r"upstream server temporarily disabled.*upstream: \"http://%s/" % dead,
                     nginx.read("error.log")), (
        "nginx did not mark the crashed replica down" + where)
