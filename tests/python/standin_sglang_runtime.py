"""What the two SGLang stand-ins (standin_sglang/main, standin_sglang/
sessions) share, written for refit's tests from reading sgl-project/sglang
(2026-12-06); no SGLang code:

* the TP worker's model runner update path (model_executor/
  model_runner_components/weight_updater.py at 027814ef): a model that
  publishes a derived-weight cache (``_derived_weight_cache_error``) refuses
  every update with that reason before any loader runs; a load_format listed
  in ``--custom-weight-loader`` is imported by dotted path and called as
  ``loader(model, named_tensors)``, its return value ignored, and the call
  answers (True, "Success"); begin restores each quant method's checkpoint
  state (``restore_weights_before_loading``: Marlin ``resize_`` of
  ``_original_shapes``), end runs ``process_weights_after_loading`` on every
  quant method;
* a TP worker holds the target runner and, with speculative decoding, a
  draft runner of its own model;
* the scheduler's prefix-cache flush succeeds only when the scheduler is
  idle (no running request) or paused, and a failed flush after an update
  is an assertion (it stops SGLang's scheduler; here it raises);
* a worker process reads the server's arguments through
  ``sglang.srt.server_args.get_global_server_args()`` (server_args.py at
  001067ff): ``tp_size``, ``dp_size``, ``ep_size``, ``enable_dp_attention``;
* ``sglang.Engine.update_weights_from_tensor(named_tensors, load_format,
  flush_cache)`` builds the request object and runs the tokenizer manager's
  coroutine on the engine's loop; the tokenizer manager forwards each
  request to the scheduler of every DP replica.

TP workers run as threads of one process here (one process each in SGLang),
so the parallel-state rank queries and the global server args are per
thread.
"""
import asyncio
import importlib
import threading
import types
from dataclasses import dataclass, field
from typing import Any, List, Optional

_local = threading.local()


@dataclass
class UpdateWeightsFromTensorFields:
    """The fields of io_struct's UpdateWeightsFromTensorReqInput both
    generations have; each adds how an update keeps off the draft model."""
    serialized_named_tensors: List[Any] = field(default_factory=list)
    load_format: Optional[str] = None
    flush_cache: bool = True
    abort_all_requests: bool = False
    weight_version: Optional[str] = None
    torch_empty_cache: bool = False


@dataclass
class UpdateWeightsFromTensorReqOutput:
    """io_struct's answer to a weight call, the same in both generations."""
    success: bool
    message: str


@dataclass
class PauseGenerationReqInput:
    mode: str = "abort"


@dataclass
class ContinueGenerationReqInput:
    pass


def set_ranks(tp_rank: int, tp_size: int, pp_size: int = 1) -> None:
    _local.tp_rank, _local.tp_size, _local.pp_size = tp_rank, tp_size, pp_size


def get_global_server_args() -> Any:
    """This thread's worker's server args (SGLang raises ValueError before
    the scheduler set them)."""
    args = getattr(_local, "server_args", None)
    if args is None:
        raise ValueError("Global server args is not set yet!")
    return args


def get_tensor_model_parallel_rank() -> int:
    return _local.tp_rank


def get_tensor_model_parallel_world_size() -> int:
    return _local.tp_size


def get_pp_group():
    return types.SimpleNamespace(world_size=_local.pp_size)


class MultiprocessingSerializer:
    """In-process: the named tensors travel as they are."""

    @staticmethod
    def serialize(obj):
        return obj

    @staticmethod
    def deserialize(obj):
        return obj


def dynamic_import(path: str):
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _modules(model):
    return model.named_modules() if hasattr(model, "named_modules") else [("", model)]


class ModelRunner:
    def __init__(self, model, server_args, tp_rank: int, tp_size: int, role: str = "target"):
        self.model, self.server_args, self.role = model, server_args, role
        self.tp_rank, self.tp_size = tp_rank, tp_size
        self.loader_calls = 0
        self.begin_calls = self.end_calls = 0

    def _derived_cache_error(self):
        for _, m in _modules(self.model):
            reason = getattr(m, "_derived_weight_cache_error", None)
            if reason is not None:
                return reason
        return None

    def update_weights_from_tensor(self, named_tensors, load_format=None):
        set_ranks(self.tp_rank, self.tp_size)
        _local.server_args = self.server_args
        error = self._derived_cache_error()
        if error is not None:
            return False, error
        named_tensors = [(n, t[self.tp_rank] if isinstance(t, list) else t)
                         for n, t in named_tensors]
        if load_format in self.server_args.custom_weight_loader:
            self.loader_calls += 1
            dynamic_import(load_format)(self.model, named_tensors)
        else:
            raise NotImplementedError(f"Unknown load_format={load_format}")
        return True, "Success"

    def begin_weight_update(self):
        self.begin_calls += 1
        for _, layer in _modules(self.model):
            qm = getattr(layer, "quant_method", None)
            if qm is not None and hasattr(qm, "restore_weights_before_loading"):
                qm.restore_weights_before_loading(layer)

    def end_weight_update(self, run_post_load: bool):
        self.end_calls += 1
        for _, layer in _modules(self.model):
            qm = getattr(layer, "quant_method", None)
            if qm is not None and hasattr(qm, "process_weights_after_loading"):
                qm.process_weights_after_loading(layer)


