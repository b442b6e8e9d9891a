"""The deployment material in deploy/ checked against itself, the server and
the rules of what runs it: the KServe ServingRuntime and InferenceServices
(deploy/kserve), the image (deploy/Dockerfile) and the nginx example
(deploy/nginx/backplane.conf).

Needs python3-yaml; the nginx test needs nginx (Debian's package `nginx`).
The image is checked as text (no docker here); its runtime package list is
also checked against `ldd` of the built programs and backends when a build
tree is there (BACKPLANE_SERVE / BACKPLANE_CLI, or build/bin of the source
tree).
"""
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from urllib.parse import urlparse

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEPLOY = os.path.join(ROOT, "deploy")
RUNTIME_YAML = os.path.join(DEPLOY, "kserve", "serving-runtime.yaml")
ISVC_YAML = os.path.join(DEPLOY, "kserve", "inference-service.yaml")
DOCKERFILE = os.path.join(DEPLOY, "Dockerfile")
NGINX_CONF = os.path.join(DEPLOY, "nginx", "backplane.conf")

# Where KServe's storage initializer puts the storageUri's content
# (DefaultModelLocalMountPath in KServe's constants).
KSERVE_MODEL_DIR = "/mnt/models"
# The port KServe routes to when the container declares none
# (InferenceServiceDefaultHttpPort).
KSERVE_DEFAULT_PORT = 8080
# The Open Inference Protocol's health endpoints.
LIVE_PATH = "/v2/health/live"
READY_PATH = "/v2/health/ready"
# Packages every debian:12-slim has (essential, or what the essential ones
# depend on), so the image need not install them.
SLIM_BASE = {"libc6", "libgcc-s1", "zlib1g"}
# The server's own libraries, and the oneDNN backend's: the image needs them
# whether or not a build tree is here to ldd.
SERVER_RUNTIME_PACKAGES = {"libgrpc++1.51", "libprometheus-cpp-core1.0", "libcivetweb1",
                           "libjemalloc2", "libprotobuf32", "libdnnl2"}


# ---- helpers -----------------------------------------------------------------

def load_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def runtime():
    docs = load_docs(RUNTIME_YAML)
    assert len(docs) == 1, "serving-runtime.yaml holds %d documents" % len(docs)
    return docs[0]


def kserve_container(rt=None):
    rt = rt or runtime()
    named = [c for c in rt["spec"]["containers"] if c.get("name") == "kserve-container"]
    assert len(named) == 1, "the runtime needs exactly one container named kserve-container"
    return named[0]


def flag(args, name):
    """The value of --name=VALUE or --name VALUE in an argument list."""
    values = []
    for i, a in enumerate(args):
        if a.startswith(name + "="):
            values.append(a[len(name) + 1:])
        elif a == name and i + 1 < len(args):
            values.append(args[i + 1])
    assert len(values) == 1, "%s given %d times in %r" % (name, len(values), args)
    return values[0]


def runtime_ports():
    args = kserve_container()["args"]
    return int(flag(args, "--http-port")), int(flag(args, "--grpc-port"))


def quantity(q):
    """A Kubernetes resource quantity as a number (cpu in cores, memory in bytes)."""
    q = str(q)
    suffixes = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
                "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "m": 1e-3}
    for s, mult in suffixes.items():
        if q.endswith(s):
            return float(q[:-len(s)]) * mult
    return float(q)


