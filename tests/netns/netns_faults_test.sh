#!/usr/bin/env bash
# Network faults in the middle of refit rounds, on hosts made of network
# namespaces (testing/netns/netns_job.sh: refitd on h0, trainer replicas on
# h1 and h2, engines A and B on h3 and h4). Each scenario runs on fresh
# hosts, injects one fault while a round is in flight, asserts what the
# other members and refitd do, and ends with every member past version
# JOB_UNTIL and every engine byte checked after every committed round:
#   link_down    h2 (a trainer replica) drops off the network: the engines
#                fail within refitd's heartbeat deadline, refitd reports
#                them torn, the round commits once the link is back.
#   partition    refitd and h3 (engine A) cannot reach each other: refitd
#                expires A's members, rounds go on with engine B, A rejoins
#                after the partition, the plan fingerprint is the one before.
#   kill_host    every process on h4 (engine B) killed mid-round: engine A's
#                round aborts, the next attempt commits without B; B started
#                again rejoins and the plan is the one before.
#   refitd_cut   refitd's host off the network, then back: every member
#                rejoins, the same plan, rounds go on.
#   bandwidth    h1's data link capped (tc tbf): rounds slow to the time the
#                plan's bytes out of h1 take at the cap; nothing fails.
#   relay        h3's links through frame_relay (delay and loss): rounds
#                commit, the relay dropped frames, nothing fails.
# Args: REFITD REFIT NETNS_MEMBERS NETNS_SH NETNS_JOB_SH FRAME_RELAY [--full]
# (--full: longer outages and more rounds; figures go to docs/reliability.md).
set -u
REFITD=$1 REFIT=$2 MEMBERS=$3 RELAY=$6
source "$4"
source "$5"
FULL=0
[ "${7:-}" = --full ] && FULL=1
netns_require || exit 0
WORK=${TEST_TMPDIR:-$(mktemp -d)}/netns_faults
rm -rf "$WORK" && mkdir -p "$WORK"
OUTAGE_S=4
JOB_UNTIL=7
if [ $FULL = 1 ]; then OUTAGE_S=10; JOB_UNTIL=12; JOB_DEADLINE_S=240; fi
HB_S=$((JOB_HEARTBEAT_TIMEOUT_MS / 1000))
RATE=12mbit  # every member host's data link: a round takes ~1.2 s
SLOW_RATE=3mbit  # h2's until a fault lands (round_in_flight): ~5 s
fail=0
results=()

# Ends a scenario: waits for every member process (bounded; a crashed one
# ends the wait), tears the hosts down, checks the logs; records "name:
# PASS|FAIL detail". A failed scenario prints job_digest first.
finish() {
  local name=$1 detail=$2 bad=$3
  [ "$bad" = 0 ] || job_digest "$name"
  if ! job_wait_finished "1 2 3 4" "$JOB_DEADLINE_S"; then
    [ "$bad" = 1 ] || job_digest "$name (finish)"
    bad=1
  fi
  job_keep_logs "$name"
  netns_down
  job_check_done "1 2 3 4" || bad=1
  if [ "$bad" = 0 ]; then results+=("$name: PASS $detail"); else results+=("$name: FAIL $detail"); fail=1; fi
  echo "== $name: $([ "$bad" = 0 ] && echo PASS || echo FAIL) $detail"
}

# The latest time (unix seconds) of lines matching $2 in files $1.
last_time() { cat $1 | grep -E "$2" | awk '{print $1}' | sort -n | tail -1; }

cap_all() { local h; for h in 1 2 3 4; do netns_cap "$h" data "$RATE" || return 1; done; }

# Waits up to $2 s until round $1 has run a second and refitd's status
# (the members' heartbeat figures) shows an engine rank still short of the
# bytes its plan slice receives: the round's bytes are in flight. (A
# trainer's sends end once the kernel holds them, and an engine counts a
# wave when all of it arrived, so the receiving side is what tells.)
wait_in_flight() {
  job_wait_status "any(r['seconds'] >= 1 and any(b['engine'] and not b['reported'] and b['bytes'] < b['planned_bytes'] for b in r['live']) for r in s['rounds'] if r['outcome'] == 'running' and r['version'] == $1)" "$2"
}

