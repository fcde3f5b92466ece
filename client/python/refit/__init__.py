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

Every call takes a timeout in seconds and raises RefitError (with the
status code's name, e.g. ``DEADLINE_EXCEEDED``, and refit's message, which
names the rank and the parameter) instead of hanging or crashing.
"""

import ctypes
import json
import os
from typing import Any, Dict, List, NamedTuple, Optional

__version__ = "0.1.0"

__all__ = ["RefitError", "BufferSpec", "EngineState", "Member", "expected_buffers",
           "load_library", "loaded_library_path"]

_CODES = {
    0: "OK", 1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT",
    4: "DEADLINE_EXCEEDED", 5: "NOT_FOUND", 6: "ALREADY_EXISTS",
    7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED", 9: "FAILED_PRECONDITION",
    10: "ABORTED", 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED", 13: "INTERNAL",
    14: "UNAVAILABLE", 15: "DATA_LOSS", 16: "UNAUTHENTICATED",
}


class RefitError(RuntimeError):
    """A failed call: ``code`` (int), ``code_name`` (``"ABORTED"``, ...) and
    the library's message."""

    def __init__(self, code: int, message: str):
        self.code = code
        self.code_name = _CODES.get(code, str(code))
        # refit_last_error() starts with the code's name; say it once.
        if message.startswith(self.code_name + ": "):
            message = message[len(self.code_name) + 2:]
        self.message = message
        super().__init__(f"{self.code_name}: {message}")


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


_P = ctypes.c_void_p
_S = ctypes.c_char_p
_PP = ctypes.POINTER(ctypes.c_char_p)
_SIGNATURES = {
    "refit_last_error": (_S, []),
    "refit_free": (None, [_P]),
    "refit_build_info": (_S, []),
    "refit_expected_buffers": (ctypes.c_int, [_S, ctypes.POINTER(_P)]),
    "refit_member_join": (ctypes.c_int, [
        _S, ctypes.c_int32, _PP, ctypes.POINTER(_P),
        ctypes.POINTER(ctypes.c_int64), ctypes.c_double, ctypes.POINTER(_P)]),
    "refit_member_prepare": (ctypes.c_int, [_P, ctypes.c_double, ctypes.POINTER(_P)]),
    "refit_member_rejoin": (ctypes.c_int, [_P, ctypes.c_double]),
    "refit_member_plan_changed": (ctypes.c_int, [_P]),
    "refit_member_start_round": (ctypes.c_int, [_P, ctypes.c_int64, ctypes.c_double]),
    "refit_member_wait_for_round": (ctypes.c_int, [
        _P, ctypes.c_double, ctypes.POINTER(ctypes.c_int64)]),
    "refit_member_run_round": (ctypes.c_int, [
        _P, ctypes.c_int64, ctypes.c_double, ctypes.POINTER(_P)]),
    "refit_member_current_version": (ctypes.c_int, [
        _P, _S, ctypes.c_double, ctypes.POINTER(ctypes.c_int64)]),
    "refit_member_engine_state": (ctypes.c_int, [
        _P, _S, ctypes.c_double, ctypes.POINTER(ctypes.c_int64),
        ctypes.POINTER(ctypes.c_int64)]),
    "refit_member_kv_set": (ctypes.c_int, [_P, _S, _S, ctypes.c_double]),
    "refit_member_kv_get": (ctypes.c_int, [_P, _S, ctypes.c_double, ctypes.POINTER(_P)]),
    "refit_member_leave": (ctypes.c_int, [_P, ctypes.c_double]),
    "refit_member_close": (None, [_P]),
}

_library: Optional[ctypes.CDLL] = None
_library_path: Optional[str] = None


def _bundle_paths(name: str) -> List[str]:
    """Where library ``name`` may be: the wheel's ``refit/_native`` (with
    the libraries it needs in ``_native/lib``), then a bundle's top folder
    (``python/refit`` is two levels below it)."""
    here = os.path.dirname(os.path.abspath(__file__))
    return [os.path.join(here, "_native", name),
            os.path.abspath(os.path.join(here, "..", "..", name))]


def load_library(gpu: bool = False, path: Optional[str] = None) -> ctypes.CDLL:
    """Loads the client library once per process: ``path``, else
    ``$REFIT_CLIENT_LIB``, else from the wheel's ``refit/_native`` or the
    bundle folder above this package ``librefit_client_gpu.so`` (which serves host buffers too) when it loads
    here, or ``librefit_client.so``. ``gpu``: "cuda:N" buffers are needed,
    so the host-only library will not do.

    One process holds one of the two libraries: both register the same
    protobuf types, which the shared protobuf runtime refuses twice. Asking
    for another library than the loaded one raises FAILED_PRECONDITION."""
    return _load(gpu, path, "librefit_client_gpu.so", "librefit_client.so")


