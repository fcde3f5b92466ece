#!/usr/bin/env bash
# refitd as an operator runs it: `refit health` and /healthz, `refit status
# --watch` following a round, JSON logs, /metrics scraped during the round
# (each engine's gauges) and after it, checked by promtool and by Debian's
# real Prometheus server (read back through its query API), one meaning of
# a round's bytes in the log, the metrics and `refit status`, then SIGTERM
# with a drain (health says not serving; exit 0). The engine rank waits 1.5 s
# before its data plane (refit_demo_member_slow) so that the round is in
# flight when scraped. Args: REFITD MEMBER REFIT PYTHON_INIT.
set -uo pipefail
refitd=$1 member=$2 refit=$3 python_init=$4
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail=0
pids=()
cleanup() { for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
get() { python3 -c "import sys,urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())" "$1"; }
ok() { echo "ok $1"; }
bad() { echo "FAIL $1"; fail=1; }

"$refitd" --address=127.0.0.1:0 --metrics_port=0 --log_format=json --drain_ms=3000 \
  --plan_settle_ms=5 --round_timeout_s=60 >"$tmp/refitd.out" 2>"$tmp/refitd.log" &
rpid=$!; pids+=($rpid)
for _ in $(seq 100); do grep -q 'metrics on port' "$tmp/refitd.out" && break; sleep 0.1; done
port=$(sed -n 's/^refitd listening on port //p' "$tmp/refitd.out")
mport=$(sed -n 's/^refitd metrics on port //p' "$tmp/refitd.out")
[ -n "$port" ] && [ -n "$mport" ] || { echo "FAIL refitd did not start:"; cat "$tmp/refitd.out" "$tmp/refitd.log"; exit 1; }

# Health: grpc.health.v1 through `refit health`, and /healthz.
out=$("$refit" health --server="127.0.0.1:$port" 2>&1) && [ "$out" = "refitd 127.0.0.1:$port: SERVING" ] &&
  ok "refit health" || bad "refit health: $out"
[ "$(get "http://127.0.0.1:$mport/healthz")" = ok ] && ok "/healthz" || bad "/healthz"
# Before any round every engine series is there (once the engine joins) and
# every closed-set series is at zero.
get "http://127.0.0.1:$mport/metrics" >"$tmp/metrics0.txt"
grep -q '^refit_members{side="engine",state="in_round"} 0$' "$tmp/metrics0.txt" &&
  grep -q '^refit_rounds_aborted_total{reason="timeout"} 0$' "$tmp/metrics0.txt" &&
  ok "zero series from the start" || { bad "zero series"; cat "$tmp/metrics0.txt"; }
# refit_build_info says the release the Python package says.
pyver=$(sed -nE 's/^__version__ = "([^"]+)"/\1/p' "$python_init")
grep -q "^refit_build_info{version=\"$pyver\",protocol_version=\"[0-9]*\"} 1$" "$tmp/metrics0.txt" &&
  ok "build info $pyver" || { bad "build info (python says '$pyver')"; grep build_info "$tmp/metrics0.txt"; }

# `refit status --watch` follows the next round until it ends.
"$refit" status --server="127.0.0.1:$port" --watch --timeout_s=60 --interval_ms=20 \
  >"$tmp/watch.out" 2>&1 &
wpid=$!; pids+=($wpid)
for _ in $(seq 100); do grep -q 'no round in flight' "$tmp/watch.out" && break; sleep 0.1; done

# One committed round: a trainer rank that starts it and an engine worker
# that holds the round open for 4 s (room for scrapes on a loaded machine).
common=(--server="127.0.0.1:$port" --model=tiny-qwen3 --rounds=1 --deadline_s=60)
"$member" "${common[@]}" --side=engine --engine_id=e0 --rank=0 --convention=vllm:tp=1 \
  --test_round_delay_ms=4000 >"$tmp/engine.out" 2>&1 &
epid=$!; pids+=($epid)
"$member" "${common[@]}" --side=trainer --rank=0 --convention=megatron:tp=1 --start >"$tmp/trainer.out" 2>&1 &
tpid=$!; pids+=($tpid)
# A scrape during the round: the engine is in it, nothing committed yet.
# The members may take seconds to start on a loaded machine: look for up to
# 30 s, and stop looking once the round committed (then this check fails).
during=""
for _ in $(seq 600); do
  during=$(get "http://127.0.0.1:$mport/metrics")
  grep -q '^refit_members{side="engine",state="in_round"} 1$' <<<"$during" && break
  grep -q '^refit_rounds_committed_total 1$' <<<"$during" && break
  sleep 0.05
done
grep -q '^refit_members{side="engine",state="in_round"} 1$' <<<"$during" &&
  grep -q '^refit_engine_committed_version{engine="e0"} 0$' <<<"$during" &&
  grep -q '^refit_engine_torn{engine="e0"} 0$' <<<"$during" &&
  grep -q '^refit_engine_last_commit_timestamp_seconds{engine="e0"} 0$' <<<"$during" &&
  ok "scrape during the round" || { bad "scrape during the round"; echo "$during"; }
wait $tpid; trc=$?
wait $epid; erc=$?
if [ $trc = 0 ] && [ $erc = 0 ]; then ok "round 1 committed"; else bad "members: trainer rc=$trc engine rc=$erc"; cat "$tmp/trainer.out" "$tmp/engine.out"; fi

wait $wpid; wrc=$?
if [ $wrc = 0 ] && grep -q '^round 1 committed in .* bytes' "$tmp/watch.out" &&
   grep -q '^no round in flight' "$tmp/watch.out"; then ok "status --watch"; else
  bad "status --watch rc=$wrc"; cat "$tmp/watch.out"; fi

# The log: JSON lines, the round's reports and its commit.
python3 - "$tmp/refitd.log" "$tmp/round_bytes" <<'PY' && ok "json log" || bad "json log"
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
# The round's bytes: what the engine rank received, over the slowest time.
engine = [r for r in reports if r["member"].startswith("engine/")]
assert commits[0]["bytes"] == engine[0]["bytes"], (commits, engine)
slowest = max(r["seconds"] for r in reports)
# The log prints seconds to the microsecond: allow for that rounding.
tolerance = max(1e-3, 1e-6 / slowest)
assert abs(commits[0]["bytes_per_second"] - engine[0]["bytes"] / slowest) <= tolerance * commits[0]["bytes_per_second"], commits
assert all(l["level"] in {"trace", "debug", "info", "warning", "error", "critical"} for l in lines)
open(sys.argv[2], "w").write(str(commits[0]["bytes"]))
PY

# /metrics directly, and checked by promtool.
get "http://127.0.0.1:$mport/metrics" >"$tmp/metrics.txt"
rb=$(cat "$tmp/round_bytes" 2>/dev/null)
grep -q '^refit_rounds_committed_total 1$' "$tmp/metrics.txt" &&
  grep -qE '^refit_last_round_peak_staging_bytes [0-9]+$' "$tmp/metrics.txt" &&
  grep -q "^refit_last_round_bytes $rb$" "$tmp/metrics.txt" &&
  ok "scrape after the round" || { bad "scrape after the round"; cat "$tmp/metrics.txt"; }
# `refit status` says the same bytes (for people) as the log and the metrics.
"$refit" status --server="127.0.0.1:$port" --json >"$tmp/status.json" &&
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["rounds"][-1]; assert r["bytes"] == int(sys.argv[2]) and r["engine_ranks"] == 1, r' \
    "$tmp/status.json" "$rb" && ok "status bytes" || { bad "status bytes"; cat "$tmp/status.json"; }
promtool check metrics <"$tmp/metrics.txt" && ok "promtool" || bad "promtool"

# (The members left after their round: engine e0's series went with it.)
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

# SIGTERM: while refitd drains (--drain_ms) health says not serving; then
# it logs its shutdown and exits 0 (a round in flight is aborted and its
# members told: server/observability_test).
kill -TERM $rpid
sleep 0.3
out=$("$refit" health --server="127.0.0.1:$port" --timeout_s=2 2>&1); hrc=$?
[ $hrc = 1 ] && grep -q 'NOT_SERVING' <<<"$out" && ok "refit health while draining" ||
  bad "refit health while draining: rc=$hrc $out"
code=$(python3 -c "import sys,urllib.request,urllib.error
try: urllib.request.urlopen(sys.argv[1], timeout=5); print(200)
except urllib.error.HTTPError as e: print(e.code)" "http://127.0.0.1:$mport/healthz")
[ "$code" = 503 ] && ok "/healthz 503 while draining" || bad "/healthz while draining: $code"
for _ in $(seq 100); do kill -0 $rpid 2>/dev/null || break; sleep 0.1; done
if kill -0 $rpid 2>/dev/null; then bad "still running 10 s after SIGTERM"; else
  wait $rpid; rc=$?
  [ $rc = 0 ] && ok "SIGTERM exit 0" || bad "SIGTERM exit $rc"
fi
grep -q '"msg":"stopped"' "$tmp/refitd.log" && ok "stop logged" || bad "stop logged"
[ $fail = 0 ] && echo "PASS" || { echo "--- refitd log"; cat "$tmp/refitd.log"; }
exit $fail
