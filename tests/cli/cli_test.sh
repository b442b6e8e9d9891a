#!/usr/bin/env bash
# cli_test.sh — the `backplane run` contract of DESIGN.md ("The command line").
#
#   cli_test.sh BACKPLANE_CLI MODELS_DIR [PYTHON]
#
# MODELS_DIR is what scripts/gen_models.py wrote (resnet18.onnx, .input.npy,
# .expected.npy). PYTHON must have numpy (default /usr/bin/python3).
set -uo pipefail

cli=${1:?usage: cli_test.sh BACKPLANE_CLI MODELS_DIR [PYTHON]}
models=${2:?usage: cli_test.sh BACKPLANE_CLI MODELS_DIR [PYTHON]}
py=${3:-/usr/bin/python3}

. "$(dirname "$0")/lib.sh" cli_test

# 1. A real run: exit 0, one JSON object on stdout, outputs written and right.
"$cli" run "$models/resnet18.onnx" --backends CpuRef \
  --input "input=$models/resnet18.input.npy" --output-dir "$tmp/out" --runs 2 --json \
  >"$tmp/stdout" 2>"$tmp/stderr"
rc=$?
if [ $rc -ne 0 ]; then
  fail "run resnet18: exit $rc, stderr: $(cat "$tmp/stderr")"
else
  pass "run resnet18: exit 0"
  if "$py" - "$tmp/stdout" "$models/resnet18.onnx" <<'EOF'; then pass "run --json: one object with the documented keys"; else fail "run --json output"; fi
import json, sys
text = open(sys.argv[1]).read()
try:
    j = json.loads(text)  # raises on anything but exactly one JSON document
except ValueError as e:
    sys.exit(f"stdout is not one JSON document: {e}: {text[:500]!r}")
errors = []
def need(cond, what):
    if not cond:
        errors.append(what)
need(isinstance(j, dict), "top level is an object")
for k in ("model", "backends_used", "partitions", "load_ms", "latency_ms", "outputs"):
    need(k in j, f"key '{k}' present")
if not errors:
    need(j["model"].endswith("resnet18.onnx"), "model names the file")
    need(j["backends_used"] == ["CpuRef"], f"backends_used == ['CpuRef'] (got {j['backends_used']})")
    need(isinstance(j["partitions"], list) and len(j["partitions"]) >= 1, "partitions is a non-empty list")
    for p in j["partitions"]:
        need(p.get("backend") == "CpuRef", f"partition backend CpuRef (got {p.get('backend')})")
        need(isinstance(p.get("nodes"), list) and len(p["nodes"]) > 0, "partition has nodes")
    need(sum(len(p.get("nodes", [])) for p in j["partitions"]) >= 20, "partitions cover the graph's nodes")
    need(isinstance(j["load_ms"], (int, float)) and j["load_ms"] >= 0, "load_ms is a non-negative number")
    lat = j["latency_ms"]
    need(isinstance(lat, dict) and all(isinstance(lat.get(k), (int, float)) for k in ("min", "median", "max")),
         "latency_ms has numeric min/median/max")
    if not errors:
        need(0 <= lat["min"] <= lat["median"] <= lat["max"], f"min <= median <= max (got {lat})")
    outs = j["outputs"]
    need(isinstance(outs, list) and len(outs) == 1, "one output")
    if not errors:
        o = outs[0]
        need(o.get("name") == "output", f"output name 'output' (got {o.get('name')})")
        need(o.get("shape") == [1, 1000], f"output shape [1, 1000] (got {o.get('shape')})")
        need(o.get("dtype") == "float32", f"output dtype float32 (got {o.get('dtype')})")
for e in errors:
    print("  expected:", e)
sys.exit(1 if errors else 0)
EOF
  if "$py" - "$tmp/out/output.npy" "$models/resnet18.expected.npy" <<'EOF'; then pass "output.npy matches PyTorch"; else fail "output.npy vs expected"; fi
