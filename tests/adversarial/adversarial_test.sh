#!/bin/bash
# Runs the adversarial suite once (CI-bounded) against refitd.
set -u
root="${TEST_SRCDIR}/${TEST_WORKSPACE:-refit}"
exec timeout 120 "$root/tests/adversarial/adversarial_suite" --refitd="$root/server/refitd"
