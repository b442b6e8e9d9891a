#!/usr/bin/env bash
# fuzz.sh [SECONDS] — builds the fuzz targets (fuzz/) with clang, libFuzzer,
# ASan and UBSan, seeds their corpora and runs each for SECONDS (default 30).
# Exits non-zero if a target crashes, trips a sanitizer, leaks or times out;
# the reproducer is left in BUILD/crashes/ (rerun: BUILD/fuzz_onnx FILE).
#
# fuzz.sh --build-only — builds the fuzz targets and stops (`make test` does
# this with all its jobs before the tests, so fuzz_smoke only runs them).
#
# fuzz.sh --differential SECONDS [BACKEND...] — random graphs
# (tests/differential/graphgen.py) on each fast backend (default CpuOneDnn,
# and GpuOcl if it is built, on OpenCL device 0, named with its configure key
# `device` so that a CPU device such as PoCL is used too) against CpuRef,
# SECONDS each, from random seeds (printed). Needs a built tree with the
# Python module (BACKPLANE_BUILD_DIR,
# default build/ in the source tree). Each failure is shrunk and written to
# BACKPLANE_BUILD_DIR/differential-failures/; exits non-zero if any.
#
# Environment:
#   BACKPLANE_FUZZ_BUILD  build directory (default: build-fuzz in the source tree);
#                         reused between runs, and so is the corpus in it
#   BACKPLANE_FUZZ_JOBS   parallel compile jobs (default 1)
#   BACKPLANE_PYTHON      Python with onnx and numpy (default /usr/bin/python3)
#   BACKPLANE_FUZZ_TARGETS  targets to run (default "fuzz_onnx fuzz_artifact fuzz_npy
#                         fuzz_gpuocl_payload", and
#                         fuzz_onednn_payload when oneDNN is installed)
# Long runs and triage: docs/fuzzing.md.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