import sys
import numpy as np
got = np.load(sys.argv[1])
want = np.load(sys.argv[2])
if got.dtype != np.float32 or got.shape != want.shape:
    sys.exit(f"  got {got.dtype}{got.shape}, expected float32{want.shape}")
diff = float(np.max(np.abs(got.astype(np.float64) - want)))
scale = float(np.max(np.abs(want)))
print(f"  max|diff| {diff:.3g}, max|expected| {scale:.3g}")
sys.exit(0 if np.all(np.isfinite(got)) and diff <= 1e-4 * scale else 1)
EOF
fi

# 2. Usage error: exit 2.
"$cli" run "$models/resnet18.onnx" --no-such-flag >"$tmp/stdout" 2>"$tmp/stderr"
rc=$?
if [ $rc -eq 2 ]; then pass "unknown flag: exit 2"; else fail "unknown flag: exit $rc, expected 2"; fi
"$cli" >"$tmp/stdout" 2>"$tmp/stderr"
rc=$?
if [ $rc -eq 2 ]; then pass "no subcommand: exit 2"; else fail "no subcommand: exit $rc, expected 2"; fi

# 3. Failure: exit 1 and "error: ..." naming the file on stderr.
"$cli" run "$tmp/no_such_model.onnx" --backends CpuRef >"$tmp/stdout" 2>"$tmp/stderr"
rc=$?
if [ $rc -eq 1 ] && grep -q '^error: ' "$tmp/stderr" && grep -q 'no_such_model.onnx' "$tmp/stderr"; then
  pass "missing model: exit 1, error on stderr"
else
  fail "missing model: exit $rc, stderr: $(cat "$tmp/stderr")"
fi

# 4. A bad --input is a failure too (wrong input name).
"$cli" run "$models/resnet18.onnx" --backends CpuRef --input "nope=$models/resnet18.input.npy" \
  >"$tmp/stdout" 2>"$tmp/stderr"
rc=$?
if [ $rc -eq 1 ] && grep -q '^error: .*nope' "$tmp/stderr"; then
  pass "unknown input name: exit 1, error names it"
else
  fail "unknown input name: exit $rc, stderr: $(cat "$tmp/stderr")"
fi

# 5. A model with symbolic dims (encoder_dyn: input_ids [batch, seq]).
# Without --input or --shape there is no size for pseudo-random inputs.
"$cli" run "$models/encoder_dyn.onnx" --backends CpuRef >"$tmp/stdout" 2>"$tmp/stderr"
rc=$?
if [ $rc -eq 1 ] && grep -q "^error: .*'input_ids' \[batch,seq\] has open dims.*--shape" "$tmp/stderr"; then
  pass "open dims without a shape: exit 1, names the input, its dims and --shape"
else
  fail "open dims without a shape: exit $rc, stderr: $(cat "$tmp/stderr")"
fi
# --shape gives it; the JSON's output shape is the run's.
"$cli" run "$models/encoder_dyn.onnx" --backends CpuRef --shape input_ids=2x7 --json \
  >"$tmp/stdout" 2>"$tmp/stderr"
rc=$?
if [ $rc -eq 0 ] && "$py" -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if j['outputs'][0]['shape']==[2,7,64] else 1)" "$tmp/stdout"; then
  pass "run --shape input_ids=2x7: output [2,7,64]"
else
  fail "run --shape: exit $rc, stdout: $(cat "$tmp/stdout"), stderr: $(cat "$tmp/stderr")"
fi
# A malformed --shape is a usage error of the command (exit 1 with error:).
"$cli" run "$models/encoder_dyn.onnx" --backends CpuRef --shape input_ids=2xq >"$tmp/stdout" 2>"$tmp/stderr"
rc=$?
if [ $rc -ne 0 ] && grep -q "^error: .*'q' is not a non-negative dim" "$tmp/stderr"; then
  pass "bad --shape: error names the dim"
