"""vLLM's online NVFP4 recipe on a GPU: how far refit's host model of it is
from the hardware.

vLLM's online NVFP4 (quantization/online/nvfp4.py at 0136201,
_quantize_moe_weight_to_nvfp4) takes g = (6.0 * 448.0) / amax per expert
(evaluated here by torch itself, as vLLM does) and quantizes each 16-block
with FlashInfer's cvt_warp_fp16_to_fp4 (quantization_utils.cuh at
014327a), which uses PTX rcp.approx.ftz.f32 three times:

    s = g * (v * rcp(6)),  S = e4m3(s),  o = rcp(f32(S) * rcp(g)),  q = E2M1(x * o)

refit's host reference (testing/reference_nvfp4_vllm.h, RcpModel) stands
for rcp.approx with the correctly rounded reciprocal (flushing subnormals).
This script states the block quantizer in torch operations twice, once with
the GPU's own rcp.approx.ftz.f32 (through Triton's inline PTX) and once
with RcpModel's reciprocal, on random BF16 experts, and reports:

- rcp.approx(6.0) against RN(1/6);
- over every f32 significand in [1, 2): how many rcp.approx results differ
  from the correctly rounded reciprocal;
- the block-scale and code bytes where the two statements differ.

Prints SKIP (exit 0) without Triton; exits 1 when the host model differs
from the GPU in any byte (then refit's host path is not byte-exact for this
recipe, and the report says by how much).

With DUMP_DIR (what nvfp4_vllm_gpu_test wrote under REFIT_NVFP4_VLLM_DUMP:
shape.txt, in.bf16, codes.u8, scales.u8, global.f32), refit's CUDA kernel's
bytes are compared with the torch statement run with rcp.approx, and every
byte must be equal.

Usage: python3 nvfp4_vllm_check.py [DUMP_DIR] [--experts=8 --rows=512 --cols=2048]
"""
import os
import sys

import torch

E2M1_BOUNDS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
TIES_UP = (0.75, 1.75, 3.5)  # ties to the even code go up at these bounds


def rcp_model(t):
    """RcpModel: correctly rounded 1 / t, subnormal inputs and results flushed."""
    tiny = 2.0 ** -126
    t = torch.where(t.abs() < tiny, torch.zeros_like(t).copysign(t), t)
    r = torch.reciprocal(t)
    return torch.where(r.abs() < tiny, torch.zeros_like(r).copysign(r), r)


