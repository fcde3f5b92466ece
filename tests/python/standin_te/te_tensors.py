"""Stand-ins for Transformer Engine's MXFP8 and NVFP4 tensors, for CPU tests
without torch or TE: the attributes refit.torch reads, allocated as TE's
quantizers allocate them.

Written from NVIDIA/TransformerEngine at 00768c7
(transformer_engine/pytorch/tensor/mxfp8_tensor.py: MXFP8Quantizer.make_empty,
get_scale_shape; MXFP8Tensor), 042eae0 (tensor/storage/mxfp8_tensor_storage.py)
and 01852f4 (tensor/storage/nvfp4_tensor_storage.py; nvfp4_tensor.py's
NVFP4Quantizer.make_empty):

- MXFP8: ``_rowwise_data`` uint8 ``shape``; ``_rowwise_scale_inv`` uint8
  ``[round_up(prod(shape[:-1]), 128), round_up(K / 32, 4)]``;
  ``_columnwise_data`` / ``_columnwise_scale_inv`` the transposed copy;
  ``_fp8_dtype`` (kFloat8E4M3), ``_with_gemm_swizzled_scales``.
- NVFP4: ``_rowwise_data`` uint8 ``[..., K / 2]``; ``_rowwise_scale_inv``
  uint8 ``[round_up(rows, 128), round_up(K / 16, 4)]``; ``_amax_rowwise``
  f32 ``[1]``; the same columnwise; ``_fp4_dtype``,
  ``_with_gemm_swizzled_scales``.
- Float8Tensor (per-tensor FP8): ``_data``, ``_scale_inv``, ``_fp8_dtype``,
  ``_transpose``: a TE tensor refit does not move.

And Megatron-LM's GTP at 0031397
(megatron/core/tensor_parallel/generalized_tensor_parallelism.py:
_gtp_reclass_native_fp8_shard, _init_gtp_runtime_attrs): a native-FP8
weight shard is reclassed in place into a dynamic ``GTP_<TE class>``
subclass with ``quantized`` pointing at itself; a BF16 shard is a
GTPShardedParam whose ``_quantizer`` and ``quantized`` are None.
"""

import ctypes
import struct
import types
from typing import Optional, Sequence

import standin_torch as st

uint8 = st.DType("uint8")
float32 = st.float32


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


class Tensor(st.Tensor):
    """standin_torch's host tensor, plus what refit reads of an amax and
    writes into a global scale: views sharing memory, new_zeros, copy_,
    an f32 mul_ (each product rounded once to f32, as torch's f32 multiply
    by a scalar), and f32 element access."""

    def __init__(self, shape: Sequence[int], dtype: st.DType = uint8, *,
                 base: Optional["Tensor"] = None, contiguous: bool = True):
        if base is None:
            super().__init__(shape, dtype, contiguous)
            return
        self.shape = tuple(shape)
        self.dtype = dtype
        self._contiguous = contiguous
        self.device = base.device
        self._mem = base._mem

    def view(self, *shape) -> "Tensor":
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], tuple) else shape
        v = Tensor(shape, self.dtype, base=self)
        assert v.numel() == self.numel(), (shape, self.shape)
        return v

    def narrow(self, dim: int, start: int, length: int) -> "Tensor":
        """Rows [start, start + length) of dimension 0, sharing memory."""
        assert dim == 0
        row = self.nbytes() // self.shape[0]
        v = Tensor((length,) + self.shape[1:], self.dtype, base=self)
        v._mem = (ctypes.c_char * max(length * row, 1)).from_buffer(self._mem, start * row)
        return v

    def new_zeros(self, shape: Sequence[int]) -> "Tensor":
        return Tensor(shape, self.dtype)

    def f32(self) -> list:
        assert self.dtype is float32
        return list(struct.unpack(f"<{self.numel()}f", self.raw()))

    def set_f32(self, values: Sequence[float]) -> None:
        ctypes.memmove(self.data_ptr(), struct.pack(f"<{len(values)}f", *values),
                       4 * len(values))

    def mul_(self, s: float) -> "Tensor":
        self.set_f32([_f32(v * _f32(s)) for v in self.f32()])
        return self

    def reallocate(self) -> None:
        """What ``t.data = torch.empty(...)`` does (TE's clear()): the same
        tensor object on other memory."""
        self._mem = (ctypes.c_char * max(self.nbytes(), 1))()


