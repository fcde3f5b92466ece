#!/bin/bash
# Runs the `refit` binary as a user would: exit codes and output.
set -u
# shellcheck source=tests/testing/check.sh
. "${TEST_SRCDIR}/${TEST_WORKSPACE:-refit}/tests/testing/check.sh" 2>/dev/null ||
  . "$(find "${TEST_SRCDIR}" -path '*tests/testing/check.sh' | head -1)"
REFIT=$(find_bin cli/refit)
check top-help 0 'refit plan' -- "$REFIT" --help
check plan-help 0 '^  --heatmap' -- "$REFIT" plan --help
check plan-help-short 0 '^  --heatmap' -- "$REFIT" plan -h
check plan-help-generated 0 'default: 512' -- "$REFIT" plan --help
check plan-rejects-status-flag 2 'unknown flag --server' -- "$REFIT" plan --server x
check top-help-simulate 0 'refit simulate --model' -- "$REFIT" --help
check top-help-status 0 'refit status --server' -- "$REFIT" --help
# The `refit plan` examples the help prints run as printed (continuation
# lines joined).
for sub in "" plan; do
  while IFS= read -r ex; do
    eval "set -- $ex"
    shift  # "refit"
    check "help-example${sub:+-$sub}" 0 'total.bytes' -- "$REFIT" "$@"
  done < <("$REFIT" $sub --help | sed -e ':a' -e '/\\$/N; s/\\\n *//; ta' |
           grep -E '^ *refit plan ')
done
# docs/operations.md's `refit plan` example runs as written, with every
# optional [--flag] given.
doc="${TEST_SRCDIR}/${TEST_WORKSPACE:-refit}/docs/operations.md"
[ -r "$doc" ] || doc=$(find -L "${TEST_SRCDIR}" -path '*docs/operations.md' | head -1)
n=0
while IFS= read -r ex; do
  ex=$(sed -e 's/\[\([^]|]*\)\]/\1/g' -e "s#plan.svg#${TEST_TMPDIR:-/tmp}/doc_plan.svg#" <<<"$ex")
  eval "set -- $ex"
  shift  # "refit"
  check "operations-example-$((n += 1))" 0 'total.bytes' -- "$REFIT" "$@"
done < <(sed -e ':a' -e '/\\$/N; s/\\\n *//; ta' "$doc" | grep -E '^refit plan ')
[ "$n" -gt 0 ] || { echo "FAIL: no refit plan example in $doc"; fail=1; }
check unknown-command 2 "unknown command 'bogus'" -- "$REFIT" bogus
# A dtype no model takes is a usage error: exit 2, the cause said once.
check plan-dtype-fp16 2 '^refit: --dtype: weight dtype "fp16" is not one of bf16, fp8, fp8-tensor$' -- \
  "$REFIT" plan --model tiny-qwen3 --trainer fsdp:dp=1 --engine vllm:tp=1 --dtype fp16
check plan-dtype-fp8 0 'total.bytes' -- \
  "$REFIT" plan --model tiny-qwen3-moe-b128 --trainer fsdp:dp=1 --engine vllm:tp=1 --dtype fp8
# Megatron GTP trainers in TE's native MXFP8 / NVFP4: planned, bytes by
# format; another engine format is refused naming both.
check plan-gtp-mxfp8 0 'by format: mxfp8 ' -- "$REFIT" plan --model tiny-qwen3-mx \
  --trainer megatron:tp=2,gtp=2,weights=mxfp8 --engine vllm:tp=1,quant=mxfp8
check plan-gtp-nvfp4 0 'by format: nvfp4 ' -- "$REFIT" plan --model tiny-qwen3-moe-fp4 \
  --trainer megatron:tp=1,gtp=2,dp=2,ep=2,etp=1,egtp=2,weights=nvfp4 \
  --engine vllm:tp=2,dp=2,ep=4,quant=nvfp4