def dockerfile_stages():
    """[{'image', 'name', 'instructions': [(INSTRUCTION, text)]}] from deploy/Dockerfile:
    continuation lines joined, comments (also inside continuations) dropped."""
    with open(DOCKERFILE) as f:
        lines = f.read().split("\n")
    instructions, current = [], None
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#") or (not stripped and current is None):
            continue
        if current is None:
            current = stripped
        else:
            current += " " + stripped
        if current.endswith("\\"):
            current = current[:-1].rstrip()
            continue
        if current:
            word, _, rest = current.partition(" ")
            instructions.append((word.upper(), rest.strip()))
        current = None
    assert current is None, "the Dockerfile ends in a continuation line"
    stages = []
    for word, rest in instructions:
        if word == "FROM":
            m = re.fullmatch(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", rest, re.I)
            assert m, "FROM %s" % rest
            stages.append({"image": m.group(1), "name": m.group(2), "instructions": []})
        else:
            assert stages, "%s before the first FROM" % word
            stages[-1]["instructions"].append((word, rest))
    return stages


def instructions(stage, word):
    return [rest for w, rest in stage["instructions"] if w == word]


def exec_form(text):
    """An instruction's JSON (exec) form as a list."""
    value = json.loads(text)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), text
    return value


def apt_installs(stage):
    """The packages the stage's RUNs name to `apt-get install`."""
    packages = []
    for run in instructions(stage, "RUN"):
        tokens = shlex.split(run, posix=True)
        for i, t in enumerate(tokens):
            if t == "install" and i > 0 and tokens[i - 1] in ("apt-get", "apt"):
                for u in tokens[i + 1:]:
                    if u in ("&&", "||", ";", "|") or u.endswith(";"):
                        break
                    if not u.startswith("-"):
                        packages.append(u)
    return packages


def builder_and_runtime():
    stages = dockerfile_stages()
    assert len(stages) >= 2, "the Dockerfile should be multi-stage (build, then runtime)"
    return stages[0], stages[-1]


def server_defaults():
    """The server's default ports and request limit, read from its source."""
    with open(os.path.join(ROOT, "serve", "main.cpp")) as f:
        main = f.read()
    http = re.search(r"\bhttp_port\s*=\s*(\d+)", main)
    grpc = re.search(r"\bgrpc_port\s*=\s*(\d+)", main)
    with open(os.path.join(ROOT, "serve", "server.hpp")) as f:
        header = f.read()
    limit = re.search(r"max_request_bytes\s*=\s*size_t\{(\d+)\}\s*<<\s*(\d+)", header)
    assert http and grpc and limit, "serve/main.cpp or serve/server.hpp no longer says its defaults"
    return int(http.group(1)), int(grpc.group(1)), int(limit.group(1)) << int(limit.group(2))


def nginx_size(text):
    m = re.fullmatch(r"(\d+)([kKmMgG]?)", text)
    assert m, "size %r" % text
    return int(m.group(1)) * {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}[m.group(2).lower()]


def nginx_text():
    with open(NGINX_CONF) as f:
        return "\n".join(line.split("#", 1)[0] for line in f.read().split("\n"))


def nginx_blocks(text, kind):
    """{name or argument: body} of every `kind ARG { ... }` block (one nesting level)."""
    blocks = {}
    for m in re.finditer(r"\b%s\b\s*([^{;]*)\{" % kind, text):
        depth, i = 1, m.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        blocks.setdefault(m.group(1).strip(), []).append(text[m.end():i - 1])
    return blocks


# ---- the ServingRuntime --------------------------------------------------------

def test_runtime_is_a_kserve_serving_runtime_named_backplane():
    rt = runtime()
    assert rt["apiVersion"] == "serving.kserve.io/v1alpha1"
    assert rt["kind"] == "ServingRuntime"
    assert rt["metadata"]["name"] == "backplane"


def test_runtime_supports_onnx_1_and_selects_it():
    formats = runtime()["spec"]["supportedModelFormats"]
    onnx = [f for f in formats if f["name"] == "onnx"]
    assert len(onnx) == 1, formats
    # A string: KServe compares versions as strings, and YAML's 1 is an int.
    assert onnx[0]["version"] == "1"
    assert onnx[0].get("autoSelect") is True


def test_runtime_speaks_both_open_inference_protocols():
    assert sorted(runtime()["spec"]["protocolVersions"]) == ["grpc-v2", "v2"]


