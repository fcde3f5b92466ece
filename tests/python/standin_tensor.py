"""A strided host tensor in pure Python with the torch tensor methods
refit.engine_layouts uses (views that share storage: t, view, unflatten,
split, permute, transpose, slicing; copy_, to, contiguous, elementwise *,
repeat_interleave, frexp, eq, all, item, untyped_storage), and the dtype
rounding of bfloat16, float32 and float8_e4m3fn values. For CPU tests on
machines without torch; slow, for tensors of a few thousand elements."""

import bisect
import math
import struct
from typing import List, Sequence


class DType:
    def __init__(self, name: str):
        self.name = name

    def __str__(self) -> str:
        return f"torch.{self.name}"

    __repr__ = __str__


bfloat16 = DType("bfloat16")
float32 = DType("float32")
float8_e4m3fn = DType("float8_e4m3fn")
float8_e4m3fnuz = DType("float8_e4m3fnuz")
int32 = DType("int32")
uint8 = DType("uint8")
bool_ = DType("bool")


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _bf16(x: float) -> float:
    bits = struct.unpack("<I", struct.pack("<f", _f32(x)))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000  # round to nearest even
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def e4m3_values() -> List[float]:
    """Every finite non-negative e4m3fn value."""
    out = []
    for e in range(16):
        for m in range(8):
            if e == 15 and m == 7:
                continue  # NaN
            out.append(math.ldexp(m / 8, -6) if e == 0 else math.ldexp(1 + m / 8, e - 7))
    return out


_E4M3 = sorted(e4m3_values())


def _e4m3(x: float) -> float:
    """Nearest e4m3 value after clamping to 448 (ties to the even code)."""
    a = min(abs(x), 448.0)
    i = bisect.bisect_left(_E4M3, a)
    if i < len(_E4M3) and _E4M3[i] == a:
        return math.copysign(a, x)
    lo, hi = _E4M3[i - 1], _E4M3[i]
    if a - lo != hi - a:
        best = lo if a - lo < hi - a else hi
    else:
        best = lo if (i - 1) % 2 == 0 else hi  # codes are in value order
    return math.copysign(best, x)


_ROUND = {"bfloat16": _bf16, "float32": _f32, "float8_e4m3fn": _e4m3,
          "float8_e4m3fnuz": _e4m3, "int32": int, "uint8": int, "bool": bool}


class _Storage:
    def __init__(self, values: List[float]):
        self.values = values

    def data_ptr(self) -> int:
        return id(self)


