"""A stand-in of the sglang package for refit's tests: only the weight-update
path refit.sglang uses. Written for refit from reading SGLang's source
(sgl-project/sglang main, 2026: model_runner.py at
0005834cdb2a5b7472789ccbf0d3361b5cf853b8 and the update_weights_from_tensor
path of its model runner, scheduler and engine); no SGLang code."""