def test_runtime_serves_the_directory_kserve_mounts_on_kserves_port():
    c = kserve_container()
    assert c["image"] == "backplane/serve:latest"
    assert flag(c["args"], "--model-repository") == KSERVE_MODEL_DIR
    http, grpc = runtime_ports()
    # No declared port: KServe then routes to 8080, so REST must be there.
    assert http == KSERVE_DEFAULT_PORT
    assert grpc != http
    # A port declared here would be merged with an InferenceService's (the
    # gRPC one), and Knative allows one port; KServe's Triton runtime
    # declares none either.
    assert not c.get("ports"), "the runtime container declares ports: %r" % c.get("ports")


@pytest.mark.parametrize("probe,path", [("readinessProbe", READY_PATH),
                                        ("livenessProbe", LIVE_PATH),
                                        ("startupProbe", LIVE_PATH)])
def test_runtime_probes_are_the_protocol_health_endpoints_on_the_rest_port(probe, path):
    c = kserve_container()
    if probe == "startupProbe" and probe not in c:
        pytest.skip("no startup probe")
    assert probe in c, "no %s" % probe
    get = c[probe].get("httpGet")
    assert get, "%s is not an HTTP GET: %r" % (probe, c[probe])
    assert get["path"] == path
    assert get["port"] == runtime_ports()[0]
    assert get.get("scheme", "HTTP") == "HTTP"


def test_runtime_prometheus_annotations_name_the_rest_port_and_metrics():
    annotations = runtime()["spec"]["annotations"]
    port = annotations["prometheus.kserve.io/port"]
    path = annotations["prometheus.kserve.io/path"]
    assert isinstance(port, str), "annotation values must be strings, got %r" % port
    assert int(port) == runtime_ports()[0]
    assert path == "/metrics"


def test_runtime_resources_are_bounded():
    resources = kserve_container()["resources"]
    for key in ("cpu", "memory"):
        request = quantity(resources["requests"][key])
        limit = quantity(resources["limits"][key])
        assert 0 < request <= limit, (key, request, limit)


def test_runtime_runs_as_the_images_non_root_user():
    security = kserve_container()["securityContext"]
    assert security["runAsNonRoot"] is True
    assert security.get("allowPrivilegeEscalation") is False
    _, image = builder_and_runtime()
    users = instructions(image, "USER")
    assert users, "the image sets no USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "USER %s: runAsNonRoot needs a numeric uid" % uid
    assert security.get("runAsUser", int(uid)) == int(uid)


# ---- the InferenceServices ------------------------------------------------------

def inference_services():
    docs = load_docs(ISVC_YAML)
    assert docs, "inference-service.yaml is empty"
    return docs


def test_inference_services_use_the_runtime_by_name_and_format():
    rt = runtime()
    formats = {(f["name"], f.get("version")) for f in rt["spec"]["supportedModelFormats"]}
    names = []
    for isvc in inference_services():
        assert isvc["apiVersion"] == "serving.kserve.io/v1beta1"
        assert isvc["kind"] == "InferenceService"
        name = isvc["metadata"]["name"]
        # InferenceService names become DNS-1035 labels (Services, hosts).
        assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 63, name
        names.append(name)
        model = isvc["spec"]["predictor"]["model"]
        assert model["runtime"] == rt["metadata"]["name"]
        fmt = model["modelFormat"]
        assert (fmt["name"], fmt.get("version", "1")) in formats, fmt
        assert model["protocolVersion"] in rt["spec"]["protocolVersions"]
        uri = urlparse(model["storageUri"])
        assert uri.scheme in ("gs", "s3", "pvc", "https", "hdfs", "azure", "oci"), uri
        assert uri.netloc and uri.path.strip("/"), model["storageUri"]
    assert len(set(names)) == len(names), names


