#!/usr/bin/env bash
# The bytes that cross host links equal what `refit plan` predicts: refitd
# on host 0, trainer and engine ranks (megatron:tp=2,dp=2 -> vllm:tp=2,dp=2,
# two DP replicas each side) on hosts 1..4 as their placement says, each
# member reporting its host and moving its bytes over Gloo on its host's
# data link. For each placement: refitd's plan fingerprint equals `refit
# plan --hosts`'s, every engine byte is checked after every round, and each
# host's data-link counters over rounds 2..R (read from the veth) lie between
# the plan's bytes out of (into) that host and that plus the protocol
# overhead: TCP/IP headers and acknowledgements, Gloo's message headers
# (OVERHEAD_PCT percent of the bytes one way plus OVERHEAD_ACK_PCT of the
# other way, plus OVERHEAD_FIXED bytes per round).
# Args: REFITD REFIT NETNS_MEMBERS NETNS_SH [ROUNDS]
set -u
REFITD=$1 REFIT=$2 MEMBERS=$3
source "$4"
ROUNDS=${5:-4}
OVERHEAD_PCT=2 OVERHEAD_ACK_PCT=1 OVERHEAD_FIXED=4096
netns_require || exit 0
WORK=${TEST_TMPDIR:-$(mktemp -d)}/netns_bytes
rm -rf "$WORK" && mkdir -p "$WORK"
fail=0

# A small Qwen3 (about 1.7 MB of BF16 weights): big enough that the payload,
# not connection set-up, fills the links.
cat >"$WORK/model.json" <<'EOF'
{"model_type": "qwen3", "hidden_size": 128, "num_attention_heads": 4,
 "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 384,
 "num_hidden_layers": 4, "vocab_size": 512, "tie_word_embeddings": false}
EOF
TRAINER="megatron:tp=2,dp=2" ENGINE="vllm:tp=2,dp=2"

