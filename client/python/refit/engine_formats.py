"""Which weight format a live vLLM engine holds: the ``quant=`` value of
refit's engine spec that matches the quantization method vLLM loaded the
model with, or a refusal naming the layer for the methods refit does not
write. refit.vllm adds the detected ``quant=`` to the engine convention when
a worker registers (and refuses a convention that names another).

    fmt = refit.engine_formats.vllm_quant_format(model)   # None, "fp8", "mxfp8", "nvfp4"
    recipe = refit.engine_formats.vllm_nvfp4_recipe(model)  # None, "modelopt", "vllm"

Duck typed, like refit.engine_layouts: looks at each layer's
``quant_method`` class name (no vLLM or torch import). Read from
vllm-project/vllm (2026-11-26):

- quantization/fp8.py 1436674: ``Fp8LinearMethod`` / ``Fp8MoEMethod``
  (block FP8, ``quant=fp8``; per-tensor FP8 is refused by
  refit.engine_layouts).
- quantization/online/mxfp8.py 03bf2d3: ``Mxfp8OnlineLinearMethod`` /
  ``Mxfp8OnlineMoEMethod`` (``--quantization mxfp8``, ``quant=mxfp8``).
- quantization/modelopt.py 00155cd: ``ModelOptNvFp4LinearMethod`` /
  ``ModelOptNvFp4FusedMoE`` (NVFP4 W4A4 checkpoints, ``quant=nvfp4``);
  ``ModelOptNvFp4W4A16LinearMethod`` (W4A16: Marlin only, repacked),
  ``ModelOptNvFp4LMHeadMethod`` / ``ModelOptNvFp4EmbeddingMethod`` (an
  NVFP4 lm_head or embedding, which refit keeps in the model dtype) and the
  ModelOpt FP8 / MXFP8 checkpoint methods (``ModelOptFp8LinearMethod``,
  ``ModelOptFp8PcPtLinearMethod``, ``ModelOptFp8PbWoLinearMethod``,
  ``ModelOptMxFp8...``: per-tensor, per-channel or weight-only scales, not
  the layouts refit writes) are refused by name;
- quantization/online/nvfp4.py 0136201: ``Nvfp4OnlineMoEMethod``
  (``--quantization nvfp4_per_token``, routed experts only) is refused by
  name with its ``nvfp4_backend`` (fused_moe/oracle/nvfp4.py 0136201:
  per-token activations select FLASHINFER_TRTLLM or FLASHINFER_CUTEDSL,
  both shuffling the experts after loading).
- ``Unquantized*Method`` layers and KV-cache methods carry no weight format.

NVFP4 bytes follow one of two recipes (``recipe=`` of the engine spec):
ModelOpt's export (``recipe=modelopt``, the default) or vLLM's online
quantization (``recipe=vllm``); a convention naming the other recipe than
the layers hold is refused by name (refit.engine_worker.with_quant).
"""

import os
from typing import Any, Dict, Optional

import refit

# Substrings of quant-method class names of methods refit does not write.
_FOREIGN = ("GPTQ", "AWQ", "BitsAndBytes", "GGUF", "Mxfp4", "MXFP4", "Int8", "Int4",
            "CompressedTensors", "Quark", "Humming", "BitBLAS", "Bitblas", "FBGEMM",
            "Fbgemm", "Marlin", "Torchao", "TorchAO", "Petit")


# What a refusal raises: INVALID_ARGUMENT naming the layer.
_refuse = refit.InvalidArgumentError


def _method(qm: Any) -> str:
    """The class name of the quant method vLLM chose (a modular MoE kernel
    wraps it as ``old_quant_method``)."""
    return type(getattr(qm, "old_quant_method", None) or qm).__name__


