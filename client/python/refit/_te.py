"""Transformer Engine's native low-precision parameters as refit's buffers
(private; refit.torch uses it).

A Megatron trainer with TE's MXFP8 or NVFP4 weights (``megatron:...,
weights=mxfp8|nvfp4``, GTP or not) holds each linear weight as one TE
tensor. Read in NVIDIA/TransformerEngine at 00768c7
(transformer_engine/pytorch/tensor/mxfp8_tensor.py: MXFP8Quantizer.make_empty,
get_scale_shape), 042eae0 (tensor/storage/mxfp8_tensor_storage.py),
01852f4 (tensor/storage/nvfp4_tensor_storage.py; nvfp4_tensor.py's
NVFP4Quantizer.make_empty) and common/recipe/nvfp4.cu
(nvte_nvfp4_compute_per_tensor_scale):

- ``_rowwise_data``: the codes, torch.uint8: MXFP8 ``[rows, K]`` (e4m3 when
  ``_fp8_dtype`` is kFloat8E4M3), NVFP4 ``[rows, K/2]`` (two E2M1 codes a
  byte). ``None`` when the tensor holds only its columnwise (transposed)
  copy.
- ``_rowwise_scale_inv``: torch.uint8, E8M0 (MXFP8) or e4m3 (NVFP4),
  ``[round_up(rows, 128), round_up(K/32 or K/16, 4)]``, compact unless
  ``_with_gemm_swizzled_scales`` is set (the cuBLAS layout).
- NVFP4 ``_amax_rowwise``: f32 ``[1]``, the amax the codes were quantized
  against (encode scale 2688 / amax); TE's GEMM multiplies by amax / 2688
  per operand.
- ``_columnwise_*``: the transposed copy, not moved.

refit registers the TE tensors' own rowwise data and scale_inv (no copy),
and for NVFP4 one f32 buffer of its own per parameter for
``weight_global_scale``, refreshed before every round as
``amax * f32(1 / 2688)`` in f32: ModelOpt's ``amax / (6 * 448)`` as torch
computes it on CUDA (a product with the f32 reciprocal), so an engine gets
the same global scale from a TE trainer as from a BF16 trainer with the
same amax. Nothing here imports transformer_engine: TE tensors are
recognized by their class names and attributes.

Under Megatron-LM's GTP (read at 0031397,
megatron/core/tensor_parallel/generalized_tensor_parallelism.py:
_gtp_reclass_native_fp8_shard) a native MXFP8/NVFP4 weight shard stays
the TE tensor, reclassed in place into a ``GTP_<TE class>`` subclass, and
the optimizer writes it in place (``copy_`` -> ``quantize_``); a BF16 GTP
shard (GTPShardedParam, ``_quantizer`` None) is a plain tensor here.

refit's member reads the addresses taken at registration. TE keeps them
while it quantizes into the parameter (``quantize_``, ``param.data =
bf16``), but some paths move the storage: ``param.data = <another TE
tensor>`` (``_set_data``) or ``restore_from_saved`` put other tensors
under the attributes (refit would send the old ones, which it keeps
alive: stale bytes), and ``clear()`` (``t.data = empty``) frees the
memory under the registered tensor (refit would read freed memory).
:func:`refresh` compares the addresses before every round and refuses
both, naming the parameter.
"""

import re
import struct
from typing import Any, Dict, List, Optional, Tuple

from . import _buffers
from ._status import FailedPreconditionError

# f32(1 / 2688): exact in a Python float, so torch's f32 multiply by it
# (CPU or CUDA) rounds once, as ModelOpt's amax / (6 * 448) on CUDA.
GLOBAL_SCALE_FACTOR = struct.unpack("<f", struct.pack("<f", 1.0 / 2688.0))[0]

_MXFP8 = ("MXFP8Tensor", "MXFP8TensorStorage")
_NVFP4 = ("NVFP4Tensor", "NVFP4TensorStorage")
# Attributes only TE's quantized tensors carry (Float8Tensor: _data,
# _scale_inv, _fp8_dtype; blockwise, MXFP8, NVFP4: _rowwise_data, ...).
_TE_ATTRIBUTES = ("_rowwise_data", "_columnwise_data", "_fp8_dtype", "_fp4_dtype",
                  "_rowwise_scale_inv", "_scale_inv")
