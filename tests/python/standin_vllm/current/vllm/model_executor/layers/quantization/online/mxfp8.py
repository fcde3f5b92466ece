"""Stand-in of vLLM's online MXFP8 methods (--quantization mxfp8), written
for refit's tests from vllm-project/vllm (read 2026-11-26; no vLLM code):
quantization/online/mxfp8.py at 03bf2d3 (Mxfp8OnlineLinearMethod: the BF16
weight quantized at load to e4m3 ``weight`` [N, K] and uint8 E8M0
``weight_scale`` [N, K/32], then its kernel's process_weights_after_loading),
kernels/linear/mxfp8/emulation.py at 0f6c0f5 (EmulationMxfp8LinearKernel:
with VLLM_MXFP8_EMULATION_DEQUANT_AT_LOAD the weight is dequantized to BF16
at load), kernels/linear/mxfp8/flashinfer.py at f195871
(FlashInferCutlassMxfp8LinearKernel: weight_scale swizzled by
swizzle_mxfp8_scale into one flat uint8 tensor of whole 128 x 4 tiles).
Names, shapes and dtypes as the layer holds them after loading; the values
are whatever refit writes."""

from typing import List

import standin_torch as st
from vllm.model_executor.layers.quantization.modelopt import swizzle_blockscale


class EmulationMxfp8LinearKernel:
    def __init__(self, dequant_at_load: bool = False) -> None:
        self.dequant_at_load = dequant_at_load

    def process_weights_after_loading(self, layer: st.Layer) -> None:
        if self.dequant_at_load:
            layer.weight = st.Tensor(layer.weight.shape, st.bfloat16)


class FlashInferCutlassMxfp8LinearKernel:
    def process_weights_after_loading(self, layer: st.Layer) -> None:
        tiles = swizzle_blockscale(layer.weight_scale)  # the same 128 x 4 tile order
        flat = st.Tensor([tiles.numel()], st.uint8)
        flat._mem[:] = tiles.raw()
        layer.weight_scale = flat


class Mxfp8OnlineLinearMethod:
    def __init__(self, kernel: object) -> None:
        self.kernel = kernel

    def create_weights(self, layer: st.Layer, input_size_per_partition: int,
                       output_partition_sizes: List[int]) -> None:
        if input_size_per_partition % 32:
            raise ValueError("MXFP8 requires input_size_per_partition divisible by 32")
        layer.register_parameter("weight", st.Tensor(
            [sum(output_partition_sizes), input_size_per_partition], st.bfloat16))

    def process_weights_after_loading(self, layer: st.Layer) -> None:
        n, k = layer.weight.shape
        layer.input_scale = None
        layer.weight = st.Tensor([n, k], st.float8_e4m3fn)
        layer.weight_scale = st.Tensor([n, k // 32], st.uint8)
        self.kernel.process_weights_after_loading(layer)
