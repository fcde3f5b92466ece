"""One inference worker's side of refit, shared by refit.vllm and refit.sglang.

:class:`EngineReceiver` registers a worker's own parameters (the engine's
layout, written in place: same pointers, CUDA graphs stay valid) with refitd
under the engine convention, with the kernel layout the worker's layers read
added to it (``kernel=flashinfer`` / ``kernel=deepgemm``, from
``refit.engine_layouts``); each :meth:`EngineReceiver.receive` is one refit
round, after which the tensors the engine derives from the moved weights
(MLA's ``W_UK_T``/``W_UV``, SGLang's ``w_kc``/``w_vc``, ...) are recomputed
before the engine serves again.

The engine rank helpers follow refit's engine conventions
(mapping/engine_vllm.h): engine rank ``k = dp * TP + tp``; refit's engine
conventions have no pipeline stages.
"""

import logging
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import refit
import refit.staged as _staged
import refit.torch as _rt

# (detect(model) -> Optional[str], refresh(model) -> None), optionally with
# a third, detect_quant(model) -> Optional[str] (the quant= value), and a
# fourth, detect_recipe(model) -> Optional[str] (NVFP4's recipe= value).
LayoutHooks = Tuple[Callable[[Any], Any], ...]


def layout_hooks(engine: str) -> LayoutHooks:
    """refit.engine_layouts' kernel-layout detector and derived-tensor
    refresh for ``engine`` ("vllm" or "sglang"), and the weight-format
    detector (refit.engine_formats' for vLLM, refit.engine_convention's for
    SGLang). Raises RefitError
    FAILED_PRECONDITION when they are not installed."""
    try:
        from refit import engine_formats as ef
        from refit import engine_layouts as el
    except ImportError as e:
        raise refit.FailedPreconditionError(f"refit.engine_layouts is missing ({e}): refit cannot "
                                  f"tell which layout the {engine} kernels read") from e
    if engine == "vllm":
        return (el.vllm_kernel_layout, el.refresh_vllm_derived, ef.vllm_quant_format,
                ef.vllm_nvfp4_recipe)
    from refit.engine_convention import sglang_quant_format
    return el.sglang_kernel_layout, el.refresh_sglang_derived, sglang_quant_format


def convention_params(convention: str) -> Dict[str, str]:
    """{key: value} of a spec such as "vllm:tp=2,dp=2" (no kind)."""
    _, _, rest = convention.partition(":")
    out = {}
    for item in filter(None, rest.split(",")):
        k, _, v = item.partition("=")
        out[k.strip()] = v.strip()
    return out


def with_kernel(convention: str, kernel: Optional[str]) -> str:
    """``convention`` with ``kernel=<kernel>`` added when the worker's
    layers read a kernel layout. Raises RefitError INVALID_ARGUMENT when the
    convention names another kernel layout than the one detected."""
    named = convention_params(convention).get("kernel")
    if named == "checkpoint":  # the default layout, spelled out
        named = ""
    if named is not None and named != (kernel or ""):
        raise refit.InvalidArgumentError(f"convention {convention}: kernel={named}, but the "
                                  f"worker's layers read "
                                  f"{'kernel=' + kernel if kernel else 'the checkpoint layout'}")
    if kernel is None or named:
        return convention
    if ":" not in convention:
        return f"{convention}:kernel={kernel}"
    sep = "" if convention.endswith(":") else ","
    return f"{convention}{sep}kernel={kernel}"


