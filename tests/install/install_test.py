#!/usr/bin/python3
"""Install Backplane into a scratch prefix and use it the way an outsider does.

1. `cmake --install BUILD --prefix WORK/prefix`, then check the layout.
2. Build examples/custom_backend in a fresh directory against the prefix
   (find_package(Backplane) + backplane_add_backend), giving
   Example_MyAcc_backend.so.
3. `backplane backends --backend-path DIR --json`: MyAcc is registered.
4. A small ONNX model (Add, Relu, Sigmoid) run with
   `backplane run --backends MyAcc,CpuRef`: Add and Relu run on MyAcc, Sigmoid
   falls back to CpuRef, and the output equals numpy's.
5. A C file including backend_abi.h and a C++ file including backend_sdk.hpp
   compile with nothing but `pkg-config --cflags backplane-backend`.
6. Install the custom backend into the prefix; the installed CLI finds it
   there without options or environment, although Backplane was configured
   for another prefix (the default backend directory is found relative to the
   program), and still after the whole prefix is moved elsewhere.
7. examples/app built against the installed package loads and runs the model.
8. With CpuOneDnn built: the installed `backplane run resnet18.onnx --json`,
   without options or environment, reports CpuOneDnn as the backend used
   (GpuOcl, when built, is installed beside it and found too, but claims
   nothing without an OpenCL GPU; with one, it runs the model).
9. libbackplane.so: SONAME libbackplane.so.MAJOR.MINOR, exports the C++ API
   only; examples/app linked against it (find_package COMPONENTS shared) runs
   the model and needs no libbackplane.a; programs built with nothing but
   `pkg-config backplane` and `pkg-config backplane-static` run.
10. With the Python module built: Debian's python3 imports the installed
   module from the prefix, which uses the installed libbackplane.so and finds
   the prefix's backends beside it (no environment), and runs the model.
11. The installed `backplane conformance` passes for CpuRef, CpuOneDnn, GpuOcl
   (as installed: its hygiene checked, no CPU OpenCL driver opened), MockAcc
   and MockOp, running the ONNX node cases installed in share/backplane/
   conformance and reporting per operator, and fails for MockWrong (one wrong
   kernel), writing the case.
12. The prefix moved elsewhere still finds its backends.

Run by ctest (tests/install/CMakeLists.txt) with /usr/bin/python3, which has
numpy and onnx.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

FAILURES = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)
    return cond


def run(cmd, env=None, cwd=None):
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        print(p.stdout)
        print(p.stderr, file=sys.stderr)
        raise SystemExit(f"command failed with exit status {p.returncode}: {' '.join(cmd)}")
    return p


def make_model(source_dir, path):
    """examples/custom_backend/make_model.py: y = Sigmoid(Relu(x + w)), float32[2,4]. Returns w."""
    run([sys.executable, os.path.join(source_dir, "examples", "custom_backend", "make_model.py"), path])
    model = onnx.load(path)
    return numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "w"))


def reference(x, w):
    return 1.0 / (1.0 + np.exp(-np.maximum(x + w, 0.0)))


# What libbackplane.so may export (demangled, version node stripped): the
# C++ application API of include/backplane/ and nothing below it.
PUBLIC_API_PREFIXES = (
    "backplane::status_code_name(", "backplane::Status::to_string", "backplane::detail::result_error_access(",
    "backplane::detail::ok_status_in_result(", "backplane::dtype_size(", "backplane::dtype_name(",
    "backplane::dtype_from_name(", "backplane::shape_numel(", "backplane::shape_to_string",
    "backplane::checked_size_bytes(", "backplane::Tensor::", "backplane::max_threads()",
    "backplane::fate_name(", "backplane::Runtime::create(", "backplane::inspect_artifact(",
    "backplane::ProfileSummary::to_string", "backplane::Model::metadata() const",
    "backplane::validate(", "backplane::validation_report_json(", "backplane::generated_input(",
    "backplane::TensorCheck::describe", "backplane::numerics::compare(", "backplane::numerics::Comparison::",
    "typeinfo for backplane::", "typeinfo name for backplane::")


def check_shared_library(args, prefix, work, env, model, w):
    libdir = os.path.join(prefix, "lib")
    so = os.path.join(libdir, "libbackplane.so")
    check(os.path.islink(so) and os.path.isfile(so), "installed lib/libbackplane.so (a link to the versioned file)")
    real = os.path.basename(os.path.realpath(so))
    dyn = run(["readelf", "-d", so]).stdout
    sonames = [ln.split("[")[1].rstrip("]") for ln in dyn.splitlines() if "(SONAME)" in ln]
    check(len(sonames) == 1 and sonames[0].startswith("libbackplane.so.") and real.startswith(sonames[0])
          and os.path.exists(os.path.join(libdir, sonames[0])),
          f"libbackplane.so has a versioned SONAME, installed as a link (SONAME {sonames}, file {real})")
    nm = run(["nm", "-D", "-C", "--defined-only", so]).stdout
    exported = sorted({ln.split(" ", 2)[2].split("@")[0] for ln in nm.splitlines()
                       if len(ln.split(" ", 2)) == 3 and ln.split()[1] not in ("A",)})
    stray = [e for e in exported if not e.startswith(PUBLIC_API_PREFIXES)]
    check(not stray, f"libbackplane.so exports the C++ API only (also exports: {stray[:5]})")
    check(any(e.startswith("backplane::Runtime::create(") for e in exported), "libbackplane.so exports Runtime::create")

    # examples/app against the shared component.
    app_build = os.path.join(work, "app_shared_build")
    run([args.cmake, "-S", os.path.join(args.source_dir, "examples", "app"), "-B", app_build, "-G", args.generator,
         f"-DCMAKE_CXX_COMPILER={args.cxx_compiler}", f"-DCMAKE_PREFIX_PATH={prefix}",
         "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF", "-DBACKPLANE_APP_SHARED=ON"], env=env)
    run([args.cmake, "--build", app_build], env=env)
    app = os.path.join(app_build, "backplane_app")
    needed = run(["readelf", "-d", app]).stdout
    check(sonames and f"[{sonames[0]}]" in needed, "the app built with COMPONENTS shared needs libbackplane.so")
    p = run([app, model, "CpuRef"], env=env)
    check("partition on CpuRef: add relu sigmoid" in p.stdout.splitlines(), "the shared-library app runs the model")
    ramp = (-1.0 + 0.25 * np.arange(8, dtype=np.float32)).reshape(2, 4)
    y_lines = [ln for ln in p.stdout.splitlines() if ln.startswith("y float32 [2,4]:")]
    if check(len(y_lines) == 1, "the shared-library app prints output y"):
        got = np.array([float(v) for v in y_lines[0].split(":")[1].split()], dtype=np.float32)
        check(np.allclose(got, reference(ramp, w).ravel(), atol=1e-5), "the shared-library app's output matches numpy")

    # pkg-config: shared and static.
    pc_env = dict(env, PKG_CONFIG_PATH=os.path.join(libdir, "pkgconfig"))
    src = os.path.join(work, "pc_app.cpp")
    with open(src, "w") as f:
        f.write("#include <backplane/runtime.hpp>\n#include <cstdio>\n"
                "int main() { auto rt = backplane::Runtime::create({});\n"
                "  if (!rt.ok()) return 1;\n"
                "  for (const auto& b : (*rt)->backends()) std::printf(\"%s\\n\", b.id.c_str());\n"
                "  return 0; }\n")
    for pc, shared in (("backplane", True), ("backplane-static", False)):
        flags = run([args.pkg_config, "--cflags", "--libs", pc], env=pc_env).stdout.split()
        exe = os.path.join(work, "pc_app_" + pc)
        run([args.cxx_compiler, "-std=c++20", src, "-o", exe] + flags, env=env)
        dyn = run(["readelf", "-d", exe]).stdout
        check(("libbackplane.so" in dyn) == shared,
              f"pkg-config {pc}: the program links libbackplane {'shared' if shared else 'statically'}")
        p = run([exe], env=dict(env, BACKPLANE_BACKEND_PATHS=""))
        check("CpuRef" in p.stdout.split(), f"pkg-config {pc}: the program creates a runtime with CpuRef")


def check_python_module(args, prefix, work, env):
    found = []
    for root, _, files in os.walk(os.path.join(prefix, "lib")):
        found += [os.path.join(root, f) for f in files if f.startswith("_backplane.") and f.endswith(".so")]
    if not os.path.exists(os.path.join(args.build_dir, "python", "backplane")):
        print("skip the Python module: not built")
        return
    if not check(len(found) == 1, f"cmake --install put the Python module in the prefix ({found})"):
        return
    package_dir = os.path.dirname(found[0])
    site_dir = os.path.dirname(package_dir)
    python = "/usr/bin/python3"
    # Debian's python3 looks in these directories of a prefix (site.getsitepackages).
    p = run([python, "-c", f"import site; print('\\n'.join(site.getsitepackages([{prefix!r}])))"])
    check(os.path.realpath(site_dir) in [os.path.realpath(d) for d in p.stdout.split()],
          f"the module's directory {site_dir} is one Debian's python3 reads for the prefix")
    for f in ("__init__.py", "__init__.pyi", "py.typed"):
        check(os.path.isfile(os.path.join(package_dir, f)), "installed backplane/" + f)
    clean_env = {k: v for k, v in env.items() if not k.startswith("BACKPLANE_") and k != "PYTHONPATH"}
    clean_env["PYTHONPATH"] = site_dir
    script = ("import backplane, json\n"
              "print(json.dumps({'file': backplane.__file__, 'backends': backplane.available_backends(),\n"
              "  'files': [(f.path, f.fate) for f in backplane.backend_files()]}))\n")
    p = run([python, "-c", script], env=clean_env, cwd=work)
    got = json.loads(p.stdout)
    check(os.path.realpath(got["file"]).startswith(os.path.realpath(prefix)),
          f"python3 imports the installed module ({got['file']})")
    maps = run([python, "-c", "import backplane; print(open('/proc/self/maps').read())"], env=clean_env).stdout
    libs = {ln.split()[-1] for ln in maps.splitlines() if "libbackplane.so" in ln}
    check(len(libs) == 1 and os.path.realpath(next(iter(libs))).startswith(os.path.realpath(prefix)),
          f"the installed module uses the installed libbackplane.so ({libs})")
    # Step 6 installed MyAcc into the prefix's backend directory only; the
    # compiled-in default path is another prefix's, so finding MyAcc without
    # environment means the module looked beside the installed libbackplane.so.
    loaded = [path for path, fate in got["files"] if fate == "loaded" and "MyAcc" in os.path.basename(path)
              and os.path.realpath(path).startswith(os.path.realpath(prefix))]
    check("MyAcc" in got["backends"] and len(loaded) == 1,
          f"the installed module loads backends from <prefix>/lib/backplane/backends, beside the installed "
          f"libbackplane.so (got {got['backends']}, files {got['files']})")


def main():
    ap = argparse.ArgumentParser()
    for a in ("build-dir", "source-dir", "work-dir", "cmake", "generator", "c-compiler", "cxx-compiler",
              "pkg-config"):
        ap.add_argument("--" + a, required=True)
    ap.add_argument("--models-dir", help="scripts/gen_models.py output (for the CpuOneDnn check)")
    args = ap.parse_args()

    work = args.work_dir
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    prefix = os.path.join(work, "prefix")
    build_cli = os.path.join(args.build_dir, "bin", "backplane")
    # Nothing from the developer's environment may steer discovery.
    env = {k: v for k, v in os.environ.items() if k not in ("BACKPLANE_BACKEND_PATHS", "PKG_CONFIG_PATH")}

    # 1. Install.
    run([args.cmake, "--install", args.build_dir, "--prefix", prefix], env=env)
    for rel in ("include/backplane/backend_abi.h", "include/backplane/backend_sdk.hpp",
                "include/backplane/runtime.hpp", "bin/backplane", "lib/libbackplane.a",
                "lib/backplane/backends/Backplane_CpuRef_backend.so",
                "lib/cmake/Backplane/BackplaneConfig.cmake", "lib/cmake/Backplane/BackplaneConfigVersion.cmake",
                "lib/cmake/Backplane/BackplaneBackend.cmake", "lib/pkgconfig/backplane-backend.pc"):
        check(os.path.exists(os.path.join(prefix, rel)), "installed " + rel)
    check(not os.path.exists(os.path.join(prefix, "lib/backplane/backends/Backplane_Null_backend.so")),
          "the Null skeleton is not installed as a default backend")

    cmake_common = ["-G", args.generator, f"-DCMAKE_C_COMPILER={args.c_compiler}",
                    f"-DCMAKE_CXX_COMPILER={args.cxx_compiler}", f"-DCMAKE_PREFIX_PATH={prefix}",
                    "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF"]

    # 2. The out-of-tree backend.
    backend_build = os.path.join(work, "custom_backend_build")
    run([args.cmake, "-S", os.path.join(args.source_dir, "examples", "custom_backend"), "-B", backend_build]
        + cmake_common + [f"-DCMAKE_INSTALL_PREFIX={prefix}"], env=env)
    run([args.cmake, "--build", backend_build], env=env)
    backend_dir = os.path.join(backend_build, "lib", "backplane", "backends")
    so = os.path.join(backend_dir, "Example_MyAcc_backend.so")
    check(os.path.isfile(so), "built " + so)
    nm = subprocess.run(["nm", "-D", "--defined-only", so], stdout=subprocess.PIPE, text=True)
    exported = sorted(line.split()[-1] for line in nm.stdout.splitlines() if line.strip())
    check(exported == ["BackendFactory", "GetBackendId", "GetBackendScore", "GetVersion"],
          f"the module exports only the entry points (got {exported})")

    # 3. Registered?
    p = run([build_cli, "backends", "--backend-path", backend_dir, "--json"], env=env)
    listing = json.loads(p.stdout)
    mine = [b for b in listing["backends"] if b["id"] == "MyAcc"]
    check(len(mine) == 1, "backplane backends lists MyAcc")
    if mine:
        check(mine[0]["vendor"] == "Example" and mine[0]["source"] == "dynamic", "MyAcc is Example's, dynamic")
    files = [f for f in listing["files"] if os.path.basename(f["path"]) == "Example_MyAcc_backend.so"]
    check(len(files) == 1 and files[0]["status"] == "loaded", "Example_MyAcc_backend.so has status 'loaded'")

    # 4. Run a model on it.
    model = os.path.join(work, "add_relu_sigmoid.onnx")
    w = make_model(args.source_dir, model)
    x = np.linspace(-2.0, 2.0, 8, dtype=np.float32).reshape(2, 4)
    np.save(os.path.join(work, "x.npy"), x)
    out_dir = os.path.join(work, "out")
    p = run([build_cli, "run", model, "--backends", "MyAcc,CpuRef", "--backend-path", backend_dir,
             "--input", "x=" + os.path.join(work, "x.npy"), "--output-dir", out_dir, "--json"], env=env)
    result = json.loads(p.stdout)
    parts = [(q["backend"], q["nodes"]) for q in result["partitions"]]
    check(parts == [("MyAcc", ["add", "relu"]), ("CpuRef", ["sigmoid"])],
          f"partitions: Add+Relu on MyAcc, Sigmoid on CpuRef (got {parts})")
    check(result["backends_used"] == ["MyAcc", "CpuRef"], f"backends_used (got {result['backends_used']})")
    y = np.load(os.path.join(out_dir, "y.npy"))
    check(y.shape == (2, 4) and np.allclose(y, reference(x, w), atol=1e-6), "output y matches numpy")

    # 5. pkg-config only.
    pc_env = dict(env, PKG_CONFIG_PATH=os.path.join(prefix, "lib", "pkgconfig"))
    cflags = run([args.pkg_config, "--cflags", "backplane-backend"], env=pc_env).stdout.split()
    check(any(os.path.realpath(f[2:]) == os.path.realpath(os.path.join(prefix, "include"))
              for f in cflags if f.startswith("-I")), f"pkg-config --cflags points at the prefix ({cflags})")
    c_src = os.path.join(work, "abi_check.c")
    with open(c_src, "w") as f:
        f.write("#include <backplane/backend_abi.h>\n"
                "int main(void) { return BP_API_VERSION_MAJOR == 1u && "
                "BP_BACKEND_API_SIZE_1_0 > sizeof(size_t) ? 0 : 1; }\n")
    run([args.c_compiler, "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"] + cflags
        + [c_src, "-o", os.path.join(work, "abi_check")], env=env)
    run([os.path.join(work, "abi_check")])
    check(True, "backend_abi.h compiles as C99 with pkg-config flags alone")
    cxx_src = os.path.join(work, "sdk_check.cpp")
    with open(cxx_src, "w") as f:
        f.write("#include <backplane/backend_sdk.hpp>\n"
                "int main() { return backplane::sdk::Error(BP_STATUS_INTERNAL, \"x\").code() == "
                "BP_STATUS_INTERNAL ? 0 : 1; }\n")
    run([args.cxx_compiler, "-std=c++17", "-Wall", "-Wextra", "-Werror"] + cflags
        + [cxx_src, "-o", os.path.join(work, "sdk_check")], env=env)
    run([os.path.join(work, "sdk_check")])
    check(True, "backend_sdk.hpp compiles as C++17 with pkg-config flags alone")

    # 6. Install the backend next to CpuRef; the installed CLI finds it there.
    run([args.cmake, "--install", backend_build], env=env)
    installed_dir = os.path.join(prefix, "lib", "backplane", "backends")
    check(os.path.isfile(os.path.join(installed_dir, "Example_MyAcc_backend.so")),
          "cmake --install put Example_MyAcc_backend.so in <prefix>/lib/backplane/backends")
    def check_default_dir(prefix_now, what, inside_build_tree):
        clean = {k: v for k, v in env.items() if not k.startswith("BACKPLANE_")}
        p = run([os.path.join(prefix_now, "bin", "backplane"), "backends", "--json"], env=clean, cwd=work)
        listing = json.loads(p.stdout)
        ids = {b["id"]: b for b in listing["backends"]}
        want = os.path.realpath(os.path.join(prefix_now, "lib", "backplane", "backends"))
        paths = [(q["path"], q["used"]) for q in listing["paths"]]
        # A program inside the build tree (where ctest keeps WORK) also looks
        # in the tree's backends; outside, the prefix is all there is.
        expected = [(want, True)]
        if inside_build_tree:
            expected.append((os.path.realpath(os.path.join(args.build_dir, "lib", "backplane", "backends")), True))
        check(paths == expected, f"{what}: the search paths are <prefix>/lib/backplane/backends "
                                 f"(+ the build tree's when inside it) (got {paths})")
        check("CpuRef" in ids and ids["CpuRef"]["source"] == "static", f"{what}: CpuRef is static")
        check("MyAcc" in ids and os.path.dirname(ids["MyAcc"]["path"]) == want,
              f"{what}: MyAcc loaded from the prefix without options (got {sorted(ids)})")
        if gpuocl_built:
            check("GpuOcl" in ids and (inside_build_tree or os.path.dirname(ids["GpuOcl"]["path"]) == want),
                  f"{what}: GpuOcl loaded without options (got {sorted(ids)})")
        return ids

    gpuocl_built = os.path.exists(os.path.join(args.build_dir, "lib", "backplane", "backends",
                                               "Backplane_GpuOcl_backend.so"))
    if gpuocl_built:
        check(os.path.isfile(os.path.join(installed_dir, "Backplane_GpuOcl_backend.so")),
              "cmake --install put Backplane_GpuOcl_backend.so in the default backend path")
    installed = check_default_dir(prefix, "installed CLI", True)
    gpu = gpuocl_built and any(d.get("selected") for d in installed["GpuOcl"].get("devices", []))

    # 7. The application, against the installed package.
    app_build = os.path.join(work, "app_build")
    run([args.cmake, "-S", os.path.join(args.source_dir, "examples", "app"), "-B", app_build] + cmake_common,
        env=env)
    run([args.cmake, "--build", app_build], env=env)
    p = run([os.path.join(app_build, "backplane_app"), model, "MyAcc,CpuRef"],
            env=dict(env, BACKPLANE_BACKEND_PATHS=installed_dir))
    lines = p.stdout.splitlines()
    check("partition on MyAcc: add relu" in lines and "partition on CpuRef: sigmoid" in lines,
          f"app partitions (got {lines[:2]})")
    ramp = (-1.0 + 0.25 * np.arange(8, dtype=np.float32)).reshape(2, 4)
    y_lines = [ln for ln in lines if ln.startswith("y float32 [2,4]:")]
    if check(len(y_lines) == 1, "app prints output y"):
        got = np.array([float(v) for v in y_lines[0].split(":")[1].split()], dtype=np.float32)
        check(np.allclose(got, reference(ramp, w).ravel(), atol=1e-5), "app output matches numpy")

    # 8. A plain `backplane run resnet18.onnx --json` of the install (no
    #    backend options, no environment) finds the installed CpuOneDnn plugin
    #    and runs the model on it.
    onednn = os.path.join(prefix, "lib", "backplane", "backends", "Backplane_CpuOneDnn_backend.so")
    if os.path.exists(os.path.join(args.build_dir, "lib", "backplane", "backends", "Backplane_CpuOneDnn_backend.so")):
        check(os.path.isfile(onednn), "cmake --install put Backplane_CpuOneDnn_backend.so in the default backend path")
        if args.models_dir:
            clean_env = {k: v for k, v in env.items() if not k.startswith("BACKPLANE_")}
            p = run([os.path.join(prefix, "bin", "backplane"), "run", os.path.join(args.models_dir, "resnet18.onnx"),
                     "--json"], env=clean_env, cwd=work)
            result = json.loads(p.stdout)
            want_used = "GpuOcl" if gpu else "CpuOneDnn"
            check(result["backends_used"][:1] == [want_used],
                  f"installed `backplane run resnet18.onnx --json`: {want_used} used "
                  f"(got {result['backends_used']})")

    check_shared_library(args, prefix, work, env, model, w)
    check_python_module(args, prefix, work, env)

    # 11. `backplane conformance` of the install, no build tree needed for its
    #    cases: CpuRef, CpuOneDnn and the test accelerators (built, not
    #    installed: --backend-path) pass; MockWrong, one wrong kernel, fails
    #    and leaves its smallest failing case as an ONNX model.
    installed_cli = os.path.join(prefix, "bin", "backplane")
    clean = {k: v for k, v in env.items() if not k.startswith("BACKPLANE_")}
    accel = os.path.join(args.build_dir, "lib", "backplane", "testing")
    runs = [["--backend", "CpuRef"]]
    if os.path.exists(onednn):
        runs.append(["--backend", "CpuOneDnn"])
    if gpuocl_built:
        runs.append(["--backend", "GpuOcl"])
    runs += [["--backend", m, "--backend-path", accel] for m in ("MockAcc", "MockOp")]
    # The ONNX node cases come with the install and are found beside its bin/.
    case_data = os.path.join(prefix, "share", "backplane", "conformance")
    n_cases = len(os.listdir(os.path.join(case_data, "node"))) if os.path.isdir(os.path.join(case_data, "node")) else 0
    check(n_cases > 500, f"installed share/backplane/conformance/node holds the ONNX node cases ({n_cases})")
    for extra in runs:
        p = subprocess.run([installed_cli, "conformance"] + extra, env=clean, cwd=work,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        summary = [ln for ln in p.stdout.splitlines() if " passed, " in ln and not ln.startswith("  ")]
        check(p.returncode == 0 and summary and " 0 failed" in summary[-1],
              f"installed conformance {' '.join(extra[:2])}: {summary[-1] if summary else p.stdout[-500:]}")
        onnx_line = [ln for ln in p.stdout.splitlines() if ": ONNX node cases (" in ln]
        ran = [ln for ln in p.stdout.splitlines() if ln.startswith("  ") and ": " in ln and " passed, " in ln]
        # GpuOcl without a GPU claims no operator: nothing to report per operator.
        claims = extra[1] != "GpuOcl" or gpu
        check(onnx_line and onnx_line[0].split("(")[1].startswith(os.path.realpath(case_data) + ",")
              and (ran or not claims),
              f"installed conformance {extra[1]}: runs the installed ONNX cases, reports per "
              f"operator ({onnx_line[0] if onnx_line else 'no ONNX line'}; {len(ran)} operators)")
        if extra[1] == "GpuOcl":
            kept = [ln for ln in p.stdout.splitlines() if ln.startswith("  ") and ln.endswith(": kept")]
            check(len(kept) == 9, f"installed conformance GpuOcl: every hygiene rule kept ({len(kept)} of 9)")
        print("\n".join(ln for ln in p.stdout.splitlines() if not ln.startswith("  ")), flush=True)
    cases = os.path.join(work, "conformance_cases")
    p = subprocess.run([installed_cli, "conformance", "--backend", "MockWrong", "--backend-path",
                        os.path.join(args.build_dir, "lib", "backplane", "testing_wrong"), "--case-dir", cases],
                       env=clean, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    check(p.returncode == 1 and os.path.isfile(os.path.join(cases, "MockWrong_Add_op.onnx")),
          f"installed conformance --backend MockWrong fails and writes the case (exit {p.returncode})")
    check("  FAIL  onnx: node/test_add_bcast: " in p.stdout,
          "installed conformance --backend MockWrong: the ONNX case test_add_bcast fails too")
    if os.path.isfile(os.path.join(cases, "MockWrong_Add_op.onnx")):
        m = onnx.load(os.path.join(cases, "MockWrong_Add_op.onnx"))
        onnx.checker.check_model(m)
        check([n.op_type for n in m.graph.node] == ["Add"], "the case file is a valid one-node Add model")

    # 12. Relocatable: the whole prefix moved; the CLI follows it.
    outside = tempfile.mkdtemp(prefix="backplane_install_")
    moved = os.path.join(outside, "elsewhere")
    try:
        shutil.move(prefix, moved)
        check_default_dir(moved, "prefix moved out of the build tree", False)
    finally:
        shutil.move(moved, prefix)
        shutil.rmtree(outside, ignore_errors=True)
    moved = prefix
    cfg = open(os.path.join(moved, "lib", "cmake", "Backplane", "BackplaneConfig.cmake")).read()
    check("set(Backplane_BACKEND_DIR \"${PACKAGE_PREFIX_DIR}/lib/backplane/backends\")" in cfg,
          "BackplaneConfig.cmake computes Backplane_BACKEND_DIR from its own location")

    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed:\n  " + "\n  ".join(FAILURES))
        return 1
    shutil.rmtree(work, ignore_errors=True)
    print("all install checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
