"""The SGLang engine as refit's trainer side drives it: which weight-update
generation it runs, its answers, and a client over ``sglang.Engine``.

Two generations of SGLang's weight-update path are current, told apart by
``sglang.srt.managers.io_struct`` (read in sgl-project/sglang,
2026-12-06):

* ``"main"``: no sessions. ``update_weights_from_tensor`` reaches the
  speculative draft worker too unless the request says
  ``disable_draft_model`` (managers/scheduler_components/weight_updater.py
  at b2d53a07e07c664d4318934b5dd699246be30677: ``worker = self.tp_worker if
  recv_req.disable_draft_model else self.draft_worker or self.tp_worker``).
* ``"sessions"``: io_struct has ``BeginWeightUpdateReqInput``. An update
  outside ``begin_weight_update`` ... ``end_weight_update`` is refused
  (``"update_weights_from_tensor must run between begin_weight_update() and
  end_weight_update()"``; older builds of the line assert instead, which
  stops the scheduler); ``selector`` ("target", "draft", "all") picks the
  runners, recorded at begin and reused by end; ``weight_version`` is
  recorded when end commits (scheduler_components/weight_updater.py of the
  session line, the version with ``_WeightUpdateSession``; the model
  runner's updater at 027814efb69e3220bcae1c2dfd6a0ccc1aff2821).

Both answer every weight call with ``(success, message)``
(``UpdateWeightsFromTensorReqOutput``) and flush the prefix cache after a
successful update when the request says ``flush_cache``, asserting that the
flush succeeded: SGLang flushes only an idle scheduler, so a flush while
requests run fails the update (``flush_cache_after_weight_update``, both
commits above).

``sglang.Engine.update_weights_from_tensor(named_tensors, load_format,
flush_cache)`` takes no selector, ``disable_draft_model`` or
``weight_version``: :class:`EngineClient` sends SGLang's request objects
through the engine's tokenizer manager instead.
"""

import asyncio
import dataclasses
import inspect
from typing import Any, Dict, Optional, Tuple

import refit

__all__ = ["SGLANG_INTERFACE", "SGLANG_INTERFACE_COMMITS", "detect_interface",
           "interface_of", "answer", "check", "EngineClient", "client", "weight_calls"]

SGLANG_INTERFACE_COMMITS = {
    "main": "b2d53a07e07c664d4318934b5dd699246be30677",
    "sessions": "027814efb69e3220bcae1c2dfd6a0ccc1aff2821",
}


def detect_interface() -> Optional[str]:
    """"sessions" when the installed SGLang has weight-update sessions,
    "main" when it has none, None without SGLang."""
    try:
        from sglang.srt.managers import io_struct
    except ImportError:
        return None
    return "sessions" if hasattr(io_struct, "BeginWeightUpdateReqInput") else "main"


SGLANG_INTERFACE: Optional[str] = detect_interface()


def interface_of(engine: Any) -> str:
    """The generation ``engine`` runs: :data:`SGLANG_INTERFACE` where SGLang
    is installed here, else "sessions" when the engine (a client of a remote
    one) has ``begin_weight_update``, else "main"."""
    if SGLANG_INTERFACE is not None:
        return SGLANG_INTERFACE
    return "sessions" if callable(getattr(engine, "begin_weight_update", None)) else "main"


def answer(result: Any) -> Tuple[bool, str]:
    """(success, message) of an SGLang answer: a tuple, an object with
    ``success``/``message`` (SGLang's ReqOutput), a dict of the HTTP
    routes, or None (calls that answer nothing: success)."""
    if result is None:
        return True, ""
    if isinstance(result, tuple) and len(result) >= 2:
        return bool(result[0]), str(result[1])
    if isinstance(result, dict):
        return bool(result.get("success", True)), str(result.get("message", ""))
    if hasattr(result, "success"):
        return bool(result.success), str(getattr(result, "message", ""))
    return bool(result), ""


def check(engine_id: str, call: str, result: Any) -> None:
    """Raises RefitError FAILED_PRECONDITION naming the engine, the call and
    SGLang's message when ``result`` says no."""
    ok, message = answer(result)
    if not ok:
        raise refit.FailedPreconditionError(f"engine {engine_id}: SGLang refused "
                                            f"{call}: {message or '(no message)'}")


