"""Stand-in of vllm.plugins: standin_vllm/plugins.py's loader (the same in
both generations refit serves)."""
from standin_vllm.plugins import errors, load_general_plugins

__all__ = ["errors", "load_general_plugins"]
