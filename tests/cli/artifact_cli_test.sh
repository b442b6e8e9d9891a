#!/usr/bin/env bash
# artifact_cli_test.sh — `backplane compile / inspect / run` on a compiled
# artifact (the "Done means" of the compiled-artifacts issue, on resnet18),
# and an artifact with several specialisations of a model with a symbolic dim.
#
#   artifact_cli_test.sh BACKPLANE_CLI MODELS_DIR [PYTHON]
#
# MODELS_DIR is what scripts/gen_models.py wrote. PYTHON must have numpy
# (default /usr/bin/python3).
set -uo pipefail

cli=${1:?usage: artifact_cli_test.sh BACKPLANE_CLI MODELS_DIR [PYTHON]}
models=${2:?usage: artifact_cli_test.sh BACKPLANE_CLI MODELS_DIR [PYTHON]}
py=${3:-/usr/bin/python3}

. "$(dirname "$0")/lib.sh" artifact_cli_test
input="input=$models/resnet18.input.npy"

# 1. The issue's sequence: compile with external data, then run the .bpk.
if "$cli" compile "$models/resnet18.onnx" -o "$tmp/r.bpk" --external-data "$tmp/r.bpd" >"$tmp/compile.out" 2>"$tmp/compile.err" &&
   "$cli" run "$tmp/r.bpk" --json >"$tmp/run.json" 2>"$tmp/run.err"; then
  pass "compile --external-data && run --json: exit 0"
else
  fail "compile && run: $(cat "$tmp/compile.err" "$tmp/run.err")"
fi
[ -s "$tmp/r.bpk" ] && [ -s "$tmp/r.bpd" ] && pass "r.bpk and r.bpd written" || fail "r.bpk / r.bpd missing"
grep -q "r.bpd" "$tmp/compile.out" && pass "compile reports the data file" || fail "compile output: $(cat "$tmp/compile.out")"
"$py" - "$tmp/run.json" <<'EOF' && pass "run --json on the .bpk: one object, partitions, one output" || fail "run --json output"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["model"].endswith("r.bpk"), j["model"]
assert j["partitions"] and all(p["nodes"] for p in j["partitions"]), j["partitions"]
assert [o["shape"] for o in j["outputs"]] == [[1, 1000]], j["outputs"]
assert isinstance(j["notes"], list)
# A backend that serializes (CpuOneDnn when built, else CpuRef) loads its
# stored payload: nothing is recompiled.
assert j["notes"] == [], j["notes"]
EOF

# 2. inspect (text and JSON) shows methods, partitions and every blob.
if "$cli" inspect "$tmp/r.bpk" >"$tmp/inspect.txt" 2>"$tmp/inspect.err"; then
  pass "inspect: exit 0"
  for want in "artifact   " "compile id" "data file  r.bpd" "method     resnet18" "named data" "align 4096" ", r.bpd, segment"; do
    grep -qF "$want" "$tmp/inspect.txt" && pass "inspect text shows '$want'" || fail "inspect text lacks '$want': $(head -20 "$tmp/inspect.txt")"
  done
else
  fail "inspect: $(cat "$tmp/inspect.err")"
fi
if "$cli" inspect "$tmp/r.bpk" --json >"$tmp/inspect.json" 2>"$tmp/inspect.err"; then
  "$py" - "$tmp/inspect.json" <<'EOF' && pass "inspect --json: partitions and blobs with key, size, alignment, file" || fail "inspect --json content"
import json, sys
j = json.load(open(sys.argv[1]))
errors = []
def need(c, what):
    if not c: errors.append(what)
need(j["format"] == "1.2", f"format 1.2 (got {j['format']})")
need(len(j["compile_id"]) == 32, "a 16-byte compile id in hex")
need(j["data_files"] == [{"name": "r.bpd", "data_bytes": j["data_files"][0]["data_bytes"]}] and j["data_files"][0]["data_bytes"] > 40_000_000,
     f"one data file r.bpd with the ~46 MB of weights (got {j['data_files']})")