class Tensor:
    def __init__(self, storage: _Storage, shape: Sequence[int], strides: Sequence[int],
                 offset: int, dtype: DType):
        self._s = storage
        self.shape = tuple(shape)
        self._strides = tuple(strides)
        self._offset = offset
        self.dtype = dtype

    # --- construction -------------------------------------------------
    @staticmethod
    def of(values: Sequence[float], shape: Sequence[int], dtype: DType) -> "Tensor":
        r = _ROUND[dtype.name]
        return Tensor(_Storage([r(v) for v in values]), shape, _contiguous_strides(shape), 0,
                      dtype)

    def _indices(self):
        idx = [0] * len(self.shape)
        n = 1
        for d in self.shape:
            n *= d
        for _ in range(n):
            yield list(idx)
            for d in range(len(idx) - 1, -1, -1):
                idx[d] += 1
                if idx[d] < self.shape[d]:
                    break
                idx[d] = 0

    def _pos(self, idx) -> int:
        return self._offset + sum(i * s for i, s in zip(idx, self._strides))

    def flat(self) -> List[float]:
        return [self._s.values[self._pos(i)] for i in self._indices()]

    def tolist(self):
        vals = self.flat()

        def build(d, at):
            if d == len(self.shape):
                return vals[at], at + 1
            out = []
            for _ in range(self.shape[d]):
                x, at = build(d + 1, at)
                out.append(x)
            return out, at
        return build(0, 0)[0]

    def untyped_storage(self) -> _Storage:
        return self._s

    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    # --- views ----------------------------------------------------------
    def _view(self, shape, strides, offset=None) -> "Tensor":
        return Tensor(self._s, shape, strides, self._offset if offset is None else offset,
                      self.dtype)

    def t(self) -> "Tensor":
        return self.transpose(0, 1)

    @property
    def T(self) -> "Tensor":
        return self.t()

    def transpose(self, a: int, b: int) -> "Tensor":
        shape, st = list(self.shape), list(self._strides)
        shape[a], shape[b] = shape[b], shape[a]
        st[a], st[b] = st[b], st[a]
        return self._view(shape, st)

    def permute(self, *dims: int) -> "Tensor":
        return self._view([self.shape[d] for d in dims], [self._strides[d] for d in dims])

    def view(self, *shape: int) -> "Tensor":
        shape = list(shape)
        if -1 in shape:
            k = shape.index(-1)
            rest = 1
            for i, d in enumerate(shape):
                if i != k:
                    rest *= d
            shape[k] = self.numel() // rest
        strides = _view_strides(self.shape, self._strides, shape)
        if strides is None:
            raise RuntimeError("view size is not compatible with input tensor's size and stride")
        return self._view(shape, strides)

    def unflatten(self, dim: int, sizes: Sequence[int]) -> "Tensor":
        shape = list(self.shape[:dim]) + list(sizes) + list(self.shape[dim + 1:])
        return self.view(*shape)

    def split(self, sizes: Sequence[int], dim: int = 0) -> List["Tensor"]:
        dim = dim % len(self.shape)
        out, at = [], 0
        for n in sizes:
            shape = list(self.shape)
            shape[dim] = n
            out.append(self._view(shape, self._strides, self._offset + at * self._strides[dim]))
            at += n
        return out

    def __getitem__(self, key) -> "Tensor":
        if not isinstance(key, tuple):
            key = (key,)
        shape, offset = list(self.shape), self._offset
        for d, k in enumerate(key):
            start, stop, _ = k.indices(self.shape[d])
            shape[d] = max(0, stop - start)
            offset += start * self._strides[d]
        return self._view(shape, self._strides, offset)

    # --- values ---------------------------------------------------------
    def contiguous(self) -> "Tensor":
        return Tensor(_Storage(self.flat()), self.shape, _contiguous_strides(self.shape), 0,
                      self.dtype)

    def to(self, dtype: DType) -> "Tensor":
        if dtype.name == self.dtype.name:
            return self
        return Tensor.of(self.flat(), self.shape, dtype)

    def copy_(self, src: "Tensor") -> "Tensor":
        assert tuple(src.shape) == self.shape, (src.shape, self.shape)
        r = _ROUND[self.dtype.name]
        for i, v in zip(self._indices(), src.flat()):
            self._s.values[self._pos(i)] = r(v)
        return self

    def __mul__(self, other: "Tensor") -> "Tensor":
        assert tuple(other.shape) == self.shape
        return Tensor.of([a * b for a, b in zip(self.flat(), other.flat())], self.shape,
                         float32)

    def repeat_interleave(self, n: int, dim: int) -> "Tensor":
        rows = self.tolist()

        def rep(x, d):
            if d == dim:
                return [y for y in x for _ in range(n)]
            return [rep(y, d + 1) for y in x]
        shape = list(self.shape)
        shape[dim] *= n
        return Tensor.of(_flatten(rep(rows, 0)), shape, self.dtype)

    def frexp(self):
        pairs = [math.frexp(v) for v in self.flat()]
        return (Tensor.of([m for m, _ in pairs], self.shape, float32),
                Tensor.of([e for _, e in pairs], self.shape, int32))

    def eq(self, x: float) -> "Tensor":
        return Tensor.of([v == x for v in self.flat()], self.shape, bool_)

    def all(self) -> "Tensor":
        return Tensor.of([all(self.flat())], (), bool_)

    def item(self):
        return self._s.values[self._offset]


def _flatten(x):
    if isinstance(x, list):
        out = []
        for y in x:
            out.extend(_flatten(y))
        return out
    return [x]


def _contiguous_strides(shape: Sequence[int]) -> List[int]:
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= d
    return list(reversed(st))


def _view_strides(old_shape, old_strides, new_shape):
    """torch's computeStride: strides of new_shape over the same memory, or
    None when the view is impossible."""
    new_strides = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base_stride = old_strides[-1] if old_strides else 1
    tensor_numel = 1
    view_numel = 1
    for tensor_d in range(len(old_shape) - 1, -1, -1):
        tensor_numel *= old_shape[tensor_d]
        if tensor_d == 0 or (old_shape[tensor_d - 1] != 1 and
                             old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                new_strides[view_d] = view_numel * chunk_base_stride
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base_stride = old_strides[tensor_d - 1]
                tensor_numel = 1
                view_numel = 1
    if view_d != -1:
        return None
    return new_strides
