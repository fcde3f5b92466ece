"""Stand-in of vllm.backends.distributed.weight_transfer, where current vLLM
keeps the weight-transfer engines (vllm-project/vllm
055e47c28003156421365af985d676fc921cb075; vllm.distributed.weight_transfer
is a compatibility alias of it there)."""