# NVFP4 by vLLM's online recipe: the experts only, named by recipe; a dense
# model is refused naming the recipe that fits it.
check plan-nvfp4-recipe-vllm 0 'by format: .*nvfp4 recipe=vllm ' -- "$REFIT" plan \
  --model tiny-qwen3-moe-fp4 --trainer megatron:tp=2,ep=2,etp=1 \
  --engine vllm:tp=2,quant=nvfp4,recipe=vllm
check plan-nvfp4-recipe-vllm-dense 1 'routed MoE experts only.*recipe=modelopt' -- "$REFIT" plan \
  --model tiny-qwen3-fp4 --trainer megatron:tp=2 --engine vllm:tp=1,quant=nvfp4,recipe=vllm
check plan-gtp-other-format 1 'holds it as format mxfp8 codes and the engine as format nvfp4 codes' -- "$REFIT" plan \
  --model tiny-qwen3-mx --trainer megatron:tp=1,gtp=2,weights=mxfp8 --engine vllm:tp=1,quant=nvfp4
# Engines of one job hold one format: DeepGEMM's requantized FP8 beside the
# checkpoint's float scales is refused naming both.
check plan-engines-other-format 1 'fp8_block_requant_ue8m0 codes\) where the first engine has .*\(fp8_block codes\)' -- "$REFIT" plan \
  --model tiny-qwen3-moe-b128 --trainer fsdp:dp=2 --engine 'vllm:tp=1,quant=fp8;vllm:tp=1,quant=fp8,kernel=deepgemm'
# The plan's one-pass decision per format: whole FP8 tiles quantize on
# pull; DeepGEMM tiles cut by FSDP's shards and NVFP4 blocks cut by TP 4
# keep two passes.
check plan-one-pass-fp8 0 'conversions in one pass / two: fp8_block 32 / 0$' -- "$REFIT" plan \
  --model tiny-qwen3-moe-b128 --trainer megatron:tp=1 --engine vllm:tp=1,quant=fp8
check plan-two-pass-deepgemm 0 'in one pass / two: fp8_block_requant_ue8m0 0 / 96$' -- \
  "$REFIT" plan --model tiny-qwen3-moe-b128 --trainer fsdp:dp=3 \
  --engine vllm:tp=1,dp=2,quant=fp8,kernel=deepgemm
check plan-passes-nvfp4 0 'in one pass / two: nvfp4 18 / 94$' -- "$REFIT" plan \
  --model tiny-qwen3-fp4 --trainer megatron:tp=4,dp=2 --engine vllm:tp=2,dp=2,quant=nvfp4
check plan-passes-json 0 '"one_pass": 32,' -- "$REFIT" plan \
  --model tiny-qwen3-moe-b128 --trainer megatron:tp=1 --engine vllm:tp=1,quant=fp8 --json
check top-help-health 0 '^  health ' -- "$REFIT" --help
check health-help 0 '^  --timeout_s' -- "$REFIT" health --help
check health-rejects-plan-flag 2 'unknown flag --model' -- "$REFIT" health --model x
for flag in --model --trainer --engine --dtype --gpus_per_host --colocated \
    --link --staging_mib --lanes --max_plan_mib --json --heatmap --timings --hosts \
    --engine_staging; do
  check "plan-help$flag" 0 "^  $flag" -- "$REFIT" plan --help
done
for flag in --server --token_file --timeout_s --rounds --json; do
  check "status-help$flag" 0 "^  $flag" -- "$REFIT" status --help
done
check status-help-default-server 0 'default: "127.0.0.1:50051"' -- "$REFIT" status --help
# -h is --help; `refit models` lists every built-in model.
check top-h 0 'refit plan' -- "$REFIT" -h
check plan-h 0 'refit plan: ' -- "$REFIT" plan -h
check models-help 0 '^  models ' -- "$REFIT" --help
check models-kimi 0 '^kimi-k2$' -- "$REFIT" models
check models-tiny 0 '^tiny-qwen3$' -- "$REFIT" models
# A colocated job whose replicas line up with hosts stays on NVLink; the
# summary gives the lower bound and the ratio.
check colocated-intra 0 'inter-host bytes: 0 B' -- "$REFIT" plan --model qwen3-8b \
  --trainer megatron:tp=2,dp=4 --engine vllm:tp=2,dp=4 --gpus-per-host 2 --colocated
