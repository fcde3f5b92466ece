"""Stand-ins for the parts of torch refit.torch and refit.vllm read: host
tensors over ctypes memory (shape, dtype, data_ptr, element_size, numel,
is_contiguous, device, copy_; float32 ones also values, *, mul_ and max,
what refit.engine_layouts' NVFP4 alpha refresh computes), DTensors
(placements, to_local) with Shard / Replicate / Partial placements, and
modules (named_parameters, named_buffers). For CPU tests on machines
without torch."""

import ctypes
import struct
import types
from typing import Dict, List, Sequence, Tuple

_SIZES = {"bfloat16": 2, "float16": 2, "float32": 4, "uint8": 1, "float8_e4m3fn": 1}


class DType:
    def __init__(self, name: str):
        self.name = name

    def __str__(self) -> str:
        return f"torch.{self.name}"

    __repr__ = __str__


bfloat16 = DType("bfloat16")
float32 = DType("float32")
uint8 = DType("uint8")
float8_e4m3fn = DType("float8_e4m3fn")


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

    def values(self) -> List[float]:
        """A float32 tensor's elements, row-major."""
        assert self.dtype is float32, self.dtype
        return list(struct.unpack(f"<{self.numel()}f", self.raw()))

    def set_values(self, values: Sequence[float]) -> "Tensor":
        """Writes float32 elements (rounded to f32), row-major."""
        assert self.dtype is float32 and len(values) == self.numel()
        ctypes.memmove(self.data_ptr(), struct.pack(f"<{len(values)}f", *values), self.nbytes())
        return self

    @staticmethod
    def f32(values: Sequence[float], shape: Sequence[int]) -> "Tensor":
        return Tensor(shape, float32).set_values(values)

    def __mul__(self, other: "Tensor") -> "Tensor":
        """float32 elementwise product (the other of the same shape, or 0-d),
        rounded to f32 as torch's is."""
        a, b = self.values(), other.values()
        if len(b) == 1:
            b = b * len(a)
        return Tensor.f32([x * y for x, y in zip(a, b)], self.shape)

    def mul_(self, other: "Tensor") -> "Tensor":
        return self.copy_(self * other)

    def max(self) -> "Tensor":
        """The largest element, a 0-d float32 tensor."""
        return Tensor.f32([max(self.values())], ())


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


class Layer:
    """torch.nn.Module's attribute semantics: a Tensor set as an attribute
    is a parameter (deleting the attribute removes it), a Layer one a child;
    named_modules / named_parameters walk the tree with dotted prefixes, in
    the order they were set."""

    def __init__(self) -> None:
        object.__setattr__(self, "_params", {})
        object.__setattr__(self, "_children", {})

    def __setattr__(self, name: str, value: object) -> None:
        for table in (self._params, self._children):
            table.pop(name, None)
        if isinstance(value, Tensor):
            self._params[name] = value
        elif isinstance(value, Layer):
            self._children[name] = value
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        self._params.pop(name, None)
        self._children.pop(name, None)
        object.__delattr__(self, name)

    def register_parameter(self, name: str, value: Tensor) -> None:
        setattr(self, name, value)

    def child(self, path: str) -> "Layer":
        """The descendant at dotted ``path``, created empty where missing."""
        layer = self
        for part in filter(None, path.split(".")):
            if part not in layer._children:
                setattr(layer, part, Layer())
            layer = layer._children[part]
        return layer

    def named_modules(self, prefix: str = ""):
        yield prefix, self
        for name, c in self._children.items():
            yield from c.named_modules(f"{prefix}.{name}" if prefix else name)

    def named_parameters(self, remove_duplicate: bool = True):
        seen = set()
        for prefix, m in self.named_modules():
            for name, p in m._params.items():
                if remove_duplicate and id(p) in seen:
                    continue
                seen.add(id(p))
                yield (f"{prefix}.{name}" if prefix else name), p

    def named_buffers(self):
        return iter(())
