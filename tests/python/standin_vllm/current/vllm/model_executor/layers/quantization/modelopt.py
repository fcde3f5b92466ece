"""Stand-in of vLLM's ModelOpt NVFP4 methods, written for refit's tests from
vllm-project/vllm (read 2026-11-26; no vLLM code): quantization/modelopt.py
at 00155cd (ModelOptNvFp4LinearMethod, ModelOptNvFp4FusedMoE,
ModelOptNvFp4W4A16LinearMethod: create_weights and
process_weights_after_loading), fused_moe/oracle/nvfp4.py (at 0136201:
make_nvfp4_moe_quant_config passes w13_weight_scale_2 / w2_weight_scale_2
themselves as g1_alphas / g2_alphas; prepare_nvfp4_moe_layer_for_fi_or_cutlass
merges w13's input scales to one per expert, reorders w13 to [up; gate] and
swizzles the block scales for the FlashInfer and CUTLASS backends),
fused_moe/experts/flashinfer_cutlass_moe.py at 03063c09
(FlashInferExperts.process_weights_after_loading folds the input scales
into the weight global scales in place) and quantization/utils/
nvfp4_utils.py at 4159f5b (swizzle_blockscale, pad_nvfp4_weight_for_cutlass). What is kept: every
parameter's name, shape and dtype as the layer holds it after loading, the
renames (weight_scale_2 -> weight_global_scale, input_scale ->
input_global_scale), the derived alpha and the MoE alphas, and the kernel
objects refit.engine_layouts reads. Values are those a checkpoint loaded
into them (the caller fills them); the swizzle moves bytes as vLLM's does.
"""

import enum
import types
from typing import List

import standin_torch as st


