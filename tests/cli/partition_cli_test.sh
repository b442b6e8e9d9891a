#!/usr/bin/env bash
# `backplane partition` and `run` on resnet18 with MockAcc,CpuRef: a real split
# with copies, a DOT file Graphviz renders, outputs equal to CpuRef alone.
set -euo pipefail
cli=$1 models=$2 accel=$3 python=$4
. "$(dirname "$0")/lib.sh" partition_cli
check() { if eval "$2"; then pass "$1"; else fail "$1"; fi; }

"$cli" --backend-path "$accel" partition "$models/resnet18.onnx" --backends MockAcc,CpuRef \
  --dot "$tmp/plan.dot" > "$tmp/plan.txt"
check "text plan names both backends" "grep -q 'MockAcc' '$tmp/plan.txt' && grep -q 'CpuRef' '$tmp/plan.txt'"
check "text plan lists copies" "grep -Eq '^copies +[1-9]' '$tmp/plan.txt'"
check "text plan says why CpuRef got the max pool" "grep -q 'not on MockAcc: MockAcc runs only' '$tmp/plan.txt'"
check "DOT file renders with Graphviz" "dot -Tsvg '$tmp/plan.dot' -o '$tmp/plan.svg' && grep -q '<svg' '$tmp/plan.svg'"
check "DOT colours partitions by backend" "grep -q 'fillcolor' '$tmp/plan.dot' && grep -q 'cluster_' '$tmp/plan.dot'"

"$cli" --backend-path "$accel" partition "$models/resnet18.onnx" --backends MockAcc,CpuRef --json > "$tmp/plan.json"
check "JSON plan parses, has partitions on both backends and copies" "'$python' - '$tmp/plan.json' <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
backends = {q['backend'] for q in p['partitions']}
assert backends == {'MockAcc', 'CpuRef'}, backends
assert len(p['copies']) > 0
assert all(n['backend'] in backends for n in p['nodes'])
PY"

"$cli" --backend-path "$accel" run "$models/resnet18.onnx" --backends MockAcc,CpuRef \
  --input "input=$models/resnet18.input.npy" --output-dir "$tmp/split" --json > "$tmp/run.json"
"$cli" --backend-path "$accel" run "$models/resnet18.onnx" --backends CpuRef \
  --input "input=$models/resnet18.input.npy" --output-dir "$tmp/ref" --json > /dev/null
check "run --json reports the split" "'$python' - '$tmp/run.json' <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert set(r['backends_used']) == {'MockAcc', 'CpuRef'}, r['backends_used']
assert len(r['partitions']) >= 3 and r['copies'] > 0
PY"
check "split outputs equal CpuRef alone (1e-5 relative)" "'$python' - '$tmp' <<'PY'
import numpy as np, sys
a = np.load(sys.argv[1] + '/split/output.npy'); b = np.load(sys.argv[1] + '/ref/output.npy')
assert np.abs(a - b).max() <= 1e-5 * np.abs(b).max()
PY"

# A model with control flow runs in stages: `partition` lists them (each
# planned per run), also while its inputs' dims are open.
"$cli" partition "$models/cf_loop.onnx" > "$tmp/staged.txt"
check "staged model: partition lists the stages and host steps" \
  "grep -q '^staged execution:' '$tmp/staged.txt' && grep -q \"host  2: node '/Loop' (Loop)\" '$tmp/staged.txt' && grep -q \"body '\" '$tmp/staged.txt'"
"$cli" partition "$models/cf_loop.onnx" --json > "$tmp/staged.json"
check "staged model: JSON plan says staged" "'$python' - '$tmp/staged.json' <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
assert p['staged'] is True and 'Loop' in p['steps'], p
PY"

set +e
"$cli" --backend-path "$accel" partition "$models/resnet18.onnx" --backends Nope 2> "$tmp/err.txt"
rc=$?
set -e
check "unknown backend: exit 1 with error" "[ $rc -eq 1 ] && grep -q \"error: .*unknown backend 'Nope'\" '$tmp/err.txt'"

finish
