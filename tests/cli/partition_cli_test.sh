#!/usr/bin/env bash
# `backplane partition` and `run` on resnet18 with MockAcc,CpuRef: a real split
# with copies, a DOT file Graphviz renders, outputs equal to CpuRef alone.
set -euo pipefail
cli=$1 models=$2 accel=$3 python=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0 passes=0
check() { if eval "$2"; then echo "ok: $1"; passes=$((passes + 1)); else echo "FAIL: $1"; fails=$((fails + 1)); fi; }

"$cli" --backend-path "$accel" partition "$models/resnet18.onnx" --backends MockAcc,CpuRef \
  --dot "$work/plan.dot" > "$work/plan.txt"
check "text plan names both backends" "grep -q 'MockAcc' '$work/plan.txt' && grep -q 'CpuRef' '$work/plan.txt'"
check "text plan lists copies" "grep -Eq '^copies +[1-9]' '$work/plan.txt'"
check "text plan says why CpuRef got the max pool" "grep -q 'not on MockAcc: MockAcc runs only' '$work/plan.txt'"
check "DOT file renders with Graphviz" "dot -Tsvg '$work/plan.dot' -o '$work/plan.svg' && grep -q '<svg' '$work/plan.svg'"
check "DOT colours partitions by backend" "grep -q 'fillcolor' '$work/plan.dot' && grep -q 'cluster_' '$work/plan.dot'"

"$cli" --backend-path "$accel" partition "$models/resnet18.onnx" --backends MockAcc,CpuRef --json > "$work/plan.json"
check "JSON plan parses, has partitions on both backends and copies" "'$python' - '$work/plan.json' <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
backends = {q['backend'] for q in p['partitions']}
assert backends == {'MockAcc', 'CpuRef'}, backends
assert len(p['copies']) > 0
assert all(n['backend'] in backends for n in p['nodes'])
PY"

"$cli" --backend-path "$accel" run "$models/resnet18.onnx" --backends MockAcc,CpuRef \
  --input "input=$models/resnet18.input.npy" --output-dir "$work/split" --json > "$work/run.json"
"$cli" --backend-path "$accel" run "$models/resnet18.onnx" --backends CpuRef \
  --input "input=$models/resnet18.input.npy" --output-dir "$work/ref" --json > /dev/null
check "run --json reports the split" "'$python' - '$work/run.json' <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert set(r['backends_used']) == {'MockAcc', 'CpuRef'}, r['backends_used']
assert len(r['partitions']) >= 3 and r['copies'] > 0
PY"
check "split outputs equal CpuRef alone (1e-5 relative)" "'$python' - '$work' <<'PY'
import numpy as np, sys
a = np.load(sys.argv[1] + '/split/output.npy'); b = np.load(sys.argv[1] + '/ref/output.npy')
assert np.abs(a - b).max() <= 1e-5 * np.abs(b).max()
PY"

set +e
"$cli" --backend-path "$accel" partition "$models/resnet18.onnx" --backends Nope 2> "$work/err.txt"
rc=$?
set -e
check "unknown backend: exit 1 with error" "[ $rc -eq 1 ] && grep -q \"error: .*unknown backend 'Nope'\" '$work/err.txt'"

echo "partition_cli: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
