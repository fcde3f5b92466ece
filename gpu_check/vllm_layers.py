"""An RL-loop engine's tensors as the model refit's vLLM backend gets from a
worker, for rl_loop_gpu.py: ``TensorTable`` (the parameters alone) and
``QuantizedTable``, which adds the layers of a vLLM model loaded with
``--quantization mxfp8`` or a ModelOpt NVFP4 checkpoint, so that the
backend's own detectors (refit.engine_formats.vllm_quant_format,
refit.engine_layouts.vllm_kernel_layout) read the format and kernel layout
from them and refresh_vllm_derived recomputes the NVFP4 alphas, as in a
live vLLM worker.

The layers carry what those read, by vLLM's names (vllm-project/vllm,
read 2026-11-26): the quant method's class (Mxfp8OnlineLinearMethod /
Mxfp8OnlineMoEMethod with the emulation kernel and experts,
quantization/online/mxfp8.py at 03bf2d3; ModelOptNvFp4LinearMethod with
the emulation or CUTLASS kernel and ModelOptNvFp4FusedMoE with the
EMULATION or FLASHINFER_CUTLASS backend, quantization/modelopt.py at
00155cd), the weights and scales (the table's own tensors), and for NVFP4
linears ``input_global_scale`` (the engine's calibration, fixed here) and
``alpha``, which vLLM derives from it and the weight global scale.

vLLM's online NVFP4 (``--quantization nvfp4_per_token``, ``recipe=vllm``;
quantization/online/nvfp4.py at 0136201): ``Nvfp4OnlineMoEMethod`` is the
routed experts' method (linears stay unquantized); its
process_weights_after_loading quantizes w13_weight / w2_weight to packed
E2M1 [E, N, K/2] with block scales [E, N, K/16] and ``w13_weight_scale_2``
/ ``w2_weight_scale_2`` [E], sets ``w13_input_scale`` / ``w2_input_scale``
to ones [E], then converts them for the backend that
select_nvfp4_moe_backend picked for per-token activations
(fused_moe/oracle/nvfp4.py at 0136201: only FLASHINFER_TRTLLM and
FLASHINFER_CUTEDSL accept kNvfp4DynamicToken; TRTLLM comes first), which
shuffles them. The stand-in carries the method's ``nvfp4_backend`` and
``experts_cls`` as after that choice, over the tensors as its quantization
step leaves them (the bytes ``recipe=vllm`` names).
"""

import enum
import types

INPUT_GLOBAL_SCALE = 0.0125  # the activation calibration the engine loaded


class TensorTable:
    """An engine's tensors as a module's parameters (what vLLM's model
    gives the weight-transfer backend): named_parameters / named_buffers."""

    def __init__(self, tensors):
        self.tensors = tensors

    def named_parameters(self, remove_duplicate=True):
        return list(self.tensors.items())

    def named_buffers(self):
        return []


class Backend(enum.Enum):
    """vLLM's MoE backend enums, by the member names refit reads."""
    EMULATION = "EMULATION"
    FLASHINFER_CUTLASS = "FLASHINFER_CUTLASS"
    FLASHINFER_TRTLLM = "FLASHINFER_TRTLLM"


def _named(cls_name, **attrs):
    """An object of a class named ``cls_name`` (what the detectors match)."""
    obj = type(cls_name, (), {})()
    obj.__dict__.update(attrs)
    return obj