# --colocated puts engine rank r on trainer rank r's GPU: nearly every byte
# is a copy within one GPU.
check colocated-same-gpu 0 'same-GPU bytes: 6[01]\.[0-9]+ GiB' -- "$REFIT" plan --model qwen3-8b \
  --trainer megatron:tp=2,dp=4 --engine vllm:tp=2,dp=4 --gpus-per-host 2 --colocated
check colocated-help 0 "shares trainer rank r's GPU" -- "$REFIT" plan --help
check colocated-bound 0 'predicted / lower bound: 1\.0[0-5]' -- "$REFIT" plan \
  --model qwen3-8b --trainer megatron:tp=2,dp=4 --engine vllm:tp=2,dp=4 \
  --gpus-per-host 2 --colocated
check json-fingerprint 0 '"fingerprint": "[0-9a-f]{32}"' -- "$REFIT" plan \
  --model tiny-qwen3 --trainer fsdp:dp=4 --engine vllm:tp=2,dp=1 --json
check json-lower-bound 0 '"lower_bound_seconds": [0-9]' -- "$REFIT" plan \
  --model tiny-qwen3 --trainer fsdp:dp=4 --engine vllm:tp=2,dp=1 --json
# Staged engines: each engine rank's device staging, host overflow and pause.
# qwen3-8b over 2 engine ranks is ~8.2 GB a rank: a 4 GiB budget overflows.
check staged-overflow 0 'engine rank 1: [1-9][0-9]* bytes staged on the device, [1-9][0-9]* bytes in host overflow \(of [1-9][0-9]*\), pause [0-9.]+ ms' -- \
  "$REFIT" plan --model qwen3-8b --trainer fsdp:dp=1 --engine vllm:tp=2 --engine_staging=4GiB
check staged-all-on-device 0 'engine rank 0: [1-9][0-9]* bytes staged on the device, 0 bytes in host overflow' -- \
  "$REFIT" plan --model qwen3-8b --trainer fsdp:dp=1 --engine vllm:tp=2 --engine_staging=100%
check staged-longest 0 'staged engine pause: longest [0-9.e+-]+ ms \(engine rank [01], [1-9][0-9]* bytes in host overflow\)' -- \
  "$REFIT" plan --model qwen3-8b --trainer fsdp:dp=1 --engine vllm:tp=2 --engine_staging=0.25 \
  --link host=12
check staged-json 0 '"overflow_bytes": [1-9]' -- "$REFIT" plan --model qwen3-8b \
  --trainer fsdp:dp=1 --engine vllm:tp=2 --engine_staging=4GiB --json
check staged-bad 2 '--engine_staging .1\.5.: give bytes' -- "$REFIT" plan --model tiny-qwen3 \
  --trainer fsdp:dp=1 --engine vllm:tp=1 --engine_staging=1.5
check hosts-file-missing 1 'nope.txt' -- "$REFIT" plan --model tiny-qwen3 \
  --trainer fsdp:dp=2 --engine vllm:tp=2 --hosts "${TEST_TMPDIR:-/tmp}/nope.txt"
check bad-link 2 'link' -- "$REFIT" plan --model tiny-qwen3 \
  --trainer fsdp:dp=2 --engine vllm:tp=2 --link nvlink=-3
check unknown-model 1 'no-such-model' -- "$REFIT" plan --model no-such-model \
  --trainer fsdp:dp=2 --engine vllm:tp=2
# A --model path that is no regular file (a device that never ends, a
# directory) or too large fails at once, naming it.
CHECK_TIMEOUT_S=10 check model-dev-zero 1 '/dev/zero is not a regular file' -- \
  "$REFIT" plan --model /dev/zero --trainer fsdp:dp=2 --engine vllm:tp=2
emptydir="${TEST_TMPDIR:-/tmp}/no_config_here"
mkdir -p "$emptydir"
CHECK_TIMEOUT_S=10 check model-directory 1 'no_config_here: the directory has no config.json' -- \
  "$REFIT" plan --model "$emptydir" --trainer fsdp:dp=2 --engine vllm:tp=2
