"""What a vLLM TP1 engine holds, after loading and post-processing, for the
kernel layouts refit writes (engine spec kernel=), stated in torch from
vLLM's source, independently of refit: the reference rl_loop_gpu.py checks
every engine tensor against, bit for bit.

- the checkpoint layout: qkv_proj = [q; k; v], gate_up_proj = [gate; up],
  experts.w13_weight[e] = [gate_e; up_e], experts.w2_weight[e] = down_e;
- kernel=flashinfer (FlashInfer CUTLASS fused MoE): w13_weight[e] =
  [up_e; gate_e] and its block scales alike (swap_w13_to_w31 in
  prepare_fp8_moe_layer_for_fi, vllm/model_executor/layers/quantization/
  utils/flashinfer_utils.py at 487151d; vLLM main also clamps the experts'
  block scales to at least 1e-10);
- FP8 (quant=fp8): each logical weight quantized in 128x128 tiles (the
  FP8 checkpoint refit writes, quantize_checkpoint),
  fused by concatenating codes and scale rows;
- kernel=deepgemm (DeepGEMM on SM90, VLLM_USE_DEEP_GEMM_E8M0=1): every FP8
  weight dequantized in f32 and requantized as vLLM's
  requant_weight_ue8m0_inplace does (fp8_utils.py at 364d019, calling
  per_block_cast_to_fp8(use_ue8m0=True), utils/deep_gemm.py at 779d1fc):
  amax of the dequantized tile clamped to 1e-4, / 448, rounded up as
  2^ceil(log2(.)), codes (d * (1 / sf)).to(float8_e4m3fn); the f32 scales
  stay row-major [ceil(N/128), ceil(K/128)] (DeepGEMM 2f98946,
  transform_sf_into_required_layout keeps FP32 128x128 weight scales on
  SM90).

SGLang holds the same bytes for the checkpoint layout, and for BF16
experts loaded for FlashInfer CUTLASS (load_up_proj_weight_first) the same
[up; gate] order: rl_loop_gpu.py's SGLang rows are checked against this
reference too.

  python3 kernel_layouts_ref.py --self-check    (torch, any device)
"""

import sys
from typing import Dict, List, Optional, Tuple

import torch

from e4m3 import FP8, e4m3_values, to_fp8

