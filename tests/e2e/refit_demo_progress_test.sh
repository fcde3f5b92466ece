#!/usr/bin/env bash
# refit_demo's live progress: with engine ranks 0 waiting 2.5 s before each
# round's data plane (refit_demo_member_slow's test hook), the demo prints
# at least two progress lines per round from refitd's status, a final line
# per round, and still verifies every engine byte.
# Args: DEMO REFITD SLOW_MEMBER
set -uo pipefail
demo=$1 refitd=$2 member=$3
out=$("$demo" --refitd="$refitd" --member="$member" --deadline_s=60 --model=tiny-qwen3 \
  --trainer=megatron:tp=2 '--engines=vllm:tp=2;vllm:tp=1,dp=2' --rounds=2 \
  --test_round_delay_ms=2500 2>&1)
rc=$?
echo "$out"
fail=0
bad() { echo "FAIL: $1"; fail=1; }
[ $rc -eq 0 ] || bad "refit_demo exited $rc"
for v in 1 2; do
  n=$(grep -cE "^round $v: [0-6]/6 members reported, [0-9.]+ s(, [0-9]+ bytes per engine rank so far)?$" <<<"$out")
  [ "$n" -ge 2 ] || bad "round $v: $n progress lines, expected at least 2"
  # Bytes: what one engine rank received (tiny-qwen3 into vLLM TP2 and TP1 DP2),
  # 4 engine ranks.
  grep -qE "^round $v committed in [0-9.]+ s \(slowest member [0-9.]+ s\): [0-9.]+ (bytes|MB) per engine rank \(4 engine ranks\), [0-9.]+ GB/s, peak staging [0-9]+ bytes \(trainer/demo/[01]\)$" <<<"$out" ||
    bad "round $v: no final line"
done
# Engine rank 1 of e0 and e1's rank 1 do not wait: some members report
# while the others are still moving.
grep -qE '^round 2: [1-5]/6 members reported' <<<"$out" || bad "no round with some members reported"
grep -q '^verified: .* hold the trainer.s bytes exactly' <<<"$out" || bad "no verification line"
# One meaning of bytes: refitd's final line and the demo's table (from the
# members' own figures) say the same bytes for each round.
for v in 1 2; do
  said=$(sed -nE "s/^round $v committed in .*: ([0-9.]+ (bytes|MB)) per engine rank.*/\1/p" <<<"$out")
  table=$(sed -nE "s/^ +$v +([0-9.]+ (bytes|MB)) +[0-9.]+ .*/\1/p" <<<"$out")
  [ -n "$said" ] && [ "$said" = "$table" ] || bad "round $v: refitd says '$said', the demo's table '$table'"
done
[ $fail -eq 0 ] && echo PASS
exit $fail
