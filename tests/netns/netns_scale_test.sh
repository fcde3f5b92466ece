#!/usr/bin/env bash
# Many members on many hosts: refitd on h0, HOSTS member hosts of PER_HOST
# members each (threads of one netns_members process per host): the first
# half of the hosts hold a trainer (megatron:tp=2,dp=...), the second half
# engines of vllm:tp=2 (one per two members). They register, plan and run
# ROUNDS rounds of tiny-qwen3. Prints refitd's CPU seconds and peak
# resident memory, registration time (start to every member registered),
# time from start to the first commit, round times, and GetStatus latency
# (p50/p99, status_probe from h0) during the rounds.
# The CI run: 4 hosts x 16 members, bytes over Gloo, every engine byte
# checked. --full: 16 hosts x 64 = 1,024 members; the data plane is then
# off (--control_only: members report their slice's bytes without moving
# them), because the host transport connects a full mesh per plan (1,024
# ranks: ~1M sockets) that this machine cannot hold.
# Args: REFITD REFIT NETNS_MEMBERS NETNS_SH STATUS_PROBE [--full]
set -u
REFITD=$1 REFIT=$2 MEMBERS=$3 PROBE=$5
source "$4"
HOSTS=4 PER_HOST=16 ROUNDS=3 MODE=""
if [ "${6:-}" = --full ]; then HOSTS=16 PER_HOST=64 ROUNDS=30 MODE=--control_only; fi
HOSTS=${NETNS_SCALE_HOSTS:-$HOSTS}
PER_HOST=${NETNS_SCALE_PER_HOST:-$PER_HOST}
[ -n "${NETNS_SCALE_MODE+x}" ] && MODE=$NETNS_SCALE_MODE
netns_require || exit 0
WORK=${TEST_TMPDIR:-$(mktemp -d)}/netns_scale
rm -rf "$WORK" && mkdir -p "$WORK"
N=$((HOSTS * PER_HOST))
HALF=$((HOSTS / 2))
TRAINER_RANKS=$((HALF * PER_HOST))
ENGINES=$(((HOSTS - HALF) * PER_HOST / 2))
TRAINER="megatron:tp=2,dp=$((TRAINER_RANKS / 2))"
ENGINE="vllm:tp=2"
DEADLINE_S=$((120 + N / 4))
echo "scale: $N members on $HOSTS hosts ($TRAINER; $ENGINES engines of $ENGINE), $ROUNDS rounds, ${MODE:-data plane over Gloo}"

netns_up $((HOSTS + 1)) || { echo "FAIL: netns_up"; exit 1; }
netns_start_refitd "$REFITD" "$WORK/refitd.log" --heartbeat_timeout_ms=10000 \
  --min_engines="$ENGINES" --log_level=warning || exit 1
REFITD_PID=$(pgrep -f -n "^$REFITD --address=$(netns_ctl_ip 0):0" || true)
[ -n "$REFITD_PID" ] || REFITD_PID=$NETNS_REFITD_PID

cpu_s() {  # refitd's user + system CPU seconds so far
  awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$REFITD_PID/stat"
}
now() { date +%s.%3N; }

t0=$(now)
for h in $(seq 1 "$HOSTS"); do
  members=""
  if [ "$h" -le "$HALF" ]; then
    for r in $(seq $(((h - 1) * PER_HOST)) $((h * PER_HOST - 1))); do members+="trainer/$r,"; done
  else
    for k in $(seq 0 $((PER_HOST / 2 - 1))); do
      e=$(((h - HALF - 1) * PER_HOST / 2 + k))
      members+="engine/E$e/0,engine/E$e/1,"
    done
  fi
  netns_spawn "$h" "$WORK/h$h.log" "$MEMBERS" --server="$NETNS_REFITD" --host_id="h$h" \
    --bind="$(netns_data_ip "$h")" --model=tiny-qwen3 --trainer="$TRAINER" --engine="$ENGINE" \
    --members="$members" --until="$ROUNDS" --start --deadline_s="$DEADLINE_S" \
    --heartbeat_ms=1000 --refitd_timeout_s=20 --step_s=5 --round_s=60 $MODE >/dev/null
