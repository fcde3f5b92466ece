"""From a trainer's torch module to refit's buffers, and the round's start.

A trainer rank gives refit one buffer per name of the trainer convention
(:func:`refit.expected_buffers`). This module finds them in the rank's own
module: it strips the names wrapper modules add (DDP / Megatron ``module.``,
FSDP1 ``_fsdp_wrapped_module.``, ``torch.compile``'s ``_orig_mod.``,
activation checkpointing's ``_checkpoint_wrapped_module.``), takes an FSDP2
DTensor parameter's local shard (``Shard(0)`` over the shard group, as the
``fsdp`` convention expects; ``Replicate`` over an HSDP replica dimension)
and checks every buffer's shape and dtype against the convention, raising
one RefitError that names each parameter and the rank that does not match.
Megatron-Core parameters keep Megatron's own names (local layer numbering
per pipeline stage), which is what the ``megatron`` convention expects.
Transformer Engine's MXFP8Tensor / NVFP4Tensor weights (``megatron:...,
weights=mxfp8|nvfp4``, with GTP or not) give their own rowwise codes and
scale_inv, and for NVFP4 a global scale refit keeps and refreshes from
TE's amax before every round (:func:`refresh_low_precision`).

The memory is the module's own: refit reads the parameters in place, so a
round moves what the optimizer last wrote. Nothing here imports torch;
any object with torch's tensor interface works.

A trainer rank::

    import refit, refit.torch
    m = refit.torch.trainer_member(model, server="refitd:7070", rank=rank,
                                   model="qwen3-8b",
                                   convention="fsdp:dp=8", device=f"cuda:{local}")
    m.prepare()
    for step in range(steps):
        train_step(model)
        refit.torch.publish(m, version=step + 1, rank=rank, world=world)
"""

import time
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple, Union

import refit
from refit import _buffers, _te

__all__ = ["WRAPPER_COMPONENTS", "strip_wrapper_prefixes", "local_shard",
           "ModuleBuffers", "module_buffers", "trainer_member",
           "refresh_low_precision", "wait_all_ranks_ready",
           "start_round_when_ready", "publish"]

# Path components wrapper modules insert anywhere in a parameter's name.
WRAPPER_COMPONENTS = ("_fsdp_wrapped_module", "_checkpoint_wrapped_module",
                      "_orig_mod")
# Components wrappers put in front of the wrapped module's names: DDP's and
# Megatron's DistributedDataParallel / Float16Module ``module``, Lightning's
# ``_forward_module``.
_LEADING_COMPONENTS = ("module", "_forward_module")


def strip_wrapper_prefixes(name: str) -> str:
    """``name`` without the components wrapper modules add: every
    ``_fsdp_wrapped_module`` / ``_checkpoint_wrapped_module`` / ``_orig_mod``
    anywhere, and leading ``module`` / ``_forward_module`` (DDP, Megatron's
    DDP and Float16Module, nested in any order). Never fails."""
    parts = [p for p in name.split(".") if p not in WRAPPER_COMPONENTS]
    while len(parts) > 1 and parts[0] in _LEADING_COMPONENTS:
        parts.pop(0)
    return ".".join(parts)


def _placement_problem(placement: Any) -> Optional[str]:
    """Why a DTensor placement is not what refit's conventions hold (None:
    it is): ``Shard(0)`` (torch.chunk rows) and ``Replicate`` are."""
    kind = type(placement).__name__
    if kind == "Replicate":
        return None
    if kind == "Shard" and getattr(placement, "dim", None) == 0:
        return None
    if kind == "Shard":
        return (f"placement Shard({placement.dim}): the convention shards "
                f"dimension 0 only (FSDP2's default)")
    return (f"placement {placement!r}: only Shard(0) and Replicate map to a "
            f"convention's buffer (reduce a Partial, gather a strided shard "
            f"before a round)")


def local_shard(name: str, param: Any) -> Any:
    """The memory refit reads for parameter ``name``: a DTensor's (FSDP2)
    ``to_local()`` when every placement is Shard(0) or Replicate, otherwise
    ``param`` itself. Raises RefitError INVALID_ARGUMENT naming the
    parameter when a placement is anything else."""
    placements = getattr(param, "placements", None)
    if placements is None or not hasattr(param, "to_local"):
        return param
    for p in placements:
        why = _placement_problem(p)
        if why:
            raise refit.InvalidArgumentError(f"parameter {name}: {why}")
    return param.to_local()


def _named_tensors(module: Any) -> List[Tuple[str, Any]]:
    """Every (name, tensor) of the module's parameters, tied ones under each
    of their names, then its buffers (FP8 scales, KV-cache scales)."""
    try:
        params = list(module.named_parameters(remove_duplicate=False))
    except TypeError:  # torch < 2.0 has no remove_duplicate
        params = list(module.named_parameters())
    buffers = list(module.named_buffers()) if hasattr(module, "named_buffers") else []
    return params + buffers


