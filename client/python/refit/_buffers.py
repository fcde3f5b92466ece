"""A member's buffers as the C ABI takes them (private): the address and
size of a torch tensor, a numpy array, a writable buffer or an
``(address, nbytes)`` pair, and the checks of what each object declares
(element type, its width, shape) against the convention's buffer, made
before anything is sent."""

import ctypes
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from ._status import InvalidArgumentError

# Element types the member's objects declare, in refit's dtype names.
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "f16", "float32": "f32",
                 "float64": "f64", "float8_e4m3fn": "f8e4m3",
                 "float8_e5m2": "f8e5m2", "int8": "i8", "uint8": "u8",
                 "int32": "i32", "int64": "i64"}
# numpy's, and ml_dtypes' (bfloat16, float8_*) where it is installed.
_NUMPY_DTYPES = {"float16": "f16", "float32": "f32", "float64": "f64",
                 "int8": "i8", "uint8": "u8", "int32": "i32", "int64": "i64",
                 "bfloat16": "bf16", "float8_e4m3fn": "f8e4m3",
                 "float8_e5m2": "f8e5m2"}
_BUFFER_FORMATS = {"e": "f16", "f": "f32", "d": "f64", "b": "i8", "B": "u8",
                   "c": "u8", "i": "i32", "q": "i64", "l": "i64"}
_BYTE_VIEWS = ("u8", "i8")  # raw bytes of any dtype: shape not compared
# Bytes an element of each refit dtype takes (layout/dtype.cc).
WIDTHS = {"bf16": 2, "f16": 2, "f32": 4, "f64": 8, "f8e4m3": 1, "f8e5m2": 1,
          "i8": 1, "u8": 1, "i32": 4, "i64": 8, "bytes": 1}


class Declared(NamedTuple):
    """What an object says of its elements: refit's name of its dtype (None
    when refit has none, e.g. numpy's uint16), its element's width in bytes
    and its shape (None where the object does not say)."""
    dtype: Optional[str]
    type_name: Optional[str]
    width: Optional[int]
    shape: Optional[List[int]]


def _is_torch(obj: Any) -> bool:
    return hasattr(obj, "data_ptr") and hasattr(obj, "element_size")


def _is_numpy(obj: Any) -> bool:
    return hasattr(obj, "__array_interface__") and hasattr(obj, "dtype")


def declared(obj: Any) -> Declared:
    """What ``obj`` declares (all None for an ``(address, nbytes)`` pair or
    an untyped object)."""
    if isinstance(obj, tuple):
        return Declared(None, None, None, None)
    if _is_torch(obj):
        name = str(obj.dtype).replace("torch.", "")
        return Declared(_TORCH_DTYPES.get(name), name, int(obj.element_size()),
                        list(obj.shape))
    if _is_numpy(obj):
        name = obj.dtype.name
        return Declared(_NUMPY_DTYPES.get(name), name, int(obj.dtype.itemsize),
                        list(obj.shape))
    try:
        view = memoryview(obj)
    except TypeError:
        return Declared(None, None, None, None)
    fmt = view.format.lstrip("@=<>!")
    return Declared(_BUFFER_FORMATS.get(fmt), f"format '{fmt}'", view.itemsize, None)


def _hint(spec_dtype: str) -> str:
    if spec_dtype == "bf16":
        return (" (numpy has no bf16: give a np.uint16 array of the same shape, "
                "an ml_dtypes.bfloat16 array, or a uint8 byte view)")
    return ""


def type_problems(rank: int, want: List[Any], buffers: Dict[str, Any]) -> List[str]:
    """Buffers whose declared dtype, element width or shape differs from
    the convention's, one line each naming the rank and the parameter (same
    byte size or not: a transposed weight or a bf16 buffer given as f16
    would otherwise move garbage silently). A dtype refit has no name for
    (numpy's uint16 for a bf16 weight) passes as the bits of an element of
    the same width, shape compared; uint8 / int8 objects are raw bytes
    whose shape is not compared."""
    problems = []
    expected = {b.name: b for b in want}
    for name, obj in buffers.items():
        spec = expected.get(name)
        if spec is None:
            continue  # unknown names: the library lists them
        d = declared(obj)
        where = f"rank {rank}: parameter {name}"
        if d.dtype in _BYTE_VIEWS and spec.dtype not in _BYTE_VIEWS:
            continue
        if d.dtype is not None and d.dtype != spec.dtype:
            problems.append(f"{where}: dtype {d.dtype}, expected {spec.dtype}"
                            f"{_hint(spec.dtype)}")
            continue
        want_width = WIDTHS.get(spec.dtype)
        if d.dtype is None and d.width is not None and want_width is not None \
                and d.width != want_width:
            problems.append(f"{where}: dtype {d.type_name} has {d.width}-byte elements, "
                            f"expected {spec.dtype} ({want_width} bytes){_hint(spec.dtype)}")
            continue
        if d.width is not None and d.shape is not None and d.shape != list(spec.shape):
            problems.append(f"{where}: shape {d.shape}, expected {list(spec.shape)}")
    return problems


def address(name: str, obj: Any, device: str) -> Tuple[int, int, Any]:
    """(address, nbytes, keep-alive) of a buffer given as a torch tensor, a
    numpy array, a writable buffer (bytearray, memoryview, ...), or an
    (address, nbytes) pair. Raises InvalidArgumentError naming the buffer."""
    if isinstance(obj, tuple) and len(obj) == 2:
        return int(obj[0]), int(obj[1]), None
    if _is_torch(obj):
        if not obj.is_contiguous():
            raise InvalidArgumentError(f"buffer {name}: the tensor is not contiguous")
        dev = obj.device
        index = dev.index
        if dev.type == "cuda" and index is None:
            import torch  # a tensor on "cuda" without an index: the current one
            index = torch.cuda.current_device()
        where = "cpu" if dev.type == "cpu" else f"{dev.type}:{index}"
        if where != device:
            raise InvalidArgumentError(f"buffer {name}: the tensor is on {where}, "
                                       f"the member's device is {device}")
        return obj.data_ptr(), obj.numel() * obj.element_size(), obj
    if device != "cpu":
        raise InvalidArgumentError(f"buffer {name}: only torch tensors can be {device} "
                                   f"buffers")
    if hasattr(obj, "__array_interface__") and hasattr(obj, "ctypes"):  # numpy
        if not obj.flags["C_CONTIGUOUS"] or not obj.flags["WRITEABLE"]:
            raise InvalidArgumentError(f"buffer {name}: the array must be C-contiguous "
                                       f"and writeable")
        return obj.ctypes.data, obj.nbytes, obj
    try:
        view = memoryview(obj)
    except TypeError:
        raise InvalidArgumentError(f"buffer {name}: a {type(obj).__name__} is neither a "
                                   f"tensor, an array, a buffer nor (address, nbytes)"
                                   ) from None
    if view.readonly or not view.c_contiguous:
        raise InvalidArgumentError(f"buffer {name}: the buffer must be writeable and "
                                   f"contiguous")
    arr = (ctypes.c_char * view.nbytes).from_buffer(view)
    return ctypes.addressof(arr), view.nbytes, (view, arr)
