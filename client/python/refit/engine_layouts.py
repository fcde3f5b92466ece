"""Which layout a live engine's kernels read, and the derived tensors an
engine keeps: what refit.vllm and refit.sglang check when a worker
registers, and recompute after a commit.

vLLM and SGLang post-process some weights after loading them, for the
kernel that reads them (docs/kernel-layouts.md). refit writes the layout
its engine spec names: the checkpoint layout, ``kernel=flashinfer`` or
``kernel=deepgemm``. These functions look at the live model's layers (duck
typed: no vLLM, SGLang or torch import) and either return the ``kernel=``
value that matches what ran, or raise ``refit.RefitError``
(INVALID_ARGUMENT) naming the layer, the kernel and the engine setting
that avoids it, for every post-processing refit does not write.

    layout = refit.engine_layouts.vllm_kernel_layout(model)  # None, "flashinfer", "deepgemm"
    convention = "vllm:tp=8" + (f",kernel={layout}" if layout else "")
    ...  # after each commit's bytes landed, before reporting it:
    refit.engine_layouts.refresh_vllm_derived(model)

Read from vLLM at these commits: model_executor/layers/quantization/fp8.py
1436674 (Fp8LinearMethod / Fp8MoEMethod: use_marlin, block_quant,
flashinfer_moe_backend, allow_deep_gemm, rocm_aiter_moe_enabled, the
per-tensor max-scale requantization), fused_moe/oracle/fp8.py and
oracle/unquantized.py (Fp8MoeBackend / UnquantizedMoeBackend names, held as
``fp8_backend`` / ``unquantized_backend``), quantization/utils/
flashinfer_utils.py 487151d (swap_w13_to_w31, TRTLLM's shuffle),
quantization/utils/fp8_utils.py 364d019 (requant_weight_ue8m0_inplace),
utils/deep_gemm.py 779d1fc (DeepGemmQuantScaleFMT: float32 UE8M0 scales on
SM90, int32-packed on SM100), kernels/linear/scaled_mm/deep_gemm.py 104b28a
(DeepGemmFp8BlockScaledMMKernel.use_deep_gemm_e8m0), layers/attention/
mla_attention.py 90b0a26 (W_UK_T / W_UV from kv_b_proj; ROCm AITER FP8 BMM
keeps W_K / W_V instead). SGLang: python/sglang/srt/models/deepseek_v2.py
3e4a39e (post_load_weights: w_kc / w_vc from kv_b_proj).
"""

from typing import Any, Iterator, List, Optional, Tuple

import refit

FLASHINFER = "flashinfer"
DEEPGEMM = "deepgemm"
DEEPGEMM_SM100 = "deepgemm-sm100"
_CHECKPOINT = "checkpoint"


# What a refusal raises: INVALID_ARGUMENT naming the layer.
_refuse = refit.InvalidArgumentError


# --- walking a model --------------------------------------------------------

def _modules(model: Any) -> Iterator[Tuple[str, Any]]:
    """(name, module) of every module, with torch's named_modules() when
    the model has it, else the model alone; an attention layer's ``impl``
    (vLLM keeps MLA's derived tensors there) follows its layer."""
    items = model.named_modules() if hasattr(model, "named_modules") else [("", model)]
    for name, m in items:
        yield name, m
        impl = getattr(m, "impl", None)
        if impl is not None and not hasattr(impl, "named_modules"):
            yield (name + ".impl" if name else "impl"), impl


def _dtype_name(t: Any) -> str:
    return str(getattr(t, "dtype", "")).replace("torch.", "")


def _is_fp8(t: Any) -> bool:
    return _dtype_name(t).startswith("float8")


def _enum_name(v: Any) -> str:
    """An enum member's name ("FLASHINFER_CUTLASS"), or str(v) upper-cased."""
    if v is None:
        return ""
    name = getattr(v, "name", None)
    return (name if isinstance(name, str) else str(v)).upper()


def _class_names(obj: Any) -> List[str]:
    """Class names of obj's attribute values (the kernel objects a quant
    method holds: DeepGemmFp8BlockScaledMMKernel, MarlinFp8..., ...)."""
    return [type(v).__name__ for v in getattr(obj, "__dict__", {}).values()]


def _all_pow2(scale: Any) -> bool:
    """Whether every scale is a power of two: mantissa 0.5 in frexp."""
    mantissa = scale.frexp()[0]
    return bool(mantissa.eq(0.5).all().item())


# --- vLLM --------------------------------------------------------------------

_AVOID_FLASHINFER = ("VLLM_USE_FLASHINFER_MOE_FP8=0 (FP8) or VLLM_USE_FLASHINFER_MOE_FP16=0 "
                     "(BF16)")
_AVOID_DEEPGEMM = "VLLM_USE_DEEP_GEMM=0 (or VLLM_USE_DEEP_GEMM_E8M0=0: float scales)"


def _block_scale(layer: Any, prefix: str = "") -> Any:
    for name in (prefix + "weight_scale_inv", prefix + "weight_scale"):
        s = getattr(layer, name, None)
        if s is not None:
            return s
    return None


