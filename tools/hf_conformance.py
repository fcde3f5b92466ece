#!/usr/bin/env python3
"""Checks refit's logical (HF-named) tensor tables against Hugging Face transformers.

refit names every logical tensor the way the model's HF checkpoint does, and
the FSDP trainer convention at dp=1 registers each one whole. This script
builds each model from the same config.json with transformers on the meta
device (no memory, no GPU, no weights) and compares, tensor by tensor, the
names and global shapes refit expects with the ones transformers creates.

Inputs come from `tools/hf_conformance DIR` (run where refit is built): for
each model, DIR/NAME.config.json (the embedded config) and DIR/NAME.refit.json
(`refit buffers --model NAME --trainer fsdp:dp=1 --json`). Run this where
torch and transformers are installed:

    python3 tools/hf_conformance.py DIR

Differences that come from transformers, not from checkpoints, are reported
as explained, never hidden:
  - a tied lm_head.weight (checkpoints omit it; transformers' state_dict
    lists the shared tensor again);
  - experts that transformers >= 5 keeps stacked in one tensor per projection
    (checkpoints, and refit, name each expert's weight): compared by the
    number of experts and total elements per layer;
  - a top-level prefix transformers renames on load (CHECKPOINT_PREFIX
    below: NemotronH checkpoints name their trunk `backbone.`, transformers
    >= 5 calls it `model.`; vLLM maps backbone -> model the same way);
  - FP8 block scales and attention q/k/v scales, which transformers creates
    only when it loads a quantized checkpoint: block scales are compared when
    its FP8 integration applies on the meta device; per-tensor FP8 scales
    (no weight_block_size: vLLM's `weight_scale`) and q/k/v scales are
    listed, not compared.
Anything else that differs is a mismatch. Exit status: 0 when no model has a
mismatch, 1 otherwise, 2 on bad usage.
"""

import collections
import glob
import json
import os
import re
import sys
import traceback

# model_type -> (checkpoint prefix, transformers prefix).
CHECKPOINT_PREFIX = {"nemotron_h": ("backbone.", "model.")}

EXPERT = re.compile(r"^(.*\.experts)\.(\d+)\.(.*)$")
STACKED_EXPERT = re.compile(r"^(.*\.experts)\.([^.]+)$")
QUANT_SCALE = re.compile(r"\.(weight_scale_inv|weight_scale|input_scale|[qkv]_scale)$")


def numel(shape):
    n = 1
    for d in shape:
        n *= int(d)
    return n


def load_refit(path):
    members = json.load(open(path))
    if len(members) != 1:
        raise ValueError(f"{path}: expected one rank (fsdp:dp=1), got {len(members)}")
    return {b["name"]: (tuple(b["shape"]), b["dtype"]) for b in members[0]["buffers"]}


def build_hf(config_path, log):
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = json.load(open(config_path))
    model_type = cfg.pop("model_type")
    cfg.pop("architectures", None)
    quant = cfg.get("quantization_config")
    try:
        config = AutoConfig.for_model(model_type, **cfg)
    except (ValueError, KeyError) as e:
        # Kimi-K2 ships DeepseekV3ForCausalLM code under its own model_type.
        if model_type == "kimi_k2":
            log.append("transformers has no kimi_k2; built as deepseek_v3 (Kimi-K2's own modeling code is DeepSeek-V3's)")
            config = AutoConfig.for_model("deepseek_v3", **cfg)
        else:
            raise RuntimeError(f"transformers {transformers.__version__} has no model_type {model_type!r}: {e}")
    if quant is not None and hasattr(config, "quantization_config"):
        # from_config does not quantize; keep the plain model and add scales below.
        try:
            delattr(config, "quantization_config")
        except AttributeError:
            pass
    with torch.device("meta"):
        try:
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        except TypeError:
            model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
    if quant is not None and quant.get("quant_method") == "fp8" and quant.get("weight_block_size"):
        try:
            from transformers import FineGrainedFP8Config
            from transformers.integrations import finegrained_fp8 as fp8
            qc = FineGrainedFP8Config(weight_block_size=quant.get("weight_block_size"),
                                      modules_to_not_convert=quant.get("modules_to_not_convert"))
            with torch.device("meta"):
                model = fp8.replace_with_fp8_linear(model, quantization_config=qc,
                                                    modules_to_not_convert=qc.modules_to_not_convert or ["lm_head"])
            log.append("FP8 block scales from transformers' finegrained_fp8 integration")
        except Exception as e:  # the integration's API moves between versions
            log.append(f"FP8 scales not built by transformers ({type(e).__name__}: {e}); listed, not compared")
    tied = bool(getattr(config, "tie_word_embeddings", False))
    state = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if model_type in CHECKPOINT_PREFIX:
        ckpt, hf = CHECKPOINT_PREFIX[model_type]
        renamed = {}
        for k, v in state.items():
            renamed[ckpt + k[len(hf):] if k.startswith(hf) else k] = v
        log.append(f"transformers' {hf}* compared as the checkpoint's {ckpt}*")
        try:  # what transformers itself declares, when its version exposes it
            from transformers import conversion_mapping
            rules = conversion_mapping.get_checkpoint_conversion_mapping(model_type)
            said = [repr(r) for r in (rules or []) if ckpt.rstrip(".") in repr(r)]
            log.append("transformers' own rename: " + ("; ".join(said)[:300] or "none listed"))
        except Exception as e:
            log.append(f"transformers' rename table not readable ({type(e).__name__})")
        state = renamed
    return state, tied


