"""e4m3 (float8_e4m3fn) codes both ways, in torch, for the Python GPU checks:
float32 values to codes (round to nearest even) and codes to values, on a
torch with float8 or on its uint8 bytes (torch < 2.1). The lowest of the
checks' modules: it imports only torch.
"""

import torch

FP8 = getattr(torch, "float8_e4m3fn", None)  # torch >= 2.1; BF16 checks run without it


def to_fp8(x: torch.Tensor) -> torch.Tensor:
    """x (float32, |x| <= 448) as e4m3: float8_e4m3fn where torch has it,
    else its uint8 bytes (round to nearest even, computed here)."""
    if FP8 is not None:
        return x.to(FP8)
    a = x.abs()
    e = torch.floor(torch.log2(a.clamp(min=2.0 ** -6))).clamp(max=8)
    step = torch.exp2(e - 3)  # spacing of e4m3 values in [2^e, 2^(e+1)) (2^-9 below 2^-6)
    v = torch.round(a / step) * step
    e = torch.floor(torch.log2(v.clamp(min=2.0 ** -6)))  # rounding may reach the next binade
    normal = v >= 2.0 ** -6
    man = torch.where(normal, v / torch.exp2(e) * 8 - 8, v / 2.0 ** -9)
    code = torch.where(normal, (e + 7) * 8 + man, man).to(torch.int32)
    return (code + 128 * torch.signbit(x).to(torch.int32)).to(torch.uint8)


def e4m3_values(q: torch.Tensor) -> torch.Tensor:
    """float32 values of e4m3 (float8_e4m3fn) numbers given as a float8
    tensor or as their uint8 bytes (torch without float8)."""
    if q.dtype != torch.uint8:
        return q.float()
    b = q.to(torch.int32)
    sign = 1.0 - 2.0 * ((b >> 7) & 1).float()
    e = ((b >> 3) & 0xF).float()
    m = (b & 0x7).float()
    normal = (1.0 + m / 8.0) * torch.exp2(e - 7.0)
    sub = (m / 8.0) * (2.0 ** -6)
    v = torch.where(e == 0, sub, normal) * sign
    return torch.where((e == 15) & (m == 7), torch.full_like(v, float("nan")), v)
