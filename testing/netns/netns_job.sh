# netns_job.sh: a refit job on namespace hosts (netns.sh), for the fault
# tests. Sourced after netns.sh, with REFITD, REFIT and MEMBERS (the
# binaries) set.
#
# The job: refitd on host 0; a trainer (megatron:tp=2,dp=2) with replica 0
# on host 1 and replica 1 on host 2; engines A and B (vllm:tp=2 each) on
# hosts 3 and 4. Members report their hosts, ride out faults (netns_members)
# and stop once version JOB_UNTIL committed; engines check every byte after
# every committed round. Trainer rank 0 starts version v only once the gate
# (job_gate) is at least v: a scenario holds rounds back until a fault has
# healed, so that no member finishes while another is away.

JOB_MODEL=${JOB_MODEL:-}
JOB_UNTIL=${JOB_UNTIL:-6}
JOB_DEADLINE_S=${JOB_DEADLINE_S:-120}
JOB_HEARTBEAT_TIMEOUT_MS=${JOB_HEARTBEAT_TIMEOUT_MS:-2000}
JOB_TRAINER=${JOB_TRAINER:-"megatron:tp=2,dp=2"}
JOB_ENGINE="vllm:tp=2"
JOB_REFITD_FLAGS=${JOB_REFITD_FLAGS:-}  # more refitd flags (e.g. --relay=on)
# The Python interpreter itself, not a launcher in PATH (a pyenv shim takes
# ~0.7 s a call): a status poll must take well under a round's first
# second (job_wait_running).
JOB_PY=${JOB_PY:-$(python3 -c 'import sys; print(sys.executable or "python3")' 2>/dev/null)}
JOB_PY=${JOB_PY:-python3}

# Writes the small Qwen3 config (about 1.7 MB of BF16 weights) to $1.
job_model_config() {
  cat >"$1" <<'EOF'
{"model_type": "qwen3", "hidden_size": 128, "num_attention_heads": 4,
 "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 384,
 "num_hidden_layers": 4, "vocab_size": 512, "tie_word_embeddings": false}
EOF
}

# The members of host $1 (a test may define its own after sourcing this).
job_members_of() {
  case $1 in
    1) echo "trainer/0,trainer/1" ;;
    2) echo "trainer/2,trainer/3" ;;
    3) echo "engine/A/0,engine/A/1" ;;
    4) echo "engine/B/0,engine/B/1" ;;
  esac
}

# Starts host $1's members (log $JOB_DIR/h$1.log, appended: a restarted
# host keeps its earlier lines). Extra flags follow.
job_start_host() {
  local h=$1
  shift
  ip netns exec "$(netns_name "h$h")" "$MEMBERS" --server="$NETNS_REFITD" --host_id="h$h" \
    --bind="$(netns_data_ip "$h")" --model="$JOB_MODEL" --trainer="$JOB_TRAINER" \
    --engine="$JOB_ENGINE" --members="$(job_members_of "$h")" --until="$JOB_UNTIL" \
    --start --deadline_s="$JOB_DEADLINE_S" --heartbeat_ms=300 --refitd_timeout_s=3 \
    --step_s=1 --round_s=15 --gate="$JOB_DIR/gate" "$@" >>"$JOB_DIR/h$h.log" 2>&1 &
  NETNS_PIDS+=($!)
  disown $!
}

# Makes the hosts, starts refitd and every host's members, in directory $1.
job_up() {
  JOB_DIR=$1
  mkdir -p "$JOB_DIR"
  [ -n "$JOB_MODEL" ] || { JOB_MODEL="$JOB_DIR/model.json"; job_model_config "$JOB_MODEL"; }
  echo 0 >"$JOB_DIR/gate"
  netns_up 5 || return 1
  netns_start_refitd "$REFITD" "$JOB_DIR/refitd.log" \
    --heartbeat_timeout_ms="$JOB_HEARTBEAT_TIMEOUT_MS" --min_engines=1 $JOB_REFITD_FLAGS ||
    return 1
  local h
  for h in 1 2 3 4; do job_start_host "$h"; done
  # Round 1 once all 8 members are in the plan.
  job_wait_status "len(s['members']) == 8 and s['plan_fingerprint'] != '' and s['plan_error'] == ''" 60 ||
    return 1
  netns_wait_lines "$(job_logs)" 8 ' plan ' 30 || return 1
  job_gate "${JOB_GATE:-$JOB_UNTIL}"
}

# Lets trainer rank 0 start versions up to $1.
job_gate() { echo "$1" >"$JOB_DIR/gate"; }

job_logs() { echo "$JOB_DIR"/h[1-4].log; }

# refitd's status as JSON (from host 0), or nothing when it does not answer.
job_status() {
  netns_exec 0 "$REFIT" status --server="$NETNS_REFITD" --json --timeout_s=2 2>/dev/null
}

# Evaluates Python expression $1 over the status JSON `s` (prints it).
job_status_eval() {
  job_status | "$JOB_PY" -c "import json,sys
try: s=json.load(sys.stdin)
except Exception: sys.exit(1)
print($1)" 2>/dev/null
}

# Waits up to $2 seconds until Python condition $1 over status `s` holds.
job_wait_status() {
  local cond=$1 secs=$2 end
  end=$(($(date +%s) + secs))
  while [ "$(date +%s)" -lt "$end" ]; do
    [ "$(job_status_eval "bool($cond)")" = True ] && return 0
    sleep 0.2
  done
  echo "timed out after ${secs}s waiting for status: $cond" >&2
  return 1
}