# Slows h2's data link (h2 sends to both engines: a round takes ~5 s),
# waits for a round of version 2 or later to start and for wait_in_flight,
# and prints its version: a fault injected now lands while the round's
# bytes move. The caller then gives h2 its link back (restore_h2).
round_in_flight() {
  local v
  netns_cap 2 data "$SLOW_RATE" || return 1
  v=$(job_wait_running 60 2) || return 1
  echo "$v"
  wait_in_flight "$v" 4 >&2 || { echo "round $v: no engine rank short of its bytes" >&2; return 1; }
}
restore_h2() { netns_cap 2 data "$RATE"; }

scenario_link_down() {
  local bad=0 v t0 t1 fp
  JOB_GATE=2 job_up "$WORK/link_down" && cap_all || { netns_down; results+=("link_down: FAIL setup"); fail=1; return; }
  v=$(round_in_flight) || bad=1
  fp=$(job_status_eval "s['plan_fingerprint']")
  t0=$(job_now)
  netns_link 2 both down
  # Engines A and B (elsewhere) fail the round within the heartbeat deadline.
  netns_wait_lines "$JOB_DIR/h3.log $JOB_DIR/h4.log" 4 " aborted engine .* $v: " $((HB_S + 10)) || bad=1
  t1=$(last_time "$JOB_DIR/h3.log $JOB_DIR/h4.log" " aborted engine .* $v: ")
  local took
  took=$(python3 -c "print(round(${t1:-1e12} - $t0, 2))")
  python3 -c "import sys; sys.exit(0 if $took <= $HB_S + 3 else 1)" ||
    { echo "engines failed ${took}s after the cut (deadline $((HB_S + 3))s)"; bad=1; }
  job_wait_status "any(e['torn_version'] == $v for e in s['engines'])" 10 ||
    { echo "refitd reports no torn engine for round $v"; bad=1; }
  local torn
  torn=$(job_status_eval "','.join(e['engine_id'] for e in s['engines'] if e['torn_version'])")
  sleep "$OUTAGE_S"
  netns_link 2 both up
  restore_h2 || bad=1
  job_wait_status "any(r['version'] == $v and r['outcome'] == 'committed' for r in s['rounds'])" 60 ||
    { echo "round $v did not commit after the link came back"; bad=1; }
  local fp2
  fp2=$(job_status_eval "s['plan_fingerprint']")
  [ "$fp2" = "$fp" ] || { echo "plan $fp2 after, $fp before"; bad=1; }
  job_gate "$JOB_UNTIL"
  finish link_down "round $v: engines failed ${took}s after the cut, torn: ${torn:-none}, committed after the link returned" $bad
}

scenario_partition() {
  local bad=0 v fp fp2 during
  JOB_GATE=2 job_up "$WORK/partition" && cap_all || { netns_down; results+=("partition: FAIL setup"); fail=1; return; }
  v=$(round_in_flight) || bad=1
  fp=$(job_status_eval "s['plan_fingerprint']")
  netns_partition add 0 3
  restore_h2 || bad=1
  job_wait_status "not any(m['host_id'] == 'h3' for m in s['members'])" $((HB_S + 10)) ||
    { echo "refitd did not expire h3's members"; bad=1; }
  netns_wait_lines "$JOB_DIR/refitd.log" 1 "round aborted round=$v .*cause=member_expired reason=member engine A" 5 ||
    { echo "refitd did not abort round $v for A's expiry"; bad=1; }
  # Rounds go on with engine B alone.
  local before
  before=$(job_status_eval "max([r['version'] for r in s['rounds'] if r['outcome'] == 'committed'] + [0])")
  job_wait_status "any(r['outcome'] == 'committed' and r['version'] > ${before:-0} for r in s['rounds'])" 30 ||
    { echo "no round committed during the partition"; bad=1; }
  during=$(job_status_eval "s['plan_fingerprint']")
  sleep "$OUTAGE_S"
  netns_partition del 0 3
  netns_wait_lines "$JOB_DIR/h3.log" 2 " rejoined engine A" 30 || bad=1
  job_wait_status "sum(m['host_id'] == 'h3' for m in s['members']) == 2 and s['plan_fingerprint'] == '$fp'" 30 ||
    { echo "the plan after the partition is not the one before ($fp)"; bad=1; }
  job_gate "$JOB_UNTIL"
  finish partition "round $v in flight; A expired, rounds committed with B alone (plan $during), A rejoined, plan $fp again" $bad
}