done
LOGS=$(for h in $(seq 1 "$HOSTS"); do echo "$WORK/h$h.log"; done)

# Registration: until every member's Join returned (refitd registered it).
netns_wait_lines "$LOGS" "$N" ' joined ' "$DEADLINE_S" || { echo "FAIL: members did not all register"; exit 1; }
cpu_reg=$(cpu_s)

# GetStatus latency from the first plan to the end of the rounds.
netns_wait_lines "$LOGS" 1 ' plan ' "$DEADLINE_S" || exit 1
netns_spawn 0 "$WORK/probe.log" "$PROBE" --server="$NETNS_REFITD" --interval_ms=50 \
  --duration_s="$DEADLINE_S" --stop="$WORK/stop" >/dev/null
netns_wait_lines "$LOGS" "$HOSTS" '^(ok|failed) ' "$DEADLINE_S" || { echo "FAIL: members did not finish"; for l in $LOGS; do tail -n 2 "$l"; done; exit 1; }
touch "$WORK/stop"
netns_wait_lines "$WORK/probe.log" 1 '^getstatus' 20
cpu_end=$(cpu_s)
hwm=$(awk '/VmHWM/ {print $2}' "/proc/$REFITD_PID/status")
rounds=$(netns_exec 0 "$REFIT" status --server="$NETNS_REFITD" --json --rounds=$((ROUNDS + 5)) --timeout_s=10 |
  python3 -c "import json,sys
r = json.load(sys.stdin)['rounds']
d = sorted(x['duration_seconds'] for x in r if x['outcome'] == 'committed')
print('%d committed, %d aborted; start to commit: first %.3f s, median %.3f s, max %.3f s' % (
    len(d), len(r) - len(d), r[0]['duration_seconds'] if r else 0, d[len(d) // 2] if d else 0, d[-1] if d else 0))")
netns_down

fail=0
grep -q '^failed' $LOGS && { echo "FAIL: members failed:"; grep -h ' error ' $LOGS | head -5; fail=1; }
done_n=$(cat $LOGS | grep -c " done .* last=$ROUNDS\$")
[ "$done_n" = "$N" ] || { echo "FAIL: $done_n of $N members committed version $ROUNDS"; fail=1; }
if [ -z "$MODE" ]; then
  checks=$(cat $LOGS | grep -c ' checked ')
  want=$(((N - TRAINER_RANKS) * ROUNDS))
  [ "$checks" = "$want" ] || { echo "FAIL: $checks engine byte checks, want $want"; fail=1; }
fi
t_reg=$(cat $LOGS | grep ' joined ' | awk '{print $1}' | sort -n | tail -1)
t_plan=$(cat $LOGS | grep ' plan ' | awk '{print $1}' | sort -n | tail -1)
t_commit=$(cat $LOGS | grep ' committed ' | awk '{print $1}' | sort -n | head -1)
python3 - "$t0" "$t_reg" "$t_plan" "$t_commit" "$cpu_reg" "$cpu_end" "$hwm" <<'EOF'
import sys
t0, treg, tplan, tcommit, creg, cend, hwm = (float(x) for x in sys.argv[1:])
print(f"registration (start to every member registered): {treg - t0:.2f} s")
print(f"start to every member's plan: {tplan - t0:.2f} s")
print(f"start to first commit: {tcommit - t0:.2f} s")
print(f"refitd CPU: {creg:.2f} s by registration, {cend:.2f} s in all; peak RSS {hwm / 1024:.1f} MiB")
EOF
echo "rounds: $rounds"
cat "$WORK/probe.log"
[ $fail = 0 ] && echo "PASS netns scale: $N members on $HOSTS hosts, $ROUNDS rounds"
exit $fail
