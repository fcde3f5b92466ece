"""Qwen3 and Qwen3-MoE read from vLLM's fused layout, for rl_loop_gpu.py.

An engine holds a model the way vLLM's model code does (TP 1): one
``qkv_proj`` per attention, one ``gate_up_proj`` per dense MLP, the experts
of a MoE layer stacked as ``experts.w13_weight`` [E, 2I, H] (gate rows, then
up rows) and ``experts.w2_weight`` [E, H, I], and under ``quant=fp8`` e4m3
weights with one f32 ``weight_scale_inv`` per 128x128 block. This module:

- ``kernel="flashinfer"``: FlashInfer CUTLASS MoE's layout, each expert's
  w13 as [up; gate] (w31), read by an activation on the other half;
  ``kernel="deepgemm"``: the FP8 weights requantized to power-of-two
  scales, dequantized the same way (f32 scales row-major on SM90).
- ``fused_logits``: the forward pass over such tensors, written as vLLM's
  ``models/qwen3.py`` / ``qwen3_moe.py`` read them: qkv split into q, k, v
  by [q_size, kv_size, kv_size]; RMSNorm on each head of q and k (q_norm,
  k_norm) before neox-style rotary embedding; causal attention with
  grouped KV heads and scale head_dim^-0.5; SiluAndMul over gate_up; MoE
  routing by softmax over the router logits, top-k, renormalized when
  ``norm_topk_prob``; FP8 weights dequantized as e4m3 * weight_scale_inv.
- ``engine_parts`` / ``check_engine_weights`` / ``unfused_weights``: which
  slice of an engine tensor holds which Hugging Face tensor, the check that
  every engine tensor holds the trainer's values (bit for bit, or within
  e4m3 rounding), and the engine's weights back in Hugging Face's names.
- ``ExpertViews``: a module's tensors under the names refit's ``fsdp``
  convention uses, with transformers' stacked experts
  (``mlp.experts.gate_up_proj`` [E, 2I, H], ``mlp.experts.down_proj``)
  given as per-expert views (``mlp.experts.{e}.gate_proj.weight``, ...):
  refit reads the module's own memory.
- ``StandInQwen3``: an unfused model with transformers' parameter names and
  its modeling code's conventions (separate q/k/v, rotate_half rotary,
  eager attention, stacked experts), the reference on hosts without
  transformers (``fused_qwen3.py --self-check`` on a CPU).

Only torch is needed (any version from 1.13; FP8 tensors need 2.1, or
are given as uint8 bytes, decoded here).
"""

import math
import sys
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch
import torch.nn.functional as F

import lowp_dequant as lowp
from e4m3 import e4m3_values

BLOCK = 128  # vLLM's FP8 weight_block_size, both dims
SCALE = "_scale_inv"

# Small Qwen3-shaped models (dims multiples of 128, so FP8 blocks are whole).
# rope_theta is the stand-in's; a transformers model keeps its config's
# default, which rl_loop_gpu.py reads back and checks.
CONFIGS = {
    "qwen3": dict(
        model_type="qwen3", hidden_size=256, intermediate_size=768,
        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
        head_dim=128, vocab_size=1024, tie_word_embeddings=True,
        max_position_embeddings=512, rms_norm_eps=1e-6, hidden_act="silu",
        attention_bias=False, rope_theta=1000000.0),
    "qwen3-moe": dict(
        model_type="qwen3_moe", hidden_size=256, intermediate_size=512,
        moe_intermediate_size=256, num_experts=8, num_experts_per_tok=2,
        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=128, vocab_size=1024, tie_word_embeddings=False,
        max_position_embeddings=512, rms_norm_eps=1e-6, hidden_act="silu",
        attention_bias=False, rope_theta=1000000.0),
}