need(len(j["methods"]) == 1 and j["methods"][0]["name"] == "resnet18", "one method named resnet18")
m = j["methods"][0]
need(m["inputs"] == [{"name": "input", "shape": [1, 3, 224, 224], "declared": "[1,3,224,224]", "dtype": "float32"}], f"inputs (got {m['inputs']})")
need(len(m["specializations"]) == 1 and m["specializations"][0]["signature"] == [{"name": "input", "shape": [1, 3, 224, 224]}],
     f"one specialisation, at the model's shape (got {m['specializations']})")
need(m["specializations"][0]["partitions"] == m["partitions"], "the method's partitions are its first specialisation's")
need(len(m["partitions"]) >= 1 and sum(p["nodes"] for p in m["partitions"]) == m["nodes"], "partitions cover the nodes")
for p in m["partitions"]:
    need(p["backend"] and p["api_version"].count(".") == 1, f"partition backend and api version ({p})")
need(len(j["named_data"]) >= 40, f"resnet18 has >= 40 weights (got {len(j['named_data'])})")
# Portable weights are keyed by method; a backend's own blobs (CpuOneDnn's
# reordered weights) by backend, then method and partition.
backends = {p["backend"] for p in m["partitions"]}
for d in j["named_data"]:
    owner = d["key"].split("/")[0]
    need(d["key"].startswith("resnet18/") or (owner in backends and d["key"].startswith(owner + "/resnet18/")),
         f"key prefixed by the method, or by its backend and the method ({d['key']})")
if "CpuOneDnn" in backends:
    need(any(d["key"].startswith("CpuOneDnn/") for d in j["named_data"]), "CpuOneDnn stores its reordered weights")
    need(all(p["payload_bytes"] > 0 for p in m["partitions"] if p["backend"] == "CpuOneDnn"), "CpuOneDnn payloads")
    need(d["file"] == "r.bpd", f"{d['key']} in r.bpd")
    a = d["alignment"]
    need(a >= 64 and a & (a - 1) == 0, f"{d['key']}: alignment {a} a power of two >= 64")
    need(d["bytes"] < 65536 or a >= 4096, f"{d['key']}: {d['bytes']} bytes page-aligned")
nb = j["named_data_bytes"]
need(nb["requested"] - nb["stored"] == nb["saved_by_dedup"], "saved_by_dedup = requested - stored")
for e in errors: print("  expected:", e)
sys.exit(1 if errors else 0)
EOF
else
  fail "inspect --json: $(cat "$tmp/inspect.err")"
fi

# 3. The compiled model computes what the ONNX model computes: bit for bit
#    on CpuRef, and within tolerance of PyTorch with the default backends.
"$cli" run "$tmp/r.bpk" --input "$input" --output-dir "$tmp/default" >/dev/null 2>"$tmp/err" || fail "run r.bpk --output-dir: $(cat "$tmp/err")"
"$py" - "$tmp/default/output.npy" "$models/resnet18.expected.npy" <<'EOF' && pass "r.bpk output matches PyTorch" || fail "r.bpk output vs expected"
import sys
import numpy as np
got, want = np.load(sys.argv[1]), np.load(sys.argv[2])
assert got.shape == want.shape and got.dtype == np.float32
diff, scale = float(np.max(np.abs(got.astype(np.float64) - want))), float(np.max(np.abs(want)))
print(f"  max|diff| {diff:.3g}, max|expected| {scale:.3g}")
sys.exit(0 if np.all(np.isfinite(got)) and diff <= 1e-4 * scale else 1)
EOF
"$cli" compile "$models/resnet18.onnx" -o "$tmp/c.bpk" --external-data "$tmp/c.bpd" --backends CpuRef --json \
  >"$tmp/compile.json" 2>"$tmp/err" || fail "compile --backends CpuRef --json: $(cat "$tmp/err")"
