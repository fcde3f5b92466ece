"""DeepGEMM's SM100 packed UE8M0 weight scales: refit's kernel against torch.

Usage: deepgemm_sm100_check.py DUMP_DIR (written by deepgemm_sm100_gpu_test
with REFIT_DEEPGEMM_SM100_DUMP=DUMP_DIR). For each case the tile scales go
through the torch statement of the conversion DeepGEMM applies on SM100
(transform_sf_into_required_layout with recipe (1, 128, 128): the
index_select of row // 128, then get_mn_major_tma_aligned_packed_ue8m0_tensor_torch;
deepseek-ai/DeepGEMM csrc/apis/layout.hpp and csrc/jit_kernels/impls/
smxx_layout.hpp at 0274ad7, as vLLM's deepgemm_post_process_fp8_weight_block
calls it, fp8_utils.py at 364d019), written here from that reading; the
int32 storage (MN-major, TMA-aligned rows included) must equal the kernel's
bytes. Prints PASS/FAIL per case; exit status 1 on any FAIL.
"""
import glob
import os
import sys

import torch


def deepgemm_sm100_scales(tiles: torch.Tensor, n: int) -> torch.Tensor:
    """[E, ceil(n/128), sf_k] f32 -> int32 [E, ceil(sf_k/4), align(n, 4)] in
    storage order (the MN-major tensor's memory)."""
    e, _, sf_k = tiles.shape
    rows = torch.arange(n, device=tiles.device).floor_divide(128)
    sf = tiles.index_select(-2, rows)                       # [E, n, sf_k]
    ue8m0 = sf.view(torch.int32).bitwise_right_shift(23).to(torch.uint8)
    aligned_mn = (n + 3) // 4 * 4                           # get_tma_aligned_size(n, 4)
    aligned_k = (sf_k + 3) // 4 * 4
    padded = torch.zeros((e, aligned_mn, aligned_k), dtype=torch.uint8, device=tiles.device)
    padded[:, :n, :sf_k].copy_(ue8m0)
    padded = padded.view(-1).view(torch.int32).view(e, aligned_mn, aligned_k // 4)
    out = torch.empty_strided((e, aligned_mn, aligned_k // 4),
                              (aligned_mn * (aligned_k // 4), 1, aligned_mn),
                              dtype=torch.int32, device=tiles.device)
    out.copy_(padded)
    return out.permute(0, 2, 1).contiguous()                # its storage order


def load(path: str, dtype: torch.dtype) -> torch.Tensor:
    with open(path, "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=dtype)


def main() -> int:
    d = sys.argv[1]
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    cases = sorted(glob.glob(os.path.join(d, "case_*.txt")))
    if not cases:
        print(f"FAIL  no cases in {d}")
        return 1
    ok = True
    for txt in cases:
        base = txt[:-4]
        e, n, k = (int(x) for x in open(txt).read().split())
        sf_k = (k + 127) // 128
        tiles = load(base + ".f32", torch.float32).to(dev).view(e, (n + 127) // 128, sf_k)
        got = load(base + ".i32", torch.int32).to(dev)
        want = deepgemm_sm100_scales(tiles, n).reshape(-1)
        same = got.numel() == want.numel() and torch.equal(got, want)
        differ = (got != want).sum().item() if got.numel() == want.numel() else -1
        ok &= same
        print(f"{'PASS' if same else 'FAIL'}  {e} x [{n}, {k}]: {want.numel()} int32, "
              f"{differ} differ from DeepGEMM's torch statement ({dev})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
