#!/bin/bash
# `backplane conformance` catches what it is for: a backend with one wrong
# kernel (MockWrong: a broadcasting Add off by 0.5) fails, naming the cases,
# and its smallest failing case is written as an ONNX model with .npy inputs
# whose two printed `backplane run` commands really disagree; --strict turns
# MockAcc's rejected int32 Add into failures; bad input is a clear error.
#
#   conformance_test.sh BACKPLANE MOCKACC_SO MOCKWRONG_SO PYTHON
# (the backends' files, not their directories: a sanitizer run builds what a
# test's command line names, scripts/ci_targets.py)
cli=$1
accel=$(dirname "$2")
wrong=$(dirname "$3")
python=$4
. "$(dirname "$0")/lib.sh" conformance

# The wrong kernel.
out=$("$cli" conformance --backend MockWrong --backend-path "$wrong" --case-dir "$tmp/cases" 2>&1)
status=$?
echo "$out" | tail -6
[ "$status" -eq 1 ] && pass "MockWrong: exit status 1" || fail "MockWrong: exit status $status"
echo "$out" | grep -q "^MockWrong: [0-9]* passed, [1-9][0-9]* failed, [0-9]* unsupported" &&
  pass "MockWrong: the summary counts failures" || fail "MockWrong: no failure counted"
echo "$out" | grep -q "FAIL  Add \[2,3,4\] \[4\] float32: output 0\[0\]" &&
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
            "^MockAcc: 3 passed, 0 failed, 1 unsupported (1 operators claimed)"; do
  echo "$out" | grep -q "$want" && pass "MockAcc --filter: $want" || fail "MockAcc --filter: no '$want' in: $out"
done
out=$("$cli" conformance --backend CpuRef --verbose --filter "Add [2,3,4] [2,3,4] float32" 2>&1)
echo "$out" | grep -q "pass  round trip: Add \[2,3,4\] \[2,3,4\] float32" &&
  pass "CpuRef: the round trip through an artifact runs" || fail "CpuRef round trip: $out"

# Bad input: a clear error, exit status 1 or 2.
out=$("$cli" conformance --backend NoSuch 2>&1)
status=$?
[ "$status" -eq 1 ] && echo "$out" | grep -q "error: backend 'NoSuch' is not registered (registered: CpuRef" &&
  pass "unknown backend: error naming the registered ones" || fail "unknown backend ($status): $out"
out=$("$cli" conformance 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q "error: .*--backend" &&
  pass "no --backend: usage error" || fail "no --backend: $out"
finish
