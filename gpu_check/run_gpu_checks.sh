#!/usr/bin/env bash
# Runs refit's GPU checks and benchmark from a bundle on a GPU host (no
# build there).
#   run_gpu_checks.sh BUNDLE_DIR [NUM_GPUS] [BENCH FLAGS...]
# The Python checks (torch_gpu_check.py, symbol_clash_check.py and, with
# transformers, rl_loop_gpu.py) run with the python3 on PATH when it has
# torch: put the torch venv first (PATH=/opt/torch/.venv/bin:$PATH). Each
# also runs alone:
#   python3 DIR/rl_loop_gpu.py DIR [--models=qwen3-moe --engines=fp8 ...]
#   python3 DIR/symbol_clash_check.py DIR
# Uses the torch venv's NCCL 2.28.9 when present (the version built against).
set -uo pipefail
dir=$1
gpus=${2:-$(nvidia-smi -L 2>/dev/null | wc -l)}
shift $(( $# >= 2 ? 2 : $# ))
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
venv_nccl=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
[ -d "$venv_nccl" ] && export LD_LIBRARY_PATH="$venv_nccl:${LD_LIBRARY_PATH:-}"
nvidia-smi -L
echo "== nccl_patterns_gpu on $gpus GPUs, 2 lanes"
"$dir/nccl_patterns_gpu" --gpus="$gpus" --lanes=2
rc1=$?
echo "== nccl_patterns_gpu on $gpus GPUs, 1 lane"
"$dir/nccl_patterns_gpu" --gpus="$gpus" --lanes=1
rc2=$?
echo "== the same patterns on the pull path (ranks share the $gpus GPUs, as colocated members do)"
"$dir/nccl_patterns_gpu" --gpus="$gpus" --lanes=2 --transport=pull
rc6=$?
echo "== the NCCL patterns with a host per rank (NCCL's network path on loopback; ranks share the $gpus GPUs)"
"$dir/nccl_patterns_gpu" --gpus="$gpus" --lanes=2 --transport=nccl-hosts
rc10=$?
echo "== convert_gpu_test (FP8 quantize and -exp kernels vs host and reference)"
"$dir/convert_gpu_test"
rc4=$?
echo "== mxfp8_gpu_test (MXFP8 quantize kernels vs host and the reference of vLLM's formula)"
REFIT_MXFP8_DUMP="$(mktemp -d)" && export REFIT_MXFP8_DUMP
"$dir/mxfp8_gpu_test" || rc4=1
if python3 -c 'import torch' 2>/dev/null; then
  python3 "$dir/mxfp8_torch_check.py" "$REFIT_MXFP8_DUMP" || rc4=1
fi
echo "== fused_pull_gpu_test (quantize-on-pull kernel vs its host items; next to a copy)"
"$dir/fused_pull_gpu_test" || rc4=1
echo "== pull_nvfp4_gpu_test (NVFP4 quantize-on-pull kernel vs its host items; next to a copy)"
"$dir/pull_nvfp4_gpu_test" || rc4=1
echo "== nvfp4_gpu_test (NVFP4 quantize kernels vs host and the reference of ModelOpt's formula)"
REFIT_NVFP4_DUMP="$(mktemp -d)" && export REFIT_NVFP4_DUMP
"$dir/nvfp4_gpu_test" || rc4=1
if python3 -c 'import torch' 2>/dev/null; then
  python3 "$dir/nvfp4_torch_check.py" "$REFIT_NVFP4_DUMP" || rc4=1
fi
# dumped_check TEST ENV SCRIPT WHAT: the GPU test TEST dumping its bytes
# into a fresh directory named by the variable ENV, then (where torch is
# installed) SCRIPT comparing them with torch; a failure sets rc4.
dumped_check() {
  echo "== $1 ($4)"
  local d
  d="$(mktemp -d)"
  env "$2=$d" "$dir/$1" || rc4=1
  if python3 -c 'import torch' 2>/dev/null; then
    echo "== $3"
    python3 "$dir/$3" "$d" || rc4=1
  fi
}
dumped_check nvfp4_vllm_gpu_test REFIT_NVFP4_VLLM_DUMP nvfp4_vllm_check.py \
  "vLLM's online NVFP4 kernel vs host with the device's reciprocals; torch with rcp.approx"
dumped_check deepgemm_sm100_gpu_test REFIT_DEEPGEMM_SM100_DUMP deepgemm_sm100_check.py \
  "DeepGEMM's SM100 packed UE8M0 scales: kernel vs host; vs DeepGEMM's torch statement"
echo "== gpu_wave_ops_test (delta encode/apply and digest kernels, a wave at once, vs the host codec)"
"$dir/gpu_wave_ops_test"
rc9=$?
if [ "$gpus" -ge 2 ]; then
  echo "== delta_nccl_gpu_test (GPU members' delta and verified rounds over NCCL)"
  "$dir/delta_nccl_gpu_test" || rc9=1
fi
echo "== refit_gpu_bench $*"
"$dir/refit_gpu_bench" "$@"
rc3=$?
rc5=0 rc7=0 rc8=0
if python3 -c 'import torch' 2>/dev/null; then
  echo "== torch_gpu_check.py (the Python client with torch tensors)"
  python3 "$dir/torch_gpu_check.py" "$dir" --gpus="$gpus"
  rc5=$?
  echo "== symbol_clash_check.py (the client library and the wheel next to torch)"
  python3 "$dir/symbol_clash_check.py" "$dir"
  rc8=$?
  if python3 -c 'import transformers' 2>/dev/null; then
    echo "== rl_loop_gpu.py (transformers trainer -> refit -> engine in vLLM's fused layout)"
    python3 "$dir/rl_loop_gpu.py" "$dir"
    rc7=$?
  else
    echo "== rl_loop_gpu.py skipped: no transformers in $(command -v python3)"
  fi
fi
echo "exit codes: patterns lanes2=$rc1 lanes1=$rc2 ipc=$rc6 hosts=$rc10 transform=$rc4 delta=$rc9" \
     "bench=$rc3 python=$rc5 rl_loop=$rc7 symbols=$rc8"
[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ $rc3 -eq 0 ] && [ $rc4 -eq 0 ] && [ $rc5 -eq 0 ] &&
  [ $rc9 -eq 0 ] && [ $rc10 -eq 0 ] &&
  [ $rc6 -eq 0 ] && [ $rc7 -eq 0 ] && [ $rc8 -eq 0 ]
