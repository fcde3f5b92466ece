"""A stand-in of the sglang package with weight-update sessions (the session
line: sglang-miles, SGLang 0.5.19 and later) for refit's tests: only the
weight-update path refit.sglang drives. Written for refit from reading
sgl-project/sglang (the session line's managers/scheduler_components/
weight_updater.py, with _WeightUpdateSession and base-weight checksum
verification; model_executor/model_runner_components/weight_updater.py at
027814efb69e3220bcae1c2dfd6a0ccc1aff2821); no SGLang code. The shared parts
are in tests/python/standin_sglang_runtime.py."""
