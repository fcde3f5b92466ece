"""refit's client library for Python trainer ranks and inference workers.

A thin ctypes binding of the C ABI (client/c_api.h): the C++ client library
does everything (checks, control plane, data plane); this module turns
tensors into addresses and errors into exceptions. It needs no compiler and
works with any Python 3 and any PyTorch: the library is
``librefit_client.so`` (host buffers over TCP) or, for ``cuda:N`` buffers,
``librefit_client_gpu.so`` (NCCL), found in the package's ``_native``
folder (the wheel's copy, with the libraries it needs), beside this
package's folder in a bundle, or at ``$REFIT_CLIENT_LIB``.

An engine worker (vLLM TP rank 0 of replica "e0")::

    import refit
    params = dict(model.named_parameters())          # vLLM's own, fused
    want = refit.expected_buffers(side="engine", rank=0, model="qwen3-8b",
                                  convention="vllm:tp=2")
    m = refit.Member(server="refitd:7070", side="engine", engine_id="e0",
                     rank=0, model="qwen3-8b", convention="vllm:tp=2",
                     device="cuda:0",
                     buffers={b.name: params[b.name] for b in want})
    m.prepare()
    while True:
        v = m.wait_for_round(timeout=3600)
        m.run_round(v)      # written in place: same pointers, CUDA graphs valid

A trainer rank does the same with ``side="trainer"`` and its Megatron
convention; rank 0 calls ``m.start_round(v)`` once version ``v`` is ready on
every rank.

Every call takes a timeout in seconds and raises a RefitError instead of
hanging or crashing: ``AbortedError``, ``UnavailableError``,
``NotFoundError``, ``InvalidArgumentError``, ``DeadlineExceededError``, ...
(one subclass per code a program handles; ``e.code`` is a ``StatusCode``,
``e.code_name`` its name), with refit's message, which names the rank and
the parameter. The ctypes plumbing is in ``refit._ffi``.
"""

import ctypes
import dataclasses
import json
import sys
import threading
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional

from . import _buffers, _ffi
from ._status import (AbortedError, DeadlineExceededError, FailedPreconditionError,
                      InvalidArgumentError, NotFoundError, RefitError, StatusCode,
                      UnauthenticatedError, UnavailableError)

__version__ = "0.1.0"

__all__ = ["StatusCode", "RefitError", "InvalidArgumentError", "DeadlineExceededError",
           "NotFoundError", "FailedPreconditionError", "AbortedError", "UnavailableError",
           "UnauthenticatedError", "BufferSpec", "EngineState", "PlanInfo", "RoundStats",
           "RoundProgress", "log_progress",
           "Member", "expected_buffers", "refuse", "load_library", "loaded_library_path",
           "raise_for_status"]


class EngineState(NamedTuple):
    """What refitd knows of an engine's weights (see Member.engine_state)."""
    committed: int
    torn: int


class BufferSpec(NamedTuple):
    """A buffer a member must give: its name, local shape, dtype name
    (``"bf16"``, ``"f8e4m3"``, ...) and size in bytes."""
    name: str
    shape: List[int]
    dtype: str
    nbytes: int


class _Record:
    """Fields also read as a mapping (``info["global_rank"]``, ``**stats``),
    as when these results were dicts."""

    def __getitem__(self, key: str) -> Any:
        if key not in self.keys():
            raise KeyError(key)
        return getattr(self, key)

    def keys(self) -> List[str]:
        return [f.name for f in dataclasses.fields(self)]  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in self.keys() else default

    @classmethod
    def _from_json(cls, text: str) -> Any:
        fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in json.loads(text).items() if k in fields})


@dataclasses.dataclass(frozen=True)
class PlanInfo(_Record):
    """This member's place in the plan (Member.prepare)."""
    member_id: str = ""
    fingerprint: str = ""  # the plan's; equal on every member of one plan
    global_rank: int = 0   # over trainer ranks, then engine ranks
    global_world: int = 0


@dataclasses.dataclass(frozen=True)
class RoundProgress(_Record):
    """A round in flight as refitd sees it (the ``progress`` callback of
    Member.run_round, once a second after the first second)."""
    version: int = 0
    running: bool = False      # False: not started yet, or ended
    seconds: float = 0.0       # since refitd started the round
    reported: int = 0          # participants that reported success ...
    members: int = 0           # ... of all participants
    engine_bytes: int = 0      # bytes the engine ranks that reported received
    engine_ranks: int = 0
    member: str = ""           # who is waiting ("trainer rank 0", "engine e0 rank 1")
    # Bytes moved so far (from the members' heartbeats, about once a
    # second): this member's of its plan slice's, and every engine rank's
    # received of all they receive.
    bytes: int = 0
    planned_bytes: int = 0
    round_bytes: int = 0
    round_planned_bytes: int = 0