class NvFp4MoeBackend(enum.Enum):
    EMULATION = "EMULATION"
    FLASHINFER_CUTLASS = "FLASHINFER_CUTLASS"
    FLASHINFER_TRTLLM = "FLASHINFER_TRTLLM"
    VLLM_CUTLASS = "VLLM_CUTLASS"
    MARLIN = "MARLIN"


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def swizzle_blockscale(scale: st.Tensor) -> st.Tensor:
    """[.., M, K] e4m3 scale bytes zero-padded to [.., Mp, Kp] (M rounded up
    to 128, K to 4) and in 128 x 4 tiles: viewed as [.., Mp/128, 4, 32,
    Kp/4, 4], permuted (0, 1, 4, 3, 2, 5) (nvfp4_utils.py at 4159f5b)."""
    *lead, m, k = scale.shape
    mp, kp = _round_up(m, 128), _round_up(k, 4)
    raw = scale.raw()
    batches = len(raw) // (m * k)
    out = bytearray(batches * mp * kp)
    at = 0
    for b in range(batches):
        for mt in range(mp // 128):
            for kt in range(kp // 4):
                for r32 in range(32):
                    for r4 in range(4):
                        row = mt * 128 + r4 * 32 + r32
                        for c in range(4):
                            if row < m and kt * 4 + c < k:
                                out[at + c] = raw[(b * m + row) * k + kt * 4 + c]
                        at += 4
    t = st.Tensor((*lead, mp, kp), scale.dtype)
    t._mem[:len(out)] = bytes(out)
    return t


def pad_nvfp4_weight_for_cutlass(weight: st.Tensor) -> st.Tensor:
    """[N, K/2] packed codes zero-padded to multiples of 32 rows and 32 codes
    (nvfp4_utils.py at 4159f5b)."""
    n, kb = weight.shape
    np_, kbp = _round_up(n, 32), _round_up(2 * kb, 32) // 2
    if (np_, kbp) == (n, kb):
        return weight
    raw = weight.raw()
    out = bytearray(np_ * kbp)
    for r in range(n):
        out[r * kbp:r * kbp + kb] = raw[r * kb:(r + 1) * kb]
    t = st.Tensor((np_, kbp), weight.dtype)
    t._mem[:len(out)] = bytes(out)
    return t


class EmulationNvFp4LinearKernel:
    """kernels/linear/nvfp4/emulation.py: reads the checkpoint layout."""

    def process_weights_after_loading(self, layer: st.Layer) -> None:
        pass


class CutlassNvFp4LinearKernel:
    """kernels/linear/nvfp4/cutlass.py: pads the weight and swizzles weight_scale
    (prepare_weights_for_nvfp4_cutlass)."""

    def process_weights_after_loading(self, layer: st.Layer) -> None:
        layer.weight = pad_nvfp4_weight_for_cutlass(layer.weight)
        layer.weight_scale = swizzle_blockscale(layer.weight_scale)


class MarlinNvFp4LinearKernel:
    """Marlin repacks the weights (refit refuses it by name)."""

    def process_weights_after_loading(self, layer: st.Layer) -> None:
        pass


class ModelOptNvFp4LinearMethod:
    def __init__(self, kernel: object) -> None:
        self.kernel = kernel

    def create_weights(self, layer: st.Layer, input_size_per_partition: int,
                       output_partition_sizes: List[int]) -> None:
        n, k = sum(output_partition_sizes), input_size_per_partition
        if k % 16:
            raise ValueError("Unsupported model when in features size is not multiple of 16")
        parts = len(output_partition_sizes)
        layer.logical_widths = output_partition_sizes
        layer.register_parameter("weight", st.Tensor([n, k // 2], st.uint8))
        layer.register_parameter("input_scale", st.Tensor([parts], st.float32))
        layer.register_parameter("weight_scale_2", st.Tensor([parts], st.float32))
        layer.register_parameter("weight_scale", st.Tensor([n, k // 16], st.float8_e4m3fn))

    def process_weights_after_loading(self, layer: st.Layer) -> None:
        layer.input_global_scale = layer.input_scale.max()
        del layer.input_scale
        layer.weight_global_scale = layer.weight_scale_2.max()
        del layer.weight_scale_2
        layer.alpha = layer.input_global_scale * layer.weight_global_scale
        layer.input_global_scale_inv = st.Tensor.f32(
            [1.0 / layer.input_global_scale.values()[0]], ())
        self.kernel.process_weights_after_loading(layer)


class ModelOptNvFp4W4A16LinearMethod(ModelOptNvFp4LinearMethod):
    """W4A16 NVFP4 checkpoints: Marlin only."""

    def __init__(self) -> None:
        super().__init__(MarlinNvFp4LinearKernel())


class FlashInferExperts:
    def process_weights_after_loading(self, layer: st.Layer) -> None:
        layer.w13_weight_scale_2.mul_(layer.w13_input_scale)
        layer.w2_weight_scale_2.mul_(layer.w2_input_scale)


class NvFp4EmulationExperts:
    def process_weights_after_loading(self, layer: st.Layer) -> None:
        pass


class ModelOptNvFp4FusedMoE:
    def __init__(self, backend: NvFp4MoeBackend) -> None:
        self.nvfp4_backend = backend
        self.moe_quant_config = None
        self.moe_kernel = None

    def create_weights(self, layer: st.Layer, num_experts: int, hidden_size: int,
                       intermediate_size_per_partition: int) -> None:
        e, h, i = num_experts, hidden_size, intermediate_size_per_partition
        u8, f8, f32 = st.uint8, st.float8_e4m3fn, st.float32
        layer.register_parameter("w13_weight", st.Tensor([e, 2 * i, h // 2], u8))
        layer.register_parameter("w2_weight", st.Tensor([e, h, i // 2], u8))
        layer.register_parameter("w13_weight_scale", st.Tensor([e, 2 * i, h // 16], f8))
        layer.register_parameter("w2_weight_scale", st.Tensor([e, h, i // 16], f8))
        layer.register_parameter("w13_weight_scale_2", st.Tensor([e, 2], f32))
        layer.register_parameter("w2_weight_scale_2", st.Tensor([e], f32))
        layer.register_parameter("w13_input_scale", st.Tensor([e, 2], f32))
        layer.register_parameter("w2_input_scale", st.Tensor([e], f32))

    def process_weights_after_loading(self, layer: st.Layer) -> None:
        e = layer.w13_weight.shape[0]
        ws2 = layer.w13_weight_scale_2.values()
        layer.w13_weight_scale_2 = st.Tensor.f32(ws2[0::2], [e])
        a13 = layer.w13_input_scale.values()
        layer.w13_input_scale = st.Tensor.f32([max(a13[2 * x:2 * x + 2]) for x in range(e)], [e])
        fi = self.nvfp4_backend == NvFp4MoeBackend.FLASHINFER_CUTLASS
        if fi:
            layer.w13_weight_scale = swizzle_blockscale(layer.w13_weight_scale)
            layer.w2_weight_scale = swizzle_blockscale(layer.w2_weight_scale)
        self.moe_quant_config = types.SimpleNamespace(
            g1_alphas=layer.w13_weight_scale_2, g2_alphas=layer.w2_weight_scale_2,
            w1_scale=layer.w13_weight_scale, w2_scale=layer.w2_weight_scale)
        experts = FlashInferExperts() if fi else NvFp4EmulationExperts()
        self.moe_kernel = types.SimpleNamespace(fused_experts=experts)
        experts.process_weights_after_loading(layer)