def _renamed(name: str, rename: Union[None, Mapping[str, str], Callable[[str], Optional[str]]]
             ) -> Optional[str]:
    if rename is None:
        return name
    if callable(rename):
        return rename(name)
    return rename.get(name, name)


def _is_empty(t: Any) -> bool:
    numel = getattr(t, "numel", None)
    return callable(numel) and numel() == 0


def _check_tensor(rank: int, name: str, t: Any, spec: refit.BufferSpec) -> Optional[str]:
    """Why tensor ``t`` cannot be buffer ``spec`` (None: it can)."""
    declared = _buffers.declared(t)
    dtype, shape = declared.dtype, declared.shape
    where = f"rank {rank}: parameter {name}"
    if shape is not None and shape != list(spec.shape):
        return f"{where}: local shape {shape}, the convention expects {list(spec.shape)}"
    if dtype is not None and dtype != spec.dtype:
        return f"{where}: dtype {dtype}, the convention expects {spec.dtype}"
    if hasattr(t, "is_contiguous") and not t.is_contiguous():
        return f"{where}: the local tensor is not contiguous"
    return None


class ModuleBuffers(dict):
    """{convention name: local tensor}, as :func:`module_buffers` returns
    it, plus ``low_precision``: the Transformer Engine parameters among
    them, whose storage :meth:`refresh` checks and whose NVFP4 global
    scales it recomputes."""

    def __init__(self, buffers: Dict[str, Any], low_precision: List[_te.TeParameter]):
        super().__init__(buffers)
        self.low_precision = low_precision

    def refresh(self) -> None:
        """See :func:`refresh_low_precision`."""
        _te.refresh(self.low_precision)


def module_buffers(module: Any, *, rank: int, model: str, convention: str,
                   side: str = "trainer",
                   rename: Union[None, Mapping[str, str], Callable[[str], Optional[str]]] = None,
                   ignore: Iterable[str] = (), ignore_unknown: bool = False,
                   library: Any = None) -> ModuleBuffers:
    """The buffers rank ``rank`` gives refit under ``convention``, taken from
    ``module``'s parameters and buffers: {convention name: local tensor}.

    Names are stripped of wrapper prefixes (:func:`strip_wrapper_prefixes`),
    then mapped by ``rename`` (a dict, or a function returning the
    convention's name or None to skip the tensor). DTensors give their local
    shard (:func:`local_shard`). Tensors named in ``ignore`` (stripped
    names), empty local shards the convention does not list, and tied
    aliases (another name of a tensor that is moved, such as a tied
    ``lm_head.weight``) are skipped.

    A Transformer Engine MXFP8Tensor / NVFP4Tensor ``<param>.weight<j>``
    gives ``<param>.weight<j>`` (its ``_rowwise_data``) and
    ``<param>.weight_scale<j>`` (its compact ``_rowwise_scale_inv``), TE's
    own memory; an NVFP4 one also ``<param>.weight_global_scale<j>``, an
    f32 tensor refit allocates on the amax's device (a view of one buffer
    for all of them) and sets to
    ``amax * f32(1/2688)`` (ModelOpt's ``amax / (6 * 448)``) now and in
    every :func:`refresh_low_precision`.

    Raises RefitError INVALID_ARGUMENT listing, one line each with the rank
    and the parameter: a parameter the convention does not know (unless
    ``ignore_unknown``), one the convention expects that the module lacks,
    a local shape or dtype that differs from the convention's, a
    non-contiguous local tensor, a placement other than Shard(0) /
    Replicate, two module names that map to one buffer, and a TE tensor
    refit does not move: another TE class (Float8Tensor, blockwise FP8),
    a format other than the convention's ``weights=``, no rowwise copy
    (columnwise only), GEMM-swizzled scales, e5m2 codes, no amax (NVFP4).
    NOT_FOUND when the client library cannot be loaded; the library's
    status when the model or convention is unknown."""
    want = {b.name: b for b in refit.expected_buffers(
        side=side, rank=rank, model=model, convention=convention, library=library)}
    skip = set(ignore)
    found: Dict[str, Any] = {}
    source: Dict[str, str] = {}
    origin: Dict[str, Any] = {}  # buffer name -> the module's tensor it came from
    low_precision: List[_te.TeParameter] = []
    claimed = set()  # buffer names a TE tensor stands for
    problems: List[str] = []
    unknown: List[Tuple[str, Any]] = []
    mapped_ids = set()
    for raw, tensor in _named_tensors(module):
        stripped = strip_wrapper_prefixes(raw)
        if stripped in skip:
            continue
        name = _renamed(stripped, rename)
        if name is None:
            continue
        label = name if name == raw else f"{name} (module name {raw})"
        try:
            local = local_shard(label, tensor)
        except refit.RefitError as e:
            problems.append(f"rank {rank}: {e.message}")
            continue
        spec = want.get(name)
        if spec is None:
            if name not in found and not _is_empty(local) and not ignore_unknown:
                unknown.append((label, tensor))
            continue
        if name in found:
            if origin[name] is tensor or source[name] == raw:
                continue
            same = (hasattr(local, "data_ptr") and hasattr(found[name], "data_ptr")
                    and local.data_ptr() == found[name].data_ptr())
            if not same:
                problems.append(f"rank {rank}: parameter {name}: both {source[name]} "
                                f"and {raw} map to it")
            continue
        fmt = _te.kind(local)
        if fmt is not None:
            parts, param, why = _te.unwrap(rank, name, label, local, fmt, convention, want)
            problems.extend(why)
            claimed.update(_te.buffer_names(name))  # reported here if refused
            taken = [n for n in parts if n in found]
            if taken:
                problems.append(f"rank {rank}: parameter {label}: {', '.join(taken)} "
                                f"also come from {source[taken[0]]}")
                continue
            for n, t in parts.items():
                found[n], source[n], origin[n] = t, raw, tensor
            if param is not None:
                low_precision.append(param)
            mapped_ids.add(id(tensor))
            continue
        why = _check_tensor(rank, label, local, spec)
        if why:
            problems.append(why)
            continue
        found[name] = local
        source[name] = raw
        origin[name] = tensor
        mapped_ids.add(id(tensor))
    if not problems:
        found.update(_te.allocate_global_scales(low_precision))
    for label, tensor in unknown:
        if id(tensor) not in mapped_ids:  # else a tied alias of a moved tensor
            problems.append(f"rank {rank}: parameter {label}: not a buffer of "
                            f"convention {convention} for model {model} on this rank")
    for name in want:
        if name not in found and name not in claimed:
            problems.append(f"rank {rank}: parameter {name}: convention {convention} "
                            f"expects it, the module has no such parameter (after "
                            f"stripping wrapper prefixes)")
    if problems:
        raise refit.InvalidArgumentError("\n".join(problems))
    out = ModuleBuffers(found, low_precision)
    out.refresh()
    return out


