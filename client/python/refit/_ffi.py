"""The ctypes side of the ``refit`` module (private): which client library
to load and from where, the C ABI's signatures (client/c_api.h), and the
conversions every call needs (JSON options, returned strings, status codes
into exceptions). The public API is in ``refit/__init__.py``."""

import ctypes
import json
import os
import re
from typing import Any, Dict, List, Optional, Tuple

from ._status import RefitError, StatusCode

_P = ctypes.c_void_p
_S = ctypes.c_char_p
_PP = ctypes.POINTER(ctypes.c_char_p)
SIGNATURES = {
    "refit_last_error": (_S, []),
    "refit_free": (None, [_P]),
    "refit_build_info": (_S, []),
    "refit_expected_buffers": (ctypes.c_int, [_S, ctypes.POINTER(_P)]),
    "refit_member_join": (ctypes.c_int, [
        _S, ctypes.c_int32, _PP, ctypes.POINTER(_P),
        ctypes.POINTER(ctypes.c_int64), ctypes.c_double, ctypes.POINTER(_P)]),
    "refit_member_prepare": (ctypes.c_int, [_P, ctypes.c_double, ctypes.POINTER(_P)]),
    "refit_member_rejoin": (ctypes.c_int, [_P, ctypes.c_double]),
    "refit_refuse": (ctypes.c_int, [_S, _S, ctypes.c_double]),
    "refit_member_plan_changed": (ctypes.c_int, [_P]),
    "refit_member_start_round": (ctypes.c_int, [_P, ctypes.c_int64, ctypes.c_double]),
    "refit_member_start_next_round": (ctypes.c_int, [
        _P, ctypes.c_double, ctypes.POINTER(ctypes.c_int64)]),
    "refit_member_wait_for_round": (ctypes.c_int, [
        _P, ctypes.c_double, ctypes.POINTER(ctypes.c_int64)]),
    "refit_member_round_progress": (ctypes.c_int, [
        _P, ctypes.c_int64, ctypes.c_double, ctypes.POINTER(_P)]),
    "refit_member_run_round": (ctypes.c_int, [
        _P, ctypes.c_int64, ctypes.c_double, ctypes.POINTER(_P)]),
    "refit_member_receive_round": (ctypes.c_int, [
        _P, ctypes.c_int64, ctypes.c_double, ctypes.POINTER(_P)]),
    "refit_member_apply_round": (ctypes.c_int, [
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

# The libraries of a bundle or wheel: (shipped, testing variant).
GPU_NAMES = ("librefit_client_gpu.so", "librefit_client_gpu_testing.so")
HOST_NAMES = ("librefit_client.so", "librefit_client_testing.so")

_library: Optional[ctypes.CDLL] = None
_library_path: Optional[str] = None


def bundle_paths(name: str) -> List[str]:
    """Where library ``name`` may be: the wheel's ``refit/_native`` (with
    the libraries it needs in ``_native/lib``), then a bundle's top folder
    (``python/refit`` is two levels below it)."""
    here = os.path.dirname(os.path.abspath(__file__))
    return [os.path.join(here, "_native", name),
            os.path.abspath(os.path.join(here, "..", "..", name))]


def usable_gpu(environ: Optional[Dict[str, str]] = None, dev: str = "/dev") -> bool:
    """Whether this process may use an NVIDIA GPU, judged without
    initializing CUDA (a process that did cannot hand CUDA to children it
    forks later): ``CUDA_VISIBLE_DEVICES`` does not hide every device, and
    the driver made a device node ``/dev/nvidia<N>``. A machine with the
    CUDA toolkit but no GPU (or no driver) has none."""
    env = os.environ if environ is None else environ
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1", "NoDevFiles"):
        return False
    try:
        return any(re.fullmatch(r"nvidia[0-9]+", n) for n in os.listdir(dev))
    except OSError:
        return False


def candidates(gpu: bool, testing: bool, path: Optional[str],
               gpu_present: Optional[bool] = None) -> List[str]:
    """The paths load() tries, in order: ``path`` alone when given; else the
    GPU library when ``gpu`` (GPU buffers need it); else, when this machine
    has a usable GPU, the GPU library (it serves host buffers too) before
    the host one, and the host one first otherwise."""
    if path:
        return [os.path.abspath(path)]
    gpu_name, host_name = GPU_NAMES[testing], HOST_NAMES[testing]
    if gpu:
        return bundle_paths(gpu_name)
    if usable_gpu() if gpu_present is None else gpu_present:
        return bundle_paths(gpu_name) + bundle_paths(host_name)
    return bundle_paths(host_name) + bundle_paths(gpu_name)


# What each host library the GPU client needs is, for the error that names it.
HOST_LIBRARIES = {
    "libcudart.so": "the CUDA runtime (a CUDA toolkit, or pip's nvidia-cuda-runtime "
                    "package, on LD_LIBRARY_PATH)",
    "libnccl.so": "NCCL (pip's nvidia-nccl package, or the system's libnccl2, on "
                  "LD_LIBRARY_PATH)",
    "libcuda.so": "the NVIDIA driver",
}


def missing_library_advice(error: str) -> str:
    """The loader's ``error``, and where a shared library is missing, which
    one, what provides it, and that host buffers need none of it."""
    m = re.match(r"([^:\s]+\.so[.\d]*): cannot open shared object file", error)
    if m is None:
        return error
    name = m.group(1)
    what = next((w for k, w in HOST_LIBRARIES.items() if name.startswith(k)), None)
    if what is None:
        return f"{error} (it needs {name}, which this host does not provide)"
    return (f"it needs {name}, {what}, which this host does not provide; host buffers "
            f"need none of it (librefit_client.so, the CPU wheel) [{error}]")


def load(gpu: bool, path: Optional[str], testing: bool) -> ctypes.CDLL:
    """refit.load_library's work (see there)."""
    global _library, _library_path
    if path is None:
        path = os.environ.get("REFIT_CLIENT_LIB")
    if _library is not None:
        if path and os.path.abspath(path) != _library_path:
            raise RefitError(StatusCode.FAILED_PRECONDITION,
                             f"{_library_path} is loaded already; one process loads one "
                             f"refit client library, not also {path}")
        if gpu and b"cuda" not in _library.refit_build_info():
            raise RefitError(StatusCode.FAILED_PRECONDITION,
                             f"{_library_path} (host buffers only) is loaded already; "
                             f"GPU buffers need {GPU_NAMES[testing]}")
        return _library
    errors = []
    for c in candidates(gpu, testing, path):
        if not os.path.exists(c):
            errors.append(f"{c}: not found")
            continue
        try:
            lib = ctypes.CDLL(c)
        except OSError as e:
            errors.append(f"{c}: {missing_library_advice(str(e))}")
            continue
        missing = [fn for fn in SIGNATURES if not hasattr(lib, fn)]
        if missing:  # a library of another refit release than this module
            errors.append(f"{c}: lacks {', '.join(missing)} (a library from another "
                          f"refit release than this module: use the bundle's pair)")
            continue
        for fn, (res, args) in SIGNATURES.items():
            f = getattr(lib, fn)
            f.restype = res
            f.argtypes = args
        _library, _library_path = lib, c
        return lib
    raise RefitError(StatusCode.NOT_FOUND,
                     "cannot load the refit client library: " + "; ".join(errors))


def loaded_path() -> Optional[str]:
    return _library_path


def check(lib: ctypes.CDLL, code: int) -> None:
    """Raises the RefitError of a C ABI result (0: returns)."""
    if code != 0:
        raise RefitError(code, lib.refit_last_error().decode("utf-8", "replace"))


def take_string(lib: ctypes.CDLL, p: ctypes.c_void_p) -> str:
    """The string the library returned through ``p``, freed."""
    try:
        return ctypes.string_at(p.value).decode("utf-8")
    finally:
        lib.refit_free(p)


def options(**kw: Any) -> bytes:
    """JSON options of the C ABI, None values left out."""
    return json.dumps({k: v for k, v in kw.items() if v is not None}).encode()


def c_arrays(items: Dict[str, int]) -> Tuple[int, Any, Any]:
    """(n, names, addresses) as the C ABI's parallel arrays."""
    names = list(items)
    c_names = (ctypes.c_char_p * len(names))(*[n.encode() for n in names])
    c_ptrs = (ctypes.c_void_p * len(names))(*[items[n] for n in names])
    return len(names), c_names, c_ptrs
