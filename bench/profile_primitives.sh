#!/usr/bin/env bash
# Per-primitive time of CpuOneDnn on one model (oneDNN's own verbose timing),
# summed by primitive kind + implementation + layouts + post-ops, per inference.
#   bench/profile_primitives.sh BUILD_DIR MODEL.onnx [THREADS] [RUNS]
set -euo pipefail
build=$1 model=$2 threads=${3:-1} runs=${4:-20}
# CpuOneDnn's warm-up off: its count of runs depends on their times, and
# `per` below needs every process to run the same count.
trace() {
  ONEDNN_VERBOSE=1 "$build/bin/backplane" run "$model" --threads "$threads" --warmup 0 --runs "$1" 2>/dev/null |
    grep '^onednn_verbose,exec' || true
}
per=$(( $(trace 2 | wc -l) - $(trace 1 | wc -l) ))   # primitive executions per inference
trace "$runs" | tail -n $(( per * (runs - 1) )) |
  awk -F, -v runs=$(( runs - 1 )) '
    { key = $4 " " $5 " " $7 " " $8; t[key] += $NF; c[key]++; total += $NF }
    END {
      for (k in t) printf "%9.3f ms %4d x  %s\n", t[k] / runs, c[k] / runs, k
      printf "%9.3f ms total per run (%d primitives)\n", total / runs, NR / runs
    }' | sort -rn | head -25
