"""refit's NVFP4 global scale on real torch tensors: for 12288 TE-shaped
NVFP4 parameters over torch CUDA (and CPU) tensors, refit.torch's refresh
(one torch.cat of the amaxes into refit's buffer, one multiply) gives
every parameter exactly f32(amax * f32(1/2688)) (the host reference) and,
on CUDA, exactly ModelOpt's ``amax.float() / (6.0 * 448.0)`` as torch
computes it there; a storage swapped under TE's attribute (``t.data =``)
is caught; the refresh of many parameters is timed. Prints REFIT_GPU_SKIP
and passes without torch or a GPU.

  te_refresh_gpu_test.py [PATH_OF_THE_REFIT_PYTHON_PACKAGE_DIR]
"""
import random
import struct
import sys
import time
from typing import List, NamedTuple

if len(sys.argv) > 1:
    sys.path.insert(0, sys.argv[1])

try:
    import torch
except ImportError:
    print("REFIT_GPU_SKIP: no torch")
    sys.exit(0)
if not torch.cuda.is_available():
    print("REFIT_GPU_SKIP: no CUDA device")
    sys.exit(0)

from refit import _te  # noqa: E402

PARAMS = 12288  # Qwen3-30B-A3B: 48 layers x 128 experts x 2


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


class Spec(NamedTuple):
    name: str
    dtype: str
    shape: List[int]


class NVFP4Tensor:
    """TE's NVFP4Tensor attributes (storage/nvfp4_tensor_storage.py at
    01852f4) over real torch tensors: [128, 64] logical, rowwise only."""

    def __init__(self, device: str, amax: float):
        self._rowwise_data = torch.zeros(128, 32, dtype=torch.uint8, device=device)
        self._rowwise_scale_inv = torch.zeros(128, 4, dtype=torch.uint8, device=device)
        self._amax_rowwise = torch.tensor([amax], dtype=torch.float32, device=device)
        self._columnwise_data = None
        self._with_gemm_swizzled_scales = False


def params(device: str, amaxes: List[float]):
    out = []
    for i, a in enumerate(amaxes):
        base = f"layers.{i}.linear"
        want = {base + ".weight": Spec(base + ".weight", "u8", [128, 32]),
                base + ".weight_scale": Spec(base + ".weight_scale", "f8e4m3", [128, 4]),
                base + ".weight_global_scale": Spec(base + ".weight_global_scale", "f32", [])}
        t = NVFP4Tensor(device, a)
        _, p, problems = _te.unwrap(0, base + ".weight", base + ".weight", t, "nvfp4",
                                    "megatron:weights=nvfp4", want)
        assert not problems, problems
        out.append(p)
    _te.allocate_global_scales(out)
    return out


def main() -> int:
    rng = random.Random(7)
    amaxes = [f32(10 ** rng.uniform(-4, 4)) for _ in range(PARAMS - 3)]
    amaxes += [13.445080757141113, 0.0, f32(1e-40)]
    host = [f32(a * f32(1.0 / 2688.0)) for a in amaxes]
    rows = []
    failed = False
    for device in ("cuda:0", "cpu"):
        ps = params(device, amaxes)
        _te.refresh(ps)  # warm-up
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        _te.refresh(ps)
        ms = (time.perf_counter() - t0) * 1e3
        got = [p.global_scale.item() for p in ps]
        same_host = sum(bits(g) == bits(h) for g, h in zip(got, host))
        modelopt = [(p.te._amax_rowwise.float() / (6.0 * 448.0)).item() for p in ps]
        same_modelopt = sum(bits(g) == bits(m) for g, m in zip(got, modelopt))
        shapes_ok = all(tuple(p.global_scale.shape) == () for p in ps)
        # One buffer for all: consecutive f32 views.
        shapes_ok &= all(p.global_scale.data_ptr() == ps[0].global_scale.data_ptr() + 4 * i
                         for i, p in enumerate(ps))
        # refresh_low_precision finds them from a member's buffer objects.
        shapes_ok &= len(_te.registered_in([p.registered[0] for p in ps])) == len(ps)
        ok = same_host == len(ps) and shapes_ok and (
            device == "cpu" or same_modelopt == len(ps))
        failed |= not ok
        rows.append((device, len(ps), same_host, same_modelopt, f"{ms:.2f}", "ok" if ok else
                     "FAIL"))
        # A storage swapped under the attribute (TE's clear(): t.data = ...).
        p = ps[5]
        p.te._rowwise_scale_inv.data = torch.zeros_like(p.te._rowwise_scale_inv)
        why = p.storage_problem()
        if not (why and "reallocated its _rowwise_scale_inv" in why):
            print(f"{device}: a swapped storage was not caught: {why}")
            failed = True
    print("device  params  ==host_ref  ==modelopt_expr  refresh_ms  result")
    for r in rows:
        print("  ".join(str(c) for c in r))
    print("te_refresh_gpu_test:", "FAILED" if failed else "PASSED")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
