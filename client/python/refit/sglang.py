"""refit for SGLang, through SGLang's custom weight loader.

SGLang's model runner calls ``dynamic_import(load_format)(model,
named_tensors)`` in every TP worker when ``load_format`` is one of the
server's ``--custom-weight-loader`` paths (model_executor/
model_runner_components/weight_updater.py, ``update_weights_from_tensor``,
sgl-project/sglang 027814efb69e3220bcae1c2dfd6a0ccc1aff2821). refit uses
that hook: launch SGLang with ``--custom-weight-loader refit.sglang.load``;
each request carries refit's command in its one tensor name:

* init: every worker registers its own parameters with refitd (in place,
  with the kernel layout its layers read), engine rank ``k = dp * TP + tp``
  (tp: SGLang's tensor parallel rank; dp: ``SGLANG_DP_RANK`` or the
  replica's index);
* update: the worker tells refitd it took the update, then runs one refit
  round into the parameters, then SGLang's post-load steps
  (``refresh_sglang_derived``);
* shutdown: leave refit.

Which SGLang generation runs is detected at import
(:data:`SGLANG_INTERFACE`, refit.sglang_engine): under weight-update
sessions every request goes inside ``begin_weight_update(selector="target")``
... ``end_weight_update()`` with ``selector="target"``; on main every request
says ``disable_draft_model``. Either way a speculative draft runner never
joins (a second model on the same engine rank is left alone). Every SGLang
answer ``(success, message)`` is checked: a refusal fails the round for every
trainer rank at once, naming the engine and SGLang's message, and the
workers that took the update are called off. Each update carries
``weight_version``. The prefix-cache flush happens only with the engine
paused (``sync_weights(pause=True)``): SGLang flushes only when idle.

Under sessions, layers whose weights begin would resize or end would
re-derive are refused at registration (refit.sglang_sessions).

SGLang ignores what a custom loader returns and an exception there would
stop its scheduler, so :func:`load` never raises: it records the error
(:data:`last_errors`, the log, and refitd's key-value store), and the
trainer side checks the engine's committed version with refitd and raises
with the worker's error.
"""

import json
import logging
import os
import threading
import time
from typing import Any, Callable, Dict, List, Optional

import refit
import refit.engine_worker as _ew
import refit.torch as _rt
from refit import engine_convention as _ec
from refit import sglang_engine as _se
from refit.sglang_sessions import check_session_layers

__all__ = ["LOADER", "SGLANG_INTERFACE", "load", "init_request", "update_request",
           "shutdown_request", "engine_rank", "receiver", "client", "join_engine",
           "sync_weights", "leave_engine", "last_errors"]

LOADER = "refit.sglang.load"
SGLANG_INTERFACE = _se.SGLANG_INTERFACE
client = _se.client
_PREFIX = "refit.sglang/"
_log = logging.getLogger(__name__)

# Kernel-layout detector and derived-tensor refresh; None: refit.engine_layouts'.
layout_hooks: Optional[_ew.LayoutHooks] = None
# SGLang's parallel ranks: () -> (tp_rank, tp_size, pp_size); None: SGLang's own.
parallel_ranks: Optional[Callable[[], tuple]] = None
# SGLang's server args in a worker: () -> ServerArgs; None: SGLang's own
# (refit.engine_convention.sglang_server_args).
server_args: Optional[Callable[[], Any]] = None
# Tensor factory for the requests; None: torch.empty(0, dtype=torch.uint8).
empty_tensor: Optional[Callable[[], Any]] = None

# This process's workers' receivers by id(model) (one in an SGLang TP
# worker process); _lock guards the dict, never a blocking call.
_receivers: Dict[int, _ew.EngineReceiver] = {}
_lock = threading.Lock()
last_errors: List[str] = []


def _key(engine_id: str, *parts: Any) -> str:
    """refitd store key of engine ``engine_id``: error/<v>,
    accepted/<v>/<rank>, abort/<v>, checksums/<v>/<rank>, ranks."""
    return "/".join([f"{_PREFIX}{engine_id}"] + [str(p) for p in parts])


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
            raise refit.FailedPreconditionError(f"convention {convention}: dp={dp}, but this SGLang "
                                      f"replica's index is unknown: set SGLANG_DP_RANK per "
                                      f"replica or give dp_rank in the init request")
        dp_rank = 0
    if not 0 <= dp_rank < dp:
        raise refit.InvalidArgumentError(f"convention {convention}: replica {dp_rank} is outside "
                                  f"dp={dp}")
    _ew.check_parallel(convention, tp=int(tp_size), dp=dp, pp=int(pp), engine="sglang")
    return dp_rank * int(tp_size) + int(tp_rank)