def _fields(cls: Any) -> set:
    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)}
    fields = getattr(cls, "__struct_fields__", None)  # msgspec.Struct
    if fields is not None:
        return set(fields)
    return set(inspect.signature(cls).parameters)


class EngineClient:
    """refit's engine protocol over an in-process ``sglang.Engine``: each
    call builds SGLang's request object (io_struct) and runs the tokenizer
    manager's coroutine on the engine's event loop, as the Engine's own
    methods do. Fields the installed SGLang lacks are refused, not dropped
    (a selector the engine cannot read would reach the draft runners)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def _run(self, method: str, req: Any) -> Any:
        """The tokenizer manager's ``method(req[, request])`` run to its
        answer on the engine's loop (its methods take the HTTP request as a
        second argument where they take one; None in process)."""
        fn = getattr(self.engine.tokenizer_manager, method)
        try:
            takes_request = len(inspect.signature(fn).parameters) >= 2
        except (TypeError, ValueError):
            takes_request = True
        coro = fn(req, None) if takes_request else fn(req)
        loop = getattr(self.engine, "loop", None) or asyncio.get_event_loop()
        return loop.run_until_complete(coro)

    def _request(self, cls_name: str, **fields: Any) -> Any:
        from sglang.srt.managers import io_struct
        cls = getattr(io_struct, cls_name, None)
        if cls is None:
            raise refit.FailedPreconditionError(f"this SGLang has no {cls_name}")
        have = _fields(cls)
        missing = sorted(k for k, v in fields.items() if k not in have and v is not None)
        if missing:
            raise refit.FailedPreconditionError(
                f"this SGLang's {cls_name} has no {', '.join(missing)}: refit needs them "
                f"to keep the update off the draft runners and to stamp the version")
        return cls(**{k: v for k, v in fields.items() if k in have})

    def update_weights_from_tensor(self, named_tensors: Any, load_format: Optional[str] = None,
                                   flush_cache: bool = False, **extra: Any) -> Any:
        """SGLang's update with ``extra`` (selector / disable_draft_model,
        weight_version) as request fields; returns SGLang's answer."""
        from sglang.srt.utils import MultiprocessingSerializer
        tp = int(getattr(getattr(self.engine, "server_args", None), "tp_size", 1) or 1)
        blob = MultiprocessingSerializer.serialize(named_tensors)
        req = self._request("UpdateWeightsFromTensorReqInput",
                            serialized_named_tensors=[blob] * tp, load_format=load_format,
                            flush_cache=flush_cache, **extra)
        return self._run("update_weights_from_tensor", req)

    def begin_weight_update(self, selector: str = "target") -> Any:
        return self._run("begin_weight_update",
                         self._request("BeginWeightUpdateReqInput", selector=selector))

    def end_weight_update(self, **fields: Any) -> Any:
        return self._run("end_weight_update",
                         self._request("EndWeightUpdateReqInput", **fields))

    def pause_generation(self) -> Any:
        return self._run("pause_generation", self._request("PauseGenerationReqInput"))

    def continue_generation(self) -> Any:
        return self._run("continue_generation",
                         self._request("ContinueGenerationReqInput"))


def client(engine: Any) -> Any:
    """``engine`` as refit drives it: an :class:`EngineClient` over an
    in-process ``sglang.Engine`` (it has a ``tokenizer_manager``), else the
    object itself (a client of SGLang's HTTP routes, or a test's stand-in),
    which must take the request fields as keyword arguments."""
    if isinstance(engine, EngineClient) or not hasattr(engine, "tokenizer_manager"):
        return engine
    return EngineClient(engine)


def weight_calls(interface: str) -> Dict[str, Any]:
    """The request fields that keep an update on the target model:
    ``selector="target"`` under sessions, ``disable_draft_model=True`` on
    main (the commits of :data:`SGLANG_INTERFACE_COMMITS`)."""
    return {"selector": "target"} if interface == "sessions" else {"disable_draft_model": True}