def _fp8_block_layout(name: str, layer: Any, scale: Any) -> str:
    """deepgemm when vLLM requantized this block-FP8 weight's scales to
    powers of two (UE8M0 on SM90, f32), deepgemm-sm100 when DeepGEMM packed
    them four to an int32 (transform_sf_into_required_layout on SM100),
    checkpoint when they are the float scales."""
    if _dtype_name(scale) in ("int32", "int"):
        return DEEPGEMM_SM100
    return DEEPGEMM if _all_pow2(scale) else _CHECKPOINT


def _vllm_linear(name: str, layer: Any, qm: Any) -> Optional[str]:
    """The layout of an Fp8LinearMethod layer, or None for other methods."""
    if "Fp8LinearMethod" not in type(qm).__name__:
        return None
    weight = getattr(layer, "weight", None)
    kernels = " ".join(_class_names(qm))
    if getattr(qm, "use_marlin", False) or "Marlin" in kernels:
        raise _refuse(
            f"layer {name}: vLLM runs FP8 through Marlin, which repacks the weights; "
            f"refit does not write Marlin's layout: serve on a GPU with FP8 support "
            f"(SM89+) and leave VLLM_TEST_FORCE_FP8_MARLIN unset")
    if "Aiter" in kernels or "Rocm" in kernels:
        raise _refuse(
            f"layer {name}: vLLM runs FP8 through ROCm AITER, which shuffles the "
            f"weights; refit does not write it: set VLLM_ROCM_USE_AITER=0")
    if "fnuz" in _dtype_name(weight):
        raise _refuse(
            f"layer {name}: the weight is {_dtype_name(weight)} (vLLM converts e4m3fn to "
            f"FNUZ on this ROCm GPU, doubling the scales); refit writes e4m3fn only")
    if not _is_fp8(weight):
        return _CHECKPOINT  # not quantized (yet): BF16 linears keep the checkpoint layout
    if not getattr(qm, "block_quant", False):
        raise _refuse(
            f"layer {name}: per-tensor FP8: vLLM requantizes the fused module's "
            f"shards with their max scale and transposes the weight after loading, "
            f"which refit does not write; serve a block-FP8 (weight_block_size "
            f"128x128) or BF16 checkpoint")
    return _fp8_block_layout(name, layer, _block_scale(layer))


def _vllm_mxfp8(name: str, layer: Any, qm: Any) -> Optional[str]:
    """The layout of a layer under vLLM's online MXFP8 (--quantization mxfp8:
    quantization/mxfp8.py at 2aa8028, quantization/online/mxfp8.py at
    03bf2d3), or None for other methods: the checkpoint layout (quant=mxfp8)
    when the weight stays e4m3 with [.., N, K/32] uint8 weight_scale (the
    emulation kernels, linear and experts); kernel=flashinfer for FlashInfer
    CUTLASS linears (FlashInferCutlassMxfp8LinearKernel, kernels/linear/mxfp8/
    flashinfer.py at f195871: flat swizzled F8_128x4 uint8 scales,
    swizzle_mxfp8_scale). Refused: Marlin, FlashInfer TRTLLM
    experts (fused_moe/oracle/mxfp8.py at d965a8a: shuffled), and weights the
    emulation dequantized to BF16 at load (kernels/linear/mxfp8/emulation.py
    at 0f6c0f5, VLLM_MXFP8_EMULATION_DEQUANT_AT_LOAD; the experts alike,
    fused_moe/experts/mxfp8_emulation_moe.py at 0d77a76)."""
    if "Mxfp8" not in type(qm).__name__:
        return None
    moe = getattr(layer, "w13_weight", None) is not None
    prefix = "w13_" if moe else ""
    weight = getattr(layer, prefix + "weight", None)
    scale = getattr(layer, prefix + "weight_scale", None)
    kernel = type(getattr(qm, "kernel", None)).__name__
    backend = _enum_name(getattr(getattr(qm, "mxfp8_linear", None), "backend", None) or
                         getattr(qm, "fp8_backend", None))
    kernels = _kernel_classes(qm) if moe else kernel
    if moe and ("TRTLLM" in backend or "TrtLlm" in kernels or
                ("EMULATION" not in backend and "Emulation" not in kernels)):
        raise _refuse(
            f"layer {name}: vLLM runs these MXFP8 experts through {backend or kernels or '?'} "
            f"(FlashInfer TRTLLM shuffles them after quantizing); refit writes the "
            f"checkpoint layout the emulation experts read: serve the MoE model with "
            f"quant=fp8 or in BF16, or select the MXFP8 emulation MoE backend")
    if weight is not None and not _is_fp8(weight):
        raise _refuse(
            f"layer {name}: vLLM's MXFP8 emulation dequantized the {prefix or 'linear '}"
            f"weights to {_dtype_name(weight)} at load; refit writes e4m3 codes with their "
            f"scales (quant=mxfp8): set VLLM_MXFP8_EMULATION_DEQUANT_AT_LOAD=0")
    flashinfer = not moe and (backend == "FLASHINFER_CUTLASS" or "FlashInfer" in kernel)
    if (flashinfer and weight is not None and scale is not None and len(scale.shape) == 1
            and _dtype_name(scale) == "uint8"):
        return FLASHINFER  # FlashInferCutlassMxfp8LinearKernel: flat F8_128x4 scales
    if (flashinfer or backend == "MARLIN" or "Marlin" in kernel or scale is None or
            weight is None or len(scale.shape) != len(weight.shape) or
            _dtype_name(scale) != "uint8"):
        raise _refuse(
            f"layer {name}: vLLM's MXFP8 backend {backend or kernel or 'unknown'} holds the "
            f"scales as {_dtype_name(scale)} {tuple(getattr(scale, 'shape', ()))} "
            f"(Marlin's repacking, or a layout refit does not know), which refit does not "
            f"write; quant=mxfp8 writes [N, K/32] uint8 scales (the emulation backend), "
            f"kernel=flashinfer the flat F8_128x4 scales of FlashInfer CUTLASS linears")
    return _CHECKPOINT