def _engine_world(convention: str) -> int:
    p = _ew.convention_params(convention)
    return int(p.get("tp", "1")) * int(p.get("dp", "1"))


def receiver(model: Any) -> Optional[_ew.EngineReceiver]:
    """This worker's refit receiver for ``model`` (in the SGLang TP worker's
    process: the kernel layout it detected, ``kernel``; the last version
    written, ``version``; the last round's statistics, ``last_stats``), or
    None when refit is not initialized on it."""
    with _lock:
        return _receivers.get(id(model))


def _twin(engine_id: str, model: Any, rank: Optional[int] = None) -> bool:
    """True when this process holds engine ``engine_id``'s receiver (of
    ``rank``, when given) for another model: ``model`` is the speculative
    draft runner's, which refit never updates."""
    with _lock:
        return any(r.engine_id == engine_id and r.model is not model
                   and (rank is None or r.rank == rank) for r in _receivers.values())


def _device_of(model: Any) -> str:
    for _, p in model.named_parameters():
        return _ew.device_name(p.device)
    return "cpu"


def _record(model: Any, op: str, err: BaseException, version: Any = None) -> None:
    msg = f"refit.sglang {op}: {err}"
    _log.error(msg)
    last_errors.append(msg)
    r = _receivers.get(id(model))
    if r is not None and r.member is not None and version is not None:
        try:
            r.member.kv_set(_key(r.engine_id, "error", version), f"rank {r.rank}: {msg}")
        except refit.RefitError:
            pass  # refitd gone: the log and last_errors keep it


def _hooks() -> _ew.LayoutHooks:
    hooks = layout_hooks or _ew.layout_hooks("sglang")
    if SGLANG_INTERFACE != "sessions":
        return hooks
    detect = hooks[0]

    def detect_in_sessions(model: Any) -> Any:
        check_session_layers(model)
        return detect(model)
    return (detect_in_sessions,) + tuple(hooks[1:])


def _convention_and_rank(args: Dict[str, Any]) -> tuple:
    """(convention, engine rank) of this worker: the init request's
    convention, else SGLang's own (its server args, ``args["dp"]``
    replicas). Raises as engine_rank and sglang_convention do; before
    raising, tells refitd that this worker refuses to join (fail fast)."""
    try:
        convention = _ec.given_or_derived(
            args.get("convention"), args.get("dp"), lambda: _ec.sglang_convention(
                (server_args or _ec.sglang_server_args)(), tp_size=int(_sglang_ranks()[1]),
                dp=args.get("dp")))
        rank = args.get("rank")
        if rank is None:
            rank = engine_rank(convention, args.get("dp_rank"))
        return convention, rank
    except refit.RefitError as e:
        tp_rank, tp_size, _ = _sglang_ranks()
        dp_rank = int(args.get("dp_rank") or os.environ.get("SGLANG_DP_RANK") or 0)
        _ew.tell_refusal(e, server=args["server"], side="engine",
                         rank=dp_rank * int(tp_size) + int(tp_rank), model=args["model"],
                         convention=_ec.naming_convention("sglang", tp_size, dp_rank),
                         engine_id=args["engine_id"], device="cpu", token=args.get("token"),
                         job=args.get("job", "refit"))
        raise


def _init(model: Any, args: Dict[str, Any]) -> None:
    engine_id = args["engine_id"]
    with _lock:
        known = id(model) in _receivers
    if known:
        raise refit.FailedPreconditionError(f"engine {engine_id}: refit is initialized on this "
                                  f"worker already")
    convention, rank = _convention_and_rank(args)
    if _twin(engine_id, model, rank):
        _log.info("refit.sglang: engine %s rank %d holds a second model (the speculative "
                  "draft); refit updates the target model only", engine_id, rank)
        return
    device = args.get("device") or _device_of(model)
    r = _ew.join_or_refuse(
        lambda: _ew.EngineReceiver(
            model, rank=rank, device=device,
            server=args["server"], engine_id=engine_id, model_name=args["model"],
            convention=convention, hooks=_hooks(),
            token=args.get("token"), job=args.get("job", "refit"),
            transport=args.get("transport"), timeout=float(args.get("timeout", 300.0)),
            staged=bool(args.get("staged", False)), staging_bytes=args.get("staging_bytes")),
        server=args["server"], side="engine", rank=rank, model=args["model"],
        convention=convention, engine_id=engine_id, device=device,
        token=args.get("token"), job=args.get("job", "refit"))
    with _lock:
        _receivers[id(model)] = r
    if rank == 0:  # a key of refitd's store belongs to the member that wrote it
        r.member.kv_set(_key(engine_id, "ranks"), str(_engine_world(r.convention)))