def compare(name, ours, hf, tied):
    """Returns (row, problems, explained)."""
    problems, explained = [], []
    if tied and "lm_head.weight" in hf and "lm_head.weight" not in ours:
        del hf["lm_head.weight"]
        explained.append("tied lm_head.weight (the checkpoint omits it)")

    # Experts: per-expert names on refit's side; per-expert or stacked on transformers'.
    # Per-expert quantization scales count only where transformers built
    # scales for that expert group too.
    hf_scaled = {m.group(1) for m in map(STACKED_EXPERT.match, hf) if m and "scale" in m.group(2)}
    ours_experts = collections.defaultdict(lambda: [set(), 0])
    for k, (shape, _) in ours.items():
        m = EXPERT.match(k)
        if m:
            ours_experts[m.group(1)][0].add(int(m.group(2)))
            if m.group(1) in hf_scaled or not QUANT_SCALE.search(k):
                ours_experts[m.group(1)][1] += numel(shape)
    hf_stacked = collections.defaultdict(lambda: [0, []])
    for k in list(hf):
        m = STACKED_EXPERT.match(k)
        if m and m.group(1) in ours_experts and len(hf[k]) == 3:
            hf_stacked[m.group(1)][0] += numel(hf[k])
            hf_stacked[m.group(1)][1].append(hf[k][0])
            del hf[k]
    for prefix, (total, lead) in hf_stacked.items():
        experts, ours_total = ours_experts[prefix]
        for k in [k for k in ours if k.startswith(prefix + ".")]:
            if prefix not in hf_scaled and QUANT_SCALE.search(k):
                continue  # left for the unbuilt-scales count below
            del ours[k]
        if total != ours_total or any(e != len(experts) for e in lead):
            problems.append(f"{prefix}: refit {len(experts)} experts, {ours_total} elements; "
                            f"transformers stacked {lead} experts, {total} elements")
    if hf_stacked:
        explained.append(f"{len(hf_stacked)} expert groups stacked by transformers: expert count and elements equal")

    scales_only_ours = sorted(k for k in ours if k not in hf and QUANT_SCALE.search(k))
    if scales_only_ours:
        explained.append(f"{len(scales_only_ours)} quantization scales transformers does not build "
                         f"(e.g. {scales_only_ours[0]})")
        for k in scales_only_ours:
            del ours[k]

    matched = shape_diff = 0
    for k, (shape, _) in ours.items():
        if k in hf:
            if tuple(hf[k]) == tuple(shape):
                matched += 1
            else:
                shape_diff += 1
                problems.append(f"{k}: refit {list(shape)}, transformers {list(hf[k])}")
    only_ours = sorted(k for k in ours if k not in hf)
    only_hf = sorted(k for k in hf if k not in ours)
    for k in only_ours[:8]:
        problems.append(f"only in refit: {k} {list(ours[k][0])}")
    for k in only_hf[:8]:
        problems.append(f"only in transformers: {k} {list(hf[k])}")
    if len(only_ours) > 8 or len(only_hf) > 8:
        problems.append(f"({len(only_ours)} only in refit, {len(only_hf)} only in transformers in all)")
    row = (name, matched, shape_diff, len(only_ours), len(only_hf))
    return row, problems, explained


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 2
    import torch
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    rows, failed = [], False
    for refit_path in sorted(glob.glob(os.path.join(argv[1], "*.refit.json"))):
        name = os.path.basename(refit_path)[: -len(".refit.json")]
        config_path = os.path.join(argv[1], name + ".config.json")
        log = []
        try:
            ours = load_refit(refit_path)
            hf, tied = build_hf(config_path, log)
        except Exception as e:
            print(f"\n{name}: could not build with transformers: {type(e).__name__}: {e}")
            traceback.print_exc(limit=2)
            rows.append((name, "-", "-", "-", "-", "not built"))
            continue
        n_ours = len(ours)
        row, problems, explained = compare(name, dict(ours), dict(hf), tied)
        print(f"\n{name}: refit {n_ours} tensors, transformers {len(hf)}")
        for line in log + explained:
            print(f"  explained: {line}")
        for line in problems:
            print(f"  MISMATCH: {line}")
        failed = failed or bool(problems)
        rows.append(row + ("equal" if not problems else "DIFFERS",))
    print("\n| model | names and shapes equal | shape differs | only refit | only transformers | verdict |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")
    not_built = [r[0] for r in rows if r[-1] == "not built"]
    if not_built:
        print(f"not built by this transformers: {', '.join(not_built)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
