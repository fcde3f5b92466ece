"""refit as a vLLM weight-transfer backend, and its trainer side.

Two generations of vLLM's weight-transfer interface are served; which one is
installed is detected at import (:data:`VLLM_INTERFACE`):

* ``"current"``: vLLM main as read on 2026-12-06, where the engines live in
  ``vllm.distributed.weight_transfer`` (base.py: the version defining
  ``WeightTransferUpdatePayload = dict | list[dict]``). The trainer side takes
  no config: ``TrainerWeightTransferEngine.__init__(*, client, source=None,
  is_sender=True)``, ``trainer_init(cls, init_info, *, client, source=None)``,
  and ``WeightTransferTrainerFactory.trainer_init(init_info=..., client=...,
  source=...)`` dispatches on ``init_info.backend``; the client's
  ``finish_weight_update(weight_version=None)`` records the version vLLM
  reports; the worker engine has no ``trainer_send_weights`` hook; a worker
  may retarget an update at the speculative draft model
  (``start_draft_weight_update``) when the engine's
  ``supports_draft_weight_update`` is true, and at a loaded LoRA adapter
  (``start_lora_weight_update``) when its ``supports_lora_weight_update`` is.
  The same API under ``vllm.backends.distributed.weight_transfer`` comes from
  the reorganisation vllm-project/vllm#54654 (055e47c, a8f1d79), closed
  without merging: refit imports it only where the main path is absent (a
  vLLM built from that branch).
* ``"pinned"``: commit 02f250b03f38822ccdb63f27a3005d10ca81f385 (base.py)
  and 047c993cc49c32e9b94f5bf826a9214e163eb982 (factory.py): the trainer
  engine and ``trainer_init`` take a config first, the factory takes the
  backend name, and ``finish_weight_update()`` takes no version.

After every update that was not a draft update, vLLM's GPU worker calls
``model_runner.reset_lora_state()`` (``finish_weight_update``, vllm/v1/worker/
gpu_worker.py on main, 2026-12-06): every loaded LoRA adapter is unloaded,
since it was computed against the old base weights. Load the adapters again
after each refit update if you serve any. refit does not update LoRA
adapters (``supports_lora_weight_update = False``: vLLM refuses
``start_lora_weight_update`` before it reaches refit).

A list payload (one ``update_info`` per worker) is indexed as vLLM's worker
indexes it, ``data_parallel_index * world_size + rank``; refit's engine
rank uses the same numbers (``k = data_parallel_index * TP + rank``).

Both construct the worker engine as ``(config, vllm_config, device,
model)``. vLLM releases whose engines take ``(config, parallel_config)`` give
a backend no model to write into: use :class:`RefitWorkerExtension` there
(it works with any vLLM). Without vLLM the classes stand on small local
bases with the same methods.

Inference side: :class:`RefitWeightTransferEngine` registers the worker's
own parameters (refit.engine_worker.EngineReceiver: in place, with the
weight format its layers hold, ``quant=fp8`` / ``mxfp8`` / ``nvfp4`` from
refit.engine_formats, and the kernel layout they read, from
refit.engine_layouts, added to the convention) at init; each ``update_weights`` is one refit
round, after which derived tensors are recomputed. Engine rank ``k =
data_parallel_index * TP + rank`` (vLLM resets ``data_parallel_rank`` to 0 in
a dense model's workers; ``data_parallel_index`` keeps the replica, as
vLLM's own NCCL engine numbers its workers). Draft-model updates are
refused: refit's buffers are the target model's, fixed at init.

Trainer side: :class:`RefitSource` (a ``WeightSource`` over a module's own
parameters, local shards included) and :class:`RefitTrainerEngine`, which
joins every trainer rank, and on rank 0 drives the engine through the
client while all ranks run the round.
"""

import inspect
import sys
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, Iterator, List, Optional, Tuple

import refit
import refit.engine_worker as _ew
from refit import engine_convention as _ec
import refit.torch as _rt

