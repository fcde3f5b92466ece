"""rl_loop_gpu.py's rows: the engine convention each engine name stands for,
how far its BF16 logits may be from the trainer's, and which rows run for
which backend and model."""

TRAINER_CONVENTION = "fsdp:dp=1"
ENGINE_CONVENTIONS = {"bf16": "vllm:tp=1", "fp8": "vllm:tp=1,quant=fp8",
                      "flashinfer": "vllm:tp=1,kernel=flashinfer",
                      "flashinfer-fp8": "vllm:tp=1,quant=fp8,kernel=flashinfer",
                      "deepgemm": "vllm:tp=1,quant=fp8,kernel=deepgemm",
                      "mxfp8": "vllm:tp=1,quant=mxfp8",
                      "nvfp4": "vllm:tp=1,quant=nvfp4",
                      "nvfp4-flashinfer": "vllm:tp=1,quant=nvfp4,kernel=flashinfer",
                      "nvfp4-vllm": "vllm:tp=1,quant=nvfp4,recipe=vllm"}
# Of max |trainer logit|. FP8 and MXFP8 round each weight to e4m3 (within
# 2^-4 of it); E2M1 keeps one mantissa bit instead of three, so NVFP4's
# steps are 4x e4m3's at the same scale (within 1/4 of a weight). Measured
# (H200, 2026-11-26): FP8 8-13% of the range, MXFP8 8-14%, NVFP4 20-23%;
# NVFP4's tolerance is twice FP8's, keeping about its margin (vLLM's online
# recipe quantizes the experts alone: the same bound holds). The
# same-weights check (TOL_SAME_WEIGHTS) and the bit-exact layout check show
# that the forward reads each layout; these bound the quantization error.
TOL_VS_TRAINER = {"bf16": 0.03, "fp8": 0.25, "flashinfer": 0.03, "flashinfer-fp8": 0.25,
                  "deepgemm": 0.25, "mxfp8": 0.25, "nvfp4": 0.5, "nvfp4-flashinfer": 0.5,
                  "nvfp4-vllm": 0.5}
# refit writes MXFP8 and NVFP4 engines for vLLM only (an SGLang convention
# with quant=mxfp8 or quant=nvfp4 is refused): no SGLang rows for these.
VLLM_ONLY = ("mxfp8", "nvfp4", "nvfp4-flashinfer", "nvfp4-vllm")
# vLLM's online NVFP4 (recipe=vllm) quantizes routed experts only; refit
# refuses it for a dense model (whose NVFP4 engine loaded a ModelOpt
# checkpoint): MoE rows only.
MOE_ONLY = ("nvfp4-vllm",)
MOE_MODELS = ("qwen3-moe",)


def kernel_of(convention, key="kernel"):
    """The kernel= (or ``key``=) value of an engine convention, or None."""
    for kv in convention.partition(":")[2].split(","):
        if kv.startswith(key + "="):
            return kv[len(key) + 1:]
    return None


def runs(backend, model, engine):
    """Whether (backend, model, engine) is a row: VLLM_ONLY engines for the
    vllm backend alone, MOE_ONLY engines for MOE_MODELS alone."""
    return (backend != "sglang" or engine not in VLLM_ONLY) and (
        engine not in MOE_ONLY or model in MOE_MODELS)