BLOCK = 128
SCALE = "_scale_inv"
def quantize_checkpoint(w: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """The block-FP8 checkpoint of w, as refit quantizes (exec/convert/quantize.h):
    scale = max(amax, 1e-4) / 448, codes e4m3(clamp(x * (1 / scale))), by
    tensor divisions (IEEE); (codes, f32 scales)."""
    x = w.float()
    rows, cols = x.shape[-2], x.shape[-1]
    tr, tc = -(-rows // BLOCK), -(-cols // BLOCK)
    pad = torch.zeros(*x.shape[:-2], tr * BLOCK, tc * BLOCK, device=x.device)
    pad[..., :rows, :cols] = x.abs()
    amax = pad.reshape(*x.shape[:-2], tr, BLOCK, tc, BLOCK).amax(dim=(-3, -1))
    scale = amax.clamp(min=1e-4) / torch.full_like(amax, 448.0)
    inv = torch.ones_like(scale) / scale
    inv_e = inv.repeat_interleave(BLOCK, -2).repeat_interleave(BLOCK, -1)[..., :rows, :cols]
    return to_fp8((x * inv_e).clamp(-448.0, 448.0)), scale


def requant_ue8m0(q: torch.Tensor, s: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """vLLM's UE8M0 requantization of block-FP8 (q, s), per matrix."""
    rows, cols = q.shape[-2], q.shape[-1]
    grid = s.float().repeat_interleave(BLOCK, -2).repeat_interleave(BLOCK, -1)[..., :rows, :cols]
    d = e4m3_values(q) * grid
    tr, tc = s.shape[-2], s.shape[-1]
    pad = torch.zeros(*d.shape[:-2], tr * BLOCK, tc * BLOCK, device=d.device)
    pad[..., :rows, :cols] = d
    amax = pad.abs().reshape(*d.shape[:-2], tr, BLOCK, tc, BLOCK).amax(dim=(-3, -1))
    sf = amax.clamp(min=1e-4) / 448.0
    sf = torch.pow(2.0, torch.ceil(torch.log2(sf.abs())))
    inv = (1.0 / sf).repeat_interleave(BLOCK, -2).repeat_interleave(BLOCK, -1)[..., :rows, :cols]
    return to_fp8(d * inv), sf


def _parts(name: str, trainer: Dict[str, torch.Tensor], kernel: Optional[str]
           ) -> Optional[List[List[str]]]:
    """Per matrix of engine tensor `name` (one, or one per expert), the HF
    tensors whose rows it concatenates; None for a tensor held as it is."""
    for fused, parts in ((".qkv_proj.", ("q_proj", "k_proj", "v_proj")),
                         (".gate_up_proj.", ("gate_proj", "up_proj"))):
        if fused in name:
            return [[name.replace(fused, f".{p}.") for p in parts]]
    for fused, parts in ((".experts.w13_weight", ("gate_proj", "up_proj")),
                         (".experts.w2_weight", ("down_proj",))):
        if name.endswith(fused):
            if kernel == "flashinfer" and len(parts) == 2:
                parts = ("up_proj", "gate_proj")  # w31
            base = name[: -len(fused)] + ".experts."
            out, e = [], 0
            while f"{base}{e}.{parts[0]}.weight" in trainer:
                out.append([f"{base}{e}.{p}.weight" for p in parts])
                e += 1
            return out
    return None


def expected(name: str, trainer: Dict[str, torch.Tensor], fp8: bool,
             kernel: Optional[str]) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """(weight, scale or None) vLLM holds for engine tensor `name`."""
    parts = _parts(name, trainer, kernel)
    if parts is None:
        if not fp8:
            return trainer[name], None
        parts = [[name]]
    qs, ss, ws = [], [], []
    for matrix in parts:
        if not fp8:
            ws.append(torch.cat([trainer[p] for p in matrix]))
            continue
        cq, cs = zip(*(quantize_checkpoint(trainer[p]) for p in matrix))
        q, s = _fp8(torch.cat([_bytes(c) for c in cq])), torch.cat(cs)
        if kernel == "deepgemm":
            q, s = requant_ue8m0(q, s)
        if kernel == "flashinfer" and ".experts.w" in name:
            s = s.clamp(min=1e-10)  # prepare_fp8_moe_layer_for_fi, vLLM main
        qs.append(q)
        ss.append(s)
    stacked = ".experts.w" in name
    if not fp8:
        return (torch.stack(ws) if stacked else ws[0]), None
    if stacked:
        return _fp8(torch.stack([_bytes(q) for q in qs])), torch.stack(ss)
    return qs[0], ss[0]


def _bytes(q: torch.Tensor) -> torch.Tensor:
    return q.view(torch.uint8) if q.dtype == FP8 else q


def _fp8(b: torch.Tensor) -> torch.Tensor:
    """uint8 bytes as float8_e4m3fn (cat / stack run on the bytes)."""
    return b.view(FP8) if FP8 is not None else b


def _lowp_pairs(name: str, engine: Dict[str, torch.Tensor], trainer: Dict[str, torch.Tensor],
                quant: str, kernel: Optional[str], recipe: Optional[str]
                ) -> List[Tuple[str, torch.Tensor, torch.Tensor]]:
    """(what, engine tensor, expected) of a tensor under quant=mxfp8 /
    quant=nvfp4 (lowp_ref; NVFP4 of ``recipe``): the weight, its block
    scales and, for NVFP4, its global scale, or the BF16 tensor as it is
    where vLLM does not quantize."""
    import lowp_ref
    parts = _parts(name, trainer, kernel) or [[name]]
    if not lowp_ref.quantized(name, recipe):
        want = torch.stack([torch.cat([trainer[p] for p in m]) for m in parts]) \
            if ".experts.w" in name else torch.cat([trainer[p] for p in parts[0]])
        return [(name, engine[name], want)]
    want = lowp_ref.expected([[trainer[p] for p in m] for m in parts], quant, kernel,
                             ".experts.w" in name, recipe)
    out = [(name, engine[name], want["weight"]),
           (name + "_scale", engine.get(name + "_scale"), want["scale"])]
    if quant == "nvfp4":
        g = name + ("_scale_2" if ".experts.w" in name else "_global_scale")
        out.append((g, engine.get(g), want["global"]))
    return out


def check_exact(engine: Dict[str, torch.Tensor], trainer: Dict[str, torch.Tensor],
                quant: Optional[str], kernel: Optional[str], recipe: Optional[str] = None
                ) -> Tuple[List[str], int]:
    """(problems, tensors checked): every engine tensor (and its scales)
    against what vLLM holds (`expected`; lowp_ref for ``quant`` "mxfp8" and
    "nvfp4", NVFP4 of ``recipe`` "vllm": vLLM's online recipe; True stands
    for "fp8"), bit for bit; rows beyond the trainer's
    (vocabulary padding) are not compared."""
    import lowp_dequant
    quant = "fp8" if quant is True else (quant or None)
    problems, n = [], 0
    for name, got in engine.items():
        if lowp_dequant.aux_of(name, engine) is not None:
            continue
        if name not in trainer and _parts(name, trainer, kernel) is None:
            if name == "lm_head.weight":
                continue  # tied: the engine shares the embedding
            problems.append(f"{name}: the trainer has no such tensor")
            continue
        if quant in ("mxfp8", "nvfp4"):
            pairs = _lowp_pairs(name, engine, trainer, quant, kernel, recipe)
        else:
            want_w, want_s = expected(name, trainer, quant == "fp8" and name + SCALE in engine,
                                      kernel)
            pairs = [(name, got, want_w)]
            if want_s is not None:
                pairs.append((name + SCALE, engine[name + SCALE], want_s))
        for what, g, w in pairs:
            if g is None:
                problems.append(f"{what}: the engine holds no such tensor")
                continue
            if what == name and g.shape[0] != w.shape[0] and g.dim() == 2:
                g = g[: w.shape[0]]  # vocabulary padding
            g = g.to(w.device)
            same = g.shape == w.shape and torch.equal(
                _bytes(g), _bytes(w) if w.dtype in (FP8, torch.uint8) else w.to(g.dtype))
            if not same:
                bad = "shape" if g.shape != w.shape else int(
                    (_bytes(g).float() != _bytes(w).float()).sum())
                problems.append(f"{what}: differs from vLLM's layout ({bad})")
        n += 1
    return problems, n


def self_check() -> int:
    """On a CPU: the requantization leaves power-of-two scales, keeps the
    dequantized values within two e4m3 roundings, differs from the float
    checkpoint, and requantizing again keeps the values; w31 puts up
    before gate. Returns 0 when all hold."""
    torch.manual_seed(0)
    w = torch.randn(2, 256, 384) * 0.02
    q, s = quantize_checkpoint(w)
    q2, s2 = requant_ue8m0(q, s)
    mant, _ = torch.frexp(s2)
    def values(q, s):
        return e4m3_values(q) * s.repeat_interleave(BLOCK, -2).repeat_interleave(BLOCK, -1)
    d2 = values(q2, s2)
    ok = bool((mant == 0.5).all()) and not torch.equal(_bytes(q), _bytes(q2))
    ok &= bool(((d2 - w).abs() <= w.abs() * 2 ** -3 + s2.max() * 2 ** -8).all())
    ok &= torch.equal(values(*requant_ue8m0(q2, s2)), d2)
    trainer = {f"m.layers.0.mlp.experts.{e}.{p}.weight": torch.randn(128, 256).to(torch.bfloat16)
               for e in range(2) for p in ("gate_proj", "up_proj", "down_proj")}
    w31, _ = expected("m.layers.0.mlp.experts.w13_weight", trainer, False, "flashinfer")
    ok &= torch.equal(w31[1, :128], trainer["m.layers.0.mlp.experts.1.up_proj.weight"])
    ok &= torch.equal(w31[1, 128:], trainer["m.layers.0.mlp.experts.1.gate_proj.weight"])
    print(f"{'PASS' if ok else 'FAIL'}  kernel layout references: UE8M0 requantization "
          f"(power-of-two scales, values kept when requantized again, within two e4m3 roundings), w31 order")
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1:] != ["--self-check"]:
        print("usage: kernel_layouts_ref.py --self-check", file=sys.stderr)
        sys.exit(2)
    sys.exit(self_check())