def _load(gpu: bool, path: Optional[str], gpu_name: str, host_name: str) -> ctypes.CDLL:
    """load_library's work, with the bundle's library names to look for."""
    global _library, _library_path
    if path is None:
        path = os.environ.get("REFIT_CLIENT_LIB")
    candidates = ([os.path.abspath(path)] if path else
                  _bundle_paths(gpu_name) + ([] if gpu else _bundle_paths(host_name)))
    if _library is not None:
        if path and os.path.abspath(path) != _library_path:
            raise RefitError(9, f"{_library_path} is loaded already; one process "
                                f"loads one refit client library, not also {path}")
        if gpu and b"cuda" not in _library.refit_build_info():
            raise RefitError(9, f"{_library_path} (host buffers only) is loaded "
                                f"already; GPU buffers need {gpu_name}")
        return _library
    errors = []
    for c in candidates:
        if not os.path.exists(c):
            errors.append(f"{c}: not found")
            continue
        try:
            lib = ctypes.CDLL(c)
        except OSError as e:
            errors.append(f"{c}: {e}")
            continue
        missing = [fn for fn in _SIGNATURES if not hasattr(lib, fn)]
        if missing:  # a library of another refit release than this module
            errors.append(f"{c}: lacks {', '.join(missing)} (a library from another "
                          f"refit release than this module: use the bundle's pair)")
            continue
        for fn, (res, args) in _SIGNATURES.items():
            f = getattr(lib, fn)
            f.restype = res
            f.argtypes = args
        _library, _library_path = lib, c
        return lib
    raise RefitError(5, "cannot load the refit client library: " + "; ".join(errors))


def loaded_library_path() -> Optional[str]:
    """The path of the client library this process loaded (None: none yet)."""
    return _library_path


def _check(lib: ctypes.CDLL, code: int) -> None:
    if code != 0:
        raise RefitError(code, lib.refit_last_error().decode("utf-8", "replace"))


def _take_string(lib: ctypes.CDLL, p: ctypes.c_void_p) -> str:
    try:
        return ctypes.string_at(p.value).decode("utf-8")
    finally:
        lib.refit_free(p)


def _options(**kw: Any) -> bytes:
    return json.dumps({k: v for k, v in kw.items() if v is not None}).encode()


def expected_buffers(*, side: str, rank: int, model: str, convention: str,
                     library: Optional[ctypes.CDLL] = None) -> List[BufferSpec]:
    """The buffers rank ``rank`` of ``side`` ("trainer" or "engine") must give
    under ``convention`` (e.g. ``"megatron:tp=2,pp=2"``, ``"vllm:tp=2"``) for
    ``model`` (a built-in name or a config.json path), in layout order."""
    lib = library or load_library()
    out = ctypes.c_void_p()
    _check(lib, lib.refit_expected_buffers(
        _options(side=side, rank=rank, model=model, convention=convention),
        ctypes.byref(out)))
    return [BufferSpec(b["name"], list(b["shape"]), b["dtype"], b["bytes"])
            for b in json.loads(_take_string(lib, out))]


def _address(name: str, obj: Any, device: str):
    """(address, nbytes, keep-alive) of a buffer given as a torch tensor, a
    numpy array, a writable buffer (bytearray, memoryview, ...), or an
    (address, nbytes) pair."""
    if isinstance(obj, tuple) and len(obj) == 2:
        return int(obj[0]), int(obj[1]), None
    if hasattr(obj, "data_ptr") and hasattr(obj, "element_size"):  # torch
        if not obj.is_contiguous():
            raise RefitError(3, f"buffer {name}: the tensor is not contiguous")
        dev = obj.device
        index = dev.index
        if dev.type == "cuda" and index is None:
            import torch  # a tensor on "cuda" without an index: the current one
            index = torch.cuda.current_device()
        where = "cpu" if dev.type == "cpu" else f"{dev.type}:{index}"
        if where != device:
            raise RefitError(3, f"buffer {name}: the tensor is on {where}, "
                                f"the member's device is {device}")
        return obj.data_ptr(), obj.numel() * obj.element_size(), obj
    if device != "cpu":
        raise RefitError(3, f"buffer {name}: only torch tensors can be {device} buffers")
    if hasattr(obj, "__array_interface__") and hasattr(obj, "ctypes"):  # numpy
        if not obj.flags["C_CONTIGUOUS"] or not obj.flags["WRITEABLE"]:
            raise RefitError(3, f"buffer {name}: the array must be C-contiguous "
                                f"and writeable")
        return obj.ctypes.data, obj.nbytes, obj
    try:
        view = memoryview(obj)
    except TypeError:
        raise RefitError(3, f"buffer {name}: a {type(obj).__name__} is neither a "
                            f"tensor, an array, a buffer nor (address, nbytes)") from None
    if view.readonly or not view.c_contiguous:
        raise RefitError(3, f"buffer {name}: the buffer must be writeable and contiguous")
    arr = (ctypes.c_char * view.nbytes).from_buffer(view)
    return ctypes.addressof(arr), view.nbytes, (view, arr)


