"""Every public function and attribute of the module, against the C++ API as
the command line reports it."""
import ast
import json
import os

import numpy as np
import pytest

import backplane
from conftest import model_inputs

STUBS = os.path.join(os.path.dirname(backplane.__file__), "__init__.pyi")


def stub_names():
    """Top-level names of the .pyi, and per class its public members."""
    tree = ast.parse(open(STUBS).read())
    top, members = set(), {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            top.add(node.name)
            members[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)} | {
                n.target.id for n in node.body if isinstance(n, ast.AnnAssign)}
        elif isinstance(node, ast.FunctionDef):
            top.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            top.add(node.target.id)
    return {n for n in top if not n.startswith("_") or n == "__version__"}, members


def test_stubs_match_the_module():
    top, members = stub_names()
    public = set(backplane.__all__) | {"__version__"}
    assert top == public, f"only in stubs: {top - public}; only in module: {public - top}"
    for cls, names in members.items():
        actual = {n for n in dir(getattr(backplane, cls)) if not n.startswith("_")}
        if issubclass(getattr(backplane, cls), int):  # an enum: its members, not int's methods
            actual -= set(dir(int))
        names = {n for n in names if not n.startswith("_")}
        if issubclass(getattr(backplane, cls), BaseException):
            assert names <= actual | {"code"}, cls
            continue
        assert names == actual, f"{cls}: only in stubs: {names - actual}; only in module: {actual - names}"


def test_version():
    assert backplane.__version__.count(".") == 2


def test_available_backends_as_the_cli_lists_them(cli, has_onednn):
    listing = cli.json("backends", "--json")
    assert backplane.available_backends() == [b["id"] for b in listing["backends"]]
    assert "CpuRef" in backplane.available_backends()
    assert ("CpuOneDnn" in backplane.available_backends()) == has_onednn
    info = {b.id: b for b in backplane.backends()}
    for b in listing["backends"]:
        got = info[b["id"]]
        assert (got.vendor, got.description, got.api_version) == (b["vendor"], b["description"], b["version"])
        assert got.source == ("static" if b["source"] == "static" else b["path"])
    assert backplane.available_backends(dynamic_backends=False) == ["CpuRef"]
    assert backplane.available_backends(backplane.RuntimeOptions(dynamic_backends=False)) == ["CpuRef"]
    assert backplane.available_backends({"dynamic_backends": False}) == ["CpuRef"]


def test_backend_files_report_every_fate(cli, backend_dir, tmp_path):
    # A directory with a real backend, a file that is no shared object, and a
    # name the loader does not take.
    d = tmp_path / "backends"
    d.mkdir()
    os.symlink(os.path.join(backend_dir, "Backplane_CpuRef_backend.so"), d / "Backplane_CpuRef_backend.so")
    (d / "Acme_Broken_backend.so").write_bytes(b"not an ELF file")
    (d / "Acme_Broken_backend.so").chmod(0o644)
    files = backplane.backend_files(backend_path=str(d))
    listing = cli.json("backends", "--backend-path", d, "--json")
    got = [(f.path, f.canonical_path, f.id, f.fate, f.step, f.reason) for f in files]
    want = [(f["path"], f["canonical_path"], f["id"], f["status"], f["step"], f["reason"]) for f in listing["files"]]
    assert got == want
    fates = {os.path.basename(f.path): f for f in files}
    broken = fates["Acme_Broken_backend.so"]
    assert broken.fate == "rejected" and broken.step == "dlopen" and broken.reason
    assert fates["Backplane_CpuRef_backend.so"].fate == "rejected"  # the static CpuRef keeps its id
    paths = backplane.backend_paths(backend_path=str(d))
    assert [(p.path, p.used) for p in paths] == [(q["path"], q["used"]) for q in listing["paths"]]
    # A relative backend_path means relative to the working directory, as on the command line.
    assert backplane.RuntimeOptions(backend_path="rel").backend_path == os.path.join(os.getcwd(), "rel")


