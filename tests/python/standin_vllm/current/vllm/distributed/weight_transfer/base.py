"""Stand-in of vLLM main's vllm/distributed/weight_transfer/base.py: this name is standin_vllm.current_base
itself (see there)."""
import importlib
import sys

sys.modules[__name__] = importlib.import_module("standin_vllm.current_base")