def _vllm_nvfp4(name: str, layer: Any, qm: Any) -> Optional[str]:
    """The layout of a layer under vLLM's ModelOpt NVFP4 methods
    (quantization/modelopt.py at 00155cd), or None for other methods: the
    checkpoint layout (quant=nvfp4) for the emulation backends, FLASHINFER
    (quant=nvfp4,kernel=flashinfer: scales swizzled by swizzle_blockscale,
    experts' w13 as [up; gate]) for the CUTLASS and FlashInfer CUTLASS
    linear kernels and the FlashInfer CUTLASS MoE. Refused: Marlin (repacked
    weights), FlashInfer TRTLLM and CuteDSL MoE (shuffled experts), and
    vLLM's own CUTLASS MoE (swizzled scales without the [up; gate] order)."""
    if "NvFp4" not in type(qm).__name__:
        return None
    if getattr(layer, "w13_weight", None) is not None:
        backend = _enum_name(getattr(qm, "nvfp4_backend", None))
        if backend == "EMULATION":
            return _CHECKPOINT
        if backend == "FLASHINFER_CUTLASS":
            return FLASHINFER
        raise _refuse(
            f"layer {name}: vLLM's NVFP4 MoE backend {backend or 'unknown'} holds the experts "
            f"in a layout refit does not write (quant=nvfp4 writes the checkpoint layout, "
            f"kernel=flashinfer FlashInfer CUTLASS's): set VLLM_USE_FLASHINFER_MOE_FP4=1 with "
            f"the CUTLASS backend")
    kernel = type(getattr(qm, "kernel", None)).__name__
    if "Emulation" in kernel:
        return _CHECKPOINT
    if ("Marlin" not in kernel and "TRTLLM" not in kernel.upper() and
            ("Cutlass" in kernel or "FlashInfer" in kernel)):
        return FLASHINFER
    raise _refuse(
        f"layer {name}: vLLM's NVFP4 linear kernel {kernel} holds the weights in a layout "
        f"refit does not write (Marlin repacks them, TRTLLM shuffles them); quant=nvfp4 "
        f"writes the emulation backend's tensors and kernel=flashinfer CUTLASS's swizzled "
        f"scales")


def _kernel_classes(qm: Any) -> str:
    """Class names of the objects a MoE quant method runs with, two levels
    deep (FusedMoEModularMethod -> FusedMoEModularKernel -> FlashInferExperts)."""
    names, seen = [], set()
    todo = [(qm, 0)]
    while todo:
        obj, depth = todo.pop()
        for v in getattr(obj, "__dict__", {}).values():
            if id(v) in seen or isinstance(v, (int, float, str, bytes, bool)) or v is None:
                continue
            seen.add(id(v))
            names.append(type(v).__name__)
            if depth < 2:
                todo.append((v, depth + 1))
    return " ".join(names)


