"""A stand-in of SGLang for rl_loop_gpu.py's SGLang rows (torch; no SGLang
code): its weight-update path (Engine -> Scheduler -> ModelRunner, the
custom weight-loader hook and the prefix-cache flush) and the layers a TP
worker holds after loading, per SGLang setup, as refit.engine_layouts reads
them. Written for refit from reading sgl-project/sglang (2026-11-25):

- model_executor/model_runner.py at 0005834 (update_weights_from_tensor:
  the named tensors unwrapped for this TP rank, then load_format "direct"
  copies them into the parameters, a load_format listed in
  server_args.custom_weight_loader is imported by its dotted path and
  called as loader(model, named_tensors), None goes to model.load_weights,
  anything else raises NotImplementedError; the loader's result is ignored
  and the call answers (True, "Success"));
- managers/scheduler.py (the request runs on every TP worker; when all
  succeeded and the request says flush_cache, the radix cache is flushed);
- the layers (see refit.engine_layouts for the files and commits): linears
  hold UnquantizedLinearMethod or Fp8LinearMethod (block_quant, float
  128x128 weight_scale_inv as loaded: Triton, CUTLASS and DeepGEMM on
  SM90); FusedMoE holds UnquantizedFusedMoEMethod, whose
  load_up_proj_weight_first (FlashInfer CUTLASS) loads w13 as [up; gate],
  or Fp8MoEMethod; ModelOpt FP8 experts for FlashInfer CUTLASS hold
  per-tensor scales; DeepGEMM's UE8M0 requantization on Blackwell
  (fp8_utils.py 6082c49) leaves int32 scales [N, ceil(K/512)], four UE8M0
  bytes each.

SETUPS names the SGLang configurations; build_model(tensors, setup) returns
the model and the layers it holds in a layout refit does not write (which
refit.sglang must refuse at registration).
"""
import importlib
import threading
import types
from typing import Any, Dict, List, Tuple

import torch

# setup -> (what SGLang runs, moe runner backend, FP8 scale form)
SETUPS = {
    "bf16": ("BF16, Triton MoE", "triton", None),
    "fp8": ("block FP8 (DeepGEMM on SM90 / Triton read the float scales)", "triton", "block"),
    "flashinfer": ("BF16, --moe-runner-backend flashinfer_cutlass", "flashinfer_cutlass", None),
    "flashinfer-fp8": ("FP8 experts, --moe-runner-backend flashinfer_cutlass (ModelOpt FP8)",
                       "flashinfer_cutlass", "per-tensor-experts"),
    "deepgemm": ("block FP8, DeepGEMM UE8M0 requantization (Blackwell)", "deep_gemm",
                 "ue8m0-packed"),
}

_ranks = threading.local()


def parallel_ranks() -> Tuple[int, int, int]:
    """(tp_rank, tp_size, pp_size) of the TP worker running on this thread
    (sglang.srt.distributed.parallel_state's queries; process-wide in SGLang,
    per worker thread here)."""
    return _ranks.tp_rank, _ranks.tp_size, 1


# --- the layers ----------------------------------------------------------------

class UnquantizedLinearMethod:
    pass


class Fp8LinearMethod:
    def __init__(self) -> None:
        self.block_quant = True
        self.use_marlin = False


class UnquantizedFusedMoEMethod:
    def __init__(self, runner: str) -> None:
        self.use_flashinfer_cutlass = runner == "flashinfer_cutlass"
        self.use_flashinfer_trtllm_moe = False
        self.use_triton_kernels = False
        self.w13_swiglu_interleaved = False

    @property
    def load_up_proj_weight_first(self) -> bool:
        return self.use_flashinfer_cutlass


class Fp8MoEMethod:
    def __init__(self) -> None:
        self.block_quant = True


class ModelOptFp8MoEMethod:
    """FP8 experts with per-tensor scales, loaded [up; gate] for FlashInfer
    CUTLASS."""

    def __init__(self) -> None:
        self.load_up_proj_weight_first = True


def _module(root: torch.nn.Module, path: List[str]) -> torch.nn.Module:
    m = root
    for part in path:
        if not hasattr(m, part):
            m.add_module(part, torch.nn.Module())
        m = getattr(m, part)
    return m