# Waits (up to $1 s) for a round of at least version $2 that started less
# than JOB_EARLY_S (0.4 s) ago, so that a fault injected now lands while
# its bytes move; prints its version. While none runs and every version
# the gate lets start has committed, it opens the gate one version further
# (up to JOB_UNTIL - 2).
job_wait_running() {
  local secs=$1 min=$2 end st v c g
  end=$(($(date +%s) + secs))
  g=$(cat "$JOB_DIR/gate")
  while [ "$(date +%s)" -lt "$end" ]; do
    st=$(job_status_eval "'%d %d' % (max([r['version'] for r in s['rounds'] if r['outcome'] == 'running' and r['version'] >= $min and r['seconds'] < ${JOB_EARLY_S:-0.4}] + [0]), max([r['version'] for r in s['rounds'] if r['outcome'] == 'committed'] + [0]))")
    read -r v c <<<"${st:-0 0}"
    [ "$v" -gt 0 ] && { echo "$v"; return 0; }
    if [ "$c" -ge "$g" ] && [ "$g" -lt $((JOB_UNTIL - 2)) ]; then
      g=$((g + 1))
      job_gate "$g"
    fi
    sleep 0.05
  done
  return 1
}

# Waits up to $2 seconds until the members of every host in "$1" (e.g.
# "1 2 4") printed their last line ("ok|failed K of N members"). Returns 1
# at once when a host's process ended without it (it crashed: its last
# lines are printed), or at the deadline.
job_wait_finished() {
  local hosts=$1 end=$(($(date +%s) + $2)) h left
  while :; do
    left=""
    for h in $hosts; do
      grep -qE '^(ok|failed) ' "$JOB_DIR/h$h.log" 2>/dev/null && continue
      if [ -z "$(ip netns pids "$(netns_name "h$h")" 2>/dev/null)" ] &&
        ! grep -qE '^(ok|failed) ' "$JOB_DIR/h$h.log" 2>/dev/null; then
        echo "host h$h: its members' process ended without finishing:" >&2
        tail -3 "$JOB_DIR/h$h.log" | cut -c1-200 >&2
        return 1
      fi
      left+=" h$h"
    done
    [ -z "$left" ] && return 0
    [ "$(date +%s)" -lt "$end" ] || break
    sleep 0.2
  done
  echo "timed out after ${2}s waiting for the members of$left to finish" >&2
  return 1
}

# The unix time now, in seconds with milliseconds.
job_now() { date +%s.%3N; }

# Checks the members' logs at the end: every member of hosts "$1" done
# with version JOB_UNTIL, no "error" line, and every engine of them
# checked every version it committed. Prints what is wrong; returns 1 then.
job_check_done() {
  local hosts=$1 h ok=0 log n_err commits checks
  for h in $hosts; do
    log="$JOB_DIR/h$h.log"
    if ! grep -q "^ok 2 of 2 members" "$log"; then
      echo "host h$h: members did not all commit version $JOB_UNTIL:"; tail -5 "$log"; ok=1
    fi
    # An "error" event, not the word in a peer's message ("Read error").
    n_err=$(grep -cE '^[0-9.]+ error ' "$log")
    [ "$n_err" = 0 ] || { echo "host h$h: $n_err errors:"; grep -E '^[0-9.]+ error ' "$log" | head -3; ok=1; }
    commits=$(grep -c ' committed engine' "$log")
    checks=$(grep -c ' checked engine' "$log")
    [ "$commits" = "$checks" ] || { echo "host h$h: $commits commits, $checks byte checks"; ok=1; }
  done
  return $ok
}

# Prints what a failed step needs on a CI log whose tail is all one sees,
# at most 80 lines: the step ($1), refitd's status (members, plan, engines,
# the last rounds with their reasons), the last lines of every host's log
# and of refitd's. Call it while refitd runs (before netns_down).
job_digest() {
  local f gone
  {
    echo "== digest: $1 failed ($(job_now))"
    job_status | "$JOB_PY" -c "import json,sys
try: s=json.load(sys.stdin)
except Exception: print('refitd status: no answer'); sys.exit(0)
print('refitd: %d members, epoch %s, plan %s %s' % (len(s['members']), s['epoch'], s['plan_fingerprint'][:16], s['plan_error'][:80]))
print('engines: ' + ' '.join('%s c=%s t=%s' % (e['engine_id'], e['committed_version'], e['torn_version']) for e in s['engines']))
for r in s['rounds'][-6:]:
  print('  round %d %s %.2fs %s' % (r['version'], r['outcome'], r['seconds'], r['reason'][:110]))" 2>&1 | head -10
    for f in "$JOB_DIR"/h*.log "$JOB_DIR/refitd.log"; do
      [ -f "$f" ] || continue
      gone=""
      [[ ${f##*/} =~ ^(h[0-9]+)\.log$ ]] && [ -z "$(ip netns pids "$(netns_name "${BASH_REMATCH[1]}")" 2>/dev/null)" ] &&
        gone="; its process is gone"
      echo "-- ${f##*/} (last lines of $(wc -l <"$f")$gone)"
      tail -n "$([ "${f##*/}" = refitd.log ] && echo 4 || echo 11)" "$f" | cut -c1-180
    done
  } | head -80
}

# Copies the job's logs to Bazel's undeclared outputs (test.outputs/
# outputs.zip beside test.log), where a run under `bazel test` keeps them.
job_keep_logs() {
  [ -n "${TEST_UNDECLARED_OUTPUTS_DIR:-}" ] || return 0
  mkdir -p "$TEST_UNDECLARED_OUTPUTS_DIR/${1:-job}" &&
    cp "$JOB_DIR"/*.log "$TEST_UNDECLARED_OUTPUTS_DIR/${1:-job}/" 2>/dev/null
  return 0
}
