#!/usr/bin/env bash
# default_hygiene_test.sh — GpuOcl in the default configuration, as every run
# loads it: found with no option, it keeps the hygiene contract
# (`backplane conformance`, docs/writing-a-backend.md) and, on a machine
# without an OpenCL GPU, claims no node and says why. Then the same check
# with a CPU OpenCL device configured (PoCL) must report broken rules: the
# check sees a driver's process-wide effects, so the default run passing it
# means no such driver was opened.
#
#   default_hygiene_test.sh BACKPLANE_CLI
set -uo pipefail

cli=${1:?usage: default_hygiene_test.sh BACKPLANE_CLI}
. "$(dirname "$0")/../cli/lib.sh" gpuocl_default_hygiene
rules="environment affinity signal.mask signal.handlers floating.point locale working.directory umask threads"

"$cli" backends --json >"$tmp/backends.json" 2>"$tmp/backends.err" ||
  fail "backplane backends: $(cat "$tmp/backends.err")"
gpu=$(/usr/bin/python3 - "$tmp/backends.json" <<'EOF'
import json, sys
for b in json.load(open(sys.argv[1]))["backends"]:
    if b["id"] == "GpuOcl":
        print("gpu" if any(d.get("selected") for d in b.get("devices", [])) else "none")
        print(b["description"], file=sys.stderr)
        break
else:
    print("absent")
EOF
)
case $gpu in
  absent) fail "GpuOcl is not among the default backends" ;;
  gpu) echo "note: this machine has an OpenCL GPU: GpuOcl claims nodes by default" ;;
  none) pass "GpuOcl is a default backend and, without a GPU, claims no node" ;;
esac

"$cli" conformance --backend GpuOcl >"$tmp/default.out" 2>&1
status=$?
for rule in $rules; do
  grep -Eq "^  $rule: kept" "$tmp/default.out" && pass "default: $rule kept" ||
    fail "default: $rule: $(grep -E "^  $rule:" "$tmp/default.out")"
done
if [ "$gpu" = none ]; then
  [ "$status" -eq 0 ] && grep -q "(0 operators claimed)" "$tmp/default.out" &&
    pass "default: conformance passes, 0 operators claimed" ||
    fail "default: conformance exit $status: $(tail -3 "$tmp/default.out")"
fi

# PoCL configured: the same check must fail (PoCL's environment variable,
# signal handlers and threads).
if [ "$gpu" != none ]; then
  echo "note: device 0 is not PoCL here: the configured check is skipped"
elif ! grep -qs pocl /etc/OpenCL/vendors/*.icd; then
  echo "note: no PoCL vendor file: the configured check is skipped"
else
  "$cli" --backend-config GpuOcl.device=0 conformance --backend GpuOcl --filter "Relu [" \
    >"$tmp/pocl.out" 2>&1
  status=$?
  broken=$(grep -c "^  .*: BROKEN" "$tmp/pocl.out")
  [ "$status" -ne 0 ] && [ "$broken" -ge 1 ] &&
    pass "PoCL configured: $broken rule(s) broken, as the check must see" ||
    fail "PoCL configured: exit $status, $broken broken rule(s): $(head -12 "$tmp/pocl.out")"
fi
finish