else
  fail "bad --shape: exit $rc, stderr: $(cat "$tmp/stderr")"
fi
# A fixed dim that differs, through --input: the error names input and dim.
"$py" -c "import numpy as np; np.save('$tmp/ids3.npy', np.zeros((1,2,3), dtype=np.int64))"
"$cli" run "$models/encoder_dyn.onnx" --backends CpuRef --input "input_ids=$tmp/ids3.npy" \
  >"$tmp/stdout" 2>"$tmp/stderr"
rc=$?
if [ $rc -eq 1 ] && grep -q "^error: .*input 'input_ids'.*rank" "$tmp/stderr"; then
  pass "wrong rank: exit 1, names the input"
else
  fail "wrong rank: exit $rc, stderr: $(cat "$tmp/stderr")"
fi
# partition needs the shapes to plan.
"$cli" partition "$models/encoder_dyn.onnx" --backends CpuRef >"$tmp/stdout" 2>"$tmp/stderr"
rc=$?
if [ $rc -eq 1 ] && grep -q "^error: .*are open; give them with --shape" "$tmp/stderr"; then
  pass "partition of open shapes: exit 1, asks for --shape"
else
  fail "partition of open shapes: exit $rc, stderr: $(cat "$tmp/stderr")"
fi
"$cli" partition "$models/encoder_dyn.onnx" --backends CpuRef --shape input_ids=1x9 >"$tmp/stdout" 2>"$tmp/stderr"
rc=$?
if [ $rc -eq 0 ] && grep -q "partition 0" "$tmp/stdout"; then
  pass "partition --shape: a plan"
else
  fail "partition --shape: exit $rc, stderr: $(cat "$tmp/stderr")"
fi

# --profile: a Chrome trace and the summary; an unwritable path is an error
# naming it after a run whose outputs are the same.
"$cli" run "$models/tiny_cnn.onnx" --backends CpuRef --input "input=$models/tiny_cnn.input.npy" \
  --runs 3 --profile "$tmp/trace.json" --json >"$tmp/stdout" 2>"$tmp/stderr"
rc=$?
if [ $rc -eq 0 ] && "$py" - "$tmp/stdout" "$tmp/trace.json" <<'EOF'; then pass "run --profile: trace and summary"; else fail "run --profile: exit $rc, stderr: $(cat "$tmp/stderr")"; fi
import json, sys
j = json.load(open(sys.argv[1]))
p = j["profile"]
assert p["trace"] == sys.argv[2] and p["runs"] == 4, p
assert any(r["name"] == "CpuRef" for r in p["by_backend"]), p
assert any(r["name"] == "Conv" and r["ms"] > 0 for r in p["by_op_type"]), p
events = json.load(open(sys.argv[2]))["traceEvents"]
assert sum(e.get("cat") == "run" for e in events) == 4, events[:5]
assert all(e["ph"] in ("X", "M") for e in events)
EOF
"$cli" run "$models/tiny_cnn.onnx" --backends CpuRef --input "input=$models/tiny_cnn.input.npy" \
  --output-dir "$tmp/plain" >/dev/null 2>&1
"$cli" run "$models/tiny_cnn.onnx" --backends CpuRef --input "input=$models/tiny_cnn.input.npy" \
  --output-dir "$tmp/profiled" --profile "$tmp/no-such-dir/trace.json" >"$tmp/stdout" 2>"$tmp/stderr"
rc=$?
if [ $rc -eq 1 ] && grep -q "^error: .*$tmp/no-such-dir/trace.json" "$tmp/stderr" &&
   cmp -s "$tmp/plain/output.npy" "$tmp/profiled/output.npy"; then
  pass "run --profile to an unwritable path: exit 1, names it, outputs unchanged"
else
  fail "run --profile unwritable: exit $rc, stderr: $(cat "$tmp/stderr")"
fi

finish