class QuantizedTable(TensorTable):
    """TensorTable plus named_modules(): a layer per quantized weight of
    ``quant`` ("mxfp8", "nvfp4") as vLLM's methods leave it, read under
    ``kernel`` (None, "flashinfer"); NVFP4 of ``recipe`` "vllm": the
    experts' Nvfp4OnlineMoEMethod (TRTLLM backend)."""

    def __init__(self, tensors, quant, kernel, recipe=None):
        import torch
        super().__init__(tensors)
        self.layers = []
        for name, t in tensors.items():
            if name + "_scale" not in tensors:
                continue
            if name.endswith(".experts.w13_weight"):
                path = name[: -len(".w13_weight")]
                layer = types.SimpleNamespace(**{
                    n[len(path) + 1:]: tensors[n] for n in tensors if n.startswith(path + ".")})
                if recipe == "vllm":
                    layer.w13_input_scale = torch.ones(t.shape[0], device=t.device)
                    layer.w2_input_scale = torch.ones(t.shape[0], device=t.device)
                    layer.quant_method = _named(
                        "Nvfp4OnlineMoEMethod", nvfp4_backend=Backend.FLASHINFER_TRTLLM,
                        experts_cls=type("TrtLlmNvFp4ExpertsMonolithic", (), {}))
                elif quant == "mxfp8":
                    experts = _named("Mxfp8EmulationTritonExperts")
                    layer.quant_method = _named(
                        "Mxfp8OnlineMoEMethod", fp8_backend=Backend.EMULATION,
                        moe_kernel=_named("FusedMoEKernel", fused_experts=experts))
                else:
                    layer.quant_method = _named(
                        "ModelOptNvFp4FusedMoE", nvfp4_backend=(
                            Backend.FLASHINFER_CUTLASS if kernel == "flashinfer"
                            else Backend.EMULATION), moe_quant_config=None)
            elif name.endswith(".weight"):
                path = name[: -len(".weight")]
                layer = types.SimpleNamespace(weight=t, weight_scale=tensors[name + "_scale"])
                if quant == "mxfp8":
                    layer.quant_method = _named("Mxfp8OnlineLinearMethod",
                                                kernel=_named("EmulationMxfp8LinearKernel"))
                else:
                    kern = "CutlassNvFp4LinearKernel" if kernel == "flashinfer" else \
                        "EmulationNvFp4LinearKernel"
                    layer.quant_method = _named("ModelOptNvFp4LinearMethod", kernel=_named(kern))
                    layer.weight_global_scale = tensors[name + "_global_scale"]
                    layer.input_global_scale = torch.full((), INPUT_GLOBAL_SCALE,
                                                          device=t.device)
                    layer.alpha = torch.zeros((), device=t.device)
            else:
                continue
            self.layers.append((path, layer))

    def named_modules(self):
        return [("", self)] + self.layers

    def stale_alphas(self):
        """Names of NVFP4 linears whose alpha is not input_global_scale x
        weight_global_scale (what vLLM derives after loading)."""
        return [p for p, m in self.layers if hasattr(m, "alpha")
                and not bool((m.alpha == m.input_global_scale * m.weight_global_scale).all())]


def online_nvfp4_refusal(tensors):
    """What refit.vllm says of vLLM's online NVFP4 experts (QuantizedTable of
    recipe "vllm" over ``tensors``): refit.engine_formats must read
    recipe=vllm off the layers and refuse the format naming an experts
    layer, as on a live vLLM worker. Returns the refusal; raises
    RuntimeError when the recipe is not detected or the layers are not
    refused by name."""
    import refit
    from refit import engine_formats as ef
    table = QuantizedTable(tensors, "nvfp4", None, recipe="vllm")
    if not table.layers:
        raise RuntimeError("no NVFP4 experts among the engine tensors")
    got = ef.vllm_nvfp4_recipe(table)
    if got != "vllm":
        raise RuntimeError(f"refit.engine_formats read recipe {got!r} off vLLM's "
                           f"Nvfp4OnlineMoEMethod layers, not 'vllm'")
    try:
        fmt = ef.vllm_quant_format(table)
    except refit.InvalidArgumentError as e:
        if not any(f"layer {path}:" in str(e) for path, _ in table.layers):
            raise RuntimeError(f"refit.engine_formats refused vLLM's online NVFP4 "
                               f"experts naming none of them: {e}") from e
        return str(e)
    raise RuntimeError(f"refit.engine_formats took vLLM's online NVFP4 experts, whose "
                       f"{Backend.FLASHINFER_TRTLLM.value} layout refit does not write, as "
                       f"{fmt!r}")
