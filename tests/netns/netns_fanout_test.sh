#!/usr/bin/env bash
# Fan-out over real links: one trainer host feeding REPLICAS engine hosts,
# each host's data link capped at RATE with token-bucket filters (both
# directions). refitd on h0, the trainer (megatron:tp=2) on h1, engine
# replica i (vllm:tp=2) on host h(2+i). Four rounds of the same bytes:
#   relay        vllm:tp=2,dp=REPLICAS, refitd --relay=on (replicas forward)
#   direct       the same, --relay=off (every byte from the trainer)
#   one replica  vllm:tp=2 on h2 alone
#   broadcast    the one-replica bytes from h1 to one process per engine
#                host, as broadcast-based weight sync does it over Gloo:
#                bucket by bucket, each a gloo::broadcast (gloo_broadcast)
# Each refit round: refitd's plan fingerprint equals `refit plan --hosts`'s,
# every engine byte is checked on every replica after every round, and
# each host's data-link payload over rounds 2..ROUNDS (interface counters,
# less each packet's 66-byte Ethernet/IPv4/TCP header) lies within 1% plus
# 16 KiB and 64 bytes per cross-host message of that host per round
# (Gloo's framing: a header with each message, a notice back for each
# receive) above the plan's bytes into and out of that host (`refit plan
# --json`'s hosts.sent/received/messages). Times are refitd's round durations (start to
# commit), the median of rounds 2..ROUNDS; the broadcast's is barrier to
# barrier. Prints
#   fanout: relay X s, direct Y s, one replica Z s, broadcast W s
# and fails unless relay <= 1.3 x one replica.
# Args: REFITD REFIT NETNS_MEMBERS NETNS_SH GLOO_BROADCAST
# Environment: FANOUT_RATE (tc rate, default 32mbit: on a 2-core machine
# the links, not the CPU, then bound every round), FANOUT_REPLICAS (8),
# FANOUT_ROUNDS (4), FANOUT_STAGING_MIB and FANOUT_LANES (refitd's and
# refit plan's --staging_mib, default 1, and --lanes, default 2),
# FANOUT_MODEL (a config.json; default: a Qwen3-shaped model of 10.5 MB
# in BF16), FANOUT_CASES (default "relay direct one broadcast").
set -u
REFITD=$1 REFIT=$2 MEMBERS=$3 BCAST=$5
source "$4"
RATE=${FANOUT_RATE:-32mbit}
N=${FANOUT_REPLICAS:-8}
ROUNDS=${FANOUT_ROUNDS:-4}
STAGING=${FANOUT_STAGING_MIB:-1}
LANES=${FANOUT_LANES:-2}
CASES=${FANOUT_CASES:-relay direct one broadcast}
netns_require || exit 0
WORK=${TEST_TMPDIR:-$(mktemp -d)}/netns_fanout
rm -rf "$WORK" && mkdir -p "$WORK"
MODEL=${FANOUT_MODEL:-$WORK/model.json}
if [ -z "${FANOUT_MODEL:-}" ]; then
  cat >"$MODEL" <<'EOF'
{"model_type": "qwen3", "hidden_size": 256, "num_attention_heads": 4,
 "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 768,
 "num_hidden_layers": 4, "vocab_size": 4096, "tie_word_embeddings": false}
EOF
fi
TRAINER="megatron:tp=2"
HEADER_BYTES=66  # Ethernet 14 + IPv4 20 + TCP with timestamps 32
fail=0

netns_up $((N + 2)) || { echo "FAIL: netns_up"; exit 1; }
for h in $(seq 1 $((N + 1))); do
  netns_cap "$h" data "$RATE" || { echo "FAIL: tc tbf on h$h"; exit 1; }
done

# Host h's data-link counters: "TX_BYTES TX_PACKETS RX_BYTES RX_PACKETS".
link_counters() {
  local h=$1 d
  d="/sys/class/net/data/statistics"
  netns_exec "$h" cat "$d/tx_bytes" "$d/tx_packets" "$d/rx_bytes" "$d/rx_packets" | tr '\n' ' '
}

# Kills every process on hosts 0..N+1.
stop_all() {
  local h
  for h in $(seq 0 $((N + 1))); do netns_kill_host "$h"; done
}

