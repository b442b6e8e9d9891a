"""Each error class, and the message: the one `backplane` prints after 'error: '."""
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import backplane

# Every class, its code (backplane::StatusCode) and the builtin it also derives from.
CLASSES = [
    (backplane.InvalidArgumentError, 1, "invalid argument", ValueError),
    (backplane.UnsupportedError, 2, "unsupported", None),
    (backplane.UnimplementedError, 3, "unimplemented", NotImplementedError),
    (backplane.OutOfMemoryError, 4, "out of memory", MemoryError),
    (backplane.NotFoundError, 5, "not found", LookupError),
    (backplane.CorruptDataError, 6, "corrupt data", None),
    (backplane.VersionMismatchError, 7, "version mismatch", None),
    (backplane.DeviceError, 8, "device error", None),
    (backplane.InternalError, 9, "internal error", None),
    (backplane.IoError, 10, "i/o error", OSError),
    (backplane.BackendError, 11, "backend error", None),
]


@pytest.mark.parametrize("cls,code,name,builtin", CLASSES, ids=[c[0].__name__ for c in CLASSES])
def test_each_code_raises_its_class(cls, code, name, builtin):
    assert issubclass(cls, backplane.Error) and cls.__module__ == "backplane"
    assert cls.code == name
    if builtin:
        assert issubclass(cls, builtin)
    with pytest.raises(cls) as e:
        backplane._backplane._raise_status(code, "file.onnx: node 'n' (Op): reason")
    assert str(e.value) == "file.onnx: node 'n' (Op): reason"
    assert type(e.value) is cls


def test_unknown_code_raises_the_base_class():
    with pytest.raises(backplane.Error) as e:
        backplane._backplane._raise_status(99, "m")
    assert type(e.value) is backplane.Error


def save(model, path):
    onnx.save(model, str(path))
    return str(path)


def one_node_model(path, op, domain="", opset=17):
    node = helper.make_node(op, ["x"], ["y"], name="the_node", domain=domain)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return save(helper.make_model(graph, opset_imports=imports), path)


def check_like_cli(cli, cls, make, *cli_args):
    with pytest.raises(cls) as e:
        make()
    assert str(e.value) == cli.error(*cli_args)
    return str(e.value)


def test_load_errors_carry_the_cli_message(cli, models_dir, tmp_path):
    tiny = os.path.join(models_dir, "tiny_cnn.onnx")
    missing = str(tmp_path / "missing.onnx")
    check_like_cli(cli, backplane.NotFoundError, lambda: backplane.InferenceSession(missing), "run", missing)
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(open(tiny, "rb").read()[:1000])
    check_like_cli(cli, backplane.CorruptDataError, lambda: backplane.InferenceSession(truncated), "run", truncated)
    check_like_cli(cli, backplane.IoError, lambda: backplane.InferenceSession(tmp_path), "run", tmp_path)
    unknown_op = one_node_model(tmp_path / "frob.onnx", "Frobnicate", domain="acme")
    msg = check_like_cli(cli, backplane.UnsupportedError, lambda: backplane.InferenceSession(unknown_op),
                         "run", unknown_op)
    assert "frob.onnx" in msg and "node 'the_node' (Frobnicate)" in msg  # file, node, reason
    future = one_node_model(tmp_path / "opset40.onnx", "Relu", opset=40)
    check_like_cli(cli, backplane.VersionMismatchError, lambda: backplane.InferenceSession(future), "run", future)
    check_like_cli(cli, backplane.NotFoundError, lambda: backplane.InferenceSession(tiny, backends=["Nope"]),
                   "run", tiny, "--backends", "Nope")
    bpk = tmp_path / "t.bpk"
    backplane.compile([tiny], bpk)
    data = bytearray(open(bpk, "rb").read())
    data[12] ^= 0xFF
    flipped = tmp_path / "flipped.bpk"
    flipped.write_bytes(data)
    check_like_cli(cli, backplane.CorruptDataError, lambda: backplane.InferenceSession(flipped), "run", flipped)
    check_like_cli(cli, backplane.InvalidArgumentError,
                   lambda: backplane.available_backends(log_level="loud"), "backends", "--log-level", "loud")


def test_run_errors_carry_the_cli_message(cli, models_dir, tmp_path):
    tiny = os.path.join(models_dir, "tiny_cnn.onnx")
    sess = backplane.InferenceSession(tiny)
    wrong = np.zeros((1, 3, 32, 32), np.float64)
    np.save(tmp_path / "x.npy", wrong)
    check_like_cli(cli, backplane.InvalidArgumentError, lambda: sess.run(None, {"input": wrong}),
                   "run", tiny, "--input", f"input={tmp_path / 'x.npy'}")
    # (The CLI specialises for an --input's shape at load, so a wrong shape
    # fails there; a session checks it when the input is given.)
    short = np.zeros((1, 3, 32, 31), np.float32)
    with pytest.raises(backplane.InvalidArgumentError) as e:
        sess.run(None, {"input": short})
    assert str(e.value) == (f"{tiny}: input 'input' expects shape [1,3,32,32], got [1,3,32,31]: "
                            "dim 3 is fixed at 32")
    # Errors the CLI cannot make: named like it names the model.
    with pytest.raises(backplane.InvalidArgumentError, match=r"tiny_cnn.onnx: input 'input' is not given"):
        sess.run(None, {})
    with pytest.raises(backplane.InvalidArgumentError, match=r"no input named 'bogus'"):
        sess.run(None, {"input": short, "bogus": short})
    with pytest.raises(backplane.NotFoundError, match=r"no output named 'nope' \(outputs: output\)"):
        sess.run(["nope"], {"input": np.zeros((1, 3, 32, 32), np.float32)})
    with pytest.raises(backplane.InvalidArgumentError, match=r"numpy dtype complex128 is not supported"):
        sess.run(None, {"input": np.zeros((1, 3, 32, 32), np.complex128)})
    # The session stays usable after each error.
    x = np.ones((1, 3, 32, 32), np.float32)
    (y,) = sess.run(None, {"input": x})
    np.testing.assert_array_equal(y, backplane.InferenceSession(tiny).run(None, {"input": x})[0])
