#!/usr/bin/env bash
# Runs refit_demo (refitd + member processes) and checks that it says every
# engine byte was verified. Args: DEMO REFITD MEMBER [demo flags...]
set -uo pipefail
demo=$1 refitd=$2 member=$3
shift 3
out=$("$demo" --refitd="$refitd" --member="$member" --deadline_s=60 "$@" 2>&1)
rc=$?
echo "$out"
if [[ $rc -ne 0 ]]; then
  echo "FAIL: refit_demo exited $rc"
  exit 1
fi
if ! grep -q '^verified: .* hold the trainer.s bytes exactly' <<<"$out"; then
  echo "FAIL: no verification line"
  exit 1
fi
echo PASS
