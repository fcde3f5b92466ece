"""refit's MXFP8 kernel output against torch's own conversions.

Reads what mxfp8_gpu_test wrote under REFIT_MXFP8_DUMP (shape.txt, in.bf16,
codes.u8, scales.u8) and quantizes the same BF16 input on the GPU with
torch: vLLM's formula (_mxfp8_e4m3_quantize_torch in
vllm/model_executor/layers/quantization/utils/mxfp8_utils.py, the version
computing ceil(log2(amax / 448))) stated in torch operations, with torch's
float8_e4m3fn cast for the codes and torch's float8_e8m0fnu reading of the
scale bytes as the divisor. (Not torch.exp2: on CUDA, exp2(-127) returns
5.87747035e-39 instead of 2^-127 = 5.87747175e-39, so dividing by it moves
ties in blocks whose scale byte is 0 up by one code.) The e8m0 reading is
itself checked against 2^(byte - 127) computed exactly in float64 on the
host. Prints a table; exits 1 on any byte that differs.

Usage: python3 mxfp8_torch_check.py DUMP_DIR
"""
import os
import sys

import torch


def main():
    d = sys.argv[1]
    rows, cols = (int(x) for x in open(os.path.join(d, "shape.txt")).read().split())
    raw = open(os.path.join(d, "in.bf16"), "rb").read()
    x = torch.frombuffer(bytearray(raw), dtype=torch.bfloat16).view(rows, cols).cuda()
    codes = torch.frombuffer(bytearray(open(os.path.join(d, "codes.u8"), "rb").read()),
                             dtype=torch.uint8).view(rows, cols).cuda()
    scales = torch.frombuffer(bytearray(open(os.path.join(d, "scales.u8"), "rb").read()),
                              dtype=torch.uint8).view(rows, cols // 32).cuda()
    xb = x.float().view(rows, cols // 32, 32)
    amax = xb.abs().amax(dim=-1).clamp(min=torch.finfo(torch.float32).tiny)
    biased = (torch.ceil(torch.log2(amax / torch.finfo(torch.float8_e4m3fn).max)) + 127.0)
    biased = biased.clamp(0, 254)
    want_scales = biased.to(torch.uint8)
    # torch's E8M0 reading of the bytes refit wrote is the descale vLLM uses.
    descale = scales.view(torch.float8_e8m0fnu).float()
    exact = torch.pow(torch.tensor(2.0, dtype=torch.float64),
                      want_scales.cpu().double() - 127.0).float().cuda()
    e8m0_ok = torch.equal(descale, exact)
    want_codes = (xb / descale.unsqueeze(-1)).view(rows, cols)
    want_codes = want_codes.to(torch.float8_e4m3fn).view(torch.uint8)
    bad_codes = int((want_codes != codes).sum())
    bad_scales = int((want_scales != scales).sum())
    print(f"{'check':<44}{'elements':>12}{'differ':>10}")
    print(f"{'mxfp8 codes vs torch float8_e4m3fn':<44}{rows * cols:>12}{bad_codes:>10}")
    print(f"{'mxfp8 scale bytes vs torch formula':<44}{rows * cols // 32:>12}{bad_scales:>10}")
    print(f"{'scale bytes read as float8_e8m0fnu':<44}{rows * cols // 32:>12}"
          f"{'0' if e8m0_ok else 'some':>10}")
    ok = bad_codes == 0 and bad_scales == 0 and e8m0_ok
    print("PASS mxfp8 vs torch" if ok else "FAIL mxfp8 vs torch")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
