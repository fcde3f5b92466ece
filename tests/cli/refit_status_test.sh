#!/bin/bash
# `refit status` against a real refitd on 127.0.0.1:0: no members, no plan;
# a wrong or missing token and an unreachable server fail with exit 1.
set -u
# shellcheck source=tests/testing/check.sh
. "${TEST_SRCDIR}/${TEST_WORKSPACE:-refit}/tests/testing/check.sh" 2>/dev/null ||
  . "$(find "${TEST_SRCDIR}" -path '*tests/testing/check.sh' | head -1)"
REFIT=$(find_bin cli/refit)
REFITD=$(find_bin server/refitd)
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
echo "s3cret-token" > "$tmp/token"
echo "wrong-token" > "$tmp/bad"
"$REFITD" --address=127.0.0.1:0 --token_file="$tmp/token" > "$tmp/refitd.out" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
port=""
for _ in $(seq 100); do  # up to 10 s
  port=$(sed -n 's/^refitd listening on port \([0-9]*\)$/\1/p' "$tmp/refitd.out")
  [ -n "$port" ] && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
[ -n "$port" ] || { echo "FAIL refitd did not report its port:"; cat "$tmp/refitd.out"; exit 1; }
fail=0
CHECK_TIMEOUT_S=30
check status-help 0 '^  --token_file' -- "$REFIT" status --help
check status-empty-server 2 '--server needs HOST:PORT' -- "$REFIT" status --server=''
check health-serving 0 "^refitd 127.0.0.1:$port: SERVING$" -- "$REFIT" health --server "127.0.0.1:$port"
check status-members 0 '^members: 0$' -- "$REFIT" status --server "127.0.0.1:$port" --token_file "$tmp/token"
check status-no-plan 0 'plan fingerprint: \(no plan\)' -- "$REFIT" status --server "127.0.0.1:$port" --token_file "$tmp/token"
check status-no-rounds 0 '^rounds: none$' -- "$REFIT" status --server "127.0.0.1:$port" --token_file "$tmp/token"
check status-json 0 '"members": \[\]' -- "$REFIT" status --server "127.0.0.1:$port" --token_file "$tmp/token" --json
check status-dash-spelling 0 '^members: 0$' -- "$REFIT" status --server "127.0.0.1:$port" --token-file "$tmp/token"
check status-wrong-token 1 'UNAUTHENTICATED' -- "$REFIT" status --server "127.0.0.1:$port" --token_file "$tmp/bad"
check status-no-token 1 'UNAUTHENTICATED' -- "$REFIT" status --server "127.0.0.1:$port"
check status-missing-token-file 1 'token_file: cannot read' -- "$REFIT" status --server "127.0.0.1:$port" --token_file "$tmp/nope"
kill $pid; wait $pid 2>/dev/null
check status-unreachable 1 "127.0.0.1:$port" -- "$REFIT" status --server "127.0.0.1:$port" --timeout_s 1
# With its default timeout too, a stopped refitd is named within the 2 s
# connect timeout.
t0=$(date +%s%N)
check status-refused-fast 1 "127.0.0.1:$port not reachable within 2s: connection refused" -- \
  "$REFIT" status --server "127.0.0.1:$port"
took_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$took_ms" -lt 4000 ] && echo "ok status-refused-within-4s ($took_ms ms)" ||
  { echo "FAIL status-refused took $took_ms ms"; fail=1; }
check health-refused 1 "refit health: UNAVAILABLE: refitd 127.0.0.1:$port: .*Connection refused" -- \
  "$REFIT" health --server "127.0.0.1:$port" --timeout_s 2
# Without --server, status and health ask refitd's default address (whether
# or not a refitd listens there on this machine).
out=$("$REFIT" health --timeout_s 1 2>&1)
grep -q '127.0.0.1:50051' <<<"$out" && echo "ok health-default-server" ||
  { echo "FAIL health-default-server: $out"; fail=1; }
out=$("$REFIT" status --timeout_s 1 2>&1); rc=$?
{ [ $rc = 0 ] && grep -q '^members: ' <<<"$out"; } || { [ $rc = 1 ] && grep -q '127.0.0.1:50051' <<<"$out"; } &&
  echo "ok status-default-server" || { echo "FAIL status-default-server rc=$rc: $out"; fail=1; }
exit $fail
