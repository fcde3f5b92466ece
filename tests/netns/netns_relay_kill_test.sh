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
JOB_UNTIL=8  # room for the test to look for a round to cut into
# A round moves bytes for about 4 s (trainer, then relays): a kill within
# 1 s of its start lands while they move, with 3 s to spare for status
# polls on a loaded machine (at 2 s rounds, a machine at load 10 once
# polled past the round's bytes and the round committed).
JOB_EARLY_S=1.0
RATE=6mbit  # every member host's data link: a round takes ~4 s
DOWNSTREAM_S=3
HB_S=$((JOB_HEARTBEAT_TIMEOUT_MS / 1000))
bad=0

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

JOB_GATE=2 job_up "$WORK/job" || { echo "FAIL: setup"; exit 1; }
for h in 1 2 3 4; do netns_cap "$h" data "$RATE" || { echo "FAIL: tc on h$h"; exit 1; }; done
fp=$(job_status_eval "s['plan_fingerprint']")
want=$(python3 -c "import json; print(json.load(open('$WORK/plan.json'))['fingerprint'])")
[ "$fp" = "$want" ] || { echo "FAIL: refitd's plan $fp is not refit plan's $want (where B relays)"; bad=1; }
v=$(job_wait_running 60 2) || { echo "FAIL: no round ran"; bad=1; }
t0=$(job_now)
netns_kill_host 3
mv "$JOB_DIR/h3.log" "$JOB_DIR/h3.killed.log"

# Downstream: A and C fail the round. A rank fails either through refitd
# (the round aborted: "aborted ... V: ...") or first through its data
# plane (a receive from B's transport rank failed: UNAVAILABLE, "retry").
fails=" (aborted engine [AC] rank [01] $v: |retry engine [AC] rank [01]: .*round $v: )"
netns_wait_lines "$JOB_DIR/h2.log $JOB_DIR/h4.log" 1 "$fails" $((HB_S + 10)) || bad=1
# Torn: A and C wrote part of round v (until it commits without B).
job_wait_status "sorted(e['engine_id'] for e in s['engines'] if e['torn_version'] == $v) == ['A', 'C']" 5 ||
  { echo "FAIL: refitd does not report A and C torn at $v:"; job_status_eval "s['engines']"; bad=1; }
netns_wait_lines "$JOB_DIR/h2.log $JOB_DIR/h4.log" 4 "$fails" $((HB_S + 10)) || bad=1
t1=$(cat "$JOB_DIR/h2.log" "$JOB_DIR/h4.log" | grep -E "$fails" | awk '{print $1}' | sort -n | tail -1)
took=$(python3 -c "print(round(${t1:-1e12} - $t0, 2))")
python3 -c "import sys; sys.exit(0 if $took <= $DOWNSTREAM_S else 1)" ||
  { echo "FAIL: A and C failed ${took}s after the kill (deadline ${DOWNSTREAM_S}s)"; bad=1; }
# B by member name; a data-plane failure names B's transport ranks (trainer
# ranks 0-1, then engine ranks: B's are 4 and 5) with B's member name.
named=$(cat "$JOB_DIR/h2.log" "$JOB_DIR/h4.log" | grep -E "$fails" | grep -cE "engine B rank [01]")
[ "$named" -ge 1 ] ||
  { echo "FAIL: no failure of A or C names engine B:"; grep -hE "$fails" "$JOB_DIR"/h[24].log | head -4; bad=1; }
bare=$(cat "$JOB_DIR/h2.log" "$JOB_DIR/h4.log" | grep -E "$fails" |
  grep -E "peer rank [45]\b" | grep -cvE "peer rank [45] \(engine B rank [01]\)")
[ "$bare" = 0 ] ||
  { echo "FAIL: a failure names B's transport rank without its member:"; grep -hE "$fails" "$JOB_DIR"/h[24].log | head -4; bad=1; }

# refitd plans without B, and the round commits on A and C, bytes checked.
job_wait_status "len(s['members']) == 6 and s['plan_fingerprint'] not in ('', '$fp')" $((HB_S + 20)) ||
  { echo "FAIL: refitd did not plan without engine B"; bad=1; }
job_wait_status "any(r['version'] == $v and r['outcome'] == 'committed' for r in s['rounds'])" 30 ||
  { echo "FAIL: round $v did not commit without engine B"; bad=1; }
netns_wait_lines "$JOB_DIR/h2.log $JOB_DIR/h4.log" 4 " checked engine [AC] .* $v\$" 10 || bad=1
job_gate "$JOB_UNTIL"
netns_wait_lines "$JOB_DIR/h[124].log" 3 '^(ok|failed) ' "$JOB_DEADLINE_S" || bad=1
reasons=$(grep -hE "$fails" "$JOB_DIR"/h[24].log | cut -d' ' -f2- | cut -c1-240 | sort -u -t: -k1,1)
netns_down
job_check_done "1 2 4" || bad=1
echo "relay kill: round $v, engine B (h3) killed; A and C failed in ${took}s; reasons:"
echo "$reasons" | sed 's/^/  /'
if [ $bad = 0 ]; then
  echo "PASS netns relay kill: downstream failed in ${took}s naming B, A and C torn, round $v committed without B"
fi
exit $bad
