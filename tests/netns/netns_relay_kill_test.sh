#!/usr/bin/env bash
# A relay killed mid-round (testing/netns/netns_job.sh hosts, refitd
# --relay=on): the trainer (megatron:tp=2) on h1 sends each byte about once
# and engines A, B and C (vllm:tp=2 each, on h2, h3, h4) forward to each
# other. Every process on h3 (engine B, a relay: the plan has it forward
# bytes) is killed while a round's bytes move. Asserted:
#   * engines A and C fail that round within DOWNSTREAM_S seconds of the
#     kill, and a failure names engine B (refitd's abort names its member;
#     a data-plane failure names its transport rank and member);
#   * refitd reports A and C torn at that version (they wrote part of it);
#   * refitd plans without B (6 members, a new fingerprint) and the round
#     commits on A and C; every engine byte checked after every committed
#     round, up to version JOB_UNTIL.
# A kill that lands once the round committed (a machine too slow between
# seeing the round start and killing) fails nothing: B is started again and
# killed in a later round, up to KILL_TRIES times. A failed step prints a
# digest (job_digest: refitd's status, the last lines of every log) and the
# logs go to Bazel's undeclared outputs.
# Args: REFITD REFIT NETNS_MEMBERS NETNS_SH NETNS_JOB_SH
set -u
REFITD=$1 REFIT=$2 MEMBERS=$3
source "$4"
source "$5"
netns_require || exit 0
WORK=${TEST_TMPDIR:-$(mktemp -d)}/netns_relay_kill
rm -rf "$WORK" && mkdir -p "$WORK"
JOB_TRAINER="megatron:tp=2"
JOB_REFITD_FLAGS="--relay=on"
JOB_UNTIL=10  # room for the test to look for a round to cut into (KILL_TRIES)
# A round moves bytes for about 2.5 s (trainer, then relays): a kill within
# 1 s of its start lands while they move. A status poll takes ~0.2 s
# (JOB_PY); a kill that still comes too late is retried (KILL_TRIES).
JOB_EARLY_S=1.0
RATE=6mbit  # every member host's data link: a round takes ~2.5 s
DOWNSTREAM_S=3
KILL_TRIES=3
HB_S=$((JOB_HEARTBEAT_TIMEOUT_MS / 1000))
bad=0
failed_steps=""

# Records failed step $1 (message $2); the first failure also prints the
# digest, while the hosts still run.
fail() {
  echo "FAIL [$1]: $2"
  [ -n "$failed_steps" ] || job_digest "$1"
  failed_steps+=" $1"
  bad=1
}
# fail, then end the test (the EXIT trap tears the hosts down).
die() {
  fail "$@"
  job_keep_logs
  exit 1
}

job_members_of() {
  case $1 in
    1) echo "trainer/0,trainer/1" ;;
    2) echo "engine/A/0,engine/A/1" ;;
    3) echo "engine/B/0,engine/B/1" ;;
    4) echo "engine/C/0,engine/C/1" ;;
  esac
}

# The plan forwards bytes from engine B (engine ranks 2 and 3): three
# engines of vllm:tp=2 are laid out as one of vllm:tp=2,dp=3, and refitd's
# plan must be this one (same fingerprint).
job_model_config "$WORK/model.json"
JOB_MODEL="$WORK/model.json"
{
  echo "trainer 0 h1"; echo "trainer 1 h1"
  for r in 0 1 2 3 4 5; do echo "engine $r h$((2 + r / 2))"; done
} >"$WORK/hosts.txt"
"$REFIT" plan --model="$JOB_MODEL" --trainer="$JOB_TRAINER" \
  --engine="$JOB_ENGINE,dp=3" --hosts="$WORK/hosts.txt" --relay=on \
  --json >"$WORK/plan.json" || { echo "FAIL: refit plan"; exit 1; }
python3 - "$WORK/plan.json" <<'EOF' || { echo "FAIL: engine B relays nothing in the plan"; exit 1; }
import json, sys
p = json.load(open(sys.argv[1]))
sys.exit(0 if p["hosts"]["sent"][2] > 0 else 1)  # host index 2: h3, engine B
EOF

JOB_GATE=2 job_up "$WORK/job" || die setup "the job did not start (8 members planned, 8 plan lines)"
for h in 1 2 3 4; do netns_cap "$h" data "$RATE" || die setup "tc on h$h"; done
want=$(python3 -c "import json; print(json.load(open('$WORK/plan.json'))['fingerprint'])")
fp=$(job_status_eval "s['plan_fingerprint']")
[ "$fp" = "$want" ] || fail plan "refitd's plan $fp is not refit plan's $want (where B relays)"

# Downstream: A and C fail the round. A rank fails either through refitd
# (the round aborted: "aborted ... V: ...") or first through its data
# plane (a receive from B's transport rank failed: ABORTED, the version runs again).
fails_of() { echo " (aborted engine [AC] rank [01] $1: |retry engine [AC] rank [01]: .*round $1: )"; }
downstream_lines() { cat "$JOB_DIR/h2.log" "$JOB_DIR/h4.log" | grep -E "$(fails_of "$1")"; }

