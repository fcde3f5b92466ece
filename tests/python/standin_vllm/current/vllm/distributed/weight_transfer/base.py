"""Stand-in of current vLLM's alias module: this name is the module
vllm.backends.distributed.weight_transfer.base itself."""
import importlib
import sys

sys.modules[__name__] = importlib.import_module("vllm.backends.distributed.weight_transfer.base")
