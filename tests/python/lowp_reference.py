"""MXFP8 and NVFP4 bytes of BF16 weights as vLLM holds them, in pure Python
(no torch), for tests/python: an independent statement of the formulas
(refit's own are in exec/convert/quantize.cc, exec/convert/nvfp4.cc and
testing/reference_quantizer), small tensors only.

- MXFP8 (vLLM's online method, quantization/utils/mxfp8_utils.py,
  _mxfp8_e4m3_quantize_torch computing ceil(log2(amax / 448))): per 32
  elements along K, a = max(amax, 2^-126); e = clamp(ceil(log2(f32(a /
  448))) + 127, 0, 254) (log2 exact: from frexp); codes e4m3(x / 2^(e -
  127)), round to nearest even.
- NVFP4 (ModelOpt's NVFP4QTensor, loaded by vLLM's ModelOpt methods):
  g = f32(amax * f32(1/2688)) over every part of a fused parameter (per
  expert); per 16 elements s = f32(block_amax / f32(6 g)), 1 when 0, at
  least 2^-9, S = e4m3(s); codes E2M1 of f32(x / f32(S g)) by ModelOpt's
  _cast_fp4 (the midpoints 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5; a tie on
  0.75, 1.75 or 3.5 rounds up), the even element in the low nibble.
- swizzle: vLLM's swizzle_blockscale of a [M, K/16] matrix, [M/128, 4, 32,
  K/64, 4] permuted (0, 3, 2, 1, 4).
"""

import bisect
import math
import struct
from typing import List, Sequence, Tuple

Rows = List[List[float]]


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bf16_rows(raw: bytes, cols: int) -> Rows:
    """float values of row-major BF16 bytes."""
    n = len(raw) // 2
    vals = [struct.unpack("<f", struct.pack("<I", h << 16))[0]
            for h in struct.unpack(f"<{n}H", raw)]
    return [vals[i:i + cols] for i in range(0, n, cols)]


def to_bf16(x: float) -> bytes:
    bits = struct.unpack("<I", struct.pack("<f", f32(x)))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return struct.pack("<H", bits)


def _e4m3_table() -> List[Tuple[float, int]]:
    out = []
    for code in range(0x7F):  # 0x7F is NaN
        e, m = code >> 3, code & 7
        out.append((math.ldexp(m / 8, -6) if e == 0 else math.ldexp(1 + m / 8, e - 7), code))
    return out


_E4M3 = _e4m3_table()
_E4M3_VALUES = [v for v, _ in _E4M3]


def e4m3(x: float) -> int:
    """The e4m3fn byte nearest x (|x| <= 448), ties to the even code."""
    a = abs(x)
    i = bisect.bisect_left(_E4M3_VALUES, a)
    if i == len(_E4M3_VALUES):
        i -= 1
    elif i > 0 and _E4M3_VALUES[i] != a:
        lo, hi = _E4M3_VALUES[i - 1], _E4M3_VALUES[i]
        if a - lo < hi - a or (a - lo == hi - a and _E4M3[i - 1][1] % 2 == 0):
            i -= 1
    return _E4M3[i][1] | (0x80 if math.copysign(1.0, x) < 0 and a != 0 else 0)


def e4m3_value(b: int) -> float:
    v = _E4M3[b & 0x7F][0]
    return -v if b & 0x80 else v


def _ceil_log2(r: float) -> int:
    m, x = math.frexp(r)  # r = m 2^x, m in [0.5, 1)
    return x - 1 if m == 0.5 else x


def mxfp8(rows: Rows) -> Tuple[bytes, bytes]:
    """(e4m3 codes, E8M0 scale bytes) of [N, K] rows, row-major."""
    codes, scales = bytearray(), bytearray()
    for row in rows:
        for b in range(0, len(row), 32):
            block = row[b:b + 32]
            a = max(max(abs(x) for x in block), 2.0 ** -126)
            e = min(max(_ceil_log2(f32(a / 448.0)) + 127, 0), 254)
            scales.append(e)
            codes.extend(e4m3(x / 2.0 ** (e - 127)) for x in block)
    return bytes(codes), bytes(scales)


_BOUNDS = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]
_ODD = (0.75, 1.75, 3.5)


def _fp4(y: float) -> int:
    a = abs(y)
    code = bisect.bisect_left(_BOUNDS, a) + (1 if a in _ODD else 0)
    return code | (8 if y < 0 else 0)


def nvfp4_global(amax: float) -> float:
    return f32(amax * f32(1.0 / 2688.0))


def nvfp4(rows: Rows, g: float) -> Tuple[bytes, bytes]:
    """(packed E2M1 codes [N, K/2], e4m3 scale bytes [N, K/16]) of [N, K]
    rows under global scale g."""
    six_g = f32(6.0 * g)
    codes, scales = bytearray(), bytearray()
    for row in rows:
        q = []
        for b in range(0, len(row), 16):
            block = row[b:b + 16]
            s = f32(max(abs(x) for x in block) / six_g)
            s = max(1.0 if s == 0 else s, 2.0 ** -9)
            sb = e4m3(s)
            scales.append(sb)
            d = f32(e4m3_value(sb) * g)
            q.extend(_fp4(f32(x / d)) for x in block)
        codes.extend(q[i] | (q[i + 1] << 4) for i in range(0, len(q), 2))
    return bytes(codes), bytes(scales)


def swizzle(scale: bytes, m: int, k: int) -> bytes:
    """vLLM's swizzle_blockscale of one [m, k] byte matrix: zero-padded to
    128 rows and 4 columns, then in 128 x 4 tiles."""
    mp, kp = -(-m // 128) * 128, -(-k // 4) * 4
    padded = bytearray(mp * kp)
    for r in range(m):
        padded[r * kp:r * kp + k] = scale[r * k:(r + 1) * k]
    out = bytearray()
    for mt in range(mp // 128):
        for kt in range(kp // 4):
            for r32 in range(32):
                for r4 in range(4):
                    src = (mt * 128 + r4 * 32 + r32) * kp + kt * 4
                    out += padded[src:src + 4]
    return bytes(out)


def pad_codes(codes: bytes, n: int, kb: int) -> bytes:
    """[n, kb] packed codes zero-padded to 32 rows and 32 codes, as vLLM's
    CUTLASS NVFP4 linears hold them."""
    np_, kbp = -(-n // 32) * 32, -(-2 * kb // 32) * 16
    out = bytearray(np_ * kbp)
    for r in range(n):
        out[r * kbp:r * kbp + kb] = codes[r * kb:(r + 1) * kb]
    return bytes(out)


def amax(parts: Sequence[Rows]) -> float:
    return max(abs(x) for rows in parts for row in rows for x in row)