# A config.json path that is not there says so (not the built-in list).
check model-missing-file 1 'model /nonexistent/config.json: no such file$' -- \
  "$REFIT" plan --model /nonexistent/config.json --trainer fsdp:dp=2 --engine vllm:tp=2
# A Hugging Face id is read from the local cache, without network.
hub="${TEST_TMPDIR:-/tmp}/hf/hub"
mkdir -p "$hub/models--Org--Tiny/snapshots/rev1" "$hub/models--Org--Tiny/refs"
echo rev1 >"$hub/models--Org--Tiny/refs/main"
"$REFIT" buffers --model tiny-qwen3 --engine vllm:tp=1 --json >/dev/null  # the binary works
printf '{"model_type": "qwen3", "hidden_size": 16, "num_attention_heads": 4,
  "num_key_value_heads": 2, "head_dim": 8, "intermediate_size": 24,
  "num_hidden_layers": 3, "vocab_size": 90, "tie_word_embeddings": true}' \
  >"$hub/models--Org--Tiny/snapshots/rev1/config.json"
check model-hf-id 0 'total bytes moved: [1-9]' -- env HF_HUB_CACHE="$hub" "$REFIT" plan \
  --model Org/Tiny --trainer fsdp:dp=2 --engine vllm:tp=2
check model-hf-home 0 'total bytes moved: [1-9]' -- env -u HF_HUB_CACHE \
  HF_HOME="${TEST_TMPDIR:-/tmp}/hf" "$REFIT" plan --model Org/Tiny --trainer fsdp:dp=2 \
  --engine vllm:tp=2
check model-hf-id-missing 1 'models--Org--Absent/snapshots' -- env HF_HUB_CACHE="$hub" \
  "$REFIT" plan --model Org/Absent --trainer fsdp:dp=2 --engine vllm:tp=2
big="${TEST_TMPDIR:-/tmp}/big_config.json"
head -c $((16 * 1024 * 1024 + 1)) /dev/zero >"$big"
CHECK_TIMEOUT_S=10 check model-too-large 1 "big_config.json holds more than 16777216 bytes" -- \
  "$REFIT" plan --model "$big" --trainer fsdp:dp=2 --engine vllm:tp=2
flagfile="${TEST_TMPDIR:-/tmp}/plan.flags"
printf -- '--model=tiny-qwen3\n--trainer=fsdp:dp=2\n--engine=vllm:tp=2\n--json\n' >"$flagfile"
check flagfile 0 '"total_bytes": [1-9]' -- "$REFIT" plan --flagfile="$flagfile"
check timings 0 'timing: planner' -- "$REFIT" plan --model tiny-qwen3 \
  --trainer fsdp:dp=2 --engine vllm:tp=2 --timings
check no-command 2 'missing command' -- "$REFIT"
check unknown-flag 2 'unknown flag --bogus' -- "$REFIT" plan --bogus 1
# A misspelt flag gets the nearest one; a value of the wrong type or out of
# range is a usage error (exit 2), never silently ignored.
check did-you-mean 2 'unknown flag --delat \(did you mean --delta\?\)' -- "$REFIT" plan \
  --model tiny-qwen3 --trainer fsdp:dp=2 --engine vllm:tp=2 --delat=0.02
check did-you-mean-status 2 'did you mean --token_file' -- "$REFIT" status --tokenfile=x
check delta-percent 2 '^refit: --delta=2%: not a number' -- "$REFIT" plan \
  --model tiny-qwen3 --trainer fsdp:dp=2 --engine vllm:tp=2 --delta=2%
check delta-percent-space 2 '^refit: --delta=2%: not a number' -- "$REFIT" plan \
  --model tiny-qwen3 --trainer fsdp:dp=2 --engine vllm:tp=2 --delta 2%
check delta-negative 2 '^refit: --delta=-0.5: the fraction of the elements changed, in \[0, 1\]' \
  -- "$REFIT" plan --model tiny-qwen3 --trainer fsdp:dp=2 --engine vllm:tp=2 --delta=-0.5
