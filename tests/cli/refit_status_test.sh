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
# Starts refitd with the given flags, its output in $1; sets pid and port.
start_refitd() {
  local out=$1; shift
  "$REFITD" --address=127.0.0.1:0 "$@" > "$out" 2>&1 &
  pid=$!
  port=""
  for _ in $(seq 100); do  # up to 10 s
    port=$(sed -n 's/^refitd listening on port \([0-9]*\)$/\1/p' "$out")
    [ -n "$port" ] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$port" ] || { echo "FAIL refitd did not report its port:"; cat "$out"; exit 1; }
}
start_refitd "$tmp/refitd.out" --token_file="$tmp/token"
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
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
# A refitd with TLS: status and health speak it with --tls_ca_file.
if command -v openssl > /dev/null; then
  pki="$tmp/pki"; mkdir -p "$pki"
  key="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
  # shellcheck disable=SC2086
  openssl req -x509 $key -days 1 -subj /CN=ca -addext basicConstraints=critical,CA:TRUE \
      -addext keyUsage=critical,keyCertSign,cRLSign -keyout "$pki/ca.key" -out "$pki/ca.pem" \
      > "$pki/log" 2>&1
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' > "$pki/ext"
  # shellcheck disable=SC2086
  openssl req $key -subj /CN=refitd -keyout "$pki/server.key" -out "$pki/server.csr" \
      >> "$pki/log" 2>&1
  openssl x509 -req -days 1 -in "$pki/server.csr" -CA "$pki/ca.pem" -CAkey "$pki/ca.key" \
      -CAcreateserial -extfile "$pki/ext" -out "$pki/server.pem" >> "$pki/log" 2>&1
  plain_pid=$pid plain_port=$port
  start_refitd "$tmp/refitd_tls.out" --token_file="$tmp/token" --tls_cert="$pki/server.pem" \
      --tls_key="$pki/server.key"
  tls_pid=$pid tls_port=$port pid=$plain_pid port=$plain_port
  check health-tls 0 "^refitd 127.0.0.1:$tls_port: SERVING$" -- \
    "$REFIT" health --server "127.0.0.1:$tls_port" --tls_ca_file "$pki/ca.pem"
  check status-tls 0 '^members: 0$' -- "$REFIT" status --server "127.0.0.1:$tls_port" \
    --token_file "$tmp/token" --tls_ca_file "$pki/ca.pem"
  check status-tls-plaintext 1 "127.0.0.1:$tls_port" -- "$REFIT" status \
    --server "127.0.0.1:$tls_port" --token_file "$tmp/token" --timeout_s 2
  check status-tls-key-alone 1 'tls_cert_file and --tls_key_file' -- "$REFIT" status \
    --server "127.0.0.1:$tls_port" --tls_ca_file "$pki/ca.pem" --tls_key_file "$pki/server.key"
  kill $tls_pid; wait $tls_pid 2>/dev/null
else
  echo "FAIL status-tls: the openssl command line (Debian package openssl) makes the test certificates"
  fail=1
fi
# Without --server, status and health ask refitd's default address (whether
# or not a refitd listens there on this machine).
out=$("$REFIT" health --timeout_s 1 2>&1)
grep -q '127.0.0.1:50051' <<<"$out" && echo "ok health-default-server" ||
  { echo "FAIL health-default-server: $out"; fail=1; }
out=$("$REFIT" status --timeout_s 1 2>&1); rc=$?
{ [ $rc = 0 ] && grep -q '^members: ' <<<"$out"; } || { [ $rc = 1 ] && grep -q '127.0.0.1:50051' <<<"$out"; } &&
  echo "ok status-default-server" || { echo "FAIL status-default-server rc=$rc: $out"; fail=1; }
exit $fail