# Element types the member's objects declare, in refit's dtype names.
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "f16", "float32": "f32",
                 "float64": "f64", "float8_e4m3fn": "f8e4m3",
                 "float8_e5m2": "f8e5m2", "int8": "i8", "uint8": "u8",
                 "int32": "i32", "int64": "i64"}
_NUMPY_DTYPES = {"float16": "f16", "float32": "f32", "float64": "f64",
                 "int8": "i8", "uint8": "u8", "int32": "i32", "int64": "i64"}
_BUFFER_FORMATS = {"e": "f16", "f": "f32", "d": "f64", "b": "i8", "B": "u8",
                   "c": "u8", "i": "i32", "q": "i64", "l": "i64"}
_BYTE_VIEWS = ("u8", "i8")  # raw bytes of any dtype: shape not compared


def _declared(obj: Any):
    """(refit dtype name or None, shape or None) an object declares."""
    if isinstance(obj, tuple):
        return None, None
    if hasattr(obj, "data_ptr") and hasattr(obj, "element_size"):  # torch
        return _TORCH_DTYPES.get(str(obj.dtype).replace("torch.", "")), list(obj.shape)
    if hasattr(obj, "__array_interface__") and hasattr(obj, "dtype"):  # numpy
        return _NUMPY_DTYPES.get(obj.dtype.name), list(obj.shape)
    try:
        view = memoryview(obj)
    except TypeError:
        return None, None
    return _BUFFER_FORMATS.get(view.format.lstrip("@=<>!")), None


def _type_problems(rank: int, want: List[BufferSpec], buffers: Dict[str, Any]) -> List[str]:
    """Buffers whose declared dtype or shape differs from the convention's
    (same byte size or not: a bf16 buffer given as f16 would otherwise move
    garbage silently). Byte views (uint8 / int8) are taken as raw bytes."""
    problems = []
    expected = {b.name: b for b in want}
    for name, obj in buffers.items():
        spec = expected.get(name)
        if spec is None:
            continue  # unknown names: the library lists them
        dtype, shape = _declared(obj)
        if dtype is None or (dtype in _BYTE_VIEWS and spec.dtype not in _BYTE_VIEWS):
            continue
        if dtype != spec.dtype:
            problems.append(f"rank {rank}: parameter {name}: dtype {dtype}, "
                            f"expected {spec.dtype}")
        elif shape is not None and shape != list(spec.shape):
            problems.append(f"rank {rank}: parameter {name}: shape {shape}, "
                            f"expected {list(spec.shape)}")
    return problems


def _c_arrays(items: Dict[str, int]):
    names = list(items)
    c_names = (ctypes.c_char_p * len(names))(*[n.encode() for n in names])
    c_ptrs = (ctypes.c_void_p * len(names))(*[items[n] for n in names])
    return len(names), c_names, c_ptrs