if [ "${1:-}" = "--differential" ]; then
  secs=${2:?fuzz.sh --differential SECONDS [BACKEND...]}
  shift 2
  bdir=${BACKPLANE_BUILD_DIR:-$root/build}
  py=${BACKPLANE_PYTHON:-/usr/bin/python3}
  [ -d "$bdir/python/backplane" ] ||
    { echo "fuzz.sh: no Python module in $bdir (make build; BACKPLANE_BUILD_DIR names another build)" >&2; exit 1; }
  backends=("$@")
  if [ ${#backends[@]} -eq 0 ]; then
    backends=(CpuOneDnn)
    [ -e "$bdir/lib/backplane/backends/Backplane_GpuOcl_backend.so" ] && backends+=(GpuOcl)
  fi
  out=$bdir/differential-failures
  mkdir -p "$out" "$bdir/cache/pocl" "$bdir/cache/gpuocl"
  status=0
  for b in "${backends[@]}"; do
    seed_file=$out/.last-seed-$b
    config=()
    [ "$b" = GpuOcl ] && config=(--backend-config GpuOcl.device=0
                                 --backend-config "GpuOcl.program_cache_dir=$bdir/cache/gpuocl")
    set +e
    env PYTHONPATH="$bdir/python" PYTHONDONTWRITEBYTECODE=1 POCL_CACHE_DIR="$bdir/cache/pocl" \
      "$py" "$root/tests/differential/run_differential.py" --backend "$b" --require \
      --seconds "$secs" --regressions "$root/tests/differential/regressions" --out "$out" \
      --seed-file "$seed_file" "${config[@]}"
    rc=$?
    set -e
    if [ $rc -gt 128 ]; then
      echo "fuzz.sh: $b died (signal $((rc - 128))) at seed $(cat "$seed_file"); rerun:" \
           "tests/differential/run_differential.py --backend $b ${config[*]} --seed $(cat "$seed_file")" >&2
    fi
    [ $rc -eq 0 ] || status=1
  done
  exit $status
fi

build_only=0
if [ "${1:-}" = "--build-only" ]; then build_only=1; shift; fi
secs=${1:-30}
build=${BACKPLANE_FUZZ_BUILD:-$root/build-fuzz}
jobs=${BACKPLANE_FUZZ_JOBS:-1}
py=${BACKPLANE_PYTHON:-/usr/bin/python3}
targets=${BACKPLANE_FUZZ_TARGETS:-}

for tool in clang clang++; do
  command -v "$tool" >/dev/null || { echo "fuzz.sh: $tool not found (scripts/install-deps.sh installs clang and libclang-rt-14-dev)" >&2; exit 1; }
done

if [ ! -f "$build/CMakeCache.txt" ]; then
  mkdir -p "$build"
  # ccache, when installed, makes the rebuild of a fresh tree cheap.
  launcher=()
  command -v ccache >/dev/null &&
    launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  CC=clang CXX=clang++ cmake -S "$root/fuzz" -B "$build" "${launcher[@]}" >"$build/configure.log" 2>&1 ||
    { cat "$build/configure.log" >&2; exit 1; }
fi
cmake --build "$build" -j"$jobs" -- --no-print-directory >"$build/build.log" 2>&1 ||
  { tail -50 "$build/build.log" >&2; echo "fuzz.sh: build failed" >&2; exit 1; }
[ "$build_only" = 1 ] && exit 0

if [ -z "$targets" ]; then
  targets="fuzz_onnx fuzz_artifact fuzz_npy fuzz_gpuocl_payload"
  [ -x "$build/fuzz_onednn_payload" ] && targets="$targets fuzz_onednn_payload"
fi

# Seeds: fuzz/regressions/TARGET (inputs that once crashed, run first), and
# small ONNX models (valid ones and the malformed ones of
# gen_bad_models.py), and artifacts written from the valid ones.
seeds=$build/seeds
if [ ! -f "$seeds/.done" ] || [ "$root/fuzz/make_onnx_seeds.py" -nt "$seeds/.done" ]; then
  rm -rf "$seeds"
  mkdir -p "$seeds/onnx" "$seeds/artifact"
  "$py" "$root/fuzz/make_onnx_seeds.py" --out "$seeds/onnx"
  "$py" "$root/scripts/gen_bad_models.py" --out "$seeds/onnx" >/dev/null
  "$build/make_seed_artifact" "$seeds/artifact" "$seeds"/onnx/*.onnx
  mkdir -p "$seeds/npy"
  "$py" - "$seeds/npy" <<'PY'
import sys, numpy as np
out = sys.argv[1]
arrays = {"f32": np.arange(12, dtype=np.float32).reshape(3, 4), "f16": np.ones((2, 2), np.float16),
          "i64": np.arange(5, dtype=np.int64), "u8": np.zeros((1, 3, 2, 2), np.uint8),
          "bool": np.array([True, False]), "scalar": np.float32(3.5), "empty": np.zeros((0, 4), np.float32)}
for name, a in arrays.items():
    np.save(f"{out}/{name}.npy", a)
np.lib.format.write_array(open(f"{out}/v2.npy", "wb"), np.arange(6, dtype=np.int32), version=(2, 0))
PY
  touch "$seeds/.done"
fi

status=0
for t in $targets; do
  env_extra=()
  malloc_limit_mb=2048
  case $t in
    fuzz_onnx) seed_dir=$seeds/onnx ;;
    fuzz_artifact) seed_dir=$seeds/artifact ;;
    fuzz_npy) seed_dir=$seeds/npy
      # An allocation of the size a header claims (not the bytes present)
      # exceeds this and fails the run.
      malloc_limit_mb=64 ;;
    fuzz_gpuocl_payload)
      # The target writes a valid payload into the seed directory at start-up.
      seed_dir=$seeds/gpuocl_payload
      mkdir -p "$seed_dir"
      env_extra=(BACKPLANE_FUZZ_SEED_DIR="$seed_dir") ;;
    fuzz_onednn_payload)
      # The target compiles these models on CpuOneDnn at start-up and writes
      # their payloads into the seed directory.
      seed_dir=$seeds/onednn_payload
      mkdir -p "$seed_dir"
      env_extra=(BACKPLANE_FUZZ_SEED_DIR="$seed_dir"
                 BACKPLANE_FUZZ_PAYLOAD_MODELS="$seeds/onnx/seed_conv.onnx:$seeds/onnx/seed_gemm.onnx:$seeds/onnx/seed_norm.onnx:$seeds/onnx/seed_reshape.onnx:$seeds/onnx/seed_embed.onnx:$seeds/onnx/seed_dense.onnx") ;;
    *) echo "fuzz.sh: unknown target $t" >&2; exit 2 ;;
  esac
  corpus=$build/corpus/$t
  mkdir -p "$corpus" "$build/crashes"
  log=$build/$t.log
  echo "fuzz.sh: $t for ${secs}s (corpus $corpus)"
  set +e
  # allocator_may_return_null: an absurd allocation is refused (as malloc
  # would refuse it) instead of ASan aborting the run.
  # The targets' scratch files go under $TMPDIR (and /dev/shm for
  # fuzz_artifact, named by pid); a run that crashes never removes them, so
  # they are removed here.
  mkdir -p "$build/tmp"
  env "${env_extra[@]}" TMPDIR="$build/tmp" \
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1 \
    UBSAN_OPTIONS=print_stacktrace=1 \
    "$build/$t" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 -max_len=65536 \
    -malloc_limit_mb="$malloc_limit_mb" \
    -print_final_stats=1 -artifact_prefix="$build/crashes/$t-" "$corpus" "$seed_dir" "$root/fuzz/regressions/$t" >"$log" 2>&1 &
  pid=$!
  wait $pid
  rc=$?
  rm -rf "$build/tmp" "/dev/shm/backplane_fuzz_artifact.$pid"
  set -e
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
  if [ $rc -ne 0 ]; then
    echo "fuzz.sh: $t FAILED (exit $rc) after ${runs:-?} executions; log: $log" >&2
    grep -E 'ERROR: |runtime error|SUMMARY|Test unit written|==[0-9]+==' "$log" | head -20 >&2
    status=1
  else
    echo "fuzz.sh: $t ok: ${runs:-?} executions, corpus $(ls "$corpus" | wc -l) inputs"
  fi
done
exit $status