class DType:
    """transformer_engine_torch.DType's members refit reads."""
    kFloat8E4M3 = types.SimpleNamespace(name="kFloat8E4M3")
    kFloat8E5M2 = types.SimpleNamespace(name="kFloat8E5M2")
    kFloat4E2M1 = types.SimpleNamespace(name="kFloat4E2M1")


def round_up(n: int, m: int) -> int:
    return -(-n // m) * m


class QuantizedTensorStorage:
    pass


class MXFP8TensorStorage(QuantizedTensorStorage):
    pass


class MXFP8Tensor(MXFP8TensorStorage):
    def __init__(self, shape: Sequence[int], *, rowwise: bool = True, columnwise: bool = True,
                 fp8_dtype=DType.kFloat8E4M3, swizzled: bool = False):
        rows = 1
        for d in shape[:-1]:
            rows *= d
        k = shape[-1]
        self.shape = tuple(shape)
        self.dtype = st.bfloat16
        self._fp8_dtype = fp8_dtype
        self._quantizer = None
        self._with_gemm_swizzled_scales = swizzled
        self._rowwise_data = Tensor(shape) if rowwise else None
        self._rowwise_scale_inv = (Tensor([round_up(rows, 128), round_up(k // 32, 4)])
                                   if rowwise else None)
        self._columnwise_data = Tensor(shape) if columnwise else None
        self._columnwise_scale_inv = (Tensor([round_up(rows // 32, 4), round_up(k, 128)])
                                      if columnwise else None)


class NVFP4TensorStorage(QuantizedTensorStorage):
    pass


class NVFP4Tensor(NVFP4TensorStorage):
    def __init__(self, shape: Sequence[int], *, rowwise: bool = True, columnwise: bool = True,
                 swizzled: bool = False):
        rows = 1
        for d in shape[:-1]:
            rows *= d
        k = shape[-1]
        self.shape = tuple(shape)
        self.dtype = st.bfloat16
        self._fp4_dtype = DType.kFloat4E2M1
        self._quantizer = None
        self._with_gemm_swizzled_scales = swizzled
        self._rowwise_data = Tensor(list(shape[:-1]) + [k // 2]) if rowwise else None
        self._rowwise_scale_inv = (Tensor([round_up(rows, 128), round_up(-(-k // 16), 4)])
                                   if rowwise else None)
        self._amax_rowwise = Tensor([1], float32) if rowwise else None
        self._columnwise_data = Tensor([k, rows // 2]) if columnwise else None
        self._columnwise_scale_inv = (Tensor([round_up(k, 128), round_up(-(-rows // 16), 4)])
                                      if columnwise else None)
        self._amax_columnwise = Tensor([1], float32) if columnwise else None


class Float8Tensor(QuantizedTensorStorage):
    """Per-tensor FP8 (Float8Tensor): not a layout refit moves."""

    def __init__(self, shape: Sequence[int]):
        self.shape = tuple(shape)
        self.dtype = st.bfloat16
        self._data = Tensor(shape)
        self._scale_inv = Tensor([1], float32)
        self._fp8_dtype = DType.kFloat8E4M3
        self._transpose = None


_GTP_SUBCLASSES = {}


def gtp_reclass(t, pad_length: int = 0):
    """What Megatron's _gtp_reclass_native_fp8_shard does to a TE weight
    shard: its class becomes GTP_<class> (a subclass), GTP attributes
    attached, ``quantized`` itself. Returns ``t``."""
    base = type(t)
    sub = _GTP_SUBCLASSES.setdefault(base, type(f"GTP_{base.__name__}", (base,), {}))
    t.__class__ = sub
    t.is_gtp_weight_remat = True
    t._gtp_native_fp8 = True
    t.quantized = t
    t.pad_length = pad_length
    return t


def gtp_bf16(t):
    """The attributes a BF16 GTPShardedParam carries that a TE check could
    trip on: ``_quantizer`` and ``quantized`` None. Returns ``t``."""
    t.is_gtp_weight_remat = True
    t._quantizer = None
    t.quantized = None
    return t