def _layer_format(name: str, qm: Any) -> Optional[str]:
    """The format of one layer ("bf16" for an unquantized one), None for a
    method that holds no weights (KV cache) or one this does not know."""
    cls = _method(qm)
    if "KVCache" in cls or "Attention" in cls:
        return None
    if cls.startswith("Unquantized"):
        return "bf16"
    if cls.startswith("ModelOpt"):
        if "W4A16" in cls:
            raise _refuse(
                f"layer {name}: vLLM loaded a W4A16 NVFP4 checkpoint ({cls}), which only "
                f"Marlin serves, with repacked weights; refit writes NVFP4 W4A4 "
                f"checkpoints' tensors (quant=nvfp4): serve an NVFP4 (W4A4) checkpoint")
        if "LMHead" in cls or "Embedding" in cls:
            raise _refuse(
                f"layer {name}: vLLM holds it in NVFP4 ({cls}); refit keeps embeddings and "
                f"lm_head in the model dtype: serve a checkpoint that excludes them from "
                f"quantization (ModelOpt's exclude_modules)")
        if "NvFp4" in cls:
            return "nvfp4"
        raise _refuse(
            f"layer {name}: vLLM's {cls} holds ModelOpt's FP8 / MXFP8 checkpoint scales "
            f"(per-tensor, per-channel or weight-only), which refit does not write; "
            f"refit writes block FP8 (quant=fp8: --quantization fp8 with 128x128 "
            f"weight_block_size), MXFP8 (quant=mxfp8: --quantization mxfp8 on a BF16 "
            f"checkpoint) and ModelOpt NVFP4 (quant=nvfp4)")
    if cls.startswith("Mxfp8"):
        return "mxfp8"
    if cls.startswith("Nvfp4Online"):
        four_over_six = os.environ.get("FLASHINFER_NVFP4_4OVER6") == "1"
        method = getattr(qm, "old_quant_method", None) or qm
        backend = getattr(getattr(method, "nvfp4_backend", None), "name", None)
        raise _refuse(
            f"layer {name}: vLLM quantized these weights itself ({cls}, --quantization "
            f"nvfp4_per_token: global scale (6 * 448) / amax, FlashInfer's block quantizer"
            + (", and FLASHINFER_NVFP4_4OVER6=1 picks each block's maximum from 4 or 6 "
               "(4over6); unset FLASHINFER_NVFP4_4OVER6" if four_over_six else "")
            + "; its per-token activations run FlashInfer TRTLLM or CuteDSL experts"
            + (f" ({backend} here)" if backend else "")
            + ", which hold them shuffled after loading, a layout refit does not write; "
            "refit writes this recipe's bytes in the checkpoint layout only "
            "(quant=nvfp4,recipe=vllm) and those of ModelOpt's NVFP4 export (quant=nvfp4): "
            "serve a ModelOpt NVFP4 checkpoint, or the model in BF16")
    if any(s in cls for s in _FOREIGN):
        raise _refuse(
            f"layer {name}: vLLM's quantization method {cls} holds weights in a layout "
            f"refit does not write; refit writes BF16, block FP8 (quant=fp8), MXFP8 "
            f"(quant=mxfp8) and ModelOpt NVFP4 (quant=nvfp4) engines")
    if cls.startswith("Fp8"):
        return "fp8"
    return None


def vllm_nvfp4_recipe(model: Any) -> Optional[str]:
    """The ``recipe=`` value of vLLM's engine spec for the NVFP4 bytes
    ``model`` holds: ``"modelopt"`` when its NVFP4 layers loaded a ModelOpt
    checkpoint (``ModelOptNvFp4*``: modelopt.py 00155cd keeps the
    checkpoint's weight_scale_2 and block scales), ``"vllm"`` when vLLM
    quantized a BF16 checkpoint itself (``Nvfp4OnlineMoEMethod``,
    quantization/online/nvfp4.py 0136201: SFScale (6 * 448) / amax), None
    without NVFP4 layers. Detects only: :func:`vllm_quant_format` says
    which of them refit writes."""
    items = model.named_modules() if hasattr(model, "named_modules") else [("", model)]
    for _, layer in items:
        qm = getattr(layer, "quant_method", None)
        cls = _method(qm) if qm is not None else ""
        if cls.startswith("Nvfp4Online"):
            return "vllm"
        if cls.startswith("ModelOpt") and "NvFp4" in cls:
            return "modelopt"
    return None


def vllm_quant_format(model: Any) -> Optional[str]:
    """The ``quant=`` value of vLLM's engine spec for the weights ``model``
    (a vLLM worker's model, or anything with named_modules() whose layers
    carry ``quant_method``) holds: ``"fp8"``, ``"mxfp8"``, ``"nvfp4"``, or
    None when no layer is quantized (BF16) or no layer says.

    Raises refit.RefitError (INVALID_ARGUMENT) naming the layer for a
    method refit does not write (ModelOpt W4A16 NVFP4, an NVFP4 lm_head or
    embedding, ModelOpt FP8 / MXFP8 checkpoints, GPTQ, AWQ, compressed
    tensors, ...), and naming two layers when the model mixes two formats.
    """
    seen: Dict[str, str] = {}
    items = model.named_modules() if hasattr(model, "named_modules") else [("", model)]
    for name, layer in items:
        qm = getattr(layer, "quant_method", None)
        if qm is None:
            continue
        fmt = _layer_format(name, qm)
        if fmt is not None and fmt != "bf16":
            seen.setdefault(fmt, name)
    if len(seen) > 1:
        (a, la), (b, lb) = list(seen.items())[:2]
        raise _refuse(f"layer {la} holds {a} weights and layer {lb} {b}; refit writes one "
                      f"format per engine")
    return next(iter(seen), None)