__all__ = ["HAVE_VLLM", "VLLM_INTERFACE", "VLLM_IMPORT_ROOT", "RefitInitInfo", "RefitUpdateInfo",
           "RefitWeightTransferEngine", "RefitSource", "RefitTrainerInitInfo",
           "RefitTrainerEngine", "RefitWorkerExtension", "engine_rank", "register"]

# The commits each generation was read at: vLLM main (no single commit: the
# stored base.py defining WeightTransferUpdatePayload, 2026-12-06), the
# unmerged vllm-project/vllm#54654 layout of the same API, and the pinned one.
VLLM_INTERFACE_COMMITS = {"current": "main (2026-12-06)",
                          "current-pr54654": "055e47c28003156421365af985d676fc921cb075",
                          "pinned": "02f250b03f38822ccdb63f27a3005d10ca81f385"}

# (kernel-layout detector, derived-tensor refresh[, weight-format detector]);
# None: refit.engine_layouts' and refit.engine_formats'.
layout_hooks: Optional[_ew.LayoutHooks] = None


def _hooks() -> _ew.LayoutHooks:
    return layout_hooks or _ew.layout_hooks("vllm")


def _takes(fn: Any, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


# Where vLLM keeps the weight-transfer engines: vllm.distributed (vLLM main,
# its releases and the pinned commit), else vllm.backends.distributed (a vLLM
# built from the unmerged vllm-project/vllm#54654).
_PACKAGES = ("vllm.distributed.weight_transfer", "vllm.backends.distributed.weight_transfer")
# The package the engines were imported from (None without vLLM).
VLLM_IMPORT_ROOT: Optional[str] = None


def _import(module: str) -> Any:
    """vLLM's weight_transfer ``module`` ("base", "factory") from the first
    package that has it; raises ImportError when none does."""
    import importlib
    global VLLM_IMPORT_ROOT
    errors = []
    for p in _PACKAGES:
        try:
            m = importlib.import_module(f"{p}.{module}")
        except ImportError as e:
            errors.append(str(e))
            continue
        VLLM_IMPORT_ROOT = p
        return m
    raise ImportError("; ".join(errors))


try:
    _base = _import("base")
    HAVE_VLLM = True
except ImportError:
    _base = None
    HAVE_VLLM = False

_TrainerBaseVllm = getattr(_base, "TrainerWeightTransferEngine", None)
if _base is None:
    VLLM_INTERFACE: Optional[str] = None
elif not _takes(_base.WeightTransferEngine.__init__, "model"):
    VLLM_INTERFACE = "release"  # (config, parallel_config): no model for a backend
elif _TrainerBaseVllm is not None and not _takes(_TrainerBaseVllm.__init__, "config"):
    VLLM_INTERFACE = "current"
else:
    VLLM_INTERFACE = "pinned"

if _base is not None:
    _EngineBase = _base.WeightTransferEngine
    _InitBase = _base.WeightTransferInitInfo
    _UpdateBase = _base.WeightTransferUpdateInfo
else:
    @dataclass
    class _InitBase:  # type: ignore[no-redef]
        """Stands for vLLM's WeightTransferInitInfo."""

    @dataclass
    class _UpdateBase:  # type: ignore[no-redef]
        """Stands for vLLM's WeightTransferUpdateInfo."""

    class _EngineBase:  # type: ignore[no-redef]
        """Stands for vLLM's WeightTransferEngine: its constructor's
        arguments and its dict -> dataclass parsing, raising ValueError on
        unknown or missing keys as vLLM's does."""
        init_info_cls: Any = None
        update_info_cls: Any = None

        def __init__(self, config: Any, vllm_config: Any, device: Any, model: Any) -> None:
            self.config = config
            self.vllm_config = vllm_config
            self.parallel_config = getattr(vllm_config, "parallel_config", None)
            self.model_config = getattr(vllm_config, "model_config", None)
            self.device = device
            self.model = model

        def parse_init_info(self, init_dict: Dict[str, Any]) -> Any:
            try:
                return self.init_info_cls(**init_dict)
            except TypeError as e:
                raise ValueError(f"Invalid init_info for {type(self).__name__}: {e}") from e

        def parse_update_info(self, update_dict: Dict[str, Any]) -> Any:
            try:
                return self.update_info_cls(**update_dict)
            except TypeError as e:
                raise ValueError(f"Invalid update_info for {type(self).__name__}: {e}") from e

if _TrainerBaseVllm is not None:
    _TrainerInitBase = _base.TrainerInitInfo
    _TrainerBase = _TrainerBaseVllm
    _SourceBase = _base.WeightSource
    _ParamMeta = _base.ParamMeta
else:  # no vLLM, or one from before the trainer-side engines
    @dataclass
    class _TrainerInitBase:  # type: ignore[no-redef]
        """Stands for vLLM's TrainerInitInfo: the trainer rank; rank 0 sends.
        (Before Python 3.10, which has no keyword-only fields, the rank
        defaults to None, which trainer_init refuses.)"""
        if sys.version_info >= (3, 10):
            rank: int = field(kw_only=True)
        else:
            rank: Optional[int] = None

        @property
        def is_sender(self) -> bool:
            return self.rank == 0

    class _SourceBase:  # type: ignore[no-redef]
        """Stands for vLLM's WeightSource."""

    class _TrainerBase:  # type: ignore[no-redef]
        """Stands for vLLM's current TrainerWeightTransferEngine."""

        def __init__(self, *, client: Any, source: Any = None,
                     is_sender: bool = True) -> None:
            self.client = client
            self.source = source
            self.is_sender = is_sender

    @dataclass(frozen=True)
    class _ParamMeta:  # type: ignore[no-redef]
        """Stands for vLLM's ParamMeta (name, dtype, shape)."""
        name: str
        dtype: Any
        shape: Tuple[int, ...]


@dataclass
class RefitInitInfo(_InitBase):
    """What a worker needs to join refit: refitd's ``server`` address, the
    ``engine_id`` of this vLLM instance and the ``model`` (a built-in name,
    a config.json path or a Hugging Face id in the local cache). The engine
    ``convention`` is read from vLLM's parallel config when left out
    (refit.engine_convention.vllm_convention; ``dp``: the replica count of a
    dense model served with data parallelism, which its workers cannot
    tell); given, e.g. "vllm:tp=2,dp=2", it is checked against the engine.
    The worker adds ``quant=`` and ``kernel=`` from its layers.
    ``rank``: the worker's engine rank (default: :func:`engine_rank`).
    ``device``: "cuda:N" or "cpu" (default: the worker's device).
    ``timeout`` bounds joining and the first plan, in seconds."""
    server: str
    engine_id: str
    model: str
    convention: Optional[str] = None
    dp: Optional[int] = None
    token: Optional[str] = None
    job: str = "refit"
    transport: Optional[str] = None
    rank: Optional[int] = None
    device: Optional[str] = None
    timeout: float = 300.0
    # Staged rounds (docs/engines.md): rounds arrive while vLLM serves, and
    # update_weights applies the one that arrived.
    staged: bool = False
    staging_bytes: Optional[int] = None


@dataclass
class RefitUpdateInfo(_UpdateBase):
    """One update: the round's ``version`` (None: whichever round refitd
    announces next) and the seconds it may take."""
    version: Optional[int] = None
    timeout: float = 300.0


# engine_rank(parallel_config, convention): the worker's engine rank, after
# checking vLLM's sizes against the convention (RefitError INVALID_ARGUMENT
# naming what differs); refit.engine_convention.vllm_engine_rank.
engine_rank = _ec.vllm_engine_rank


def _receiver(model: Any, device: Any, vllm_config: Any,
              info: RefitInitInfo) -> _ew.EngineReceiver:
    pc = getattr(vllm_config, "parallel_config", None)
    dev = info.device or _ew.device_name(device)

    def make() -> _ew.EngineReceiver:
        convention = _ec.given_or_derived(
            info.convention, info.dp, lambda: _ec.vllm_convention(
                pc, getattr(vllm_config, "model_config", None), dp=info.dp))
        rank = info.rank if info.rank is not None else engine_rank(pc, convention)
        return _ew.EngineReceiver(
            model, rank=rank, device=dev, server=info.server, engine_id=info.engine_id,
            model_name=info.model, convention=convention, hooks=_hooks(), token=info.token,
            job=info.job, transport=info.transport, timeout=info.timeout,
            staged=info.staged, staging_bytes=info.staging_bytes)
    # A worker that cannot join tells refitd, so that the trainer and the
    # other workers (waiting for the plan) fail at once naming it.
    return _ew.join_or_refuse(
        make, server=info.server, side="engine",
        rank=info.rank if info.rank is not None else _ec.vllm_worker_index(pc),
        model=info.model, engine_id=info.engine_id, device=dev, token=info.token,
        job=info.job, convention=info.convention or _ec.naming_convention(
            "vllm", getattr(pc, "tensor_parallel_size", 1) or 1, _ec.vllm_replica(pc)))


def _draft_refused(engine_id: Optional[str]) -> refit.RefitError:
    return refit.FailedPreconditionError(f"engine {engine_id or '?'}: refit refuses draft-model "
                               f"weight updates: its buffers are the target model's, "
                               f"registered at init; update the draft model by other "
                               f"means, or run without a draft model")


def _lora_refused(engine_id: Optional[str]) -> refit.RefitError:
    return refit.FailedPreconditionError(f"engine {engine_id or '?'}: refit refuses LoRA weight "
                               f"updates: its buffers are the base model's, registered at "
                               f"init; load the adapter with vLLM's LoRA API (vLLM unloads "
                               f"every adapter after each base-weight update)")


def local_update_info(update_info: Any, parallel_config: Any) -> Any:
    """This worker's entry of a list payload (one per worker, indexed as
    vLLM's worker does: ``data_parallel_index * world_size + rank``), or the
    payload itself. Raises RefitError INVALID_ARGUMENT when the list has no
    entry for this worker."""
    if not isinstance(update_info, list):
        return update_info
    pc = parallel_config
    dp = getattr(pc, "data_parallel_index", None)
    if dp is None:
        dp = getattr(pc, "data_parallel_rank", 0)
    i = int(dp) * int(getattr(pc, "world_size", 1)) + int(getattr(pc, "rank", 0))
    if not 0 <= i < len(update_info):
        raise refit.InvalidArgumentError(f"the update payload lists {len(update_info)} "
                                         f"workers' infos; this worker's is entry {i}")
    return update_info[i]


def _vllm_checksums(r: _ew.EngineReceiver) -> Dict[str, str]:
    from refit.checksums import vllm_form
    return vllm_form({r.rank: r.checksums()}, r.convention)


class RefitWeightTransferEngine(_EngineBase):
    """vLLM's weight-transfer backend "refit", one per worker.

    Invariant: ``receiver`` is None before init_transfer_engine and after
    shutdown; between them it holds the worker's parameters, registered in
    place. ``version`` is the last version written into them (0: none)."""

    init_info_cls = RefitInitInfo
    update_info_cls = RefitUpdateInfo
    supports_draft_weight_update = False
    supports_lora_weight_update = False

    def __init__(self, config: Any, vllm_config: Any, device: Any = None,
                 model: Any = None) -> None:
        """vLLM's constructor. Raises RefitError FAILED_PRECONDITION under a
        vLLM whose engines get no model (``(config, parallel_config)``)."""
        if model is None:
            raise refit.FailedPreconditionError("this vLLM builds weight-transfer engines without "
                                      "the model (config, parallel_config): refit writes "
                                      "into the model's parameters; use "
                                      "worker_extension_cls=\"refit.vllm.RefitWorkerExtension\"")
        super().__init__(config, vllm_config, device, model)
        self.receiver: Optional[_ew.EngineReceiver] = None
        self.init_info: Optional[RefitInitInfo] = None

    @property
    def member(self) -> Optional[refit.Member]:
        return self.receiver.member if self.receiver else None

    @property
    def version(self) -> int:
        return self.receiver.version if self.receiver else 0

    @property
    def last_stats(self) -> Dict[str, Any]:
        return self.receiver.last_stats if self.receiver else {}

    def init_transfer_engine(self, init_info: RefitInitInfo) -> None:
        """Registers the worker's parameters named by the engine convention
        (with the detected kernel layout) and waits for the plan. Raises
        RefitError: FAILED_PRECONDITION when already initialized;
        INVALID_ARGUMENT as engine_rank and EngineReceiver do; refitd's
        status (UNAVAILABLE, DEADLINE_EXCEEDED, ...)."""
        if isinstance(init_info, dict):
            init_info = self.parse_init_info(init_info)
        if self.receiver is not None:
            raise refit.FailedPreconditionError(f"engine {init_info.engine_id}: the refit "
                                      f"weight transfer is initialized already")
        self.receiver = _receiver(self.model, self.device, self.vllm_config, init_info)
        self.init_info = init_info

    def _r(self) -> _ew.EngineReceiver:
        if self.receiver is None:
            raise refit.FailedPreconditionError("the refit weight transfer is not initialized: "
                                      "call init_weight_transfer_engine first")
        return self.receiver

    def set_weight_update_target(self, model: Any, model_config: Any, **kwargs: Any) -> None:
        """Refuses any target but the registered model: RefitError
        FAILED_PRECONDITION naming LoRA updates for a LoRA adapter target
        (vLLM passes ``requires_model_reload=False`` for one), draft-model
        updates for another model."""
        engine_id = self.init_info.engine_id if self.init_info else None
        if kwargs.get("requires_model_reload") is False:
            raise _lora_refused(engine_id)
        if model is not getattr(self, "_default_model", self.model):
            raise _draft_refused(engine_id)

    def checksums(self) -> Dict[str, str]:
        """This worker's per-tensor SHA-256 of what refit wrote, keyed as
        vLLM's weight checker keys them (refit.checksums.vllm_form). Raises
        FAILED_PRECONDITION before init."""
        return _vllm_checksums(self._r())

    def start_weight_update(self) -> None:
        """Nothing to stage: weights are written in place. Takes refitd's
        newer plan when there is one. Raises FAILED_PRECONDITION before init
        or when the target is not the registered model; refitd's status."""
        r = self._r()
        if self.model is not r.model:
            raise _draft_refused(self.init_info.engine_id)
        r.refresh_plan()

    def receive_weights(self, update_info: RefitUpdateInfo, *unused: Any) -> None:
        """Runs one refit round into the worker's parameters and recomputes
        derived tensors (EngineReceiver.receive). Raises as it does."""
        self._r().receive(update_info.version, update_info.timeout)

    def update_weights(self, update_info: Any) -> None:
        """vLLM's entry point: parses ``update_info`` (this worker's entry
        of a list payload; ValueError on unknown keys) and receives the
        round. Raises as receive_weights and local_update_info do."""
        info = local_update_info(update_info, self.parallel_config)
        self.receive_weights(self.parse_update_info(dict(info)))

    def finish_weight_update(self) -> None:
        """Nothing to finalize for an in-place engine. Raises
        FAILED_PRECONDITION before init."""
        self._r()

    def shutdown(self) -> None:
        """Leaves refit's membership (bounded); a no-op when not
        initialized. Never raises."""
        r, self.receiver = self.receiver, None
        if r is not None:
            r.close()

    @staticmethod
    def trainer_send_weights(iterator: Any, trainer_args: Dict[str, Any]) -> None:
        """The pinned generation's abstract static hook (current vLLM has
        none). ``trainer_args``: ``member`` (a trainer refit.Member),
        ``version``, ``rank``, ``world`` and optional ``timeout``. Tensors of
        ``iterator`` that are not the member's own buffers are copied into
        them first; then the round runs (refit.torch.publish). Raises
        RefitError INVALID_ARGUMENT naming a tensor the member has no buffer
        for; as publish does."""
        member = trainer_args["member"]
        own = member.buffers
        for name, tensor in iterator:
            if name not in own:
                raise refit.InvalidArgumentError(f"rank {trainer_args['rank']}: parameter "
                                          f"{name}: the member has no buffer of that name")
            dst = own[name]
            if dst is not tensor and dst.data_ptr() != tensor.data_ptr():
                dst.copy_(tensor)
        _rt.publish(member, version=trainer_args["version"], rank=trainer_args["rank"],
                    world=trainer_args["world"], timeout=trainer_args.get("timeout", 300.0))


class RefitSource(_SourceBase):
    """A WeightSource over a trainer rank's module: its convention buffers
    (refit.torch.module_buffers), local shards as they are. Unlike vLLM's
    ModuleSource it gathers nothing: refit moves every rank's shard itself.
    metadata() lists the local shapes. Raises as module_buffers does."""

    def __init__(self, module: Any, *, rank: int, model: str, convention: str,
                 rename: Any = None, ignore: Any = (), ignore_unknown: bool = False) -> None:
        self.module = module
        self.rank = rank
        self.model = model
        self.convention = convention
        self._buffers = _rt.module_buffers(module, rank=rank, model=model,
                                           convention=convention, rename=rename,
                                           ignore=ignore, ignore_unknown=ignore_unknown)

    def buffers(self) -> Dict[str, Any]:
        """{convention name: local tensor}, the module's own memory."""
        return dict(self._buffers)

    def metadata(self) -> List[Any]:
        """ParamMeta (name, dtype, local shape) of every buffer."""
        return [_ParamMeta(n, t.dtype, tuple(t.shape)) for n, t in self._buffers.items()]

    def __iter__(self) -> Iterator[Tuple[str, Any]]:
        """A fresh pass over (name, local tensor), in the module's order."""
        return iter(list(self._buffers.items()))


@dataclass
class RefitTrainerInitInfo(_TrainerInitBase):
    """A trainer rank's refit settings: refitd's ``server``, the trainer
    ``world`` size, the ``model``, the trainer ``convention`` (e.g.
    "fsdp:dp=8"), the ``device`` of its buffers; the engine's ``engine_id``,
    ``engine_convention`` (empty: each worker reads it from vLLM's config)
    and ``engine_dp`` (a dense model's replica count, when vLLM serves it
    with data parallelism) go to the inference side's init info. ``rank``
    (keyword) is this trainer rank; rank 0 drives the engine. ``backend``
    (class-level) is the factory key, "refit"."""
    backend: ClassVar[str] = "refit"
    server: str = ""
    world: int = 1
    model: str = ""
    convention: str = ""
    engine_id: str = ""
    engine_convention: str = ""
    engine_dp: Optional[int] = None
    device: str = "cpu"
    token: Optional[str] = None
    job: str = "refit"
    transport: Optional[str] = None
    timeout: float = 300.0
    engine_staged: bool = False  # the workers stage rounds (RefitInitInfo.staged)

    def engine_init_info(self) -> Dict[str, Any]:
        """The init info dict each inference worker gets (RefitInitInfo)."""
        info = {"server": self.server, "engine_id": self.engine_id, "model": self.model,
                "token": self.token, "job": self.job, "transport": self.transport,
                "timeout": self.timeout}
        if self.engine_convention:
            info["convention"] = self.engine_convention
        if self.engine_dp is not None:
            info["dp"] = self.engine_dp
        if self.engine_staged:
            info["staged"] = True
        return info


class RefitTrainerEngine(_TrainerBase):
    """The trainer side of backend "refit", one per trainer rank.

    Invariant: ``member`` holds this rank's buffers (the source's) from
    trainer_init until shutdown; ``version`` is the last version sent."""

    init_info_cls = RefitTrainerInitInfo
    config_cls = dict

    def __init__(self, *, client: Any, source: Optional[RefitSource] = None,
                 is_sender: bool = True, init_info: RefitTrainerInitInfo,
                 member: refit.Member, config: Any = None) -> None:
        if _takes(_TrainerBase.__init__, "config"):  # the pinned generation
            super().__init__(config, client=client, source=source, is_sender=is_sender)
        else:
            super().__init__(client=client, source=source, is_sender=is_sender)
        self.init_info = init_info
        self.member: Optional[refit.Member] = member
        self.version = 0

    @classmethod
    def trainer_init(cls, *args: Any, client: Any, source: Optional[RefitSource] = None,
                     init_info: Optional[RefitTrainerInitInfo] = None,
                     config: Any = None) -> "RefitTrainerEngine":
        """``trainer_init(init_info, *, client, source)`` (current vLLM) or
        ``trainer_init(config, init_info, *, client, source)`` (pinned).
        Joins this rank with the source's buffers; rank 0 also calls
        ``client.init_weight_transfer_engine`` (concurrently: the engine's
        plan needs the trainer's members and the reverse); every rank waits
        for its plan. Raises RefitError: INVALID_ARGUMENT when ``source`` is
        not a RefitSource or the rank is missing; refitd's status; the
        client's exception."""
        if len(args) == 2:
            config, init_info = args
        elif len(args) == 1:
            init_info = args[0]
        if init_info is None or getattr(init_info, "rank", None) is None:
            raise refit.InvalidArgumentError("the trainer init info has no rank")
        if not isinstance(source, RefitSource):
            raise refit.InvalidArgumentError(f"rank {init_info.rank}: the refit trainer engine "
                                      f"takes a refit.vllm.RefitSource, not a "
                                      f"{type(source).__name__}")
        member = refit.Member(server=init_info.server, side="trainer", rank=init_info.rank,
                              model=init_info.model, convention=init_info.convention,
                              device=init_info.device, buffers=source.buffers(),
                              token=init_info.token, job=init_info.job,
                              transport=init_info.transport, timeout=init_info.timeout)
        sender = init_info.rank == 0
        try:
            join = (_ew.in_thread(lambda: client.init_weight_transfer_engine(
                init_info.engine_init_info())) if sender else None)
            member.prepare(timeout=init_info.timeout)
            if join:
                join(init_info.timeout)
        except BaseException:
            member.close()
            raise
        return cls(client=client, source=source, is_sender=sender, init_info=init_info,
                   member=member, config=config)

    def send_weights(self) -> None:
        """Sends the next version (one more than the last): every rank
        reports ready; rank 0 asks the engine to start and to update
        (concurrently with the round), starts the round and finishes the
        update, passing the version as vLLM's ``weight_version`` (current
        vLLM). Raises RefitError as refit.torch.publish does,
        FAILED_PRECONDITION after shutdown, or the client's exception."""
        if self.member is None:
            raise refit.FailedPreconditionError(f"rank {self.init_info.rank}: the trainer engine "
                                      f"is shut down")
        v = self.version + 1
        info = self.init_info
        join = None
        if self.is_sender:
            self.client.start_weight_update()
            join = _ew.in_thread(lambda: self.client.update_weights(
                {"version": v, "timeout": info.timeout}))
        _rt.publish(self.member, version=v, rank=info.rank, world=info.world,
                    timeout=info.timeout, prefix=f"refit.vllm/{info.job}")
        if join:
            join(info.timeout)
            if VLLM_INTERFACE == "pinned":
                self.client.finish_weight_update()
            else:
                self.client.finish_weight_update(weight_version=str(v))
        self.version = v

    def shutdown(self) -> None:
        """Closes this rank's member (bounded). Never raises."""
        m, self.member = self.member, None
        if m is not None:
            m.close()


class RefitWorkerExtension:
    """A vLLM worker extension (``worker_extension_cls="refit.vllm.RefitWorkerExtension"``)
    for any vLLM, driven through ``collective_rpc``: ``refit_init(init_info)``
    (the RefitInitInfo dict), ``refit_update(update_info)`` (the
    RefitUpdateInfo dict, returns the version written) and
    ``refit_shutdown()``. Uses the worker's ``model_runner.model``,
    ``device`` and ``vllm_config``; never constructs a vLLM engine."""

    def refit_init(self, init_info: Dict[str, Any]) -> None:
        """Joins as RefitWeightTransferEngine.init_transfer_engine does.
        Raises as it (ValueError for unknown keys)."""
        if getattr(self, "_refit_receiver", None) is not None:
            raise refit.FailedPreconditionError("refit_init was called on this worker already")
        try:
            info = RefitInitInfo(**dict(init_info))
        except TypeError as e:
            raise ValueError(f"Invalid init_info for RefitWorkerExtension: {e}") from e
        self._refit_receiver = _receiver(self.model_runner.model, self.device,
                                         self.vllm_config, info)

    def _refit_r(self) -> _ew.EngineReceiver:
        r = getattr(self, "_refit_receiver", None)
        if r is None:
            raise refit.FailedPreconditionError("refit_init has not been called on this worker")
        return r

    def refit_update(self, update_info: Any = None) -> int:
        """One round (``update_info``: the RefitUpdateInfo dict, or a list
        of them, one per worker); returns the version now in the parameters.
        Raises as EngineReceiver.receive and local_update_info do,
        FAILED_PRECONDITION before refit_init."""
        r = self._refit_r()
        info = local_update_info(update_info or {}, self.vllm_config.parallel_config)
        try:
            u = RefitUpdateInfo(**dict(info))
        except TypeError as e:
            raise ValueError(f"Invalid update_info for RefitWorkerExtension: {e}") from e
        r.refresh_plan()
        return r.receive(u.version, u.timeout)

    def refit_checksums(self) -> Dict[str, str]:
        """This worker's per-tensor SHA-256 of what refit wrote, keyed as
        vLLM's weight checker keys them (``collective_rpc("refit_checksums")``
        gathers every worker's). Raises FAILED_PRECONDITION before
        refit_init."""
        return _vllm_checksums(self._refit_r())

    def refit_shutdown(self) -> None:
        """Leaves refit; a no-op when not joined."""
        r, self._refit_receiver = getattr(self, "_refit_receiver", None), None
        if r is not None:
            r.close()


def register() -> bool:
    """Registers backend "refit" with vLLM's engine factory and trainer
    factory, lazily by module path; a second call is a no-op. The
    ``vllm.general_plugins`` entry point of refit's wheel. Returns False
    when vLLM's weight-transfer system is not installed, or its engines get
    no model (then use RefitWorkerExtension)."""
    try:
        base, factory = _import("base"), _import("factory")
    except ImportError:
        return False
    if not _takes(base.WeightTransferEngine.__init__, "model"):
        return False
    pairs = [(factory.WeightTransferEngineFactory, "RefitWeightTransferEngine")]
    trainer_factory = getattr(factory, "WeightTransferTrainerFactory", None)
    if trainer_factory is not None:
        pairs.append((trainer_factory, "RefitTrainerEngine"))
    for f, cls_name in pairs:
        try:
            f.register_engine("refit", __name__, cls_name)
        except ValueError:
            pass  # registered already (a second call, or the plugin ran)
    return True
