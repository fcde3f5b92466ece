"""refit for SGLang, through SGLang's custom weight loader.

SGLang's model runner (``update_weights_from_tensor(named_tensors,
load_format)``, read in sgl-project/sglang main, model_runner.py as of
commit 0005834cdb2a5b7472789ccbf0d3361b5cf853b8 and the weight updater it
delegates to) calls ``dynamic_import(load_format)(model, named_tensors)`` in
every TP worker when ``load_format`` is one of the server's
``--custom-weight-loader`` paths; the scheduler then flushes the prefix
(radix) cache when the request says ``flush_cache``. refit uses that hook:
launch SGLang with ``--custom-weight-loader refit.sglang.load`` and drive it
with ``Engine.update_weights_from_tensor(**request)`` (or the HTTP route of
the same name), where the request carries refit's command in its one tensor
name and an empty tensor:

* ``init_request(...)``: every worker registers its own parameters with
  refitd (in place, with the kernel layout its layers read:
  ``refit.engine_layouts.sglang_kernel_layout``), engine rank ``k = dp * TP +
  tp`` as refit's ``sglang:`` convention numbers them (tp: SGLang's tensor
  parallel rank; dp: ``SGLANG_DP_RANK``, which SGLang's router sets per
  replica, or ``dp_rank`` in the request);
* ``update_request(version)``: one refit round into the parameters, then
  SGLang's post-load steps (``refresh_sglang_derived``: DeepSeek's
  ``post_load_weights`` recomputing ``w_kc``/``w_vc``, ...), then the cache
  flush (``flush_cache=True``);
* ``shutdown_request()``: leave refit.

SGLang ignores what a custom loader returns and an exception there would
stop its scheduler, so :func:`load` never raises: it records the error
(:data:`last_errors`, the log, and refitd's key-value store under
``refit.sglang/<engine_id>/error/<rank>``), and the trainer side
(:func:`sync_weights`) checks the engine's committed version with refitd and
raises with the worker's error.
"""

import json
import logging
import os
import threading
from typing import Any, Callable, Dict, List, Optional

import refit
import refit.engine_worker as _ew
import refit.torch as _rt

__all__ = ["LOADER", "load", "init_request", "update_request", "shutdown_request",
           "engine_rank", "receiver", "join_engine", "sync_weights", "last_errors"]

LOADER = "refit.sglang.load"
_PREFIX = "refit.sglang/"
_log = logging.getLogger(__name__)

# Kernel-layout detector and derived-tensor refresh; None: refit.engine_layouts'.
layout_hooks: Optional[_ew.LayoutHooks] = None
# SGLang's parallel ranks: () -> (tp_rank, tp_size, pp_size); None: SGLang's own.
parallel_ranks: Optional[Callable[[], tuple]] = None
# Tensor factory for the requests; None: torch.empty(0, dtype=torch.uint8).
empty_tensor: Optional[Callable[[], Any]] = None

# This process's workers' receivers by id(model) (one in an SGLang TP
# worker process); _lock guards the dict, never a blocking call.
_receivers: Dict[int, _ew.EngineReceiver] = {}
_lock = threading.Lock()
last_errors: List[str] = []


def _sglang_ranks() -> tuple:
    if parallel_ranks is not None:
        return parallel_ranks()
    from sglang.srt.distributed import parallel_state as ps
    pp = ps.get_pp_group().world_size if hasattr(ps, "get_pp_group") else 1
    return (ps.get_tensor_model_parallel_rank(), ps.get_tensor_model_parallel_world_size(),
            pp)


def engine_rank(convention: str, dp_rank: Optional[int] = None) -> int:
    """This worker's engine rank in refit's sglang convention, ``k = dp *
    TP + tp``, after checking SGLang's TP size against the convention's.
    ``dp_rank``: the replica (default: ``SGLANG_DP_RANK``, else 0 when the
    convention has one replica). Raises RefitError INVALID_ARGUMENT when the
    sizes differ or under pipeline parallelism; FAILED_PRECONDITION when the
    convention has several replicas and the replica is unknown."""
    tp_rank, tp_size, pp = _sglang_ranks()
    params = _ew.convention_params(convention)
    dp = int(params.get("dp", "1"))
    if dp_rank is None and os.environ.get("SGLANG_DP_RANK") is not None:
        dp_rank = int(os.environ["SGLANG_DP_RANK"])
    if dp_rank is None:
        if dp > 1:
            raise refit.RefitError(9, f"convention {convention}: dp={dp}, but this SGLang "
                                      f"replica's index is unknown: set SGLANG_DP_RANK per "
                                      f"replica or give dp_rank in the init request")
        dp_rank = 0
    if not 0 <= dp_rank < dp:
        raise refit.RefitError(3, f"convention {convention}: replica {dp_rank} is outside "
                                  f"dp={dp}")
    _ew.check_parallel(convention, tp=int(tp_size), dp=dp, pp=int(pp), engine="sglang")
    return dp_rank * int(tp_size) + int(tp_rank)