check lanes-word 2 '^refit: --lanes=two: not an integer' -- "$REFIT" plan \
  --model tiny-qwen3 --trainer fsdp:dp=2 --engine vllm:tp=2 --lanes=two
# An engine TP that cannot split the model names the heads first, prints
# every layout error (trainer and engine) and the nearest valid TP.
check tp3-heads 1 'engine vllm:tp=3.*: num_attention_heads \(32\) is not divisible by tp=3' -- \
  "$REFIT" plan --model qwen3-8b --trainer megatron:tp=2 --engine vllm:tp=3
check tp3-nearest 1 'valid near tp=3: tp=2 \(vllm:tp=2.*\), tp=4 \(vllm:tp=4' -- \
  "$REFIT" plan --model qwen3-8b --trainer megatron:tp=2 --engine vllm:tp=3
check tp3-both-sides 1 'trainer megatron:tp=3' -- \
  "$REFIT" plan --model qwen3-8b --trainer megatron:tp=3 --engine vllm:tp=3
check tp3-buffers 1 'num_attention_heads \(32\) is not divisible by tp=3' -- \
  "$REFIT" buffers --model qwen3-8b --engine vllm:tp=3
check missing-model 2 'required' -- "$REFIT" plan --trainer fsdp:dp=2 --engine vllm:tp=2
check tiny-plan 0 'total bytes moved: [1-9]' -- "$REFIT" plan --model tiny-qwen3 \
  --trainer megatron:tp=2,pp=2,dp=1 --engine vllm:tp=2,dp=2
check tiny-json 0 '"total_bytes": [1-9]' -- "$REFIT" plan --model tiny-qwen3 \
  --trainer fsdp:dp=4 --engine vllm:tp=2,dp=1 --json
check bad-tp 1 'error' -- "$REFIT" plan --model tiny-qwen3 \
  --trainer fsdp:dp=2 --engine vllm:tp=7,dp=1
check bad-spec 1 'error' -- "$REFIT" plan --model tiny-qwen3 \
  --trainer megatron:tq=2 --engine vllm:tp=2
# `refit buffers`: what a member registers, by convention.
check top-help-buffers 0 'refit buffers --model' -- "$REFIT" --help
check buffers-engine 0 'model.layers.0.self_attn.qkv_proj.weight +\[[0-9]+, [0-9]+\] +bf16' \
  -- "$REFIT" buffers --model tiny-qwen3 --engine vllm:tp=2 --rank 1
check buffers-all-ranks 0 'trainer rank 3 of 4' -- "$REFIT" buffers \
  --model tiny-qwen3 --trainer megatron:tp=2,pp=2
check buffers-json 0 '"rank": 0' -- "$REFIT" buffers --model tiny-qwen3-moe \
  --trainer megatron:tp=2,ep=2,etp=1 --json
check buffers-rank-outside 1 'rank 2 is outside the world of 2' -- "$REFIT" \
  buffers --model tiny-qwen3 --engine vllm:tp=2 --rank 2
check buffers-both-sides 2 'one of --trainer' -- "$REFIT" buffers \
  --model tiny-qwen3 --engine vllm:tp=2 --trainer fsdp:dp=2
# vLLM creates NemotronH's A as an f32 parameter.
check nemotron-a-f32 0 'model\.layers\.0\.mixer\.A +\[64\] +f32' -- "$REFIT" buffers \
  --model nemotron-h-8b --engine vllm:tp=2
# A BF16 trainer into an FP8 engine: FP8 on the wire, half the bytes, and
# Kimi-K2 on 256 -> 128 GPUs within 1.35 s at the default link speeds.
check fp8-plan 0 'with their scales: .* \(0\.50[0-9]x\)' -- "$REFIT" plan \
  --model qwen3-8b --trainer megatron:tp=2 --engine vllm:tp=2,quant=fp8
out=$("$REFIT" plan --model kimi-k2 --trainer megatron:tp=8,pp=16,ep=16,etp=1,dp=2 \
  --engine vllm:tp=16,dp=8,quant=fp8 --json)