def make_rcp_approx():
    """rcp.approx.ftz.f32 elementwise through Triton's inline PTX, or None."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = i < n
        x = tl.load(x_ptr + i, mask=m)
        y = tl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=f,f", [x],
                                      dtype=tl.float32, is_pure=True, pack=1)
        tl.store(y_ptr + i, y, mask=m)

    def rcp(t):
        x = t.contiguous().float().reshape(-1)
        y = torch.empty_like(x)
        kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y.reshape(t.shape)
    return rcp


def e2m1(y):
    """Codes 0..15: RN to the E2M1 grid, ties to the even code, saturating
    at 6; the sign bit from the sign of y (so -0.0 is code 8)."""
    bounds = torch.tensor(E2M1_BOUNDS, device=y.device)
    a = y.abs().contiguous()
    code = torch.searchsorted(bounds, a, right=False)
    up = torch.zeros_like(a, dtype=torch.bool)
    for b in TIES_UP:
        up |= a == b
    code = torch.where(up, code + 1, code)
    return (code | (torch.signbit(y).to(code.dtype) << 3)).to(torch.uint8)


def quantize(w, rcp):
    """One expert [N, K] (BF16) as _quantize_moe_weight_to_nvfp4 and
    cvt_warp_fp16_to_fp4 make it: (codes [N, K], scale bytes [N, K/16], g)."""
    amax = w.abs().amax().to(torch.float32).clamp_min(1e-8)
    g = (6.0 * 448.0) / amax  # torch's own evaluation, as in vLLM
    x = w.float().reshape(-1, 16)
    v = x.abs().amax(dim=1)
    six = torch.full((), 6.0, device=w.device)
    s = g * (v * rcp(six))
    sb = s.clamp(max=448.0).to(torch.float8_e4m3fn)
    sv = sb.float()
    o = torch.where(sv != 0, rcp(sv * rcp(g)), torch.zeros_like(sv))
    codes = e2m1(x * o[:, None]).reshape(w.shape)
    return codes, sb.view(torch.uint8).reshape(w.shape[0], -1), g


def main(argv):
    opts = dict(a[2:].split("=", 1) for a in argv if a.startswith("--"))
    experts, rows, cols = (int(opts.get(k, d)) for k, d in
                           (("experts", 8), ("rows", 512), ("cols", 2048)))
    if not torch.cuda.is_available():
        print("SKIP nvfp4_vllm_check: no GPU")
        return 0
    approx = make_rcp_approx()
    if approx is None:
        print("SKIP nvfp4_vllm_check: no Triton for rcp.approx.ftz.f32")
        return 0
    dev = torch.device("cuda")
    six = torch.full((1,), 6.0, device=dev)
    r6, m6 = approx(six), rcp_model(six)
    print(f"rcp.approx(6) = {r6.view(torch.int32).item():#010x}, "
          f"RN(1/6) = {m6.view(torch.int32).item():#010x}")
    # FlashInfer's MXFP8 quantizer (SM100) scales by vecMax * rcp(448); with
    # rcp(448) = RN(1 / 448) its E8M0 exponents equal vLLM's torch formula
    # for every normal BF16 block amax (a host sweep), so this constant
    # decides whether they do on the GPU.
    c448 = torch.full((1,), 448.0, device=dev)
    print(f"rcp.approx(448) = {approx(c448).view(torch.int32).item():#010x}, "
          f"RN(1/448) = {rcp_model(c448).view(torch.int32).item():#010x}")
    sig = (torch.arange(1 << 23, device=dev, dtype=torch.int32) | 0x3F800000).view(torch.float32)
    off = (approx(sig) != rcp_model(sig)).sum().item()
    print(f"significands in [1, 2) where rcp.approx != RN(1/x): {off} of {1 << 23}")
    torch.manual_seed(0)
    bad_codes = bad_scales = 0
    for e in range(experts):
        w = (torch.randn(rows, cols, device=dev) * 0.02 * (1 + e)).to(torch.bfloat16)
        cg, sg, _ = quantize(w, approx)
        cm, sm, _ = quantize(w, rcp_model)
        bad_codes += (cg != cm).sum().item()
        bad_scales += (sg != sm).sum().item()
    total = experts * rows * cols
    print(f"{experts} experts [{rows}, {cols}]: codes differing {bad_codes} of {total}, "
          f"block scales differing {bad_scales} of {total // 16}")
    kernel_ok = True
    dumps = [a for a in argv if not a.startswith("--")]
    if dumps:
        kernel_ok = check_dump(dumps[0], approx)
    exact = bad_codes == 0 and bad_scales == 0 and torch.equal(r6, m6)
    print(("PASS" if exact else "FAIL") + " nvfp4_vllm_check: host rcp model "
          + ("equals" if exact else "differs from") + " the GPU's rcp.approx.ftz.f32")
    return 0 if exact and kernel_ok else 1


def check_dump(d, approx):
    """refit's kernel bytes (nvfp4_vllm_gpu_test's dump) against the torch
    statement with rcp.approx; prints PASS or FAIL with the first byte."""
    def read(name, dtype):
        return torch.frombuffer(bytearray(open(os.path.join(d, name), "rb").read()), dtype=dtype)
    experts, rows, cols = (int(v) for v in open(os.path.join(d, "shape.txt")).read().split())
    x = read("in.bf16", torch.bfloat16).cuda().reshape(experts, rows, cols)
    codes = read("codes.u8", torch.uint8).cuda().reshape(experts, rows, cols // 2)
    scales = read("scales.u8", torch.uint8).cuda().reshape(experts, rows, cols // 16)
    gs = read("global.f32", torch.float32).cuda()
    ok = True
    for e in range(experts):
        c, sb, g = quantize(x[e], approx)
        packed = c[:, 0::2] | (c[:, 1::2] << 4)
        for what, want, got in (("global scale", g.reshape(1), gs[e].reshape(1)),
                                ("block scales", sb, scales[e]), ("codes", packed, codes[e])):
            if not torch.equal(want, got):
                i = (want != got).nonzero()[0].tolist()
                print(f"FAIL nvfp4_vllm_check: expert {e} {what} differ first at {i}: "
                      f"torch {want[tuple(i)].item()} kernel {got[tuple(i)].item()}")
                ok = False
    if ok:
        print(f"PASS nvfp4_vllm_check: refit's kernel equals the torch statement on "
              f"{experts} experts [{rows}, {cols}]")
    return ok


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
