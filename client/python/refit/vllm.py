"""refit as a vLLM weight-transfer backend, and its trainer side.

Follows the interface of ``vllm.distributed.weight_transfer`` as of
vllm-project/vllm commit 02f250b03f38822ccdb63f27a3005d10ca81f385 (base.py)
and 047c993cc49c32e9b94f5bf826a9214e163eb982 (factory.py): a
``WeightTransferEngine`` per worker (``init_transfer_engine``, then per
update ``start_weight_update`` / ``update_weights`` / ``finish_weight_update``,
and ``shutdown``), registered with ``WeightTransferEngineFactory``; a
``TrainerWeightTransferEngine`` per trainer rank (``trainer_init`` with a
``WeightSource`` and a ``VLLMWeightSyncClient``, then ``send_weights``),
registered with ``WeightTransferTrainerFactory``. vLLM is optional: without
it the same classes stand on small local bases with the same methods, and
:class:`RefitWorkerExtension` serves vLLM versions that predate the
weight-transfer system, through ``collective_rpc``.

Inference side: :class:`RefitWeightTransferEngine` registers the worker's
own parameters (vLLM's fused layout, written in place: same pointers, CUDA
graphs stay valid) with refitd at init; each ``update_weights`` is one refit
round. start/finish have nothing to do for an in-place engine. ``shutdown``
leaves the membership. The init info carries refitd's address, the token,
the engine id, the model and the engine's convention.

Trainer side: :class:`RefitSource` (a ``WeightSource`` over a module's own
parameters, local shards included) and :class:`RefitTrainerEngine`, which
joins every trainer rank, and on rank 0 drives the engine through the
client while all ranks run the round.
"""

import dataclasses
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import refit
import refit.torch as _rt

__all__ = ["HAVE_VLLM", "RefitInitInfo", "RefitUpdateInfo", "RefitWeightTransferEngine",
           "RefitSource", "RefitTrainerInitInfo", "RefitTrainerEngine",
           "RefitWorkerExtension", "register"]

VLLM_INTERFACE_COMMIT = "02f250b03f38822ccdb63f27a3005d10ca81f385"

try:
    from vllm.distributed.weight_transfer.base import WeightTransferEngine as _EngineBase
    from vllm.distributed.weight_transfer.base import WeightTransferInitInfo as _InitBase
    from vllm.distributed.weight_transfer.base import WeightTransferUpdateInfo as _UpdateBase
    HAVE_VLLM = True
except ImportError:
    HAVE_VLLM = False

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

try:
    from vllm.distributed.weight_transfer.base import TrainerInitInfo as _TrainerInitBase
    from vllm.distributed.weight_transfer.base import TrainerWeightTransferEngine as _TrainerBase
    from vllm.distributed.weight_transfer.base import WeightSource as _SourceBase
    from vllm.distributed.weight_transfer.base import ParamMeta as _ParamMeta
except ImportError:  # no vLLM, or one from before the trainer-side engines
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
        """Stands for vLLM's TrainerWeightTransferEngine."""

        def __init__(self, config: Any, *, client: Any, source: Any,
                     is_sender: bool = True) -> None:
            self.config = config
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
    ``engine_id`` of this vLLM instance, the ``model`` (a built-in name or
    a config.json path) and the engine ``convention`` (e.g. "vllm:tp=2").
    ``rank``: the worker's rank in the convention (default: the worker's
    rank in vLLM's parallel config). ``device``: "cuda:N" or "cpu"
    (default: the worker's device). ``timeout`` bounds joining and the
    first plan, in seconds."""
    server: str
    engine_id: str
    model: str
    convention: str
    token: Optional[str] = None
    job: str = "refit"
    transport: Optional[str] = None
    rank: Optional[int] = None
    device: Optional[str] = None
    timeout: float = 300.0


@dataclass
class RefitUpdateInfo(_UpdateBase):
    """One update: the round's ``version`` (None: whichever round refitd
    announces next) and the seconds it may take."""
    version: Optional[int] = None
    timeout: float = 300.0


def _device_name(device: Any) -> str:
    """'cpu' or 'cuda:N' for a torch.device, a string or None (cpu)."""
    if device is None:
        return "cpu"
    if isinstance(device, str):
        return device
    kind, index = getattr(device, "type", str(device)), getattr(device, "index", None)
    if kind == "cuda" and index is None:
        import torch
        index = torch.cuda.current_device()
    return kind if kind == "cpu" else f"{kind}:{index}"


def _worker_rank(parallel_config: Any) -> int:
    """The worker's rank in its vLLM instance (ParallelConfig.rank)."""
    rank = getattr(parallel_config, "rank", None)
    if rank is None:
        raise refit.RefitError(3, "the worker's rank is unknown: give \"rank\" in the "
                                  "init info")
    return int(rank)


