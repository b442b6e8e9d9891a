#!/usr/bin/env bash
# Regenerates docs/operators.md from the operator registry and the ONNX node
# conformance results: runs the conformance runner on CpuRef and on CpuOneDnn
# (each alone) with --json, then `backplane ops --markdown --conformance ...`.
#
#   scripts/gen_operators_md.sh [--build DIR]
#       rewrite docs/operators.md (DIR: the build tree, default build)
#   scripts/gen_operators_md.sh --check [--build DIR] [--results DIR]
#       compare with docs/operators.md instead; exit 1 when it is stale. With
#       --results, use the DIR/<backend>.json the conformance tests wrote
#       rather than running the suite again (ctest docs_operators_current).
#
# Needs the test data (ctest -R conformance_generate_data), the runner, the
# CLI and the CpuOneDnn module built in the build tree. Exit 77 (skipped) when
# a backend's results cannot exist here (no oneDNN build).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build"
check=0
results=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --check) check=1; shift ;;
    --build) build="$(cd "$2" && pwd)"; shift 2 ;;
    --results) results="$2"; shift 2 ;;
    *) echo "usage: $0 [--check] [--build DIR] [--results DIR]" >&2; exit 2 ;;
  esac
done

doc="$root/docs/operators.md"
cli="$build/bin/backplane"
runner="$build/tests/conformance/backplane_conformance"
data="$build/share/backplane/conformance"
modules="$build/lib/backplane/backends"
backends=(CpuRef CpuOneDnn)

for f in "$cli" "$runner"; do
  [[ -x "$f" ]] || { echo "gen_operators_md: $f is not built" >&2; exit 1; }
done

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

if [[ -z "$results" ]]; then
  [[ -d "$data" ]] || {
    echo "gen_operators_md: no test data in $data; build first (cmake --build $build)" >&2
    exit 1
  }
  results="$tmp"
  for b in "${backends[@]}"; do
    args=("$data" --backends "$b" --json "$results/$b.json")
    if [[ "$b" != CpuRef ]]; then
      [[ -f "$modules/Backplane_${b}_backend.so" ]] || {
        echo "gen_operators_md: $b is not built here ($modules); cannot generate its column" >&2
        exit 77
      }
      args+=(--backend-path "$modules")
    fi
    # A failing case is the conformance tests' business; the results still count.
    "$runner" "${args[@]}" >/dev/null || true
  done
fi

inputs=()
for b in "${backends[@]}"; do
  [[ -f "$results/$b.json" ]] || {
    echo "gen_operators_md: no $results/$b.json (is $b built here?)" >&2
    exit 77
  }
  inputs+=(--conformance "$results/$b.json")
done

"$cli" ops --markdown "${inputs[@]}" > "$tmp/operators.md"
if [[ $check -eq 1 ]]; then
  if ! diff -u "$doc" "$tmp/operators.md" > "$tmp/diff"; then
    head -n 40 "$tmp/diff"
    echo "docs/operators.md is stale: regenerate it with scripts/gen_operators_md.sh --build $build" >&2
    exit 1
  fi
  echo "docs/operators.md is current"
else
  cp "$tmp/operators.md" "$doc"
  echo "wrote $doc"
fi