# run_case NAME "HOSTS OF TRAINER RANKS 0..3" "HOSTS OF ENGINE RANKS 0..3"
# (host numbers 1..4).
run_case() {
  local name=$1 d="$WORK/$1" h r th eh members logs="" fp
  read -r -a th <<<"$2"
  read -r -a eh <<<"$3"
  mkdir -p "$d"
  : >"$d/hosts.txt"
  for r in 0 1 2 3; do echo "trainer $r h${th[$r]}" >>"$d/hosts.txt"; done
  for r in 0 1 2 3; do echo "engine $r h${eh[$r]}" >>"$d/hosts.txt"; done
  "$REFIT" plan --model="$WORK/model.json" --trainer="$TRAINER" --engine="$ENGINE" \
    --hosts="$d/hosts.txt" --json >"$d/plan.json" || { echo "FAIL $name: refit plan"; return 1; }
  netns_up 5 || { echo "FAIL $name: netns_up"; return 1; }
  netns_start_refitd "$REFITD" "$d/refitd.log" || { netns_down; return 1; }
  echo 1 >"$d/gate"
  for h in 1 2 3 4; do
    members=""
    for r in 0 1 2 3; do
      [ "${th[$r]}" = "$h" ] && members+="trainer/$r,"
      [ "${eh[$r]}" = "$h" ] && members+="engine/A/$r,"
    done
    [ -z "$members" ] && continue
    netns_spawn "$h" "$d/h$h.log" "$MEMBERS" --server="$NETNS_REFITD" --host_id="h$h" \
      --bind="$(netns_data_ip "$h")" --model="$WORK/model.json" --trainer="$TRAINER" \
      --engine="$ENGINE" --members="$members" --until="$ROUNDS" --gate="$d/gate" \
      --start --deadline_s=90 >/dev/null
    logs+="$d/h$h.log "
  done
  netns_wait_lines "$logs" 8 ' committed .* rank [0-9]+ 1 ' 60 || { netns_down; echo "FAIL $name: round 1"; return 1; }
  sleep 0.5  # round 1's last acknowledgements
  for h in 1 2 3 4; do
    echo "$h $(netns_bytes "$h" data tx) $(netns_bytes "$h" data rx)" >>"$d/before"
  done
  echo "$ROUNDS" >"$d/gate"
  netns_wait_lines "$logs" 8 ' done ' 60 || { netns_down; echo "FAIL $name: rounds"; return 1; }
  sleep 0.5
  for h in 1 2 3 4; do
    echo "$h $(netns_bytes "$h" data tx) $(netns_bytes "$h" data rx)" >>"$d/after"
  done
  netns_down
  cat $logs | grep -E ' error |^failed' && { echo "FAIL $name: members failed"; return 1; }
  local checked
  checked=$(cat $logs | grep -c ' checked ')
  [ "$checked" = $((4 * ROUNDS)) ] || { echo "FAIL $name: $checked engine checks, want $((4 * ROUNDS))"; return 1; }
  fp=$(cat $logs | sed -n 's/^[0-9.]* plan .* \([0-9a-f]*\)$/\1/p' | sort -u)
  python3 - "$d" "$name" "$fp" "$ROUNDS" "$OVERHEAD_PCT" "$OVERHEAD_ACK_PCT" "$OVERHEAD_FIXED" <<'EOF'
import json, sys
d, name, fp, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
pct, ack_pct, fixed = (float(x) for x in sys.argv[5:8])
plan = json.load(open(f"{d}/plan.json"))
ok = True
if fp != plan["fingerprint"]:
    print(f"FAIL {name}: refitd's plan {fp!r} is not refit plan's {plan['fingerprint']}")
    ok = False
# Host indices of the plan: order of first appearance, trainer ranks first.
index = {}
for line in open(f"{d}/hosts.txt"):
    w = line.split()
    index.setdefault(int(w[2][1:]), len(index))
heat = plan["heatmap"]
out = {h: 0 for h in index}
inn = {h: 0 for h in index}
for i, row_host in enumerate(heat["row_hosts"]):
    for j, col_host in enumerate(heat["col_hosts"]):
        if row_host == col_host:
            continue
        b = heat["bytes"][i][j]
        src = [h for h, k in index.items() if k == row_host][0]
        dst = [h for h, k in index.items() if k == col_host][0]
        out[src] += b
        inn[dst] += b
before = {int(w[0]): (int(w[1]), int(w[2])) for w in map(str.split, open(f"{d}/before"))}
after = {int(w[0]): (int(w[1]), int(w[2])) for w in map(str.split, open(f"{d}/after"))}
n = rounds - 1
print(f"{name}: plan {plan['fingerprint']}, inter-host {plan['inter_host_bytes']} B per round, "
      f"rounds 2..{rounds}")
print(f"  host  plan out   veth tx   plan in    veth rx   (bytes)")
for h in sorted(index):
    tx = after[h][0] - before[h][0]
    rx = after[h][1] - before[h][1]
    po, pi = n * out[h], n * inn[h]
    line = f"  h{h}  {po:9d}  {tx:9d}  {pi:9d}  {rx:9d}"
    for what, got, want, back in (("tx", tx, po, pi), ("rx", rx, pi, po)):
        hi = want * (1 + pct / 100) + back * ack_pct / 100 + fixed * n
        if not (want <= got <= hi):
            line += f"  FAIL {what} {got} outside [{want}, {hi:.0f}]"
            ok = False
    print(line)
sys.exit(0 if ok else 1)
EOF
}

run_case colocated "1 1 2 2" "1 1 2 2" || fail=1
run_case disaggregated "1 1 2 2" "3 3 4 4" || fail=1
# Engine replica 0 beside trainer replica 0, replica 1 on a host of its own.
run_case mixed "1 1 2 2" "1 1 3 3" || fail=1
[ $fail = 0 ] && echo "PASS netns bytes: veth counters equal refit plan's bytes per host" 
exit $fail