def _synchronize(device: str) -> None:
    """Waits for the device's queued work (CUDA buffers), so the next step
    reads the new weights; a no-op for host buffers."""
    if device.startswith("cuda"):
        import torch
        torch.cuda.synchronize(device)


class RefitWeightTransferEngine(_EngineBase):
    """vLLM's weight-transfer backend "refit", one per worker.

    Invariant: ``member`` is None before init_transfer_engine and after
    shutdown; between them it holds the worker's parameters, registered in
    place. ``version`` is the last version written into them (0: none)."""

    init_info_cls = RefitInitInfo
    update_info_cls = RefitUpdateInfo

    def __init__(self, config: Any, vllm_config: Any, device: Any, model: Any) -> None:
        super().__init__(config, vllm_config, device, model)
        self.member: Optional[refit.Member] = None
        self.init_info: Optional[RefitInitInfo] = None
        self.version = 0
        self.last_stats: Dict[str, Any] = {}

    def init_transfer_engine(self, init_info: RefitInitInfo) -> None:
        """Registers the worker's parameters named by the engine convention
        and waits for the plan. Raises RefitError: FAILED_PRECONDITION when
        already initialized; INVALID_ARGUMENT naming each parameter the
        convention expects that the model lacks or holds with another shape
        or dtype; refitd's status (UNAVAILABLE, DEADLINE_EXCEEDED, ...)."""
        if self.member is not None:
            raise refit.RefitError(9, f"engine {init_info.engine_id}: the refit "
                                      f"weight transfer is initialized already")
        if isinstance(init_info, dict):
            init_info = self.parse_init_info(init_info)
        rank = init_info.rank if init_info.rank is not None else _worker_rank(
            self.parallel_config)
        device = init_info.device or _device_name(self.device)
        buffers = _rt.module_buffers(self.model, side="engine", rank=rank,
                                     model=init_info.model, convention=init_info.convention,
                                     ignore_unknown=True)
        member = refit.Member(server=init_info.server, side="engine", rank=rank,
                              model=init_info.model, convention=init_info.convention,
                              engine_id=init_info.engine_id, device=device,
                              buffers=buffers, token=init_info.token, job=init_info.job,
                              transport=init_info.transport, timeout=init_info.timeout)
        try:
            member.prepare(timeout=init_info.timeout)
        except BaseException:
            member.close()
            raise
        self.member, self.init_info = member, init_info

    def _member(self) -> refit.Member:
        if self.member is None:
            raise refit.RefitError(9, "the refit weight transfer is not initialized: "
                                      "call init_weight_transfer_engine first")
        return self.member

    def start_weight_update(self) -> None:
        """Nothing to stage: weights are written in place. Takes refitd's
        newer plan when there is one. Raises FAILED_PRECONDITION before
        init; refitd's status from prepare()."""
        m = self._member()
        if m.plan_changed():
            m.prepare(timeout=self.init_info.timeout)

    def receive_weights(self, update_info: RefitUpdateInfo) -> None:
        """Runs one refit round into the worker's parameters: waits for
        refitd's next round (``update_info.version`` when given) and moves
        it. Raises RefitError: FAILED_PRECONDITION before init or when refitd
        announces another version than the one asked for; DEADLINE_EXCEEDED
        when no round comes within the timeout; ABORTED with refitd's reason
        when the round aborted (the parameters may then hold part of it:
        Member.engine_state says so)."""
        m = self._member()
        v = m.wait_for_round(timeout=update_info.timeout)
        if update_info.version is not None and v != update_info.version:
            raise refit.RefitError(9, f"engine {self.init_info.engine_id}: refitd "
                                      f"announced version {v}, the update asked for "
                                      f"{update_info.version}")
        self.last_stats = m.run_round(v, timeout=update_info.timeout)
        self.version = v

    def update_weights(self, update_info: Dict[str, Any]) -> None:
        """vLLM's entry point: parses ``update_info`` (ValueError on unknown
        keys), receive_weights, then waits for the device. Raises as
        receive_weights does."""
        self.receive_weights(self.parse_update_info(update_info))
        _synchronize(_device_name(self.device) if self.init_info.device is None
                     else self.init_info.device)

    def finish_weight_update(self) -> None:
        """Nothing to finalize for an in-place engine. Raises
        FAILED_PRECONDITION before init."""
        self._member()

    def shutdown(self) -> None:
        """Leaves refit's membership (bounded) and releases the parameters;
        a no-op when not initialized. Never raises."""
        m, self.member = self.member, None
        if m is None:
            return
        try:
            m.leave(timeout=10.0)
        except refit.RefitError:
            pass  # refitd gone or the member expired: nothing left to leave
        finally:
            m.close()

    @staticmethod
    def trainer_send_weights(iterator: Any, trainer_args: Dict[str, Any]) -> None:
        """vLLM's trainer-side static hook. ``trainer_args``: ``member`` (a
        trainer refit.Member), ``version``, ``rank``, ``world`` and optional
        ``timeout``. Tensors of ``iterator`` ((name, tensor) pairs) that are
        not the member's own buffers are copied into them first; then the
        round runs (refit.torch.publish). Raises RefitError INVALID_ARGUMENT
        naming a tensor the member has no buffer for; as publish does."""
        member = trainer_args["member"]
        own = member.buffers
        for name, tensor in iterator:
            if name not in own:
                raise refit.RefitError(3, f"rank {trainer_args['rank']}: parameter "
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
    "fsdp:dp=8"), the ``device`` of its buffers; the engine's ``engine_id``
    and ``engine_convention`` go to the inference side's init info. ``rank``
    (keyword) is this trainer rank; rank 0 drives the engine."""
    server: str = ""
    world: int = 1
    model: str = ""
    convention: str = ""
    engine_id: str = ""
    engine_convention: str = ""
    device: str = "cpu"
    token: Optional[str] = None
    job: str = "refit"
    transport: Optional[str] = None
    timeout: float = 300.0

    def engine_init_info(self) -> Dict[str, Any]:
        """The init info dict each inference worker gets (RefitInitInfo)."""
        return {"server": self.server, "engine_id": self.engine_id, "model": self.model,
                "convention": self.engine_convention, "token": self.token,
                "job": self.job, "transport": self.transport, "timeout": self.timeout}


def _in_thread(fn: Callable[[], None]) -> Callable[[float], None]:
    """Starts ``fn`` in a thread; returns a join(timeout) that re-raises
    fn's exception, or DEADLINE_EXCEEDED when fn is still running."""
    errors: List[BaseException] = []

    def body() -> None:
        try:
            fn()
        except BaseException as e:  # handed to the joiner
            errors.append(e)

    t = threading.Thread(target=body, daemon=True)
    t.start()

    def join(timeout: float) -> None:
        t.join(timeout)
        if t.is_alive():
            raise refit.RefitError(4, f"the inference side did not answer within "
                                      f"{timeout:g} s")
        if errors:
            raise errors[0]
    return join


