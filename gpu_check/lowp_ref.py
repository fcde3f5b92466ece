"""What a vLLM TP1 engine holds for ``quant=mxfp8`` and ``quant=nvfp4`` after
loading the same weights, stated in torch from vLLM's and ModelOpt's
source, independently of refit: kernel_layouts_ref.check_exact compares
every engine tensor with it, bit for bit.

Which layers are quantized: vLLM's MXFP8 and ModelOpt methods quantize
linear layers (``get_quant_method`` returns their linear method for
LinearBase layers, their MoE method for the experts): Qwen3's qkv_proj,
o_proj, gate_up_proj, down_proj and the experts' w13 / w2. Embeddings,
lm_head (ParallelLMHead is not a LinearBase; ModelOpt checkpoints exclude
it), norms and Qwen3-MoE's router gate (a ReplicatedLinear built without a
quant config) stay in the model dtype.

- MXFP8 (vllm-project/vllm quantization/mxfp8.py at 2aa8028, the online
  method quantizing BF16 weights at load; _mxfp8_e4m3_quantize_torch in
  quantization/utils/mxfp8_utils.py, the version computing
  ceil(log2(amax / 448))): per block of 32 along K, amax clamped to the
  smallest normal f32, exponent e = clamp(ceil(log2(amax / 448)) + 127, 0,
  254) in ``weight_scale`` (uint8), codes e4m3(x / 2^(e - 127)).
- NVFP4 (quantization/modelopt.py at 00155cd: ModelOptNvFp4LinearMethod
  renames weight_scale_2 to ``weight_global_scale``, max over the fused
  parts; ModelOptNvFp4FusedMoE keeps ``w13_weight_scale_2[:, 0]`` per
  expert; the bytes are ModelOpt's NVFP4QTensor, NVIDIA/Model-Optimizer
  modelopt/torch/quantization/qtensor/nvfp4_tensor.py at 211c6b3): global
  g = amax / (6 * 448) over all fused parts (per expert for experts; on
  CUDA torch computes a division by a Python scalar as a product with its
  f32 reciprocal, which is what is written here); block scale s =
  block_amax / (6 g), 1 for an all-zero block, at least 2^-9, cast to e4m3;
  codes _cast_fp4(x / (s g)) packed two a byte, even element in the low
  nibble.
- ``kernel=flashinfer`` with NVFP4 (prepare_nvfp4_moe_layer_for_fi_or_cutlass
  and the CUTLASS / FlashInfer linear kernels): experts' w13 as [up; gate],
  and every block scale matrix (per expert) swizzled as swizzle_blockscale
  (quantization/utils/nvfp4_utils.py at 0b70ce1): [M, K/16] viewed as
  [M/128, 4, 32, K/64, 4], permuted (0, 1, 4, 3, 2, 5).
- NVFP4 of vLLM's online recipe (``recipe=vllm``: Nvfp4OnlineMoEMethod,
  quantization/online/nvfp4.py at 0136201, the routed experts alone; every
  other weight stays in the model dtype): per expert, the bytes of
  nvfp4_vllm_check.quantize (that script's statement of the recipe: global
  (6 * 448) / amax as torch evaluates it, FlashInfer's block quantizer with
  rcp.approx.ftz.f32, through Triton, on a GPU, and the correctly rounded
  reciprocal on a CPU, as refit's converters do), and ``weight_scale_2``
  1 / global as vLLM computes it.
"""

from typing import Dict, List, Optional, Tuple

import torch

from e4m3 import FP8, e4m3_values, to_fp8

QUANTIZED = (".qkv_proj.weight", ".o_proj.weight", ".gate_up_proj.weight",
             ".down_proj.weight", ".experts.w13_weight", ".experts.w2_weight")
F32_TINY = torch.finfo(torch.float32).tiny


def quantized(name: str, recipe: Optional[str] = None) -> bool:
    """Whether vLLM's MXFP8 / NVFP4 methods quantize engine tensor ``name``
    (under NVFP4 ``recipe`` "vllm": the routed experts alone)."""
    return name.endswith(QUANTIZED[-2:] if recipe == "vllm" else QUANTIZED)


