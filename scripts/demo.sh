#!/usr/bin/env bash
# demo.sh — `make demo`: classify one image with the demo CNN.
#
#   bash scripts/demo.sh BUILD_DIR
#
# Runs BUILD_DIR/bin/backplane on models/demo.onnx (a small CNN with seeded,
# untrained weights, made by scripts/make_demo_model.py) and shows where each
# partition ran, the top-5 classes and the latency (the CLI prints all three;
# the weights are seeded, not trained, so class numbers carry no meaning).
# If Debian's numpy is present it also checks the written output against
# PyTorch's, stored in models/demo_expected.npy.
set -euo pipefail

build_dir=${1:-build}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cli="$build_dir/bin/backplane"
[ -x "$cli" ] || cli="$repo/$build_dir/bin/backplane"
if [ ! -x "$cli" ]; then
  echo "demo: $build_dir/bin/backplane not found; build first (make build)" >&2
  exit 1
fi
model="$repo/models/demo.onnx"
input="$repo/models/demo_input.npy"
expected="$repo/models/demo_expected.npy"

out=$(mktemp -d "${TMPDIR:-/tmp}/backplane_demo.XXXXXX")
trap 'rm -rf "$out"' EXIT

echo "== backplane run models/demo.onnx (1x3x32x32 image -> 10 class probabilities)"
echo "   backends available:"
"$cli" backends | sed 's/^/     /'
echo
"$cli" run "$model" --input "input=$input" --output-dir "$out" --runs 20 --warmup 3

result="$out/probabilities.npy"
if [ ! -f "$result" ]; then
  echo "demo: the run wrote no $result" >&2
  exit 1
fi

if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  echo
  /usr/bin/python3 - "$result" "$expected" <<'EOF'
import sys
import numpy as np
p = np.load(sys.argv[1])[0]
ref = np.load(sys.argv[2])[0]
diff = float(np.max(np.abs(p - ref)))
ok = diff <= 1e-4 * float(np.max(np.abs(ref)))
print(f"matches PyTorch's output: {'yes' if ok else 'NO'} (max |diff| {diff:.2e})")
sys.exit(0 if ok else 1)
EOF
fi
