"""The comparison in hf_conformance.py: equal where only transformers' own
conventions differ (stacked experts, tied lm_head, renamed prefix, scales it
does not build), a named mismatch for anything else.

Runs without torch: refit's side is `refit buffers --json` for embedded
models; transformers' side is made from it the way transformers >= 5 builds
those models (seen on a GPU host, see mapping/README.md).
"""

import collections
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_conformance as h  # noqa: E402

REFIT = None


def refit_tensors(model):
    out = subprocess.run([REFIT, "buffers", "--model", model, "--trainer", "fsdp:dp=1", "--json"],
                         check=True, capture_output=True, text=True).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        f.write(out)
    try:
        return h.load_refit(f.name)
    finally:
        os.unlink(f.name)


def as_transformers(ours, tied=False, prefix=None):
    """transformers >= 5's state_dict shapes for a checkpoint with these tensors."""
    hf = {k: s for k, (s, _) in ours.items() if not h.EXPERT.match(k) and not h.QUANT_SCALE.search(k)}
    experts = collections.defaultdict(list)
    for k, (s, _) in ours.items():
        m = h.EXPERT.match(k)
        if m and not h.QUANT_SCALE.search(k):
            experts[(m.group(1), m.group(3))].append(s)
    for (p, rest), shapes in experts.items():
        if rest == "gate_proj.weight":  # gate and up stacked together
            hf[p + ".gate_up_proj"] = (len(shapes), 2 * shapes[0][0], shapes[0][1])
        elif rest != "up_proj.weight" or (p, "gate_proj.weight") not in experts:
            hf[p + "." + rest[: -len(".weight")]] = (len(shapes),) + tuple(shapes[0])
    if tied:
        hf["lm_head.weight"] = hf["model.embed_tokens.weight"]
    if prefix:
        ckpt, tr = prefix
        hf = {(tr + k[len(ckpt):] if k.startswith(ckpt) else k): s for k, s in hf.items()}
    return hf


class CompareTest(unittest.TestCase):
    def test_stacked_experts_and_unbuilt_scales_are_explained(self):
        ours = refit_tensors("tiny-qwen3-moe-fp8")
        row, problems, explained = h.compare("m", dict(ours), as_transformers(ours), False)
        self.assertEqual(problems, [])
        self.assertEqual(row[2:], (0, 0, 0))
        self.assertTrue(any("expert groups stacked" in e for e in explained), explained)
        self.assertTrue(any("quantization scales" in e for e in explained), explained)

    def test_tied_lm_head_is_explained(self):
        ours = refit_tensors("tiny-qwen3")
        self.assertNotIn("lm_head.weight", ours)
        row, problems, explained = h.compare("m", dict(ours), as_transformers(ours, tied=True), True)
        self.assertEqual(problems, [])
        self.assertEqual(row[1], len(ours))

    def test_shape_difference_is_named(self):
        ours = refit_tensors("tiny-qwen3")
        hf = as_transformers(ours, tied=True)
        name = "model.layers.1.self_attn.k_proj.weight"
        hf[name] = (hf[name][0] + 1, hf[name][1])
        _, problems, _ = h.compare("m", dict(ours), hf, True)
        self.assertEqual(len(problems), 1)
        self.assertIn(name, problems[0])

    def test_missing_and_extra_tensors_are_named(self):
        ours = refit_tensors("tiny-llama")
        hf = as_transformers(ours)
        del hf["model.norm.weight"]
        hf["model.layers.0.mlp.extra.weight"] = (4,)
        _, problems, _ = h.compare("m", dict(ours), hf, False)
        self.assertIn("only in refit: model.norm.weight", " ".join(problems))
        self.assertIn("only in transformers: model.layers.0.mlp.extra.weight", " ".join(problems))

    def test_wrong_expert_count_is_a_mismatch(self):
        ours = refit_tensors("tiny-qwen3-moe")
        hf = as_transformers(ours)
        name = "model.layers.0.mlp.experts.down_proj"
        hf[name] = (hf[name][0] - 1,) + hf[name][1:]
        _, problems, _ = h.compare("m", dict(ours), hf, False)
        self.assertEqual(len(problems), 1)
        self.assertIn("model.layers.0.mlp.experts", problems[0])

    def test_renamed_prefix_compares_under_the_checkpoint_name(self):
        ours = refit_tensors("tiny-nemotron-h")
        hf = as_transformers(ours, prefix=h.CHECKPOINT_PREFIX["nemotron_h"])
        self.assertTrue(all(not k.startswith("backbone.") for k in hf))
        ckpt, tr = h.CHECKPOINT_PREFIX["nemotron_h"]
        hf = {(ckpt + k[len(tr):] if k.startswith(tr) else k): s for k, s in hf.items()}
        _, problems, _ = h.compare("m", dict(ours), hf, False)
        self.assertEqual(problems, [])


if __name__ == "__main__":
    REFIT = sys.argv.pop(1)
    unittest.main()