def _e4m3_bytes(x: torch.Tensor) -> torch.Tensor:
    """e4m3 bytes of float32 x (|x| <= 448), torch's float8_e4m3fn cast
    where torch has it, else e4m3.to_fp8's round to nearest even."""
    q = to_fp8(x)
    return q.view(torch.uint8) if q.dtype != torch.uint8 else q


def _e4m3_float(b: torch.Tensor) -> torch.Tensor:
    """float32 values of e4m3 bytes: torch's float8_e4m3fn reading where
    torch has it, else e4m3's decoding."""
    if FP8 is not None:
        return b.view(FP8).float()
    return e4m3_values(b)


def mxfp8(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 bytes [.., N, K], E8M0 bytes [.., N, K/32]) of x."""
    x = x.float()
    b = x.reshape(*x.shape[:-1], x.shape[-1] // 32, 32)
    amax = b.abs().amax(dim=-1).clamp(min=F32_TINY)
    e = (torch.ceil(torch.log2(amax / 448.0)) + 127.0).clamp(0, 254)
    descale = torch.pow(torch.tensor(2.0, dtype=torch.float64, device=x.device),
                        e.double() - 127.0).float()
    codes = _e4m3_bytes(b / descale.unsqueeze(-1)).reshape(x.shape)
    return codes, e.to(torch.uint8)


def cast_fp4(y: torch.Tensor) -> torch.Tensor:
    """ModelOpt's _cast_fp4 (codes 0..15): the E2M1 ordinal by searchsorted
    over the midpoints, a tie on an odd midpoint rounds up (to the even
    code), sign in bit 3; saturates at 6."""
    bounds = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], device=y.device)
    a = y.abs()
    ordinal = torch.searchsorted(bounds, a.contiguous(), out_int32=True).to(torch.uint8)
    up = torch.any(a.unsqueeze(-1) == bounds[[1, 3, 5]], dim=-1).to(torch.uint8)
    return ((y < 0).to(torch.uint8) << 3) + ordinal + up


def nvfp4_global(amax: torch.Tensor) -> torch.Tensor:
    """ModelOpt's amax / (6 * 448) as torch evaluates it on CUDA."""
    return amax.float() * torch.tensor(1.0 / 2688.0, dtype=torch.float32, device=amax.device)


