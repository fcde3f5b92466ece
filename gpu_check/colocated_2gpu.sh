#!/usr/bin/env bash
# The colocated and small-piece figures on the two GPUs of a host, from a
# bundle (builds nothing; about 5 minutes on 2 H100s), every engine byte
# checked, the tables printed last:
#   colocated_2gpu.sh BUNDLE_DIR [OUT_DIR]
#  1. colocated_gpus_bench: Megatron TP2 on GPUs 0-1 into vLLM TP2 and vLLM
#     TP1 x DP2 on the same GPUs, a process per member: the ways to move
#     the bytes (pull kernel, copy engines, NCCL) next to cudaMemcpyPeer and
#     the device copy, and the pull path's round next to its floor and NCCL;
#  2. refit_gpu_bench on 2 GPUs (1 trainer GPU -> 1 engine GPU): 2048 x
#     1 MiB strided pieces and Qwen3-8B over NCCL next to raw pre-packed
#     NCCL, K = 1, 2 and 4 lanes;
#  3. colocated_bench on GPU 0, the cases in $COLOCATED_CASES (default
#     8b,8b-fp8,8b-mx,8b-nv: Qwen3-8B BF16 -> BF16, -> FP8, -> MXFP8 and
#     -> NVFP4, the quantized ones in two passes and in one);
#  4. torch_gpu_check.py: the pull path from GPU 0 to GPU 1 through the
#     Python client (Qwen3-8B next to torch's peer copy; Qwen3-0.6B in two
#     processes);
#  5. refit_demo, refitd-driven, 3 rounds of Qwen3-8B: over NCCL (TP1 on
#     GPU 0 -> TP1 on GPU 1) and over the pull path (Megatron TP2 on GPUs
#     0-1 -> vLLM TP1 x DP2 on the same GPUs), engine bytes checked on the
#     GPU after every round.
# Exit 0 only if every step passed.
set -uo pipefail
dir=$(realpath "${1:?usage: colocated_2gpu.sh BUNDLE_DIR [OUT_DIR]}")
out=${2:-$(mktemp -d /tmp/colocated_2gpu.XXXXXX)}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
venv_nccl=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
[ -d "$venv_nccl" ] && export LD_LIBRARY_PATH="$venv_nccl:${LD_LIBRARY_PATH:-}"
py=python3
[ -x /opt/torch/.venv/bin/python3 ] && py=/opt/torch/.venv/bin/python3
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
SECONDS=0
declare -A rc
step() {  # step NAME TIMEOUT_S COMMAND...: output to $out/NAME.txt
  local name=$1 limit=$2
  shift 2
  echo "== $name ($SECONDS s): $*"
  timeout "$limit" "$@" > "$out/$name.txt" 2>&1
  rc[$name]=$?
  echo "   exit ${rc[$name]} after $SECONDS s"
}
cases=${COLOCATED_CASES:-8b,8b-fp8,8b-mx,8b-nv}
step gpus 150 "$dir/colocated_gpus_bench" --cases=tp2,dp2 --iters=10
step small 120 "$dir/refit_gpu_bench" --gpus=2 --scenarios=small,tp2 --iters=10
step colocated 300 "$dir/colocated_bench" --cases="$cases" --iters=10
step python 120 "$py" "$dir/torch_gpu_check.py" "$dir" --gpus=2 --only=ipc-2gpu,pull-2gpu-qwen3-8b
step demo_nccl 90 "$dir/refit_demo" --refitd="$dir/refitd" --member="$dir/refit_demo_member_gpu" \
  --gpus=2 --model=qwen3-8b --trainer=megatron:tp=1 --engines=vllm:tp=1 --rounds=3 \
  --staging_mib=512 --deadline_s=60
step demo_pull 90 "$dir/refit_demo" --refitd="$dir/refitd" --member="$dir/refit_demo_member_gpu" \
  --gpus=2 --transport=pull --model=qwen3-8b --trainer=megatron:tp=2 --engines='vllm:tp=1,dp=2' \
  --rounds=3 --deadline_s=60

echo
echo "################ tables (outputs in $out, $SECONDS s in all)"
echo "== 1. colocated across GPUs 0-1 (colocated_gpus_bench --cases=tp2,dp2 --iters=10)"
sed -n '/^case way/,$p' "$out/gpus.txt"
echo "== 2. NCCL, 1 trainer GPU -> 1 engine GPU (refit_gpu_bench --gpus=2 --scenarios=small,tp2 --iters=10)"
grep -E "^(small|tp2):" "$out/small.txt" | cut -c1-400
sed -n '/^case  *refit ms/,$p' "$out/small.txt"
echo "== 3. colocated on GPU 0 (colocated_bench --cases=$cases --iters=10)"
sed -n '/^case what/,$p' "$out/colocated.txt"
echo "== 4. Python client, pull path GPU 0 -> GPU 1 (torch_gpu_check.py --only=ipc-2gpu,pull-2gpu-qwen3-8b)"
grep -E "^FIGURE|^(PASS|FAIL)  (ipc-2gpu|pull-2gpu)" "$out/python.txt"
echo "== 5. refitd-driven demo, Qwen3-8B, 3 rounds"
for d in demo_nccl demo_pull; do
  echo "-- $d"
  sed -n '/^ *version/,$p' "$out/$d.txt" | grep -v "^---" | head -8
done
fail=0
for k in gpus small colocated python demo_nccl demo_pull; do
  [ "${rc[$k]}" -eq 0 ] || { echo "FAILED: $k (exit ${rc[$k]}, see $out/$k.txt)"; fail=1; }
done
[ $fail -eq 0 ] && echo "ALL PASS ($SECONDS s)"
exit $fail