_WEIGHT_NAME = re.compile(r"^(.*)\.weight(\d*)$")
# The attribute on a registered codes tensor that holds its TeParameter:
# refresh_low_precision finds a Member's TE parameters from its buffers, for
# as long as the member holds them.
_ATTRIBUTE = "_refit_te_parameter"
_FORMAT_WORDS = {"mxfp8": "MXFP8 (weights=mxfp8)", "nvfp4": "NVFP4 (weights=nvfp4)",
                 "bf16": "bf16 (weights=model)"}


def kind(t: Any) -> Optional[str]:
    """"mxfp8" or "nvfp4" for TE's MXFP8Tensor / NVFP4Tensor (or their
    storage classes), the class name for another TE quantized tensor
    (Float8Tensor, Float8BlockwiseQTensor, ...), None for anything else."""
    names = {c.__name__ for c in type(t).__mro__}
    if names.intersection(_NVFP4):
        return "nvfp4"
    if names.intersection(_MXFP8):
        return "mxfp8"
    if any(hasattr(t, a) for a in _TE_ATTRIBUTES):
        return type(t).__name__
    return None


def _ptr(t: Any) -> int:
    return int(t.data_ptr())


class TeParameter:
    """One registered TE parameter of trainer rank ``rank``: the tensors
    refit took, their addresses, and for NVFP4 the global-scale buffer
    refit owns.

    Invariant: ``registered`` holds the codes and scale tensors TE held at
    registration, the codes tensor points back here (attribute
    ``_refit_te_parameter``), and ``ptrs`` holds the addresses of those and
    of the amax, which refit's member reads every round."""

    def __init__(self, rank: int, label: str, fmt: str, te: Any,
                 names: Tuple[str, ...], global_shape: Optional[Tuple[int, ...]]):
        self.rank = rank
        self.label = label
        self.format = fmt
        self.te = te
        self.names = names
        self.global_shape = global_shape  # NVFP4: the global scale's shape
        self.global_scale: Any = None  # its view of GlobalScales.flat, once allocated
        self.scales: Optional["GlobalScales"] = None
        self.registered = (te._rowwise_data, te._rowwise_scale_inv)
        self.ptrs = {"_rowwise_data": _ptr(te._rowwise_data),
                     "_rowwise_scale_inv": _ptr(te._rowwise_scale_inv)}
        if fmt == "nvfp4":
            self.ptrs["_amax_rowwise"] = _ptr(te._amax_rowwise)
        setattr(te._rowwise_data, _ATTRIBUTE, self)

    def storage_problem(self) -> Optional[str]:
        """Why TE's storage is no longer what refit registered (None: it
        is): an attribute now None, or holding other memory."""
        for attr, ptr in self.ptrs.items():
            cur = getattr(self.te, attr, None)
            if cur is None:
                return (f"Transformer Engine dropped its {attr} after registration "
                        f"(rowwise usage turned off, or the tensor cleared)")
            if _ptr(cur) != ptr:
                return (f"Transformer Engine reallocated its {attr} after registration "
                        f"(address {ptr:#x} registered, now {_ptr(cur):#x}): refit "
                        f"would send the old memory. Keep TE updating the weights in "
                        f"place (the optimizer's quantize into the parameter), or "
                        f"register again (a new member)")
        return None