def _update(model: Any, cmd: Dict[str, Any]) -> None:
    with _lock:
        r = _receivers.get(id(model))
    if r is None:
        if _twin(cmd.get("engine_id", ""), model):
            return  # the draft runner: refit updates the target model only
        raise refit.FailedPreconditionError("refit is not initialized on this worker: send "
                                  "init_request first")
    version = cmd.get("version")
    r.refresh_plan()
    r.member.kv_set(_key(r.engine_id, "accepted", version, r.rank), "1")
    r.receive(version, float(cmd.get("timeout", 300.0)),
              abort_key=_key(r.engine_id, "abort", version))
    if cmd.get("checksums"):
        r.member.kv_set(_key(r.engine_id, "checksums", version, r.rank),
                        json.dumps(r.checksums(), sort_keys=True))


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
                _update(model, cmd)
            elif op == "shutdown":
                with _lock:
                    r = _receivers.pop(id(model), None)
                if r is not None:
                    r.close()
            else:
                raise refit.InvalidArgumentError(f"unknown refit.sglang request {op!r}")
        except Exception as e:  # SGLang must keep serving: reported, not raised
            _record(model, str(op), e, cmd.get("version") if op == "update" else None)


def _request(cmd: Dict[str, Any], *, flush_cache: bool, interface: Optional[str],
             weight_version: Optional[str] = None) -> Dict[str, Any]:
    make = empty_tensor
    if make is None:
        import torch
        make = lambda: torch.empty(0, dtype=torch.uint8)  # noqa: E731
    name = _PREFIX + json.dumps(cmd, sort_keys=True)
    req = {"named_tensors": [(name, make())], "load_format": LOADER,
           "flush_cache": flush_cache}
    req.update(_se.weight_calls(interface or SGLANG_INTERFACE or "main"))
    if weight_version is not None:
        req["weight_version"] = weight_version
    return req


def init_request(*, server: str, engine_id: str, model: str,
                 convention: Optional[str] = None, dp: Optional[int] = None,
                 token: Optional[str] = None, job: str = "refit",
                 transport: Optional[str] = None, timeout: float = 300.0,
                 dp_rank: Optional[int] = None,
                 interface: Optional[str] = None, staged: bool = False) -> Dict[str, Any]:
    """Keyword arguments of refit's engine protocol's
    ``update_weights_from_tensor`` that make every worker join refit
    (``convention``: e.g. "sglang:tp=4,dp=2"; left out, each worker reads
    it from SGLang's server args and parallel state, with ``dp`` replicas
    (one server each; default 1): refit.engine_convention.sglang_convention;
    ``interface``: the SGLang generation, default :data:`SGLANG_INTERFACE`;
    ``staged``: the workers receive rounds while SGLang serves, and each
    update applies the round that arrived, docs/engines.md). Under
    sessions, send it between begin_weight_update and end_weight_update."""
    cmd = {"op": "init", "server": server, "engine_id": engine_id, "model": model,
           "convention": convention, "token": token, "job": job,
           "transport": transport, "timeout": timeout}
    if dp is not None:
        cmd["dp"] = dp
    if dp_rank is not None:
        cmd["dp_rank"] = dp_rank
    if staged:
        cmd["staged"] = True
    return _request(cmd, flush_cache=False, interface=interface)