def test_runtime_options(has_onednn, backend_dir):
    o = backplane.RuntimeOptions(threads=1, log_level="error", probe_backends=True)
    assert (o.threads, o.log_level, o.probe_backends, o.dynamic_backends) == (1, "error", True, True)
    assert "threads=1" in repr(o)
    o.trusted_backend_digests = ["0" * 64]
    assert o.trusted_backend_digests == ["0" * 64]
    with pytest.raises(TypeError):
        backplane.RuntimeOptions(thread=1)
    with pytest.raises(backplane.InvalidArgumentError):
        backplane.RuntimeOptions(log_level="loud")
    with pytest.raises(backplane.InvalidArgumentError):
        backplane.available_backends(threads=backplane.max_threads() + 1)
    with pytest.raises(TypeError):
        backplane.available_backends(frobnicate=True)
    assert backplane.max_threads() >= 1
    if has_onednn:
        # Probing runs each file in a child process first; CpuOneDnn passes.
        assert "CpuOneDnn" in backplane.available_backends(probe_backends=True, backend_path=backend_dir)
        # A digest list without CpuOneDnn's keeps it out, at the trust step.
        files = backplane.backend_files(trusted_backend_digests=["0" * 64], backend_path=backend_dir)
        onednn = [f for f in files if "CpuOneDnn" in f.path]
        assert onednn and onednn[0].fate == "rejected" and onednn[0].step == "trust"
        assert "CpuOneDnn" not in backplane.available_backends(trusted_backend_digests=["0" * 64],
                                                               backend_path=backend_dir)
    # Without the static CpuRef, the CpuRef module of the directory registers.
    infos = backplane.backends(disabled_static_backends=["CpuRef"], backend_path=backend_dir)
    cpuref = [b for b in infos if b.id == "CpuRef"]
    assert len(cpuref) == 1 and cpuref[0].source.endswith("Backplane_CpuRef_backend.so")


def test_inputs_outputs(models_dir):
    sess = backplane.InferenceSession(os.path.join(models_dir, "resnet18.onnx"), backends=["CpuRef"])
    (i,) = sess.get_inputs()
    (o,) = sess.get_outputs()
    assert (i.name, i.dtype, i.shape, i.type, i.kind) == ("input", np.dtype("float32"), [1, 3, 224, 224],
                                                        "tensor(float)", "tensor")
    assert (o.name, o.dtype, o.shape) == ("output", np.dtype("float32"), [1, 1000])
    assert "input" in repr(i)
    sess = backplane.InferenceSession(os.path.join(models_dir, "lstm_bidir2.onnx"), backends=["CpuRef"])
    assert [x.name for x in sess.get_inputs()] == ["x", "h0", "c0"]
    assert [x.name for x in sess.get_outputs()] == ["y", "h_n", "c_n"]


def test_run_output_selection_and_input_forms(models_dir):
    path = os.path.join(models_dir, "lstm_bidir2.onnx")
    sess = backplane.InferenceSession(path, backends=["CpuRef"])
    feed = model_inputs(models_dir, "lstm_bidir2")
    y, h, c = sess.run(None, feed)
    h2, y2 = sess.run(["h_n", "y"], feed)
    np.testing.assert_array_equal(h, h2)
    np.testing.assert_array_equal(y, y2)
    assert sess.run([], feed) == []
    # Non-contiguous arrays are converted once; lists take the input's dtype.
    x_f = np.asfortranarray(feed["x"])
    assert not x_f.flags.c_contiguous
    (y3,) = sess.run(["y"], dict(feed, x=x_f))
    np.testing.assert_array_equal(y, y3)
    (y4,) = sess.run(["y"], dict(feed, x=feed["x"].tolist()))
    np.testing.assert_array_equal(y, y4)
    strided = np.repeat(feed["x"], 2, axis=2)[:, :, ::2]
    (y5,) = sess.run(["y"], dict(feed, x=strided))
    np.testing.assert_array_equal(y, y5)
    (y6,) = sess.run(["y"], dict(feed, x=feed["x"].astype(">f4")))  # big-endian bytes
    np.testing.assert_array_equal(y, y6)
    # run_options: None or a dict of known keys.
    with pytest.raises(TypeError):
        sess.run(None, feed, object())
    with pytest.raises(backplane.InvalidArgumentError, match="unknown key 'log_severity_level'"):
        sess.run(None, feed, {"log_severity_level": "0"})
    with pytest.raises(TypeError):
        sess.run(None, [feed["x"]])