def _vllm_moe(name: str, layer: Any, qm: Any) -> Optional[str]:
    """The layout of a FusedMoE layer's experts, or None for other layers."""
    w13 = getattr(layer, "w13_weight", None)
    if w13 is None:
        return None
    kernels = _kernel_classes(qm)
    # A modular kernel wraps the method vLLM chose (old_quant_method).
    qm = getattr(qm, "old_quant_method", None) or qm
    backend = _enum_name(getattr(qm, "fp8_backend", None) or
                         getattr(qm, "unquantized_backend", None))
    fi = _enum_name(getattr(qm, "flashinfer_moe_backend", None))
    if "TrtLlm" in kernels or "TRTLLM" in kernels.upper():
        backend = backend or "FLASHINFER_TRTLLM"
    if "FlashInferExperts" in kernels or "FlashInferCutlass" in kernels:
        backend = backend or "FLASHINFER_CUTLASS"
    if getattr(qm, "use_marlin", False) or backend == "MARLIN":
        raise _refuse(
            f"layer {name}: vLLM runs the experts through Marlin, which repacks "
            f"them; refit does not write it: serve on a GPU with FP8 support (SM89+) "
            f"and leave VLLM_TEST_FORCE_FP8_MARLIN unset")
    if getattr(qm, "rocm_aiter_moe_enabled", False) or "AITER" in backend:
        raise _refuse(
            f"layer {name}: vLLM runs the experts through ROCm AITER, which shuffles "
            f"them; refit does not write it: set VLLM_ROCM_USE_AITER_MOE=0")
    if "TRTLLM" in backend or fi in ("TENSORRT_LLM", "TENSORRT-LLM"):
        raise _refuse(
            f"layer {name}: FlashInfer's TRTLLM MoE shuffles the expert weights "
            f"(reorder_rows_for_gated_act_gemm, shuffle_matrix_a), which refit does not "
            f"write: set VLLM_FLASHINFER_MOE_BACKEND=throughput (CUTLASS, kernel=flashinfer)")
    if "fnuz" in _dtype_name(w13):
        raise _refuse(
            f"layer {name}: the experts are {_dtype_name(w13)} (vLLM's ROCm FNUZ "
            f"conversion); refit writes e4m3fn only")
    flashinfer = (backend == "FLASHINFER_CUTLASS" or fi == "CUTLASS" or
                  bool(getattr(qm, "flashinfer_cutlass_moe_enabled", False)))
    if fi and not flashinfer:
        raise _refuse(
            f"layer {name}: FlashInfer MoE backend {fi} is not one refit writes "
            f"(only CUTLASS, kernel=flashinfer): set VLLM_FLASHINFER_MOE_BACKEND=throughput "
            f"or {_AVOID_FLASHINFER}")
    if backend and backend not in ("NONE", "0", "TRITON", "BATCHED_TRITON", "DEEPGEMM",
                                   "BATCHED_DEEPGEMM", "VLLM_CUTLASS", "BATCHED_VLLM_CUTLASS",
                                   "CUTLASS_BLOCK_SCALED_GROUPED_GEMM",
                                   "FLASHINFER_CUTLASS"):
        raise _refuse(
            f"layer {name}: MoE backend {backend} is not one whose weight layout "
            f"refit knows (Triton, DeepGEMM, vLLM CUTLASS, FlashInfer CUTLASS); "
            f"select one of those (--moe-backend / VLLM_USE_FLASHINFER_MOE_*)")
    if not _is_fp8(w13):
        return FLASHINFER if flashinfer else _CHECKPOINT
    block = getattr(qm, "block_quant", None)
    scale = _block_scale(layer, "w13_")
    if block is None:
        block = scale is not None and len(getattr(scale, "shape", ())) == 3
    if not block:
        raise _refuse(
            f"layer {name}: per-tensor FP8 experts: vLLM requantizes w13 with the max "
            f"of its two scales{' and FlashInfer keeps alpha scales derived from them' if flashinfer else ''}"
            f", which refit does not write; serve a block-FP8 (128x128) or BF16 checkpoint")
    if flashinfer:
        return FLASHINFER  # block scales swapped with the weight, still float
    return _fp8_block_layout(name, layer, scale)


