#!/usr/bin/env bash
# check-fresh.sh — proves that the README's two commands work on a brand-new
# Debian 12 machine, as a new user runs them.
#
#   sudo scripts/check-fresh.sh [--keep]
#
# 1. Builds a minimal Debian 12 (bookworm) root file system in a temporary
#    directory with mmdebstrap (--variant=apt plus only g++ cmake make git
#    ca-certificates), using this machine's apt sources.
# 2. Copies a clean export of HEAD into it (git archive: nothing untracked,
#    uncommitted or built leaks in). Commit before running it.
# 3. Inside it (chroot, /proc and /dev mounted): runs `cmake` directly first,
#    which must fail naming the Debian packages to install; then exactly the
#    README's two commands, `make demo` and `make test`, printing each one's
#    wall time and exit status and the packages install-deps added.
# 4. Removes the root (unless --keep), also when interrupted; safe to re-run.
#
# Not part of `make test` (it downloads and builds everything: ~20 minutes on 2
# cores). Run it before resolving anything that changes dependencies. Needs
# root (mmdebstrap, chroot, mount); installs mmdebstrap if it is missing.
set -euo pipefail

keep=0
[ "${1:-}" = "--keep" ] && keep=1
top=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
if [ "$(id -u)" -ne 0 ]; then
  echo "check-fresh: needs root (mmdebstrap, chroot, mount): sudo $0" >&2
  exit 2
fi
if ! command -v mmdebstrap >/dev/null 2>&1; then
  echo "check-fresh: installing mmdebstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q mmdebstrap >/dev/null
fi

work=$(mktemp -d "${TMPDIR:-/var/tmp}/backplane-fresh.XXXXXX")
root="$work/root"
mounted=()
cleanup() {
  local m
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    m=${mounted[i]}
    umount -l "$m" 2>/dev/null || true
  done
  if [ "$keep" = 1 ]; then
    echo "check-fresh: kept $root"
  else
    rm -rf --one-file-system "$work"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# This machine's apt sources, so the root reaches the same archive.
sources=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] && [ -s "$f" ] && grep -q '^[^#]' "$f" && sources+=("$f")
done

echo "== check-fresh: minimal Debian 12 root in $root"
start=$(date +%s)
mmdebstrap --variant=apt --include=g++,cmake,make,git,ca-certificates \
  --quiet bookworm "$root" "${sources[@]}"
echo "   root built in $(( $(date +%s) - start )) s ($(du -sh "$root" | cut -f1))"

src=/home/user/backplane
mkdir -p "$root$src"
git -C "$top" archive --format=tar HEAD | tar -x -C "$root$src"
echo "   exported $(git -C "$top" rev-parse --short HEAD) ($(git -C "$top" log -1 --format=%s | cut -c1-60))"
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
mount -t proc proc "$root/proc" && mounted+=("$root/proc")
mount --rbind /dev "$root/dev" && mount --make-rslave "$root/dev" && mounted+=("$root/dev")
mount -t sysfs sysfs "$root/sys" && mounted+=("$root/sys")
# This machine's own certificate authorities (a TLS-inspecting proxy's, say)
# and npm settings, as with its apt sources: the root reaches npm's registry
# the way this machine does. A new user's machine has its own.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp -L /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  chroot "$root" update-ca-certificates >/dev/null 2>&1
fi
if [ -f /etc/npmrc ]; then cp -L /etc/npmrc "$root/etc/npmrc"; fi

# Runs a command in the root as a new user's shell would: clean environment.
in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    bash -c "cd $src && $1"
}
in_root "dpkg-query -W -f='\${Package}\n' | sort" > "$work/before.txt"

status=0
echo "== check-fresh: cmake without the packages must name them"
if in_root "cmake -S . -B /tmp/nodeps" > "$work/nodeps.log" 2>&1; then
  echo "   FAIL: configure succeeded without the dependencies"; status=1
elif grep -q "sudo apt-get install" "$work/nodeps.log"; then
  sed -n '/cannot be configured/,/install-deps/p' "$work/nodeps.log" | sed 's/^/   | /'
else
  echo "   FAIL: configure failed without naming the packages:"; tail -20 "$work/nodeps.log"; status=1
fi

run_step() {
  local name=$1 t0 rc
  echo "== check-fresh: $name"
  t0=$(date +%s)
  set +e
  in_root "$name" > "$work/$name.log" 2>&1
  rc=$?
  set -e
  local secs=$(( $(date +%s) - t0 ))
  tail -25 "$work/$name.log" | sed 's/^/   | /'
  printf '   %s: exit %d, wall %dm%02ds\n' "$name" "$rc" $((secs / 60)) $((secs % 60))
  echo "$name exit $rc wall $((secs / 60))m$(printf %02d $((secs % 60)))s" >> "$work/summary.txt"
  [ "$rc" -eq 0 ] || status=1
  return 0
}
run_step "make demo"
[ "$status" -eq 0 ] && run_step "make test"

in_root "dpkg-query -W -f='\${Package}\n' | sort" > "$work/after.txt"
requested=$(grep -h '^install-deps: installing' "$work"/make*.log | head -1 | sed 's/^install-deps: installing //')
echo "== check-fresh: install-deps asked for: ${requested:-nothing}"
echo "   packages added in all (with dependencies): $(comm -13 "$work/before.txt" "$work/after.txt" | wc -l)"
echo "== check-fresh: summary"
sed 's/^/   /' "$work/summary.txt"
if [ "$status" -eq 0 ]; then echo "check-fresh: PASS"; else
  echo "check-fresh: FAIL (logs: $work, kept)"; keep=1; fi
exit "$status"
