"""Stand-ins for the parts of torch refit.torch and refit.vllm read: host
tensors over ctypes memory (shape, dtype, data_ptr, element_size, numel,
is_contiguous, device, copy_), DTensors (placements, to_local) with
Shard / Replicate / Partial placements, and modules (named_parameters,
named_buffers). For CPU tests on machines without torch."""

import ctypes
import types
from typing import Dict, List, Sequence, Tuple

_SIZES = {"bfloat16": 2, "float16": 2, "float32": 4, "uint8": 1}


class DType:
    def __init__(self, name: str):
        self.name = name

    def __str__(self) -> str:
        return f"torch.{self.name}"

    __repr__ = __str__


bfloat16 = DType("bfloat16")
float32 = DType("float32")


class Tensor:
    """A C-contiguous host tensor owning ctypes memory."""

    def __init__(self, shape: Sequence[int], dtype: DType = bfloat16, contiguous: bool = True):
        self.shape = tuple(shape)
        self.dtype = dtype
        self._contiguous = contiguous
        self.device = types.SimpleNamespace(type="cpu", index=None)
        self._mem = (ctypes.c_char * max(self.nbytes(), 1))()

    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def element_size(self) -> int:
        return _SIZES[self.dtype.name]

    def nbytes(self) -> int:
        return self.numel() * self.element_size()

    def data_ptr(self) -> int:
        return ctypes.addressof(self._mem)

    def is_contiguous(self) -> bool:
        return self._contiguous

    def fill_bytes(self, seed: int) -> None:
        for i in range(self.nbytes()):
            self._mem[i] = bytes([(seed * 131 + i * 7) % 251])

    def raw(self) -> bytes:
        return bytes(self._mem[:self.nbytes()])

    def copy_(self, other: "Tensor") -> "Tensor":
        ctypes.memmove(self.data_ptr(), other.data_ptr(), self.nbytes())
        return self


class Shard:
    def __init__(self, dim: int):
        self.dim = dim

    def __repr__(self) -> str:
        return f"Shard(dim={self.dim})"


class Replicate:
    def __repr__(self) -> str:
        return "Replicate()"


class Partial:
    def __repr__(self) -> str:
        return "Partial(sum)"


class DTensor:
    """A distributed tensor: global shape, this rank's local tensor."""

    def __init__(self, shape: Sequence[int], local: Tensor, placements: Sequence[object]):
        self.shape = tuple(shape)
        self.dtype = local.dtype
        self.placements = tuple(placements)
        self._local = local

    def to_local(self) -> Tensor:
        return self._local


class Module:
    """A module as a flat list of (name, parameter), tied entries included
    (remove_duplicate=False), plus named buffers."""

    def __init__(self, params: List[Tuple[str, object]], buffers: List[Tuple[str, object]] = ()):
        self._params = list(params)
        self._buffers = list(buffers)

    def named_parameters(self, remove_duplicate: bool = True):
        seen = set()
        for name, p in self._params:
            if remove_duplicate and id(p) in seen:
                continue
            seen.add(id(p))
            yield name, p

    def named_buffers(self):
        return iter(self._buffers)


def chunk_rows(rows: int, parts: int, index: int) -> int:
    """torch.chunk's row count of chunk ``index`` of ``parts``."""
    size = -(-rows // parts)
    return max(0, min(size, rows - size * index))


def module_from_specs(specs, wrap=lambda n: n, dtensor_world: int = 0) -> Tuple[Module, Dict[str, Tensor]]:
    """A module holding a tensor per BufferSpec (names through ``wrap``),
    each a DTensor Shard(0) over ``dtensor_world`` ranks when non-zero (the
    spec's shape being the local one); returns it and {spec name: local}."""
    params, locals_ = [], {}
    for i, s in enumerate(specs):
        t = Tensor(s.shape, bfloat16 if s.dtype == "bf16" else float32)
        t.fill_bytes(i + 1)
        locals_[s.name] = t
        p = (DTensor([s.shape[0] * dtensor_world] + list(s.shape[1:]), t, [Shard(0)])
             if dtensor_world else t)
        params.append((wrap(s.name), p))
    return Module(params), locals_