def receiver(model: Any) -> Optional[_ew.EngineReceiver]:
    """This worker's refit receiver for ``model`` (in the SGLang TP worker's
    process: the kernel layout it detected, ``kernel``; the last version
    written, ``version``; the last round's statistics, ``last_stats``), or
    None when refit is not initialized on it."""
    with _lock:
        return _receivers.get(id(model))


def _device_of(model: Any) -> str:
    for _, p in model.named_parameters():
        return _ew.device_name(p.device)
    return "cpu"


def _error_key(engine_id: str, version: Any) -> str:
    return f"{_PREFIX}{engine_id}/error/{version}"


def _record(model: Any, op: str, err: BaseException, version: Any = None) -> None:
    msg = f"refit.sglang {op}: {err}"
    _log.error(msg)
    last_errors.append(msg)
    r = _receivers.get(id(model))
    if r is not None and r.member is not None and version is not None:
        try:
            r.member.kv_set(_error_key(r.engine_id, version), f"rank {r.rank}: {msg}")
        except refit.RefitError:
            pass  # refitd gone: the log and last_errors keep it


def _init(model: Any, args: Dict[str, Any]) -> None:
    with _lock:
        known = id(model) in _receivers
    if known:
        raise refit.RefitError(9, f"engine {args.get('engine_id')}: refit is initialized "
                                  f"on this worker already")
    rank = args.get("rank")
    if rank is None:
        rank = engine_rank(args["convention"], args.get("dp_rank"))
    device = args.get("device") or _device_of(model)
    r = _ew.join_or_refuse(
        lambda: _ew.EngineReceiver(
            model, rank=rank, device=device,
            server=args["server"], engine_id=args["engine_id"], model_name=args["model"],
            convention=args["convention"], hooks=layout_hooks or _ew.layout_hooks("sglang"),
            token=args.get("token"), job=args.get("job", "refit"),
            transport=args.get("transport"), timeout=float(args.get("timeout", 300.0)),
            staged=bool(args.get("staged", False)), staging_bytes=args.get("staging_bytes")),
        server=args["server"], side="engine", rank=rank, model=args["model"],
        convention=args["convention"], engine_id=args["engine_id"], device=device,
        token=args.get("token"), job=args.get("job", "refit"))
    with _lock:
        _receivers[id(model)] = r


def load(model: Any, named_tensors: List[Any]) -> None:
    """SGLang's custom weight loader (``--custom-weight-loader
    refit.sglang.load``): runs the refit commands named in
    ``named_tensors`` on this worker's model. Never raises (see the module
    docstring); a failure is logged, kept in :data:`last_errors` and
    reported through refitd."""
    for name, _ in named_tensors:
        if not name.startswith(_PREFIX):
            _record(model, "load", refit.RefitError(
                3, f"tensor {name}: refit.sglang.load takes only refit's requests "
                   f"(refit.sglang.init_request / update_request / shutdown_request)"))
            continue
        try:
            cmd = json.loads(name[len(_PREFIX):])
            op = cmd.get("op")
        except (ValueError, AttributeError) as e:
            _record(model, "load", e)
            continue
        try:
            if op == "init":
                _init(model, cmd)
            elif op == "update":
                with _lock:
                    r = _receivers.get(id(model))
                if r is None:
                    raise refit.RefitError(9, "refit is not initialized on this "
                                              "worker: send init_request first")
                r.refresh_plan()
                r.receive(cmd.get("version"), float(cmd.get("timeout", 300.0)))
            elif op == "shutdown":
                with _lock:
                    r = _receivers.pop(id(model), None)
                if r is not None:
                    r.close()
            else:
                raise refit.RefitError(3, f"unknown refit.sglang request {op!r}")
        except Exception as e:  # SGLang must keep serving: reported, not raised
            _record(model, str(op), e, cmd.get("version") if op == "update" else None)


