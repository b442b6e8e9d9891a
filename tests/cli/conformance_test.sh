#!/bin/bash
# `backplane conformance` catches what it is for: a backend with one wrong
# kernel (MockWrong: a broadcasting Add off by 0.5) fails, naming the cases,
# and its smallest failing case is written as an ONNX model with .npy inputs
# whose two printed `backplane run` commands really disagree; --strict turns
# MockAcc's rejected int32 Add into failures; the ONNX node cases: a wrong
# result against ONNX's expected outputs fails, with its case written, and
# operators that no case covers are named; bad input is a clear error.
#
#   conformance_test.sh BACKPLANE MOCKACC_SO MOCKWRONG_SO PYTHON TAMPERED_DIR
# (TAMPERED_DIR: two ONNX node cases with one expected value altered,
# scripts/gen_conformance.py --tampered-out)
# (the backends' files, not their directories: a sanitizer run builds what a
# test's command line names, scripts/ci_targets.py)
cli=$1
accel=$(dirname "$2")
wrong=$(dirname "$3")
python=$4
tampered=$5
. "$(dirname "$0")/lib.sh" conformance

# The wrong kernel.
out=$("$cli" conformance --backend MockWrong --backend-path "$wrong" --case-dir "$tmp/cases" 2>&1)
status=$?
echo "$out" | tail -6
[ "$status" -eq 1 ] && pass "MockWrong: exit status 1" || fail "MockWrong: exit status $status"
echo "$out" | grep -q "^MockWrong: [0-9]* passed, [1-9][0-9]* failed, [0-9]* unsupported" &&
  pass "MockWrong: the summary counts failures" || fail "MockWrong: no failure counted"
echo "$out" | grep -q "FAIL  Add \[2,3,4\] \[4\] float32: output 0: max|got-ref| .* at \[0,0,0\]" &&
  pass "MockWrong: a broadcasting Add is named, with the element" || fail "MockWrong: Add not named"
if echo "$out" | grep "FAIL" | grep -q "Add \[2,3,4\] \[2,3,4\] float32"; then
  fail "MockWrong: the same-shape Add (right) was reported"
else
  pass "MockWrong: the same-shape Add (right) passes"
fi
echo "$out" | grep -q "smallest failing case: Add \[1\] \[2,3\] float32" &&
  pass "MockWrong: the smallest failing case is chosen" || fail "MockWrong: smallest case"
model="$tmp/cases/MockWrong_Add_op.onnx"
[ -s "$model" ] && [ -s "$tmp/cases/MockWrong_Add_op.a.npy" ] &&
  pass "MockWrong: the case and its inputs are written" || fail "MockWrong: no case file"
# The two printed commands, run as printed (with this build's CLI).
rerun=$(echo "$out" | sed -n 's/^  rerun: backplane //p')
ref=$(echo "$out" | sed -n 's/^  and:   backplane //p')
eval "\"$cli\" $rerun" > /dev/null && eval "\"$cli\" $ref" > /dev/null &&
  pass "MockWrong: both printed commands run" || fail "MockWrong: printed commands fail"
if "$python" -c "
import numpy as np, sys
a = np.load('$tmp/cases/MockWrong_Add_op.out/y.npy'); b = np.load('$tmp/cases/MockWrong_Add_op.ref/y.npy')
sys.exit(0 if abs(a.flat[0] - b.flat[0] - 0.5) < 1e-5 and np.array_equal(a.flat[1:], b.flat[1:]) else 1)"; then
  pass "MockWrong: the rerun reproduces the wrong element, and only it"
else
  fail "MockWrong: the rerun does not reproduce the failure"
fi

echo "$out" | grep -q "FAIL  onnx: node/test_add_bcast: output 0\[0\] .*ONNX's expected outputs" &&
  pass "MockWrong: the ONNX node case of a broadcasting Add fails too" ||
  fail "MockWrong: test_add_bcast not named"
echo "$out" | grep -q "^  Add: [0-9]* passed, [1-9][0-9]* failed, [0-9]* unsupported" &&
  pass "MockWrong: the per-operator line counts Add's failures" || fail "MockWrong: no per-op line"

# The ONNX node cases: CpuRef against two altered expected outputs.
out=$("$cli" conformance --backend CpuRef --case-data "$tampered" --case-dir "$tmp/onnx" 2>&1)
status=$?
echo "$out" | grep -v "^  [A-Z]" | tail -8
[ "$status" -eq 1 ] && echo "$out" | grep -q "^CpuRef: [0-9]* passed, 2 failed, 0 unsupported" &&
  pass "tampered ONNX cases: both fail" || fail "tampered ONNX cases: exit $status"
