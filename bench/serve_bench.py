#!/usr/bin/python3
"""The serving load benchmark (`make bench`): backplane-serve under load
against the same model run in-process through the C++ API.

For ResNet-18 and the BERT-style encoder ("transformer") of
bench/bench_models.py's catalog, exported here with a dynamic leading batch
dim (the same modules and seeded weights as the catalog's, see
export_batched), at 2 threads:
  server      backplane-serve on a model repository in BUILD/bench/serve_repo
              holding that one model (its config.json: threads, instances,
              input_shapes; with "dynamic_batching" in the batching mode),
              one server per model and mode, --http-threads enough for a
              thread per connection; driven by wrk (Debian's /usr/bin/wrk, one
              thread, -c C connections = C concurrent clients, each POSTing
              one prebuilt batch-1 request in the binary tensor data
              extension; bench/serve_wrk.lua prints exact p50/p99)
  in-process  backplane_serve_inprocess_bench (bench/serve_inprocess.cpp):
              C threads sharing as many sessions as the server's instances
              through a mutex-protected, first-come-first-served pool (the
              way an application shares sessions; the server instead runs
              each session on a thread of its own and queues requests for
              them), each request set_input + run + output copy as the
              server does it
at concurrency 1, 8 and 32, each cell --warmup s unrecorded then --duration s
recorded, the in-process cell right after the server's without batching.
Before timing, one request to each server is compared with `backplane run`
on the same input (bit for bit without batching); with batching, one request
of each batch size up to max_batch_size then builds that size's plan.
Reported, as one markdown table (also BUILD/bench/serve_results.md):
throughput and p50/p99 latency of both, the server's overhead at
concurrency 1 (server p50 / in-process p50 - 1; target <= 10 %) and the
batching gain at concurrency 32 (server req/s with batching / without;
target >= 1.3x), beside the gain of session.run alone (rows per ms of the
batched executions over those of batch-1 ones: the most batching can give
on this machine). Client and server share the machine's cores. A second
table gives the HTTP round trip alone (wrk, one connection, GET
/v2/health/ready on the same server) against the in-process p50; a third
splits the mean latency: wrk's, the server's own per request and its
session.run per execution (from /metrics), the in-process request's.
A build whose server does not know "dynamic_batching" (it refuses the key
at start) gets "batching: not available in this build" rows.
Needs Debian's /usr/bin/python3 (numpy, torch, torchvision, onnx) and wrk.
"""
import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_models  # noqa: E402
# The protocol's request and response encoding, shared with the server's tests.
sys.path.insert(0, os.path.join(HERE, "..", "tests", "serve"))
from serve_harness import binary_request, decode_response  # noqa: E402

# Bump when export_batched changes what the files hold.
EXPORT_VERSION = 1


def log(msg):
    print(f"serve_bench: {msg}", file=sys.stderr, flush=True)


def export_batched(name, out_dir):
    """out_dir/NAME_batch.onnx: the catalog model NAME as scripts/gen_models.py
    builds and exports it (same module, seeds and opset), but with the
    leading dim of its input and output symbolic ("batch"), so the server
    can batch requests. Returns (path, input name, one batch-1 input)."""
    if name not in bench_models.CATALOG or bench_models.CATALOG[name].ctor is not None:
        sys.exit(f"serve_bench: '{name}' is not one of gen_models.py's catalog models "
                 f"(resnet18, mobilenet_v2, squeezenet1_1, transformer)")
    gm = bench_models._gen_models()
    inputs, out_names = gm.make_input(name)
    if len(inputs) != 1 or len(out_names) != 1:
        sys.exit(f"serve_bench: {name}: one input and one output expected")
    in_name, example = inputs[0]
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, name + "_batch.onnx")
    stamp_path = path + ".stamp"
    import torch
    stamp = hashlib.sha256(f"{gm._script_hash()}|{EXPORT_VERSION}|{torch.__version__}".encode()).hexdigest()
    if os.path.exists(path) and os.path.exists(stamp_path):
        with open(stamp_path) as f:
            if f.read().strip() == stamp:
                return path, in_name, _input_for(in_name, example)
    torch.set_num_threads(1)
    model = gm.build(name)
    axes = {in_name: {0: "batch"}, out_names[0]: {0: "batch"}}
    tmp = path + ".tmp"
    torch.onnx.export(model, (torch.from_numpy(example),), tmp, export_params=True,
                      opset_version=gm.OPSET, do_constant_folding=True, input_names=[in_name],
                      output_names=out_names, dynamic_axes=axes)
    import onnx
    gm.check_symbolic_dims(name + "_batch", onnx.load(tmp), axes)
    os.replace(tmp, path)
    with open(stamp_path, "w") as f:
        f.write(stamp + "\n")
    log(f"{name}: wrote {path}")
    return path, in_name, _input_for(in_name, example)