# After B was killed in round $1: prints "failed" as soon as A or C failed
# that round, "late" when refitd committed it without a failure (the kill
# came after its bytes moved), "none" when neither happened within $2 s.
kill_outcome() {
  local v=$1 end=$(($(date +%s) + $2))
  while [ "$(date +%s)" -lt "$end" ]; do
    downstream_lines "$v" | grep -q . && { echo failed; return; }
    if [ "$(job_status_eval "any(r['version'] == $v and r['outcome'] == 'committed' for r in s['rounds'])")" = True ]; then
      downstream_lines "$v" | grep -q . && echo failed || echo late
      return
    fi
    sleep 0.2
  done
  echo none
}

# Kill B in a round whose bytes move; again in a later round (B started
# again) when the kill came too late.
min=2
for try in $(seq 1 "$KILL_TRIES"); do
  v=$(job_wait_running 60 "$min") ||
    die round_start "no round of version >= $min started within 60 s (gate $(cat "$JOB_DIR/gate"))"
  t0=$(job_now)
  netns_kill_host 3
  mv "$JOB_DIR/h3.log" "$JOB_DIR/h3.killed$try.log"
  outcome=$(kill_outcome "$v" $((HB_S + 10)))
  echo "kill $try: engine B killed in round $v: $outcome"
  [ "$outcome" = late ] || break
  [ "$try" -lt "$KILL_TRIES" ] || die kill "round $v committed before each of $KILL_TRIES kills"
  job_start_host 3
  job_wait_status "len(s['members']) == 8 and s['plan_fingerprint'] == '$want'" $((HB_S + 30)) ||
    die restart_b "engine B started again is not in refitd's plan"
  min=$((v + 1))
done
[ "$outcome" = failed ] ||
  die downstream "A and C did not fail round $v within $((HB_S + 10)) s of the kill, nor did it commit"

# Torn: A and C wrote part of round v (until it commits without B).
job_wait_status "sorted(e['engine_id'] for e in s['engines'] if e['torn_version'] == $v) == ['A', 'C']" 5 ||
  fail torn "refitd does not report A and C torn at $v: $(job_status_eval "s['engines']")"
# Every rank of A and C fails the round; the slowest first failure counts.
# (A line: "<time> aborted|retry engine A rank 0[:] ...".)
ranks_failed() { downstream_lines "$v" | awk '{sub(/:$/, "", $6); print $4, $6}' | sort -u | wc -l; }
end=$(($(date +%s) + HB_S + 10))
while [ "$(ranks_failed)" -lt 4 ] && [ "$(date +%s)" -lt "$end" ]; do sleep 0.2; done
[ "$(ranks_failed)" = 4 ] || fail downstream "$(ranks_failed) of 4 ranks of A and C failed round $v"
t1=$(downstream_lines "$v" | awk '{sub(/:$/, "", $6); r = $4 " " $6; if (!(r in t)) t[r] = $1} END {for (r in t) print t[r]}' | sort -n | tail -1)
took=$("$JOB_PY" -c "print(round(${t1:-1e12} - $t0, 2))")
"$JOB_PY" -c "import sys; sys.exit(0 if $took <= $DOWNSTREAM_S else 1)" ||
  fail fail_fast "A and C failed ${took}s after the kill (deadline ${DOWNSTREAM_S}s)"
# B by member name; a data-plane failure names B's transport ranks (trainer
# ranks 0-1, then engine ranks: B's are 4 and 5) with B's member name.
named=$(downstream_lines "$v" | grep -cE "engine B rank [01]")
[ "$named" -ge 1 ] ||
  fail named "no failure of A or C names engine B: $(downstream_lines "$v" | head -2 | cut -c1-240)"
bare=$(downstream_lines "$v" | grep -E "peer rank [45]\b" | grep -cvE "peer rank [45] \(engine B rank [01]\)")
[ "$bare" = 0 ] ||
  fail named "a failure names B's transport rank without its member: $(downstream_lines "$v" | head -2 | cut -c1-240)"

# refitd plans without B, and the round commits on A and C, bytes checked.
job_wait_status "len(s['members']) == 6 and s['plan_fingerprint'] not in ('', '$want')" $((HB_S + 20)) ||
  fail replan "refitd did not plan without engine B"
job_wait_status "any(r['version'] == $v and r['outcome'] == 'committed' for r in s['rounds'])" 30 ||
  fail commit "round $v did not commit without engine B"
netns_wait_lines "$JOB_DIR/h2.log $JOB_DIR/h4.log" 4 " checked engine [AC] .* $v\$" 10 ||
  fail check "A and C did not check round $v's bytes"
job_gate "$JOB_UNTIL"
job_wait_finished "1 2 4" "$JOB_DEADLINE_S" ||
  fail finish "the members of h1, h2 and h4 did not finish version $JOB_UNTIL"
done_report=$(job_check_done "1 2 4") || fail done "$done_report"
reasons=$(downstream_lines "$v" | cut -d' ' -f2- | cut -c1-240 | sort -u -t: -k1,1)
job_keep_logs
netns_down
echo "relay kill: round $v, engine B (h3) killed; A and C failed in ${took}s; reasons:"
echo "$reasons" | sed 's/^/  /'
if [ $bad = 0 ]; then
  echo "PASS netns relay kill: downstream failed in ${took}s naming B, A and C torn, round $v committed without B"
else
  echo "FAIL netns relay kill: failed steps:$failed_steps"
fi
exit $bad