secs=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["predicted_seconds"])' <<<"$out")
if python3 -c "import sys; sys.exit(0 if float('$secs') <= 1.35 else 1)"; then
  echo "PASS kimi-k2-fp8 predicted $secs s"
else
  echo "FAIL kimi-k2-fp8 predicted $secs s > 1.35 s"; fail=1
fi
# A convention with a huge world, absurd staging or lanes fail at once with a
# clear error (no abort, no memory growth).
CHECK_TIMEOUT_S=10 check huge-engine-world 1 'over the plan memory budget --max_plan_mib' -- \
  "$REFIT" plan --model tiny-qwen3 --trainer megatron:tp=1 --engine vllm:tp=1,dp=1048576
CHECK_TIMEOUT_S=10 check huge-trainer-world 1 'over the plan memory budget --max_plan_mib' -- \
  "$REFIT" plan --model tiny-qwen3 --trainer megatron:dp=1048576 --engine vllm:tp=1
CHECK_TIMEOUT_S=10 check small-plan-budget 1 '--max_plan_mib = 1 MiB' -- \
  "$REFIT" plan --model tiny-qwen3 --trainer megatron:tp=1 --engine vllm:tp=1,dp=4096 \
  --max_plan_mib 1
# The dash spelling is the same flag.
CHECK_TIMEOUT_S=10 check small-plan-budget-dash 1 '--max_plan_mib = 1 MiB' -- \
  "$REFIT" plan --model tiny-qwen3 --trainer megatron:tp=1 --engine vllm:tp=1,dp=4096 \
  --max-plan-mib=1
check max-plan-zero 2 '--max_plan_mib needs a positive integer' -- \
  "$REFIT" plan --model tiny-qwen3 --trainer megatron:tp=1 --engine vllm:tp=1 \
  --max_plan_mib 0
check staging-overflow 1 '--staging_mib 99999999999999: must be 1..1048576' -- \
  "$REFIT" plan --model tiny-qwen3 --trainer megatron:tp=1 --engine vllm:tp=1 \
  --staging_mib 99999999999999
check lanes-absurd 1 '--lanes 1000000: must be 1..64' -- \
  "$REFIT" plan --model tiny-qwen3 --trainer megatron:tp=1 --engine vllm:tp=1 \
  --lanes 1000000
svg="${TEST_TMPDIR:-/tmp}/h.svg"
check heatmap 0 'predicted refit time' -- "$REFIT" plan --model tiny-qwen3 \
  --trainer megatron:tp=2,pp=2,dp=1 --engine vllm:tp=2,dp=2 --heatmap "$svg"
grep -q '</svg>' "$svg" || { echo "FAIL heatmap file"; fail=1; }
# Disaggregated, 2 GPUs a host: trainer hosts 0-1 (stage 0 on host 0, stage
# 1 on host 1), engine hosts numbered from 0 on their own (not 2-3).
check heatmap-hosts 0 'predicted refit time' -- "$REFIT" plan --model tiny-qwen3 \
  --trainer megatron:tp=2,pp=2,dp=1 --engine vllm:tp=2,dp=2 --gpus_per_host 2 --heatmap "$svg"
grep -q '>1 pp 1</text>' "$svg" && grep -q 'trainer host 0 pp 0 -> engine host 1:' "$svg" &&
  ! grep -q 'engine host 2' "$svg" && echo "ok heatmap-labels" ||
  { echo "FAIL heatmap-labels"; grep '<title>' "$svg" | head -5; fail=1; }
# Colocated: one cell per (trainer rank, engine rank), copies within one GPU
# outlined, instead of one cell for the one host.
check heatmap-colocated 0 'predicted refit time' -- "$REFIT" plan --model tiny-qwen3 \
  --trainer megatron:tp=2 --engine vllm:tp=2 --colocated --heatmap "$svg"
grep -q 'engine rank, one GPU each' "$svg" &&
  grep -q 'trainer rank 1 (host 0) -> engine rank 1 (host 0): .* (same GPU)' "$svg" &&
  echo "ok heatmap-per-gpu" || { echo "FAIL heatmap-per-gpu"; grep '<title>' "$svg" | head -5; fail=1; }
exit $fail