"$py" - "$tmp/compile.json" <<'EOF' && pass "compile --json: one object with sizes" || fail "compile --json output"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["methods"] == ["resnet18"] and j["external_data"].endswith("c.bpd"), j
assert j["external_bytes"] >= j["named_data_stored_bytes"] > 40_000_000, j
assert j["file_bytes"] < 1_000_000, j
EOF
"$cli" run "$models/resnet18.onnx" --backends CpuRef --input "$input" --output-dir "$tmp/onnx" >/dev/null 2>"$tmp/err" || fail "run onnx: $(cat "$tmp/err")"
"$cli" run "$tmp/c.bpk" --input "$input" --output-dir "$tmp/bpk" >/dev/null 2>"$tmp/err" || fail "run c.bpk: $(cat "$tmp/err")"
"$cli" run "$tmp/c.bpk" --lazy-checksums --input "$input" --output-dir "$tmp/lazy" >/dev/null 2>"$tmp/err" || fail "run --lazy-checksums: $(cat "$tmp/err")"
"$py" - "$tmp/onnx/output.npy" "$tmp/bpk/output.npy" "$tmp/lazy/output.npy" <<'EOF' && pass "c.bpk outputs equal the ONNX run bit for bit (eager and lazy checksums)" || fail "c.bpk outputs differ from the ONNX run"
import sys
import numpy as np
a = np.load(sys.argv[1])
for f in sys.argv[2:]:
    b = np.load(f)
    if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
        sys.exit(f"{f} differs: max|diff| {np.max(np.abs(a - b))}")
EOF

# 4. Errors: exit 1 and a message naming the file.
mkdir -p "$tmp/moved" && mv "$tmp/c.bpd" "$tmp/moved/c.bpd"
"$cli" run "$tmp/c.bpk" >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q '^error: .*c\.bpd' "$tmp/err" && pass "missing .bpd: exit 1, error names it" || fail "missing .bpd: exit $rc, $(cat "$tmp/err")"
"$cli" run "$tmp/c.bpk" --external-data "$tmp/moved/c.bpd" --input "$input" --output-dir "$tmp/moved_out" >/dev/null 2>"$tmp/err" &&
  cmp -s "$tmp/moved_out/output.npy" "$tmp/bpk/output.npy" && pass "moved .bpd given with --external-data: same output" ||
  fail "run --external-data moved: $(cat "$tmp/err")"
"$cli" inspect "$tmp/c.bpk" --external-data "$tmp/moved/c.bpd" >/dev/null 2>"$tmp/err" && pass "inspect --external-data" || fail "inspect --external-data: $(cat "$tmp/err")"
cp "$tmp/r.bpd" "$tmp/c.bpd"
"$cli" run "$tmp/c.bpk" >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q 'another compile' "$tmp/err" && pass "a .bpd of another compile: exit 1, says so" || fail "foreign .bpd: exit $rc, $(cat "$tmp/err")"
"$cli" run "$tmp/c.bpk" --external-data "$tmp/moved/c.bpd" --method nope >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "no method named 'nope'" "$tmp/err" && pass "unknown --method: exit 1" || fail "unknown method: exit $rc, $(cat "$tmp/err")"
"$cli" inspect "$models/resnet18.onnx" >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q 'resnet18.onnx: not a Backplane artifact' "$tmp/err" && pass "inspect of an ONNX file: exit 1" || fail "inspect onnx: exit $rc, $(cat "$tmp/err")"
head -c $(( $(stat -c %s "$tmp/r.bpk") / 2 )) "$tmp/r.bpk" >"$tmp/cut.bpk"
"$cli" run "$tmp/cut.bpk" >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q '^error: .*cut\.bpk' "$tmp/err" && pass "truncated .bpk: exit 1, error names it" || fail "truncated .bpk: exit $rc, $(cat "$tmp/err")"

# 5. Several specialisations of one method (issue 13): a model whose dim
#    'seq' is symbolic, with a Reshape target computed from Shape(x), so every
#    length folds constants of its own.
"$py" - "$tmp/seq.onnx" "$tmp" <<'EOF' || fail "writing seq.onnx and its inputs"
import sys
import numpy as np
import onnx
from onnx import helper as h, numpy_helper as nh, TensorProto as T
rng = np.random.default_rng(7)
inits = [nh.from_array(rng.standard_normal((1, 1, 8)).astype(np.float32), "w"),
         nh.from_array(np.array([0], np.int64), "i0"), nh.from_array(np.array([1], np.int64), "i1"),
         nh.from_array(np.array([1], np.int64), "one")]
