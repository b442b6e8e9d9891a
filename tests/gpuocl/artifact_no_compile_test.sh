#!/usr/bin/env bash
# artifact_no_compile_test.sh — a `.bpk` compiled for GpuOcl loads and runs
# its first inference without any OpenCL compilation on the same device, and
# recompiles with a note when the device key differs (issue 15, "Done means").
#
#   artifact_no_compile_test.sh BACKPLANE_CLI MODELS_DIR [PYTHON]
#
# GpuOcl runs on OpenCL device 0, named with the configure key `device` (by
# default GpuOcl opens no CPU-only driver such as PoCL).
# On PoCL the proof is PoCL's own debug output (POCL_DEBUG=general,llvm):
# every kernel PoCL runs says "Using a cached WG function" when its machine
# code exists and "Built a ... WG function" when PoCL's LLVM had to make it.
# Each run gets an empty POCL_CACHE_DIR, so nothing but the artifact can
# supply that code; GpuOcl's own program cache is off (no program_cache_dir)
# and the backend logs (at info) whether it built OpenCL C from
# source or took the stored binary. The same run from the .onnx must show
# PoCL building, or the check could not fail. Without PoCL's debug output
# (another OpenCL driver: no "POCL:" lines) the PoCL checks are skipped,
# saying so, and the backend's log is checked alone.
set -uo pipefail

usage="usage: artifact_no_compile_test.sh BACKPLANE_CLI MODELS_DIR [PYTHON]"
cli=${1:?$usage}
models=${2:?$usage}
py=${3:-/usr/bin/python3}

. "$(dirname "$0")/../cli/lib.sh" gpuocl_artifact_no_compile
gpuocl=(--backend-config GpuOcl.device=0)

# One run with an empty PoCL cache and PoCL's debug output; prints the JSON
# line to $tmp/NAME.json and stderr to $tmp/NAME.err.
cold_run() {
  local name=$1 model=$2 input=$3
  mkdir -p "$tmp/pocl_$name"
  POCL_CACHE_DIR="$tmp/pocl_$name" POCL_DEBUG=general,llvm \
    "$cli" "${gpuocl[@]}" run "$model" --backends GpuOcl --log-level info \
    --input "$input" --output-dir "$tmp/out_$name" --json >"$tmp/$name.json" 2>"$tmp/$name.err"
}
count() { grep -c "$1" "$2"; }

