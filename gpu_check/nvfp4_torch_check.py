"""refit's NVFP4 kernel output against torch's own conversions.

Reads what nvfp4_gpu_test wrote under REFIT_NVFP4_DUMP (shape.txt, in.bf16,
codes.u8, scales.u8, global.f32) and quantizes the same BF16 input on the
GPU with torch as ModelOpt's NVFP4QTensor does (modelopt/torch/quantization/
qtensor/nvfp4_tensor.py, NVIDIA/Model-Optimizer at 211c6b3; vLLM's
ModelOptNvFp4LinearMethod / ModelOptNvFp4FusedMoE load its bytes as they
are): global scale amax / (6 * 448) per expert, block scales
block_amax / (6 * g) (1 for an all-zero block, at least 2^-9) cast by
torch's float8_e4m3fn, codes by _cast_fp4's searchsorted over the E2M1
bounds, packed with the even element in the low nibble; the divisions by
tensors are IEEE f32 divisions. Where torch casts float32 to
float4_e2m1fn_x2 itself, its bytes are compared too (torch 2.11 does not
implement that cast: copy_() refuses it, and the table says so).

The global scale is ModelOpt's amax / (6 * 448) as torch on CUDA computes
it: a tensor divided by a Python scalar is multiplied by the scalar's f32
reciprocal there (one ulp from the true quotient for some amaxes); the
table also checks refit's global scales against amax * f32(1/2688) done
exactly in float64 and rounded once. Prints a table; exits 1 on any byte
that differs.

Usage: python3 nvfp4_torch_check.py DUMP_DIR
"""
import os
import sys

import torch


def read(d, name, dtype):
    return torch.frombuffer(bytearray(open(os.path.join(d, name), "rb").read()), dtype=dtype)


def cast_fp4(y):
    """ModelOpt's _cast_fp4 in torch operations (codes 0..15)."""
    bounds = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], device=y.device)
    sign = (y < 0).to(torch.uint8)
    a = y.abs()
    ordinal = torch.searchsorted(bounds, a.contiguous(), out_int32=True).to(torch.uint8)
    odd = bounds[[1, 3, 5]]
    up = torch.any(a.unsqueeze(-1) == odd, dim=-1).to(torch.uint8)
    return (sign << 3) + ordinal + up


def main():
    d = sys.argv[1]
    m, k, rows = (int(x) for x in open(os.path.join(d, "shape.txt")).read().split())
    lead = m // rows
    x = read(d, "in.bf16", torch.bfloat16).view(m, k).cuda()
    codes = read(d, "codes.u8", torch.uint8).view(m, k // 2).cuda()
    scales = read(d, "scales.u8", torch.uint8).view(m, k // 16).cuda()
    glob = read(d, "global.f32", torch.float32).cuda()
    xf = x.float()
    amax = xf.view(lead, rows * k).abs().amax(dim=1)
    g = amax / (6.0 * 448.0)
    gg = g.repeat_interleave(rows).view(m, 1)
    xb = xf.view(m, k // 16, 16)
    s = xb.abs().amax(dim=-1) / (6.0 * gg)
    s[s == 0] = 1.0
    s8 = s.clamp(min=2.0 ** -9).to(torch.float8_e4m3fn)
    y = xb / (s8.float() * gg).unsqueeze(-1)
    q = cast_fp4(y).view(m, k)
    packed = (q[:, 1::2] << 4) | q[:, 0::2]
    bad_global = int((g != glob).sum())
    recip = torch.tensor(1.0 / 2688.0, dtype=torch.float32).double()
    exact = (amax.double().cpu() * recip).float()
    bad_exact = int((exact != glob.cpu()).sum())
    bad_scales = int((s8.view(torch.uint8) != scales).sum())
    bad_codes = int((packed != codes).sum())
    bad_fp4 = 0
    try:
        t = y.view(m, k).to(torch.float4_e2m1fn_x2).view(torch.uint8)
        bad_fp4 = int((t != codes).sum())
        fp4_note = str(bad_fp4)
    except (RuntimeError, TypeError, NotImplementedError) as e:
        fp4_note = "no cast: " + str(e).split("\n")[0][:40]
    print(f"{'check':<48}{'elements':>12}{'differ':>10}")
    print(f"{'nvfp4 global scales vs torch amax / 2688':<48}{lead:>12}{bad_global:>10}")
    print(f"{'nvfp4 global scales vs amax*f32(1/2688) exact':<48}{lead:>12}{bad_exact:>10}")
    print(f"{'nvfp4 scale bytes vs torch float8_e4m3fn':<48}{m * k // 16:>12}{bad_scales:>10}")
    print(f"{'nvfp4 packed codes vs ModelOpt _cast_fp4 (torch)':<48}{m * k // 2:>12}"
          f"{bad_codes:>10}")
    print(f"{'nvfp4 packed codes vs torch float4_e2m1fn_x2':<48}{m * k // 2:>12}  {fp4_note}")
    ok = (bad_global == 0 and bad_exact == 0 and bad_scales == 0 and bad_codes == 0 and
          bad_fp4 == 0)
    print("PASS nvfp4 vs torch" if ok else "FAIL nvfp4 vs torch")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
