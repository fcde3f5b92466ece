"""Proof of what landed: per-tensor SHA-256 of an engine rank's weights, in
the forms the engines' own checkers take.

* vLLM's weight checker (``POST /weight_checker`` with ``{"action":
  "checksum"}``, or ``"compare"`` with a ``baseline``): one SHA-256 of each
  tensor's raw bytes, keyed ``dp{d}:pp{p}:pcp{c}:tp{t}:ep{e}:{name}``
  (vllm-project/vllm, the worker's weight checksums module and the dev
  route read on 2026-12-06: ``_rank_prefix`` takes the EP rank only for MoE
  models, 0 otherwise). :func:`vllm_form`.
* SGLang's session line checks an update at ``end_weight_update`` against
  ``expected_base_weight_checksums``: per engine (DP replica), ``{str(tp_rank):
  {parameter name: SHA-256 of the tensor's raw bytes}}``; a mismatch fails the
  end and keeps the version unpublished (sgl-project/sglang session-line
  scheduler weight updater and its test of base-weight checksum
  verification, read on 2026-12-06). :func:`sglang_form`, one dict per
  replica.

Engine ranks are refit's: ``k = dp * TP + tp`` (mapping/engine_vllm.h), no
pipeline or context parallelism. An engine worker's own values come from
:func:`named_checksums` over its parameters (refit.vllm and refit.sglang
report them on demand); the expected values from a checkpoint come from
``refit simulate`` (the engine ranks' buffers, ``DIR/engine/rank<k>.
safetensors``) and :func:`from_simulation`::

    refit simulate --model=M --checkpoint=CKPT --trainer=fsdp:dp=1 \\
        --engine=vllm:tp=2 --out=/tmp/sim
    python -m refit.checksums /tmp/sim --convention=vllm:tp=2 --form=vllm
"""

import argparse
import ctypes
import hashlib
import json
import os
import re
import struct
import sys
from typing import Any, Dict, Iterable, List, Optional, Tuple

import refit
from refit import _buffers

__all__ = ["tensor_sha256", "named_checksums", "vllm_form", "sglang_form",
           "from_simulation", "mismatches", "main"]

PerRank = Dict[int, Dict[str, str]]


def _host(t: Any) -> Any:
    """``t`` on the host and contiguous (torch tensors on a GPU are copied)."""
    dev = getattr(getattr(t, "device", None), "type", "cpu")
    if dev != "cpu" and hasattr(t, "cpu"):
        t = t.detach().cpu()
    if hasattr(t, "is_contiguous") and not t.is_contiguous() and hasattr(t, "contiguous"):
        t = t.contiguous()
    return t


def tensor_sha256(t: Any) -> str:
    """The hex SHA-256 of ``t``'s raw bytes, row-major (a torch tensor on any
    device, a numpy array, a buffer). Raises InvalidArgumentError for an
    object refit cannot read as memory."""
    h = _host(t)
    if hasattr(h, "data_ptr") and hasattr(h, "element_size"):
        data = ctypes.string_at(h.data_ptr(), h.numel() * h.element_size())
    elif hasattr(h, "tobytes"):
        data = h.tobytes()
    else:
        ptr, n, _keep = _buffers.address("tensor", h, "cpu")
        data = ctypes.string_at(ptr, n)
    return hashlib.sha256(data).hexdigest()


def named_checksums(named: Iterable[Tuple[str, Any]]) -> Dict[str, str]:
    """{name: tensor_sha256} of (name, tensor) pairs, in order."""
    return {n: tensor_sha256(t) for n, t in named}


def _sizes(convention: str) -> Tuple[int, int, bool]:
    from refit.engine_worker import convention_params
    p = convention_params(convention)
    return int(p.get("tp", "1")), int(p.get("dp", "1")), "ep" in p


