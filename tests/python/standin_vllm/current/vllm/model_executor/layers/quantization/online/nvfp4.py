"""Stand-in of vLLM's online NVFP4 method (--quantization nvfp4_per_token),
written for refit's tests from vllm-project/vllm (read 2026-12-06; no vLLM
code): quantization/online/nvfp4.py at 0136201 (Nvfp4OnlineMoEMethod: the
routed experts are created in the model dtype and quantized at load to
packed E2M1 ``w13_weight`` / ``w2_weight`` [E, N, K/2], e4m3 block scales
[E, N, K/16], ``w13_weight_scale_2`` / ``w2_weight_scale_2`` [E] and ones
[E] as input scales; its backend comes from select_nvfp4_moe_backend with
per-token activations, fused_moe/oracle/nvfp4.py at 0136201, which only
FLASHINFER_TRTLLM and FLASHINFER_CUTEDSL accept; vLLM has no online NVFP4
linear method: the linears stay UnquantizedLinearMethod's, ../../linear.py).
What is kept: the method's class and
``nvfp4_backend``, and the tensors as the quantization step leaves them;
the backend's conversion after it (the TRTLLM or CuteDSL shuffle) is not
modelled: refit refuses the layer by name before reading them."""

import enum

import standin_torch as st


class NvFp4MoeBackend(enum.Enum):
    FLASHINFER_TRTLLM = "FLASHINFER_TRTLLM"
    FLASHINFER_CUTEDSL = "FLASHINFER_CUTEDSL"


class Nvfp4OnlineMoEMethod:
    def __init__(self, backend: NvFp4MoeBackend = NvFp4MoeBackend.FLASHINFER_TRTLLM) -> None:
        self.nvfp4_backend = backend  # select_nvfp4_moe_backend's choice

    def create_weights(self, layer: st.Layer, num_experts: int, hidden_size: int,
                       intermediate_size_per_partition: int) -> None:
        """The experts in the model dtype, as the BF16 checkpoint loads them."""
        for name, shape in (("w13_weight", [2 * intermediate_size_per_partition, hidden_size]),
                            ("w2_weight", [hidden_size, intermediate_size_per_partition])):
            layer.register_parameter(name, st.Tensor([num_experts] + shape, st.bfloat16))

    def process_weights_after_loading(self, layer: st.Layer) -> None:
        for w in ("w13", "w2"):
            e, n, k = getattr(layer, w + "_weight").shape
            layer.register_parameter(w + "_weight", st.Tensor([e, n, k // 2], st.uint8))
            layer.register_parameter(w + "_weight_scale",
                                     st.Tensor([e, n, k // 16], st.float8_e4m3fn))
            layer.register_parameter(w + "_weight_scale_2", st.Tensor([e], st.float32))
            layer.register_parameter(w + "_input_scale", st.Tensor.f32([1.0] * e, [e]))