def test_inference_services_cover_rest_and_grpc_on_the_runtimes_ports():
    http, grpc = runtime_ports()
    protocols = set()
    for isvc in inference_services():
        model = isvc["spec"]["predictor"]["model"]
        protocols.add(model["protocolVersion"])
        ports = model.get("ports") or []
        if model["protocolVersion"] == "grpc-v2":
            # Knative and KServe route HTTP/2 to a port named h2c (or grpc*).
            assert len(ports) == 1, ports
            assert ports[0]["containerPort"] == grpc
            assert ports[0]["name"] == "h2c"
            # In Knative mode the liveness/startup probes would be aimed at
            # this port, which cannot answer the runtime's HTTP probes.
            mode = isvc["metadata"].get("annotations", {}).get("serving.kserve.io/deploymentMode")
            assert mode in ("RawDeployment", "Standard"), mode
        else:
            assert all(p["containerPort"] == http for p in ports), ports
    assert protocols == {"v2", "grpc-v2"}, protocols


# ---- the image -------------------------------------------------------------------

def test_dockerfile_builds_on_debian_12_and_runs_on_slim():
    builder, image = builder_and_runtime()
    assert builder["image"] == "debian:12" and builder["name"]
    assert image["image"] == "debian:12-slim"
    runs = " ".join(instructions(builder, "RUN"))
    assert "scripts/install-deps.sh" in runs
    assert os.path.exists(os.path.join(ROOT, "scripts", "install-deps.sh"))
    # Nothing is compiled in the runtime stage.
    assert not any(p.endswith("-dev") or p in ("build-essential", "cmake", "g++")
                   for p in apt_installs(image)), apt_installs(image)


def test_dockerfile_configures_with_the_projects_options():
    builder, _ = builder_and_runtime()
    runs = " ".join(instructions(builder, "RUN"))
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        options = set(re.findall(r"^\s*option\((BACKPLANE_\w+)", f.read(), re.M))
    given = dict(re.findall(r"-D(BACKPLANE_\w+)=(\S+)", runs))
    assert given, "no -DBACKPLANE_... option in the build"
    unknown = set(given) - options
    assert not unknown, "not options of CMakeLists.txt: %s" % sorted(unknown)
    assert given.get("BACKPLANE_BUILD_TESTS") == "OFF"
    assert given.get("BACKPLANE_WITH_SERVER", "ON") == "ON"
    assert re.search(r"cmake -S \. -B build\b.*-DCMAKE_BUILD_TYPE=Release", runs)
    assert re.search(r"cmake --build build\b", runs)


def test_dockerfile_runs_the_installed_backplane_serve():
    builder, image = builder_and_runtime()
    runs = " ".join(instructions(builder, "RUN"))
    m = re.search(r"cmake --install build --prefix (\S+)", runs)
    assert m, "the build does not cmake --install"
    prefix = m.group(1).rstrip("/")
    copies = [c for c in instructions(image, "COPY") if c.startswith("--from=")]
    sources = []
    for c in copies:
        parts = c.split()
        assert parts[0] == "--from=" + builder["name"], c
        sources += parts[1:-1]
    assert sources and all(s.startswith(prefix + "/") for s in sources), sources
    assert any(s.rstrip("/") == prefix + "/bin" for s in sources), "bin/ is not copied"
    assert any(s.rstrip("/") == prefix + "/lib/backplane" for s in sources), \
        "the backends (lib/backplane/backends) are not copied"
    entry = exec_form(instructions(image, "ENTRYPOINT")[-1])
    assert os.path.basename(entry[0]) == "backplane-serve"
    assert entry[0] in ("backplane-serve", prefix + "/bin/backplane-serve"), entry


def test_dockerfile_ports_and_defaults_are_the_runtimes():
    _, image = builder_and_runtime()
    exposed = set()
    for e in instructions(image, "EXPOSE"):
        exposed.update(int(p.split("/")[0]) for p in e.split())
    assert exposed == set(runtime_ports())
    # The image run alone does what the ServingRuntime asks of it.
    cmd = exec_form(instructions(image, "CMD")[-1])
    assert cmd == kserve_container()["args"]
    for health in instructions(image, "HEALTHCHECK"):
        assert READY_PATH in health or LIVE_PATH in health
        assert str(runtime_ports()[0]) in health