def vllm_form(per_rank: PerRank, convention: str, *, moe: Optional[bool] = None
              ) -> Dict[str, str]:
    """vLLM's weight-checker keys for refit's engine ranks ``per_rank``
    ({k: {name: sha}}) under ``convention`` ("vllm:tp=2,dp=2"): rank k is
    dp ``k // TP``, tp ``k % TP``; ep is the rank in vLLM's EP group (DP x TP,
    i.e. k) for a MoE model, else 0 (``moe``: default, the convention names
    ``ep``, or a tensor name holds ``.experts.``)."""
    tp, _, named_ep = _sizes(convention)
    if moe is None:
        moe = named_ep or any(".experts." in n for v in per_rank.values() for n in v)
    out = {}
    for k in sorted(per_rank):
        prefix = f"dp{k // tp}:pp0:pcp0:tp{k % tp}:ep{k if moe else 0}:"
        for name, sha in per_rank[k].items():
            out[prefix + name] = sha
    return out


def sglang_form(per_rank: PerRank, convention: str) -> List[Dict[str, Dict[str, str]]]:
    """SGLang's ``expected_base_weight_checksums``, one per DP replica (in
    replica order): ``{str(tp_rank): {name: sha}}`` for refit's engine ranks
    ``per_rank`` under ``convention`` ("sglang:tp=2,dp=2")."""
    tp, dp, _ = _sizes(convention)
    out: List[Dict[str, Dict[str, str]]] = [{} for _ in range(dp)]
    for k, sums in sorted(per_rank.items()):
        if not 0 <= k // tp < dp:
            raise refit.InvalidArgumentError(f"engine rank {k} is outside {convention}")
        out[k // tp][str(k % tp)] = dict(sums)
    return out


def _safetensors(path: str) -> Dict[str, bytes]:
    """{name: raw bytes} of a safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise refit.InvalidArgumentError(f"{path}: not a safetensors file")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise refit.InvalidArgumentError(f"{path}: header runs past the end of the file")
    header = json.loads(blob[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        if not 0 <= begin <= end <= len(blob) - base:
            raise refit.InvalidArgumentError(f"{path}: tensor {name} lies outside the file")
        out[name] = blob[base + begin:base + end]
    return out


def from_simulation(out_dir: str) -> PerRank:
    """{engine rank: {name: sha}} of ``refit simulate``'s engine ranks
    (``out_dir/engine/rank<k>.safetensors``): the bytes a refit of that
    checkpoint leaves in each engine rank. Raises NotFoundError when there
    is no engine rank there, InvalidArgumentError for a malformed file."""
    d = os.path.join(out_dir, "engine")
    ranks = {}
    for f in os.listdir(d) if os.path.isdir(d) else []:
        m = re.fullmatch(r"rank(\d+)\.safetensors", f)
        if m:
            ranks[int(m.group(1))] = {n: hashlib.sha256(b).hexdigest()
                                      for n, b in _safetensors(os.path.join(d, f)).items()}
    if not ranks:
        raise refit.NotFoundError(f"{d}: no engine rank<k>.safetensors (run refit simulate "
                                  f"with --out={out_dir})")
    return ranks


def mismatches(expected: Dict[str, str], actual: Dict[str, str]) -> List[str]:
    """The keys of ``expected`` that ``actual`` lacks or holds with another
    digest, sorted (keys only ``actual`` has are not counted: an engine
    checker also hashes buffers refit does not move)."""
    return sorted(k for k, v in expected.items() if actual.get(k) != v)


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m refit.checksums DIR --convention=C --form=vllm|sglang``:
    prints the expected checksums of ``refit simulate``'s output DIR as
    JSON."""
    ap = argparse.ArgumentParser(prog="python -m refit.checksums", description=main.__doc__)
    ap.add_argument("simulation", help="refit simulate's --out directory")
    ap.add_argument("--convention", required=True, help='engine convention, "vllm:tp=2"')
    ap.add_argument("--form", choices=("vllm", "sglang"), required=True)
    args = ap.parse_args(argv)
    try:
        per_rank = from_simulation(args.simulation)
        form = (vllm_form(per_rank, args.convention) if args.form == "vllm"
                else sglang_form(per_rank, args.convention))
    except (refit.RefitError, OSError, ValueError) as e:
        print(f"refit.checksums: {e}", file=sys.stderr)
        return 1
    json.dump(form, sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