def test_plan_description_as_the_cli_gives_it(models_dir, cli, has_onednn):
    path = os.path.join(models_dir, "tiny_cnn.onnx")
    sess = backplane.InferenceSession(path)
    assert json.loads(sess.describe_plan("json")) == cli.json("partition", path, "--json")
    assert sess.describe_plan("text") == cli.run("partition", path).stdout
    assert sess.describe_plan() == sess.describe_plan("text")
    assert sess.describe_plan("dot").lstrip().startswith("digraph")
    with pytest.raises(backplane.InvalidArgumentError):
        sess.describe_plan("svg")
    assert sess.get_providers() == sess.backends_used
    assert sess.backends_used == (["CpuOneDnn"] if has_onednn else ["CpuRef"])
    assert [(p.backend, p.nodes) for p in sess.partitions] == [
        (p["backend"], p["nodes"]) for p in cli.json("run", path, "--json")["partitions"]]
    assert sess.notes == [] and sess.runs_in_stages is False and sess.model_path == path
    p = sess.partitions[0]
    assert p.inputs and p.outputs and isinstance(p.imperative, bool) and isinstance(p.polymorphic, bool)


def test_backends_and_overrides(models_dir, has_onednn):
    path = os.path.join(models_dir, "tiny_cnn.onnx")
    sess = backplane.InferenceSession(path, backends=["CpuRef"])
    assert sess.backends_used == ["CpuRef"]
    first = sess.partitions[0].nodes[0]
    if has_onednn:
        sess = backplane.InferenceSession(path, overrides={first: "CpuRef"})
        assert sess.partitions[0].backend == "CpuRef" and sess.partitions[0].nodes == [first]
        assert sess.backends_used == ["CpuRef", "CpuOneDnn"]
    with pytest.raises(backplane.NotFoundError):
        backplane.InferenceSession(path, overrides={first: "NoSuchBackend"})
    sess = backplane.InferenceSession(path, overrides={first: "NoSuchBackend"}, allow_fallback=True)
    assert sess.partitions
    with pytest.raises(TypeError):
        backplane.InferenceSession(path, backends="CpuRef")
    with pytest.raises(TypeError):
        backplane.InferenceSession(path, no_such_option=1)


def test_model_from_bytes(models_dir, tmp_path):
    path = os.path.join(models_dir, "tiny_cnn.onnx")
    data = open(path, "rb").read()
    x = model_inputs(models_dir, "tiny_cnn")
    (want,) = backplane.InferenceSession(path, backends=["CpuRef"]).run(None, x)
    for form in (data, bytearray(data), memoryview(data)):
        sess = backplane.InferenceSession(form, backends=["CpuRef"])
        assert sess.model_path == "<bytes>"
        np.testing.assert_array_equal(sess.run(None, x)[0], want)
    with pytest.raises(backplane.CorruptDataError, match="^<bytes>: "):
        backplane.InferenceSession(data[:1000])
    # A compiled artifact's bytes too (it stays mapped once its file is gone).
    backplane.compile([path], tmp_path / "t.bpk", backends=["CpuRef"])
    sess = backplane.InferenceSession((tmp_path / "t.bpk").read_bytes())
    assert sess.backends_used == ["CpuRef"]
    np.testing.assert_array_equal(sess.run(None, x)[0], want)
    np.testing.assert_array_equal(sess.run(None, x)[0], want)


def test_compile_inspect_and_load(models_dir, cli, tmp_path, has_onednn):
    src = os.path.join(models_dir, "tiny_cnn.onnx")
    out = tmp_path / "m.bpk"
    report = backplane.compile([src, ("second", src)], out, external_data=tmp_path / "m.bpd")
    assert report["methods"] == ["tiny_cnn", "second"]
    assert report["partitions"] >= 2 and report["external_bytes"] > 0
    assert report["stored_bytes"] < report["requested_bytes"]  # the two methods share weights
    assert os.path.getsize(out) == report["file_bytes"]
    info = backplane.inspect(out)
    assert info == cli.json("inspect", out, "--json")
    assert backplane.inspect(out, as_text=True) == cli.run("inspect", out).stdout
    x = model_inputs(models_dir, "tiny_cnn")
    (want,) = backplane.InferenceSession(src).run(None, x)
    for method in ("tiny_cnn", "second"):
        sess = backplane.InferenceSession(out, method=method)
        np.testing.assert_array_equal(sess.run(None, x)[0], want)
    # A compiled partition whose backend is missing is recompiled, and said so.
    if has_onednn:
        sess = backplane.InferenceSession(out, dynamic_backends=False)
        assert sess.backends_used == ["CpuRef"]
        assert sess.notes and any("CpuOneDnn" in n for n in sess.notes), sess.notes
    with pytest.raises(backplane.InvalidArgumentError):
        backplane.compile([], out)
    with pytest.raises(TypeError):
        backplane.compile(src, out)
    with pytest.raises(backplane.NotFoundError):
        backplane.inspect(tmp_path / "missing.bpk")


