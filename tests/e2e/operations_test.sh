#!/usr/bin/env bash
# refitd as an operator runs it: `refit status --watch` following a round,
# JSON logs, /metrics scraped by Debian's real
# Prometheus server (the round counter read back through its query API),
# then SIGTERM (exit 0). Args: REFITD MEMBER REFIT.
set -uo pipefail
refitd=$1 member=$2 refit=$3
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail=0
pids=()
cleanup() { for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
get() { python3 -c "import sys,urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())" "$1"; }
ok() { echo "ok $1"; }
bad() { echo "FAIL $1"; fail=1; }

"$refitd" --address=127.0.0.1:0 --metrics_port=0 --log_format=json \
  --plan_settle_ms=5 --round_timeout_s=60 >"$tmp/refitd.out" 2>"$tmp/refitd.log" &
rpid=$!; pids+=($rpid)
for _ in $(seq 100); do grep -q 'metrics on port' "$tmp/refitd.out" && break; sleep 0.1; done
port=$(sed -n 's/^refitd listening on port //p' "$tmp/refitd.out")
mport=$(sed -n 's/^refitd metrics on port //p' "$tmp/refitd.out")
[ -n "$port" ] && [ -n "$mport" ] || { echo "FAIL refitd did not start:"; cat "$tmp/refitd.out" "$tmp/refitd.log"; exit 1; }

# `refit status --watch` follows the next round until it ends.
"$refit" status --server="127.0.0.1:$port" --watch --timeout_s=60 --interval_ms=20 \
  >"$tmp/watch.out" 2>&1 &
wpid=$!; pids+=($wpid)
for _ in $(seq 100); do grep -q 'no round in flight' "$tmp/watch.out" && break; sleep 0.1; done

# One committed round: a trainer rank that starts it and an engine worker.
common=(--server="127.0.0.1:$port" --model=tiny-qwen3 --rounds=1 --deadline_s=60)
"$member" "${common[@]}" --side=engine --engine_id=e0 --rank=0 --convention=vllm:tp=1 >"$tmp/engine.out" 2>&1 &
epid=$!; pids+=($epid)
"$member" "${common[@]}" --side=trainer --rank=0 --convention=megatron:tp=1 --start >"$tmp/trainer.out" 2>&1
trc=$?
wait $epid; erc=$?
if [ $trc = 0 ] && [ $erc = 0 ]; then ok "round 1 committed"; else bad "members: trainer rc=$trc engine rc=$erc"; cat "$tmp/trainer.out" "$tmp/engine.out"; fi

wait $wpid; wrc=$?
if [ $wrc = 0 ] && grep -q '^round 1 committed in .* bytes' "$tmp/watch.out" &&
   grep -q '^no round in flight' "$tmp/watch.out"; then ok "status --watch"; else
  bad "status --watch rc=$wrc"; cat "$tmp/watch.out"; fi

# The log: JSON lines, the round's reports and its commit.
python3 - "$tmp/refitd.log" <<'PY' && ok "json log" || bad "json log"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert all({"ts", "level", "logger", "msg"} <= l.keys() for l in lines)
reports = [l for l in lines if l["msg"].startswith("member reported") and l.get("round") == 1]
assert len(reports) == 2, reports
assert {r["transport"] for r in reports} == {"gloo"}, reports
assert all(r["peak_staging_bytes"] >= 0 for r in reports), reports
commits = [l for l in lines if l["msg"].startswith("round committed")]
assert len(commits) == 1 and commits[0]["round"] == 1 and commits[0]["bytes"] > 0, commits
assert commits[0]["peak_staging_bytes"] == max(r["peak_staging_bytes"] for r in reports), commits
PY

# /metrics directly, and checked by promtool.
get "http://127.0.0.1:$mport/metrics" >"$tmp/metrics.txt"
grep -q '^refit_rounds_committed_total 1$' "$tmp/metrics.txt" &&
  grep -qE '^refit_last_round_peak_staging_bytes\{member="[a-z/0-9]+"\} [0-9]+$' "$tmp/metrics.txt" &&
  ok "scrape" || { bad "scrape"; cat "$tmp/metrics.txt"; }
promtool check metrics <"$tmp/metrics.txt" && ok "promtool" || bad "promtool"

# Debian's Prometheus scrapes refitd; its query API reads the counter back.
pport=$(free_port)
cat >"$tmp/prometheus.yml" <<YML
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: refitd
    static_configs: [{targets: ["127.0.0.1:$mport"]}]
YML
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
  --web.listen-address="127.0.0.1:$pport" >"$tmp/prometheus.log" 2>&1 &
ppid_=$!; pids+=($ppid_)
value=""
for _ in $(seq 60); do  # up to 30 s
  value=$(get "http://127.0.0.1:$pport/api/v1/query?query=refit_rounds_committed_total" 2>/dev/null |
          python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")' 2>/dev/null)
  [ -n "$value" ] && break
  sleep 0.5
done
[ "$value" = 1 ] && ok "prometheus query: refit_rounds_committed_total=$value" || { bad "prometheus query: '$value'"; tail -5 "$tmp/prometheus.log"; }
kill -TERM $ppid_; wait $ppid_ 2>/dev/null

# SIGTERM: refitd logs its shutdown and exits 0 (a round in flight is
# aborted and its members told: server/observability_test).
kill -TERM $rpid
for _ in $(seq 100); do kill -0 $rpid 2>/dev/null || break; sleep 0.1; done
if kill -0 $rpid 2>/dev/null; then bad "still running 10 s after SIGTERM"; else
  wait $rpid; rc=$?
  [ $rc = 0 ] && ok "SIGTERM exit 0" || bad "SIGTERM exit $rc"
fi
grep -q '"msg":"stopped"' "$tmp/refitd.log" && ok "stop logged" || bad "stop logged"
[ $fail = 0 ] && echo "PASS" || { echo "--- refitd log"; cat "$tmp/refitd.log"; }
exit $fail