scenario_kill_host() {
  local bad=0 v fp
  JOB_GATE=2 job_up "$WORK/kill_host" && cap_all || { netns_down; results+=("kill_host: FAIL setup"); fail=1; return; }
  v=$(round_in_flight) || bad=1
  fp=$(job_status_eval "s['plan_fingerprint']")
  netns_kill_host 4
  restore_h2 || bad=1
  mv "$JOB_DIR/h4.log" "$JOB_DIR/h4.killed.log"
  netns_wait_lines "$JOB_DIR/h3.log" 2 " aborted engine A .* $v: " $((HB_S + 10)) || bad=1
  job_wait_status "any(r['version'] == $v and r['outcome'] == 'committed' for r in s['rounds'])" 30 ||
    { echo "round $v did not commit without engine B"; bad=1; }
  netns_wait_lines "$JOB_DIR/h3.log" 2 " checked engine A .* $v\$" 10 || bad=1
  job_start_host 4
  job_wait_status "sum(m['host_id'] == 'h4' for m in s['members']) == 2 and s['plan_fingerprint'] == '$fp'" 30 ||
    { echo "the plan after B's restart is not the one before ($fp)"; bad=1; }
  job_gate "$JOB_UNTIL"
  finish kill_host "round $v aborted on A, committed without B; B restarted, plan $fp again" $bad
}

scenario_refitd_cut() {
  local bad=0 v fp
  JOB_GATE=2 job_up "$WORK/refitd_cut" && cap_all || { netns_down; results+=("refitd_cut: FAIL setup"); fail=1; return; }
  v=$(round_in_flight) || bad=1
  fp=$(job_status_eval "s['plan_fingerprint']")
  netns_link 0 both down
  restore_h2 || bad=1
  sleep "$OUTAGE_S"
  netns_link 0 both up
  # refitd heard nobody while cut off: it expired the members, aborting
  # the round in flight.
  netns_wait_lines "$JOB_DIR/refitd.log" 1 "round aborted round=$v .*cause=member_expired" 5 ||
    { echo "refitd did not abort round $v"; bad=1; }
  netns_wait_lines "$(job_logs)" 8 " rejoined " 30 || { echo "members did not all rejoin"; bad=1; }
  kill -0 "$NETNS_REFITD_PID" || { echo "refitd died"; bad=1; }
  job_wait_status "len(s['members']) == 8 and s['plan_fingerprint'] == '$fp'" 30 ||
    { echo "the plan after the cut is not the one before ($fp)"; bad=1; }
  job_gate "$JOB_UNTIL"
  finish refitd_cut "round $v in flight; refitd off the network ${OUTAGE_S}s; all 8 rejoined, plan $fp again" $bad
}

# Round durations (refitd's, seconds) of committed rounds in [$1, $2].
durations() {
  job_status_eval "' '.join(str(round(r['duration_seconds'], 3)) for r in s['rounds'] if r['outcome'] == 'committed' and $1 <= r['version'] <= $2)"
}

