#!/bin/bash
# Runs the refitd binary as an operator would: help, flag errors, start and
# stop on a signal.
set -u
# shellcheck source=tests/testing/check.sh
. "${TEST_SRCDIR}/${TEST_WORKSPACE:-refit}/tests/testing/check.sh" 2>/dev/null ||
  . "$(find "${TEST_SRCDIR}" -path '*tests/testing/check.sh' | head -1)"
REFITD=$(find_bin server/refitd)
for flag in --address --tls_cert --tls_key --tls_client_ca --token_file \
    --allow_insecure_non_loopback --min_engines --max_buffers \
    --max_metadata_bytes --heartbeat_timeout_ms --round_timeout_s \
    --plan_settle_ms --plan_settle_max_ms --plan_cache_mib --staging_mib --lanes \
    --max_plan_mib --slice_threads --log_level --log_format --metrics_port --drain_ms; do
  check "help$flag" 0 "^  $flag" -- "$REFITD" --help
done
check help-short 0 "^  --token_file" -- "$REFITD" -h
# docs/operations.md's flag table lists every flag `refitd --help` prints,
# and no other.
doc="${TEST_SRCDIR}/${TEST_WORKSPACE:-refit}/docs/operations.md"
[ -r "$doc" ] || doc=$(find -L "${TEST_SRCDIR}" -path '*docs/operations.md' | head -1)
help_flags=$("$REFITD" --help | sed -nE 's/^  --([a-z_0-9]+) \(default.*/\1/p' | sort -u)
doc_flags=$(grep -E '^\| `--' "$doc" | cut -d'|' -f2 | grep -oE -- '--[a-z_0-9]+' | sed 's/^--//' | sort -u)
if [ -n "$help_flags" ] && [ "$help_flags" = "$doc_flags" ]; then echo "ok docs-flag-table"; else
  echo "FAIL docs-flag-table: only in --help: $(comm -23 <(echo "$help_flags") <(echo "$doc_flags") | tr '\n' ' ')" \
    "only in docs/operations.md: $(comm -13 <(echo "$help_flags") <(echo "$doc_flags") | tr '\n' ' ')"
  fail=1
fi
# The level is spelled as the logs spell it (warning); warn is accepted too.
check help-log-level 0 'trace, debug, info, warning, error' -- "$REFITD" --help
for level in warning warn WARNING; do
  check "log-level-$level" 2 '--metrics_port: .*must be 0..65535' -- \
    "$REFITD" --address=127.0.0.1:0 --log_level=$level --metrics_port=70000
done
check unknown-flag 2 'unknown flag --bogus .*refitd --help' -- "$REFITD" --bogus=1
check bad-count 2 "--plan_settle_ms=soon: not an integer \\(Illegal value 'soon' specified for flag 'plan_settle_ms'\\)" -- "$REFITD" --plan_settle_ms=soon
check negative-count 2 '--plan_settle_ms: not a count: -1' -- "$REFITD" --plan_settle_ms=-1
check huge-mib 2 '--staging_mib 9223372036854775807: must be 1..1048576' -- "$REFITD" --staging_mib=9223372036854775807
check bad-slice-threads 2 '--slice_threads: must be 1..1024' -- "$REFITD" --slice_threads=0
check help-is-not-a-flag 2 'unknown flag --help_me' -- "$REFITD" --help_me
check missing-token-file 2 '/nonexistent/token' -- "$REFITD" --token_file=/nonexistent/token
# Credential files are read with a cap: a device fails at once.
CHECK_TIMEOUT_S=10 check token-file-device 2 '/dev/zero is not a regular file' -- \
  "$REFITD" --token_file=/dev/zero
check lanes-absurd 2 '--lanes 1000000: must be 1..64' -- "$REFITD" --lanes=1000000
check max-plan-overflow 2 '--max_plan_mib 9223372036854775807: must be 1..1048576' -- "$REFITD" --max_plan_mib=9223372036854775807
check bad-log-level 2 "--log_level: log level 'loud'" -- "$REFITD" --log_level=loud
check bad-log-format 2 "--log_format: log format 'xml'" -- "$REFITD" --log_format=xml
check bad-metrics-port 2 '--metrics_port: .*must be 0..65535' -- "$REFITD" --address=127.0.0.1:0 --metrics_port=70000
flagfile="${TEST_TMPDIR:-/tmp}/refitd.$$.flags"
printf -- '--slice_threads=0\n' >"$flagfile"
check flagfile 2 '--slice_threads: must be 1..1024: 0' -- "$REFITD" --flagfile="$flagfile"

# Starts on port 0, reports the port, stops on SIGTERM within 5 s.
log="${TEST_TMPDIR:-/tmp}/refitd.$$.log"
(ulimit -Sn 256; exec "$REFITD" --address=127.0.0.1:0 --plan_settle_ms=5 \
  --plan_settle_max_ms=50 --slice_threads=2) >"$log" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q 'listening on port [1-9]' "$log" && break; sleep 0.1; done
if grep -q 'listening on port [1-9]' "$log"; then echo "ok start"; else echo "FAIL start:"; cat "$log"; fail=1; fi
# The open-file limit is raised to the hard limit at start (from a low soft
# limit, as on hosts with nofile=1024).
hard=$(ulimit -Hn)
soft=$(awk '/Max open files/ {print $4}' "/proc/$pid/limits")
if [ "$soft" = "$hard" ] || [ "$hard" = unlimited -a "$soft" = unlimited ]; then
  echo "ok fd-limit $soft"
else
  echo "FAIL fd-limit: soft $soft, hard $hard"; fail=1
fi
kill -TERM "$pid"
for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then
  echo "FAIL stop: still running 5 s after SIGTERM"; kill -KILL "$pid"; fail=1
else
  wait "$pid"; rc=$?
  if [ "$rc" = 0 ]; then echo "ok stop"; else echo "FAIL stop: rc=$rc"; fail=1; fi
fi
exit $fail