# run_case NAME RELAY(on|off) REPLICAS: one refit job; writes
# $WORK/NAME/seconds (the median round) or returns 1.
run_case() {
  local name=$1 relay=$2 n=$3 d="$WORK/$1" engine h r members logs="" want
  mkdir -p "$d"
  engine="vllm:tp=2"
  [ "$n" -gt 1 ] && engine="vllm:tp=2,dp=$n"
  : >"$d/hosts.txt"
  echo "trainer 0 h1" >>"$d/hosts.txt"
  echo "trainer 1 h1" >>"$d/hosts.txt"
  for r in $(seq 0 $((2 * n - 1))); do echo "engine $r h$((2 + r / 2))" >>"$d/hosts.txt"; done
  "$REFIT" plan --model="$MODEL" --trainer="$TRAINER" --engine="$engine" --hosts="$d/hosts.txt" \
    --relay="$relay" --staging_mib="$STAGING" --lanes="$LANES" --json >"$d/plan.json" ||
    { echo "FAIL $name: refit plan"; return 1; }
  netns_start_refitd "$REFITD" "$d/refitd.log" --relay="$relay" --staging_mib="$STAGING" \
    --lanes="$LANES" ||
    return 1
  echo 1 >"$d/gate"
  for h in $(seq 1 $((n + 1))); do
    if [ "$h" = 1 ]; then
      members="trainer/0,trainer/1"
    else
      members="engine/A/$((2 * (h - 2))),engine/A/$((2 * (h - 2) + 1))"
    fi
    netns_spawn "$h" "$d/h$h.log" "$MEMBERS" --server="$NETNS_REFITD" --host_id="h$h" \
      --bind="$(netns_data_ip "$h")" --model="$MODEL" --trainer="$TRAINER" \
      --engine="$engine" --members="$members" --until="$ROUNDS" --gate="$d/gate" \
      --start --deadline_s=600 --round_s=120 >/dev/null
    logs+="$d/h$h.log "
  done
  want=$((2 * n + 2))
  netns_wait_lines "$logs" "$want" ' committed .* rank [0-9]+ 1 ' 180 ||
    { echo "FAIL $name: round 1"; stop_all; return 1; }
  sleep 0.5  # round 1's last acknowledgements
  for h in $(seq 1 $((n + 1))); do echo "$h $(link_counters "$h")" >>"$d/before"; done
  echo "$ROUNDS" >"$d/gate"
  netns_wait_lines "$logs" "$want" ' done ' $((120 * ROUNDS)) ||
    { echo "FAIL $name: rounds"; stop_all; return 1; }
  sleep 0.5
  for h in $(seq 1 $((n + 1))); do echo "$h $(link_counters "$h")" >>"$d/after"; done
  netns_exec 0 "$REFIT" status --server="$NETNS_REFITD" --json --timeout_s=5 >"$d/status.json"
  stop_all
  cat $logs | grep -E ' error |^failed' && { echo "FAIL $name: members failed"; return 1; }
  local checked fp
  checked=$(cat $logs | grep -c ' checked ')
  [ "$checked" = $((2 * n * ROUNDS)) ] ||
    { echo "FAIL $name: $checked engine checks, want $((2 * n * ROUNDS))"; return 1; }
  fp=$(cat $logs | sed -n 's/^[0-9.]* plan .* \([0-9a-f]*\)$/\1/p' | sort -u)
  python3 - "$d" "$name" "$fp" "$ROUNDS" "$HEADER_BYTES" <<'EOF'
import json, statistics, sys
d, name, fp, rounds, header = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
plan = json.load(open(f"{d}/plan.json"))
ok = True
if fp != plan["fingerprint"]:
    print(f"FAIL {name}: refitd's plan {fp!r} is not refit plan's {plan['fingerprint']}")
    ok = False
# Host indices of the plan: order of first appearance in hosts.txt.
index = {}
for line in open(f"{d}/hosts.txt"):
    index.setdefault(int(line.split()[2][1:]), len(index))
sent, received = plan["hosts"]["sent"], plan["hosts"]["received"]
messages = plan["hosts"]["messages"]
read = lambda f: {int(w[0]): [int(x) for x in w[1:]] for w in map(str.split, open(f))}
before, after = read(f"{d}/before"), read(f"{d}/after")
n = rounds - 1
lines = [f"{name}: plan {plan['fingerprint']}, relay depth {plan['relay_depth']}, "
         f"rounds 2..{rounds}; payload = bytes - {header} x packets",
         "  host  plan out   link out  plan in   link in"]
for h in sorted(index):
    delta = [a - b for a, b in zip(after[h], before[h])]
    tx, rx = delta[0] - header * delta[1], delta[2] - header * delta[3]
    po, pi = n * sent[index[h]], n * received[index[h]]
    line = f"  h{h}  {po:9d}  {tx:9d}  {pi:9d}  {rx:9d}"
    for what, got, want in (("out", tx, po), ("in", rx, pi)):
        hi = want * 1.01 + (16384 + 64 * messages[index[h]]) * n
        if not (want <= got <= hi):
            line += f"  FAIL {what} {got} outside [{want}, {hi:.0f}]"
            ok = False
    lines.append(line)
print("\n".join(lines), file=open(f"{d}/bytes.txt", "w"))
if not ok:
    print("\n".join(lines))
st = json.load(open(f"{d}/status.json"))
secs = [r["duration_seconds"] for r in st["rounds"]
        if r["outcome"] == "committed" and 2 <= r["version"] <= rounds]
if len(secs) != n:
    print(f"FAIL {name}: {len(secs)} committed rounds in 2..{rounds} in refitd's status")
    ok = False
else:
    open(f"{d}/seconds", "w").write(f"{statistics.median(secs):.2f}\n")
    open(f"{d}/rounds.txt", "w").write(" ".join(f"{s:.2f}" for s in secs) + "\n")
sys.exit(0 if ok else 1)
EOF
}