def update_request(version: int, *, engine_id: str, timeout: float = 300.0,
                   flush_cache: bool = False, paused: bool = False, checksums: bool = False,
                   interface: Optional[str] = None) -> Dict[str, Any]:
    """Keyword arguments for one refit round of version ``version`` into
    engine ``engine_id``, stamped ``weight_version=str(version)``;
    ``checksums``: each worker then reports its per-tensor SHA-256.
    ``flush_cache`` flushes SGLang's prefix cache after the round and needs
    the engine paused (``paused``). Raises FailedPreconditionError for a
    flush of an engine not said to be paused: SGLang flushes only when idle
    and fails the update otherwise (flush_cache_after_weight_update,
    scheduler weight_updater.py at b2d53a07)."""
    if flush_cache and not paused:
        raise refit.FailedPreconditionError(
            f"engine {engine_id}: flush_cache=True needs the engine paused: SGLang "
            f"flushes the prefix cache only when idle and fails the update otherwise; "
            f"pause it (pause_generation) and pass paused=True, or use "
            f"refit.sglang.sync_weights(pause=True)")
    return _request({"op": "update", "engine_id": engine_id, "version": version,
                     "timeout": timeout, "checksums": checksums},
                    flush_cache=flush_cache, interface=interface,
                    weight_version=str(version))


def shutdown_request(interface: Optional[str] = None) -> Dict[str, Any]:
    """Keyword arguments that make every worker leave refit (under
    sessions, send it between begin and end: :func:`leave_engine` does)."""
    return _request({"op": "shutdown"}, flush_cache=False, interface=interface)


# --- the trainer side ----------------------------------------------------------

class _Call:
    """fn() on its own thread: done(), and result(timeout) returning its
    value or re-raising its exception (DEADLINE_EXCEEDED when still
    running)."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._done = threading.Event()
        self._out: List[Any] = []

        def body() -> None:
            try:
                self._out.append((True, fn()))
            except BaseException as e:  # handed to result()
                self._out.append((False, e))
            finally:
                self._done.set()
        threading.Thread(target=body, daemon=True).start()

    def done(self) -> bool:
        return self._done.is_set()

    def result(self, timeout: float) -> Any:
        if not self._done.wait(timeout):
            raise refit.DeadlineExceededError(f"the SGLang engine did not answer within "
                                              f"{timeout:g} s")
        ok, v = self._out[0]
        if not ok:
            raise v
        return v


def _engines(engines: Any) -> List[Any]:
    es = list(engines) if isinstance(engines, (list, tuple)) else [engines]
    return [client(e) for e in es]


def _in_session(e: Any, engine_id: str, interface: str, fn: Callable[[], Any]) -> Any:
    """fn(), inside begin_weight_update(selector="target") ...
    end_weight_update() under sessions; each answer checked."""
    if interface != "sessions":
        return fn()
    _se.check(engine_id, "begin_weight_update", e.begin_weight_update(selector="target"))
    try:
        out = fn()
    except BaseException:
        _quietly(lambda: e.end_weight_update())
        raise
    _se.check(engine_id, "end_weight_update", e.end_weight_update())
    return out


def _quietly(fn: Callable[[], Any]) -> None:
    """Best effort on the way out of a failure that is already reported."""
    try:
        fn()
    except Exception as e:  # the first failure is the one raised
        _log.warning("refit.sglang: cleaning up after a failed update: %s", e)


def join_engine(engines: Any, member: refit.Member, **init: Any) -> None:
    """Trainer rank 0: makes the SGLang engine join refit while this rank's
    ``member`` waits for its plan. ``engines``: one engine (an
    ``sglang.Engine``, driven through :class:`refit.sglang_engine.
    EngineClient`, or an object of refit's engine protocol such as a client
    of SGLang's HTTP routes), or a list, one per DP replica in replica
    order. ``init``: init_request's arguments (its ``timeout`` bounds the
    join and the plan; without ``convention`` every worker reads its own
    from SGLang, one replica per engine given). When SGLang refuses the
    init request, refitd hears it at once (refit.refuse) and every member
    waiting for a plan fails naming the engine and SGLang's message. Raises refitd's status
    (FAILED_PRECONDITION naming the worker and why when one refused to
    join; DEADLINE_EXCEEDED when workers did not join and said nothing:
    their log says why) or the engine's exception."""
    es = _engines(engines)
    interface = _se.interface_of(es[0])
    timeout = float(init.get("timeout", 300.0))
    if not init.get("convention"):
        init = dict(init, dp=len(es))  # each worker reads the rest from SGLang
    # The engine ranks SGLang's refusal is told for: replica i's first; with
    # the convention left to the workers, only the first replica's is known.
    tp = (int(_ew.convention_params(init["convention"]).get("tp", "1"))
          if init.get("convention") else None)

    def join_one(i: int, e: Any) -> None:
        req = init_request(**dict(init, interface=interface,
                                  **({"dp_rank": i} if len(es) > 1 else {})))
        try:
            _in_session(e, init["engine_id"], interface, lambda: _se.check(
                init["engine_id"], "the init request", e.update_weights_from_tensor(**req)))
        except Exception as err:
            if tp is None and i > 0:
                raise
            _quietly(lambda: refit.refuse(
                str(err), server=init["server"], side="engine", rank=i * (tp or 1),
                model=init["model"], convention=init.get("convention") or "sglang:tp=1",
                engine_id=init["engine_id"], device=member.device, token=init.get("token"),
                job=init.get("job", "refit")))  # refitd gone, or the rank joined already
            raise
    calls = [_Call(lambda i=i, e=e: join_one(i, e)) for i, e in enumerate(es)]
    try:
        member.prepare(timeout=timeout)
    except BaseException:
        # The workers fail at once too (refitd tells every plan waiter):
        # let their requests and sessions finish before the caller goes on.
        for c in calls:
            _quietly(lambda c=c: c.result(min(timeout, 10.0)))
        raise
    for c in calls:
        c.result(timeout)