def refresh_low_precision(member_or_buffers: Union[refit.Member, ModuleBuffers]) -> None:
    """Readies a trainer rank's Transformer Engine parameters for a round:
    checks that TE still holds the memory registered (a tensor TE dropped
    or reallocated would otherwise be sent stale, or freed), then sets
    every NVFP4 ``weight_global_scale`` to ``amax * f32(1/2688)`` from the
    parameter's current ``_amax_rowwise`` (on CUDA: two small kernels per
    parameter, then a device synchronize). :func:`publish` calls it; call
    it before ``run_round`` when driving rounds yourself, after the
    optimizer step. Takes a Member whose buffers came from
    :func:`module_buffers` (:func:`trainer_member`, refit.vllm's and
    refit.sglang's trainer paths; nothing to do for others) or
    module_buffers' result. Raises RefitError FAILED_PRECONDITION listing
    each parameter (and the rank) whose storage changed: register again
    (a new member)."""
    if isinstance(member_or_buffers, ModuleBuffers):
        member_or_buffers.refresh()
    else:
        _te.refresh(_te.registered_in(member_or_buffers.buffers.values()))


def trainer_member(module: Any, *, server: str, rank: int, model: str,
                   convention: str, device: str = "cpu",
                   rename: Union[None, Mapping[str, str], Callable[[str], Optional[str]]] = None,
                   ignore: Iterable[str] = (), ignore_unknown: bool = False,
                   **member_options: Any) -> refit.Member:
    """A trainer Member for rank ``rank`` over ``module``'s own parameters
    (:func:`module_buffers`); ``member_options`` go to refit.Member (token,
    job, transport, timeout, ...). Raises RefitError as module_buffers and
    refit.Member do."""
    buffers = module_buffers(module, rank=rank, model=model, convention=convention,
                             rename=rename, ignore=ignore, ignore_unknown=ignore_unknown,
                             library=member_options.get("library"))
    return refit.Member(server=server, side="trainer", rank=rank, model=model,
                        convention=convention, device=device, buffers=buffers,
                        **member_options)


def _ready_key(prefix: str, version: int, rank: int) -> str:
    return f"{prefix}/ready/{version}/{rank}"


def _go_key(prefix: str, version: int) -> str:
    return f"{prefix}/go/{version}"


_FAILED = "failed: "
_MAX_REASON = 2000  # characters of a reason kept in refitd's store