def _size(n: int) -> str:
    """``n`` bytes for a progress line: "950 B", "1.25 MB", "1.19 GB"."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def log_progress(p: "RoundProgress") -> None:
    """The default progress of Member.run_round: one line a second on
    stderr while a round runs longer than a second: ``refit: trainer rank
    0: round 3 running 2.0 s, 1 of 2 members reported, this member DONE of
    PLANNED (P%), engines DONE of PLANNED (P%)``."""
    line = (f"refit: {p.member}: round {p.version} running {p.seconds:.1f} s, "
            f"{p.reported} of {p.members} members reported")
    for who, done, planned in (("this member", p.bytes, p.planned_bytes),
                               ("engines", p.round_bytes, p.round_planned_bytes)):
        if planned:
            line += f", {who} {_size(done)} of {_size(planned)} ({100 * done // planned}%)"
    print(line, file=sys.stderr, flush=True)


@dataclasses.dataclass(frozen=True)
class RoundStats(_Record):
    """This member's figures of one round (Member.run_round)."""
    bytes_sent: int = 0
    bytes_received: int = 0
    seconds: float = 0.0          # the data plane's time
    peak_staging_bytes: int = 0   # staging and scratch memory held
    pause_seconds: float = 0.0    # staged engines: the live buffers' write


def load_library(gpu: bool = False, path: Optional[str] = None, *,
                 testing: bool = False) -> ctypes.CDLL:
    """Loads the client library once per process and returns it: ``path``,
    else ``$REFIT_CLIENT_LIB``, else from the wheel's ``refit/_native`` or
    the bundle folder above this package. ``gpu``: "cuda:N" buffers are
    needed, so ``librefit_client_gpu.so`` it is. Otherwise, where this
    machine has a usable GPU, ``librefit_client_gpu.so`` (it serves host
    buffers too), and ``librefit_client.so`` where it has none (the CUDA
    toolkit without a GPU, ``CUDA_VISIBLE_DEVICES=""``), each falling back
    to the other. ``testing``: the variants with the test patterns of
    refit.testing (``librefit_client{,_gpu}_testing.so``), for refit's own
    tests and GPU checks.

    One process holds one library: both register the same protobuf types,
    which the shared protobuf runtime refuses twice. Raises
    FailedPreconditionError when another library than the loaded one is
    asked for, NotFoundError naming every path tried when none loads."""
    return _ffi.load(gpu, path, testing)


def loaded_library_path() -> Optional[str]:
    """The path of the client library this process loaded (None: none yet)."""
    return _ffi.loaded_path()


def raise_for_status(code: int, library: Optional[ctypes.CDLL] = None) -> None:
    """Raises the RefitError (its subclass for ``code``) of a result of the
    C ABI, with the library's last error message, for entry points this
    module does not wrap; returns for 0."""
    _ffi.check(library or load_library(), code)


def expected_buffers(*, side: str, rank: int, model: str, convention: str,
                     library: Optional[ctypes.CDLL] = None) -> List[BufferSpec]:
    """The buffers rank ``rank`` of ``side`` ("trainer" or "engine") must give
    under ``convention`` (e.g. ``"megatron:tp=2,pp=2"``, ``"vllm:tp=2"``) for
    ``model`` (a built-in name or a config.json path), in layout order."""
    lib = library or load_library()
    out = ctypes.c_void_p()
    _ffi.check(lib, lib.refit_expected_buffers(
        _ffi.options(side=side, rank=rank, model=model, convention=convention),
        ctypes.byref(out)))
    return [BufferSpec(b["name"], list(b["shape"]), b["dtype"], b["bytes"])
            for b in json.loads(_ffi.take_string(lib, out))]


