"""sglang.srt.server_args' accessor of the server's arguments in a worker
process (per thread here: see standin_sglang_runtime)."""
from standin_sglang_runtime import get_global_server_args  # noqa: F401
