"""Shared fixtures of the Python module's tests (run by ctest, python/tests/CMakeLists.txt).

Environment (set by ctest):
  BACKPLANE_TEST_MODELS  scripts/gen_models.py's output (models, inputs, PyTorch's outputs)
  BACKPLANE_CLI          the `backplane` command line, to compare with
  BACKPLANE_BACKEND_DIR  this build's backend directory (CpuRef and CpuOneDnn modules)
"""
import json
import os
import subprocess

import numpy as np
import pytest

import backplane


def _env(name):
    value = os.environ.get(name)
    if not value:
        pytest.exit(f"{name} is not set (run these tests through ctest)", returncode=2)
    return value


@pytest.fixture(scope="session")
def models_dir():
    return _env("BACKPLANE_TEST_MODELS")


@pytest.fixture(scope="session")
def backend_dir():
    return _env("BACKPLANE_BACKEND_DIR")


@pytest.fixture(scope="session")
def has_onednn(backend_dir):
    return os.path.exists(os.path.join(backend_dir, "Backplane_CpuOneDnn_backend.so"))


class Cli:
    """The command line, run the way a user runs it."""

    def __init__(self, path):
        self.path = path

    def run(self, *args, check=True):
        p = subprocess.run([self.path, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
        if check and p.returncode != 0:
            raise AssertionError(f"backplane {' '.join(map(str, args))} failed: {p.stderr}")
        return p

    def json(self, *args):
        return json.loads(self.run(*args).stdout)

    def error(self, *args):
        """The message of a failing command: its stderr line after 'error: '."""
        p = self.run(*args, check=False)
        assert p.returncode == 1, f"expected exit status 1, got {p.returncode}: {p.stderr}"
        lines = [ln for ln in p.stderr.splitlines() if ln.startswith("error: ")]
        assert len(lines) == 1, p.stderr
        return lines[0][len("error: "):]

    def outputs(self, model, inputs, out_dir, *args):
        """Runs `model` once on `inputs` ({name: array}); returns {output name: array}."""
        os.makedirs(out_dir, exist_ok=True)
        cmd = ["run", model, "--output-dir", out_dir, "--json"]
        for name, array in inputs.items():
            path = os.path.join(out_dir, f"in_{len(cmd)}.npy")
            np.save(path, array)
            cmd += ["--input", f"{name}={path}"]
        result = self.json(*cmd, *args)
        return {o["name"]: np.load(os.path.join(out_dir, o["name"] + ".npy")) for o in result["outputs"]}


@pytest.fixture(scope="session")
def cli():
    return Cli(_env("BACKPLANE_CLI"))


def model_inputs(models_dir, name):
    """NAME.input.npy (one input) or NAME.input.<input>.npy (several), keyed by input name."""
    sess = backplane.InferenceSession(os.path.join(models_dir, name + ".onnx"), backends=["CpuRef"])
    names = [i.name for i in sess.get_inputs()]
    if len(names) == 1 and os.path.exists(os.path.join(models_dir, name + ".input.npy")):
        return {names[0]: np.load(os.path.join(models_dir, name + ".input.npy"))}
    return {n: np.load(os.path.join(models_dir, f"{name}.input.{n}.npy")) for n in names}


def model_expected(models_dir, name, output_names):
    """PyTorch's outputs: NAME.expected.npy (one output) or NAME.expected.<output>.npy."""
    if len(output_names) == 1 and os.path.exists(os.path.join(models_dir, name + ".expected.npy")):
        return [np.load(os.path.join(models_dir, name + ".expected.npy"))]
    return [np.load(os.path.join(models_dir, f"{name}.expected.{n}.npy")) for n in output_names]


def assert_close_to(got, expected, what, rel=1e-4):
    """max|got - expected| <= rel * max|expected|, the e2e tests' criterion."""
    assert got.shape == expected.shape, f"{what}: shape {got.shape}, expected {expected.shape}"
    scale = max(float(np.max(np.abs(expected))), 1e-30)
    diff = float(np.max(np.abs(got.astype(np.float64) - expected.astype(np.float64))))
    assert diff <= rel * scale, f"{what}: max|got-expected| = {diff}, allowed {rel * scale}"