class GlobalScales:
    """The f32 global scales of a rank's NVFP4 parameters on one device,
    refit's own memory: one buffer ``flat``, each parameter's global scale
    a view of it in order, so a round's refresh is one gather of the amaxes
    and one multiply (torch.cat into ``flat``, then ``flat.mul_``), not two
    kernels per parameter."""

    def __init__(self, params: List[TeParameter]):
        sizes = [_numel(p.global_shape) for p in params]
        self.params = params
        self.flat = params[0].te._amax_rowwise.new_zeros((sum(sizes),))
        offset = 0
        for p, n in zip(params, sizes):
            p.global_scale = self.flat.narrow(0, offset, n).view(p.global_shape)
            p.scales = self
            offset += n

    def refresh(self) -> None:
        """Every global scale := its parameter's amax * f32(1 / 2688), in
        f32 where the tensors live; no host synchronization."""
        amaxes = [p.te._amax_rowwise for p in self.params]
        torch = _torch_of(self.flat)
        if torch is not None:
            torch.cat([a.reshape(-1) for a in amaxes], out=self.flat)
        else:  # a tensor type without torch.cat: one copy per parameter
            for p, a in zip(self.params, amaxes):
                p.global_scale.copy_(a.view(p.global_shape))
        self.flat.mul_(GLOBAL_SCALE_FACTOR)


