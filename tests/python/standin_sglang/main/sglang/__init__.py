"""A stand-in of the sglang package (main, no weight-update sessions) for
refit's tests: only the weight-update path refit.sglang drives. Written for
refit from reading sgl-project/sglang (managers/scheduler_components/
weight_updater.py at b2d53a07e07c664d4318934b5dd699246be30677, io_struct's
UpdateWeightsFromTensorReqInput); no SGLang code. The shared parts are in
tests/python/standin_sglang_runtime.py."""
