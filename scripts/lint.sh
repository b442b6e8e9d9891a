#!/usr/bin/env bash
# Runs clang-tidy (the checks in .clang-tidy) on every C/C++ source of this
# tree that a configured build compiles, and fails on any finding.
#
#   scripts/lint.sh [-j N] [BUILD_DIR] [FILE...]
#
# BUILD_DIR (default: build) must have been configured by CMake, which writes
# its compile_commands.json. FILEs (paths in the tree) restrict the run.
# `scripts/lint.sh --format` instead checks that sources match .clang-format.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

jobs="$(nproc)"
if [[ "${1:-}" == "-j" ]]; then
  jobs="$2"
  shift 2
fi

# Sources written here; not the frozen copies of released ABI headers.
tree_sources() {
  git ls-files '*.c' '*.cpp' '*.h' '*.hpp' | grep -v '^tests/abi/v1_[0-9]*/'
}

if [[ "${1:-}" == "--format" ]]; then
  command -v clang-format >/dev/null || { echo "lint: clang-format not found (apt-get install clang-format)" >&2; exit 1; }
  tree_sources | xargs clang-format --dry-run -Werror
  echo "lint: every source matches .clang-format"
  exit 0
fi

build="${1:-build}"
shift || true
command -v clang-tidy >/dev/null || { echo "lint: clang-tidy not found (apt-get install clang-tidy)" >&2; exit 1; }
db="$build/compile_commands.json"
[[ -f "$db" ]] || { echo "lint: $db not found: configure first (cmake -S . -B $build)" >&2; exit 1; }

# The translation units of the build that are files of this tree (each once,
# even when compiled into several targets).
if [[ $# -gt 0 ]]; then
  files=("$@")
else
  mapfile -t files < <(/usr/bin/python3 - "$db" "$root" <<'PY'
import json, os, subprocess, sys
db, root = sys.argv[1], sys.argv[2]
tracked = set(subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True,
                             check=True).stdout.split())
seen = set()
for entry in json.load(open(db)):
    path = os.path.normpath(os.path.join(entry["directory"], entry["file"]))
    rel = os.path.relpath(path, root)
    if rel in tracked and not rel.startswith("tests/abi/v1_0/") and rel not in seen:
        seen.add(rel)
        print(rel)
PY
  )
fi
echo "lint: clang-tidy on ${#files[@]} files ($jobs at a time)"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
# -w: compiler warnings are GCC's to report (-Werror in CI), not clang's.
printf '%s\0' "${files[@]}" |
  xargs -0 -P "$jobs" -n 1 clang-tidy -p "$build" --quiet --extra-arg=-w \
    >"$log" 2>&1 || status=$?
# clang-tidy prints "N warnings generated" for findings in system headers it
# then filters out: noise, not findings.
grep -v -E '^[0-9]+ warnings? (and [0-9]+ errors? )?generated\.$|^Suppressed [0-9]+ warnings|^Use -header-filter|^Use -system-headers' "$log" || true
if [[ $status -ne 0 ]]; then
  echo "lint: clang-tidy found problems (above)" >&2
  exit 1
fi
echo "lint: clean"