for m in resnet18:input transformer:input_ids; do
  model=${m%%:*}
  input="${m#*:}=$models/$model.input.npy"
  mkdir -p "$tmp/out_${model}_onnx" "$tmp/out_${model}_bpk"
  # Compiled with an empty PoCL cache too: the program's code must come from
  # what the backend does at serialize, not from earlier runs' cache entries.
  mkdir -p "$tmp/pocl_compile_$model"
  if POCL_CACHE_DIR="$tmp/pocl_compile_$model" "$cli" compile "$models/$model.onnx" \
       -o "$tmp/$model.bpk" --backends GpuOcl "${gpuocl[@]}" \
       >"$tmp/compile.out" 2>"$tmp/compile.err"; then
    pass "$model: compiled for GpuOcl"
  else
    fail "$model: compile: $(cat "$tmp/compile.err")"
    continue
  fi
  cold_run "${model}_onnx" "$models/$model.onnx" "$input" || fail "$model.onnx: run: $(tail -5 "$tmp/${model}_onnx.err")"
  cold_run "${model}_bpk" "$tmp/$model.bpk" "$input" || fail "$model.bpk: run: $(tail -5 "$tmp/${model}_bpk.err")"
  onnx_err="$tmp/${model}_onnx.err"
  bpk_err="$tmp/${model}_bpk.err"

  # GpuOcl's own account: from the .onnx it builds its OpenCL C; from the
  # .bpk it takes the stored binary and builds nothing.
  [ "$(count "GpuOcl: built the OpenCL kernels" "$onnx_err")" -ge 1 ] &&
    pass "$model.onnx: GpuOcl builds its OpenCL C from source" ||
    fail "$model.onnx: no source build logged"
  [ "$(count "GpuOcl: built the OpenCL kernels" "$bpk_err")" -eq 0 ] &&
    [ "$(count "GpuOcl: took the stored program binary" "$bpk_err")" -ge 1 ] &&
    pass "$model.bpk: GpuOcl takes the stored binary, builds no OpenCL C" ||
    fail "$model.bpk: $(grep "GpuOcl:" "$bpk_err" | head -5)"

  # PoCL built with its debug output (Debian's is) prints "POCL:" lines.
  if grep -q "POCL:" "$onnx_err"; then
    built_onnx=$(count "Built a .*WG function" "$onnx_err")
    built_bpk=$(count "Built a .*WG function" "$bpk_err")
    cached_bpk=$(count "Using a cached WG function" "$bpk_err")
    [ "$built_onnx" -ge 1 ] && pass "$model.onnx: PoCL compiled $built_onnx kernel variant(s) (the check can fail)" ||
      fail "$model.onnx: PoCL's debug output shows no compilation (POCL_DEBUG not honoured?)"
    [ "$built_bpk" -eq 0 ] && [ "$cached_bpk" -ge 1 ] &&
      pass "$model.bpk: PoCL compiled nothing, took $cached_bpk kernel variant(s) from the artifact" ||
      fail "$model.bpk: PoCL built $built_bpk kernel variant(s): $(grep -A1 "Built a" "$bpk_err" | head -6)"
  else
    echo "note: no PoCL debug output (another OpenCL driver, or PoCL without POCL_DEBUG): PoCL's compile checks skipped"
  fi

  # The same output, and the times (runtime creation to a ready session and
  # to the first result) from each.
  "$py" - "$tmp/${model}_onnx.json" "$tmp/${model}_bpk.json" "$tmp/out_${model}_onnx" \
    "$tmp/out_${model}_bpk" "$model" <<'EOF' && pass "$model: same outputs from .bpk and .onnx" || fail "$model: outputs or JSON differ"
import json, os, sys
import numpy as np
onnx, bpk = (json.load(open(p)) for p in sys.argv[1:3])
assert bpk["notes"] == [], bpk["notes"]
for o in onnx["outputs"]:
    a = np.load(os.path.join(sys.argv[3], o["name"] + ".npy"))
    b = np.load(os.path.join(sys.argv[4], o["name"] + ".npy"))
    assert np.array_equal(a, b), o["name"]
print(f"GpuOcl {sys.argv[5]}, empty driver cache: from .onnx {onnx['ready_ms']:.0f} ms to a ready "
      f"session, {onnx['load_ms']:.0f} ms to the first result; from .bpk {bpk['ready_ms']:.0f} ms "
      f"and {bpk['load_ms']:.0f} ms")
EOF
done

# Another driver (its version faked by the configure key GpuOcl documents
# for this): the stored program is not used; the model notes why and runs,
# recompiled from the portable graph, with the same result.
mkdir -p "$tmp/pocl_other" "$tmp/out_other"
if POCL_CACHE_DIR="$tmp/pocl_other" "$cli" "${gpuocl[@]}" --backend-config GpuOcl.driver_version=0.0-other \
     run "$tmp/resnet18.bpk" --input "input=$models/resnet18.input.npy" \
     --output-dir "$tmp/out_other" --json >"$tmp/other.json" 2>"$tmp/other.err"; then
  "$py" - "$tmp/other.json" "$tmp/out_other/output.npy" "$tmp/out_resnet18_bpk/output.npy" <<'EOF' &&
import json, sys
import numpy as np
j = json.load(open(sys.argv[1]))
assert j["backends_used"] == ["GpuOcl"], j["backends_used"]
assert any("compiled for" in n and "driver 0.0-other" in n for n in j["notes"]), j["notes"]
assert np.allclose(np.load(sys.argv[2]), np.load(sys.argv[3]), rtol=1e-4, atol=1e-5)
EOF
    pass "another driver: recompiled on GpuOcl with a note, same output" || fail "another driver: $(cat "$tmp/other.json" | head -c 600)"
else
  fail "another driver: run failed: $(tail -5 "$tmp/other.err")"
fi
finish