def _packed_ue8m0(rows: int, cols: int, lead: Tuple[int, ...], device: Any) -> torch.Tensor:
    """int32 [*, rows, ceil(cols/512)]: DeepGEMM's packed UE8M0 scales (one
    row per weight row, four 128-column blocks per int32); exponent 127
    (scale 1) in every byte."""
    return torch.full((*lead, rows, -(-cols // 512)), 0x7F7F7F7F, dtype=torch.int32,
                      device=device)


def build_model(tensors: Dict[str, torch.Tensor], setup: str
                ) -> Tuple[torch.nn.Module, List[str]]:
    """A module tree holding ``tensors`` (refit's engine buffers, by their
    SGLang names) as its parameters, same storage, with the quant methods
    SGLang gives each layer under ``setup``; returns (model, the layers
    held in a layout refit does not write)."""
    _, runner, scales = SETUPS[setup]
    model = torch.nn.Module()
    for name, t in tensors.items():
        *path, leaf = name.split(".")
        _module(model, path).register_parameter(
            leaf, torch.nn.Parameter(t, requires_grad=False))
    foreign = []
    for name, m in list(model.named_modules()):
        w13 = getattr(m, "w13_weight", None)
        if w13 is not None:
            if w13.element_size() == 1:
                if scales == "per-tensor-experts":
                    e = w13.shape[0]
                    for w in ("w13", "w2"):
                        if hasattr(m, f"{w}_weight_scale_inv"):
                            delattr(m, f"{w}_weight_scale_inv")
                        m.register_parameter(f"{w}_weight_scale", torch.nn.Parameter(
                            torch.ones(e, device=w13.device), requires_grad=False))
                    m.quant_method = ModelOptFp8MoEMethod()
                    foreign.append(name)
                else:
                    m.quant_method = Fp8MoEMethod()
                    if scales == "ue8m0-packed":
                        for w in ("w13", "w2"):
                            q = getattr(m, f"{w}_weight")
                            if hasattr(m, f"{w}_weight_scale_inv"):
                                delattr(m, f"{w}_weight_scale_inv")
                            m.register_parameter(f"{w}_weight_scale_inv", torch.nn.Parameter(
                                _packed_ue8m0(q.shape[-2], q.shape[-1], q.shape[:-2],
                                              q.device), requires_grad=False))
                        foreign.append(name)
            else:
                m.quant_method = UnquantizedFusedMoEMethod(runner)
            continue
        weight = getattr(m, "weight", None)
        if weight is None or not name.endswith("_proj"):
            continue
        if weight.element_size() != 1:
            m.quant_method = UnquantizedLinearMethod()
            continue
        m.quant_method = Fp8LinearMethod()
        if scales == "ue8m0-packed":
            delattr(m, "weight_scale_inv")
            m.register_parameter("weight_scale_inv", torch.nn.Parameter(
                _packed_ue8m0(weight.shape[0], weight.shape[1], (), weight.device),
                requires_grad=False))
            m.weight_scale_inv.format_ue8m0 = True
            foreign.append(name)
    return model, foreign


# --- the weight-update path ----------------------------------------------------

def dynamic_import(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


class ModelRunner:
    def __init__(self, model: Any, server_args: Any, tp_rank: int, tp_size: int) -> None:
        self.model, self.server_args = model, server_args
        self.tp_rank, self.tp_size = tp_rank, tp_size

    def update_weights_from_tensor(self, named_tensors: List[Tuple[str, Any]],
                                   load_format: Any = None) -> Tuple[bool, str]:
        _ranks.tp_rank, _ranks.tp_size = self.tp_rank, self.tp_size
        named_tensors = [(n, t[self.tp_rank] if isinstance(t, list) else t)
                         for n, t in named_tensors]
        if load_format == "direct":
            params = dict(self.model.named_parameters())
            with torch.no_grad():
                for n, t in named_tensors:
                    params[n].copy_(t)
        elif load_format in self.server_args.custom_weight_loader:
            dynamic_import(load_format)(self.model, named_tensors)
        elif load_format is None:
            self.model.load_weights(named_tensors)
        else:
            raise NotImplementedError(f"Unknown load_format={load_format}")
        return True, "Success"


class Engine:
    """sglang.Engine's weight-update calls as SGLang's session line answers
    them (the session line's scheduler_components/weight_updater.py, with
    _WeightUpdateSession, read 2026-12-06) over one scheduler of
    ``len(models)`` TP workers (each on its own thread, as SGLang runs one
    process per worker): an update outside begin_weight_update ...
    end_weight_update is answered (False, message); a version is recorded
    when end commits; the prefix-cache flush after an update needs the
    engine paused (or idle) and is an assertion otherwise, as in SGLang;
    ``cache_flushes`` counts the flushes."""

    def __init__(self, models: List[Any], custom_weight_loader: List[str]) -> None:
        self.server_args = types.SimpleNamespace(custom_weight_loader=list(custom_weight_loader))
        self.runners = [ModelRunner(m, self.server_args, r, len(models))
                        for r, m in enumerate(models)]
        self.cache_flushes = 0
        self.paused = False
        self.session: Any = None
        self.weight_version = "default"

    def pause_generation(self) -> None:
        self.paused = True

    def continue_generation(self) -> None:
        self.paused = False

    def begin_weight_update(self, selector: str = "all") -> Tuple[bool, str]:
        if self.session is not None:
            return False, "a weight-update session is already open; call end_weight_update() first"
        self.session = {"selector": selector, "version": None}
        return True, "Success"

    def end_weight_update(self, **fields: Any) -> Tuple[bool, str]:
        if self.session is None:
            return False, "no weight-update session is open; call begin_weight_update() first"
        session, self.session = self.session, None
        if session["version"] is not None:
            self.weight_version = session["version"]
        return True, "Success"

    def update_weights_from_tensor(self, named_tensors: List[Tuple[str, Any]],
                                   load_format: Any = None, flush_cache: bool = True,
                                   selector: str = "all",
                                   weight_version: Any = None) -> Tuple[bool, str]:
        if self.session is None:
            return False, ("update_weights_from_tensor must run between "
                           "begin_weight_update() and end_weight_update()")
        results: List[Any] = [None] * len(self.runners)
        errors: List[BaseException] = []

        def run(i: int) -> None:
            try:
                results[i] = self.runners[i].update_weights_from_tensor(named_tensors,
                                                                         load_format)
            except BaseException as e:  # in SGLang this stops the scheduler
                errors.append(e)
        ts = [threading.Thread(target=run, args=(i,)) for i in range(len(self.runners))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if errors:
            raise RuntimeError(f"an SGLang TP worker raised (its scheduler would stop): "
                               f"{errors[0]}") from errors[0]
        success = all(r is not None and r[0] for r in results)
        if success and flush_cache:
            if not self.paused:
                raise AssertionError("Cache flush failed after updating weights")
            self.cache_flushes += 1
        if success and weight_version is not None:
            self.session["version"] = weight_version
        return success, "Success" if success else "Failed"
