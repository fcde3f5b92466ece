"""A stand-in of the vllm package, current generation, for refit's tests: only
what refit.vllm touches (weight_transfer base/factory, the general-plugin
loader, the GPU worker's weight-update session). Written for refit from
reading vLLM's source; see weight_transfer/base.py for the commit."""