def test_dockerfile_runtime_packages_exist_and_cover_the_server():
    _, image = builder_and_runtime()
    packages = apt_installs(image)
    assert len(packages) == len(set(packages)), packages
    missing = SERVER_RUNTIME_PACKAGES - set(packages)
    assert not missing, "the runtime stage does not install %s" % sorted(missing)
    if shutil.which("apt-cache") is None or subprocess.run(
            ["apt-cache", "show", "libc6"], capture_output=True).returncode != 0:
        pytest.skip("no apt package lists here to check the names against")
    out = subprocess.run(["apt-cache", "show", "--no-all-versions"] + packages,
                         capture_output=True, text=True).stdout
    known = set(re.findall(r"^Package:\s*(\S+)", out, re.M))
    unknown = sorted(set(packages) - known)
    assert not unknown, "not Debian packages: %s" % unknown


def built_binaries():
    """backplane-serve, backplane and the backends of a build tree, if there is one."""
    bins = [os.environ.get("BACKPLANE_SERVE"), os.environ.get("BACKPLANE_CLI")]
    bins = [b for b in bins if b and os.path.isfile(b)]
    bin_dir = os.path.dirname(bins[0]) if bins else os.path.join(ROOT, "build", "bin")
    for name in ("backplane-serve", "backplane"):
        path = os.path.join(bin_dir, name)
        if os.path.isfile(path) and path not in bins:
            bins.append(path)
    backends = glob.glob(os.path.join(bin_dir, "..", "lib", "backplane", "backends", "*.so"))
    return bins + sorted(backends)


def packages_of(paths):
    """{path: package} for the files dpkg knows (trying each with and without /usr)."""
    candidates = {}
    for p in paths:
        for c in (p, os.path.realpath(p)):
            candidates[c] = p
            if c.startswith("/usr/"):
                candidates[c[4:]] = p
            else:
                candidates["/usr" + c] = p
    out = subprocess.run(["dpkg", "-S"] + sorted(candidates), capture_output=True, text=True)
    owners = {}
    for line in out.stdout.splitlines():
        pkg, _, path = line.partition(": ")
        if path.strip() in candidates and "," not in pkg:
            owners[candidates[path.strip()]] = pkg.split(":")[0]
    return owners