class Member:
    """One trainer rank or engine worker, registered with refitd.

    ``buffers`` maps every name of :func:`expected_buffers` to the member's
    own memory (torch tensors on ``device``, or host arrays/buffers for
    ``device="cpu"``). The memory is never allocated, moved or freed by
    refit; the member keeps a reference to each buffer until closed.
    Raises RefitError: INVALID_ARGUMENT listing every buffer that is
    unknown, missing, of the wrong size or null, or whose declared dtype or
    shape (a tensor's, an array's, a typed buffer's) differs from the
    convention's (naming the rank and the parameter; uint8/int8 objects are
    taken as raw bytes), before refitd is contacted; UNAVAILABLE when refitd cannot
    be reached within ``timeout``; refitd's own status otherwise.

    ``transport`` (GPU buffers): ``"nccl"`` (the default) or ``"ipc"``, CUDA
    IPC between the processes of one host, for a trainer and an engine that
    share GPUs (NCCL refuses two ranks on one GPU). Every member of a job
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
                 library: Optional[ctypes.CDLL] = None):
        self._lib = library or load_library(gpu=device.startswith("cuda"))
        self._handle = ctypes.c_void_p()
        self.device = device
        self.side = side
        self.engine_id = engine_id
        want = expected_buffers(side=side, rank=rank, model=model,
                                convention=convention, library=self._lib)
        problems = _type_problems(rank, want, buffers)
        if problems:
            raise RefitError(3, "\n".join(problems))
        resolved = {n: _address(n, b, device) for n, b in buffers.items()}
        self._buffers = dict(buffers)
        self._keep = [k for (_, _, k) in resolved.values()]
        n, c_names, c_ptrs = _c_arrays({k: v[0] for k, v in resolved.items()})
        sizes = (ctypes.c_int64 * n)(*[v[1] for v in resolved.values()])
        opts = _options(server=server, side=side, rank=rank, model=model,
                        convention=convention, engine_id=engine_id,
                        device=device, token=token, job=job, host_id=host_id,
                        verify=verify, heartbeat_ms=heartbeat_ms, tls=tls,
                        root_ca_pem=root_ca_pem,
                        client_cert_pem=client_cert_pem,
                        client_key_pem=client_key_pem, transport=transport,
                        job_key=job_key)
        _check(self._lib, self._lib.refit_member_join(
            opts, n, c_names, c_ptrs, sizes, float(timeout),
            ctypes.byref(self._handle)))
        self.info: Dict[str, Any] = {}

    def _h(self) -> ctypes.c_void_p:
        if not self._handle:
            raise RefitError(9, "the member is closed")
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
        _check(self._lib, self._lib.refit_member_rejoin(self._h(), float(timeout)))

    def prepare(self, timeout: float = 300.0) -> Dict[str, Any]:
        """Awaits this member's plan; returns and keeps in ``info`` its
        ``member_id``, ``fingerprint``, ``global_rank``, ``global_world``."""
        out = ctypes.c_void_p()
        _check(self._lib, self._lib.refit_member_prepare(
            self._h(), float(timeout), ctypes.byref(out)))
        self.info = json.loads(_take_string(self._lib, out))
        return self.info

    def plan_changed(self) -> bool:
        """True when refitd has a newer plan: call prepare() again."""
        return bool(self._lib.refit_member_plan_changed(self._h()))

    def start_round(self, version: int, timeout: float = 60.0) -> None:
        """Starts round ``version`` (trainer ranks; once every rank holds it)."""
        _check(self._lib, self._lib.refit_member_start_round(
            self._h(), int(version), float(timeout)))

    def wait_for_round(self, timeout: float = 60.0) -> int:
        """The version of the next round refitd announces."""
        v = ctypes.c_int64()
        _check(self._lib, self._lib.refit_member_wait_for_round(
            self._h(), float(timeout), ctypes.byref(v)))
        return v.value

    def run_round(self, version: int, timeout: float = 300.0) -> Dict[str, Any]:
        """Moves this member's bytes of round ``version`` and waits for the
        commit. Returns ``bytes_sent``, ``bytes_received``, ``seconds``,
        ``peak_staging_bytes``; raises RefitError ABORTED with refitd's
        reason when the round was aborted."""
        out = ctypes.c_void_p()
        _check(self._lib, self._lib.refit_member_run_round(
            self._h(), int(version), float(timeout), ctypes.byref(out)))
        return json.loads(_take_string(self._lib, out))

    def current_version(self, engine_id: str, timeout: float = 10.0) -> int:
        """The last version committed into engine ``engine_id`` (0: none)."""
        v = ctypes.c_int64()
        _check(self._lib, self._lib.refit_member_current_version(
            self._h(), engine_id.encode(), float(timeout), ctypes.byref(v)))
        return v.value

    def engine_state(self, engine_id: str, timeout: float = 10.0) -> "EngineState":
        """``committed``: the last version committed into engine
        ``engine_id`` (0: none). ``torn``: non-zero when round ``torn``
        aborted after it had started there, so the engine's buffers may hold
        part of it and no single version until a later round commits: do not
        serve from them until then."""
        c, t = ctypes.c_int64(), ctypes.c_int64()
        _check(self._lib, self._lib.refit_member_engine_state(
            self._h(), engine_id.encode(), float(timeout), ctypes.byref(c),
            ctypes.byref(t)))
        return EngineState(c.value, t.value)

    def kv_set(self, key: str, value: str, timeout: float = 10.0) -> None:
        _check(self._lib, self._lib.refit_member_kv_set(
            self._h(), key.encode(), value.encode(), float(timeout)))

    def kv_get(self, key: str, timeout: float = 10.0) -> str:
        """Waits for ``key`` in refitd's store (DEADLINE_EXCEEDED naming it)."""
        out = ctypes.c_void_p()
        _check(self._lib, self._lib.refit_member_kv_get(
            self._h(), key.encode(), float(timeout), ctypes.byref(out)))
        return _take_string(self._lib, out)

    def leave(self, timeout: float = 10.0) -> None:
        """Leaves the membership (an engine replica going away)."""
        _check(self._lib, self._lib.refit_member_leave(self._h(), float(timeout)))

    def close(self) -> None:
        """Stops the member's threads (bounded) and releases the buffers."""
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
