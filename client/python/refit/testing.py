"""Test helpers of refit's client library: the deterministic test pattern of
a weight version in a member's buffers. Trainers fill it before a round,
engines check it after the commit; both from their own rank's layout, so a
check proves every byte arrived where the engine's convention says.

They need a testing variant of the library (``librefit_client_testing.so``
or ``librefit_client_gpu_testing.so``: the client library plus the testing
ABI of testing/c_api_testing.h). Load it before the first Member::

    import refit, refit.testing
    refit.testing.load_library(gpu=True)   # or REFIT_CLIENT_LIB=<its path>
    m = refit.Member(...)
    refit.testing.fill_pattern(m, version)

With the shipped library loaded instead, the helpers raise RefitError
FAILED_PRECONDITION saying which library to load.
"""

import ctypes
from typing import Dict, Optional

from . import FailedPreconditionError, Member, loaded_library_path, raise_for_status
from . import load_library as _load_library

__all__ = ["load_library", "fill_pattern", "check_pattern"]

_PATTERN_ARGS = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32,
                 ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_void_p)]


def load_library(gpu: bool = False, path: Optional[str] = None) -> ctypes.CDLL:
    """As refit.load_library, but the bundle's testing variants:
    ``librefit_client_gpu_testing.so`` or ``librefit_client_testing.so``.
    Raises FAILED_PRECONDITION when the loaded library lacks the testing
    ABI (a shipped library was loaded first: one process loads one)."""
    lib = _load_library(gpu, path, testing=True)
    _testing_function(lib, "refit_testing_fill_pattern")
    return lib


def _testing_function(lib: ctypes.CDLL, name: str):
    if not hasattr(lib, name):
        raise FailedPreconditionError(
            f"{loaded_library_path()} has no testing ABI ({name}): test patterns need "
            f"librefit_client_testing.so or librefit_client_gpu_testing.so, loaded "
            f"before the first Member (refit.testing.load_library())")
    f = getattr(lib, name)
    f.restype = ctypes.c_int
    f.argtypes = _PATTERN_ARGS
    return f


def _pattern(member: Member, name: str, version: int, write_back: bool) -> None:
    """Calls the testing ABI's `name` on the member's buffers, giving host
    copies of its CUDA tensors (written back when `write_back`)."""
    lib = member.library
    fn = _testing_function(lib, name)
    host: Dict[str, int] = {}
    copies = []
    for buffer_name, b in member.buffers.items():
        if hasattr(b, "data_ptr") and getattr(b, "is_cuda", False):
            h = b.detach().cpu().contiguous()
            host[buffer_name] = h.data_ptr()
            copies.append((b, h))
    names = (ctypes.c_char_p * len(host))(*[n.encode() for n in host])
    ptrs = (ctypes.c_void_p * len(host))(*host.values())
    raise_for_status(fn(member.handle(), int(version), len(host), names, ptrs), lib)
    if write_back and copies:
        import torch  # copies exist only for torch tensors
        with torch.no_grad():  # parameters that require grad, too
            for b, h in copies:
                b.copy_(h)


def fill_pattern(member: Member, version: int) -> None:
    """Writes weight version ``version``'s deterministic pattern into this
    (trainer) member's buffers."""
    _pattern(member, "refit_testing_fill_pattern", version, True)


def check_pattern(member: Member, version: int) -> None:
    """Raises RefitError INTERNAL naming the first wrong elements unless
    every byte of this (engine) member's records holds version
    ``version``'s pattern."""
    _pattern(member, "refit_testing_check_pattern", version, False)
