"""`pip install --no-build-isolation .` in a venv made with
--system-site-packages, without a package index: the package it installs
imports from the venv, carries its runtime and backends, and runs a model.

Packages this build (BACKPLANE_BUILD_DIR), so the test does not compile the
project a second time; setup.py's own configure-and-build path differs only
in the directory it builds in.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

SOURCE = os.environ.get("BACKPLANE_SOURCE_DIR", "")
BUILD = os.environ.get("BACKPLANE_BUILD_DIR", "")


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    if not SOURCE or not BUILD:
        pytest.exit("BACKPLANE_SOURCE_DIR and BACKPLANE_BUILD_DIR must be set (run through ctest)", returncode=2)
    d = str(tmp_path_factory.mktemp("venv") / "venv")
    subprocess.check_call(["/usr/bin/python3", "-m", "venv", "--system-site-packages", d])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("BACKPLANE_")}
    env["BACKPLANE_BUILD_DIR"] = BUILD
    env["BACKPLANE_JOBS"] = "2"
    env["PIP_NO_INDEX"] = "1"  # nothing may come from a package index
    p = subprocess.run([os.path.join(d, "bin", "pip"), "install", "--no-build-isolation", "."], cwd=SOURCE,
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert p.returncode == 0, p.stdout
    yield d
    shutil.rmtree(d, ignore_errors=True)


def venv_python(venv, code):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("BACKPLANE_")}
    p = subprocess.run([os.path.join(venv, "bin", "python"), "-c", code], env=env, cwd="/",
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_the_package_imports_from_the_venv_with_its_runtime(venv, models_dir):
    out = json.loads(venv_python(venv, f"""
import json, os, backplane, numpy as np
sess = backplane.InferenceSession({os.path.join(models_dir, "tiny_cnn.onnx")!r})
(y,) = sess.run(None, {{"input": np.ones((1, 3, 32, 32), np.float32)}})
libs = sorted({{l.split()[-1] for l in open("/proc/self/maps") if "libbackplane.so" in l}})
import importlib.metadata
print(json.dumps({{"file": backplane.__file__, "backends": backplane.available_backends(),
    "version": backplane.__version__, "dist_version": importlib.metadata.version("backplane"),
    "files": [(f.path, f.fate) for f in backplane.backend_files()], "libs": libs,
    "used": sess.backends_used, "y": y.tolist()}}))
"""))
    package = os.path.dirname(out["file"])
    # pyproject.toml states the version the module was built with (CMake's project version).
    assert out["dist_version"] == out["version"], out
    assert os.path.realpath(package).startswith(os.path.realpath(venv)), out["file"]
    for f in ("__init__.pyi", "py.typed"):
        assert os.path.isfile(os.path.join(package, f)), f
    assert len(out["libs"]) == 1 and os.path.realpath(out["libs"][0]).startswith(os.path.realpath(package))
    assert "CpuRef" in out["backends"]
    onednn_built = os.path.exists(os.path.join(BUILD, "lib", "backplane", "backends", "Backplane_CpuOneDnn_backend.so"))
    if onednn_built:
        loaded = [p for p, fate in out["files"] if fate == "loaded" and "CpuOneDnn" in p]
        assert loaded and os.path.realpath(loaded[0]).startswith(os.path.realpath(package)), out["files"]
        assert out["used"] == ["CpuOneDnn"]
    assert len(out["y"][0]) > 0


def test_the_installed_stubs_name_the_module(venv):
    # The stubs parse as Python and name what the installed module has.
    out = venv_python(venv, """
import ast, os, backplane
tree = ast.parse(open(os.path.join(os.path.dirname(backplane.__file__), "__init__.pyi")).read())
names = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
print(sorted(set(backplane.__all__) - names))
""")
    assert out.strip() == "[]"
