# Sourced by the shell tests that run refit's binaries as a user would.
#
#   find_bin RELPATH             the runfiles path of a built binary
#   check NAME WANT_RC PATTERN -- cmd...
#                                runs cmd; the exit code must be WANT_RC and
#                                the output (stdout and stderr) must match the
#                                extended regex PATTERN; prints ok/FAIL and
#                                sets fail=1 on a failure; cmd gets at most
#                                CHECK_TIMEOUT_S seconds (60), then fails
fail=0
find_bin() {
  local p="${TEST_SRCDIR}/${TEST_WORKSPACE:-refit}/$1"
  [ -x "$p" ] || p="$(find "${TEST_SRCDIR}" -path "*$1" -type f | head -1)"
  echo "$p"
}
check() {
  local name=$1 want=$2 pat=$3; shift 4
  local out rc
  out=$(timeout "${CHECK_TIMEOUT_S:-60}" "$@" 2>&1); rc=$?
  if [ "$rc" != "$want" ]; then echo "FAIL $name: rc=$rc want $want"; echo "$out"; fail=1; return; fi
  if ! grep -qE -- "$pat" <<<"$out"; then echo "FAIL $name: no /$pat/ in:"; echo "$out"; fail=1; return; fi
  echo "ok $name"
}