def _await_accepted(member: refit.Member, engine_id: str, version: int, calls: List[_Call],
                    timeout: float) -> None:
    """Waits until every engine rank took update ``version`` (its loader
    started) or an engine answered first: raises FAILED_PRECONDITION with
    SGLang's message when it refused, DEADLINE_EXCEEDED naming the ranks
    that did not start within ``timeout``."""
    n = int(member.kv_get(_key(engine_id, "ranks"), timeout=min(timeout, 10.0)))
    pending = list(range(n))
    deadline = time.monotonic() + timeout
    while pending:
        try:
            member.kv_get(_key(engine_id, "accepted", version, pending[0]), timeout=0.05)
            pending.pop(0)
            continue
        except refit.DeadlineExceededError:
            pass
        for c in calls:
            if c.done():
                _se.check(engine_id, "update_weights_from_tensor", c.result(0))
                raise refit.FailedPreconditionError(
                    f"engine {engine_id}: SGLang answered the update to version {version} "
                    f"before engine ranks {pending} took it (see the workers' log: "
                    f"refit.sglang)")
        if time.monotonic() > deadline:
            raise refit.DeadlineExceededError(
                f"engine {engine_id}: engine ranks {pending} did not take the update to "
                f"version {version} within {timeout:g} s")


def _check_engine(member: refit.Member, engine_id: str, version: int) -> None:
    have = member.current_version(engine_id)
    if have == version:
        return
    try:
        why = ": " + member.kv_get(_key(engine_id, "error", version), timeout=1.0)
    except refit.RefitError:
        why = " (see the SGLang workers' log: refit.sglang)"
    raise refit.AbortedError(f"engine {engine_id}: holds version {have} after the "
                               f"update to {version}{why}")


def _checksums(member: refit.Member, engine_id: str, version: int,
               timeout: float) -> Dict[int, Dict[str, str]]:
    n = int(member.kv_get(_key(engine_id, "ranks"), timeout=timeout))
    return {k: json.loads(member.kv_get(_key(engine_id, "checksums", version, k),
                                        timeout=timeout)) for k in range(n)}


def _call_off(member: refit.Member, engine_id: str, version: int, why: str) -> None:
    """Tells the other trainer ranks (publish's go key) and the engine
    workers that took the update (its abort key) that round ``version``
    will not run."""
    prefix = _key(engine_id)
    _rt._say(member, _rt._go_key(prefix, version), _rt._FAILED + why)
    _rt._say(member, _key(engine_id, "abort", version), why)


def _close(es: List[Any], engine_id: str, *, sessions: bool, pause: bool,
           expected: Optional[List[Dict[str, Dict[str, str]]]]) -> None:
    """end_weight_update (with replica i's expected checksums) and
    continue_generation on every engine, all of them even when one says no;
    raises the first refusal."""
    errors: List[BaseException] = []
    for i, e in enumerate(es):
        end = {} if expected is None else {"expected_base_weight_checksums": expected[i]}
        steps = ([("end_weight_update", lambda: e.end_weight_update(**end))] if sessions
                 else []) + ([("continue_generation", e.continue_generation)] if pause else [])
        for call, fn in steps:
            try:
                _se.check(engine_id, call, fn())
            except Exception as err:  # the others still run; the first is raised
                errors.append(err)
    if errors:
        raise errors[0]


