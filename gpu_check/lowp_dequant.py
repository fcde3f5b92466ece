"""Reading MXFP8 and NVFP4 engine tensors back to values, for fused_qwen3's
forward and its weight check: what a kernel computes with, stated from vLLM's
parameters after loading (vllm-project/vllm, read 2026-11-26):

- MXFP8 (``quant=mxfp8``; quantization/mxfp8.py at 2aa8028,
  Mxfp8OnlineLinearMethod / Mxfp8OnlineMoEMethod): ``weight`` e4m3 [.., N, K],
  ``weight_scale`` uint8 [.., N, K/32], one E8M0 exponent per 1x32 block
  along K; value = e4m3 x 2^(byte - 127) (byte 255 is NaN).
- NVFP4 (``quant=nvfp4``; quantization/modelopt.py at 00155cd,
  ModelOptNvFp4LinearMethod / ModelOptNvFp4FusedMoE): ``weight`` uint8
  [.., N, K/2], two E2M1 codes a byte, the even element in the low nibble
  (ModelOptNvFp4EmbeddingMethod.embedding unpacks ``low`` first);
  ``weight_scale`` e4m3 [.., N, K/16], one per 1x16 block; a global scale
  per parameter, ``weight_global_scale`` (dense, ModelOpt's weight_scale_2
  renamed by process_weights_after_loading) or ``w13_weight_scale_2`` /
  ``w2_weight_scale_2`` [E] (experts); value = E2M1 x block scale x global
  scale. vLLM's online NVFP4 (``recipe=vllm``, quantization/online/nvfp4.py
  at 0136201, Nvfp4OnlineMoEMethod) holds its experts the same way before
  its backend's conversion: ``w13_weight_scale_2`` / ``w2_weight_scale_2``
  [E] are 1 / its global scale, the same factor; its other weights stay in
  the model dtype. Under ``kernel=flashinfer`` the block scales are in the
  128 x 4 tiles of vLLM's swizzle_blockscale (quantization/utils/nvfp4_utils.py):
  [M, K/16] viewed as [M/128, 4, 32, K/64, 4] and permuted (0, 1, 4, 3, 2,
  5); that permutation is its own inverse, so :func:`unswizzle` applies it
  to the tiled view.

Only torch; float8 tensors may be given as their uint8 bytes (torch < 2.1).
"""

from typing import Dict, Optional, Tuple

import torch

from e4m3 import e4m3_values

MX_BLOCK = 32
NV_BLOCK = 16
# E2M1 magnitudes by the code's low three bits; bit 3 is the sign.
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# Suffixes of the tensors that scale a weight ``X`` (``X`` + suffix).
AUX_SUFFIXES = ("_scale_inv", "_global_scale", "_scale_2", "_scale")


def e4m3(q: torch.Tensor) -> torch.Tensor:
    """float32 values of e4m3 numbers (float8_e4m3fn, or their uint8 bytes)."""
    return e4m3_values(q)


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.uint8 else t.view(torch.uint8)


def e8m0(b: torch.Tensor) -> torch.Tensor:
    """float32 2^(byte - 127) of E8M0 bytes, exactly (2^-127 is an f32
    subnormal; computed in float64), NaN for byte 255."""
    v = torch.pow(torch.tensor(2.0, dtype=torch.float64, device=b.device),
                  _bytes(b).to(torch.float64) - 127.0).float()
    return torch.where(_bytes(b) == 255, torch.full_like(v, float("nan")), v)


def e2m1_unpack(packed: torch.Tensor) -> torch.Tensor:
    """float32 values [.., 2 * K/2] of packed E2M1 bytes [.., K/2]: the low
    nibble is the even element."""
    lut = torch.tensor(E2M1 + tuple(-v for v in E2M1), device=packed.device)
    b = packed.to(torch.int64)
    codes = torch.stack([b & 0xF, b >> 4], dim=-1).reshape(*packed.shape[:-1], -1)
    return lut[codes]


