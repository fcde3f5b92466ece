"""A stand-in of the vllm package, current generation (vLLM main as read
2026-12-06), for refit's tests: only what refit.vllm touches (weight_transfer
base/factory, the general-plugin loader, the GPU worker's weight-update
session, quantization methods' layers). Written for refit from reading
vLLM's source; see standin_vllm/current_base.py."""