scenario_bandwidth() {
  local bad=0 rate_mbit=8 base capped predicted out_h1
  JOB_GATE=2 job_up "$WORK/bandwidth" || { netns_down; results+=("bandwidth: FAIL setup"); fail=1; return; }
  job_wait_status "any(r['version'] == 2 and r['outcome'] == 'committed' for r in s['rounds'])" 60 || bad=1
  base=$(durations 2 2)
  netns_cap 1 data "${rate_mbit}mbit"
  job_gate 3
  job_wait_status "any(r['version'] == 3 and r['outcome'] == 'committed' for r in s['rounds'])" 60 || bad=1
  capped=$(durations 3 3)
  # The bytes the plan sends out of h1 (trainer replica 0) in round 3, as
  # its members moved them: at the cap they take out_h1 * 8 / rate.
  out_h1=$(grep -E ' committed trainer rank [01] 3 ' "$JOB_DIR/h1.log" | awk '{s += $NF} END {print s + 0}')
  predicted=$(python3 -c "print(round($out_h1 * 8 / ($rate_mbit * 1e6), 3))")
  python3 -c "import sys; c=float('${capped:-0}' or 0); p=$predicted; sys.exit(0 if p > 0 and 0.8 * p <= c <= 1.5 * p + 0.5 else 1)" ||
    { echo "capped round ${capped}s, the plan's bytes out of h1 at the cap take ${predicted}s"; bad=1; }
  netns_cap 1 data off
  job_gate "$JOB_UNTIL"
  netns_wait_lines "$(job_logs)" 4 '^(ok|failed) ' "$JOB_DEADLINE_S" || bad=1
  grep -q ' aborted ' $(job_logs) && { echo "a round aborted under the cap"; bad=1; }
  finish bandwidth "round 2 ${base}s; h1 capped at ${rate_mbit}mbit: round 3 ${capped}s (the plan sends ${out_h1} B out of h1: ${predicted}s at the cap); no round aborted" $bad
}

scenario_relay() {
  local bad=0 pd pc delay=10 loss=0.01 t
  # Rounds start once the relays are on (a round takes ~30 ms: all of them
  # could run before).
  JOB_GATE=0 job_up "$WORK/relay" || { netns_down; results+=("relay: FAIL setup"); fail=1; return; }
  NETNS_RELAY_LOG="$JOB_DIR/relay_data.log"
  pd=$(netns_relay_on "$RELAY" 3 data --delay_ms=$delay --loss=$loss --seed=7) || bad=1
  NETNS_RELAY_LOG="$JOB_DIR/relay_ctl.log"
  pc=$(netns_relay_on "$RELAY" 3 ctl --delay_ms=$delay --loss=$loss --seed=8) || bad=1
  job_gate "$JOB_UNTIL"
  netns_wait_lines "$(job_logs)" 4 '^(ok|failed) ' "$JOB_DEADLINE_S" || bad=1
  netns_relay_off "$pd" 3 data
  netns_relay_off "$pc" 3 ctl
  grep -q ' aborted ' $(job_logs) && { echo "a round aborted through the relay"; bad=1; }
  t=$(cat "$JOB_DIR/relay_data.log" "$JOB_DIR/relay_ctl.log" | grep '^relay a' |
    awk -F'[= ]' '{d += $6 + $11} END {print d + 0}')
  [ "${t:-0}" -gt 0 ] || { echo "the relay dropped nothing"; bad=1; }
  local durs
  durs=$(durations 1 "$JOB_UNTIL")
  finish relay "h3 through the relay (${delay} ms, loss $loss): $t frames dropped, round times ${durs}s" $bad
}

only=${NETNS_FAULTS_ONLY:-link_down partition kill_host refitd_cut bandwidth relay}
for s in $only; do
  "scenario_$s"
done
echo "netns faults ($( [ $FULL = 1 ] && echo full || echo short ); outage ${OUTAGE_S}s, until version $JOB_UNTIL):"
for r in "${results[@]}"; do echo "  $r"; done
[ $fail = 0 ] && echo "PASS netns faults"
exit $fail