def with_quant(convention: str, quant: Optional[str], recipe: Optional[str] = None) -> str:
    """``convention`` with ``quant=<quant>`` added when the worker's layers
    hold that weight format and the convention names none (and, for NVFP4
    bytes of vLLM's online ``recipe``, ``recipe=vllm``). Raises RefitError
    INVALID_ARGUMENT when the convention names another format, or another
    NVFP4 recipe, than the one detected."""
    if quant is None:
        return convention
    params = convention_params(convention)
    named_recipe = params.get("recipe")
    if quant == "nvfp4" and recipe is not None and named_recipe not in (None, recipe):
        loaded = ("a ModelOpt NVFP4 checkpoint, whose bytes ModelOpt's exporter made"
                  if recipe == "modelopt" else
                  "a BF16 checkpoint and quantized it itself (vLLM's online NVFP4)")
        raise refit.InvalidArgumentError(
            f"convention {convention}: recipe={named_recipe}, but vLLM loaded "
            f"{loaded}: use recipe={recipe}")
    if quant == "nvfp4" and recipe not in (None, "modelopt") and named_recipe is None:
        convention = f"{convention},recipe={recipe}" if ":" in convention else \
            f"{convention}:recipe={recipe}"
    named = convention_params(convention).get("quant")
    if named is not None and named != quant:
        raise refit.InvalidArgumentError(f"convention {convention}: quant={named}, but the "
                                  f"worker's layers hold {quant} weights (quant={quant})")
    if named is not None:
        return convention
    if ":" not in convention:
        return f"{convention}:quant={quant}"
    sep = "" if convention.endswith(":") else ","
    return f"{convention}{sep}quant={quant}"


def block_scale_rename(want: Set[str]) -> Callable[[str], Optional[str]]:
    """The engine's parameter names as the convention spells them. vLLM's
    block-FP8 linears register ``weight_scale_inv`` and newer vLLM renames
    it ``weight_scale`` after loading (vllm-project/vllm 1436674,
    fp8.py's process_weights_after_loading): such a name maps back to the
    convention's ``weight_scale_inv`` when the convention lists that and not
    the other. Shapes and dtypes are still checked by module_buffers."""
    def rename(name: str) -> Optional[str]:
        if (name.endswith(".weight_scale") and name not in want
                and name + "_inv" in want):
            return name + "_inv"
        return name
    return rename


def check_parallel(convention: str, *, tp: int, dp: int, pp: int = 1,
                   engine: str) -> None:
    """Checks the engine's parallel sizes against the convention's. Raises
    RefitError INVALID_ARGUMENT naming the size that differs, or pipeline
    parallelism (refit's engine conventions have no pipeline stages)."""
    if pp > 1:
        raise refit.InvalidArgumentError(f"{engine} runs pipeline parallelism (pp={pp}): refit's "
                                  f"{engine} convention has no pipeline stages; run the "
                                  f"engine with pipeline_parallel_size=1")
    params = convention_params(convention)
    for key, have in (("tp", tp), ("dp", dp)):
        want = int(params.get(key, "1"))
        if want != have:
            raise refit.InvalidArgumentError(f"convention {convention}: {key}={want}, but the "
                                      f"{engine} engine runs {key}={have}")


def device_name(device: Any) -> str:
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


def synchronize(device: str) -> None:
    """Waits for the device's queued work; a no-op for host buffers."""
    if device.startswith("cuda"):
        import torch
        torch.cuda.synchronize(device)


