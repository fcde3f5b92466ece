"""sglang.srt.distributed.parallel_state's rank queries (per thread here:
see standin_sglang_runtime)."""
from standin_sglang_runtime import (  # noqa: F401
    get_pp_group, get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size,
    set_ranks)
