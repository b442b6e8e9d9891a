"""Programs written as ONNX Runtime's Python documentation writes them, each starting
`import backplane as ort` (ort_programs/), run unchanged. Each leaves result.npz: the model
it ran, the feeds and outputs of its last run. Those outputs must equal the C++ API's
(`backplane run`) and ONNX Runtime's (npm onnxruntime-node through tests/corpus/ort_run.js)
for the same model and feeds, under the numerics policy. Then what ORT programs meet when
they ask for what Backplane does not do: clear errors, naming the alternative.
"""
import glob
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import backplane as ort
from backplane import numerics

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = sorted(glob.glob(os.path.join(HERE, "ort_programs", "p*.py")))
ORT_RUN = os.path.join(HERE, "..", "..", "tests", "corpus", "ort_run.js")


def ort_module():
    module = os.environ.get("BACKPLANE_ORT_MODULE", "")
    if not os.path.exists(os.path.join(module, "package.json")) or shutil.which("node") is None:
        pytest.fail(f"needs node and onnxruntime-node at '{module}' (scripts/fetch-corpus.sh BUILD_DIR)")
    return module


@pytest.fixture
def work(tmp_path, models_dir):
    """A directory holding every test model, as a program's working directory."""
    for path in glob.glob(os.path.join(models_dir, "*.onnx")):
        os.symlink(path, tmp_path / os.path.basename(path))
    return tmp_path


def run_onnxruntime(model, feeds, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    listed = []
    for k, (name, array) in enumerate(feeds.items()):
        np.save(os.path.join(out_dir, f"in_{k}.npy"), array)
        listed.append({"name": name, "file": f"in_{k}.npy"})
    with open(os.path.join(out_dir, "inputs.json"), "w") as f:
        json.dump({"inputs": listed}, f)
    p = subprocess.run(["node", ORT_RUN, ort_module(), model, out_dir, "1", "0"], capture_output=True, text=True)
    assert p.returncode == 0, f"ONNX Runtime failed on {model}: {p.stderr[-2000:]}"
    with open(os.path.join(out_dir, "ort_result.json")) as f:
        result = json.load(f)
    return {o["name"]: np.load(os.path.join(out_dir, o["file"])) for o in result["outputs"]}


def expect_same(got, ref, who):
    for name, y in got.items():
        assert name in ref, f"{who} has no output '{name}'"
        c = numerics.compare(y, ref[name])
        assert c.within, f"output '{name}' against {who}: {c.describe()}"


@pytest.mark.parametrize("program", PROGRAMS, ids=[os.path.basename(p)[:-3] for p in PROGRAMS])
def test_program(program, work, cli):
    p = subprocess.run([sys.executable, program], cwd=work, capture_output=True, text=True)
    assert p.returncode == 0, f"{os.path.basename(program)} failed:\n{p.stdout}\n{p.stderr}"
    with np.load(work / "result.npz") as r:
        model = str(work / str(r["model"]))
        feeds = {k[3:]: r[k] for k in r.files if k.startswith("in.")}
        outputs = {k[4:]: r[k] for k in r.files if k.startswith("out.")}
    assert outputs, "the program saved no outputs"
    expect_same(outputs, cli.outputs(model, feeds, str(work / "cli")), "the C++ API (backplane run)")
    expect_same(outputs, run_onnxruntime(model, feeds, str(work / "onnxruntime")), "ONNX Runtime")


def test_there_are_enough_programs():
    assert len(PROGRAMS) >= 15


# ---------------------------------------------------------------- what is refused, and how

def test_unknown_provider_lists_the_available_ones(models_dir):
    with pytest.raises(ValueError) as e:
        ort.InferenceSession(os.path.join(models_dir, "tiny_cnn.onnx"), providers=["CPUExecutionProvder"])
    assert "CPUExecutionProvder" in str(e.value) and "CPUExecutionProvider" in str(e.value)
    assert "CpuRef" in str(e.value)


def test_no_available_provider_is_an_error(models_dir):
    with pytest.warns(UserWarning, match="CUDAExecutionProvider"):
        with pytest.raises(ValueError, match="none of the providers"):
            ort.InferenceSession(os.path.join(models_dir, "tiny_cnn.onnx"), providers=["CUDAExecutionProvider"])


def test_provider_options_reach_the_backend(models_dir):
    path = os.path.join(models_dir, "tiny_cnn.onnx")
    sess = ort.InferenceSession(path, providers=["CpuRef"], provider_options=[{}])
    assert sess.get_providers() == ["CpuRef"]
    assert sess.get_provider_options() == {"CpuRef": {}}
    # A key the backend does not know is the backend's error, not ignored.
    with pytest.raises(ort.Error, match="no_such_key"):
        ort.InferenceSession(path, providers=[("CpuRef", {"no_such_key": "1"})])
    with pytest.raises(ValueError, match="use_arena|no counterpart"):
        ort.InferenceSession(path, providers=[("CPUExecutionProvider", {"gpu_mem_limit": "1"})])


def test_options_that_would_change_results_are_refused():
    so = ort.SessionOptions()
    with pytest.raises(ValueError, match="could change results"):
        so.add_session_config_entry("session.set_denormal_as_zero", "1")
    with pytest.raises(NotImplementedError, match="backend"):
        so.register_custom_ops_library("libcustom.so")
    with pytest.raises(AttributeError):
        so.intra_op_threads = 2  # a typo is an error, as in ORT
    with pytest.raises(ValueError, match="host memory"):
        ort.OrtValue.ortvalue_from_numpy(np.zeros(3, np.float32), "cuda", 0)
    with pytest.raises(TypeError, match="SessionOptions"):
        ort.InferenceSession("model.onnx", {"intra_op_num_threads": 2})


def test_earlier_positional_arguments_still_work(models_dir):
    path = os.path.join(models_dir, "tiny_cnn.onnx")
    sess = ort.InferenceSession(path, ["CpuRef"])
    assert sess.backends_used == ["CpuRef"]
    sess = ort.InferenceSession(path, backends=["CpuRef"], threads=1)
    assert sess.get_providers() == ["CpuRef"]


def test_bound_output_of_the_wrong_shape_fails_cleanly(models_dir):
    sess = ort.InferenceSession(os.path.join(models_dir, "tiny_cnn.onnx"))
    binding = sess.io_binding()
    binding.bind_cpu_input("input", np.zeros((1, 3, 32, 32), np.float32))
    binding.bind_ortvalue_output("output", ort.OrtValue.ortvalue_from_shape_and_type([1, 9], np.float32))
    with pytest.raises(ort.Error, match="output"):
        sess.run_with_iobinding(binding)
    # The session is still usable, and no longer writes into that array.
    (y,) = sess.run(None, {"input": np.zeros((1, 3, 32, 32), np.float32)})
    assert y.shape == (1, 10)