def vllm_kernel_layout(model: Any) -> Optional[str]:
    """The ``kernel=`` value of vLLM's engine spec that matches the weights
    ``model`` (a vLLM worker's model, or anything with named_modules())
    holds after vLLM's post-load processing: None (the checkpoint layout,
    Triton / CUTLASS), ``"flashinfer"`` (FlashInfer CUTLASS MoE: experts'
    w13 as [up; gate]; NVFP4 and MXFP8 linears of FlashInfer / CUTLASS:
    scales in padded 128 x 4 tiles) or ``"deepgemm"`` (DeepGEMM on SM90:
    block-FP8 weights requantized to power-of-two scales).

    Looks at each layer's quant method (its class, ``use_marlin``,
    ``block_quant``, the MoE backend enum, ``flashinfer_moe_backend``,
    ``rocm_aiter_moe_enabled``), the weight dtypes, and, for block-FP8
    weights, whether the scales are powers of two (what UE8M0
    requantization leaves): one small reduction per FP8 layer.

    Raises refit.RefitError (INVALID_ARGUMENT) naming the layer, the kernel
    and the vLLM setting that avoids it for what refit does not write:
    Marlin, ROCm AITER, FlashInfer TRTLLM, MXFP8 scales other than [N, K/32]
    uint8 or FlashInfer CUTLASS's flat swizzled ones, MXFP8 weights dequantized at load and MXFP8 experts but the
    emulation's, per-tensor FP8 (max-scale
    requantization, FlashInfer alpha scales), FNUZ, an unknown MoE backend,
    and a model whose layers need two different layouts (DeepGEMM linears
    with FlashInfer MoE, SM90 and SM100 DeepGEMM scales together, or
    block-FP8 layers of which only some were requantized).
    """
    seen = {}  # layout -> first layer name
    moe_seen = {}
    for name, layer in _modules(model):
        qm = getattr(layer, "quant_method", None)
        if qm is None:
            continue
        fmt, low = "MXFP8", _vllm_mxfp8(name, layer, qm)
        if low is None:
            fmt, low = "NVFP4", _vllm_nvfp4(name, layer, qm)
        if low is not None:
            seen.setdefault(low, name)
            if FLASHINFER in seen and _CHECKPOINT in seen:
                raise _refuse(
                    f"layer {seen[FLASHINFER]} holds swizzled {fmt} scales and layer "
                    f"{seen[_CHECKPOINT]} does not; refit writes one layout for all")
            continue
        moe = _vllm_moe(name, layer, qm)
        if moe is not None:
            moe_seen.setdefault(moe, name)
            if moe != _CHECKPOINT or _is_fp8(layer.w13_weight):
                seen.setdefault(moe, name)  # BF16 experts take no part in deepgemm
            continue
        lin = _vllm_linear(name, layer, qm)
        if lin is not None and _is_fp8(getattr(layer, "weight", None)):
            seen.setdefault(lin, name)
    deepgemm = DEEPGEMM_SM100 if DEEPGEMM_SM100 in seen else DEEPGEMM
    if DEEPGEMM in seen and DEEPGEMM_SM100 in seen:
        raise _refuse(
            f"layer {seen[DEEPGEMM]} holds f32 UE8M0 scales and layer "
            f"{seen[DEEPGEMM_SM100]} int32-packed ones (DeepGEMM on SM100); refit writes "
            f"one kernel layout per engine: set {_AVOID_DEEPGEMM}")
    if FLASHINFER in seen and deepgemm in seen:
        raise _refuse(
            f"layer {seen[FLASHINFER]} runs FlashInfer MoE (kernel=flashinfer) and layer "
            f"{seen[deepgemm]} DeepGEMM with UE8M0 scales (kernel={deepgemm}); refit writes "
            f"one kernel layout per engine: set {_AVOID_DEEPGEMM} or {_AVOID_FLASHINFER}")
    if FLASHINFER in moe_seen and _CHECKPOINT in moe_seen:
        raise _refuse(
            f"MoE layer {moe_seen[FLASHINFER]} runs FlashInfer CUTLASS and MoE layer "
            f"{moe_seen[_CHECKPOINT]} does not; refit writes one layout for all: "
            f"set {_AVOID_FLASHINFER}")
    if deepgemm in seen and _CHECKPOINT in seen:
        first = seen[_CHECKPOINT]
        raise _refuse(
            f"layer {seen[deepgemm]} holds DeepGEMM's UE8M0-requantized FP8 weights but "
            f"layer {first} holds float scales (DeepGEMM skipped it for its shape, or "
            f"another kernel reads it); refit writes one layout for all: set "
            f"{_AVOID_DEEPGEMM}")
    if FLASHINFER in seen:
        return FLASHINFER
    if deepgemm in seen:
        return deepgemm
    return None


# --- SGLang ------------------------------------------------------------------
#
# Read from sgl-project/sglang (2026-11-25): layers/moe/fused_moe_triton/
# layer.py 9af3c47 (FusedMoE._load_w13: the quant method's
# load_up_proj_weight_first puts up_proj in the first half of w13, for
# FlashInfer CUTLASS); layers/quantization/unquant.py, newest stored
# version (UnquantizedFusedMoEMethod: load_up_proj_weight_first =
# use_flashinfer_cutlass; use_flashinfer_trtllm_moe reorders w13/w2 into
# TRTLLM's block layout; w13_swiglu_interleaved under
# SGLANG_OPT_FUSE_SWIGLU_INTERLEAVED interleaves gate and up rows; AITER
# shuffles); layers/moe/moe_runner/flashinfer_cutlass.py 420f0de (FlashInfer
# CUTLASS MoE serves BF16, ModelOpt FP8 with per-tensor scales, NVFP4 and
# MXFP4: no block-FP8 experts); layers/quantization/fp8_utils.py 6082c49
# (requant_weight_ue8m0_inplace, only where DEEPGEMM_SCALE_UE8M0, i.e.
# DeepGEMM on Blackwell: the weight dequantized to BF16, requantized, and the
# scales packed four UE8M0 bytes to an int32 [N, K/512]; on SM90 DeepGEMM
# reads the checkpoint's float 128x128 scales as loaded);
# layers/deep_gemm_wrapper/configurer.py (DEEPGEMM_SCALE_UE8M0 =
# DEEPGEMM_BLACKWELL).

_SG_TRITON = "--moe-runner-backend triton"
_SG_DEEPGEMM = "SGLANG_ENABLE_JIT_DEEPGEMM=0 (or --fp8-gemm-backend cutlass)"