# ------------------------------------------------------------ config reading
def rope_theta(cfg: Dict[str, Any]) -> float:
    """The rotary base of a config dict: ``rope_parameters["rope_theta"]``
    (transformers 5; per layer type: the full-attention one) or
    ``rope_theta``. Raises ValueError for scaled rotary embeddings, which
    this forward does not implement."""
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    if "full_attention" in params and isinstance(params["full_attention"], dict):
        params = params["full_attention"]
    kind = params.get("rope_type", params.get("type", "default"))
    if kind != "default":
        raise ValueError(f"rope_type {kind!r}: only the default rotary embedding is implemented")
    theta = params.get("rope_theta", cfg.get("rope_theta"))
    if theta is None:
        raise ValueError("config has neither rope_parameters.rope_theta nor rope_theta")
    return float(theta)


def check_config(cfg: Dict[str, Any]) -> None:
    """Raises ValueError naming the field when the config is one this
    forward does not implement (another activation, attention bias, sliding
    window, mixed dense/MoE layers)."""
    if cfg.get("hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act {cfg['hidden_act']!r}: only silu")
    if cfg.get("attention_bias"):
        raise ValueError("attention_bias: not implemented")
    if cfg.get("use_sliding_window"):
        raise ValueError("use_sliding_window: not implemented")
    if cfg.get("mlp_only_layers") or cfg.get("decoder_sparse_step", 1) != 1:
        raise ValueError("mlp_only_layers / decoder_sparse_step: every layer must be MoE")
    rope_theta(cfg)