nodes = [h.make_node("Shape", ["x"], ["s"]),
         h.make_node("Gather", ["s", "i0"], ["b"], axis=0),
         h.make_node("Gather", ["s", "i1"], ["n"], axis=0),
         h.make_node("Concat", ["b", "n", "one"], ["t"], axis=0),
         h.make_node("Reshape", ["x", "t"], ["r"]),
         h.make_node("Mul", ["r", "w"], ["m"]),
         h.make_node("Softmax", ["m"], ["y"], axis=-1)]
graph = h.make_graph(nodes, "seq", [h.make_tensor_value_info("x", T.FLOAT, [1, "seq"])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, "seq", 8])], inits)
onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 13)]), sys.argv[1])
for n in (4, 9, 5):
    np.save(f"{sys.argv[2]}/x{n}.npy", rng.standard_normal((1, n)).astype(np.float32))
EOF
if "$cli" compile "$tmp/seq.onnx" --shape x=1x4 --shape x=1x9 -o "$tmp/two.bpk" --backends CpuRef >"$tmp/compile.out" 2>"$tmp/err"; then
  grep -q "2 specialisation(s)" "$tmp/compile.out" && pass "compile --shape x=1x4 --shape x=1x9: two specialisations" ||
    fail "compile output: $(cat "$tmp/compile.out")"
else
  fail "compile --shape x=1x4 --shape x=1x9: $(cat "$tmp/err")"
fi
"$cli" inspect "$tmp/two.bpk" >"$tmp/two.txt" 2>"$tmp/err" || fail "inspect two.bpk: $(cat "$tmp/err")"
for want in "inputs x[1,seq], 2 specialisations" "specialisation x=[1,4]: " "specialisation x=[1,9]: "; do
  grep -qF "$want" "$tmp/two.txt" && pass "inspect text shows '$want'" || fail "inspect text lacks '$want': $(cat "$tmp/two.txt")"
done
"$cli" inspect "$tmp/two.bpk" --json >"$tmp/two.json" 2>"$tmp/err" || fail "inspect --json two.bpk: $(cat "$tmp/err")"
"$py" - "$tmp/two.json" <<'EOF' && pass "inspect --json: both signatures with their partitions, the weight once" || fail "inspect --json two.bpk content"
import json, sys
j = json.load(open(sys.argv[1]))
m = j["methods"][0]
assert j["format"] == "1.2", j["format"]
assert m["inputs"] == [{"name": "x", "shape": [1, -1], "declared": "[1,seq]", "dtype": "float32"}], m["inputs"]
assert [s["signature"] for s in m["specializations"]] == [[{"name": "x", "shape": [1, 4]}], [{"name": "x", "shape": [1, 9]}]], m["specializations"]
for s in m["specializations"]:
    # CpuRef compiles shape-polymorphic: stored so, compiled at load (no payload).
    assert s["partitions"] and all(p["polymorphic"] for p in s["partitions"]), s
    assert s["payload_bytes"] == sum(p["payload_bytes"] for p in s["partitions"]) == 0, s
keys = [d["key"] for d in j["named_data"]]
assert keys.count("seq/w") == 1, keys
assert sorted(k for k in keys if "@" in k) == ["seq/t@1x4", "seq/t@1x9"], keys
EOF
"$cli" compile "$tmp/seq.onnx" --shape x=1x4 --shape x=1x9 --no-shape-polymorphic -o "$tmp/concrete.bpk" --backends CpuRef >/dev/null 2>"$tmp/err" &&
  "$cli" inspect "$tmp/concrete.bpk" --json >"$tmp/concrete.json" 2>>"$tmp/err" || fail "compile --no-shape-polymorphic: $(cat "$tmp/err")"