def refuse(reason: str, *, server: str, side: str, rank: int, model: str, convention: str,
           engine_id: Optional[str] = None, device: str = "cpu", token: Optional[str] = None,
           job: str = "refit", host_id: Optional[str] = None, timeout: float = 10.0,
           tls: bool = False, root_ca_pem: Optional[str] = None,
           client_cert_pem: Optional[str] = None, client_key_pem: Optional[str] = None,
           job_key: Optional[str] = None, connect_timeout: float = 2.0,
           library: Optional[ctypes.CDLL] = None) -> None:
    """Tells refitd that the member these arguments name (as for
    :class:`Member`) cannot join, and why: every member waiting for a plan
    then fails at once with FailedPreconditionError naming it and
    ``reason``, instead of at its timeout. The refusal stands until that
    member registers. Raises refitd's status (UnavailableError when it is
    not reachable within ``connect_timeout`` seconds)."""
    lib = library or load_library(gpu=device.startswith("cuda"))
    opts = _ffi.options(server=server, side=side, rank=rank, model=model,
                        convention=convention, engine_id=engine_id, device=device,
                        token=token, job=job, host_id=host_id, tls=tls,
                        root_ca_pem=root_ca_pem, client_cert_pem=client_cert_pem,
                        client_key_pem=client_key_pem, job_key=job_key,
                        connect_timeout_s=float(connect_timeout))
    _ffi.check(lib, lib.refit_refuse(opts, reason.encode(errors="replace"), float(timeout)))