class EngineReceiver:
    """A worker's refit membership: its parameters, registered in place.

    Invariant: ``member`` is None after :meth:`close`; ``version`` is the
    last version written into the parameters (0: none); ``kernel`` is the
    kernel layout detected at registration (None: the checkpoint layout),
    ``quant`` the weight format (None: not detected, or BF16)."""

    def __init__(self, model: Any, *, rank: int, device: str, server: str,
                 engine_id: str, model_name: str, convention: str, hooks: LayoutHooks,
                 token: Optional[str] = None, job: str = "refit",
                 transport: Optional[str] = None, timeout: float = 300.0,
                 staged: bool = False, staging_bytes: Optional[int] = None) -> None:
        """Detects the weight format (``hooks[2]``, when given) and the
        kernel layout, adds them to the convention, registers the
        parameters it names and waits for the plan. Raises RefitError:
        INVALID_ARGUMENT from the detectors (naming the layer, the kernel and
        the setting that avoids it), for a convention naming another format
        or kernel,
        or naming each parameter the model lacks or holds with another shape
        or dtype; refitd's status (UNAVAILABLE, DEADLINE_EXCEEDED, ...)."""
        detect, self._refresh = hooks[0], hooks[1]
        self.model = model
        self.quant = hooks[2](model) if len(hooks) > 2 else None
        self.recipe = hooks[3](model) if len(hooks) > 3 else None
        self.kernel = detect(model)
        self.convention = with_kernel(with_quant(convention, self.quant, self.recipe),
                                      self.kernel)
        self.engine_id, self.rank, self.device = engine_id, rank, device
        self.timeout = timeout
        self.version = 0
        self.last_stats: Dict[str, Any] = {}
        want = {b.name for b in refit.expected_buffers(
            side="engine", rank=rank, model=model_name, convention=self.convention)}
        buffers = _rt.module_buffers(model, side="engine", rank=rank, model=model_name,
                                     convention=self.convention, ignore_unknown=True,
                                     rename=block_scale_rename(want))
        member = refit.Member(server=server, side="engine", rank=rank, model=model_name,
                              convention=self.convention, engine_id=engine_id,
                              device=device, buffers=buffers, token=token, job=job,
                              transport=transport, timeout=timeout,
                              staged=staged, staging_bytes=staging_bytes)
        try:
            member.prepare(timeout=timeout)
        except BaseException:
            member.close()
            raise
        self.member: Optional[refit.Member] = member
        # Staged: rounds arrive in the background; receive() applies one.
        self.staged = _staged.StagedRounds(member) if staged else None

    def _m(self) -> refit.Member:
        if self.member is None:
            raise refit.FailedPreconditionError(f"engine {self.engine_id}: the refit receiver is "
                                      f"closed")
        return self.member

    def refresh_plan(self) -> None:
        """Takes refitd's newer plan when there is one. Raises as prepare."""
        m = self._m()
        if self.staged is None and m.plan_changed():
            m.prepare(timeout=self.timeout)

    def _await_round(self, m: refit.Member, version: Optional[int], timeout: float,
                     abort_key: Optional[str]) -> int:
        """refitd's next round; with ``abort_key``, checks refitd's store for
        it about once a second and raises ABORTED with its value when the
        trainer called the update off (an engine that refused it)."""
        if abort_key is None:
            return m.wait_for_round(timeout=timeout)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                return m.wait_for_round(timeout=max(min(1.0, left), 0.001))
            except refit.DeadlineExceededError:
                if time.monotonic() >= deadline:
                    raise
            try:
                why = m.kv_get(abort_key, timeout=0.01)
            except refit.DeadlineExceededError:
                continue
            raise refit.AbortedError(f"engine {self.engine_id} rank {self.rank}: the update "
                                     f"to version {version} was called off: {why}")

    def receive(self, version: Optional[int], timeout: float,
                abort_key: Optional[str] = None) -> int:
        """One refit round into the parameters: waits for refitd's next
        round (``version`` when given), moves it, then recomputes the
        derived tensors; returns the version written. ``abort_key``: a key
        of refitd's store whose appearance calls the wait off. Raises
        RefitError: FAILED_PRECONDITION when closed or when refitd announces
        another version; DEADLINE_EXCEEDED when no round comes within
        ``timeout``; ABORTED with refitd's reason (the parameters may hold
        part of the round: Member.engine_state says so), or with the value
        under ``abort_key``."""
        m = self._m()
        if self.staged is not None:  # the round is in staging already, or on its way
            self.last_stats = self.staged.apply(version, timeout=timeout)
            v = self.staged.version
        else:
            v = self._await_round(m, version, timeout, abort_key)
            if version is not None and v != version:
                raise refit.FailedPreconditionError(f"engine {self.engine_id}: refitd announced "
                                          f"version {v}, the update asked for {version}")
            self.last_stats = m.run_round(v, timeout=timeout)
        synchronize(self.device)
        self._refresh(self.model)
        synchronize(self.device)
        self.version = v
        return v

    def checksums(self) -> Dict[str, str]:
        """{name: SHA-256 of the raw bytes} of every buffer refit writes on
        this worker (refit.checksums.tensor_sha256), named as the engine's
        model names its parameters (what the engine's own weight checker
        reports), a buffer that is no parameter of its own by the
        convention. Raises FAILED_PRECONDITION when closed."""
        from refit.checksums import named_checksums
        left = {(b.data_ptr(), b.numel() * b.element_size()): n
                for n, b in self._m().buffers.items() if hasattr(b, "data_ptr")}
        named = []
        if hasattr(self.model, "named_parameters"):
            for n, p in self.model.named_parameters():
                if left.pop((p.data_ptr(), p.numel() * p.element_size()), None) is not None:
                    named.append((n, p))
        bufs = self._m().buffers
        named += [(n, bufs[n]) for n in left.values()]
        return named_checksums(named)

    def close(self) -> None:
        """Leaves refit's membership (bounded) and releases the parameters;
        a no-op when closed. Never raises."""
        m, self.member = self.member, None
        if m is None:
            return
        if self.staged is not None:
            self.staged.close()
        try:
            m.leave(timeout=10.0)
        except refit.RefitError:
            pass  # refitd gone or the member expired: nothing left to leave
        finally:
            m.close()