"$py" - "$tmp/concrete.json" <<'EOF' && pass "compile --no-shape-polymorphic: each signature's own payloads" || fail "concrete: $(cat "$tmp/concrete.json")"
import json, sys
m = json.load(open(sys.argv[1]))["methods"][0]
assert len(m["specializations"]) == 2, m["specializations"]
for s in m["specializations"]:
    assert all(not p["polymorphic"] and p["payload_bytes"] > 0 for p in s["partitions"]), s
EOF
"$cli" compile "$tmp/seq.onnx" --shape x=1x4..9 -o "$tmp/range.bpk" --backends CpuRef >/dev/null 2>"$tmp/err" &&
  "$cli" inspect "$tmp/range.bpk" --json >"$tmp/range.json" 2>>"$tmp/err" || fail "compile --shape x=1x4..9: $(cat "$tmp/err")"
"$py" - "$tmp/range.json" <<'EOF' && pass "compile --shape x=1x4..9: both ends compiled" || fail "range: $(cat "$tmp/range.json")"
import json, sys
m = json.load(open(sys.argv[1]))["methods"][0]
assert [s["signature"][0]["shape"] for s in m["specializations"]] == [[1, 4], [1, 9]], m["specializations"]
EOF
# Each stored length loads without a note and computes what the ONNX model
# computes, bit for bit; another length is compiled, with a note.
ok=1
for n in 4 9 5; do
  "$cli" run "$tmp/seq.onnx" --backends CpuRef --input "x=$tmp/x$n.npy" --output-dir "$tmp/onnx$n" >/dev/null 2>"$tmp/err" || { ok=0; fail "run seq.onnx at 1x$n: $(cat "$tmp/err")"; }
  for a in two concrete; do
    "$cli" run "$tmp/$a.bpk" --input "x=$tmp/x$n.npy" --output-dir "$tmp/$a$n" >/dev/null 2>"$tmp/err$a$n" || { ok=0; fail "run $a.bpk at 1x$n: $(cat "$tmp/err$a$n")"; }
    cmp -s "$tmp/onnx$n/y.npy" "$tmp/$a$n/y.npy" || { ok=0; fail "$a.bpk at 1x$n differs from seq.onnx"; }
  done
done
[ $ok -eq 1 ] && pass "two.bpk and concrete.bpk at 1x4, 1x9 and 1x5: outputs equal seq.onnx's bit for bit"
if ! grep -q "note: .*specialisation" "$tmp/errtwo4" "$tmp/errtwo9" "$tmp/errconcrete4" "$tmp/errconcrete9" &&
   grep -q "note: seq: no specialisation stored for x=\[1,5\]; compiled from the portable graph" "$tmp/errtwo5"; then
  pass "a stored length runs without a note; 1x5 says it was compiled from the portable graph"
else
  fail "notes: $(cat "$tmp"/errtwo* "$tmp"/errconcrete*)"
fi
# Mistakes in --shape: exit 1, saying what is wrong.
"$cli" compile "$tmp/seq.onnx" --shape x=1x9..4 -o "$tmp/bad.bpk" >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "LO <= HI" "$tmp/err" && pass "--shape x=1x9..4: exit 1" || fail "reversed range: exit $rc, $(cat "$tmp/err")"
"$cli" compile "$tmp/seq.onnx" --shape x=1x4 --shape q=2 --shape x=1x9 --shape x=1x12 --shape q=3 -o "$tmp/bad.bpk" >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "'q' is given 2 times but not in the specialisation of --shape x=1x9" "$tmp/err" &&
  pass "a name given twice for three specialisations: exit 1, says where it lacks" || fail "uneven --shape: exit $rc, $(cat "$tmp/err")"
"$cli" compile "$tmp/seq.onnx" --shape x=1x4 --shape q=2 -o "$tmp/bad.bpk" >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "'q', which is an input of no method" "$tmp/err" && pass "--shape for no input: exit 1" || fail "unknown input: exit $rc, $(cat "$tmp/err")"
"$cli" run "$tmp/two.bpk" --shape x=1x4..9 >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "for compile only" "$tmp/err" && pass "run --shape with a range: exit 1" || fail "run range: exit $rc, $(cat "$tmp/err")"

finish