def _say(member: refit.Member, key: str, value: str) -> None:
    """Best effort: a rank on its way to raising tells its peers why."""
    try:
        member.kv_set(key, value[:_MAX_REASON], timeout=10.0)
    except refit.RefitError:
        pass


def wait_all_ranks_ready(member: refit.Member, *, version: int, rank: int, world: int,
                         timeout: float = 300.0, prefix: str = "refit.torch") -> None:
    """A barrier through refitd's key-value store: this rank says version
    ``version`` is in its buffers; rank 0 then waits until every rank of
    ``range(world)`` has said so. Other ranks return at once. Raises
    RefitError DEADLINE_EXCEEDED naming the first rank that did not report
    within ``timeout`` seconds, FAILED_PRECONDITION with its reason when a
    rank reported that it cannot publish this version (:func:`publish`
    does), INVALID_ARGUMENT for a rank outside [0, world), refitd's status
    otherwise. The keys stay in refitd's store: versions must increase over
    its lifetime (as refit's rounds do), or a stale key from an earlier run
    passes the barrier."""
    if not 0 <= rank < world:
        raise refit.InvalidArgumentError(f"rank {rank}: outside the world of {world} ranks")
    member.kv_set(_ready_key(prefix, version, rank), "1", timeout=timeout)
    if rank != 0:
        return
    deadline = time.monotonic() + timeout
    for r in range(1, world):
        left = deadline - time.monotonic()
        try:
            said = member.kv_get(_ready_key(prefix, version, r), timeout=max(left, 0.001))
        except refit.DeadlineExceededError:
            raise refit.DeadlineExceededError(f"rank {r} did not report version {version} "
                                              f"ready within {timeout:g} s") from None
        if said != "1":
            raise refit.FailedPreconditionError(
                f"rank {r} cannot publish version {version}: {said[len(_FAILED):]}")


def start_round_when_ready(member: refit.Member, *, version: int, rank: int, world: int,
                           timeout: float = 300.0, prefix: str = "refit.torch") -> None:
    """:func:`wait_all_ranks_ready`, then rank 0 starts round ``version``
    and tells the other ranks, which wait for its word: so when a rank
    cannot publish (:func:`publish` reports why) or the start fails, every
    rank raises at once with the reason instead of waiting for a round
    until its timeout. Raises RefitError as those two do;
    FAILED_PRECONDITION on the other ranks with rank 0's reason;
    DEADLINE_EXCEEDED when rank 0 says nothing within ``timeout``."""
    if rank != 0:
        wait_all_ranks_ready(member, version=version, rank=rank, world=world,
                             timeout=timeout, prefix=prefix)
        try:
            word = member.kv_get(_go_key(prefix, version), timeout=timeout)
        except refit.DeadlineExceededError:
            raise refit.DeadlineExceededError(
                f"rank {rank}: rank 0 did not start round {version} within "
                f"{timeout:g} s") from None
        if word != "1":
            raise refit.FailedPreconditionError(
                f"rank {rank}: round {version} was not started: {word[len(_FAILED):]}")
        return
    try:
        wait_all_ranks_ready(member, version=version, rank=rank, world=world,
                             timeout=timeout, prefix=prefix)
        member.start_round(version, timeout=timeout)
    except refit.RefitError as e:
        _say(member, _go_key(prefix, version), _FAILED + str(e))
        raise
    _say(member, _go_key(prefix, version), "1")


def publish(member: refit.Member, *, version: int, rank: int, world: int,
            timeout: float = 300.0, prefix: str = "refit.torch") -> refit.RoundStats:
    """Moves version ``version`` out of this rank's buffers: Transformer
    Engine parameters checked and NVFP4 global scales refreshed
    (:func:`refresh_low_precision`), the ready barrier, rank 0 starts the
    round, every rank runs it. Call on every trainer rank after the
    optimizer step (with CUDA buffers, after the step's kernels are done:
    ``torch.cuda.synchronize()``). Returns run_round's statistics; raises
    RefitError as refresh_low_precision (before this rank reports ready;
    it then tells the others, which raise FAILED_PRECONDITION naming it and
    the reason at once), start_round_when_ready and Member.run_round do
    (ABORTED with refitd's reason), FAILED_PRECONDITION when refitd
    announces another version."""
    try:
        refresh_low_precision(member)
    except refit.RefitError as e:  # the other ranks hear why, and raise too
        _say(member, _go_key(prefix, version) if rank == 0
             else _ready_key(prefix, version, rank), _FAILED + str(e))
        raise
    start_round_when_ready(member, version=version, rank=rank, world=world,
                           timeout=timeout, prefix=prefix)
    got = member.wait_for_round(timeout=timeout)
    if got != version:
        raise refit.FailedPreconditionError(f"rank {rank}: refitd announced round {got}, "
                                            f"this rank publishes version {version}")
    return member.run_round(version, timeout=timeout)