class Member:
    """One trainer rank or engine worker, registered with refitd.

    ``buffers`` maps every name of :func:`expected_buffers` to the member's
    own memory (torch tensors on ``device``, or host arrays/buffers for
    ``device="cpu"``: numpy arrays, writable buffers, ``(address, nbytes)``
    pairs). numpy has no bf16: give bf16 weights as ``np.uint16`` arrays of
    the weight's shape, ``ml_dtypes.bfloat16`` arrays, or uint8 byte views.
    The memory is never allocated, moved or freed by refit; the member
    keeps a reference to each buffer until closed.

    Raises InvalidArgumentError listing every buffer that is unknown,
    missing, of the wrong size or null, or whose declared dtype, element
    width or shape (a tensor's, an array's, a typed buffer's) differs from
    the convention's (naming the rank and the parameter; uint8/int8 objects
    are taken as raw bytes), before refitd is contacted; at once too for a
    ``server`` that is not ``host:port`` and a ``token`` (surrounding
    whitespace stripped) that a gRPC header cannot carry (never printing
    it); UnavailableError naming refitd's address when refitd cannot be
    reached within ``connect_timeout`` seconds (saying "connection refused"
    when it was); refitd's own status otherwise. Every later call fails the
    same way within ``connect_timeout`` once refitd is gone, start_round
    included: catch UnavailableError and rejoin().

    ``transport`` (GPU buffers): ``"nccl"`` (the default) or ``"pull"``, the
    colocated pull path over CUDA IPC between the processes of one host, for
    a trainer and an engine that share GPUs (NCCL refuses two ranks on one
    GPU; ``"ipc"``, its earlier name, is accepted too). Every member of a job
    uses the same one; refitd refuses a mix.

    ``job_key``: the job key refitd was started with (``--job_key_file``).
    Such a refitd admits only members that carry it, and a member that does
    takes back its place at once after its process restarts
    (docs/reliability.md, "Member identity").
    """

    def __init__(self, *, server: str, side: str, rank: int, model: str,
                 convention: str, buffers: Dict[str, Any],
                 engine_id: Optional[str] = None, device: str = "cpu",
                 token: Optional[str] = None, job: str = "refit",
                 host_id: Optional[str] = None, verify: bool = False,
                 heartbeat_ms: int = 1000, timeout: float = 60.0,
                 tls: bool = False, root_ca_pem: Optional[str] = None,
                 client_cert_pem: Optional[str] = None,
                 client_key_pem: Optional[str] = None,
                 transport: Optional[str] = None,
                 job_key: Optional[str] = None,
                 staged: bool = False, staging_bytes: Optional[int] = None,
                 connect_timeout: float = 2.0,
                 library: Optional[ctypes.CDLL] = None):
        self._lib = library or load_library(gpu=device.startswith("cuda"))
        self._handle = ctypes.c_void_p()
        self.device = device
        self.side = side
        self.rank = rank
        self.engine_id = engine_id
        want = expected_buffers(side=side, rank=rank, model=model,
                                convention=convention, library=self._lib)
        problems = _buffers.type_problems(rank, want, buffers)
        if problems:
            raise InvalidArgumentError("\n".join(problems))
        resolved = {n: _buffers.address(n, b, device) for n, b in buffers.items()}
        self._buffers = dict(buffers)
        self._keep = [k for (_, _, k) in resolved.values()]
        n, c_names, c_ptrs = _ffi.c_arrays({k: v[0] for k, v in resolved.items()})
        sizes = (ctypes.c_int64 * n)(*[v[1] for v in resolved.values()])
        opts = _ffi.options(server=server, side=side, rank=rank, model=model,
                            convention=convention, engine_id=engine_id,
                            device=device, token=token, job=job, host_id=host_id,
                            verify=verify, heartbeat_ms=heartbeat_ms, tls=tls,
                            root_ca_pem=root_ca_pem,
                            client_cert_pem=client_cert_pem,
                            client_key_pem=client_key_pem, transport=transport,
                            job_key=job_key, staged=staged or None,
                            staging_bytes=staging_bytes,
                            connect_timeout_s=float(connect_timeout))
        _ffi.check(self._lib, self._lib.refit_member_join(
            opts, n, c_names, c_ptrs, sizes, float(timeout),
            ctypes.byref(self._handle)))
        self.info: Optional[PlanInfo] = None

    def _h(self) -> ctypes.c_void_p:
        if not self._handle:
            raise FailedPreconditionError("the member is closed")
        return self._handle

    def handle(self) -> ctypes.c_void_p:
        """The C ABI's handle of this member, for calls this class does not
        wrap (refit.testing's); raises FAILED_PRECONDITION once closed."""
        return self._h()

    @property
    def library(self) -> ctypes.CDLL:
        """The client library this member was joined through."""
        return self._lib

    @property
    def buffers(self) -> Dict[str, Any]:
        """The buffers given to the constructor, by name (empty once
        closed)."""
        return dict(self._buffers)

    def rejoin(self, timeout: float = 300.0) -> None:
        """Registers again, same buffers, after refitd restarted or expired
        this member (a call raised UNAVAILABLE); retries until refitd is back
        or ``timeout`` passes. Call prepare() next."""
        _ffi.check(self._lib, self._lib.refit_member_rejoin(self._h(), float(timeout)))

    def prepare(self, timeout: float = 300.0) -> PlanInfo:
        """Awaits this member's plan; returns and keeps in ``info`` this
        member's :class:`PlanInfo`. Raises refitd's status when the plan
        fails (naming a member of an earlier run that never left, where one
        is the likely cause), DeadlineExceededError when no plan comes."""
        out = ctypes.c_void_p()
        _ffi.check(self._lib, self._lib.refit_member_prepare(
            self._h(), float(timeout), ctypes.byref(out)))
        self.info = PlanInfo._from_json(_ffi.take_string(self._lib, out))
        return self.info

    def plan_changed(self) -> bool:
        """True when refitd has a newer plan: call prepare() again."""
        return bool(self._lib.refit_member_plan_changed(self._h()))

    def start_round(self, version: Optional[int] = None, timeout: float = 60.0) -> int:
        """Starts round ``version`` (trainer ranks; once every rank holds it)
        and returns it. Without ``version``, starts the next one, one above
        the last round refitd started: a run that starts again from step 1
        needs no count of its own, and its versions stay monotonic.
        Retries while refitd builds a plan; raises UnavailableError naming
        refitd's address within ``connect_timeout`` when refitd is gone
        (rejoin() once it is back), InvalidArgumentError for a version
        below the last (saying where to start)."""
        if version is None:
            v = ctypes.c_int64()
            _ffi.check(self._lib, self._lib.refit_member_start_next_round(
                self._h(), float(timeout), ctypes.byref(v)))
            return v.value
        _ffi.check(self._lib, self._lib.refit_member_start_round(
            self._h(), int(version), float(timeout)))
        return int(version)

    def wait_for_round(self, timeout: float = 60.0) -> int:
        """The version of the next round refitd announces."""
        v = ctypes.c_int64()
        _ffi.check(self._lib, self._lib.refit_member_wait_for_round(
            self._h(), float(timeout), ctypes.byref(v)))
        return v.value

    def run_round(self, version: int, timeout: float = 300.0,
                  progress: Optional[Callable[[RoundProgress], None]] = log_progress
                  ) -> RoundStats:
        """Moves this member's bytes of round ``version`` and waits for the
        commit; returns this member's :class:`RoundStats`. Raises
        AbortedError with refitd's reason when the round was aborted,
        UnavailableError when refitd went away (rejoin).

        While the round runs longer than a second, ``progress`` is called
        once a second, in this thread, with refitd's :class:`RoundProgress`
        (the default, :func:`log_progress`, prints one line on stderr;
        ``None``: nothing). An exception it raises is raised once the round
        is over."""
        h = self._h()
        result: Dict[str, Any] = {}

        def run() -> None:
            out = ctypes.c_void_p()
            try:
                _ffi.check(self._lib, self._lib.refit_member_run_round(
                    h, int(version), float(timeout), ctypes.byref(out)))
                result["stats"] = RoundStats._from_json(_ffi.take_string(self._lib, out))
            except BaseException as e:  # raised in the caller's thread
                result["error"] = e

        if progress is None:
            run()
        else:
            worker = threading.Thread(target=run, name=f"refit-round-{version}", daemon=True)
            worker.start()
            worker.join(1.0)
            callback_error: Optional[BaseException] = None
            while worker.is_alive():
                if callback_error is None:
                    try:
                        p = self.round_progress(version)
                        if p.running:
                            progress(p)
                    except RefitError:
                        pass  # refitd unreachable: run_round says so
                    except BaseException as e:
                        callback_error = e
                worker.join(1.0)
            if callback_error is not None and "error" not in result:
                raise callback_error
        if "error" in result:
            raise result["error"]
        return result["stats"]

    def round_progress(self, version: int, timeout: float = 2.0) -> RoundProgress:
        """What refitd says of round ``version`` so far (see
        :class:`RoundProgress`); may be called while another thread runs
        the round."""
        out = ctypes.c_void_p()
        _ffi.check(self._lib, self._lib.refit_member_round_progress(
            self._h(), int(version), float(timeout), ctypes.byref(out)))
        fields = json.loads(_ffi.take_string(self._lib, out))
        who = (f"engine {self.engine_id} rank {self.rank}" if self.side == "engine"
               else f"trainer rank {self.rank}")
        return RoundProgress(member=who, **{k: v for k, v in fields.items()
                                            if k in RoundProgress.__dataclass_fields__})

    def receive_round(self, version: int, timeout: float = 300.0) -> RoundStats:
        """A staged engine member (``staged=True``): moves round ``version``
        into staging while the engine serves from its live weights, and
        returns once every engine rank holds it. Raises AbortedError when the
        round aborted (the live weights are as they were)."""
        return self._round_step(self._lib.refit_member_receive_round, version, timeout)

    def apply_round(self, version: int, timeout: float = 300.0) -> RoundStats:
        """Writes the round receive_round returned into the live weights
        (pause generation around it) and waits for the commit; the stats'
        ``pause_seconds`` is the write's time."""
        return self._round_step(self._lib.refit_member_apply_round, version, timeout)

    def _round_step(self, fn: Any, version: int, timeout: float) -> RoundStats:
        out = ctypes.c_void_p()
        _ffi.check(self._lib, fn(self._h(), int(version), float(timeout), ctypes.byref(out)))
        return RoundStats._from_json(_ffi.take_string(self._lib, out))

    def current_version(self, engine_id: str, timeout: float = 10.0) -> int:
        """The last version committed into engine ``engine_id`` (0: none)."""
        v = ctypes.c_int64()
        _ffi.check(self._lib, self._lib.refit_member_current_version(
            self._h(), engine_id.encode(), float(timeout), ctypes.byref(v)))
        return v.value

    def engine_state(self, engine_id: str, timeout: float = 10.0) -> "EngineState":
        """``committed``: the last version committed into engine
        ``engine_id`` (0: none). ``torn``: non-zero when round ``torn``
        aborted after it had started there, so the engine's buffers may hold
        part of it and no single version until a later round commits: do not
        serve from them until then."""
        c, t = ctypes.c_int64(), ctypes.c_int64()
        _ffi.check(self._lib, self._lib.refit_member_engine_state(
            self._h(), engine_id.encode(), float(timeout), ctypes.byref(c),
            ctypes.byref(t)))
        return EngineState(c.value, t.value)

    def kv_set(self, key: str, value: str, timeout: float = 10.0) -> None:
        _ffi.check(self._lib, self._lib.refit_member_kv_set(
            self._h(), key.encode(), value.encode(), float(timeout)))

    def kv_get(self, key: str, timeout: float = 10.0) -> str:
        """Waits for ``key`` in refitd's store (DEADLINE_EXCEEDED naming it)."""
        out = ctypes.c_void_p()
        _ffi.check(self._lib, self._lib.refit_member_kv_get(
            self._h(), key.encode(), float(timeout), ctypes.byref(out)))
        return _ffi.take_string(self._lib, out)

    def leave(self, timeout: float = 10.0) -> None:
        """Leaves the membership (an engine replica going away between
        rounds); close() leaves too. Logs no warning; calls that wait for
        rounds fail with UnavailableError afterwards (rejoin() to come
        back)."""
        _ffi.check(self._lib, self._lib.refit_member_leave(self._h(), float(timeout)))

    def close(self) -> None:
        """Leaves the membership unless left already (at most 2 s, at once
        when refitd is gone), so the same program can run again at once;
        stops the member's threads and releases the buffers. Idempotent."""
        if self._handle:
            self._lib.refit_member_close(self._handle)
            self._handle = ctypes.c_void_p()
        self._buffers = {}
        self._keep = []

    def __enter__(self) -> "Member":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
