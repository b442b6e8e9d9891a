#!/usr/bin/env bash
# edges_test.sh — nothing lost and nothing crashes at the edges: files written
# atomically (a full disk leaves the previous file whole; recompiling an
# artifact under a running process changes nothing for it), thread counts
# bounded, readers that validate before they allocate, `error:` on every
# failure of the command line.
#
#   edges_test.sh BACKPLANE_CLI MODELS_DIR [PYTHON]
#
# A full disk is simulated two ways: RLIMIT_FSIZE (`ulimit -f`, any user:
# write() fails with EFBIG), and, when running as root, a 16 MiB tmpfs (write()
# fails with ENOSPC). Both must leave the previous file untouched.
set -uo pipefail

cli=${1:?usage: edges_test.sh BACKPLANE_CLI MODELS_DIR [PYTHON]}
models=${2:?usage: edges_test.sh BACKPLANE_CLI MODELS_DIR [PYTHON]}
py=${3:-/usr/bin/python3}

. "$(dirname "$0")/lib.sh" edges
mnt=""
cleanup() {
  [ -n "$mnt" ] && umount "$mnt" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
# A file-size limit must fail the write, not kill the process with SIGXFSZ.
trap '' XFSZ
cpu=(--no-dynamic-backends --backends CpuRef)
model=$models/squeezenet1_1.onnx
input="input=$models/squeezenet1_1.input.npy"

# expect_error NAME WANT_EXIT WANT_TEXT -- COMMAND...: exit status, one
# `error:` line on stderr mentioning WANT_TEXT, and no crash.
expect_error() {
  local name=$1 want_exit=$2 want_text=$3
  shift 4
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" -ne "$want_exit" ]; then
    fail "$name: exit $rc, wanted $want_exit; stderr: $(head -3 "$tmp/err")"
  elif ! grep -q "^error: .*$want_text" "$tmp/err"; then
    fail "$name: stderr lacks 'error: ...$want_text...': $(head -3 "$tmp/err")"
  else
    pass "$name: exit $want_exit, $(head -1 "$tmp/err" | cut -c1-110)"
  fi
}

# 1. Thread counts are bounded; usage errors say `error:` and exit 2.
for n in -1 99999 65536 32768; do
  expect_error "--threads $n" 2 "threads" -- "$cli" run "$model" "${cpu[@]}" --threads "$n"
done
expect_error "--runs 0" 2 "runs" -- "$cli" run "$model" "${cpu[@]}" --runs 0
expect_error "--warmup x" 2 "warmup" -- "$cli" run "$model" "${cpu[@]}" --warmup x
expect_error "unknown option" 2 "no-such-option" -- "$cli" run "$model" --no-such-option
expect_error "missing MODEL" 2 "MODEL" -- "$cli" run
"$cli" run "$model" "${cpu[@]}" --threads 0 --runs 1 >/dev/null 2>"$tmp/err" &&
  pass "--threads 0 (the default) runs" || fail "--threads 0: $(cat "$tmp/err")"

# 2. A --backend-path that does not exist is an error, not a warning.
expect_error "--backend-path missing" 1 "$tmp/no-such-dir" -- "$cli" --backend-path "$tmp/no-such-dir" run "$model" --runs 1

# 3. Readers validate before they allocate. 128 bytes claiming 4 GiB: refused
# from the header, under a 1 GiB address-space limit that an allocation of the
# claimed size could not pass (it would end as std::bad_alloc instead).
"$py" - "$tmp" <<'EOF'
import sys, numpy as np
d = sys.argv[1]
def npy(path, descr, shape, data=b"", total=None):
    h = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    h += " " * ((64 - (10 + len(h) + 1) % 64) % 64) + "\n"
    b = b"\x93NUMPY\x01\x00" + bytes([len(h) & 0xFF, len(h) >> 8]) + h.encode() + data
    if total is not None:
        b += b"\0" * (total - len(b))
    open(path, "wb").write(b)
npy(f"{d}/claims_4gib.npy", "<f4", "(1, 3, 32768, 32768)", total=128)
npy(f"{d}/overflow.npy", "<f4", "(4294967296, 4294967296, 4294967296)")
inp = np.zeros((1, 3, 224, 224), np.float32).tobytes()
npy(f"{d}/trailing.npy", "<f4", "(1, 3, 224, 224)", inp + b"\0\0\0\0")
EOF
# The 1 GiB limit: an address-space limit (ulimit -v) for a plain build; an
# AddressSanitizer build reserves terabytes of shadow address space, so there
# ASan's own max_allocation_size_mb is the limit (an allocation above it
# aborts the process instead of returning).
if grep -q __asan_init "$cli"; then
  limit=(env "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}max_allocation_size_mb=1024:allocator_may_return_null=0")
else
  limit=(bash -c 'ulimit -v 1048576; exec "$@"' limit)
fi
start=$(date +%s%N)
"${limit[@]}" "$cli" run "$model" "${cpu[@]}" --input "input=$tmp/claims_4gib.npy" >"$tmp/out" 2>"$tmp/err"
rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
if [ $rc -eq 1 ] && grep -q "^error: .*claims_4gib.npy: data is shorter than shape" "$tmp/err"; then
  pass "a 128-byte .npy claiming 4 GiB: refused from its header under a 1 GiB limit (${ms} ms, whole CLI run)"
else
  fail "a 128-byte .npy claiming 4 GiB: exit $rc, $(head -2 "$tmp/err")"
fi
expect_error ".npy whose shape overflows" 1 "overflow.npy: shape .* is too large" -- \
  "$cli" run "$model" "${cpu[@]}" --input "input=$tmp/overflow.npy"
expect_error ".npy with trailing data" 1 "trailing.npy: 4 bytes of trailing data" -- \
  "$cli" run "$model" "${cpu[@]}" --input "input=$tmp/trailing.npy"

# 4. An --external-data file that is not the one the artifact records.
if "$cli" compile "$model" "${cpu[@]}" -o "$tmp/a.bpk" --external-data "$tmp/a.bpd" >/dev/null 2>"$tmp/err"; then
  cp "$tmp/a.bpd" "$tmp/other.bpd"
  expect_error "--external-data not recorded" 1 "other.bpd' is not one this artifact records" -- \
    "$cli" run "$tmp/a.bpk" --external-data "$tmp/other.bpd" --runs 1
else
  fail "compile a.bpk: $(cat "$tmp/err")"
fi

# 5. A full disk during compile and during run --output-dir leaves the
# previous files intact, exits 1 naming the file, and leaves no temporary.
# full_disk_cases DIR HOW FILL -- PREFIX...: the first compile and run into
# DIR succeed; then FILL (a command, may be `true`) makes the disk full and the
# same commands on a bigger model, run through PREFIX, must fail cleanly.
full_disk_cases() {
  local dir=$1 how=$2 fill=$3
  shift 4
  "$cli" compile "$model" "${cpu[@]}" -o "$dir/m.bpk" --external-data "$dir/m.bpd" >/dev/null 2>"$tmp/err" ||
    { fail "$how: first compile: $(cat "$tmp/err")"; return; }
  "$cli" run "$model" "${cpu[@]}" --input "$input" --output-dir "$dir/out" --runs 1 >/dev/null 2>"$tmp/err" ||
    { fail "$how: first run: $(cat "$tmp/err")"; return; }
  for f in m.bpk m.bpd out/output.npy; do cp "$dir/$f" "$tmp/$(basename "$f").orig"; done
  $fill
  expect_error "$how: compile on a full disk" 1 "m.bp[kd]: write failed" -- \
    "$@" "$cli" compile "$models/resnet18.onnx" "${cpu[@]}" -o "$dir/m.bpk" --external-data "$dir/m.bpd"
  check_intact "$how: compile" "$dir" m.bpk m.bpd
  expect_error "$how: run --output-dir on a full disk" 1 "output.npy: write failed" -- \
    "$@" "$cli" run "$models/resnet18.onnx" "${cpu[@]}" --input "input=$models/resnet18.input.npy" \
    --output-dir "$dir/out" --runs 1
  check_intact "$how: run --output-dir" "$dir/out" output.npy
}
check_intact() {  # NAME DIR FILE...: each FILE in DIR equals its saved copy; no *.tmp-* left
  local name=$1 dir=$2 f ok=1
  shift 2
  for f in "$@"; do cmp -s "$dir/$f" "$tmp/$f.orig" || { ok=0; fail "$name: $f changed"; }; done
  if ls "$dir" | grep -q '\.tmp-'; then ok=0; fail "$name: temporary files left: $(ls "$dir")"; fi
  [ $ok = 1 ] && pass "$name: previous files intact, no temporary left"
}
# RLIMIT_FSIZE of 1 KiB: every file the failing commands write is larger.
mkdir -p "$tmp/fsize"
full_disk_cases "$tmp/fsize" "RLIMIT_FSIZE" true -- bash -c 'ulimit -f 1; exec "$@"' limit
if [ "$(id -u)" -eq 0 ]; then
  mnt=$tmp/tmpfs
  mkdir -p "$mnt"
  if mount -t tmpfs -o size=16m tmpfs "$mnt"; then
    # After the first compile and run, fill what is left of the tmpfs.
    fill_tmpfs() { fallocate -l "$(( $(stat -f -c '%a * %S' "$mnt") ))" "$mnt/filler" 2>/dev/null ||
                   dd if=/dev/zero of="$mnt/filler" bs=64k 2>/dev/null; true; }
    full_disk_cases "$mnt" "full tmpfs" fill_tmpfs --
    umount "$mnt" && mnt=""
  else
    fail "root, but cannot mount a tmpfs for the full-disk case"
  fi
fi
# stdout on a full device is a failure too.
expect_error "stdout on /dev/full" 1 "writing standard output failed" -- \
  bash -c '"$0" run "$1" --no-dynamic-backends --backends CpuRef --runs 1 --json >/dev/full' "$cli" "$model"

# 6. Recompiling an artifact while another process runs it: no SIGBUS, the
# running process's output unchanged. The replacement's .bpd is smaller
# (squeezenet over resnet18), the case that crashed when compile rewrote files
# in place.
r18=$models/resnet18.onnx
if "$cli" compile "$r18" "${cpu[@]}" -o "$tmp/live.bpk" --external-data "$tmp/live.bpd" >/dev/null 2>"$tmp/err"; then
  "$cli" run "$tmp/live.bpk" --no-dynamic-backends --input "input=$models/resnet18.input.npy" --runs 12 \
    --output-dir "$tmp/live_out" >"$tmp/live.out" 2>"$tmp/live.err" &
  runner=$!
  sleep 0.5
  i=0
  while kill -0 $runner 2>/dev/null && [ $i -lt 6 ]; do
    if [ $((i % 2)) -eq 0 ]; then m=$model; else m=$r18; fi
    "$cli" compile "$m" "${cpu[@]}" -o "$tmp/live.bpk" --external-data "$tmp/live.bpd" >/dev/null 2>>"$tmp/recompile.err" ||
      fail "recompile $i: $(tail -1 "$tmp/recompile.err")"
    i=$((i + 1))
  done
  wait $runner
  rc=$?
  if [ $rc -ne 0 ]; then
    fail "running process while recompiling ($i recompiles): exit $rc $( [ $rc -gt 128 ] && echo "(signal $((rc - 128)))"): $(tail -2 "$tmp/live.err")"
  elif [ $i -lt 2 ]; then
    fail "the run ended before two recompiles happened ($i); the test proves nothing"
  else
    "$py" - "$tmp/live_out/output.npy" "$models/resnet18.expected.npy" <<'EOF' &&
import sys, numpy as np
got, want = np.load(sys.argv[1]), np.load(sys.argv[2])
assert got.shape == want.shape, (got.shape, want.shape)
err = float(np.max(np.abs(got - want)) / max(1e-12, float(np.max(np.abs(want)))))
assert err < 1e-4, err
EOF
      pass "a process running an artifact kept running while it was recompiled $i times; its output is unchanged" ||
      fail "the running process's output changed"
  fi
else
  fail "compile live.bpk: $(cat "$tmp/err")"
fi

finish