def _numel(shape: Tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _torch_of(t: Any) -> Any:
    """The torch module when ``t`` is a torch tensor (imported by then),
    else None."""
    if not type(t).__module__.startswith("torch"):
        return None
    import torch
    return torch if isinstance(t, torch.Tensor) else None


def allocate_global_scales(params: List[TeParameter]) -> Dict[str, Any]:
    """Gives every NVFP4 parameter among ``params`` its global-scale
    buffer (a GlobalScales per device); returns {buffer name: tensor}."""
    by_device: Dict[str, List[TeParameter]] = {}
    for p in params:
        if p.global_shape is not None:
            by_device.setdefault(str(getattr(p.te._amax_rowwise, "device", "")), []).append(p)
    out = {}
    for group in by_device.values():
        GlobalScales(group)
        for p in group:
            out[p.names[2]] = p.global_scale
    return out


def _dtype_name(t: Any) -> str:
    d = getattr(t, "_fp8_dtype", None)
    return "" if d is None else str(getattr(d, "name", d))


def _layout_problem(fmt: str, te: Any) -> Optional[str]:
    """Why refit cannot move this TE tensor's layout (None: it can)."""
    if getattr(te, "_rowwise_data", None) is None:
        return ("holds no rowwise data (a columnwise-only copy): refit moves the "
                "rowwise codes and scale_inv; keep rowwise usage on for weights")
    if getattr(te, "_rowwise_scale_inv", None) is None:
        return "holds rowwise data without its rowwise scale_inv"
    if getattr(te, "_with_gemm_swizzled_scales", False):
        return ("its rowwise scale_inv is in the GEMM-swizzled layout "
                "(optimize_for_gemm); refit moves the compact layout")
    if fmt == "mxfp8" and "E5M2" in _dtype_name(te).upper():
        return "holds e5m2 codes; refit's MXFP8 weights are e4m3"
    if fmt == "nvfp4" and getattr(te, "_amax_rowwise", None) is None:
        return "holds no _amax_rowwise, from which refit derives the global scale"
    for attr in ("_rowwise_data", "_rowwise_scale_inv"):
        t = getattr(te, attr)
        if hasattr(t, "is_contiguous") and not t.is_contiguous():
            return f"its {attr} is not contiguous"
    return None


def _shape_problem(what: str, t: Any, spec: Any) -> Optional[str]:
    d = _buffers.declared(t)
    if d.shape is not None and d.shape != list(spec.shape):
        return f"{what} has shape {d.shape}, the convention expects {list(spec.shape)}"
    if d.dtype is not None and d.dtype not in ("u8", spec.dtype):
        return f"{what} has dtype {d.dtype}, the convention expects {spec.dtype} (or u8)"
    return None


def _expected_format(names: Tuple[str, str, str], want: Dict[str, Any]) -> str:
    if names[2] in want:
        return "nvfp4"
    if names[1] in want:
        return "mxfp8"
    return want[names[0]].dtype


def buffer_names(name: str) -> Tuple[str, ...]:
    """The convention's buffers a TE weight registered as ``name``
    (``<param>.weight<j>``) stands for: its codes, block scales and global
    scale; ``(name,)`` for any other name."""
    m = _WEIGHT_NAME.match(name)
    if not m:
        return (name,)
    base, j = m.group(1), m.group(2)
    return (f"{base}.weight{j}", f"{base}.weight_scale{j}", f"{base}.weight_global_scale{j}")


def unwrap(rank: int, name: str, label: str, te: Any, fmt: str, convention: str,
           want: Dict[str, Any]) -> Tuple[Dict[str, Any], Optional[TeParameter], List[str]]:
    """The buffers of TE tensor ``te`` (format ``fmt`` from :func:`kind`)
    registered under convention name ``name``: ({buffer name: tensor} of
    its codes and block scales, its TeParameter, problems); an NVFP4
    parameter's global scale comes from :func:`allocate_global_scales`.
    The problems, one line each naming ``rank`` and ``label``: another TE
    class, a name that is no ``<param>.weight<j>``, a format or shape the
    convention does not hold, a layout refit does not move (see
    _layout_problem)."""
    where = f"rank {rank}: parameter {label}"
    if fmt not in ("mxfp8", "nvfp4"):
        return {}, None, [f"{where}: a Transformer Engine {fmt}; refit moves TE's "
                          f"MXFP8Tensor and NVFP4Tensor weights (or plain tensors)"]
    names = buffer_names(name)
    if len(names) == 1:
        return {}, None, [f"{where}: a Transformer Engine {fmt.upper()} tensor under a "
                          f"name that is no <param>.weight"]
    expected = _expected_format(names, want)
    if expected != fmt:
        return {}, None, [f"{where}: a Transformer Engine {fmt.upper()} tensor; convention "
                          f"{convention} holds this weight as "
                          f"{_FORMAT_WORDS.get(expected, expected)}"]
    why = _layout_problem(fmt, te)
    if why:
        return {}, None, [f"{where}: {why}"]
    problems = []
    for what, t, spec_name in (("its _rowwise_data", te._rowwise_data, names[0]),
                               ("its _rowwise_scale_inv", te._rowwise_scale_inv, names[1])):
        why = _shape_problem(what, t, want[spec_name])
        if why:
            problems.append(f"{where}: {why}")
    out = {names[0]: te._rowwise_data, names[1]: te._rowwise_scale_inv}
    global_shape = None
    if fmt == "nvfp4":
        global_shape = tuple(want[names[2]].shape)
        amax = te._amax_rowwise
        if amax.numel() != _numel(global_shape):
            problems.append(f"{where}: its _amax_rowwise holds {amax.numel()} values, the "
                            f"convention's {names[2]} {_numel(global_shape)}")
    if problems:
        return {}, None, problems
    return out, TeParameter(rank, label, fmt, te, names, global_shape), []


def registered_in(buffers: Any) -> List[TeParameter]:
    """The TeParameters whose codes are among ``buffers`` (a member's
    buffer objects), in their order."""
    out = []
    for b in buffers:
        p = getattr(b, _ATTRIBUTE, None)
        if isinstance(p, TeParameter) and p.registered[0] is b:
            out.append(p)
    return out


def refresh(params: List[TeParameter]) -> None:
    """Before a round: checks that TE still holds the registered storage of
    every parameter, then recomputes from the current amaxes the NVFP4
    global scales of every GlobalScales holding one of ``params`` (on CUDA,
    waits for those kernels so the round's send reads them). Raises
    FailedPreconditionError listing, one line each naming the rank and the
    parameter, storage TE dropped or reallocated; nothing is refreshed
    then."""
    problems = []
    for p in params:
        why = p.storage_problem()
        if why:
            problems.append(f"rank {p.rank}: parameter {p.label}: {why}")
    if problems:
        raise FailedPreconditionError("\n".join(problems))
    groups, devices = {}, set()
    for p in params:
        if p.scales is not None:
            groups[id(p.scales)] = p.scales
    for g in groups.values():
        g.refresh()
        dev = getattr(g.flat, "device", None)
        if getattr(dev, "type", "cpu") == "cuda":
            devices.add(dev)
    if devices:
        import torch  # only where the buffers are torch CUDA tensors
        for dev in devices:
            torch.cuda.synchronize(dev)
