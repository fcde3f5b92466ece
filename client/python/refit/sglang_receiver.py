"""refit as an SGLang external weight-update receiver
(``--weight-update-receivers refit.sglang_receiver.make_receiver``).

SGLang's allowlisted external receivers (python/sglang/srt/weight_sync/
external_receiver.py at fd623da6fc46f9d1176f9e6c09fabe6cfd980a5a, not in
SGLang main as of 2026-12-06): each path in ``--weight-update-receivers``
names a factory that SGLang calls once per TP worker with a
``WeightUpdateReceiverContext`` (``model``, ``device``, ``tp_rank``,
``tp_size``, the update group's address fields, which refit does not use, and
``init_payload``, the request's opaque dict) and that returns an object with
``receive(payload)`` (one round of weights into the live model) and
``destroy()``.

refit's ``init_payload`` holds refit.sglang.init_request's arguments
(``server``, ``engine_id``, ``model``, optional ``convention`` (left out:
SGLang's own, refit.engine_convention.sglang_convention, with ``dp``
replicas), ``token``, ``job``, ``transport``, ``timeout``, ``dp_rank``); a ``receive`` payload is
``{"version": v, "timeout": s}`` (both optional). The worker joins refit
when the factory runs (refusing by name, as refit.sglang does, a layout
refit does not write), each ``receive`` is one refit round, ``destroy``
leaves.
"""

from typing import Any, Dict, Optional

import refit
import refit.engine_worker as _ew
from refit import engine_convention as _ec
from refit import sglang as _sg

__all__ = ["RefitWeightUpdateReceiver", "make_receiver"]


class RefitWeightUpdateReceiver:
    """One SGLang TP worker's refit membership behind SGLang's receiver
    protocol. Invariant: ``receiver`` holds the worker's registered
    parameters until destroy()."""

    def __init__(self, context: Any) -> None:
        """Joins refit with ``context.model``'s parameters. Raises
        RefitError INVALID_ARGUMENT when ``context.init_payload`` lacks
        refit's arguments, as refit.engine_convention.sglang_convention
        does (no convention given) or as refit.engine_worker.EngineReceiver
        does."""
        args: Dict[str, Any] = dict(getattr(context, "init_payload", None) or {})
        missing = [k for k in ("server", "engine_id", "model") if k not in args]
        if missing:
            raise refit.InvalidArgumentError(
                f"the weight-update receiver's init_payload lacks {', '.join(missing)}: "
                f"give refit.sglang.init_request's arguments")
        tp_size = int(context.tp_size)
        if not args.get("convention"):  # SGLang's own: its server args, "dp" replicas
            args["convention"] = _ec.sglang_convention(
                (_sg.server_args or _ec.sglang_server_args)(), tp_size=tp_size,
                dp=args.get("dp"))
        _ew.check_parallel(args["convention"], tp=tp_size,
                           dp=int(_ew.convention_params(args["convention"]).get("dp", "1")),
                           engine="sglang")
        dp_rank = int(args.get("dp_rank", 0))
        rank = dp_rank * tp_size + int(context.tp_rank)
        device = _ew.device_name(getattr(context, "device", None))
        self.receiver: Optional[_ew.EngineReceiver] = _ew.join_or_refuse(
            lambda: _ew.EngineReceiver(
                context.model, rank=rank, device=device, server=args["server"],
                engine_id=args["engine_id"], model_name=args["model"],
                convention=args["convention"], hooks=_sg._hooks(), token=args.get("token"),
                job=args.get("job", "refit"), transport=args.get("transport"),
                timeout=float(args.get("timeout", 300.0))),
            server=args["server"], side="engine", rank=rank, model=args["model"],
            convention=args["convention"], engine_id=args["engine_id"], device=device,
            token=args.get("token"), job=args.get("job", "refit"))

    def receive(self, payload: Optional[Dict[str, Any]]) -> None:
        """One refit round into the model (refitd's next, or
        ``payload["version"]``). Raises FAILED_PRECONDITION after destroy(),
        or as EngineReceiver.receive does."""
        if self.receiver is None:
            raise refit.FailedPreconditionError("the refit receiver is destroyed")
        p = dict(payload or {})
        self.receiver.refresh_plan()
        self.receiver.receive(p.get("version"), float(p.get("timeout", 300.0)))

    def destroy(self) -> None:
        """Leaves refit (bounded); a no-op the second time. Never raises."""
        r, self.receiver = self.receiver, None
        if r is not None:
            r.close()


def make_receiver(context: Any) -> RefitWeightUpdateReceiver:
    """SGLang's receiver factory: ``--weight-update-receivers
    refit.sglang_receiver.make_receiver``."""
    return RefitWeightUpdateReceiver(context)
