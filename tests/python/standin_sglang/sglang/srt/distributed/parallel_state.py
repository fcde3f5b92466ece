"""Stand-in of sglang.srt.distributed.parallel_state's rank queries. SGLang
runs one process per TP rank, so these are process-wide there; the stand-in
runs TP workers as threads, so they are per thread (set by the TP worker)."""
import threading
import types

_local = threading.local()


def set_ranks(tp_rank: int, tp_size: int, pp_size: int = 1) -> None:
    _local.tp_rank, _local.tp_size, _local.pp_size = tp_rank, tp_size, pp_size


def get_tensor_model_parallel_rank() -> int:
    return _local.tp_rank


def get_tensor_model_parallel_world_size() -> int:
    return _local.tp_size


def get_pp_group():
    return types.SimpleNamespace(world_size=_local.pp_size)