class TpWorker:
    """One TP rank: its target runner and, with a draft model, the draft's."""

    def __init__(self, model, server_args, tp_rank: int, tp_size: int, draft=None):
        self.model_runner = ModelRunner(model, server_args, tp_rank, tp_size)
        self.draft_runner = (ModelRunner(draft, server_args, tp_rank, tp_size, "draft")
                             if draft is not None else None)


class SchedulerBase:
    """A DP replica's scheduler over its TP workers (run concurrently, as
    their processes would), with the idle-only prefix-cache flush."""

    def __init__(self, models, server_args, drafts=None):
        drafts = drafts or [None] * len(models)
        self.workers = [TpWorker(m, server_args, r, len(models), d)
                        for r, (m, d) in enumerate(zip(models, drafts))]
        self.running_requests = 0
        self.paused = False
        self.cache_flushes = 0

    @property
    def runners(self):
        return [w.model_runner for w in self.workers]

    def flush_cache(self) -> bool:
        if self.running_requests and not self.paused:
            return False
        self.cache_flushes += 1
        return True

    def flush_cache_after_weight_update(self, recv_req) -> None:
        if recv_req.flush_cache:
            assert self.flush_cache(), "Cache flush failed after updating weights"

    def on_every_worker(self, fn):
        """fn(worker) on every TP worker at once; their answers."""
        out = [None] * len(self.workers)
        errors = []

        def run(i):
            try:
                out[i] = fn(self.workers[i])
            except BaseException as e:  # re-raised on the caller's thread
                errors.append(e)
        ts = [threading.Thread(target=run, args=(i,)) for i in range(len(self.workers))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if errors:
            raise errors[0]
        return out

    def pause_generation(self, recv_req=None):
        self.paused = True

    def continue_generation(self, recv_req=None):
        self.paused = False


class TokenizerManager:
    """Forwards each request to the replica's scheduler; the answers are
    the scheduler's ReqOutputs. ``weight_version`` is what the engine
    reports after an update (the scheduler's record)."""

    def __init__(self, scheduler):
        self.scheduler = scheduler

    async def update_weights_from_tensor(self, obj, request=None):
        return self.scheduler.update_weights_from_tensor(obj)

    async def begin_weight_update(self, obj, request=None):
        return self.scheduler.begin_weight_update(obj)

    async def end_weight_update(self, obj, request=None):
        return self.scheduler.end_weight_update(obj)

    async def pause_generation(self, obj, request=None):
        return self.scheduler.pause_generation(obj)

    async def continue_generation(self, obj, request=None):
        return self.scheduler.continue_generation(obj)


class EngineBase:
    """sglang.Engine over one DP replica: the weight-update methods of its
    public API and the tokenizer manager refit.sglang_engine drives."""

    io_struct = None  # the generation's module
    scheduler_cls = None

    def __init__(self, models, custom_weight_loader=(), drafts=None, ep_size=1, dp_size=1,
                 enable_dp_attention=False):
        self.server_args = types.SimpleNamespace(
            custom_weight_loader=list(custom_weight_loader), tp_size=len(models),
            ep_size=ep_size, dp_size=dp_size, enable_dp_attention=enable_dp_attention)
        self.scheduler = self.scheduler_cls(models, self.server_args, drafts)
        self.tokenizer_manager = TokenizerManager(self.scheduler)
        self.loop = asyncio.new_event_loop()

    def __del__(self):
        self.loop.close()

    def update_weights_from_tensor(self, named_tensors, load_format=None, flush_cache=True):
        obj = self.io_struct.UpdateWeightsFromTensorReqInput(
            serialized_named_tensors=[MultiprocessingSerializer.serialize(named_tensors)
                                      for _ in range(self.server_args.tp_size)],
            load_format=load_format, flush_cache=flush_cache)
        return self.loop.run_until_complete(
            self.tokenizer_manager.update_weights_from_tensor(obj, None))