def _sglang_moe(name: str, layer: Any, qm: Any) -> Optional[str]:
    """The layout of an SGLang FusedMoE layer's experts (flashinfer: w13 as
    [up; gate]), or None for other layers; raises for the layouts refit does
    not write."""
    w13 = getattr(layer, "w13_weight", None)
    if w13 is None:
        return None
    runner = _enum_name(getattr(getattr(qm, "runner", None), "runner_backend", None))
    if getattr(qm, "use_flashinfer_trtllm_moe", False) or "TRTLLM" in runner:
        raise _refuse(
            f"layer {name}: SGLang runs the experts through FlashInfer TRTLLM, which "
            f"reorders w13 / w2 into its block layout after loading; refit does not write "
            f"it: start SGLang with {_SG_TRITON} (or flashinfer_cutlass for BF16 experts)")
    if getattr(qm, "w13_swiglu_interleaved", False):
        raise _refuse(
            f"layer {name}: SGLang interleaved the gate and up rows of w13 for the fused "
            f"SwiGLU epilogue (SGLANG_OPT_FUSE_SWIGLU_INTERLEAVED); refit does not write "
            f"that order: set SGLANG_OPT_FUSE_SWIGLU_INTERLEAVED=0")
    if getattr(qm, "use_triton_kernels", False):
        raise _refuse(
            f"layer {name}: SGLang's triton_kernels MoE holds the experts transposed; "
            f"refit does not write it: start SGLang with {_SG_TRITON}")
    if getattr(qm, "use_aiter", False) or getattr(qm, "_use_aiter", False) or "AITER" in runner:
        raise _refuse(f"layer {name}: SGLang shuffles the experts for ROCm AITER; refit "
                      f"does not write it: set SGLANG_USE_AITER=0")
    w31 = bool(getattr(qm, "load_up_proj_weight_first", False))
    if not _is_fp8(w13):
        return FLASHINFER if w31 else _CHECKPOINT
    if "fnuz" in _dtype_name(w13):
        raise _refuse(f"layer {name}: w13_weight is {_dtype_name(w13)} (FNUZ); refit "
                      f"writes e4m3fn only")
    scale = getattr(layer, "w13_weight_scale_inv", None)
    if scale is None:
        raise _refuse(
            f"layer {name}: FP8 experts with per-tensor scales"
            f"{' through FlashInfer CUTLASS (ModelOpt FP8)' if w31 else ''}: SGLang "
            f"requantizes w13 with the max of its shard scales, which refit does not "
            f"write; serve a block-FP8 (128x128) or BF16 checkpoint with {_SG_TRITON}")
    if w31:
        raise _refuse(
            f"layer {name}: block-FP8 experts loaded as [up; gate]: SGLang's FlashInfer "
            f"CUTLASS MoE reads FP8 experts with per-tensor scales only, so refit does "
            f"not write block FP8 in that order: start SGLang with {_SG_TRITON}")
    if _dtype_name(scale) in ("int32", "int"):
        raise _refuse(
            f"layer {name}: SGLang requantized the experts to UE8M0 scales packed four "
            f"to an int32 for DeepGEMM on Blackwell, which refit does not write: set "
            f"{_SG_DEEPGEMM}")
    return _CHECKPOINT


def _sglang_linear(name: str, layer: Any, qm: Any) -> None:
    """Raises for an SGLang linear held in a layout refit does not write."""
    weight = getattr(layer, "weight", None)
    if getattr(qm, "use_marlin", False):
        raise _refuse(f"layer {name}: SGLang runs FP8 through Marlin (repacked weights), "
                      f"which refit does not write: serve on a GPU with FP8 support (SM89+) "
                      f"and leave SGLANG_FORCE_FP8_MARLIN unset")
    if getattr(qm, "use_aiter", False) or getattr(qm, "_use_aiter", False):
        raise _refuse(f"layer {name}: SGLang shuffles weights for ROCm AITER: set "
                      f"SGLANG_USE_AITER=0")
    if weight is None or not _is_fp8(weight):
        return
    if "fnuz" in _dtype_name(weight):
        raise _refuse(f"layer {name}: weight is {_dtype_name(weight)} (FNUZ); refit writes "
                      f"e4m3fn only")
    scale = getattr(layer, "weight_scale_inv", None)
    if scale is None:
        raise _refuse(
            f"layer {name}: per-tensor FP8 weight (SGLang requantizes fused shards with "
            f"their max scale and transposes the weight); serve a block-FP8 or BF16 "
            f"checkpoint")
    if _dtype_name(scale) in ("int32", "int"):
        raise _refuse(
            f"layer {name}: SGLang requantized the weight to UE8M0 scales packed four to "
            f"an int32 for DeepGEMM on Blackwell (requant_weight_ue8m0_inplace), which "
            f"refit does not write: set {_SG_DEEPGEMM}")


def sglang_kernel_layout(model: Any) -> Optional[str]:
    """The ``kernel=`` value of SGLang's engine spec that matches the
    weights ``model`` (an SGLang TP worker's model, or anything with
    named_modules()) holds: None (the checkpoint layout: Triton MoE, and
    block FP8 with float scales, which DeepGEMM on SM90, CUTLASS and Triton
    read as loaded) or ``"flashinfer"`` (BF16 experts loaded for FlashInfer
    CUTLASS MoE, w13 as [up; gate]: the quant method's
    ``load_up_proj_weight_first``).

    Raises refit.RefitError (INVALID_ARGUMENT) naming the layer, the kernel
    and the SGLang setting that avoids it for what refit does not write:
    FlashInfer TRTLLM MoE, SGLang's interleaved SwiGLU rows, triton_kernels
    MoE, FP8 experts in FlashInfer CUTLASS (per-tensor scales only),
    per-tensor FP8, DeepGEMM's UE8M0 requantization on Blackwell (int32
    packed scales), Marlin, ROCm AITER, FNUZ, and MoE layers in two
    different layouts.
    """
    moe_seen = {}
    for name, layer in _modules(model):
        qm = getattr(layer, "quant_method", None)
        if qm is None:
            continue
        moe = _sglang_moe(name, layer, qm)
        if moe is not None:
            moe_seen.setdefault(moe, name)
            continue
        _sglang_linear(name, layer, qm)
    if FLASHINFER in moe_seen and _CHECKPOINT in moe_seen:
        raise _refuse(
            f"MoE layer {moe_seen[FLASHINFER]} holds w13 as [up; gate] (FlashInfer CUTLASS) "
            f"and MoE layer {moe_seen[_CHECKPOINT]} as [gate; up]; refit writes one layout "
            f"for all: start SGLang with one --moe-runner-backend")
    return FLASHINFER if FLASHINFER in moe_seen else None