class RefitTrainerEngine(_TrainerBase):
    """The trainer side of backend "refit", one per trainer rank.

    Invariant: ``member`` holds this rank's buffers (the source's) from
    trainer_init until shutdown; ``version`` is the last version sent."""

    init_info_cls = RefitTrainerInitInfo
    config_cls = dict

    def __init__(self, config: Any, *, client: Any, source: RefitSource,
                 is_sender: bool, init_info: RefitTrainerInitInfo,
                 member: refit.Member) -> None:
        super().__init__(config, client=client, source=source, is_sender=is_sender)
        self.init_info = init_info
        self.member: Optional[refit.Member] = member
        self.version = 0

    @classmethod
    def trainer_init(cls, config: Any, init_info: RefitTrainerInitInfo, *, client: Any,
                     source: RefitSource) -> "RefitTrainerEngine":
        """Joins this rank with the source's buffers; rank 0 also calls
        ``client.init_weight_transfer_engine`` (concurrently: the engine's
        plan needs the trainer's members and the reverse); every rank waits
        for its plan. Raises RefitError: INVALID_ARGUMENT when ``source`` is
        not a RefitSource or the rank is missing; refitd's status; the
        client's exception."""
        if init_info.rank is None:
            raise refit.RefitError(3, "the trainer init info has no rank")
        if not isinstance(source, RefitSource):
            raise refit.RefitError(3, f"rank {init_info.rank}: the refit trainer engine "
                                      f"takes a refit.vllm.RefitSource, not a "
                                      f"{type(source).__name__}")
        member = refit.Member(server=init_info.server, side="trainer", rank=init_info.rank,
                              model=init_info.model, convention=init_info.convention,
                              device=init_info.device, buffers=source.buffers(),
                              token=init_info.token, job=init_info.job,
                              transport=init_info.transport, timeout=init_info.timeout)
        sender = init_info.rank == 0
        try:
            join = (_in_thread(lambda: client.init_weight_transfer_engine(
                init_info.engine_init_info())) if sender else None)
            member.prepare(timeout=init_info.timeout)
            if join:
                join(init_info.timeout)
        except BaseException:
            member.close()
            raise
        return cls(config, client=client, source=source, is_sender=sender,
                   init_info=init_info, member=member)

    def send_weights(self) -> None:
        """Sends the next version (one more than the last): every rank
        reports ready; rank 0 asks the engine to start and to update
        (concurrently with the round), starts the round and finishes the
        update. Raises RefitError as refit.torch.publish does, FAILED_PRECONDITION
        after shutdown, or the client's exception."""
        if self.member is None:
            raise refit.RefitError(9, f"rank {self.init_info.rank}: the trainer engine "
                                      f"is shut down")
        v = self.version + 1
        info = self.init_info
        join = None
        if self.is_sender:
            self.client.start_weight_update()
            join = _in_thread(lambda: self.client.update_weights(
                {"version": v, "timeout": info.timeout}))
        _rt.publish(self.member, version=v, rank=info.rank, world=info.world,
                    timeout=info.timeout, prefix=f"refit.vllm/{info.job}")
        if join:
            join(info.timeout)
            self.client.finish_weight_update()
        self.version = v

    def shutdown(self) -> None:
        """Closes this rank's member (bounded). Never raises."""
        m, self.member = self.member, None
        if m is not None:
            m.close()