def test_compile_with_shapes(models_dir, tmp_path):
    src = os.path.join(models_dir, "encoder_dyn.onnx")
    out = tmp_path / "enc.bpk"
    report = backplane.compile([src], out, shapes=[{"input_ids": [1, 8]}, {"input_ids": [1, 16]}],
                               backends=["CpuRef"], shape_polymorphic=False)
    assert report["specializations"] == 2
    sess = backplane.InferenceSession(out)
    ids = np.arange(16, dtype=np.int64).reshape(1, 16) % 50
    (y,) = sess.run(None, {"input_ids": ids})
    (want,) = backplane.InferenceSession(src, backends=["CpuRef"]).run(None, {"input_ids": ids})
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_contiguous_inputs_are_not_copied(models_dir):
    """numpy reports its data allocations to tracemalloc: a C-contiguous input
    is read in place (only the output is allocated), a Fortran-ordered one is
    copied once."""
    import tracemalloc

    sess = backplane.InferenceSession(os.path.join(models_dir, "resnet18.onnx"), backends=["CpuRef"])
    x = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
    x_f = np.asfortranarray(x)
    sess.run(None, {"input": x})  # the pool's session exists before measuring

    def peak_during_run(array):
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            sess.run(None, {"input": array})
            return tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()

    assert peak_during_run(x) < x.nbytes // 4
    assert peak_during_run(x_f) >= x.nbytes


def test_sequence_and_optional_values(tmp_path):
    """Sequence inputs take lists of arrays and come back as lists; an optional
    input takes None or an array; an empty optional output is None."""
    import onnx
    from onnx import TensorProto, helper

    float2 = helper.make_tensor_type_proto(TensorProto.FLOAT, [2])
    nodes = [helper.make_node("SequenceAt", ["seq", "i"], ["first"], name="at"),
             helper.make_node("SequenceConstruct", ["first", "x"], ["pair"], name="mk"),
             helper.make_node("OptionalHasElement", ["opt"], ["has"], name="has"),
             helper.make_node("Optional", [], ["nothing"], name="none", type=float2)]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
         helper.make_value_info("opt", helper.make_optional_type_proto(float2))],
        [helper.make_tensor_value_info("first", TensorProto.FLOAT, None),
         helper.make_tensor_sequence_value_info("pair", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("has", TensorProto.BOOL, []),
         helper.make_value_info("nothing", helper.make_optional_type_proto(float2))])
    path = str(tmp_path / "seq.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)

    sess = backplane.InferenceSession(path)
    assert sess.runs_in_stages
    assert [(i.name, i.kind, i.type) for i in sess.get_inputs()] == [
        ("seq", "sequence", "seq(tensor(float))"), ("i", "tensor", "tensor(int64)"),
        ("x", "tensor", "tensor(float)"), ("opt", "optional", "optional(tensor(float))")]
    assert [o.kind for o in sess.get_outputs()] == ["tensor", "sequence", "tensor", "optional"]
    a = np.arange(2, dtype=np.float32)
    b = a + 10
    first, pair, has, nothing = sess.run(None, {"seq": [a, b], "i": np.array(1), "x": a, "opt": None})
    np.testing.assert_array_equal(first, b)
    assert isinstance(pair, list) and len(pair) == 2
    np.testing.assert_array_equal(pair[0], b)
    np.testing.assert_array_equal(pair[1], a)
    assert has.dtype == np.bool_ and not has
    assert nothing is None
    first, pair, has, _ = sess.run(None, {"seq": (a, b), "i": np.array(0), "x": b, "opt": a})
    np.testing.assert_array_equal(first, a)
    assert has
    with pytest.raises(backplane.InvalidArgumentError, match="is a sequence"):
        sess.run(None, {"seq": a, "i": np.array(0), "x": b, "opt": a})
