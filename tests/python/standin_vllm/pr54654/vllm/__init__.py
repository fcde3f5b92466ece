"""A stand-in of the vllm package as built from the unmerged reorganisation
vllm-project/vllm#54654 (055e47c): the weight-transfer engines under
vllm.backends.distributed.weight_transfer, the current generation's API.
Only what refit.vllm touches; written for refit's tests."""
