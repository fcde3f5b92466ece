"""Stand-in of vLLM main's vllm/distributed/weight_transfer/factory.py: this name is standin_vllm.current_factory
itself (see there)."""
import importlib
import sys

sys.modules[__name__] = importlib.import_module("standin_vllm.current_factory")