def sync_weights(engines: Any, member: refit.Member, *, engine_id: str, version: int,
                 rank: int, world: int, timeout: float = 300.0, pause: bool = False,
                 checksums: bool = False,
                 expected_checksums: Optional[List[Dict[str, Dict[str, str]]]] = None
                 ) -> Optional[Dict[int, Dict[str, str]]]:
    """One weight update on every trainer rank. Rank 0 drives the engine(s)
    (as in join_engine): with ``pause``, pause_generation first and
    continue_generation last, and the prefix cache flushed after the round;
    under sessions, begin_weight_update(selector="target") and
    end_weight_update() around the update; the update request (version
    stamped as ``weight_version``) goes out, and the round starts once every
    engine rank took it. Every rank publishes its buffers
    (refit.torch.publish). With ``checksums``, rank 0 returns each engine
    rank's per-tensor SHA-256 ({engine rank: {name: sha}}, refit.checksums
    has the engines' forms); otherwise None. ``expected_checksums`` (the
    session line only): per replica, SGLang's
    ``expected_base_weight_checksums`` (refit.checksums.sglang_form), which
    end_weight_update verifies before it finalizes the update.

    Raises RefitError as publish does; FAILED_PRECONDITION naming the engine
    and SGLang's message when it refuses a call (within seconds, on every
    trainer rank: the others through publish's go key); ABORTED with the
    workers' error when the engine did not commit the version; the engine's
    exception."""
    prefix = _key(engine_id)
    if rank != 0:
        _rt.publish(member, version=version, rank=rank, world=world, timeout=timeout,
                    prefix=prefix)
        return None
    es = _engines(engines)
    interface = _se.interface_of(es[0])
    sessions = interface == "sessions"
    if expected_checksums is not None and (not sessions or len(expected_checksums) != len(es)):
        raise refit.InvalidArgumentError(
            f"engine {engine_id}: expected_checksums takes one SGLang "
            f"expected_base_weight_checksums per replica ({len(es)}), and only SGLang's "
            f"session line checks them (this engine runs {interface}); compare "
            f"checksums=True's result instead")
    opened: List[Any] = []
    calls: List[_Call] = []
    try:
        for e in es:
            if pause:
                _se.check(engine_id, "pause_generation", e.pause_generation())
            opened.append(e)
            if sessions:
                _se.check(engine_id, "begin_weight_update",
                          e.begin_weight_update(selector="target"))
        req = update_request(version, engine_id=engine_id, timeout=timeout,
                             flush_cache=pause, paused=pause, checksums=checksums,
                             interface=interface)
        calls = [_Call(lambda e=e: e.update_weights_from_tensor(**req)) for e in es]
        _await_accepted(member, engine_id, version, calls, timeout)
        _rt.publish(member, version=version, rank=rank, world=world, timeout=timeout,
                    prefix=prefix)
        for c in calls:
            _se.check(engine_id, "update_weights_from_tensor", c.result(timeout))
    except BaseException as err:
        _call_off(member, engine_id, version, str(err))
        for c in calls:
            _quietly(lambda c=c: c.result(5.0))
        for e in opened:
            if sessions:
                _quietly(lambda e=e: e.end_weight_update())
            if pause:
                _quietly(lambda e=e: e.continue_generation())
        raise
    _close(es, engine_id, sessions=sessions, pause=pause, expected=expected_checksums)
    _check_engine(member, engine_id, version)
    return _checksums(member, engine_id, version, timeout) if checksums else None


def leave_engine(engines: Any, *, engine_id: str = "") -> None:
    """Makes every worker of the engine(s) leave refit (inside a session
    where SGLang has them). Raises FAILED_PRECONDITION naming the engine and
    SGLang's message when it refuses, or the engine's exception."""
    for e in _engines(engines):
        interface = _se.interface_of(e)
        _in_session(e, engine_id, interface, lambda e=e: _se.check(
            engine_id, "the shutdown request",
            e.update_weights_from_tensor(**shutdown_request(interface))))