def _input_for(in_name, example):
    """A fixed random batch-1 input shaped like the example: float inputs
    standard normal, integer inputs in [0, 100)."""
    rng = np.random.default_rng(12345)
    shape = (1,) + tuple(example.shape[1:])
    if example.dtype == np.float32:
        return rng.standard_normal(shape).astype(np.float32)
    return rng.integers(0, 100, size=shape, dtype=example.dtype)


def request_body(in_name, x):
    """The binary tensor data extension's infer request: (body, JSON length)."""
    return binary_request({in_name: x})


def decode(headers, body):
    return decode_response(headers, body)[1]


def reference(cli, model_path, in_name, x, threads, tmp):
    """`backplane run`'s outputs for x: {name: array}."""
    in_path = os.path.join(tmp, "input.npy")
    np.save(in_path, x)
    out_dir = os.path.join(tmp, "out")
    done = subprocess.run([cli, "run", model_path, "--threads", str(threads), "--input",
                           f"{in_name}={in_path}", "--output-dir", out_dir, "--json"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit("serve_bench: backplane run failed:\n" + done.stdout + done.stderr)
    outputs = {}
    for o in json.loads(done.stdout)["outputs"]:
        file = re.sub(r"[/\\:]", "_", o["name"]) or "output"
        outputs[o["name"]] = np.load(os.path.join(out_dir, file + ".npy"))
    return outputs


class Server:
    """backplane-serve on a model repository, on free ports of 127.0.0.1."""

    def __init__(self, binary, repo, threads, http_threads):
        self.cmd = [binary, "--model-repository", repo, "--host", "127.0.0.1", "--http-port", "0",
                    "--grpc-port", "0", "--threads", str(threads), "--http-threads", str(http_threads)]
        self.proc, self.lines, self.port = None, [], None

    def output(self):
        return "\n".join(self.lines)

    def start(self, timeout=180):
        """True when ready; False (output kept) if the server exited."""
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        reader = threading.Thread(target=lambda: [self.lines.append(l.rstrip("\n")) for l in self.proc.stdout],
                                  daemon=True)
        reader.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                reader.join(5)
                return False
            for line in list(self.lines):
                m = re.search(r"HTTP on [0-9.]+:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
            if self.port and any("UNAVAILABLE" in l for l in self.lines):
                self.stop()
                sys.exit("serve_bench: backplane-serve could not load a model:\n" + self.output())
            if self.port and self._ready():
                return True
            time.sleep(0.1)
        self.stop()
        sys.exit("serve_bench: backplane-serve not ready in %d s:\n%s" % (timeout, self.output()))

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def _ready(self):
        try:
            with urllib.request.urlopen(self.url + "/v2/health/ready", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def infer(self, model, body, json_len):
        req = urllib.request.Request(f"{self.url}/v2/models/{model}/infer", data=body, method="POST",
                                     headers={"Content-Type": "application/octet-stream",
                                              "Inference-Header-Content-Length": str(json_len)})
        with urllib.request.urlopen(req, timeout=60) as r:
            return decode(r.headers, r.read())

    def counters(self, model):
        """The model's cumulative request count, executions, and summed
        request and compute-infer microseconds, from /metrics."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            text = r.read().decode()
        want = {"nv_inference_request_success": "requests", "nv_inference_exec_count": "executions",
                "nv_inference_count": "inferences", "nv_inference_request_duration_us": "request_us",
                "nv_inference_compute_infer_duration_us": "infer_us"}
        out = {}
        for line in text.splitlines():
            m = re.match(r'(\w+)\{model="([^"]+)",version="[^"]*"\} (\S+)$', line)
            if m and m.group(2) == model and m.group(1) in want:
                out[want[m.group(1)]] = float(m.group(3))
        return out

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def run_wrk(url, body_file, json_len, concurrency, seconds, wrk_threads):
    lua = os.path.join(HERE, "serve_wrk.lua")
    # wrk takes whole seconds.
    cmd = ["wrk", "-t", str(min(wrk_threads, concurrency)), "-c", str(concurrency), "-d", f"{max(1, round(seconds))}s",
           "--timeout", "30s", "-s", lua, url, "--", body_file, str(json_len)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"^SERVE_WRK (\{.*\})$", done.stdout, re.M)
    if done.returncode != 0 or not m:
        sys.exit("serve_bench: wrk failed:\n" + done.stdout + done.stderr)
    r = json.loads(m.group(1))
    errors = sum(v for k, v in r.items() if k.startswith("errors_"))
    kinds = ", ".join(f"{v} {k[7:]}" for k, v in r.items() if k.startswith("errors_") and v)
    secs = r["duration_us"] / 1e6
    answered = r["requests"] - r["errors_status"]  # wrk counts an error status as a completed request
    return {"throughput": answered / secs, "p50_ms": r["p50_us"] / 1e3, "p99_ms": r["p99_us"] / 1e3,
            "mean_ms": r["mean_us"] / 1e3, "requests": answered, "errors": errors, "error_kinds": kinds}


def run_inprocess(binary, model_path, in_name, shape, threads, sessions, concurrency, seconds, warmup):
    cmd = [binary, model_path, "--threads", str(threads), "--concurrency", str(concurrency),
           "--duration", str(seconds), "--warmup", str(warmup), "--sessions", str(sessions),
           "--shape", f"{in_name}={'x'.join(str(d) for d in shape)}"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit("serve_bench: in-process bench failed:\n" + done.stdout + done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def write_repo(repo, models, threads, instances, batching, max_batch, delay_us):
    """repo/NAME/1/model.onnx (a hard link or copy) and repo/NAME/config.json
    for every model of `models`."""
    for name, m in models.items():
        version = os.path.join(repo, name, "1")
        os.makedirs(version, exist_ok=True)
        dst = os.path.join(version, "model.onnx")
        if not (os.path.exists(dst) and os.path.samefile(dst, m["path"])):
            if os.path.lexists(dst):
                os.remove(dst)
            try:
                os.link(m["path"], dst)
            except OSError:
                shutil.copyfile(m["path"], dst)
        # Specialised at load for batch 1 only: the further signatures of
        # "input_shapes" are run once at load on the loading thread, which
        # leaves an OpenMP team of its own behind (more OpenMP threads than
        # cores make libgomp stop spinning at every barrier). The batch sizes
        # the batcher forms are built by requests instead (main).
        config = {"threads": threads, "instances": instances, "max_queue_size": 1024,
                  "input_shapes": [{m["input"]: [1] + list(m["x"].shape[1:])}]}
        if batching:
            config["dynamic_batching"] = {"max_batch_size": max_batch, "max_queue_delay_us": delay_us}
        with open(os.path.join(repo, name, "config.json"), "w") as f:
            json.dump(config, f, indent=1)
            f.write("\n")


def fmt(v, digits=1):
    return "–" if v is None else f"{v:.{digits}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--models", default="resnet18,transformer")
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--threads", type=int, default=2, help="threads per model (config.json \"threads\")")
    ap.add_argument("--instances", type=int, default=1,
                    help="sessions per model (config.json \"instances\"; the in-process pool's size)")
    ap.add_argument("--duration", type=float, default=5.0, help="recorded seconds per cell")
    ap.add_argument("--warmup", type=float, default=1.0, help="unrecorded seconds before each cell")
    ap.add_argument("--max-batch-size", type=int, default=8)
    ap.add_argument("--max-queue-delay-us", type=int, default=500)
    ap.add_argument("--wrk-threads", type=int, default=1)
    ap.add_argument("--output", help="default: BUILD/bench/serve_results.md")
    args = ap.parse_args()
    build = os.path.abspath(args.build_dir)
    serve_bin = os.path.join(build, "bin", "backplane-serve")
    cli = os.path.join(build, "bin", "backplane")
    inproc_bin = os.path.join(build, "bench", "backplane_serve_inprocess_bench")
    out_path = args.output or os.path.join(build, "bench", "serve_results.md")
    if not os.path.exists(serve_bin):
        log(f"skipped: {serve_bin} is missing (a build without BACKPLANE_WITH_SERVER)")
        return 0
    for p in (cli, inproc_bin):
        if not os.path.exists(p):
            sys.exit(f"serve_bench: {p} is missing (build the targets backplane_cli and bench_tools)")
    if not shutil.which("wrk"):
        sys.exit("serve_bench: wrk is missing (Debian: apt-get install wrk)")
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    models_dir = os.path.join(build, "bench", "models")
    repo = os.path.join(build, "bench", "serve_repo")
    work = os.path.join(build, "bench", "serve_work")
    os.makedirs(work, exist_ok=True)

    models = {}
    for name in args.models.split(","):
        path, in_name, x = export_batched(name, models_dir)
        body, json_len = request_body(in_name, x)
        body_file = os.path.join(work, name + ".body")
        with open(body_file, "wb") as f:
            f.write(body)
        with tempfile.TemporaryDirectory() as tmp:
            ref = reference(cli, path, in_name, x, args.threads, tmp)
        models[name] = {"path": path, "input": in_name, "x": x, "body": body, "json_len": json_len,
                        "body_file": body_file, "ref": ref}

    http_threads = max(concurrencies) + 4  # one per connection, as wrk keeps them all open
    server_res, inproc_res, floor_res, notes = {}, {}, {}, []
    batching_available = True
    # One server per model and mode, serving that model alone, as the
    # in-process peer runs it alone: every model's sessions are run by
    # threads of their own (the batcher's workers, or the HTTP threads), and
    # with OpenMP each such thread brings a team of its own.
    for name, m in models.items():
        for mode in ("no batching", "batching"):
            batching = mode == "batching"
            if batching and not batching_available:
                continue
            shutil.rmtree(repo, ignore_errors=True)
            write_repo(repo, {name: m}, args.threads, args.instances, batching, args.max_batch_size,
                       args.max_queue_delay_us)
            server = Server(serve_bin, repo, args.threads, http_threads)
            log(f"starting backplane-serve ({name}, {mode})")
            if not server.start():
                if batching and "dynamic_batching" in server.output():
                    log("batching: not available in this build (the server refuses \"dynamic_batching\")")
                    batching_available = False
                    continue
                sys.exit(f"serve_bench: backplane-serve exited ({mode}):\n" + server.output())
            try:
                got = server.infer(name, m["body"], m["json_len"])
                exact = True
                for k, want in m["ref"].items():
                    g = got.get(k)
                    if g is None or g.shape != want.shape or g.dtype != want.dtype:
                        sys.exit(f"serve_bench: {name} ({mode}): output {k} is not what backplane run gives")
                    if g.tobytes() != want.tobytes():
                        diff = float(np.abs(g.astype(np.float64) - want).max() / max(np.abs(want).max(), 1e-30))
                        if not batching:
                            sys.exit(f"serve_bench: {name}: output {k} differs from backplane run "
                                     f"(max |diff| / max |ref| = {diff:.2e})")
                        exact = False
                        notes.append(f"{name} with batching: output {k} differs from backplane run by "
                                     f"{diff:.1e} of its largest value")
                log(f"{name} ({mode}): the server's output is backplane run's"
                    + (" bit for bit" if exact else " within rounding"))
                if batching:
                    # Every batch size the batcher may form, built now by a
                    # request of that many rows (it runs alone on an idle
                    # server), so that no cell waits for one to compile.
                    for b in range(2, args.max_batch_size + 1):
                        server.infer(name, *request_body(m["input"], np.repeat(m["x"], b, axis=0)))
                if not batching:
                    # The HTTP round trip alone on the same server: a GET of
                    # the readiness endpoint by one connection.
                    run_wrk(server.url + "/v2/health/ready", "-", 0, 1, args.warmup, 1)
                    floor_res[name] = run_wrk(server.url + "/v2/health/ready", "-", 0, 1,
                                              args.duration, 1)
                for c in concurrencies:
                    run_wrk(server.url + f"/v2/models/{name}/infer", m["body_file"], m["json_len"], c,
                            args.warmup, args.wrk_threads)
                    before = server.counters(name)
                    r = run_wrk(server.url + f"/v2/models/{name}/infer", m["body_file"], m["json_len"], c,
                                args.duration, args.wrk_threads)
                    after = server.counters(name)
                    d = {k: after.get(k, 0) - before.get(k, 0) for k in after}
                    if d.get("requests") and d.get("executions"):
                        r["server_request_ms"] = d["request_us"] / d["requests"] / 1e3
                        # compute_infer charges every request its execution's run
                        r["server_run_ms"] = d["infer_us"] / d["requests"] / 1e3
                        r["mean_batch"] = d["inferences"] / d["executions"]
                    if r["errors"]:
                        notes.append(f"{name} {mode} c={c}: {r['errors']} requests failed ({r['error_kinds']}; "
                                     f"wrk's read errors are connections the server closed or reset), "
                                     f"{r['requests']} answered")
                        if r["errors"] > r["requests"]:
                            sys.exit(f"serve_bench: {name} ({mode}) c={c}: most requests failed ({r['error_kinds']})")
                    server_res[(name, mode, c)] = r
                    log(f"{name} {mode} c={c}: server {r['throughput']:.1f} req/s, "
                        f"p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms")
                    if not batching:  # the in-process peer, right after the server's cell
                        p = run_inprocess(inproc_bin, m["path"], m["input"], m["x"].shape, args.threads,
                                          args.instances, c, args.duration, args.warmup)
                        inproc_res[(name, c)] = p
                        log(f"{name} c={c}: in-process {p['throughput']:.1f} req/s, "
                            f"p50 {p['p50_ms']:.2f} ms, p99 {p['p99_ms']:.2f} ms")
            finally:
                server.stop()

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    lines = [
        f"Serving load: backplane-serve (REST, binary tensor data, batch-1 requests) against the same "
        f"model in-process through the C++ API; {args.threads} threads per model, {args.instances} "
        f"instance(s) (the in-process peer: C client threads sharing {args.instances} session(s) through a first-come-first-served "
        f"pool); {args.duration:g} s per cell after {args.warmup:g} s warm-up. "
        f"Load generator wrk -t {args.wrk_threads} (-c = concurrency); client and server share this "
        f"{os.cpu_count()}-core machine ({cpu}). Batching: max_batch_size {args.max_batch_size}, "
        f"max_queue_delay_us {args.max_queue_delay_us}. Targets: overhead at c=1 <= 10 %, batching gain "
        f"at c=32 >= 1.3x.",
        "",
        "| model | mode | concurrency | server req/s | p50 ms | p99 ms | in-process req/s | p50 ms | p99 ms "
        f"| overhead c=1 | batching gain c={max(concurrencies)} |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in models:
        for mode in ("no batching", "batching"):
            if mode == "batching" and not batching_available:
                lines.append(f"| {name} | batching: not available in this build | | | | | | | | | |")
                continue
            for c in concurrencies:
                s, p = server_res[(name, mode, c)], inproc_res[(name, c)]
                overhead = gain = ""
                if c == 1:
                    overhead = f"{(s['p50_ms'] / p['p50_ms'] - 1) * 100:+.1f} %"
                if mode == "batching" and c == max(concurrencies):
                    alone = server_res[(name, "no batching", c)]
                    gain = f"{s['throughput'] / alone['throughput']:.2f}x"
                    # What batching gains in session.run alone: rows per ms
                    # of a batched execution over those of a batch-1 one.
                    if s.get("server_run_ms") and alone.get("server_run_ms"):
                        gain += (f" (run alone: "
                                 f"{s['mean_batch'] * alone['server_run_ms'] / s['server_run_ms']:.2f}x)")
                failed = f" ({s['errors']} failed)" if s["errors"] else ""
                lines.append(f"| {name} | {mode} | {c} | {fmt(s['throughput'])}{failed} | {fmt(s['p50_ms'], 2)} | "
                             f"{fmt(s['p99_ms'], 2)} | {fmt(p['throughput'])} | {fmt(p['p50_ms'], 2)} | "
                             f"{fmt(p['p99_ms'], 2)} | {overhead} | {gain} |")
    lines += ["", "The HTTP round trip alone, on the same server (wrk, one connection, GET "
              "/v2/health/ready): the part of the overhead at c=1 that any HTTP server pays; the target "
              "is met only where it is under 10 % of the in-process p50.", "",
              "| model | in-process p50 ms | HTTP round trip p50 ms | share of in-process p50 |",
              "|---|---|---|---|"]
    for name in models:
        if name in floor_res:
            f, p = floor_res[name], inproc_res[(name, 1 if 1 in concurrencies else concurrencies[0])]
            lines.append(f"| {name} | {fmt(p['p50_ms'], 3)} | {fmt(f['p50_ms'], 3)} | "
                         f"{f['p50_ms'] / p['p50_ms'] * 100:.1f} % |")
    lines += ["", "Where the time goes (means, ms): wrk's latency; the server's own time per request from "
              "/metrics (nv_inference_request_duration_us: from the parsed request to the response, "
              "before serialisation) and its session.run per execution (compute_infer per request, "
              "which charges a request its execution's run; with batching one execution runs "
              "`batch` requests on average); the in-process request (set_input + run + output copy).",
              "",
              "| model | mode | concurrency | batch | wrk mean | server request | server run | in-process mean |",
              "|---|---|---|---|---|---|---|---|"]
    for name in models:
        for mode in ("no batching", "batching"):
            if mode == "batching" and not batching_available:
                continue
            for c in concurrencies:
                s, p = server_res[(name, mode, c)], inproc_res[(name, c)]
                lines.append(f"| {name} | {mode} | {c} | {fmt(s.get('mean_batch'), 2)} | {fmt(s['mean_ms'], 3)} | "
                             f"{fmt(s.get('server_request_ms'), 3)} | {fmt(s.get('server_run_ms'), 3)} | "
                             f"{fmt(p['mean_ms'], 3)} |")
    lines += [""] + [f"Note: {n}" for n in notes]
    text = "\n".join(lines).rstrip() + "\n"
    print("\n" + text)
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(os.path.splitext(out_path)[0] + ".json", "w") as f:
        json.dump({"server": [{"model": n, "mode": md, "concurrency": c, **r}
                              for (n, md, c), r in server_res.items()],
                   "http_round_trip": [{"model": n, **r} for n, r in floor_res.items()],
                   "in_process": [{"model": n, "concurrency": c, **r} for (n, c), r in inproc_res.items()],
                   "notes": notes}, f, indent=1)
    with open(out_path, "w") as f:
        f.write(text)
    log(f"wrote {out_path} (and the raw numbers beside it, .json)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