def in_thread(fn: Callable[[], Any]) -> Callable[[float], Any]:
    """Starts ``fn`` in a thread; returns a join(timeout) that returns fn's
    result or re-raises its exception, or raises DEADLINE_EXCEEDED when fn
    is still running."""
    out: List[Any] = []
    errors: List[BaseException] = []

    def body() -> None:
        try:
            out.append(fn())
        except BaseException as e:  # handed to the joiner
            errors.append(e)

    t = threading.Thread(target=body, daemon=True)
    t.start()

    def join(timeout: float) -> Any:
        t.join(timeout)
        if t.is_alive():
            raise refit.DeadlineExceededError(f"the inference side did not answer within "
                                      f"{timeout:g} s")
        if errors:
            raise errors[0]
        return out[0]
    return join


# refitd's answers that say nothing of this worker's own setup: a refusal
# would not help (refitd unreachable, or refusing the worker itself).
_NOT_THE_WORKERS = {4, 7, 14, 16}  # DEADLINE_EXCEEDED, PERMISSION_DENIED, UNAVAILABLE, UNAUTHENTICATED


def tell_refusal(error: BaseException, **member: Any) -> None:
    """Tells refitd that the worker ``member`` names (refit.refuse's
    arguments: server, side, rank, model, convention, engine_id, device,
    token, job) refuses to join, because of ``error``, so that the trainer
    and the other workers fail at once naming it instead of at their
    timeouts; nothing for errors that say nothing of the worker's own setup
    (refitd unreachable, or refusing the worker). Never raises: a refusal
    that cannot be told is logged."""
    if isinstance(error, refit.RefitError) and int(error.code) in _NOT_THE_WORKERS:
        return
    try:
        refit.refuse(f"{type(error).__name__}: {error}"
                     if not isinstance(error, refit.RefitError) else str(error),
                     timeout=min(10.0, float(member.pop("timeout", 10.0))), **member)
    except refit.RefitError as r:
        logging.getLogger("refit").warning("telling refitd that this worker refuses to "
                                           "join failed: %s", r)


def join_or_refuse(make: Callable[[], "EngineReceiver"], **member: Any) -> "EngineReceiver":
    """``make()`` (the worker's EngineReceiver). When it fails for a reason
    of the worker's own (a layout refit does not write, parameters that do
    not match the convention), first tells refitd so (:func:`tell_refusal`
    with ``member``); then raises make's error."""
    try:
        return make()
    except Exception as e:
        tell_refusal(e, **member)
        raise
