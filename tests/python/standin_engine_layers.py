"""Stand-ins for the parts of vLLM's and SGLang's live layers that
refit.engine_layouts reads, written from their sources (no upstream code):

vLLM: quantization/fp8.py at 1436674 (Fp8LinearMethod: use_marlin,
block_quant, weight / weight_scale_inv after loading; Fp8MoEMethod:
flashinfer_moe_backend, allow_deep_gemm, rocm_aiter_moe_enabled, w13 /
w2 weights and scales), fused_moe/oracle/fp8.py and oracle/unquantized.py
(Fp8MoeBackend / UnquantizedMoeBackend, held as fp8_backend /
unquantized_backend), kernels/linear/scaled_mm/deep_gemm.py at 104b28a
(DeepGemmFp8BlockScaledMMKernel.use_deep_gemm_e8m0), layers/attention/
mla_attention.py at 90b0a26 (process_weights_after_loading: W_UK_T and
W_UV from kv_b_proj, as views of the dequantized weight, or contiguous
copies; ROCm AITER's FP8 BMM keeps W_K / W_V with scales), and
flashinfer_utils.py at 487151d (TRTLLM per-tensor MoE registers
output1_scales_scalar).

SGLang: models/deepseek_v2.py at 3e4a39e (post_load_weights: w_kc / w_vc
from kv_b_proj, block-FP8 kv_b_proj dequantized to bf16 first).
"""

import enum
import math
from typing import Any, List, Sequence, Tuple

import standin_tensor as T


class Fp8MoeBackend(enum.Enum):
    NONE = "NONE"
    FLASHINFER_TRTLLM = "FLASHINFER_TRTLLM"
    FLASHINFER_CUTLASS = "FLASHINFER_CUTLASS"
    DEEPGEMM = "DEEPGEMM"
    MARLIN = "MARLIN"
    TRITON = "TRITON"
    AITER = "AITER"
    VLLM_CUTLASS = "VLLM_CUTLASS"
    XPU = "XPU"


class UnquantizedMoeBackend(enum.Enum):
    FLASHINFER_TRTLLM = "FlashInfer TRTLLM"
    FLASHINFER_CUTLASS = "FlashInfer CUTLASS"
    AITER = "ROCm AITER"
    TRITON = "TRITON"


class NvFp4MoeBackend(enum.Enum):
    """fused_moe/oracle/nvfp4.py at 0136201 (held as nvfp4_backend)."""
    FLASHINFER_TRTLLM = "FLASHINFER_TRTLLM"
    FLASHINFER_CUTEDSL = "FLASHINFER_CUTEDSL"
    FLASHINFER_CUTLASS = "FLASHINFER_CUTLASS"
    EMULATION = "EMULATION"


class FlashinferMoeBackend(enum.Enum):
    TENSORRT_LLM = "TensorRT-LLM"
    CUTLASS = "CUTLASS"


class DeepGemmFp8BlockScaledMMKernel:
    def __init__(self, e8m0: bool = True):
        self.use_deep_gemm_e8m0 = e8m0


class CutlassFp8BlockScaledMMKernel:
    pass


class MarlinFp8ScaledMMLinearKernel:
    pass


class AiterFp8BlockScaledMMKernel:
    pass


class Fp8LinearMethod:
    def __init__(self, block_quant: bool = True, use_marlin: bool = False, kernel: Any = None):
        self.block_quant = block_quant
        self.use_marlin = use_marlin
        self.w8a8_block_fp8_linear = kernel or CutlassFp8BlockScaledMMKernel()


class UnquantizedLinearMethod:
    pass


class Fp8MoEMethod:
    def __init__(self, block_quant: bool = True, fp8_backend: Any = None, **flags: Any):
        self.block_quant = block_quant
        if fp8_backend is not None:
            self.fp8_backend = fp8_backend
        for k, v in flags.items():
            setattr(self, k, v)


class UnquantizedFusedMoEMethod:
    def __init__(self, unquantized_backend: Any = None, **flags: Any):
        if unquantized_backend is not None:
            self.unquantized_backend = unquantized_backend
        for k, v in flags.items():
            setattr(self, k, v)


class FlashInferExperts:
    """fused_moe/flashinfer_cutlass_moe.py's experts class."""


class FusedMoEModularKernel:
    def __init__(self, fused_experts: Any):
        self.fused_experts = fused_experts


class FusedMoEModularMethod:
    """What vLLM puts in layer.quant_method once it builds a modular kernel
    (fused_moe/fused_moe_modular_method.py): the chosen method stays as
    old_quant_method."""

    def __init__(self, old_quant_method: Any, experts: Any):
        self.old_quant_method = old_quant_method
        self.moe_mk = FusedMoEModularKernel(experts)


class Layer:
    """A module with attributes: quant_method, weights, scales."""

    def __init__(self, **attrs: Any):
        for k, v in attrs.items():
            setattr(self, k, v)


class Model:
    def __init__(self, modules: Sequence[Tuple[str, Any]]):
        self._modules = list(modules)

    def named_modules(self):
        return [("", self)] + self._modules


def scales(values: Sequence[float], shape: Sequence[int]) -> T.Tensor:
    return T.Tensor.of(values, shape, T.float32)


def float_scales(n: int) -> List[float]:
    """Float block scales (amax / 448 of a trained weight: not powers of two)."""
    return [(0.7 + 0.01 * i) / 448 for i in range(n)]


def pow2_scales(n: int) -> List[float]:
    return [math.ldexp(1.0, -8 - (i % 3)) for i in range(n)]


