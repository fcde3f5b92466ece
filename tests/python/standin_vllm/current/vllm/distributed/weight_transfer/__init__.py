"""Stand-in of vllm.distributed.weight_transfer, where vLLM main keeps the
weight-transfer engines (read 2026-12-06)."""
