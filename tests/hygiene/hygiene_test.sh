#!/bin/bash
# One rule of the hygiene contract, as `backplane conformance` checks it.
#
#   hygiene_test.sh BACKPLANE BACKEND_SO ID RULE
#
# With RULE (e.g. "signal mask"): the backend breaks that rule alone, so the
# run fails, the rule is reported BROKEN and every other rule kept. With RULE
# "": the backend breaks none, and every rule is kept.
cli=$1
dir=$(dirname "$2")
id=$3
rule=$4
. "$(dirname "$0")/../cli/lib.sh" hygiene

out=$("$cli" conformance --backend "$id" --backend-path "$dir" --filter Relu 2>&1)
status=$?
echo "$out" | sed -n "/^$id: hygiene/,/^$id: operator cases/p"
# No hygiene report at all: show what the run said instead.
echo "$out" | grep -q "^$id: hygiene" || { echo "no hygiene report; the run printed:"; echo "$out" | head -40; }
rules=("environment" "affinity" "signal mask" "signal handlers" "floating point" "locale"
       "working directory" "umask" "threads")
for r in "${rules[@]}"; do
  line=$(echo "$out" | grep "^  $r: ")
  if [ "$r" = "$rule" ]; then
    echo "$line" | grep -q "^  $r: BROKEN " && pass "$r: reported broken" ||
      fail "$r: not reported broken (${line:-no line})"
  else
    echo "$line" | grep -q "^  $r: kept$" && pass "$r: kept" || fail "$r: ${line:-no line}"
  fi
done
if [ -n "$rule" ]; then
  [ "$status" -eq 1 ] && pass "exit status 1" || fail "exit status $status"
  echo "$out" | grep -q "^$id: [0-9]* passed, [1-9][0-9]* failed" &&
    pass "the summary counts the failure" || fail "no failure counted"
else
  [ "$status" -eq 0 ] && pass "exit status 0" || fail "exit status $status"
fi
finish