# The broadcast baseline: BYTES (the one-replica round's) from h1 to one
# process on each engine host; writes $WORK/broadcast/seconds.
run_broadcast() {
  local d="$WORK/broadcast" bytes=$1 h pids=() rank
  mkdir -p "$d/store"
  for h in $(seq 1 $((N + 1))); do
    rank=$((h - 1))
    netns_spawn "$h" "$d/h$h.log" "$BCAST" --rank="$rank" --world=$((N + 1)) \
      --bind="$(netns_data_ip "$h")" --store="$d/store" --bytes="$bytes" \
      --rounds="$ROUNDS" --timeout_s=300 >/dev/null
  done
  netns_wait_lines "$d/h*.log" $((N + 1)) '^(ok|error)' $((120 * ROUNDS)) ||
    { echo "FAIL broadcast: no end"; stop_all; return 1; }
  stop_all
  if grep -h '^error' "$d"/h*.log; then echo "FAIL broadcast"; return 1; fi
  python3 - "$d" "$ROUNDS" <<'EOF'
import statistics, sys
d, rounds = sys.argv[1], int(sys.argv[2])
secs = [float(l.split()[2]) for l in open(f"{d}/h1.log") if l.startswith("round ")][1:]
open(f"{d}/seconds", "w").write(f"{statistics.median(secs):.2f}\n")
open(f"{d}/rounds.txt", "w").write(" ".join(f"{s:.2f}" for s in secs) + "\n")
EOF
}

has() { [[ " $CASES " == *" $1 "* ]]; }
has relay && { run_case relay on "$N" || fail=1; }
has direct && { run_case direct off "$N" || fail=1; }
# The one-replica plan gives the broadcast its bytes.
if has one || has broadcast; then run_case one off 1 || fail=1; fi
if has broadcast && [ -f "$WORK/one/plan.json" ]; then
  run_broadcast "$(python3 -c "import json; print(json.load(open('$WORK/one/plan.json'))['total_bytes'])")" ||
    fail=1
fi
for c in relay direct one; do
  [ -f "$WORK/$c/bytes.txt" ] && cat "$WORK/$c/bytes.txt"
done
for c in relay direct one broadcast; do
  [ -f "$WORK/$c/rounds.txt" ] && echo "$c rounds 2..$ROUNDS: $(cat "$WORK/$c/rounds.txt")"
done
sec() { cat "$WORK/$1/seconds" 2>/dev/null || echo "?"; }
echo "fanout: relay $(sec relay) s, direct $(sec direct) s, one replica $(sec one) s, broadcast $(sec broadcast) s"
echo "  ($N engine hosts, data links capped at $RATE, $(python3 -c "import json; print(json.load(open('$WORK/one/plan.json'))['total_bytes'])" 2>/dev/null) bytes per replica)"
if [ $fail = 0 ] && has relay && has one; then
  python3 -c "import sys; r, o = float('$(sec relay)'), float('$(sec one)'); sys.exit(0 if r <= 1.3 * o else 1)" ||
    { echo "FAIL: relay round over 1.3 x the one-replica round"; fail=1; }
fi
[ $fail = 0 ] && echo "PASS netns fanout"
exit $fail
