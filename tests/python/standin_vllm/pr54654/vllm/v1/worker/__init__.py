"""Part of the vllm stand-in (see vllm/__init__.py)."""
