"""refit.torch on stand-in torch modules: wrapper prefixes stripped, FSDP2
DTensor local shards found, Megatron names taken as they are, and every
mismatch with the convention reported naming the rank and the parameter.

  refit_torch_test.py LIBREFIT_CLIENT_SO
"""
import os
import sys
import unittest

LIB = os.path.abspath(sys.argv[1])
del sys.argv[1:2]
os.environ["REFIT_CLIENT_LIB"] = LIB
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import refit  # noqa: E402
import refit.torch as rt  # noqa: E402
import standin_torch as st  # noqa: E402

MODEL = "tiny-qwen3"
FSDP = "fsdp:dp=2"
MEGATRON = "megatron:tp=1,pp=1,dp=1"


def specs(convention, rank=0, side="trainer"):
    return refit.expected_buffers(side=side, rank=rank, model=MODEL, convention=convention)


class StripTest(unittest.TestCase):
    def test_strips_wrappers_anywhere_and_leading_module(self):
        cases = {
            "module.model.norm.weight": "model.norm.weight",
            "module.module.decoder.layers.0.mlp.linear_fc1.weight":
                "decoder.layers.0.mlp.linear_fc1.weight",
            "_orig_mod.model.layers.1._fsdp_wrapped_module.self_attn.q_proj.weight":
                "model.layers.1.self_attn.q_proj.weight",
            "model.layers.0._checkpoint_wrapped_module.mlp.up_proj.weight":
                "model.layers.0.mlp.up_proj.weight",
            "_forward_module.module.model.embed_tokens.weight": "model.embed_tokens.weight",
            "model.norm.weight": "model.norm.weight",
        }
        for raw, want in cases.items():
            self.assertEqual(rt.strip_wrapper_prefixes(raw), want, raw)

    def test_keeps_module_inside_a_name(self):
        self.assertEqual(rt.strip_wrapper_prefixes("model.module.weight"),
                         "model.module.weight")