def unswizzle(scale: torch.Tensor) -> torch.Tensor:
    """Block scales [.., M, K/16] in the row-major layout from vLLM's
    swizzled 128 x 4 tiles. Raises ValueError when M is not a multiple of
    128 or K/16 of 4 (refit refuses buffers that would need vLLM's padding)."""
    *lead, m, k = scale.shape
    if m % 128 or k % 4:
        raise ValueError(f"swizzled scales [{m}, {k}]: rows must be a multiple of 128 and "
                         f"columns of 4")
    b = _bytes(scale).reshape(-1, m // 128, k // 4, 32, 4, 4)
    out = b.permute(0, 1, 4, 3, 2, 5).reshape(*lead, m, k).contiguous()
    return out if scale.dtype == torch.uint8 else out.view(scale.dtype)


def aux_of(name: str, engine: Dict[str, torch.Tensor]) -> Optional[str]:
    """The weight that engine tensor ``name`` scales (its block, global or
    FP8 scale), or None when ``name`` is a weight itself."""
    for suffix in AUX_SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in engine:
            return name[: -len(suffix)]
    return None


def format_of(name: str, engine: Dict[str, torch.Tensor]) -> Optional[str]:
    """"fp8" (weight_scale_inv), "nvfp4" (a block scale and a global scale),
    "mxfp8" (a block scale alone) or None for a weight held as it is."""
    if name + "_scale_inv" in engine:
        return "fp8"
    if name + "_scale" not in engine:
        return None
    return "nvfp4" if global_scale(name, engine) is not None else "mxfp8"


def global_scale(name: str, engine: Dict[str, torch.Tensor]) -> Optional[torch.Tensor]:
    """The NVFP4 global scale of weight ``name``: ``X.weight_global_scale``
    for a dense ``X.weight``, ``..._weight_scale_2`` [E] for experts."""
    for suffix in ("_global_scale", "_scale_2"):
        if name + suffix in engine:
            return engine[name + suffix]
    return None


def block_units(name: str, engine: Dict[str, torch.Tensor], kernel: Optional[str]
                ) -> Tuple[torch.Tensor, torch.Tensor]:
    """(codes' values, unit per element) of a low-precision weight: the
    weight is their product. MXFP8: e4m3 values and 2^(e - 127); NVFP4: E2M1
    values and block scale x global scale (block scales unswizzled under
    kernel "flashinfer"). Raises ValueError naming the tensor when the
    scale grid does not fit the weight."""
    w, s = engine[name], engine[name + "_scale"]
    fmt = format_of(name, engine)
    if fmt == "mxfp8":
        vals, unit, block = e4m3(w), e8m0(s), MX_BLOCK
    else:
        if kernel == "flashinfer":
            s = unswizzle(s)
        g = global_scale(name, engine).float()
        vals, block = e2m1_unpack(_bytes(w)), NV_BLOCK
        unit = e4m3(s) * g.reshape(*g.shape, *([1] * (s.dim() - g.dim())))
    if tuple(s.shape[:-1]) != tuple(vals.shape[:-1]) or s.shape[-1] * block != vals.shape[-1]:
        raise ValueError(f"{name}_scale: shape {list(s.shape)} does not hold 1x{block} "
                         f"blocks of {list(vals.shape)}")
    return vals, unit.repeat_interleave(block, dim=-1)


def dequantize(name: str, engine: Dict[str, torch.Tensor], kernel: Optional[str]
               ) -> torch.Tensor:
    """float32 value of a low-precision weight, as its kernels read it."""
    vals, unit = block_units(name, engine, kernel)
    return vals * unit


def rounding_bound(fmt: str, want: torch.Tensor, unit: torch.Tensor) -> torch.Tensor:
    """Per element, how far a weight dequantized from format ``fmt``
    ("mxfp8", "nvfp4") may be from the float32 value ``want`` it was
    quantized from, given its ``unit`` (block_units): MXFP8 half an e4m3
    step, |w| 2^-4 + unit 2^-10 (subnormals), plus the clamp at 448 units;
    NVFP4 half an E2M1 step, |w| / 4 + unit / 4 (the grid 0, 0.5, 1, 1.5,
    2, 3, 4, 6 in units), plus what saturation at 6 units cuts off (a block
    scale rounded down to e4m3 puts the block's amax above 6 units)."""
    a = want.abs()
    if fmt == "mxfp8":
        return a * 2.0 ** -4 + unit * 2.0 ** -10 + (a - 448 * unit).clamp(min=0)
    return a * 0.25 + unit * 0.25 + (a - 6 * unit).clamp(min=0)
