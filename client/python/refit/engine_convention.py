"""The engine convention a live vLLM or SGLang engine runs, read from the
engine's own configuration, so that refit.vllm and refit.sglang need no
convention string: the worker knows its tensor, data and expert parallel
sizes, and refit.engine_formats / :func:`sglang_quant_format` read the
weight format from its layers (refit.engine_worker adds ``quant=`` and
``kernel=`` to what these functions return). An explicit convention stays
an override, checked against the engine as before.

vLLM: ``vllm_config.parallel_config`` (vllm/config/parallel.py at
00193b82b0e2d4faea5d3b4ea4f6c4c2bd9d057a): ``tensor_parallel_size``,
``pipeline_parallel_size``, ``prefill_context_parallel_size``,
``data_parallel_size``, ``data_parallel_index`` ("equal to the data
parallel rank but not used for torch process groups and not overridden for
dense models"), ``enable_expert_parallel``, ``expert_placement_strategy``
("linear" / "round_robin"), ``enable_eplb``, ``rank``. A dense model's DP
replicas run as independent engines: ``reconfigure_for_independent_dp_rank``
sets ``data_parallel_size`` to 1 in each (vllm/v1/engine/core.py,
``run_engine_core``), so their workers know their replica but not how many
there are: such an engine needs ``dp`` from the caller. MoE engines keep
``data_parallel_size``. ``model_config.is_moe`` says whether the model has
experts.

SGLang: a TP worker's ``sglang.srt.server_args.get_global_server_args()``
(python/sglang/srt/server_args.py at
001067fffe33427bee0ed2f007fb7551a1d76b44): ``tp_size``, ``dp_size``,
``ep_size``, ``pp_size``, ``enable_dp_attention``. refit's SGLang
convention describes independent replicas, one server each, so the
replica count comes from the trainer side (refit.sglang.join_engine: the
engines it is given).
"""

from typing import Any, Callable, Optional

import refit
import refit.engine_worker as _ew


def _int(obj: Any, name: str, default: int = 1) -> int:
    v = getattr(obj, name, None)
    return default if v is None else int(v)


def _spec(kind: str, tp: int, dp: int, ep: int = 0, round_robin: bool = False) -> str:
    out = f"{kind}:tp={tp}"
    if dp > 1:
        out += f",dp={dp}"
    if ep > 0:
        out += f",ep={ep}"
    if round_robin:
        out += ",placement=round_robin"
    return out


def vllm_replica(parallel_config: Any) -> int:
    """The worker's DP replica: vLLM's ``data_parallel_index`` (else
    ``data_parallel_rank``, for vLLM without it), 0 when neither is set."""
    index = getattr(parallel_config, "data_parallel_index", None)
    if index is None:
        index = getattr(parallel_config, "data_parallel_rank", 0)
    return int(index or 0)


def vllm_worker_index(parallel_config: Any) -> int:
    """``replica * TP + rank``: the worker's engine rank in refit's vLLM
    convention whatever the convention's sizes (0 when the parallel config
    lacks them)."""
    pc = parallel_config
    return vllm_replica(pc) * _int(pc, "tensor_parallel_size") + _int(pc, "rank", 0)


def given_or_derived(convention: Optional[str], dp: Optional[int],
                     derive: Callable[[], str]) -> str:
    """``convention`` when given (after checking that a ``dp`` given beside
    it agrees with it), else ``derive()``. Raises RefitError
    INVALID_ARGUMENT naming both when they differ; as ``derive`` does."""
    if not convention:
        return derive()
    named = int(_ew.convention_params(convention).get("dp", "1"))
    if dp is not None and int(dp) != named:
        raise refit.InvalidArgumentError(f"dp={dp} was given beside convention "
                                                  f"{convention}, which has dp={named}")
    return convention


def naming_convention(kind: str, tp: int, replica: int) -> str:
    """A convention under which the worker of DP replica ``replica`` with
    ``tp`` ranks a replica has an engine rank: what names a worker in a
    refusal when its own convention could not be read."""
    return _spec(kind, int(tp), int(replica) + 1)


def vllm_engine_rank(parallel_config: Any, convention: str) -> int:
    """The worker's engine rank in refit's vLLM convention, ``k =
    data_parallel_index * TP + rank`` (``rank``: the worker's rank inside its
    DP replica), after checking vLLM's TP size, and its DP size where vLLM
    keeps one (MoE; a dense model's replicas run as DP=1 engines), against
    the convention's. Raises RefitError INVALID_ARGUMENT when they differ,
    when the replica index is outside the convention's dp, under pipeline or
    prefill-context parallelism, or when the parallel config lacks the rank."""
    pc = parallel_config
    rank = getattr(pc, "rank", None)
    tp = getattr(pc, "tensor_parallel_size", None)
    if rank is None or tp is None:
        raise refit.InvalidArgumentError("the worker's rank is unknown: give "
                                                  "\"rank\" in the init info")
    pcp = _int(pc, "prefill_context_parallel_size")
    if pcp > 1:
        raise refit.InvalidArgumentError(f"vLLM runs prefill context parallelism "
                                                  f"(pcp={pcp}): refit's vllm convention "
                                                  f"has none")
    replica = vllm_replica(pc)
    dp = int(_ew.convention_params(convention).get("dp", "1"))
    # A dense model's engines run as independent DP=1 engines
    # (data_parallel_size reset to 1); MoE engines keep the DP size.
    vllm_dp = _int(pc, "data_parallel_size")
    _ew.check_parallel(convention, tp=int(tp), dp=vllm_dp if vllm_dp > 1 else dp,
                       pp=_int(pc, "pipeline_parallel_size"), engine="vllm")
    if not 0 <= replica < dp:
        raise refit.InvalidArgumentError(f"convention {convention}: vLLM's DP "
                                                  f"replica {replica} is outside dp={dp}")
    return replica * int(tp) + int(rank)