def _request(cmd: Dict[str, Any], flush_cache: bool) -> Dict[str, Any]:
    make = empty_tensor
    if make is None:
        import torch
        make = lambda: torch.empty(0, dtype=torch.uint8)  # noqa: E731
    name = _PREFIX + json.dumps(cmd, sort_keys=True)
    return {"named_tensors": [(name, make())], "load_format": LOADER,
            "flush_cache": flush_cache}


def init_request(*, server: str, engine_id: str, model: str, convention: str,
                 token: Optional[str] = None, job: str = "refit",
                 transport: Optional[str] = None, timeout: float = 300.0,
                 dp_rank: Optional[int] = None, staged: bool = False) -> Dict[str, Any]:
    """Keyword arguments for ``update_weights_from_tensor`` that make every
    worker join refit (``convention``: e.g. "sglang:tp=4,dp=2"). ``staged``:
    the workers receive rounds while SGLang serves, and each update applies
    the round that arrived (docs/engines.md)."""
    cmd = {"op": "init", "server": server, "engine_id": engine_id, "model": model,
           "convention": convention, "token": token, "job": job,
           "transport": transport, "timeout": timeout}
    if dp_rank is not None:
        cmd["dp_rank"] = dp_rank
    if staged:
        cmd["staged"] = True
    return _request(cmd, flush_cache=False)


def update_request(version: Optional[int] = None, timeout: float = 300.0) -> Dict[str, Any]:
    """Keyword arguments for ``update_weights_from_tensor`` that run one
    refit round (``version``, None: the next one refitd announces) and then
    flush SGLang's prefix cache."""
    return _request({"op": "update", "version": version, "timeout": timeout},
                    flush_cache=True)


def shutdown_request() -> Dict[str, Any]:
    """Keyword arguments for ``update_weights_from_tensor`` that make every
    worker leave refit."""
    return _request({"op": "shutdown"}, flush_cache=False)


def _check_engine(member: refit.Member, engine_id: str, version: int) -> None:
    have = member.current_version(engine_id)
    if have == version:
        return
    try:
        why = ": " + member.kv_get(_error_key(engine_id, version), timeout=1.0)
    except refit.RefitError:
        why = " (see the SGLang workers' log: refit.sglang)"
    raise refit.RefitError(10, f"engine {engine_id}: holds version {have} after the "
                               f"update to {version}{why}")


def _engines(engines: Any) -> List[Any]:
    return list(engines) if isinstance(engines, (list, tuple)) else [engines]


def _all(calls: List[Callable[[], Any]]) -> Callable[[float], None]:
    joins = [_ew.in_thread(c) for c in calls]

    def join(timeout: float) -> None:
        for j in joins:
            j(timeout)
    return join


def join_engine(engines: Any, member: refit.Member, **init: Any) -> None:
    """Trainer rank 0: makes the SGLang engine join refit while this rank's
    ``member`` waits for its plan. ``engines``: one SGLang engine (anything
    with ``update_weights_from_tensor(named_tensors, load_format,
    flush_cache)``: sglang.Engine, or a client of its HTTP route), or a
    list of them, one per DP replica in replica order (each is told its
    index). ``init``: init_request's arguments (its ``timeout`` bounds the
    join and the plan here too). Raises refitd's status
    (FAILED_PRECONDITION naming the worker and why when one refused to
    join, e.g. for a layout refit does not write; DEADLINE_EXCEEDED when
    workers did not join and said nothing: their log says why)
    or the engine's exception."""
    es = _engines(engines)
    timeout = float(init.get("timeout", 300.0))
    join = _all([lambda e=e, i=i: e.update_weights_from_tensor(**init_request(
        **dict(init, **({"dp_rank": i} if len(es) > 1 else {}))))
        for i, e in enumerate(es)])
    member.prepare(timeout=timeout)
    join(timeout)


def sync_weights(engines: Any, member: refit.Member, *, engine_id: str, version: int,
                 rank: int, world: int, timeout: float = 300.0) -> None:
    """One weight update on every trainer rank: rank 0 sends
    update_request(version) to the engine(s) (as in join_engine)
    concurrently with the round and then checks with refitd that the engine
    committed ``version``; every rank publishes its buffers
    (refit.torch.publish). Raises RefitError as publish does; ABORTED with
    the workers' error when the engine did not commit the version; the
    engine's exception."""
    join = None
    if rank == 0:
        join = _all([lambda e=e: e.update_weights_from_tensor(
            **update_request(version, timeout)) for e in _engines(engines)])
    _rt.publish(member, version=version, rank=rank, world=world, timeout=timeout,
                prefix=f"refit.sglang/{engine_id}")
    if join:
        join(timeout)
        _check_engine(member, engine_id, version)