class RefitWorkerExtension:
    """A vLLM worker extension (``worker_extension_cls="refit.vllm.RefitWorkerExtension"``)
    for vLLM versions without the weight-transfer system, driven through
    ``collective_rpc``: ``refit_init(init_info)`` (the RefitInitInfo dict),
    ``refit_update(update_info)`` (the RefitUpdateInfo dict, returns the
    version written) and ``refit_shutdown()``. Uses the worker's
    ``model_runner.model``, ``device``, ``vllm_config`` and ``rank``."""

    def refit_init(self, init_info: Dict[str, Any]) -> None:
        """Joins as RefitWeightTransferEngine.init_transfer_engine does, with
        the worker's rank unless ``init_info`` names one. Raises as it."""
        engine = RefitWeightTransferEngine(None, self.vllm_config, self.device,
                                           self.model_runner.model)
        info = engine.parse_init_info(dict(init_info))
        if info.rank is None and getattr(self, "rank", None) is not None:
            info = dataclasses.replace(info, rank=self.rank)
        engine.init_transfer_engine(info)
        self._refit_engine = engine

    def _refit(self) -> RefitWeightTransferEngine:
        engine = getattr(self, "_refit_engine", None)
        if engine is None:
            raise refit.RefitError(9, "refit_init has not been called on this worker")
        return engine

    def refit_update(self, update_info: Optional[Dict[str, Any]] = None) -> int:
        """One update (start, the round, finish); returns the version now in
        the parameters. Raises as RefitWeightTransferEngine does."""
        engine = self._refit()
        engine.start_weight_update()
        engine.update_weights(dict(update_info or {}))
        engine.finish_weight_update()
        return engine.version

    def refit_shutdown(self) -> None:
        """Leaves refit; a no-op when not joined."""
        engine = getattr(self, "_refit_engine", None)
        if engine is not None:
            engine.shutdown()
            self._refit_engine = None


def register() -> bool:
    """Registers backend "refit" with vLLM's engine factory (and the
    trainer factory where vLLM has one), lazily by module path; a second
    call is a no-op. Usable as a ``vllm.general_plugins`` entry point.
    Returns False when vLLM's weight-transfer system is not installed."""
    try:
        from vllm.distributed.weight_transfer import factory
    except ImportError:
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