def vllm_convention(parallel_config: Any, model_config: Any = None, *,
                    dp: Optional[int] = None) -> str:
    """The vLLM engine convention this worker's engine runs:
    ``vllm:tp=T``, with ``dp=D`` for several replicas and ``ep=T*D`` (and
    ``placement=round_robin``) under expert parallelism of a model with
    experts. ``dp``: the number of replicas of a dense model served with
    data parallelism (its workers cannot tell; MoE workers can).

    Raises RefitError INVALID_ARGUMENT naming the setting: a replica index
    outside ``dp`` (for a dense replica past the first with no ``dp``: give
    the replica count), a ``dp`` that differs from vLLM's MoE DP size,
    pipeline or prefill context parallelism, expert load balancing
    (``enable_eplb`` moves experts while serving)."""
    pc = parallel_config
    tp = _int(pc, "tensor_parallel_size")
    for key, what in (("pipeline_parallel_size", "pipeline parallelism"),
                      ("prefill_context_parallel_size", "prefill context parallelism")):
        if _int(pc, key) > 1:
            raise refit.InvalidArgumentError(f"vLLM runs {what} ({key}="
                                                      f"{_int(pc, key)}): refit's vllm "
                                                      f"convention has none")
    vllm_dp, replica = _int(pc, "data_parallel_size"), vllm_replica(pc)
    if vllm_dp > 1:  # MoE: vLLM keeps the DP size in every worker
        if dp is not None and int(dp) != vllm_dp:
            raise refit.InvalidArgumentError(f"dp={dp} was given, but the vLLM "
                                                      f"engine runs data_parallel_size="
                                                      f"{vllm_dp}")
        replicas = vllm_dp
    else:
        replicas = 1 if dp is None else int(dp)
        if replica >= replicas:
            raise refit.InvalidArgumentError(f"this vLLM worker is in DP replica {replica} (data_parallel_index), but "
                f"the engine's convention has {replicas} replica(s): vLLM runs a dense "
                f"model's replicas as independent engines that do not know how many "
                f"there are; give dp (the number of replicas) in the init info")
    moe = getattr(model_config, "is_moe", None) is not False
    ep = bool(getattr(pc, "enable_expert_parallel", False)) and moe
    if ep and bool(getattr(pc, "enable_eplb", False)):
        raise refit.InvalidArgumentError("vLLM balances the experts' load (enable_eplb): it moves "
                               "experts between ranks while serving, which refit's vllm "
                               "convention does not follow; serve without --enable-eplb")
    round_robin = ep and getattr(pc, "expert_placement_strategy", "linear") == "round_robin"
    return _spec("vllm", tp, replicas, tp * replicas if ep else 0, round_robin)


def sglang_server_args() -> Any:
    """SGLang's server args in this TP worker's process. Raises RefitError
    FAILED_PRECONDITION when this SGLang has none to read (give a
    convention then)."""
    try:
        from sglang.srt.server_args import get_global_server_args
        return get_global_server_args()
    except (ImportError, ValueError, AttributeError) as e:
        raise refit.FailedPreconditionError(f"cannot read SGLang's server args in this worker ({e}): "
                                  f"give the engine convention (e.g. \"sglang:tp=2\")") from e


def sglang_convention(server_args: Any, *, tp_size: int, dp: Optional[int] = None) -> str:
    """The SGLang engine convention of a worker with ``tp_size`` TP ranks
    (SGLang's parallel state) in a server started with ``server_args``:
    ``sglang:tp=T``, ``dp=D`` for ``dp`` replicas (one server each),
    ``ep=E`` for ``--ep-size`` E > 1. Raises RefitError INVALID_ARGUMENT
    for DP attention and for one server running several replicas
    (``--dp-size``), which refit's SGLang convention does not describe."""
    if getattr(server_args, "enable_dp_attention", False):
        raise refit.InvalidArgumentError("SGLang runs DP attention "
                                                  "(--enable-dp-attention), which refit's "
                                                  "sglang convention does not describe")
    if _int(server_args, "dp_size") > 1:
        raise refit.InvalidArgumentError(f"one SGLang server runs --dp-size "
                               f"{_int(server_args, 'dp_size')}: its workers cannot tell "
                               f"their replica; run one server per replica and give "
                               f"refit.sglang.join_engine the list of them")
    ep = _int(server_args, "ep_size")
    return _spec("sglang", int(tp_size), 1 if dp is None else int(dp), ep if ep > 1 else 0)


def sglang_quant_format(model: Any) -> Optional[str]:
    """``"fp8"`` when a layer of ``model`` (an SGLang worker's model) runs
    SGLang's FP8 methods (``Fp8LinearMethod`` / ``Fp8MoEMethod``,
    python/sglang/srt/layers/quantization/fp8.py) on FP8 weights, else None.
    Never raises: refit.engine_layouts refuses the FP8 layouts refit does
    not write."""
    items = model.named_modules() if hasattr(model, "named_modules") else [("", model)]
    for _, layer in items:
        qm = getattr(layer, "quant_method", None)
        if qm is None or not type(qm).__name__.startswith("Fp8"):
            continue
        for name in ("weight", "w13_weight"):
            dtype = str(getattr(getattr(layer, name, None), "dtype", ""))
            if "float8" in dtype:
                return "fp8"
    return None
