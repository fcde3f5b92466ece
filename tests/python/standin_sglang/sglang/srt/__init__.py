"""Part of the sglang stand-in (see sglang/__init__.py)."""