for want in "FAIL  onnx: node/test_add_tampered: output 0\[0\] is .*ONNX's expected outputs" \
            "FAIL  onnx: node/test_argmax_default_axis_example_tampered: output 0 differs" \
            "^smallest failing case: node/test_argmax_default_axis_example_tampered"; do
  echo "$out" | grep -q "$want" && pass "tampered ONNX cases: $want" || fail "tampered: no '$want'"
done
"$python" -c "
import onnx, sys
m = onnx.load('$tmp/onnx/CpuRef_ArgMax_onnx.onnx'); onnx.checker.check_model(m)
sys.exit(0 if [n.op_type for n in m.graph.node] == ['ArgMax'] else 1)" &&
  pass "tampered ONNX cases: the case file is the ArgMax model" || fail "no ArgMax case file"
# With only those two cases, the operators only the other ONNX cases cover
# (Acos, ...) are claimed by CpuRef (a probe) and named as having none.
echo "$out" | grep -q "^CpuRef: no cases: Acos, Acosh, And, " &&
  pass "operators without cases are named" || fail "no 'no cases' line"
out=$("$cli" conformance --backend CpuRef --case-data "$tmp/none" 2>&1)
echo "$out" | grep -q "^CpuRef: no ONNX node cases (.*none: no such directory)" &&
  pass "no ONNX case directory: said, the catalogue runs" || fail "missing case dir: $out"

# --strict: MockAcc takes float32 Add but rejects int32 Add.
out=$("$cli" conformance --backend MockAcc --backend-path "$accel" 2>&1)
[ $? -eq 0 ] && pass "MockAcc: passes without --strict" || fail "MockAcc without --strict: $out"
out=$("$cli" conformance --backend MockAcc --backend-path "$accel" --strict --case-dir "$tmp/strict" 2>&1)
status=$?
[ "$status" -eq 1 ] && pass "MockAcc --strict: exit status 1" || fail "MockAcc --strict: exit status $status"
echo "$out" | grep -q "FAIL  Add \[2,3\] \[3\] int32: rejected, though MockAcc takes" &&
  pass "MockAcc --strict: the rejected int32 Add is a failure, with the reason" ||
  fail "MockAcc --strict: $out"

# The graph cases run for a claimed operator: edges (3 partitions on the
# backend, with device memory on MockAcc), a round trip through an artifact
# (MockAcc stores no payload: unsupported, with the reason), 4 threads.
out=$("$cli" conformance --backend MockAcc --backend-path "$accel" --verbose \
      --filter "Add [2,3,4] [2,3,4] float32" 2>&1)
for want in "pass  Add \[2,3,4\] \[2,3,4\] float32" \
            "pass  edges: Add \[2,3,4\] \[2,3,4\] float32, 3 times with Neg on CpuRef between" \
            "unsupported  round trip: Add .*no BP_BACKEND_FLAG_SERIALIZE" \
            "pass  threads: Add .*4 sessions on 4 threads" \
            "^MockAcc: 12 passed, 0 failed, 1 unsupported (1 operators claimed)"; do
  echo "$out" | grep -q "$want" && pass "MockAcc --filter: $want" || fail "MockAcc --filter: no '$want' in: $out"
done
out=$("$cli" conformance --backend CpuRef --verbose --filter "Add [2,3,4] [2,3,4] float32" 2>&1)
echo "$out" | grep -q "pass  round trip: Add \[2,3,4\] \[2,3,4\] float32" &&
  pass "CpuRef: the round trip through an artifact runs" || fail "CpuRef round trip: $out"

# Random operators: checked by their distribution (range, mean, spread), on
# their own, through an artifact and from 4 threads (the 9 further passes:
# the hygiene contract's rules, tests/hygiene).
out=$("$cli" conformance --backend CpuRef --verbose --filter "RandomUniform shape" 2>&1)
echo "$out" | grep -q "pass  RandomUniform shape=\[64,64\] low=-2 high=3" &&
  echo "$out" | grep -q "pass  threads: RandomUniform" &&
  echo "$out" | grep -q "^CpuRef: 12 passed, 0 failed, 0 unsupported" &&
  pass "CpuRef: RandomUniform checked by its distribution" || fail "CpuRef RandomUniform: $out"

# Bad input: a clear error, exit status 1 or 2.
out=$("$cli" conformance --backend NoSuch 2>&1)
status=$?
[ "$status" -eq 1 ] && echo "$out" | grep -q "error: backend 'NoSuch' is not registered (registered: .*CpuRef" &&
  pass "unknown backend: error naming the registered ones" || fail "unknown backend ($status): $out"
out=$("$cli" conformance 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q "error: .*--backend" &&
  pass "no --backend: usage error" || fail "no --backend: $out"
finish