class ModuleBuffersTest(unittest.TestCase):
    def test_fsdp2_dtensors_under_wrappers_give_their_local_shards(self):
        for rank in (0, 1):
            want = specs(FSDP, rank)
            module, local = st.module_from_specs(
                want, wrap=lambda n: "_orig_mod." + n.replace(
                    "layers.1.", "layers.1._fsdp_wrapped_module."), dtensor_world=2)
            got = rt.module_buffers(module, rank=rank, model=MODEL, convention=FSDP)
            self.assertEqual(sorted(got), sorted(b.name for b in want))
            for name, t in got.items():
                self.assertIs(t, local[name], name)

    def test_megatron_names_under_ddp_and_float16_module(self):
        want = specs(MEGATRON)
        module, local = st.module_from_specs(want, wrap=lambda n: "module.module." + n)
        got = rt.module_buffers(module, rank=0, model=MODEL, convention=MEGATRON)
        self.assertEqual(set(got), set(local))

    def test_shard_on_another_dimension_names_the_parameter(self):
        want = specs(FSDP)
        module, _ = st.module_from_specs(want, dtensor_world=2)
        name, p = module._params[2]
        p.placements = (st.Shard(1),)
        with self.assertRaises(refit.RefitError) as e:
            rt.module_buffers(module, rank=0, model=MODEL, convention=FSDP)
        self.assertEqual(e.exception.code_name, "INVALID_ARGUMENT")
        self.assertIn(f"rank 0: parameter {name}: placement Shard(1)", str(e.exception))

    def test_partial_placement_is_refused(self):
        want = specs(FSDP)
        module, _ = st.module_from_specs(want, dtensor_world=2)
        name, p = module._params[0]
        p.placements = (st.Replicate(), st.Partial())
        with self.assertRaisesRegex(refit.RefitError, f"parameter {name}: placement Partial"):
            rt.module_buffers(module, rank=0, model=MODEL, convention=FSDP)

    def test_hsdp_replicate_then_shard_is_accepted(self):
        want = specs(FSDP)
        module, _ = st.module_from_specs(want, dtensor_world=2)
        for _, p in module._params:
            p.placements = (st.Replicate(), st.Shard(0))
        self.assertEqual(len(rt.module_buffers(module, rank=0, model=MODEL,
                                               convention=FSDP)), len(want))

    def test_every_mismatch_is_listed_with_rank_and_parameter(self):
        want = specs(FSDP, rank=1)
        module, _ = st.module_from_specs(want, wrap=lambda n: "module." + n)
        dropped = module._params.pop(0)[0][len("module."):]
        bad_shape = module._params[0][0][len("module."):]
        module._params[0] = (module._params[0][0], st.Tensor([3, 3]))
        bad_dtype = module._params[1][0][len("module."):]
        module._params[1] = (module._params[1][0],
                             st.Tensor(want[2].shape, st.float32))
        strided = module._params[2][0][len("module."):]
        module._params[2] = (module._params[2][0],
                             st.Tensor(want[3].shape, contiguous=False))
        module._params.append(("module.value_head.weight", st.Tensor([1, 16])))
        with self.assertRaises(refit.RefitError) as e:
            rt.module_buffers(module, rank=1, model=MODEL, convention=FSDP)
        msg = str(e.exception)
        self.assertIn(f"rank 1: parameter {dropped}: convention {FSDP} expects it", msg)
        self.assertIn(f"rank 1: parameter {bad_shape} (module name module.{bad_shape}): "
                      f"local shape [3, 3], the convention expects", msg)
        self.assertIn(f"parameter {bad_dtype} (module name module.{bad_dtype}): dtype f32, "
                      f"the convention expects bf16", msg)
        self.assertIn(f"parameter {strided} (module name module.{strided}): the local "
                      f"tensor is not contiguous", msg)
        self.assertIn("rank 1: parameter value_head.weight (module name "
                      "module.value_head.weight): not a buffer of convention", msg)

    def test_unknown_parameters_can_be_ignored_or_renamed(self):
        want = specs(FSDP)
        module, _ = st.module_from_specs(want)
        module._params.append(("value_head.weight", st.Tensor([1, 16])))
        module._params.append(("model.extra.weight", st.Tensor([2])))
        got = rt.module_buffers(module, rank=0, model=MODEL, convention=FSDP,
                                ignore=["value_head.weight"],
                                rename=lambda n: None if n.startswith("model.extra") else n)
        self.assertEqual(len(got), len(want))
        self.assertEqual(len(rt.module_buffers(module, rank=0, model=MODEL, convention=FSDP,
                                               ignore_unknown=True)), len(want))

    def test_tied_parameter_under_two_names_counts_once(self):
        want = specs(FSDP)
        module, local = st.module_from_specs(want)
        module._params.append(("model.embed_tokens_alias.weight",
                               local["model.embed_tokens.weight"]))
        got = rt.module_buffers(module, rank=0, model=MODEL, convention=FSDP,
                                rename={"model.embed_tokens_alias.weight":
                                        "model.embed_tokens.weight"})
        self.assertIs(got["model.embed_tokens.weight"], local["model.embed_tokens.weight"])

    def test_tied_alias_unknown_to_the_convention_is_skipped(self):
        want = specs(FSDP)
        module, local = st.module_from_specs(want)
        tied = local["model.embed_tokens.weight"]
        module._params.insert(0, ("lm_head.weight", tied))  # before its tensor's name
        got = rt.module_buffers(module, rank=0, model=MODEL, convention=FSDP)
        self.assertNotIn("lm_head.weight", got)
        self.assertIs(got["model.embed_tokens.weight"], tied)

    def test_two_tensors_for_one_buffer_are_refused(self):
        want = specs(FSDP)
        module, _ = st.module_from_specs(want)
        module._params.append(("module.model.norm.weight", st.Tensor([8])))
        with self.assertRaisesRegex(refit.RefitError, "parameter model.norm.weight: both "
                                    "model.norm.weight and module.model.norm.weight"):
            rt.module_buffers(module, rank=0, model=MODEL, convention=FSDP)

    def test_rank_outside_world_is_refused_before_refitd(self):
        with self.assertRaisesRegex(refit.RefitError, "rank 2: outside the world of 2"):
            rt.wait_all_ranks_ready(None, version=1, rank=2, world=2)


if __name__ == "__main__":
    unittest.main()
