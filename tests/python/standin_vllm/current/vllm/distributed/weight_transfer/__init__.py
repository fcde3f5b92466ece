"""Stand-in of the compatibility alias current vLLM keeps at
vllm.distributed.weight_transfer (055e47c): attributes come from
vllm.backends.distributed.weight_transfer."""
import importlib as _importlib

_real = _importlib.import_module("vllm.backends.distributed.weight_transfer")


def __getattr__(name):
    return getattr(_real, name)
