#!/usr/bin/env bash
# exports_test.sh SHIPPED_SO TESTING_SO [SHIPPED_SO TESTING_SO ...]: each
# shipped client library exports refit_member_join and no test-pattern
# symbol; its testing variant exports refit_member_join, both
# refit_testing_* entry points, and nothing but refit_* symbols.
set -euo pipefail
exports() { nm -D --defined-only "$1" | awk '{print $3}'; }
fail=0
while [ $# -ge 2 ]; do
  shipped=$1 testing=$2
  shift 2
  if ! exports "$shipped" | grep -qx refit_member_join; then
    echo "FAIL: $shipped does not export refit_member_join"; fail=1
  fi
  if exports "$shipped" | grep -E 'pattern|^refit_testing_'; then
    echo "FAIL: $shipped exports the test-pattern symbols above"; fail=1
  fi
  for sym in refit_member_join refit_testing_fill_pattern refit_testing_check_pattern; do
    if ! exports "$testing" | grep -qx "$sym"; then
      echo "FAIL: $testing does not export $sym"; fail=1
    fi
  done
  if exports "$testing" | grep -v '^refit_'; then
    echo "FAIL: $testing exports the non-refit symbols above"; fail=1
  fi
  echo "$(basename "$shipped"): $(exports "$shipped" | wc -l) symbols;" \
       "$(basename "$testing"): $(exports "$testing" | wc -l)"
done
[ $# -eq 0 ] || { echo "usage: exports_test.sh (SHIPPED_SO TESTING_SO)..."; exit 2; }
[ $fail -eq 0 ] || exit 1
echo "exports OK"