def test_dockerfile_runtime_packages_cover_what_the_build_links():
    files = built_binaries()
    if not files or shutil.which("ldd") is None or shutil.which("dpkg") is None:
        pytest.skip("no build tree (or no ldd/dpkg) to derive the libraries from")
    libs = set()
    for f in files:
        out = subprocess.run(["ldd", f], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            m = re.search(r"=>\s+(/\S+)", line)
            assert "not found" not in line, "%s: %s" % (f, line.strip())
            if m:
                libs.add(m.group(1))
    owners = packages_of(libs)
    unowned = sorted(set(libs) - set(owners))
    assert not unowned, "no Debian package owns %s" % unowned
    _, image = builder_and_runtime()
    needed = set(owners.values()) - SLIM_BASE
    missing = needed - set(apt_installs(image))
    assert not missing, "%s link libraries of %s, which the image does not install" % (
        [os.path.basename(f) for f in files], sorted(missing))


# ---- nginx -------------------------------------------------------------------------

def test_nginx_balances_three_replicas_on_the_servers_ports():
    text = nginx_text()
    upstreams = nginx_blocks(text, "upstream")
    http_port, grpc_port, _ = server_defaults()
    ports = {}
    for name, bodies in upstreams.items():
        assert len(bodies) == 1, "upstream %s defined twice" % name
        servers = re.findall(r"^\s*server\s+(\S+?):(\d+)([^;]*);", bodies[0], re.M)
        assert len(servers) == 3, "upstream %s: %d servers" % (name, len(servers))
        assert len({host for host, _, _ in servers}) == 3, servers
        for host, port, params in servers:
            # Passive health: open-source nginx has no active checks.
            assert re.search(r"\bmax_fails=\d+", params) and re.search(
                r"\bfail_timeout=\d+", params), (name, host, params)
        assert re.search(r"^\s*keepalive\s+\d+\s*;", bodies[0], re.M), "upstream %s" % name
        ports[name] = {int(port) for _, port, _ in servers}
    rest = re.findall(r"proxy_pass\s+http://(\w+)\s*;", text)
    grpc = re.findall(r"grpc_pass\s+grpc://(\w+)\s*;", text)
    assert len(set(rest)) == 1 and len(set(grpc)) == 1, (rest, grpc)
    assert ports[rest[0]] == {http_port}, "REST upstream not on the server's HTTP port"
    assert ports[grpc[0]] == {grpc_port}, "gRPC upstream not on the server's gRPC port"


def test_nginx_retries_and_accepts_what_the_server_accepts():
    text = nginx_text()
    _, _, limit = server_defaults()
    sizes = re.findall(r"client_max_body_size\s+(\S+)\s*;", text)
    assert sizes and all(nginx_size(s) == limit for s in sizes), (sizes, limit)
    servers = [b for bodies in nginx_blocks(text, "server").values() for b in bodies]
    grpc_servers = [b for b in servers if "grpc_pass" in b]
    rest_servers = [b for b in servers if "proxy_pass" in b]
    assert len(grpc_servers) == 1 and len(rest_servers) == 1
    # gRPC is HTTP/2: nginx 1.22 (Debian 12) says so on the listen line.
    assert re.search(r"^\s*listen\s+\S+\s+http2\b", grpc_servers[0], re.M)
    retry = re.search(r"proxy_next_upstream\s+([^;]+);", rest_servers[0])
    assert retry, "no proxy_next_upstream"
    conditions = retry.group(1).split()
    # Inference is idempotent, so a POST may be retried on another replica.
    assert {"error", "timeout", "http_503", "non_idempotent"} <= set(conditions), conditions
    assert re.search(r"proxy_http_version\s+1\.1\s*;", rest_servers[0])
    assert re.search(r'proxy_set_header\s+Connection\s+""\s*;', rest_servers[0])


def test_nginx_accepts_the_config():
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx")
                                      else None)
    assert nginx, "nginx is not installed (Debian: apt-get install nginx)"
    with tempfile.TemporaryDirectory() as tmp:
        with open(NGINX_CONF) as f:
            conf = f.read()
        # The replicas' names resolve only where they run; nginx -t resolves
        # every upstream server, so test with loopback.
        conf, n = re.subn(r"^(\s*server\s+)[^\s:;]+:(\d+)", r"\g<1>127.0.0.1:\2", conf,
                          flags=re.M)
        assert n == 6, "expected 6 upstream servers to rewrite, found %d" % n
        site = os.path.join(tmp, "backplane.conf")
        with open(site, "w") as f:
            f.write(conf)
        main = os.path.join(tmp, "nginx.conf")
        with open(main, "w") as f:
            f.write("error_log %(t)s/error.log;\npid %(t)s/nginx.pid;\nevents {}\nhttp {\n"
                    "    access_log %(t)s/access.log;\n"
                    "    client_body_temp_path %(t)s/body;\n    proxy_temp_path %(t)s/proxy;\n"
                    "    fastcgi_temp_path %(t)s/fastcgi;\n    uwsgi_temp_path %(t)s/uwsgi;\n"
                    "    scgi_temp_path %(t)s/scgi;\n    include %(s)s;\n}\n"
                    % {"t": tmp, "s": site})
        out = subprocess.run([nginx, "-t", "-p", tmp, "-e", os.path.join(tmp, "error.log"),
                              "-c", main], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "test is successful" in out.stderr, out.stderr