# --- derived tensors ---------------------------------------------------------

def _shares_storage(a: Any, b: Any) -> bool:
    try:
        return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    except AttributeError:
        return False


def _dequantized(proj: Any, dtype: Any) -> Any:
    """kv_b_proj's weight [out, in] in `dtype`: itself when unquantized, else
    its 128x128 block-FP8 codes times their scales in f32, rounded once to
    `dtype`: SGLang's block_quant_dequant exactly. vLLM dequantizes by
    scaled_dequantize (the same products) or, in some versions, by a GEMM
    with the identity, whose f32 accumulation can round a rare element to
    the neighbouring BF16 value."""
    w = proj.weight
    if not _is_fp8(w):
        return w if _dtype_name(w) == str(dtype).replace("torch.", "") else w.to(dtype)
    s = _block_scale(proj)
    if s is None or len(s.shape) != 2:
        raise _refuse("kv_b_proj: FP8 without 128x128 block scales; refit recomputes "
                      "MLA's derived tensors from block-FP8 or BF16 kv_b_proj only")
    rows, cols = w.shape
    full = s.repeat_interleave(128, 0)[:rows].repeat_interleave(128, 1)[:, :cols]
    return (w.to(s.dtype) * full).to(dtype)


def _mla_dims(a: Any) -> Tuple[int, int, int, int]:
    heads = getattr(a, "num_heads", None) or getattr(a, "num_local_heads")
    return heads, a.kv_lora_rank, a.qk_nope_head_dim, a.v_head_dim


def _refresh_nvfp4_alphas(name: str, m: Any) -> bool:
    """vLLM's NVFP4 alphas of layer ``m`` recomputed in place from the
    global scales refit wrote; False where ``m`` keeps none. Where vLLM's
    quant config passes the weight global scale itself as the MoE alphas
    (fused_moe/oracle/nvfp4.py at 0136201: g1_alphas is w13_weight_scale_2)
    FlashInfer CUTLASS experts folded the input scale into it in place
    (FlashInferExperts.process_weights_after_loading, flashinfer_cutlass_moe.py
    at 03063c09): the scale refit wrote is multiplied by it again; other
    experts (emulation) read it as written."""
    alpha = getattr(m, "alpha", None)
    igs, wgs = getattr(m, "input_global_scale", None), getattr(m, "weight_global_scale", None)
    if alpha is not None and igs is not None and wgs is not None:
        alpha.copy_(igs * wgs)
        return True
    qm = getattr(m, "quant_method", None)
    cfg = getattr(qm, "moe_quant_config", None)
    folds = "FlashInferExperts" in _kernel_classes(qm) or _enum_name(
        getattr(qm, "nvfp4_backend", None)) == "FLASHINFER_CUTLASS"
    done = False
    for alphas_name, a_name, w_name in (("g1_alphas", "w13_input_scale", "w13_weight_scale_2"),
                                        ("g2_alphas", "w2_input_scale", "w2_weight_scale_2")):
        w = getattr(m, w_name, None)
        alphas = getattr(cfg, alphas_name, None) if cfg is not None else None
        if w is None or alphas is None:
            continue
        if alphas is w and not folds:
            done = True  # the kernels read the global scale refit wrote
            continue
        a = getattr(m, a_name, None)
        if a is None or tuple(a.shape) != tuple(w.shape) or tuple(alphas.shape) != tuple(w.shape):
            raise _refuse(
                f"layer {name}: its NVFP4 MoE {alphas_name} {tuple(alphas.shape)} is not "
                f"{a_name} * {w_name} {tuple(w.shape)} element by element, so refit cannot "
                f"recompute it after writing {w_name}: serve the MoE layers in BF16 or FP8")
        alphas.copy_(a * w)
        done = True
    return done