class Mxfp8LinearBackend(enum.Enum):
    EMULATION = "emulation"
    FLASHINFER_CUTLASS = "flashinfer-cutlass"
    MARLIN = "marlin"


class Mxfp8LinearOp:
    def __init__(self, backend: Mxfp8LinearBackend) -> None:
        self.backend = backend


class Mxfp8OnlineLinearMethod:
    def __init__(self, backend: Mxfp8LinearBackend) -> None:
        self.mxfp8_linear = Mxfp8LinearOp(backend)


class Mxfp8OnlineMoEMethod:
    def __init__(self) -> None:
        self.fp8_backend = Fp8MoeBackend.FLASHINFER_TRTLLM


def mxfp8_linear(backend: Mxfp8LinearBackend, swizzled: bool = False) -> Layer:
    """A 256 x 128 MXFP8 linear: weight_scale [256, 4] uint8, or the flat
    F8_128x4 layout (256 * 4 bytes) FlashInfer's swizzle leaves."""
    shape = (256 * 4,) if swizzled else (256, 4)
    return Layer(quant_method=Mxfp8OnlineLinearMethod(backend),
                 weight=T.Tensor.of([0.0] * 256 * 128, (256, 128), T.float8_e4m3fn),
                 weight_scale=T.Tensor.of([127.0] * 256 * 4, shape, T.uint8))


def fp8_linear(scale_values: Sequence[float], **method: Any) -> Layer:
    return Layer(quant_method=Fp8LinearMethod(**method),
                 weight=T.Tensor.of([0.0] * 256 * 128, (256, 128), T.float8_e4m3fn),
                 weight_scale_inv=scales(scale_values, (2, 1)))


def fp8_moe(scale_values: Sequence[float], method: Any, per_tensor: bool = False) -> Layer:
    w13 = T.Tensor.of([0.0] * 2 * 256 * 128, (2, 256, 128), T.float8_e4m3fn)
    if per_tensor:
        return Layer(quant_method=method, w13_weight=w13,
                     w13_weight_scale=scales([0.01, 0.02, 0.03, 0.04], (2, 2)))
    return Layer(quant_method=method, w13_weight=w13,
                 w13_weight_scale_inv=scales(scale_values, (2, 2, 1)))


def bf16_moe(method: Any) -> Layer:
    return Layer(quant_method=method,
                 w13_weight=T.Tensor.of([0.0] * 2 * 8 * 4, (2, 8, 4), T.bfloat16))


# --- MLA ---------------------------------------------------------------------

class Linear:
    def __init__(self, weight: T.Tensor, scale: T.Tensor = None):
        self.weight = weight
        if scale is not None:
            self.weight_scale_inv = scale
        self.quant_method = Fp8LinearMethod() if scale is not None else UnquantizedLinearMethod()


def dequant(proj: Linear, dtype: T.DType) -> T.Tensor:
    """Block-FP8 codes times their 128x128 scales in f32, rounded to dtype."""
    w = proj.weight
    if not w.dtype.name.startswith("float8"):
        return w
    s = proj.weight_scale_inv
    rows, cols = w.shape
    full = s.repeat_interleave(128, 0)[:rows].repeat_interleave(128, 1)[:, :cols]
    return (w.to(T.float32) * full).to(dtype)


class VllmMLAImpl:
    """MLACommonImpl's derived tensors."""

    def __init__(self, kv_b_proj: Linear, heads: int, lora: int, nope: int, v: int,
                 contiguous: bool):
        self.kv_b_proj = kv_b_proj
        self.num_heads, self.kv_lora_rank = heads, lora
        self.qk_nope_head_dim, self.v_head_dim = nope, v
        self.contiguous = contiguous

    def process_weights_after_loading(self, act_dtype: T.DType) -> None:
        w = dequant(self.kv_b_proj, act_dtype).T
        w = w.view(self.kv_lora_rank, self.num_heads, self.qk_nope_head_dim + self.v_head_dim)
        w_uk, w_uv = w.split([self.qk_nope_head_dim, self.v_head_dim], dim=-1)
        self.W_UV = w_uv.transpose(0, 1)
        self.W_UK_T = w_uk.permute(1, 2, 0)
        if self.contiguous:
            self.W_UV = self.W_UV.contiguous()
            self.W_UK_T = self.W_UK_T.contiguous()


class VllmMLAAttention:
    """The attention layer: vLLM keeps the impl (with the derived tensors)
    as ``impl``."""

    def __init__(self, impl: VllmMLAImpl):
        self.impl = impl


class SglangMLA:
    """DeepseekV2AttentionMLA's w_kc / w_vc."""

    def __init__(self, kv_b_proj: Linear, heads: int, lora: int, nope: int, v: int):
        self.kv_b_proj = kv_b_proj
        self.num_local_heads, self.kv_lora_rank = heads, lora
        self.qk_nope_head_dim, self.v_head_dim = nope, v
        self.w_kc = self.w_vc = None
        self.w_scale = None

    def post_load_weights(self) -> None:
        w = dequant(self.kv_b_proj, T.bfloat16)
        w_kc, w_vc = w.unflatten(0, (-1, self.qk_nope_head_dim + self.v_head_dim)).split(
            [self.qk_nope_head_dim, self.v_head_dim], dim=1)
        self.w_kc = w_kc.transpose(1, 2).contiguous().transpose(1, 2)
        self.w_vc = w_vc.contiguous().transpose(1, 2)