# ------------------------------------------------------------------- FP8
def scale_grid(scale: torch.Tensor, shape: torch.Size, name: str) -> torch.Tensor:
    """Per-element scale of a weight of ``shape`` from its per-block
    ``scale`` [..., ceil(R/128), ceil(C/128)]. Raises ValueError naming the
    tensor when the block grid does not fit the weight."""
    rows, cols = shape[-2], shape[-1]
    want = (-(-rows // BLOCK), -(-cols // BLOCK))
    if tuple(scale.shape[-2:]) != want or tuple(scale.shape[:-2]) != tuple(shape[:-2]):
        raise ValueError(f"{name}{SCALE}: shape {list(scale.shape)} does not hold "
                         f"{BLOCK}x{BLOCK} blocks of {list(shape)}")
    s = scale.float().repeat_interleave(BLOCK, -2).repeat_interleave(BLOCK, -1)
    return s[..., :rows, :cols]


def dequantize(q: torch.Tensor, scale: torch.Tensor, name: str) -> torch.Tensor:
    """float32 weight = e4m3 value * its block's weight_scale_inv."""
    return e4m3_values(q) * scale_grid(scale, q.shape, name)


class EngineWeights:
    """An engine's tensors by vLLM parameter name; ``get`` gives a weight in
    the compute dtype, FP8, MXFP8 and NVFP4 ones dequantized
    (lowp_dequant; NVFP4 block scales read swizzled under ``kernel``
    "flashinfer")."""

    def __init__(self, tensors: Dict[str, torch.Tensor], kernel: Optional[str] = None):
        self.tensors = tensors
        self.kernel = kernel

    def has(self, name: str) -> bool:
        return name in self.tensors

    def get(self, name: str, dtype: torch.dtype) -> torch.Tensor:
        """Raises KeyError naming a tensor the engine does not hold."""
        if name not in self.tensors:
            raise KeyError(f"the engine holds no tensor {name}")
        t = self.tensors[name]
        fmt = lowp.format_of(name, self.tensors)
        if fmt is None:
            return t.to(dtype)
        if fmt == "fp8":
            return dequantize(t, self.tensors[name + SCALE], name).to(dtype)
        return lowp.dequantize(name, self.tensors, self.kernel).to(dtype)


# ----------------------------------------------------- the fused forward
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """vLLM's RMSNorm: normalized in float32, cast back, times the weight."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return xf.to(x.dtype) * weight


def neox_rotary(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary embedding, neox style (vLLM's is_neox_style=True): the first
    and second halves of each head are the pair. x: [B, T, heads, head_dim]."""
    hd = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, device=x.device).float() / hd))
    freqs = positions.float()[:, None] * inv[None, :]
    cos = freqs.cos().to(x.dtype)[None, :, None, :]
    sin = freqs.sin().to(x.dtype)[None, :, None, :]
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention, grouped KV heads (KV head j serves query heads
    j*G .. j*G+G-1), scale head_dim^-0.5, softmax in float32.
    q: [B, T, H, D], k and v: [B, T, KV, D]; returns [B, T, H*D]."""
    b, t, heads, hd = q.shape
    group = heads // k.shape[2]
    q, k, v = (x.transpose(1, 2) for x in (q, k, v))
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = torch.matmul(q, k.transpose(-1, -2)).float() * hd ** -0.5
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    scores = scores.masked_fill(mask, float("-inf"))
    p = torch.softmax(scores, dim=-1).to(v.dtype)
    return torch.matmul(p, v).transpose(1, 2).reshape(b, t, heads * hd)


def _attention(cfg, w: EngineWeights, p: str, x: torch.Tensor, pos: torch.Tensor,
               dtype: torch.dtype) -> torch.Tensor:
    hd = cfg["head_dim"]
    q_size = cfg["num_attention_heads"] * hd
    kv_size = cfg["num_key_value_heads"] * hd
    eps = cfg.get("rms_norm_eps", 1e-6)
    qkv = x @ w.get(p + "self_attn.qkv_proj.weight", dtype).t()
    q, k, v = qkv.split([q_size, kv_size, kv_size], dim=-1)
    b, t = x.shape[:2]
    q = rms_norm(q.reshape(b, t, -1, hd), w.get(p + "self_attn.q_norm.weight", dtype), eps)
    k = rms_norm(k.reshape(b, t, -1, hd), w.get(p + "self_attn.k_norm.weight", dtype), eps)
    theta = rope_theta(cfg)
    q, k = neox_rotary(q, pos, theta), neox_rotary(k, pos, theta)
    out = causal_attention(q, k, v.reshape(b, t, -1, hd))
    return out @ w.get(p + "self_attn.o_proj.weight", dtype).t()


def silu_and_mul(x: torch.Tensor, w31: bool = False) -> torch.Tensor:
    """vLLM's SiluAndMul: silu(first half) * second half; w31 (FlashInfer's
    fused MoE): silu(second half) * first half."""
    d = x.shape[-1] // 2
    gate, up = (x[..., d:], x[..., :d]) if w31 else (x[..., :d], x[..., d:])
    return F.silu(gate) * up


def _moe(cfg, w: EngineWeights, p: str, x: torch.Tensor, dtype: torch.dtype,
         kernel: Optional[str] = None) -> torch.Tensor:
    shape = x.shape
    x = x.reshape(-1, shape[-1])
    logits = x @ w.get(p + "mlp.gate.weight", dtype).t()
    probs = torch.softmax(logits.float(), dim=-1)
    top_w, top_i = probs.topk(cfg["num_experts_per_tok"], dim=-1)
    if cfg.get("norm_topk_prob", True):
        top_w = top_w / top_w.sum(dim=-1, keepdim=True)
    top_w = top_w.to(dtype)
    w13 = w.get(p + "mlp.experts.w13_weight", dtype)
    w2 = w.get(p + "mlp.experts.w2_weight", dtype)
    out = torch.zeros_like(x)
    for e in range(w13.shape[0]):
        rows, slot = (top_i == e).nonzero(as_tuple=True)
        if rows.numel() == 0:
            continue
        y = silu_and_mul(x[rows] @ w13[e].t(), kernel == "flashinfer") @ w2[e].t()
        out.index_add_(0, rows, y * top_w[rows, slot, None])
    return out.reshape(shape)


def _mlp(cfg, w: EngineWeights, p: str, x: torch.Tensor, dtype: torch.dtype,
         kernel: Optional[str] = None) -> torch.Tensor:
    if w.has(p + "mlp.experts.w13_weight"):
        return _moe(cfg, w, p, x, dtype, kernel)
    h = silu_and_mul(x @ w.get(p + "mlp.gate_up_proj.weight", dtype).t())
    return h @ w.get(p + "mlp.down_proj.weight", dtype).t()


def fused_logits(cfg: Dict[str, Any], w: EngineWeights, tokens: torch.Tensor,
                 dtype: torch.dtype, kernel: Optional[str] = None) -> torch.Tensor:
    """float32 logits [B, T, vocab_size] of ``tokens`` [B, T] (positions
    0..T-1, causal) computed in ``dtype`` from the engine's fused tensors.
    Raises KeyError naming a missing tensor, ValueError for a config this
    forward does not implement."""
    check_config(cfg)
    eps = cfg.get("rms_norm_eps", 1e-6)
    pos = torch.arange(tokens.shape[1], device=tokens.device)
    h = w.get("model.embed_tokens.weight", dtype)[tokens]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = rms_norm(h, w.get(p + "input_layernorm.weight", dtype), eps)
        h = h + _attention(cfg, w, p, x, pos, dtype)
        x = rms_norm(h, w.get(p + "post_attention_layernorm.weight", dtype), eps)
        h = h + _mlp(cfg, w, p, x, dtype, kernel)
    h = rms_norm(h, w.get("model.norm.weight", dtype), eps)
    head = "lm_head.weight" if w.has("lm_head.weight") else "model.embed_tokens.weight"
    return (h @ w.get(head, dtype).t())[..., : cfg["vocab_size"]].float()


# ------------------------------------- engine tensors <-> trainer tensors
def engine_parts(name: str, shapes: Dict[str, torch.Size],
                 kernel: Optional[str] = None) -> List[Tuple[tuple, str]]:
    """[(index, hf_name)]: ``engine[name][index]`` holds Hugging Face tensor
    ``hf_name`` (refit's fsdp names; ``shapes``: their shapes), in vLLM's
    order: q, k, v rows of qkv_proj; gate then up rows of gate_up_proj and of
    each expert's w13; each expert's down_proj in w2; any other tensor by
    its own name (rows beyond the HF tensor's are vocab padding); w13 up
    then gate under kernel "flashinfer". Raises
    KeyError naming a part the trainer has no tensor for."""
    def need(n: str) -> torch.Size:
        if n not in shapes:
            raise KeyError(f"engine tensor {name}: the trainer has no {n}")
        return shapes[n]

    for fused, parts in ((".qkv_proj.", ("q_proj", "k_proj", "v_proj")),
                         (".gate_up_proj.", ("gate_proj", "up_proj"))):
        if fused in name:
            out, at = [], 0
            for part in parts:
                n = name.replace(fused, f".{part}.")
                rows = need(n)[0]
                out.append(((slice(at, at + rows),), n))
                at += rows
            return out
    w13 = ("up_proj", "gate_proj") if kernel == "flashinfer" else ("gate_proj", "up_proj")
    for fused, parts in ((".experts.w13_weight", w13), (".experts.w2_weight", ("down_proj",))):
        if name.endswith(fused):
            base = name[: -len(fused)] + ".experts."
            out, e = [], 0
            while f"{base}{e}.{parts[0]}.weight" in shapes:
                at = 0
                for part in parts:
                    n = f"{base}{e}.{part}.weight"
                    rows = need(n)[0]
                    out.append(((e, slice(at, at + rows)), n))
                    at += rows
                e += 1
            if not out:
                raise KeyError(f"engine tensor {name}: the trainer has no {base}0.{parts[0]}.weight")
            return out
    return [((slice(0, need(name)[0]),), name)]


def check_engine_weights(engine: Dict[str, torch.Tensor], trainer: Dict[str, torch.Tensor],
                         kernel: Optional[str] = None) -> Tuple[List[str], Dict[str, int]]:
    """(problems, counts): every engine tensor checked against the trainer's
    tensors it holds: bit-equal, or for an FP8 weight its dequantized value
    within e4m3 rounding of the trainer's (|d| <= 2^-4 |w| + 2^-9 scale:
    half a unit in the last place, normal or subnormal), for MXFP8 and NVFP4
    within lowp_dequant.rounding_bound; every trainer tensor held by exactly
    one engine tensor; every scale next to its weight. counts: tensors
    "equal" and "fp8" (FP8, MXFP8 and NVFP4). kernel "deepgemm": two
    roundings (|d| <= 2^-3 |w| + 2^-8 scale)."""
    rel, absolute = (2.0 ** -3, 2.0 ** -8) if kernel == "deepgemm" else (2.0 ** -4, 2.0 ** -9)
    shapes = {n: t.shape for n, t in trainer.items()}
    problems: List[str] = []
    counts = {"equal": 0, "fp8": 0}
    held: Dict[str, str] = {}
    for name, t in engine.items():
        if lowp.aux_of(name, engine) is not None:
            continue
        if any(name.endswith(s) for s in lowp.AUX_SUFFIXES) and name not in shapes:
            problems.append(f"{name}: a scale without its weight")
            continue
        try:
            parts = engine_parts(name, shapes, kernel)
        except KeyError as e:
            problems.append(str(e.args[0]))
            continue
        fmt = lowp.format_of(name, engine)
        if fmt == "fp8":
            scale = engine[name + SCALE]
            deq = dequantize(t, scale, name)
            grid = scale_grid(scale, t.shape, name)
        elif fmt is not None:
            vals, unit = lowp.block_units(name, engine, kernel)
            deq = vals * unit
        for index, hf in parts:
            if hf in held:
                problems.append(f"{hf}: held by both {held[hf]} and {name}")
            held[hf] = name
            want = trainer[hf]
            if fmt is None:
                got = t[index]
                if got.shape != want.shape or not torch.equal(got, want.to(got.device)):
                    bad = (got.float() != want.to(got.device).float()).sum().item() \
                        if got.shape == want.shape else "shape"
                    problems.append(f"{name}: its part {hf} differs from the trainer's ({bad})")
                continue
            w32 = want.to(deq.device).float()
            err = (deq[index] - w32).abs()
            if fmt == "fp8":
                bound = w32.abs() * rel + grid[index] * absolute + 1e-30
            else:
                bound = lowp.rounding_bound(fmt, w32, unit[index]) + 1e-30
            if not bool((err <= bound).all()):
                worst = (err / bound).max().item()
                problems.append(f"{name}: its part {hf} dequantized is {worst:.2f}x "
                                f"the {fmt} rounding bound away from the trainer's")
        counts["fp8" if fmt is not None else "equal"] += 1
    for hf in trainer:
        if hf not in held:
            problems.append(f"{hf}: no engine tensor holds it")
    return problems, counts


def unfused_weights(engine: Dict[str, torch.Tensor], shapes: Dict[str, torch.Size],
                    kernel: Optional[str] = None) -> Dict[str, torch.Tensor]:
    """The engine's weights (dequantized, float32) under Hugging Face's
    names: what a model loaded from the engine's memory holds."""
    w = EngineWeights(engine, kernel)
    out = {}
    for name in engine:
        if lowp.aux_of(name, engine) is not None:
            continue
        full = w.get(name, torch.float32)
        for index, hf in engine_parts(name, shapes, kernel):
            out[hf] = full[index]
    return out


# --------------------------------------------- a module's tensors by name
class ExpertViews:
    """``module``'s parameters under refit's fsdp names: transformers'
    stacked experts (``...mlp.experts.gate_up_proj`` [E, 2I, H] with gate
    rows first, ``...mlp.experts.down_proj`` [E, H, I]) as per-expert views
    ``...mlp.experts.{e}.gate_proj.weight`` / ``up_proj`` / ``down_proj``
    (the parameter's own memory); every other parameter as it is. Has the
    two methods refit.torch.module_buffers reads; buffers (rotary
    inv_freq) are left out: they are not weights."""

    def __init__(self, module: Any):
        self.module = module

    def named_parameters(self, remove_duplicate: bool = True) -> Iterator[Tuple[str, Any]]:
        try:
            items = self.module.named_parameters(remove_duplicate=remove_duplicate)
        except TypeError:  # torch < 2.0
            items = self.module.named_parameters()
        for name, p in items:
            if name.endswith("mlp.experts.gate_up_proj") and p.dim() == 3:
                half = p.shape[1] // 2
                for e in range(p.shape[0]):
                    base = f"{name[: -len('gate_up_proj')]}{e}."
                    yield base + "gate_proj.weight", p.detach()[e, :half]
                    yield base + "up_proj.weight", p.detach()[e, half:]
            elif name.endswith("mlp.experts.down_proj") and p.dim() == 3:
                for e in range(p.shape[0]):
                    yield f"{name[: -len('down_proj')]}{e}.down_proj.weight", p.detach()[e]
            else:
                yield name, p

    def named_buffers(self) -> List[Tuple[str, Any]]:
        return []

    def tensors(self) -> Dict[str, torch.Tensor]:
        """{fsdp name: tensor}, tied aliases included, detached."""
        return {n: p.detach() for n, p in self.named_parameters(remove_duplicate=False)}


# ------------------------------------------ the stand-in reference model
class _Norm(torch.nn.Module):
    """transformers' Qwen3RMSNorm: weight * normalized.to(input dtype)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def _rotate_half(x):
    d = x.shape[-1] // 2
    return torch.cat((-x[..., d:], x[..., :d]), dim=-1)


class _Attention(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        h, hd = c["hidden_size"], c["head_dim"]
        self.c = c
        self.q_proj = torch.nn.Linear(h, c["num_attention_heads"] * hd, bias=False)
        self.k_proj = torch.nn.Linear(h, c["num_key_value_heads"] * hd, bias=False)
        self.v_proj = torch.nn.Linear(h, c["num_key_value_heads"] * hd, bias=False)
        self.o_proj = torch.nn.Linear(c["num_attention_heads"] * hd, h, bias=False)
        self.q_norm = _Norm(hd, c["rms_norm_eps"])
        self.k_norm = _Norm(hd, c["rms_norm_eps"])

    def forward(self, x):
        b, t, _ = x.shape
        hd = self.c["head_dim"]
        q = self.q_norm(self.q_proj(x).view(b, t, -1, hd)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, t, -1, hd)).transpose(1, 2)
        v = self.v_proj(x).view(b, t, -1, hd).transpose(1, 2)
        inv = 1.0 / (rope_theta(self.c) ** (torch.arange(0, hd, 2, device=x.device).float() / hd))
        freqs = torch.arange(t, device=x.device).float()[:, None] * inv[None]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        rep = q.shape[1] // k.shape[1]
        k = k[:, :, None].expand(b, k.shape[1], rep, t, hd).reshape(b, -1, t, hd)
        v = v[:, :, None].expand(b, v.shape[1], rep, t, hd).reshape(b, -1, t, hd)
        s = torch.matmul(q, k.transpose(2, 3)) * hd ** -0.5
        s = s + torch.full((t, t), torch.finfo(s.dtype).min, device=x.device,
                           dtype=s.dtype).triu(1)
        p = torch.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype)
        o = torch.matmul(p, v).transpose(1, 2).reshape(b, t, -1)
        return self.o_proj(o)


class _Dense(torch.nn.Module):
    def __init__(self, h, i):
        super().__init__()
        self.gate_proj = torch.nn.Linear(h, i, bias=False)
        self.up_proj = torch.nn.Linear(h, i, bias=False)
        self.down_proj = torch.nn.Linear(i, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class _Router(torch.nn.Module):
    def __init__(self, e, h):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(e, h))


class _Experts(torch.nn.Module):
    def __init__(self, e, h, i):
        super().__init__()
        self.gate_up_proj = torch.nn.Parameter(torch.empty(e, 2 * i, h))
        self.down_proj = torch.nn.Parameter(torch.empty(e, h, i))


class _Moe(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.gate = _Router(c["num_experts"], c["hidden_size"])
        self.experts = _Experts(c["num_experts"], c["hidden_size"], c["moe_intermediate_size"])

    def forward(self, x):
        shape = x.shape
        x = x.view(-1, shape[-1])
        probs = F.softmax(F.linear(x, self.gate.weight), dim=1, dtype=torch.float)
        w, sel = torch.topk(probs, self.c["num_experts_per_tok"], dim=-1)
        if self.c["norm_topk_prob"]:
            w = w / w.sum(dim=-1, keepdim=True)
        w = w.to(x.dtype)
        out = torch.zeros_like(x)
        mask = F.one_hot(sel, num_classes=self.c["num_experts"]).permute(2, 1, 0)
        for e in range(self.c["num_experts"]):
            pos, tok = torch.where(mask[e])
            if tok.numel() == 0:
                continue
            gate, up = F.linear(x[tok], self.experts.gate_up_proj[e]).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, self.experts.down_proj[e])
            out.index_add_(0, tok, (y * w[tok, pos, None]).to(out.dtype))
        return out.view(shape)


class _Layer(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = _Attention(c)
        self.mlp = _Moe(c) if c.get("num_experts") else _Dense(c["hidden_size"],
                                                               c["intermediate_size"])
        self.input_layernorm = _Norm(c["hidden_size"], c["rms_norm_eps"])
        self.post_attention_layernorm = _Norm(c["hidden_size"], c["rms_norm_eps"])

    def forward(self, h):
        h = h + self.self_attn(self.input_layernorm(h))
        return h + self.mlp(self.post_attention_layernorm(h))


class _Backbone(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = torch.nn.ModuleList([_Layer(c) for _ in range(c["num_hidden_layers"])])
        self.norm = _Norm(c["hidden_size"], c["rms_norm_eps"])


class _Output:
    def __init__(self, logits, loss):
        self.logits, self.loss = logits, loss


class StandInQwen3(torch.nn.Module):
    """Qwen3ForCausalLM / Qwen3MoeForCausalLM's names and math, unfused, for
    hosts without transformers: ``model(input_ids, labels=...)`` returns an
    object with ``logits`` and the shifted next-token ``loss``. Weights are
    drawn N(0, 0.02) (norms 1), as transformers initializes them."""

    def __init__(self, cfg: Dict[str, Any]):
        super().__init__()
        check_config(cfg)
        self.cfg = cfg
        self.model = _Backbone(cfg)
        self.lm_head = torch.nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        if cfg.get("tie_word_embeddings"):
            self.lm_head.weight = self.model.embed_tokens.weight
        with torch.no_grad():
            for name, p in self.named_parameters():
                if not name.endswith("norm.weight"):
                    p.normal_(0.0, 0.02)

    def forward(self, input_ids, labels=None):
        h = self.model.embed_tokens(input_ids)
        for layer in self.model.layers:
            h = layer(h)
        logits = self.lm_head(self.model.norm(h))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]),
                                   labels[:, 1:].reshape(-1))
        return _Output(logits, loss)


# ------------------------------------------------------- the self-check
def _fuse_like_vllm(trainer: Dict[str, torch.Tensor], cfg: Dict[str, Any]) -> Dict[str, torch.Tensor]:
    """An engine's tensors built from the trainer's by explicit
    concatenation (the self-check's independent statement of the layout)."""
    out = {}
    for n, t in trainer.items():
        if ".self_attn.q_proj." in n:
            out[n.replace("q_proj", "qkv_proj")] = torch.cat(
                [t, trainer[n.replace("q_proj", "k_proj")], trainer[n.replace("q_proj", "v_proj")]])
        elif ".mlp.gate_proj." in n:
            out[n.replace("gate_proj", "gate_up_proj")] = torch.cat(
                [t, trainer[n.replace("gate_proj", "up_proj")]])
        elif ".mlp.experts.0.gate_proj." in n:
            base = n[: -len("0.gate_proj.weight")]
            e = cfg["num_experts"]
            out[base + "w13_weight"] = torch.stack(
                [torch.cat([trainer[f"{base}{i}.gate_proj.weight"],
                            trainer[f"{base}{i}.up_proj.weight"]]) for i in range(e)])
            out[base + "w2_weight"] = torch.stack(
                [trainer[f"{base}{i}.down_proj.weight"] for i in range(e)])
        elif any(s in n for s in (".k_proj.", ".v_proj.", ".up_proj.", ".experts.")):
            continue
        elif n == "lm_head.weight" and cfg.get("tie_word_embeddings"):
            continue
        else:
            out[n] = t.clone()
    return out


def self_check() -> int:
    """On a CPU: the fused forward over tensors fused by hand equals the
    stand-in's unfused forward (float32, 1e-4 of the logits' range); the
    weight check passes them and names a corrupted one; e4m3 decoding of
    every byte agrees with its definition; a swapped k/v fails the forward
    comparison. Returns 0 when all hold."""
    torch.manual_seed(0)
    ok = True
    for kind, cfg in CONFIGS.items():
        model = StandInQwen3(cfg).float()
        trainer = ExpertViews(model).tensors()
        engine = _fuse_like_vllm(trainer, cfg)
        tokens = torch.randint(0, cfg["vocab_size"], (2, 12))
        with torch.no_grad():
            ref = model(tokens).logits
            got = fused_logits(cfg, EngineWeights(engine), tokens, torch.float32)
        diff = (ref - got).abs().max().item()
        tol = 1e-4 * ref.abs().max().item()
        problems, counts = check_engine_weights(engine, trainer)
        bad = dict(engine)
        name = "model.layers.0.self_attn.qkv_proj.weight"
        q = cfg["num_attention_heads"] * cfg["head_dim"]
        kv = cfg["num_key_value_heads"] * cfg["head_dim"]
        bad[name] = torch.cat([engine[name][:q], engine[name][q + kv:], engine[name][q:q + kv]])
        swapped = (fused_logits(cfg, EngineWeights(bad), tokens, torch.float32) - ref).abs().max().item()
        flagged, _ = check_engine_weights(bad, trainer)
        good = (diff <= tol and not problems and swapped > 100 * tol and
                any("k_proj" in p for p in flagged))
        if "num_experts" in cfg:  # w31: the FlashInfer forward reads it, the default does not
            w31 = {n: (torch.cat([t[:, t.shape[1] // 2:], t[:, : t.shape[1] // 2]], 1)
                       if n.endswith("w13_weight") else t) for n, t in engine.items()}
            fi = fused_logits(cfg, EngineWeights(w31), tokens, torch.float32, "flashinfer")
            good &= (fi - ref).abs().max().item() <= tol and not check_engine_weights(
                w31, trainer, "flashinfer")[0] and bool(check_engine_weights(w31, trainer)[0])
        ok &= good
        print(f"{'PASS' if good else 'FAIL'}  {kind}: max|logit diff| {diff:.2e} (tol {tol:.1e}), "
              f"{counts['equal']} engine tensors equal, k/v swapped: diff {swapped:.2e} and "
              f"flagged: {[p.split(':')[0] for p in flagged][:2]}{' ' + str(problems) if problems else ''}")
    every = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    vals = e4m3_values(every)
    known = {0x38: 1.0, 0xB8: -1.0, 0x7E: 448.0, 0xFE: -448.0, 0x08: 2.0 ** -6,
             0x01: 2.0 ** -9, 0x07: 7 * 2.0 ** -9, 0x3C: 1.5, 0x00: 0.0}
    good = all(vals[b].item() == v for b, v in known.items()) and bool(
        vals[0x7F].isnan() and vals[0xFF].isnan() and vals.isnan().sum() == 2)
    what = "known values"
    if hasattr(torch, "float8_e4m3fn"):  # torch's own decoding of every byte
        theirs = every.view(torch.float8_e4m3fn).float()
        good &= bool(((vals == theirs) | (vals.isnan() & theirs.isnan())).all())
        what = "torch.float8_e4m3fn"
    ok &= good
    print(f"{'PASS' if good else 'FAIL'}  e4m3 decoding of all 256 bytes against {what}")
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1:] != ["--self-check"]:
        print("usage: fused_qwen3.py --self-check", file=sys.stderr)
        sys.exit(2)
    sys.exit(self_check())
