#!/usr/bin/env bash
# run_zoo.sh — every model of the zoo (scripts/gen_zoo.py), passing or not:
# generates what is missing or stale, runs each with `backplane run` and
# prints one line per model: pass, or FAIL and the first error (the node, the
# op, the message). The ctest entries (tests/e2e/zoo) cover only the models
# that pass; this is the to-do list for the others.
#
#   scripts/run_zoo.sh [BUILD_DIR] [-- zoo_test.py options, e.g. --backends CpuRef]
#
# Environment: ZOO_DIR (default BUILD_DIR/testdata/zoo), ZOO_MODELS (comma
# list, default all), PYTHON (default /usr/bin/python3).
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
py=${PYTHON:-/usr/bin/python3}
zoo=${ZOO_DIR:-$build/testdata/zoo}
cli=$build/bin/backplane
if [ ! -x "$cli" ]; then
  echo "error: $cli not found; build the 'backplane' target first" >&2
  exit 2
fi

gen_args=(--out "$zoo")
[ -n "${ZOO_MODELS:-}" ] && gen_args+=(--models "$ZOO_MODELS")
echo "== generating into $zoo"
start=$(date +%s)
"$py" "$root/scripts/gen_zoo.py" "${gen_args[@]}" || echo "(some models failed to generate: see above)"
echo "== generation: $(($(date +%s) - start)) s"

# The CpuOneDnn plugin of this build, as ctest passes it.
backend_args=()
onednn=$(find "$build" -name 'Backplane_CpuOneDnn_backend.so*' -print -quit 2>/dev/null)
[ -n "$onednn" ] && backend_args=(--backend-path "$(dirname "$onednn")")

if [ -n "${ZOO_MODELS:-}" ]; then
  IFS=, read -r -a models <<<"$ZOO_MODELS"
else
  mapfile -t models < <("$py" "$root/scripts/gen_zoo.py" --list | cut -d' ' -f1)
fi
echo "== running ${#models[@]} models with $cli ${backend_args[*]} $*"
start=$(date +%s)
"$py" "$root/tests/e2e/zoo/zoo_test.py" --cli "$cli" --data "$zoo" --ops "${backend_args[@]}" "$@" "${models[@]}"
rc=$?
echo "== run: $(($(date +%s) - start)) s"
exit $rc