def nvfp4(x: torch.Tensor, g: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(packed E2M1 bytes [N, K/2], e4m3 scale bytes [N, K/16]) of one
    matrix x under global scale g (a 0-d f32 tensor)."""
    x = x.float()
    b = x.reshape(x.shape[0], x.shape[1] // 16, 16)
    s = b.abs().amax(dim=-1) / (6.0 * g)
    s = torch.where(s == 0, torch.ones_like(s), s).clamp(min=2.0 ** -9)
    sb = _e4m3_bytes(s)
    y = b / (_e4m3_float(sb) * g).unsqueeze(-1)
    q = cast_fp4(y).reshape(x.shape)
    return (q[:, 1::2] << 4) | q[:, 0::2], sb


_RCP = {}


def nvfp4_vllm(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(packed E2M1 bytes [N, K/2], e4m3 scale bytes [N, K/16],
    weight_scale_2) of one expert x (BF16 values) under vLLM's online
    recipe. Raises RuntimeError without torch.float8_e4m3fn (torch < 2.1)
    or on a GPU without Triton (no statement of rcp.approx.ftz.f32)."""
    if FP8 is None:
        raise RuntimeError("recipe=vllm: nvfp4_vllm_check needs torch.float8_e4m3fn "
                           "(torch 2.1 or later)")
    import nvfp4_vllm_check as vc
    if x.device.type == "cuda" and "cuda" not in _RCP:
        _RCP["cuda"] = vc.make_rcp_approx()
        if _RCP["cuda"] is None:
            raise RuntimeError("recipe=vllm on a GPU: no Triton to state rcp.approx.ftz.f32")
    codes, sb, g = vc.quantize(x, _RCP.get(x.device.type, vc.rcp_model))
    return (codes[:, 1::2] << 4) | codes[:, 0::2], sb, 1.0 / g


def swizzle(s: torch.Tensor) -> torch.Tensor:
    """vLLM's swizzle_blockscale of one [M, K/16] matrix (M a multiple of
    128, K/16 of 4: refit refuses buffers that would need its padding)."""
    m, k = s.shape
    return s.reshape(m // 128, 4, 32, k // 4, 4).permute(0, 3, 2, 1, 4).reshape(m, k)


def expected(matrices: List[List[torch.Tensor]], quant: str, kernel: Optional[str],
             stacked: bool, recipe: Optional[str] = None) -> Dict[str, torch.Tensor]:
    """What vLLM holds for one quantized engine tensor whose matrices (one,
    or one per expert) concatenate the rows of the given trainer tensors:
    {"weight", "scale"} as uint8 bytes, and for NVFP4 "global" (f32, [] or
    [E]; ``recipe`` "vllm": vLLM's online recipe, weight_scale_2)."""
    ws, ss, gs = [], [], []
    for parts in matrices:
        x = torch.cat([p.float() for p in parts])
        if quant == "mxfp8":
            q, s = mxfp8(x)
        elif recipe == "vllm":
            q, s, g = nvfp4_vllm(x)
            gs.append(g)
        else:
            g = nvfp4_global(torch.stack([p.float().abs().max() for p in parts]).max())
            q, s = nvfp4(x, g)
            if kernel == "flashinfer":
                s = swizzle(s)
            gs.append(g)
        ws.append(q)
        ss.append(s)
    pick = (lambda t: torch.stack(t)) if stacked else (lambda t: t[0])
    out = {"weight": pick(ws), "scale": pick(ss)}
    if quant == "nvfp4":
        out["global"] = pick(gs)
    return out


def self_check() -> int:
    """On any device: lowp_dequant reads back what this quantizes, within
    its rounding bound, for MXFP8 and NVFP4 (swizzled too, and vLLM's
    online recipe); every E2M1
    code's midpoint ties round to the even code; swizzling moves bytes and
    unswizzle undoes it. Returns 0 when all hold."""
    import lowp_dequant as lowp
    torch.manual_seed(0)
    x = torch.randn(256, 128) * 0.02
    x[3, :16] = 0  # an all-zero block
    ok = True
    q, s = mxfp8(x)
    eng = {"w": q, "w_scale": s}
    vals, unit = lowp.block_units("w", eng, None)
    ok &= bool(((vals * unit - x).abs() <= lowp.rounding_bound("mxfp8", x, unit)).all())
    g = nvfp4_global(x.abs().max())
    q, s = nvfp4(x, g)
    for kernel, scale in ((None, s), ("flashinfer", swizzle(s))):
        eng = {"w": q, "w_scale": scale, "w_global_scale": g}
        vals, unit = lowp.block_units("w", eng, kernel)
        ok &= bool(((vals * unit - x).abs() <= lowp.rounding_bound("nvfp4", x, unit)).all())
    ok &= not torch.equal(swizzle(s), s) and torch.equal(lowp.unswizzle(swizzle(s)), s)
    if FP8 is not None:  # vLLM's online recipe (BF16 experts)
        xb = x.bfloat16().float()
        q, s, g2 = nvfp4_vllm(xb)
        eng = {"w": q, "w_scale": s, "w_scale_2": g2}
        vals, unit = lowp.block_units("w", eng, None)
        ok &= bool(((vals * unit - xb).abs() <= lowp.rounding_bound("nvfp4", xb, unit)).all())
    mids = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, -0.75])
    ok &= cast_fp4(mids).tolist() == [0, 2, 2, 4, 4, 6, 6, 7, 10]
    print(f"{'PASS' if ok else 'FAIL'}  MXFP8 / NVFP4 references: read back within their "
          f"rounding bounds (NVFP4 swizzled too, and vLLM's online recipe), E2M1 ties to "
          f"even, swizzle round trip")
    return 0 if ok else 1


if __name__ == "__main__":
    import sys
    if sys.argv[1:] != ["--self-check"]:
        print("usage: lowp_ref.py --self-check", file=sys.stderr)
        sys.exit(2)
    sys.exit(self_check())