def refresh_vllm_derived(model: Any) -> int:
    """Recomputes, in place, every tensor vLLM derived from a weight refit
    writes, from the bytes that weight holds now: MLA's ``W_UK_T`` [N, P, L]
    and ``W_UV`` [N, L, V] from ``kv_b_proj`` ([N*(P+V), L], dequantized
    when block FP8), as vLLM's MLA process_weights_after_loading computes
    them, written with ``copy_`` into the same storage (CUDA graphs keep
    their addresses). Call it on every engine worker after a commit's bytes
    landed and before the commit is reported. Returns how many layers it
    recomputed; layers whose W_UK_T / W_UV are views of kv_b_proj's own
    weight (BF16 without a copy) need nothing and are skipped.

    Cost: per MLA layer one read of kv_b_proj and one write of W_UK_T and
    W_UV, about 2x kv_b_proj's bytes in the model dtype, plus a
    dequantization for block-FP8 kv_b_proj (an estimate: DeepSeek-V3 at TP8
    reads and writes about 4 MiB per layer, 0.5 GB over 61 layers per GPU,
    a fraction of a millisecond of HBM time; the launches dominate).

    NVFP4 (quant=nvfp4, vLLM's ModelOpt method at 00155cd): a linear's
    ``alpha`` = ``input_global_scale * weight_global_scale`` (refit writes
    the weight global scale; the input scale is the engine's calibration),
    and a MoE layer's ``g1_alphas`` / ``g2_alphas`` in its quant method's
    ``moe_quant_config`` = ``w13_input_scale * w13_weight_scale_2`` /
    ``w2_input_scale * w2_weight_scale_2``, each written with ``copy_``;
    counted with the MLA layers in the return value.

    Raises refit.RefitError (INVALID_ARGUMENT) naming the layer for derived
    tensors refit does not recompute: ROCm AITER's FP8 BMM copies (W_K /
    W_V with scales: set VLLM_ROCM_USE_AITER_FP8BMM=0), FlashInfer's
    per-tensor FP8 MoE alpha scales (output1_scales_scalar / g1_alphas:
    serve block FP8 or BF16; vllm_kernel_layout refuses those layers too),
    and NVFP4 MoE alphas whose shape is not that of the product (a backend
    that folded the input scales differently).
    """
    done = 0
    for name, m in _modules(model):
        if _refresh_nvfp4_alphas(name, m):
            done += 1
            continue
        for attr in ("output1_scales_scalar", "g1_alphas"):
            if getattr(m, attr, None) is not None:
                raise _refuse(
                    f"layer {name}: FlashInfer per-tensor FP8 MoE keeps {attr} derived from "
                    f"the weight scales, which refit does not recompute; serve a block-FP8 "
                    f"or BF16 checkpoint")
        if getattr(m, "W_K_scale", None) is not None or getattr(m, "W_V_scale", None) is not None:
            raise _refuse(
                f"layer {name}: MLA keeps FP8 copies W_K / W_V for ROCm AITER's FP8 BMM, "
                f"which refit does not recompute: set VLLM_ROCM_USE_AITER_FP8BMM=0")
        uk, uv, proj = (getattr(m, "W_UK_T", None), getattr(m, "W_UV", None),
                        getattr(m, "kv_b_proj", None))
        if uk is None or uv is None or proj is None:
            continue
        if _shares_storage(uk, proj.weight) and _shares_storage(uv, proj.weight):
            continue
        n, l, p, v = _mla_dims(m)
        w = _dequantized(proj, uk.dtype)  # [N*(P+V), L]
        w_uk, w_uv = w.t().view(l, n, p + v).split([p, v], dim=-1)
        uk.copy_(w_uk.permute(1, 2, 0))
        uv.copy_(w_uv.transpose(0, 1))
        done += 1
    return done


def refresh_sglang_derived(model: Any) -> int:
    """Recomputes, in place, SGLang DeepSeek MLA's ``w_kc`` [N, P, L] and
    ``w_vc`` [N, L, V] from ``kv_b_proj`` as SGLang's post_load_weights
    does (block-FP8 kv_b_proj dequantized to the model dtype first), with
    ``copy_`` into the same storage. Call it after a commit's bytes landed
    and before the commit is reported. Returns how many layers it
    recomputed.

    Cost: per MLA layer one read of kv_b_proj and one write of w_kc and
    w_vc (about 2x kv_b_proj's bytes in the model dtype).

    Raises refit.RefitError (INVALID_ARGUMENT) naming the layer where SGLang
    keeps FP8 copies (w_kc in float8 with w_scale, or DeepGEMM's BMM scales
    w_scale_k / w_scale_v), which refit does not recompute: serve kv_b_proj
    in BF16 or block FP8 with SGLang's BF16 MLA BMM.
    """
    done = 0
    for name, m in _modules(model):
        kc, vc, proj = (getattr(m, "w_kc", None), getattr(m, "w_vc", None),
                        getattr(m, "kv_b_proj", None))
        if kc is None or vc is None or proj is None:
            continue
        if _is_fp8(kc) or getattr(m, "w_scale_k", None) is not None:
            raise _refuse(
                f"layer {name}: SGLang keeps MLA's w_kc / w_vc as FP8 copies with their own "
                f"scales, which refit does not recompute; serve kv_b_proj in BF16 or block "
                f"FP8 with SGLang's BF16 MLA BMM")
        n, l, p, v = _mla_dims(m)
        w = _dequantized(proj, kc.dtype)  # [N*(P+V), L]
        w_kc, w_vc = w.view(n, p + v, l).split([p, v], dim=1)
        kc.copy_(w_kc)
        vc.copy_(w_vc.transpose(1, 2))
        done += 1
    return done
