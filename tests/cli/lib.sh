# lib.sh — sourced by the CLI test scripts of this folder, after they read
# their arguments: a scratch directory ($tmp, removed on exit) and the tally.
#
#   . "$(dirname "$0")/lib.sh" NAME   NAME prefixes $tmp and the summary line
#   pass MESSAGE, fail MESSAGE        one check's outcome
#   finish                            the summary; exit status 1 if any failed
cli_test_name=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/backplane_${cli_test_name}.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failures=0
passes=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok:   $*"; passes=$((passes + 1)); }
finish() {
  if [ "$failures" -ne 0 ]; then
    echo "$cli_test_name: $passes passed, $failures failure(s)"
    exit 1
  fi
  echo "$cli_test_name: all $passes passed"
}
